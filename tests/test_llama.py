"""The Llama-style NumPy model: parity with transformers' LlamaForCausalLM (small random configs, no
downloads), cached == uncached, every cache kind alike, RoPE's promises, and every error path."""

from __future__ import annotations

import numpy as np
import pytest
from cache_properties import assert_chunked_prefill_equals_one_prefill, assert_greedy_equals_full_recompute
from conftest import assert_same_state, cache_state
from hypothesis import given, settings
from hypothesis import strategies as st

import kvtutor
from kvtutor.caches.paged import PagedKVPool
from kvtutor.models.llama import (
    LlamaConfig,
    LlamaModel,
    apply_rope,
    rms_norm,
    rope_angles,
    rope_tables,
    rotate_half,
    silu,
    swiglu,
)

IDS = [5, 17, 3, 60, 0, 42, 8, 8, 21, 33, 2]

# two small configs: untied GQA (4 query heads on 2 KV heads) with a fast-turning RoPE base, and tied
# MQA (1 KV head) whose head width 6 is not d_model / n_heads (20 / 4)
HF_CONFIGS = {
    "gqa-untied": dict(hidden_size=32, intermediate_size=40, num_hidden_layers=3, num_attention_heads=4,
                       num_key_value_heads=2, rope_theta=100.0, rms_norm_eps=1e-5),
    "mqa-tied": dict(hidden_size=20, head_dim=6, intermediate_size=24, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=1, tie_word_embeddings=True),
}  # fmt: skip


def make_hf(family: str = "Llama", **kwargs):
    """transformers' ``{family}ForCausalLM`` (Llama, Qwen3) of a small config, seeded, its weights
    moved further from the default init than it draws them."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = getattr(transformers, f"{family}Config")(
        vocab_size=61, max_position_embeddings=40, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        attn_implementation="eager", **kwargs,
    )  # fmt: skip
    torch.manual_seed(0)
    hf = getattr(transformers, f"{family}ForCausalLM")(cfg).eval()
    with torch.no_grad():  # larger weights than the default init, so that any difference would show
        for p in hf.parameters():
            p.add_(0.15 * torch.randn_like(p))
    hf.tie_weights()
    return hf


@pytest.fixture(scope="module", params=sorted(HF_CONFIGS))
def hf_and_ours(request):
    hf = make_hf(**HF_CONFIGS[request.param])
    return hf, LlamaModel.from_state_dict(hf.state_dict(), hf.config.to_dict())


def hf_run(hf, ids):
    """transformers' logits [T, V] and its cache (past key values) for ids."""
    import torch

    with torch.no_grad():
        out = hf(torch.tensor([ids]), use_cache=True)
    past = out["cache"] if "cache" in out else out["past_key_values"]
    return out.logits[0].numpy(), past


# ---------------------------------------------------------------- parity with transformers


def test_config_is_read_from_config_json(hf_and_ours):
    hf, ours = hf_and_ours
    c = hf.config
    assert ours.config == LlamaConfig(
        vocab_size=61, d_model=c.hidden_size, n_heads=c.num_attention_heads, n_layers=c.num_hidden_layers,
        max_seq_len=40, d_ff=c.intermediate_size, n_kv_heads=c.num_key_value_heads, d_head=c.head_dim,
        rope_theta=c.rope_parameters["rope_theta"], rms_norm_eps=c.rms_norm_eps,
        tie_word_embeddings=c.tie_word_embeddings,
    )  # fmt: skip
    assert ours.n_params == ours.config.n_params == sum(p.numel() for p in hf.parameters())


def test_same_logits_as_transformers(hf_and_ours):
    hf, ours = hf_and_ours
    ref, _ = hf_run(hf, IDS)
    np.testing.assert_allclose(ours.logits_without_cache(IDS), ref, rtol=1e-4, atol=1e-4)
    cache = ours.new_cache()
    np.testing.assert_allclose(ours.prefill(IDS[:4], cache), ref[:4], rtol=1e-4, atol=1e-4)
    for i, t in enumerate(IDS[4:], start=4):
        np.testing.assert_allclose(ours.decode_step(t, cache), ref[i], rtol=1e-4, atol=1e-4)


def test_cache_holds_the_rotated_keys_that_transformers_caches(hf_and_ours):
    hf, ours = hf_and_ours
    _, past = hf_run(hf, IDS)
    cache = ours.new_cache()
    ours.prefill(IDS[:5], cache)
    trace: list[dict] = []
    for t in IDS[5:]:
        trace = []
        ours.decode_step(t, cache, trace)
    for layer in range(ours.config.n_layers):
        hf_k, hf_v = past.layers[layer].keys[0].numpy(), past.layers[layer].values[0].numpy()  # [H, S, K]
        np.testing.assert_allclose(cache.keys(layer), hf_k, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(cache.values(layer), hf_v, rtol=1e-4, atol=1e-5)
        # the last token's key as stored is its projection turned for position len - 1, not the raw one
        raw_HK = trace[layer]["k_unrotated_HTK"][:, 0]
        rotated_HK = apply_rope(raw_HK[:, None], [len(IDS) - 1], ours.config.rope_theta)[:, 0]
        np.testing.assert_allclose(cache.keys(layer)[:, -1], rotated_HK, rtol=1e-5, atol=1e-6)
        assert np.abs(cache.keys(layer)[:, -1] - raw_HK).max() > 1e-3


def test_same_greedy_tokens_as_transformers(hf_and_ours):
    import torch

    hf, ours = hf_and_ours
    with torch.no_grad():
        out = hf.generate(torch.tensor([IDS[:3]]), max_new_tokens=12, do_sample=False, pad_token_id=0)
    assert ours.generate(IDS[:3], 12) == out[0, 3:].tolist()


def test_state_dict_variants_load_the_same_model(hf_and_ours):
    hf, ours = hf_and_ours
    want = ours.logits_without_cache(IDS)
    bare = {k.removeprefix("model."): v.numpy() for k, v in hf.state_dict().items()}
    if ours.config.tie_word_embeddings:
        del bare["lm_head.weight"]  # a tied head may be left out
    for sd, cfg in [(bare, hf.config.to_dict()), (ours.to_state_dict(), ours.config)]:
        other = LlamaModel.from_state_dict(sd, cfg)
        np.testing.assert_array_equal(other.logits_without_cache(IDS), want)
    if ours.config.tie_word_embeddings:
        assert ours.weights.head_VD is ours.weights.wte_VD


def test_older_config_json_keys_are_read():
    """A config.json written before transformers 5: rope_theta at the top, rope_scaling null."""
    old = {"model_type": "llama", "vocab_size": 30, "hidden_size": 16, "intermediate_size": 24,
           "num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 8,
           "rope_theta": 500000.0, "rope_scaling": None, "rms_norm_eps": 1e-5}  # fmt: skip
    cfg = LlamaConfig.from_hf(old)
    assert (cfg.n_kv_heads, cfg.d_head, cfg.rope_theta, cfg.rms_norm_eps) == (2, 8, 500000.0, 1e-5)
    assert not cfg.tie_word_embeddings
    assert "rope_theta=500000.0" in str(cfg) and all(len(line) <= 78 for line in str(cfg).splitlines())


# ---------------------------------------------------------------- cached == uncached, every cache alike


@st.composite
def llama_and_tokens(draw):
    n_kv = draw(st.sampled_from([1, 2]))
    n_heads = n_kv * draw(st.integers(1, 3))
    d_head = 2 * draw(st.integers(1, 3))
    cfg = LlamaConfig(
        vocab_size=draw(st.integers(5, 40)),
        d_model=draw(st.sampled_from([n_heads * d_head, draw(st.integers(2, 16))])),
        n_heads=n_heads,
        n_layers=draw(st.integers(1, 3)),
        max_seq_len=draw(st.integers(4, 20)),
        d_ff=draw(st.integers(1, 24)),
        n_kv_heads=draw(st.sampled_from([0, n_kv])),
        d_head=d_head,
        rope_theta=draw(st.sampled_from([10.0, 100.0, 10000.0])),
        tie_word_embeddings=draw(st.booleans()),
    )
    model = LlamaModel.random(cfg, seed=draw(st.integers(0, 2**16)), std=0.3)
    n_total = draw(st.integers(2, cfg.max_seq_len))
    n_prompt = draw(st.integers(1, n_total))
    ids = draw(st.lists(st.integers(0, cfg.vocab_size - 1), min_size=n_total, max_size=n_total))
    return model, ids, n_prompt


def run_cached(model, ids, n_prompt, cache):
    """Prefill ids[:n_prompt] into cache, then decode the rest one at a time: logits for every position."""
    rows = list(model.prefill(ids[:n_prompt], cache))
    rows += [model.decode_step(t, cache) for t in ids[n_prompt:]]
    return np.stack(rows)


@settings(max_examples=40, deadline=None)
@given(llama_and_tokens())
def test_cached_logits_and_cache_equal_full_recompute_at_every_position(case):
    model, ids, n_prompt = case
    cache = model.new_cache()
    cached = run_cached(model, ids, n_prompt, cache)
    trace: list[dict] = []
    np.testing.assert_allclose(cached, model.forward(ids, None, trace), rtol=1e-4, atol=1e-5)
    assert len(cache) == len(ids)
    for layer, t in enumerate(trace):
        np.testing.assert_allclose(cache.keys(layer), t["k_HSK"], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(cache.values(layer), t["v_HSK"], rtol=1e-4, atol=1e-5)


@settings(max_examples=30, deadline=None)
@given(llama_and_tokens(), st.integers(1, 5))
def test_preallocated_concat_and_paged_caches_are_bit_identical(case, block_size):
    model, ids, n_prompt = case
    pool = PagedKVPool.for_model(
        model, n_blocks=-(-model.config.max_seq_len // block_size), block_size=block_size
    )
    caches = [model.new_cache(kind="preallocated"), model.new_cache(kind="concat"), pool.new_sequence()]
    logits = [run_cached(model, ids, n_prompt, c) for c in caches]
    for other, c in zip(logits[1:], caches[1:], strict=True):
        np.testing.assert_array_equal(other, logits[0])
        for layer in range(model.config.n_layers):
            np.testing.assert_array_equal(c.keys(layer), caches[0].keys(layer))
            np.testing.assert_array_equal(c.values(layer), caches[0].values(layer))


@settings(max_examples=25, deadline=None)
@given(llama_and_tokens())
def test_greedy_tokens_equal_those_of_full_recompute(case):
    assert_greedy_equals_full_recompute(*case)


@settings(max_examples=20, deadline=None)
@given(llama_and_tokens(), st.integers(1, 4))
def test_chunked_prefill_equals_one_prefill(case, chunk):
    model, ids, _ = case
    assert_chunked_prefill_equals_one_prefill(model, ids, chunk)


# ---------------------------------------------------------------- the position is the cache length


def small_model(**kwargs) -> LlamaModel:
    cfg = LlamaConfig(vocab_size=30, d_model=16, n_heads=4, n_layers=2, max_seq_len=16, d_ff=24,
                      n_kv_heads=2, rope_theta=100.0, **kwargs)  # fmt: skip
    return LlamaModel.random(cfg, seed=3, std=0.4)


def test_off_by_one_position_gives_different_logits():
    """The fail-on-purpose demo: the new token rotated for position len(cache) - 1 (the slot of the
    token before it) instead of len(cache)."""
    model, prompt, token = small_model(), [3, 1, 4, 1, 5], 9
    right, wrong = model.new_cache(), model.new_cache()
    model.prefill(prompt, right)
    model.prefill(prompt, wrong)
    want_V = model.logits_without_cache([*prompt, token])[-1]
    np.testing.assert_allclose(model.decode_step(token, right), want_V, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(model.decode_step(token, wrong, position=len(wrong)), want_V, rtol=1e-4,
                               atol=1e-5)  # fmt: skip
    wrong.truncate(len(prompt))
    off_V = model.decode_step(token, wrong, position=len(wrong) - 1)
    assert np.abs(off_V - want_V).max() > 1e-2
    # the wrong key sits in the right slot, and every later step attends to it
    assert np.abs(wrong.keys(0)[:, -1] - right.keys(0)[:, -1]).max() > 1e-3
    np.testing.assert_array_equal(wrong.keys(0)[:, :-1], right.keys(0)[:, :-1])


def test_a_rotated_key_never_needs_rotating_again():
    """q(m) . k(n) depends only on m - n: shifting both positions leaves every score unchanged."""
    rng = np.random.default_rng(0)
    q_HTK, k_HTK = rng.standard_normal((2, 1, 8)), rng.standard_normal((2, 1, 8))
    scores = [
        float((apply_rope(q_HTK, [m + shift]) * apply_rope(k_HTK, [n + shift])).sum())
        for m, n in [(7, 3)]
        for shift in (0, 1, 10, 100)
    ]
    np.testing.assert_allclose(scores, scores[0], rtol=1e-9)
    assert abs(float((apply_rope(q_HTK, [8]) * apply_rope(k_HTK, [3])).sum()) - scores[0]) > 1e-3


# ---------------------------------------------------------------- the steps


def test_attention_is_gpt2s_attention_core_after_rope():
    """llama.attention projects, rotates q and k, then runs gpt2.attention_core (the core
    GPT-2's attention runs too): the same numbers, bit for bit, as those steps by hand."""
    from kvtutor.models.gpt2 import attention_core, merge_heads, split_heads
    from kvtutor.models.llama import attention
    from kvtutor.models.tracing import capture_layers

    cfg = LlamaConfig(vocab_size=11, d_model=16, n_heads=4, n_layers=1, max_seq_len=8, d_ff=20, n_kv_heads=2)
    layer = LlamaModel.random(cfg, seed=2).weights.layers[0]
    x_TD = np.random.default_rng(3).standard_normal((3, 16)).astype(np.float32)
    positions_T = np.arange(2, 5)
    q_HTK = apply_rope(split_heads(x_TD @ layer.w_q, 4), positions_T)
    k_HTK = apply_rope(split_heads(x_TD @ layer.w_k, 2), positions_T)
    v_HTK = split_heads(x_TD @ layer.w_v, 2)
    want_TD = merge_heads(attention_core(q_HTK, k_HTK, v_HTK)) @ layer.w_o
    layers: list = []

    def block(x_TD):  # a block for the trace to open its record on
        return attention(x_TD, layer, cfg, positions_T)

    with capture_layers(layers, block, (attention, attention_core)):
        got_TD = block(x_TD)
    np.testing.assert_array_equal(got_TD, want_TD)
    (trace,) = layers
    assert trace["a_HTS"].shape == (4, 3, 3) and trace["scores_HTS"].shape == (4, 3, 3)


def test_steps_keep_their_promises():
    rng = np.random.default_rng(1)
    x_HTK = rng.standard_normal((3, 5, 6)).astype(np.float32)
    assert rope_angles(np.arange(5), 6).shape == (5, 3)
    cos_TK, sin_TK = rope_tables([0, 2], 6, 10.0)
    assert cos_TK.shape == sin_TK.shape == (2, 6) and cos_TK.dtype == np.float32
    np.testing.assert_array_equal(cos_TK[:, :3], cos_TK[:, 3:])
    np.testing.assert_allclose(sin_TK[1, 0], np.sin(2.0), rtol=1e-6)  # pair 0 turns by 1 radian per position
    np.testing.assert_array_equal(rotate_half(rotate_half(x_HTK)), -x_HTK)
    rotated = apply_rope(x_HTK, np.arange(5))
    assert rotated.dtype == np.float32
    np.testing.assert_allclose(rotated[:, 0], x_HTK[:, 0])  # position 0: angle 0
    # a rotation keeps the length of every pair, so of every row
    np.testing.assert_allclose(np.linalg.norm(rotated, axis=-1), np.linalg.norm(x_HTK, axis=-1), rtol=1e-5)
    x_TD = rng.standard_normal((4, 8)) * 5
    np.testing.assert_allclose(np.sqrt((rms_norm(x_TD, np.ones(8), 0.0) ** 2).mean(-1)), 1.0)
    np.testing.assert_allclose(rms_norm(x_TD, np.full(8, 2.0)), 2 * rms_norm(x_TD, np.ones(8)))
    x = np.array([-1000.0, -3.0, 0.0, 2.0, 1000.0], dtype=np.float32)
    with np.errstate(all="raise"):
        got = silu(x)
    np.testing.assert_allclose(got[1:4], x[1:4] / (1 + np.exp(-x[1:4])), rtol=1e-6)
    assert got[0] == 0 and got[-1] == 1000
    layer = small_model().weights.layers[0]
    assert swiglu(rng.standard_normal((3, 16)), layer).shape == (3, 16)


def test_runs_on_a_paged_cache_and_generate_agrees():
    model = small_model()
    pool = PagedKVPool.for_model(model, n_blocks=5, block_size=4)
    assert model.generate([3, 1, 4], 12, cache=pool.new_sequence()) == model.generate([3, 1, 4], 12)


def test_exports():
    assert kvtutor.LlamaModel is LlamaModel and kvtutor.LlamaConfig is LlamaConfig
    assert {"LlamaModel", "LlamaConfig"} <= set(kvtutor.__all__)


# ---------------------------------------------------------------- errors: named, and the cache unchanged


@pytest.fixture(params=["preallocated", "concat", "paged"])
def filled(request):
    model = small_model()
    if request.param == "paged":
        cache = PagedKVPool.for_model(model, n_blocks=4, block_size=4).new_sequence()
    else:
        cache = model.new_cache(kind=request.param)
    model.prefill([1, 2, 3], cache)
    model.decode_step(4, cache)
    return model, cache


BAD_CALLS = [
    (lambda m, c: m.prefill([], c), ValueError, "ids_T.*at least one token"),
    (lambda m, c: m.prefill([1, 30], c), ValueError, "ids_T.*\\[0, 30\\).*30 at index 1"),
    (lambda m, c: m.prefill([1.0], c), TypeError, "ids_T.*int token ids"),
    (lambda m, c: m.prefill(list(range(13)), c), ValueError, "ids_T.*13 tokens after 4 cached.*capacity 16"),
    (lambda m, c: m.decode_step(30, c), ValueError, "token_id.*got 30"),
    (lambda m, c: m.decode_step(None, c), TypeError, "token_id.*NoneType"),
    (lambda m, c: m.decode_step(1, c, position=-1), ValueError, "position: expected 0 <= position <= 15.*-1"),
    (lambda m, c: m.decode_step(1, c, position=16), ValueError, "position.*got 16"),
    (lambda m, c: m.decode_step(1, c, position=2.0), TypeError, "position: expected an int.*float"),
    (lambda m, c: m.forward([1, 2], c, start=15), ValueError, "start: expected 0 <= start <= 14"),
    (lambda m, c: m.generate([1], 2, cache=c), ValueError, "cache: expected an empty cache, got one holding"),
]  # fmt: skip


@pytest.mark.parametrize(("call", "exc", "match"), BAD_CALLS)
def test_bad_calls_are_refused_and_the_cache_unchanged(filled, call, exc, match):
    model, cache = filled
    before = cache_state(cache)
    with pytest.raises(exc, match=match):
        call(model, cache)
    assert_same_state(before, cache_state(cache))


def test_a_cache_of_another_shape_is_refused_unchanged():
    model, other = small_model(), LlamaModel.random(LlamaConfig(30, 16, 4, 2, 16, 24, n_kv_heads=4))
    cache = other.new_cache()
    other.prefill([1, 2], cache)
    before = cache_state(cache)
    with pytest.raises(ValueError, match="cache: expected \\(layers, kv heads, head dim\\) = \\(2, 2, 4\\).*"
                                         "got \\(2, 4, 4\\)"):  # fmt: skip
        model.decode_step(3, cache)
    assert_same_state(before, cache_state(cache))
    empty = model.new_cache()
    with pytest.raises(ValueError, match="cache: expected a prefilled cache"):
        model.decode_step(3, empty)
    with pytest.raises(TypeError, match="cache: expected a KV cache.*None"):
        model.decode_step(3, None)
    full = model.new_cache(capacity=3)
    model.prefill([1, 2, 3], full)
    before = cache_state(full)
    with pytest.raises(ValueError, match="ids_T: 1 tokens after 3 cached ones exceed the capacity 3"):
        model.decode_step(4, full)
    assert_same_state(before, cache_state(full))
    with pytest.raises(ValueError, match="kind: expected one of"):
        model.new_cache(kind="ring")


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"d_head": 3, "d_model": 12}, ValueError, "d_head: expected an even number"),
        ({"n_kv_heads": 3}, ValueError, "n_kv_heads: expected a divisor of n_heads=4"),
        ({"d_model": 18}, ValueError, "d_model: expected a multiple of n_heads=4"),
        ({"rope_theta": 0.0}, ValueError, "rope_theta: expected a finite number > 0"),
        ({"rms_norm_eps": float("nan")}, ValueError, "rms_norm_eps"),
        ({"rope_theta": True}, TypeError, "rope_theta: expected a float"),
        ({"d_ff": 0}, ValueError, "d_ff: expected a positive int"),
        ({"vocab_size": 3.0}, TypeError, "vocab_size: expected an int"),
        ({"tie_word_embeddings": 1}, TypeError, "tie_word_embeddings: expected a bool"),
    ],
)
def test_bad_config(kwargs, exc, match):
    base = dict(vocab_size=30, d_model=16, n_heads=4, n_layers=2, max_seq_len=16, d_ff=24)
    with pytest.raises(exc, match=match):
        LlamaConfig(**(base | kwargs))


HF_BASE = {"model_type": "llama", "vocab_size": 30, "hidden_size": 16, "intermediate_size": 24,
           "num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 8}  # fmt: skip


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"model_type": "mistral"}, "config\\['model_type'\\]: expected 'llama', got 'mistral'"),
        ({"attention_bias": True}, "config\\['attention_bias'\\]"),
        ({"mlp_bias": True}, "config\\['mlp_bias'\\]"),
        ({"sliding_window": 4}, "config\\['sliding_window'\\]"),
        ({"hidden_act": "gelu"}, "config\\['hidden_act'\\]: expected 'silu'"),
        ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "config\\['rope_scaling'\\]"),
        ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4}}, "config\\['rope_parameters'\\]"),
        ({"rope_theta": -1.0}, "config\\['rope_theta'\\]: expected a finite number > 0"),
        ({"rms_norm_eps": "1e-5"}, "config\\['rms_norm_eps'\\]"),
        ({"hidden_size": None}, "config: missing key 'hidden_size'"),
        ({"num_key_value_heads": 3}, "config\\['num_key_value_heads'\\]: expected a divisor"),
    ],
)
def test_bad_config_json_is_refused_naming_the_key(change, match):
    with pytest.raises(ValueError, match=match):
        LlamaConfig.from_hf(HF_BASE | change)


@pytest.fixture(scope="module")
def good_sd():
    model = small_model()
    return model.to_state_dict(), model.config


def test_bad_state_dicts_are_refused_naming_the_key(good_sd):
    sd, cfg = good_sd
    load = LlamaModel.from_state_dict
    with pytest.raises(
        ValueError, match="state_dict: missing key 'layers.1.mlp.up_proj.weight' \\(1 missing"
    ):
        load({k: v for k, v in sd.items() if k != "model.layers.1.mlp.up_proj.weight"}, cfg)
    with pytest.raises(ValueError, match="state_dict: missing key 'lm_head.weight'"):
        load({k: v for k, v in sd.items() if k != "lm_head.weight"}, cfg)
    with pytest.raises(ValueError, match="state_dict: unexpected key 'layers.0.self_attn.q_proj.bias'"):
        load(sd | {"model.layers.0.self_attn.q_proj.bias": np.zeros(16, np.float32)}, cfg)
    with pytest.raises(ValueError, match="state_dict: unexpected key 'layers.2.input_layernorm.weight'"):
        load(sd | {"model.layers.2.input_layernorm.weight": np.ones(16, np.float32)}, cfg)
    with pytest.raises(ValueError, match="state_dict\\['layers.1.self_attn.k_proj.weight'\\]: expected shape "
                                         "\\[8, 16\\], got \\[16, 16\\]"):  # fmt: skip
        load(sd | {"model.layers.1.self_attn.k_proj.weight": np.zeros((16, 16), np.float32)}, cfg)
    bad = sd["model.norm.weight"].copy()
    bad[3] = np.nan
    with pytest.raises(
        ValueError, match="state_dict\\['model.norm.weight'\\]: expected finite weights, got nan"
    ):
        load(sd | {"model.norm.weight": bad}, cfg)
    with pytest.raises(TypeError, match="state_dict\\['model.norm.weight'\\]: expected floating-point"):
        load(sd | {"model.norm.weight": np.ones(16, np.int64)}, cfg)
    with pytest.raises(TypeError, match="state_dict\\['model.norm.weight'\\].*list"):
        load(sd | {"model.norm.weight": [1.0] * 16}, cfg)
    with pytest.raises(ValueError, match="state_dict: key 'norm.weight' given twice"):
        load(sd | {"norm.weight": sd["model.norm.weight"]}, cfg)
    with pytest.raises(TypeError, match="state_dict: expected str keys, got int"):
        load(sd | {3: sd["model.norm.weight"]}, cfg)
    with pytest.raises(TypeError, match="state_dict: expected a mapping.*list"):
        load([], cfg)
    with pytest.raises(
        TypeError, match="config: expected a config.json dict or a LlamaConfig, got GPT2Config"
    ):
        load(sd, kvtutor.TOY_CONFIG)
    with pytest.raises(TypeError, match="dtype"):
        load(sd, cfg, dtype=np.int32)


def test_a_tied_config_refuses_a_different_lm_head(good_sd):
    sd, cfg = good_sd
    tied = LlamaConfig(**(vars(cfg) | {"tie_word_embeddings": True}))
    shared = sd | {"lm_head.weight": sd["model.embed_tokens.weight"]}
    model = LlamaModel.from_state_dict(shared, tied)
    assert model.weights.head_VD is model.weights.wte_VD
    with pytest.raises(ValueError, match="state_dict\\['lm_head.weight'\\]: expected the token embedding"):
        LlamaModel.from_state_dict(sd, tied)
    with pytest.raises(TypeError, match="config: expected a LlamaConfig"):
        LlamaModel.random(kvtutor.TOY_CONFIG)
