"""The quantized KV cache: int8 keys and values with scales, within scale / 2 of what was written,
the float caches' protocol and errors, honest byte counts, and greedy tokens measured against a
float cache."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_same_state, cache_state
from hypothesis import given, settings
from hypothesis import strategies as st

import kvtutor
from kvtutor.caches.quant import (
    KEY_MODES,
    QMAX,
    AgreementReport,
    QuantizedKVCache,
    dequantize_int8,
    measure_agreement,
    quantize_int8,
    random_prompts,
)
from kvtutor.models.llama import LlamaConfig, LlamaModel

DTYPES = [np.float32, np.float16, np.float64]


def slack(half_scale: np.ndarray, dtype) -> np.ndarray:
    """The bound scale / 2 plus the float rounding of the scale, the product q * scale and the cast
    to ``dtype``: each at most half an ulp of max|x| = 127 * scale; one ulp of it is ample."""
    info = np.finfo(dtype)
    return half_scale * (1 + 2 * QMAX * info.eps) + info.smallest_subnormal


def assert_within(got: np.ndarray, want: np.ndarray, half_scale: np.ndarray, dtype) -> None:
    err = np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64))
    bound = slack(np.asarray(half_scale, np.float64), dtype)
    if err.size == 0:
        return
    worst = np.unravel_index(np.argmax(err - bound), err.shape)
    assert (err <= bound).all(), f"error {err[worst]} > bound {bound[worst]} at {worst}"


@st.composite
def tensors(draw, shape, dtype=np.float32):
    """Normal numbers of magnitude 10^e, some channels (last axis) outliers up to 1000 times larger,
    some rows (all but the last axis fixed) zero: what the error bound must survive."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    low, high = (-3, 1) if np.dtype(dtype) == np.float16 else (-20, 20)
    x = rng.standard_normal(shape) * 10.0 ** draw(st.integers(low, high))
    n_channels = shape[-1]
    outliers = draw(st.lists(st.integers(0, n_channels - 1), max_size=2))
    x[..., outliers] *= draw(st.sampled_from([1.0, 10.0, 100.0, 1000.0 if high > 1 else 50.0]))
    zero = rng.random(shape[:-1]) < draw(st.sampled_from([0.0, 0.3]))
    x[zero] = 0.0
    return x.astype(dtype)


# ---------------------------------------------------------------- the quantizer and its bound


@settings(max_examples=150, deadline=None)
@given(st.data(), st.sampled_from(DTYPES), st.integers(1, 3))
def test_quantize_dequantize_is_within_half_a_scale(data, dtype, axis_from_end):
    shape = tuple(data.draw(st.lists(st.integers(1, 9), min_size=3, max_size=3)))
    x = data.draw(tensors(shape, dtype))
    axis = -axis_from_end  # over channels (per token), over tokens (per channel), over heads
    scale_dtype = np.promote_types(dtype, np.float32)
    q, scale = quantize_int8(x, axis, scale_dtype)
    assert q.dtype == np.int8 and q.shape == x.shape and scale.dtype == scale_dtype
    assert scale.shape == tuple(1 if i == x.ndim + axis else n for i, n in enumerate(x.shape))
    assert np.abs(q).max() <= QMAX  # symmetric: -128 is never used
    back = dequantize_int8(q, scale, dtype)
    assert back.dtype == dtype
    assert_within(back, x, np.broadcast_to(scale / 2, x.shape), dtype)
    # a slice of zeros: scale 0, read back as exact zeros
    zero = np.all(x == 0, axis=axis, keepdims=True)
    assert (scale[zero] == 0).all() and (back[np.broadcast_to(zero, x.shape)] == 0).all()
    # the largest element of a non-zero slice is stored as +-127: the whole int8 range is used
    assert (np.abs(q).max(axis=axis, keepdims=True)[~zero] == QMAX).all()


def test_the_bound_is_tight_and_the_zero_row_is_exact():
    """0.5 / 127 of the way between two steps rounds to a step: an error of exactly scale / 2."""
    x = np.array([[127.0, 0.5, -63.5, 1.25], [0.0, 0.0, 0.0, 0.0]], np.float64)
    q, scale = quantize_int8(x, -1, np.float64)
    np.testing.assert_array_equal(scale[:, 0], [1.0, 0.0])
    np.testing.assert_array_equal(q, [[127, 0, -64, 1], [0, 0, 0, 0]])  # rint: halves to even
    back = dequantize_int8(q, scale, np.float64)
    assert np.abs(back - x).max() == 0.5 == scale[0, 0] / 2


def test_keys_prefer_per_channel_scales_when_channels_are_outliers():
    """Keys with two outlier channels (50x the others, as KIVI observes): a per-token scale is set
    by the outlier, so the ordinary channels are rounded in coarse steps; per channel they keep their
    own. Measured (seed 0, 64 tokens x 16 channels, groups of 32): mean |error| on the 14 ordinary
    channels 0.0043 per channel, 0.1175 per token, 27 times more; on the two outliers (magnitude
    ~50) per channel is worse, 0.230 against 0.055, and over all 16 channels 0.033 against 0.110."""
    rng = np.random.default_rng(0)
    k_TK = rng.standard_normal((64, 16))
    k_TK[:, [3, 11]] *= 50.0
    ordinary = np.ones(16, bool)
    ordinary[[3, 11]] = False
    per_token = dequantize_int8(*quantize_int8(k_TK, -1, np.float64), np.float64)
    q, s = quantize_int8(k_TK.reshape(2, 32, 16), 1, np.float64)  # groups of 32 tokens
    per_channel = dequantize_int8(q, s, np.float64).reshape(64, 16)
    err_token = np.abs(per_token - k_TK)[:, ordinary].mean()
    err_channel = np.abs(per_channel - k_TK)[:, ordinary].mean()
    assert err_channel == pytest.approx(0.0043, abs=1e-4) and err_token == pytest.approx(0.1175, abs=1e-4)
    assert err_token > 20 * err_channel
    all_token, all_channel = np.abs(per_token - k_TK).mean(), np.abs(per_channel - k_TK).mean()
    assert all_channel == pytest.approx(0.033, abs=1e-3) and all_token == pytest.approx(0.110, abs=1e-3)


# ---------------------------------------------------------------- the cache: what it stores


def reference_keys(k_HSK: np.ndarray, key_mode: str, group_size: int, dtype) -> np.ndarray:
    """What the cache should hold for keys written as k_HSK: quantized in one go (per token, or per
    channel in full groups with the last partial group left in float)."""
    scale_dtype = np.promote_types(dtype, np.float32)
    if key_mode == "per_token":
        return dequantize_int8(*quantize_int8(k_HSK, -1, scale_dtype), dtype)
    n_heads, n, d_head = k_HSK.shape
    n_q = n // group_size * group_size
    q, s = quantize_int8(k_HSK[:, :n_q].reshape(n_heads, -1, group_size, d_head), 2, scale_dtype)
    deq = dequantize_int8(q, s, dtype).reshape(n_heads, n_q, d_head)
    return np.concatenate([deq, k_HSK[:, n_q:]], axis=1)


@st.composite
def cache_cases(draw):
    n_layers, n_heads, d_head = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 8))
    capacity, dtype = draw(st.integers(1, 24)), draw(st.sampled_from(DTYPES))
    key_mode, group_size = draw(st.sampled_from(KEY_MODES)), draw(st.integers(1, 6))
    chunks, left = [], capacity
    for size in draw(st.lists(st.integers(0, 7), min_size=1, max_size=8)):
        chunks.append(min(size, left))
        left -= chunks[-1]
    total = sum(chunks)
    shape = (n_layers, n_heads, total, d_head)
    k, v = draw(tensors(shape, dtype)), draw(tensors(shape, dtype))
    cache = QuantizedKVCache(n_layers, n_heads, capacity, d_head, dtype, key_mode, group_size)
    return cache, chunks, k, v


def write(cache, chunks, k_LHSK, v_LHSK, start=0):
    """Feed the rows chunk by chunk through update/advance; each update's return must equal what
    keys()/values() give once it is committed."""
    pos = start
    for n in filter(None, chunks):  # a pass writes at least one token (plan(0) is refused)
        plan = cache.plan(n)
        returned = [cache.update(i, k_LHSK[i, :, pos : pos + n], v_LHSK[i, :, pos : pos + n], plan)
                    for i in range(cache.n_layers)]  # fmt: skip
        cache.advance(plan)
        pos += n
        for i, (k, v, _) in enumerate(returned):
            np.testing.assert_array_equal(k, cache.keys(i))
            np.testing.assert_array_equal(v, cache.values(i))


@settings(max_examples=120, deadline=None)
@given(cache_cases())
def test_every_element_is_within_half_its_scale_however_the_rows_were_chunked(case):
    cache, chunks, k, v = case
    write(cache, chunks, k, v)
    assert len(cache) == k.shape[2]
    scale_dtype = cache.scale_dtype
    for layer in range(cache.n_layers):
        keys, values = cache.keys(layer), cache.values(layer)
        assert keys.dtype == values.dtype == cache.dtype and keys.shape == k[layer].shape
        # the stored state does not depend on the chunking: it is the rows quantized in one go
        np.testing.assert_array_equal(keys, reference_keys(k[layer], cache.key_mode, cache.group_size,
                                                           cache.dtype))  # fmt: skip
        np.testing.assert_array_equal(values, dequantize_int8(*quantize_int8(v[layer], -1, scale_dtype),
                                                              cache.dtype))  # fmt: skip
        k_bound, v_bound = cache.error_bounds(layer)
        assert_within(keys, k[layer], k_bound, cache.dtype)
        assert_within(values, v[layer], v_bound, cache.dtype)
        # the bounds are half the stored scales; float rows are exact
        n, n_q = len(cache), cache.n_quantized_keys(len(cache))
        np.testing.assert_array_equal(v_bound, np.broadcast_to(cache.v_scale_LHM[layer, :, :n, None] / 2,
                                                               v_bound.shape))  # fmt: skip
        if cache.key_mode == "per_channel":
            assert n_q == n // cache.group_size * cache.group_size
            g_scales = cache.k_scale_LHNK[layer, :, : n_q // cache.group_size]
            np.testing.assert_array_equal(k_bound[:, :n_q], np.repeat(g_scales / 2, cache.group_size, 1))
            assert (k_bound[:, n_q:] == 0).all()
            np.testing.assert_array_equal(keys[:, n_q:], k[layer][:, n_q:])
        else:
            assert n_q == n
            np.testing.assert_array_equal(k_bound, np.broadcast_to(cache.k_scale_LHM[layer, :, :n, None] / 2,
                                                                   k_bound.shape))  # fmt: skip


@settings(max_examples=100, deadline=None)
@given(cache_cases(), st.data())
def test_truncate_keeps_the_prefix_and_rewriting_stays_within_bound(case, data):
    cache, chunks, k, v = case
    write(cache, chunks, k, v)
    length = data.draw(st.integers(0, len(cache)))
    before = [(cache.keys(i), cache.values(i)) for i in range(cache.n_layers)]
    cache.truncate(length)
    assert len(cache) == length
    for i, (keys, values) in enumerate(before):  # the surviving rows read back exactly as before
        np.testing.assert_array_equal(cache.keys(i), keys[:, :length])
        np.testing.assert_array_equal(cache.values(i), values[:, :length])
    # write new rows after the cut: within the bound of what the cache held plus the new rows
    n_more = cache.capacity - length
    new_k, new_v = data.draw(tensors(k.shape[:2] + (n_more, k.shape[3]), cache.dtype)), None
    new_v = data.draw(tensors(new_k.shape, cache.dtype))
    write(cache, [n_more], new_k, new_v)
    for i, (keys, values) in enumerate(before):
        held_k = np.concatenate([keys[:, :length], new_k[i]], axis=1)
        held_v = np.concatenate([values[:, :length], new_v[i]], axis=1)
        k_bound, v_bound = cache.error_bounds(i)
        assert_within(cache.keys(i), held_k, k_bound, cache.dtype)
        assert_within(cache.values(i), held_v, v_bound, cache.dtype)


def test_a_group_is_quantized_once_when_it_fills():
    """Per channel, group of 4: tokens stay float until the 4th arrives, then the scales are written
    and never change again; an update that is not committed changes nothing visible."""
    rng = np.random.default_rng(1)
    k = rng.standard_normal((1, 2, 8, 3)).astype(np.float32)
    cache = QuantizedKVCache(1, 2, 8, 3, key_mode="per_channel", group_size=4)
    write(cache, [3], k, k)
    np.testing.assert_array_equal(cache.keys(0), k[0, :, :3])  # no group full yet: float
    assert (cache.k_scale_LHNK == 0).all()
    state = cache_state(cache)
    plan = cache.plan(2)
    cache.update(0, k[0, :, 3:5], k[0, :, 3:5], plan)  # fills group 0, not committed
    assert_same_state(state, cache_state(cache))
    with pytest.raises(TypeError, match="^plan"):
        cache.advance(2)
    assert_same_state(state, cache_state(cache))
    cache.advance(plan)
    scales = cache.k_scale_LHNK[0, :, 0].copy()
    np.testing.assert_array_equal(scales, np.abs(k[0, :, :4]).max(axis=1) / 127)
    write(cache, [1, 2], k, k, start=5)
    np.testing.assert_array_equal(cache.k_scale_LHNK[0, :, 0], scales)  # group 0's scales: unchanged
    assert cache.n_quantized_keys(len(cache)) == 8


def test_non_finite_rows_are_refused_unchanged():
    cache = QuantizedKVCache(1, 1, 4, 2)
    write(cache, [1], np.ones((1, 1, 1, 2), np.float32), np.ones((1, 1, 1, 2), np.float32))
    state = cache_state(cache)
    for bad in (np.nan, np.inf):
        rows = np.array([[[1.0, bad]]], np.float32)
        plan = cache.plan(1)
        with pytest.raises(ValueError, match=r"^k_new: expected finite numbers to quantize"):
            cache.update(0, rows, np.ones_like(rows), plan)
        with pytest.raises(ValueError, match=r"^v_new: expected finite numbers to quantize"):
            cache.update(0, np.ones_like(rows), rows, plan)
    assert_same_state(state, cache_state(cache))


# ---------------------------------------------------------------- the same protocol as the float caches


# Any sequence of protocol calls, good or bad, on this cache against the float reference:
# tests/test_cache_protocol.py, which runs every cache class through the same machine.


# The bad-input tests of test_errors.py (prefill, decode, generate into a filled cache) run on this
# cache too: its `filled` fixture includes the int8 cache in both key modes.


# ---------------------------------------------------------------- construction


def llama(std: float = 0.3) -> LlamaModel:
    """A random Llama-style model: GQA (4 query heads on 2 KV heads of width 16), 48 positions."""
    cfg = LlamaConfig(
        vocab_size=64, d_model=64, n_heads=4, n_layers=2, max_seq_len=48, d_ff=128, n_kv_heads=2
    )
    return LlamaModel.random(cfg, seed=0, std=std)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_for_model_fits_both_models(toy_model, dtype):
    for model in (toy_model, LlamaModel.random(llama().config, dtype=dtype)):
        cfg = model.config
        cache = QuantizedKVCache.for_model(model)
        assert isinstance(cache, kvtutor.KVCacheBase)
        model.check_cache(cache)
        assert (cache.n_layers, cache.n_kv_heads, cache.d_head) == (cfg.n_layers, cfg.n_kv_heads, cfg.d_head)
        assert cache.capacity == cfg.max_seq_len and cache.dtype == model.weights.wte_VD.dtype
        assert cache.key_mode == "per_channel" and cache.group_size == 32
        small = QuantizedKVCache.for_model(model, capacity=5, key_mode="per_token", group_size=2)
        assert (small.capacity, small.key_mode, small.group_size) == (5, "per_token", 2)
        assert len(model.generate([1, 2], 4, cache=small)) == 4 and len(small) == 5
    with pytest.raises(ValueError, match=r"^capacity: expected 1 <= capacity <= 16, got 17"):
        QuantizedKVCache.for_model(toy_model, capacity=17)
    with pytest.raises(
        TypeError,
        match=r"^model: expected a kvtutor model \(.*\), got dict",
    ):
        QuantizedKVCache.for_model({})


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"key_mode": "per_head"}, ValueError, r"^key_mode: expected one of \[.per_channel., .per_token.\]"),
        ({"group_size": 0}, ValueError, r"^group_size: expected an int >= 1, got 0"),
        ({"group_size": 2.0}, TypeError, r"^group_size: expected an int, got float"),
        ({"dtype": np.int8}, TypeError, r"^dtype: expected a floating NumPy dtype"),
        ({"n_layers": 0}, ValueError, r"^n_layers: expected"),
        ({"d_head": "4"}, TypeError, r"^d_head: expected an int"),
    ],
)
def test_bad_construction_arguments(kwargs, exc, match):
    args = {"n_layers": 2, "n_kv_heads": 2, "capacity": 16, "d_head": 4} | kwargs
    with pytest.raises(exc, match=match):
        QuantizedKVCache(**args)


# ---------------------------------------------------------------- bytes


@pytest.mark.parametrize(("key_mode", "group_size"), [("per_channel", 4), ("per_token", 4)])
def test_bytes_count_payload_scales_and_residual(key_mode, group_size):
    model = llama()
    cache = QuantizedKVCache.for_model(model, key_mode=key_mode, group_size=group_size)
    concat = model.new_cache(kind="concat")
    ids = list(range(10))
    model.prefill(ids, cache)
    model.prefill(ids, concat)
    n_layers, n_heads, d_head = 2, 2, 16  # float32 values, float32 scales
    assert cache.float_nbytes == concat.nbytes == 2 * n_layers * n_heads * 10 * d_head * 4
    values = n_layers * n_heads * 10 * (d_head + 4)  # int8 row + one scale per token
    if key_mode == "per_token":
        keys = values
    else:  # 8 positions in 2 full groups: int8 + a scale per channel and group; 2 positions in float
        keys = n_layers * n_heads * (8 * d_head + 2 * d_head * 4 + 2 * d_head * 4)
    assert cache.nbytes == values + keys
    # 16 channels: per token 0.31 of float32's bytes; per channel 0.46 here, because 2 of the 10
    # positions are still float and 2 groups of 4 tokens carry 16 scales each
    ratio = {"per_token": 0.3125, "per_channel": 0.45625}[key_mode]
    assert cache.nbytes / cache.float_nbytes == pytest.approx(ratio)
    reserved = 2 * n_layers * n_heads * 48 * d_head + n_layers * n_heads * 48 * 4
    reserved += n_layers * n_heads * (48 * 4 if key_mode == "per_token" else 12 * d_head * 4)
    reserved += 0 if key_mode == "per_token" else n_layers * n_heads * 2 * d_head * 4
    assert cache.reserved_nbytes == reserved
    cache.truncate(0)
    assert cache.nbytes == cache.float_nbytes == 0


# ---------------------------------------------------------------- greedy tokens, measured


def check_report_against_free_running(model, prompts, n_new, report, key_mode, group_size):
    """first_divergence is where the quantized cache's own greedy text first differs from the float
    cache's: equal before it, different at it."""
    assert isinstance(report, AgreementReport)
    assert report.n_prompts == len(prompts) and report.n_tokens == len(prompts) * n_new
    assert report.n_agree <= report.n_tokens - report.n_diverged
    for prompt, first in zip(prompts, report.first_divergence, strict=True):
        if first is None and prompt is not prompts[0]:
            continue  # free running equals float by construction; checking one such prompt is enough
        cache = QuantizedKVCache.for_model(model, len(prompt) + n_new - 1, key_mode, group_size)
        ours, ref = model.generate(prompt, n_new, cache=cache), model.generate(prompt, n_new)
        stop = n_new if first is None else first
        assert ours[:stop] == ref[:stop]
        if first is not None:
            assert ours[first] != ref[first]


# Measured on this repository (numpy 2, float32), seed 0: 100 prompts of 4 tokens, 12 new tokens
# each, 1200 tokens. Keys per channel in groups of 4: 1198 of 1200 agree (99.8 %), 2 prompts
# diverge, max |logit difference| 0.3076; keys per token: 1198 agree, 2 diverge, max 0.3032. The
# toy model's head is 4 wide, so an int8 row and its float32 scale take half of float32's bytes.
TOY_MEASURED = {"per_channel": (1198, 2, 0.3076), "per_token": (1198, 2, 0.3032)}


@pytest.mark.parametrize("key_mode", KEY_MODES)
def test_greedy_agreement_on_the_toy_model(toy_model, key_mode):
    prompts = random_prompts(toy_model.config.vocab_size, 100, 4, seed=0)
    report = measure_agreement(toy_model, prompts, 12, key_mode=key_mode, group_size=4)
    n_agree, n_diverged, max_diff = TOY_MEASURED[key_mode]
    assert (report.n_prompts, report.n_tokens) == (100, 1200)
    # the measurement, not a wished-for threshold: a platform whose rounding differs may flip a tie
    assert report.n_agree >= n_agree and report.n_diverged <= n_diverged
    assert report.max_logit_diff == pytest.approx(max_diff, abs=1e-3)
    check_report_against_free_running(toy_model, prompts, 12, report, key_mode, 4)


# A random Llama-style model (std 0.3: its logits are nearly flat, so ties are close and easy to
# flip; a trained model separates its tokens more), seed 0, 20 prompts of 8 tokens from seed 1, 40
# new tokens each, 800 tokens, group size 16. Measured: per channel 783 of 800 agree (97.9 %), 13
# prompts diverge, max |logit difference| 0.4415; per token 776 agree (97.0 %), 14 diverge, max 0.5172.
LLAMA_MEASURED = {"per_channel": (783, 13, 0.4415), "per_token": (776, 14, 0.5172)}


@pytest.mark.parametrize("key_mode", KEY_MODES)
def test_greedy_agreement_on_a_random_llama(key_mode):
    model = llama()
    prompts = random_prompts(model.config.vocab_size, 20, 8, seed=1)
    report = measure_agreement(model, prompts, 40, key_mode=key_mode, group_size=16)
    n_agree, n_diverged, max_diff = LLAMA_MEASURED[key_mode]
    assert (report.n_prompts, report.n_tokens) == (20, 800)
    assert report.n_agree >= n_agree and report.n_diverged <= n_diverged
    assert report.max_logit_diff == pytest.approx(max_diff, abs=1e-3)
    assert report.agreement == report.n_agree / 800
    check_report_against_free_running(model, prompts, 40, report, key_mode, 16)


def test_measure_agreement_checks_its_arguments(toy_model):
    with pytest.raises(ValueError, match=r"^prompts: expected at least one prompt"):
        measure_agreement(toy_model, [], 2)
    with pytest.raises(TypeError, match=r"^prompts: expected a list of token-id lists, got str"):
        measure_agreement(toy_model, "The cat", 2)
    with pytest.raises(ValueError, match=r"^prompts\[1\]: expected token ids in \[0, 32\), got 40"):
        measure_agreement(toy_model, [[1], [40]], 2)
    with pytest.raises(ValueError, match=r"^max_new_tokens: expected an int >= 1, got 0"):
        measure_agreement(toy_model, [[1]], 0)
    with pytest.raises(ValueError, match=r"^max_new_tokens: prompt of 3 \+ 15 new tokens exceeds max_seq"):
        measure_agreement(toy_model, [[1, 2, 3]], 15)
    with pytest.raises(ValueError, match=r"^key_mode"):
        measure_agreement(toy_model, [[1]], 2, key_mode="per_row")
    with pytest.raises(ValueError, match=r"^n_prompts: expected an int >= 1, got 0"):
        random_prompts(32, 0, 4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_keys_back_in_float_after_a_truncate_keep_their_rounding_in_the_bounds(dtype):
    """A truncate into a quantized key group returns its rows to float as dequantized values: they
    carry that rounding, and again once the group refills, and error_bounds says so (it said 0)."""
    rng = np.random.default_rng(0)
    c = QuantizedKVCache(1, 2, 8, 3, dtype=dtype, group_size=2)
    written = rng.standard_normal((2, 4, 3)) * np.array([1.0, 10.0, 0.1])
    plan = c.plan(4)
    c.update(0, written.astype(dtype), written.astype(dtype), plan)
    c.advance(plan)
    c.truncate(3)  # inside the second group: its first row goes back to float
    keys, (k_bound, _) = c.keys(0), c.error_bounds(0)
    assert (np.abs(keys - written[:, :3]) <= k_bound * (1 + 1e-5) + 1e-6).all()
    assert (k_bound[:, 2] > 0).all()  # the float row carries its old group's rounding
    more = rng.standard_normal((2, 1, 3))
    plan = c.plan(1)
    c.update(0, more.astype(dtype), more.astype(dtype), plan)
    c.advance(plan)  # the group fills again: quantized anew, two roundings
    want = np.concatenate([written[:, :3], more], axis=1)
    keys, (k_bound, _) = c.keys(0), c.error_bounds(0)
    assert (np.abs(keys - want) <= k_bound * (1 + 1e-5) + 1e-6).all()
    assert (k_bound[:, 2:] >= c.k_carry_LHNK[0, :, 1, None]).all() and c.k_carry_LHNK[0, :, 1].max() > 0
