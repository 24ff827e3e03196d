"""Qwen3, the third family: parity with transformers' Qwen3ForCausalLM at random weights in both
backends (small configs built here, no downloads), the QK-norm it adds, and what it costs: a config
and two gains per layer, on the Llama-style steps and the shared bases."""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest
from test_llama import make_hf

import kvtutor
from kvtutor.models import qwen3, torch_qwen3
from kvtutor.models.llama import LlamaConfig, LlamaModel
from kvtutor.models.qwen3 import Qwen3Config, Qwen3Model

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

IDS = [5, 17, 3, 60, 0, 42, 8, 8, 21, 33, 2]
TOL = dict(rtol=1e-4, atol=1e-4)  # the Llama parity tests' bound (float32 on both sides)

# untied GQA whose head width 6 is not d_model / n_heads (32 / 4), and a tied MQA one
HF_CONFIGS = {
    "gqa-untied": dict(hidden_size=32, head_dim=6, intermediate_size=40, num_hidden_layers=3,
                       num_attention_heads=4, num_key_value_heads=2, rope_theta=100.0, rms_norm_eps=1e-5),
    "mqa-tied": dict(hidden_size=24, head_dim=6, intermediate_size=24, num_hidden_layers=2,
                     num_attention_heads=3, num_key_value_heads=1, tie_word_embeddings=True),
}  # fmt: skip


@pytest.fixture(scope="module", params=sorted(HF_CONFIGS))
def hf_and_ours(request):
    hf = make_hf("Qwen3", **HF_CONFIGS[request.param])
    sd, cfg = hf.state_dict(), hf.config.to_dict()
    return hf, Qwen3Model.from_state_dict(sd, cfg), kvtutor.TorchQwen3Model.from_state_dict(sd, cfg, "cpu")


def hf_run(hf, ids):
    with torch.no_grad():
        out = hf(torch.tensor([ids]), use_cache=True)
    return out.logits[0].numpy(), out.past_key_values


def test_config_is_read_from_config_json(hf_and_ours):
    hf, ours, _ = hf_and_ours
    c = hf.config
    assert ours.config == Qwen3Config(
        vocab_size=61, d_model=c.hidden_size, n_heads=c.num_attention_heads, n_layers=c.num_hidden_layers,
        max_seq_len=40, d_ff=c.intermediate_size, n_kv_heads=c.num_key_value_heads, d_head=c.head_dim,
        rope_theta=c.rope_parameters["rope_theta"], rms_norm_eps=c.rms_norm_eps,
        tie_word_embeddings=c.tie_word_embeddings,
    )  # fmt: skip
    assert ours.config.qk_norm and ours.config.d_head * ours.config.n_heads != ours.config.d_model
    assert ours.n_params == ours.config.n_params == sum(p.numel() for p in hf.parameters())


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_same_logits_as_transformers_cached_and_not(hf_and_ours, backend):
    hf, numpy_model, torch_model = hf_and_ours
    ref, _ = hf_run(hf, IDS)
    if backend == "numpy":
        model, as_np = numpy_model, np.asarray
        run = model.logits_without_cache
    else:
        model, as_np = torch_model, lambda t: t.numpy()
        run = lambda ids: model.logits_without_cache([ids])[0]  # noqa: E731
    np.testing.assert_allclose(as_np(run(IDS)), ref, **TOL)
    cache = model.new_cache()
    if backend == "numpy":
        np.testing.assert_allclose(model.prefill(IDS[:4], cache), ref[:4], **TOL)
        steps = [model.decode_step(t, cache) for t in IDS[4:]]
    else:
        np.testing.assert_allclose(as_np(model.prefill([IDS[:4]], cache)[0]), ref[:4], **TOL)
        steps = [as_np(model.decode_step([t], cache)[0]) for t in IDS[4:]]
    np.testing.assert_allclose(np.stack(steps), ref[4:], **TOL)


def test_the_cache_holds_normalised_then_rotated_keys_as_transformers_caches(hf_and_ours):
    hf, ours, torch_model = hf_and_ours
    _, past = hf_run(hf, IDS)
    cache, tcache = ours.new_cache(), torch_model.new_cache()
    ours.prefill(IDS, cache)
    torch_model.prefill([IDS], tcache)
    for layer in range(ours.config.n_layers):
        hf_k, hf_v = past.layers[layer].keys[0].numpy(), past.layers[layer].values[0].numpy()
        np.testing.assert_allclose(cache.keys(layer), hf_k, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(cache.values(layer), hf_v, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(tcache.keys(layer)[0].numpy(), hf_k, rtol=1e-4, atol=1e-5)


def test_same_greedy_tokens_as_transformers(hf_and_ours):
    hf, ours, torch_model = hf_and_ours
    with torch.no_grad():
        out = hf.generate(torch.tensor([IDS[:3]]), max_new_tokens=12, do_sample=False, pad_token_id=0)
    want = out[0, 3:].tolist()
    assert ours.generate(IDS[:3], 12) == want
    assert torch_model.generate([IDS[:3]], 12)[0].tolist() == want


def test_qk_norm_is_the_one_step_qwen3_adds(hf_and_ours):
    """Without its two gains per layer a Qwen3 model is a Llama model of the same sizes, on the
    same weights; with them (q and k normalised per head before RoPE) the logits differ."""
    _, ours, _ = hf_and_ours
    cfg = ours.config
    layer = ours.weights.layers[0]
    assert layer.q_norm_K.shape == layer.k_norm_K.shape == (cfg.d_head,)
    sizes = {f: getattr(cfg, f) for f in cfg.__dataclass_fields__ if f != "qk_norm"}
    bare = [dataclasses.replace(ly, q_norm_K=None, k_norm_K=None) for ly in ours.weights.layers]
    plain = LlamaModel(LlamaConfig(**sizes), dataclasses.replace(ours.weights, layers=bare))
    assert np.abs(plain.logits_without_cache(IDS) - ours.logits_without_cache(IDS)).max() > 1e-2


def test_state_dicts_round_trip_and_configs_are_refused_by_key(hf_and_ours):
    hf, ours, torch_model = hf_and_ours
    want = ours.logits_without_cache(IDS)
    again = Qwen3Model.from_state_dict(ours.to_state_dict(), ours.config)
    np.testing.assert_array_equal(again.logits_without_cache(IDS), want)
    sd = {k: v.numpy() for k, v in torch_model.to_state_dict().items()}
    assert sorted(sd) == sorted(hf.state_dict())
    back = Qwen3Model.from_state_dict(sd, ours.config)
    np.testing.assert_allclose(back.logits_without_cache(IDS), want, rtol=1e-6, atol=1e-6)
    cfg = hf.config.to_dict()
    llama_cfg = transformers.LlamaConfig(vocab_size=61, hidden_size=32, num_attention_heads=4).to_dict()
    with pytest.raises(ValueError, match=r"^config\['model_type'\]: expected 'qwen3', got 'llama'"):
        Qwen3Model.from_state_dict(hf.state_dict(), llama_cfg)
    with pytest.raises(ValueError, match=r"^config\['model_type'\]: expected 'llama', got 'qwen3'"):
        LlamaModel.from_state_dict(hf.state_dict(), cfg)
    no_norm = {k: v for k, v in hf.state_dict().items() if "k_norm" not in k}
    with pytest.raises(ValueError, match=r"^state_dict: missing key 'layers.0.self_attn.k_norm.weight'"):
        Qwen3Model.from_state_dict(no_norm, cfg)
    with pytest.raises(ValueError, match=r"^qk_norm: expected True"):
        Qwen3Config(vocab_size=8, d_model=8, n_heads=2, n_layers=1, max_seq_len=8, d_ff=8, qk_norm=False)
    with pytest.raises(TypeError, match=r"^numpy_model: expected a kvtutor.Qwen3Model, got LlamaModel"):
        kvtutor.TorchQwen3Model.from_numpy(plain_llama())


def plain_llama() -> LlamaModel:
    return LlamaModel.random(
        LlamaConfig(vocab_size=8, d_model=8, n_heads=2, n_layers=1, max_seq_len=8, d_ff=8)
    )


def test_the_family_costs_a_few_lines():
    """Qwen3 in both backends is its config and its classes: every method comes from a base."""
    n_lines = sum(len(inspect.getsource(m).splitlines()) for m in (qwen3, torch_qwen3))
    assert n_lines < 250, n_lines
    for cls in (Qwen3Model, kvtutor.TorchQwen3Model):
        own = [n for n, v in vars(cls).items() if inspect.isfunction(v) or isinstance(v, classmethod)]
        assert not own, (cls, own)
