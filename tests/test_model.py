"""The NumPy model and its caches: cached == uncached, preallocated == concat, the toy model."""

from __future__ import annotations

import numpy as np
import pytest
from cache_properties import assert_chunked_prefill_equals_one_prefill, assert_greedy_equals_full_recompute
from hypothesis import given, settings
from hypothesis import strategies as st

import kvtutor
from kvtutor.caches.protocol import KVCacheBase


@st.composite
def model_and_tokens(draw):
    n_kv = draw(st.sampled_from([1, 2]))
    n_heads = n_kv * draw(st.integers(1, 3))
    cfg = kvtutor.GPT2Config(
        vocab_size=draw(st.integers(5, 40)),
        d_model=n_heads * draw(st.integers(1, 5)),
        n_heads=n_heads,
        n_layers=draw(st.integers(1, 3)),
        max_seq_len=draw(st.integers(4, 20)),
        n_kv_heads=draw(st.sampled_from([0, n_kv])),
    )
    model = kvtutor.GPT2Model.random(cfg, seed=draw(st.integers(0, 2**16)))
    n_total = draw(st.integers(2, cfg.max_seq_len))
    n_prompt = draw(st.integers(1, n_total))
    ids = draw(st.lists(st.integers(0, cfg.vocab_size - 1), min_size=n_total, max_size=n_total))
    return model, ids, n_prompt


def run_cached(model, ids, n_prompt, kind="preallocated"):
    """Prefill ids[:n_prompt], then decode the rest one at a time: logits for every position."""
    cache = model.new_cache(kind=kind)
    rows = list(model.prefill(ids[:n_prompt], cache))
    rows += [model.decode_step(t, cache) for t in ids[n_prompt:]]
    return np.stack(rows), cache


@settings(max_examples=60, deadline=None)
@given(model_and_tokens())
def test_cached_logits_equal_full_recompute_at_every_position(case):
    model, ids, n_prompt = case
    cached, _ = run_cached(model, ids, n_prompt)
    np.testing.assert_allclose(cached, model.logits_without_cache(ids), rtol=1e-4, atol=1e-5)


@settings(max_examples=40, deadline=None)
@given(model_and_tokens())
def test_cached_keys_and_values_equal_those_of_a_full_pass(case):
    model, ids, n_prompt = case
    _, cache = run_cached(model, ids, n_prompt)
    trace: list[dict] = []
    model.forward(ids, None, trace)
    assert len(cache) == len(ids)
    for layer, t in enumerate(trace):
        np.testing.assert_allclose(cache.keys(layer), t["k_HSK"], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(cache.values(layer), t["v_HSK"], rtol=1e-4, atol=1e-5)


@settings(max_examples=40, deadline=None)
@given(model_and_tokens())
def test_preallocated_and_concat_caches_are_bit_identical(case):
    model, ids, n_prompt = case
    pre_logits, pre = run_cached(model, ids, n_prompt, "preallocated")
    cat_logits, cat = run_cached(model, ids, n_prompt, "concat")
    np.testing.assert_array_equal(pre_logits, cat_logits)
    for layer in range(model.config.n_layers):
        np.testing.assert_array_equal(pre.keys(layer), cat.keys(layer))
        np.testing.assert_array_equal(pre.values(layer), cat.values(layer))


@settings(max_examples=30, deadline=None)
@given(model_and_tokens())
def test_greedy_tokens_equal_those_of_full_recompute(case):
    assert_greedy_equals_full_recompute(*case)


@settings(max_examples=25, deadline=None)
@given(model_and_tokens(), st.integers(1, 4))
def test_chunked_prefill_equals_one_prefill(case, chunk):
    model, ids, _ = case
    assert_chunked_prefill_equals_one_prefill(model, ids, chunk)


@pytest.mark.parametrize("kind", ["preallocated", "concat", None])
def test_the_attention_core_hook_replaces_only_the_core(toy_model, kind):
    """forward(..., core=...) runs the model's own code around attention: with the model's core
    passed in, the logits are bit for bit the same; the hook is called once per layer, in order,
    with that layer's queries and the keys and values the cache returned."""
    from kvtutor.models.gpt2 import attention_core

    calls = []

    def core(layer, q_HTK, k_HSK, v_HSK):
        calls.append((layer, q_HTK.shape, k_HSK.shape, v_HSK.shape))
        return attention_core(q_HTK, k_HSK, v_HSK)

    cfg = toy_model.config
    ref = None if kind is None else toy_model.new_cache(kind=kind)
    mine = None if kind is None else toy_model.new_cache(kind=kind)
    np.testing.assert_array_equal(
        toy_model.forward([1, 2, 3], mine, core=core), toy_model.forward([1, 2, 3], ref)
    )
    assert calls == [
        (i, (cfg.n_heads, 3, cfg.d_head), (cfg.n_kv_heads, 3, cfg.d_head), (cfg.n_kv_heads, 3, cfg.d_head))
        for i in range(cfg.n_layers)
    ]
    if kind is not None:
        calls.clear()
        np.testing.assert_array_equal(toy_model.forward([4], mine, core=core), toy_model.forward([4], ref))
        assert [c[0] for c in calls] == list(range(cfg.n_layers)) and calls[0][2][1] == 4
        for layer in range(cfg.n_layers):
            np.testing.assert_array_equal(mine.keys(layer), ref.keys(layer))


def test_a_different_core_changes_the_logits_but_not_what_the_cache_stores_first(toy_model):
    """A core that ignores the keys (every query outputs zeros): layer 0's cached rows are the model's
    own, the logits are not."""
    ref, mine = toy_model.new_cache(), toy_model.new_cache()
    want = toy_model.prefill([1, 2, 3], ref)
    got = toy_model.forward([1, 2, 3], mine, core=lambda i, q, k, v: np.zeros_like(q))
    assert np.abs(got - want).max() > 1e-3
    np.testing.assert_array_equal(mine.keys(0), ref.keys(0))
    assert len(mine) == 3


def test_toy_model_continues_the_cat_sat_on_the_mat(toy_model):
    tok = kvtutor.load_toy_tokenizer()
    prompt = tok.encode(kvtutor.TOY_PROMPT)
    assert len(prompt) == 3
    assert tok.decode(toy_model.generate(prompt, 4)) == "on the mat."
    assert toy_model.config == kvtutor.TOY_CONFIG
    assert (toy_model.config.d_model, toy_model.config.n_heads, toy_model.config.d_head) == (8, 2, 4)


def test_toy_weights_are_small_and_load_without_pickle():
    path = kvtutor.models.toy.toy_weights_path()
    assert path.stat().st_size < 64 * 1024
    with np.load(path, allow_pickle=False) as data:
        assert "wte.weight" in data.files


def test_cache_shapes_follow_prefill_and_decode(toy_model):
    cache = toy_model.new_cache()
    assert isinstance(cache, KVCacheBase) and len(cache) == 0
    assert cache.keys(0).shape == (2, 0, 4)
    toy_model.prefill([1, 2, 3], cache)
    assert len(cache) == 3 and cache.keys(1).shape == (2, 3, 4) and cache.values(0).shape == (2, 3, 4)
    toy_model.decode_step(4, cache)
    assert len(cache) == 4 and cache.keys(0).shape == (2, 4, 4)
    assert cache.k_LHMK.shape == (2, 2, 16, 4)
    assert not cache.k_LHMK[:, :, 4:].any()  # beyond the length nothing was written


def test_cache_nbytes_preallocated_is_capacity_concat_is_length(toy_model):
    pre, cat = toy_model.new_cache(), toy_model.new_cache(kind="concat")
    toy_model.prefill([1, 2, 3], pre)
    toy_model.prefill([1, 2, 3], cat)
    per_token = 2 * 2 * 2 * 4 * 4  # K and V, layers, heads, head dim, float32 bytes
    assert pre.nbytes == per_token * 16
    assert cat.nbytes == per_token * 3


@pytest.mark.parametrize("kind", ["preallocated", "concat"])
def test_truncate_rolls_back(toy_model, kind):
    cache = toy_model.new_cache(kind=kind)
    toy_model.prefill([1, 2, 3], cache)
    expected = toy_model.decode_step(4, cache)
    toy_model.decode_step(9, cache)
    cache.truncate(3)
    assert len(cache) == 3
    np.testing.assert_array_equal(toy_model.decode_step(4, cache), expected)


def test_keys_view_of_preallocated_cache_is_read_only(toy_model):
    cache = toy_model.new_cache()
    toy_model.prefill([1, 2], cache)
    with pytest.raises(ValueError):
        cache.keys(0)[0, 0, 0] = 1.0


def test_generate_with_temperature_is_reproducible(toy_model):
    a = toy_model.generate([1, 2, 3], 6, temperature=1.0, seed=7)
    assert a == toy_model.generate([1, 2, 3], 6, temperature=1.0, seed=7)
    assert len(a) == 6


def test_generate_stops_at_stop_token(toy_model):
    tok = kvtutor.load_toy_tokenizer()
    new = toy_model.generate(tok.encode("The cat sat"), 10, stop_token=tok.ids["."])
    assert tok.decode(new) == "on the mat."


def test_generate_zero_tokens_and_given_cache(toy_model):
    assert toy_model.generate([1], 0) == []
    cache = toy_model.new_cache(kind="concat")
    assert len(toy_model.generate([1, 2, 3], 4, cache=cache)) == 4
    assert len(cache) == 6  # the last token is sampled, not fed back


def test_config_derived_properties():
    cfg = kvtutor.GPT2Config(vocab_size=10, d_model=12, n_heads=4, n_layers=1, max_seq_len=8, n_kv_heads=2)
    assert (cfg.d_head, cfg.d_ff, cfg.group_size) == (3, 48, 2)
    model = kvtutor.GPT2Model.random(cfg)
    assert model.n_params == cfg.n_params


def test_tokenizer_round_trip():
    tok = kvtutor.load_toy_tokenizer()
    assert len(tok) == kvtutor.TOY_CONFIG.vocab_size
    assert tok.decode(tok.encode("The cat sat on the mat.")) == "The cat sat on the mat."


def test_wrap_call_keeps_every_argument_within_the_width():
    from kvtutor.text import wrap_call

    args = [f"arg_{i}={i * 1000}" for i in range(12)]
    text = wrap_call("Thing", args, width=40)
    lines = text.splitlines()
    assert len(lines) > 1 and max(map(len, lines)) <= 40
    assert all(line.startswith(" " * len("Thing(")) for line in lines[1:])
    assert " ".join(line.strip() for line in lines) == "Thing(" + ", ".join(args) + ")"
    assert wrap_call("f", []) == "f()"
    assert wrap_call("f", ["a" * 50, "b"], width=20) == "f(" + "a" * 50 + ",\n  b)"  # never splits one
    with pytest.raises(ValueError, match="width"):
        wrap_call("f", ["a"], width=0)


@given(
    st.integers(1, 10**6),
    st.integers(1, 64),
    st.integers(1, 10**3),
    st.integers(1, 10**5),
    st.integers(60, 120),
)
def test_config_str_wraps_its_repr(vocab, heads, layers, seq, width):
    cfg = kvtutor.GPT2Config(
        vocab_size=vocab, d_model=heads * 8, n_heads=heads, n_layers=layers, max_seq_len=seq
    )
    assert max(map(len, str(cfg).splitlines())) <= kvtutor.text.TEXT_WIDTH
    wrapped = cfg.wrapped(width)
    assert max(map(len, wrapped.splitlines())) <= width
    assert " ".join(line.strip() for line in wrapped.splitlines()) == repr(cfg)
    assert eval(repr(cfg), {"GPT2Config": kvtutor.GPT2Config}) == cfg  # repr itself stays one line
