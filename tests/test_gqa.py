"""Grouped-query and multi-query attention in the NumPy model: the cache holds n_kv_heads heads,
each shared by a group of query heads; cached and uncached decoding still agree."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvtutor
from kvtutor.caches.paged import PagedKVPool
from kvtutor.models.gpt2 import repeat_kv
from kvtutor.models.gpt2_weights import GPT2Weights, LayerWeights


def divisor_pairs(max_heads: int = 8):
    """(n_heads, n_kv_heads) with n_kv_heads any divisor of n_heads: MHA, GQA and MQA."""
    return st.integers(1, max_heads).flatmap(
        lambda h: st.tuples(st.just(h), st.sampled_from([d for d in range(1, h + 1) if h % d == 0]))
    )


def make_model(n_heads, n_kv_heads, d_head=4, n_layers=2, max_seq_len=32, vocab=40, seed=0):
    cfg = kvtutor.GPT2Config(
        vocab_size=vocab, d_model=n_heads * d_head, n_heads=n_heads, n_layers=n_layers,
        max_seq_len=max_seq_len, n_kv_heads=n_kv_heads,
    )  # fmt: skip
    return kvtutor.GPT2Model.random(cfg, seed=seed)


@settings(max_examples=40, deadline=None)
@given(
    heads=divisor_pairs(),
    d_head=st.integers(1, 6),
    n_layers=st.integers(1, 3),
    prompt_len=st.integers(1, 10),
    n_decode=st.integers(1, 8),
    kind=st.sampled_from(["preallocated", "concat"]),
    seed=st.integers(0, 10_000),
)
def test_cached_equals_uncached_for_any_kv_head_count(
    heads, d_head, n_layers, prompt_len, n_decode, kind, seed
):
    n_heads, n_kv_heads = heads
    model = make_model(n_heads, n_kv_heads, d_head, n_layers, seed=seed)
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 40, prompt_len + n_decode).tolist()
    cache = model.new_cache(kind=kind)
    logits = [model.prefill(ids[:prompt_len], cache)]
    logits += [model.decode_step(t, cache)[None] for t in ids[prompt_len:]]
    cached_TV = np.concatenate(logits)
    trace: list[dict] = []
    uncached_TV = model.forward(ids, None, trace)
    np.testing.assert_allclose(cached_TV, uncached_TV, rtol=1e-4, atol=1e-5)
    for layer in range(n_layers):  # per-layer K/V: n_kv_heads heads in the cache
        assert cache.keys(layer).shape == (n_kv_heads, len(ids), d_head)
        np.testing.assert_allclose(cache.keys(layer), trace[layer]["k_HSK"], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(cache.values(layer), trace[layer]["v_HSK"], rtol=1e-4, atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(heads=divisor_pairs(), seed=st.integers(0, 10_000), prompt_len=st.integers(1, 6))
def test_greedy_tokens_agree_with_full_recompute(heads, seed, prompt_len):
    model = make_model(*heads, seed=seed)
    prompt = np.random.default_rng(seed).integers(0, 40, prompt_len).tolist()
    cached = model.generate(prompt, 12)
    ids = list(prompt)
    for token in cached:
        top2 = np.sort(model.logits_without_cache(ids)[-1])[-2:]
        if top2[1] - top2[0] < 1e-4:  # a near tie: rounding may pick either, stop comparing here
            break
        assert int(np.argmax(model.logits_without_cache(ids)[-1])) == token
        ids.append(token)


@pytest.mark.parametrize("n_kv_heads", [8, 4, 2, 1])
def test_cache_bytes_shrink_by_the_group_size(n_kv_heads):
    mha, gqa = make_model(8, 8), make_model(8, n_kv_heads)
    ratio = 8 // n_kv_heads
    assert mha.new_cache().nbytes == ratio * gqa.new_cache().nbytes  # preallocated, [L, Hkv, M, K]
    sizes = []
    for model in (mha, gqa):
        cache = model.new_cache(kind="concat")
        model.prefill(list(range(9)), cache)
        sizes.append(cache.nbytes)
    assert sizes[0] == ratio * sizes[1]
    assert sizes[1] == 2 * 2 * n_kv_heads * 9 * 4 * 4  # K and V, 2 layers, Hkv heads, 9 tokens, K=4, fp32
    pools = [PagedKVPool.for_model(m, n_blocks=4, block_size=4) for m in (mha, gqa)]
    assert pools[0].block_bytes == ratio * pools[1].block_bytes


def test_each_kv_head_serves_a_group_of_query_heads():
    model = make_model(6, 2, d_head=3, n_layers=1)
    trace: list[dict] = []
    model.forward([1, 5, 2, 7], None, trace)
    t = trace[0]
    q_HTK, k_HSK = t["q_HTK"], t["k_HSK"]
    assert q_HTK.shape == (6, 4, 3) and k_HSK.shape == (2, 4, 3)
    for h in range(6):  # query heads 0-2 read KV head 0, heads 3-5 read KV head 1
        np.testing.assert_allclose(t["scores_HTS"][h], q_HTK[h] @ k_HSK[h // 3].T, rtol=1e-6, atol=1e-7)
    assert np.array_equal(repeat_kv(k_HSK, 3)[4], k_HSK[1])
    assert repeat_kv(k_HSK, 1) is k_HSK


def expand_to_mha(model: kvtutor.GPT2Model) -> kvtutor.GPT2Model:
    """The same model with every KV head copied for each query head of its group."""
    cfg = model.config
    g, k = cfg.group_size, cfg.d_head

    def widen(w_DX: np.ndarray) -> np.ndarray:
        lead = w_DX.shape[:-1]
        w = w_DX.reshape(*lead, cfg.n_kv_heads, k)
        return np.repeat(w, g, axis=-2).reshape(*lead, cfg.n_heads * k)

    layers = [
        LayerWeights(
            **{
                **vars(ly),
                "w_k": widen(ly.w_k),
                "b_k": widen(ly.b_k),
                "w_v": widen(ly.w_v),
                "b_v": widen(ly.b_v),
            }
        )  # fmt: skip
        for ly in model.weights.layers
    ]
    w = model.weights
    mha_cfg = kvtutor.GPT2Config(
        cfg.vocab_size,
        cfg.d_model,
        cfg.n_heads,
        cfg.n_layers,
        cfg.max_seq_len,
        cfg.d_ff,
        n_kv_heads=cfg.n_heads,
    )
    return kvtutor.GPT2Model(mha_cfg, GPT2Weights(w.wte_VD, w.wpe_MD, layers, w.lnf_g, w.lnf_b))


@settings(max_examples=20, deadline=None)
@given(heads=divisor_pairs(), seed=st.integers(0, 10_000))
def test_gqa_is_mha_with_shared_kv_heads(heads, seed):
    gqa = make_model(*heads, seed=seed)
    mha = expand_to_mha(gqa)
    ids = np.random.default_rng(seed).integers(0, 40, 7).tolist()
    np.testing.assert_allclose(
        gqa.logits_without_cache(ids), mha.logits_without_cache(ids), rtol=1e-5, atol=1e-6
    )
    assert gqa.new_cache().nbytes * gqa.config.group_size == mha.new_cache().nbytes
    assert gqa.n_params < mha.n_params or gqa.config.group_size == 1


def test_state_dict_round_trip_keeps_kv_heads():
    model = make_model(4, 2)
    back = kvtutor.GPT2Model.from_gpt2_state_dict(model.to_gpt2_state_dict(), n_heads=4)
    assert back.config.n_kv_heads == 2
    np.testing.assert_array_equal(back.logits_without_cache([1, 2]), model.logits_without_cache([1, 2]))


def test_kv_head_errors():
    with pytest.raises(ValueError, match=r"^n_kv_heads: expected a divisor of n_heads=6, got 4"):
        kvtutor.GPT2Config(vocab_size=10, d_model=12, n_heads=6, n_layers=1, max_seq_len=8, n_kv_heads=4)
    with pytest.raises(ValueError, match=r"^n_kv_heads: expected a non-negative int"):
        kvtutor.GPT2Config(vocab_size=10, d_model=12, n_heads=6, n_layers=1, max_seq_len=8, n_kv_heads=-1)
    gqa, mha = make_model(4, 2), make_model(4, 4)
    cache = mha.new_cache()
    with pytest.raises(ValueError, match=r"^cache: expected \(layers, kv heads, head dim\) = \(2, 2, 4\)"):
        gqa.prefill([1, 2], cache)
    assert len(cache) == 0
