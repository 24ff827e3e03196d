"""Parity with a real implementation: transformers' GPT-2 built from a small random config."""

from __future__ import annotations

import numpy as np
import pytest

import kvtutor

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def hf_and_ours(random_hf_gpt2):
    hf = random_hf_gpt2
    return hf, kvtutor.GPT2Model.from_gpt2_state_dict(hf.state_dict(), n_heads=4)


IDS = [5, 17, 3, 60, 0, 42, 8, 8, 21]


def test_config_inferred_from_shapes(hf_and_ours):
    _, ours = hf_and_ours
    assert ours.config == kvtutor.GPT2Config(vocab_size=61, d_model=24, n_heads=4, n_layers=3, max_seq_len=40)


def test_same_logits_as_transformers(hf_and_ours):
    hf, ours = hf_and_ours
    with torch.no_grad():
        ref = hf(torch.tensor([IDS])).logits[0].numpy()
    np.testing.assert_allclose(ours.logits_without_cache(IDS), ref, rtol=1e-4, atol=1e-4)
    cache = ours.new_cache()
    np.testing.assert_allclose(ours.prefill(IDS[:4], cache), ref[:4], rtol=1e-4, atol=1e-4)
    for i, t in enumerate(IDS[4:], start=4):
        np.testing.assert_allclose(ours.decode_step(t, cache), ref[i], rtol=1e-4, atol=1e-4)


def test_same_cache_contents_as_transformers(hf_and_ours):
    hf, ours = hf_and_ours
    with torch.no_grad():
        past = hf(torch.tensor([IDS]), use_cache=True).past_key_values
    cache = ours.new_cache()
    ours.prefill(IDS[:5], cache)
    for t in IDS[5:]:
        ours.decode_step(t, cache)
    for layer in range(3):
        hf_k, hf_v = past.layers[layer].keys[0].numpy(), past.layers[layer].values[0].numpy()  # [H, S, K]
        np.testing.assert_allclose(cache.keys(layer), hf_k, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(cache.values(layer), hf_v, rtol=1e-4, atol=1e-5)


def test_same_greedy_tokens_as_transformers(hf_and_ours):
    hf, ours = hf_and_ours
    with torch.no_grad():
        out = hf.generate(torch.tensor([IDS[:3]]), max_new_tokens=12, do_sample=False, pad_token_id=0)
    assert ours.generate(IDS[:3], 12) == out[0, 3:].tolist()


def test_state_dict_variants_load_the_same_model(hf_and_ours):
    hf, ours = hf_and_ours
    sd = hf.state_dict()
    bare = {k.removeprefix("transformer."): v.numpy() for k, v in sd.items() if k != "lm_head.weight"}
    other = kvtutor.GPT2Model.from_gpt2_state_dict(bare, n_heads=4)
    np.testing.assert_array_equal(other.logits_without_cache(IDS), ours.logits_without_cache(IDS))
    round_trip = kvtutor.GPT2Model.from_gpt2_state_dict(ours.to_gpt2_state_dict(), n_heads=4)
    np.testing.assert_array_equal(round_trip.logits_without_cache(IDS), ours.logits_without_cache(IDS))


def _sd(hf_and_ours):
    return {k: v.numpy() for k, v in hf_and_ours[0].state_dict().items()}


def test_missing_key_is_named(hf_and_ours):
    sd = _sd(hf_and_ours)
    del sd["transformer.h.1.mlp.c_fc.bias"]
    with pytest.raises(ValueError, match="state_dict: missing key 'h.1.mlp.c_fc.bias'"):
        kvtutor.GPT2Model.from_gpt2_state_dict(sd, n_heads=4)


def test_unexpected_key_is_named(hf_and_ours):
    sd = _sd(hf_and_ours) | {"transformer.h.0.attn.rotary.weight": np.zeros(3)}
    with pytest.raises(ValueError, match="state_dict: unexpected key 'h.0.attn.rotary.weight'"):
        kvtutor.GPT2Model.from_gpt2_state_dict(sd, n_heads=4)


def test_wrong_shape_is_named(hf_and_ours):
    sd = _sd(hf_and_ours)
    sd["transformer.h.2.ln_2.weight"] = np.ones(23, np.float32)
    with pytest.raises(
        ValueError, match="state_dict\\['h.2.ln_2.weight'\\]: expected shape \\[24\\], got \\[23\\]"
    ):
        kvtutor.GPT2Model.from_gpt2_state_dict(sd, n_heads=4)


def test_untied_lm_head_and_bad_heads_are_rejected(hf_and_ours):
    sd = _sd(hf_and_ours)
    with pytest.raises(ValueError, match="d_model.*multiple of n_heads=5"):
        kvtutor.GPT2Model.from_gpt2_state_dict(sd, n_heads=5)
    sd["lm_head.weight"] = sd["lm_head.weight"] + 1
    with pytest.raises(ValueError, match="lm_head.weight"):
        kvtutor.GPT2Model.from_gpt2_state_dict(sd, n_heads=4)
    with pytest.raises(TypeError, match="state_dict.*mapping.*list"):
        kvtutor.GPT2Model.from_gpt2_state_dict([], n_heads=4)
    with pytest.raises(TypeError, match="state_dict\\['wte.weight'\\].*list"):
        kvtutor.GPT2Model.from_gpt2_state_dict(sd | {"wte.weight": [[0.0] * 24] * 61}, n_heads=4)


def test_build_hf_gpt2_holds_our_weights(hf_and_ours):
    """The one builder of transformers' GPT-2: from a model it holds that model's weights."""
    from kvtutor.models.gpt2_weights import build_hf_gpt2

    hf, ours = hf_and_ours
    rebuilt = build_hf_gpt2(ours)
    assert not rebuilt.training and rebuilt.dtype == torch.float32
    with torch.no_grad():
        a = rebuilt(torch.tensor([IDS])).logits[0].numpy()
        b = hf(torch.tensor([IDS])).logits[0].numpy()
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(a, ours.logits_without_cache(IDS), rtol=1e-4, atol=1e-4)
    assert build_hf_gpt2(ours, dtype="bf16").dtype == torch.bfloat16


def test_build_hf_gpt2_from_a_config_and_its_errors():
    from kvtutor.models.gpt2_weights import build_hf_gpt2, hf_gpt2_config

    cfg = kvtutor.GPT2Config(vocab_size=30, d_model=16, n_heads=2, n_layers=1, max_seq_len=12, d_ff=40)
    hf_cfg = hf_gpt2_config(cfg)
    assert (hf_cfg.n_embd, hf_cfg.n_inner, hf_cfg.n_positions, hf_cfg.resid_pdrop) == (16, 40, 12, 0.0)
    torch.manual_seed(0)
    a = build_hf_gpt2(cfg)
    torch.manual_seed(0)
    b = build_hf_gpt2(cfg)
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(x, y), name  # transformers' own init, seeded by the caller
    gqa = kvtutor.GPT2Config(vocab_size=30, d_model=16, n_heads=4, n_layers=1, max_seq_len=12, n_kv_heads=2)
    with pytest.raises(ValueError, match=r"^config: expected plain multi-head attention for GPT-2"):
        build_hf_gpt2(gqa)
    with pytest.raises(TypeError, match=r"^source: expected a GPT2Config or a model"):
        build_hf_gpt2({"d_model": 16})
    with pytest.raises(TypeError, match=r"^config: expected a kvtutor.GPT2Config"):
        hf_gpt2_config({"d_model": 16})
