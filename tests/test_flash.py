"""kvtutor.measure.flash: the online softmax (FlashAttention) and split-KV decode (FlashDecoding) give plain
attention's answer for every shape, block size and split count, GQA, the offset causal mask and
scores large enough to overflow a naive softmax; their merges are associative; bad arguments are
refused by name; the torch twins agree with NumPy."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtutor.measure import flash
from kvtutor.models.gpt2 import attend, attention_scores, attention_weights, causal_mask, repeat_kv

TOL = {np.float32: {"rtol": 2e-4, "atol": 2e-5}, np.float64: {"rtol": 1e-10, "atol": 1e-12}}


def plain_attention(q_HTK, k_HSK, v_HSK, causal=True):
    """The book's attention, in float64: scores, mask, softmax, A V (GQA by repeating K and V)."""
    q_HTK, k_HSK, v_HSK = (np.asarray(x, np.float64) for x in (q_HTK, k_HSK, v_HSK))
    group = q_HTK.shape[0] // k_HSK.shape[0]
    scores_HTS = attention_scores(q_HTK, repeat_kv(k_HSK, group))
    mask_TS = causal_mask(q_HTK.shape[1], k_HSK.shape[1]) if causal else None
    return attend(attention_weights(scores_HTS, q_HTK.shape[2], mask_TS), repeat_kv(v_HSK, group))


@st.composite
def problems(draw, decode=False):
    """(q [H,T,K], k [Hkv,S,K], v [Hkv,S,K]) of one dtype: any GQA group, T <= S."""
    n_kv_heads = draw(st.integers(1, 3))
    n_heads = n_kv_heads * draw(st.integers(1, 3))
    n_keys = draw(st.integers(1, 13))
    n_queries = 1 if decode else draw(st.integers(1, n_keys))
    d_head = draw(st.integers(1, 8))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    scale = draw(st.sampled_from([0.1, 1.0, 5.0]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    q = (scale * rng.normal(size=(n_heads, n_queries, d_head))).astype(dtype)
    k = (scale * rng.normal(size=(n_kv_heads, n_keys, d_head))).astype(dtype)
    v = rng.normal(size=(n_kv_heads, n_keys, d_head)).astype(dtype)
    return q, k, v


# ---------------------------------------------------------------- online softmax (FlashAttention)


@settings(max_examples=150, deadline=None)
@given(problem=problems(), data=st.data(), causal=st.booleans())
def test_online_softmax_equals_plain_attention(problem, data, causal):
    q, k, v = problem
    block_size = data.draw(st.integers(1, k.shape[1] + 1), label="block_size")
    out = flash.online_softmax_attention(q, k, v, block_size, causal=causal)
    assert out.shape == q.shape and out.dtype == q.dtype
    np.testing.assert_allclose(out, plain_attention(q, k, v, causal), **TOL[q.dtype.type])


def test_online_softmax_step_by_hand():
    """Two blocks, one row: the second block raises the max; the rescaled sum is the whole softmax's."""
    s1, s2 = np.array([[[1.0, 2.0]]]), np.array([[[5.0]]])
    v1, v2 = np.array([[[1.0], [2.0]]]), np.array([[[3.0]]])
    state = (np.full((1, 1), -np.inf), np.zeros((1, 1)), np.zeros((1, 1, 1)))
    m, l, acc = flash.online_softmax_step(*state, s1, v1)
    assert m[0, 0] == 2.0 and l[0, 0] == pytest.approx(math.exp(-1) + 1)
    m, l, acc = flash.online_softmax_step(m, l, acc, s2, v2)
    e = np.exp(np.array([1.0, 2.0, 5.0]) - 5.0)
    assert m[0, 0] == 5.0 and l[0, 0] == pytest.approx(e.sum())
    assert acc[0, 0, 0] / l[0, 0] == pytest.approx((e @ [1.0, 2.0, 3.0]) / e.sum())


@settings(max_examples=60, deadline=None)
@given(problem=problems(), data=st.data(), causal=st.booleans())
def test_the_trace_holds_each_blocks_running_values(problem, data, causal):
    """One dict per block, in order; its scores are the block's columns of the scaled, masked score
    matrix; its m is the running max of those, its l and acc what the next step starts from; the
    last acc / l is the output. Tracing changes nothing."""
    q, k, v = problem
    block_size = data.draw(st.integers(1, k.shape[1] + 1), label="block_size")
    trace = []
    out = flash.online_softmax_attention(q, k, v, block_size, causal, trace=trace)
    np.testing.assert_array_equal(out, flash.online_softmax_attention(q, k, v, block_size, causal))
    assert [(b["lo"], b["hi"]) for b in trace] == flash.key_blocks(k.shape[1], block_size)
    group = q.shape[0] // k.shape[0]
    scores = attention_scores(q, repeat_kv(k, group)) / math.sqrt(q.shape[2])
    if causal:
        scores = np.where(causal_mask(q.shape[1], k.shape[1]), scores, -np.inf)
    for b in trace:
        np.testing.assert_allclose(b["s_HTP"], scores[..., b["lo"] : b["hi"]], **TOL[q.dtype.type])
        np.testing.assert_allclose(b["m_HT"], scores[..., : b["hi"]].max(axis=-1), **TOL[q.dtype.type])
        assert b["l_HT"].shape == b["m_HT"].shape == q.shape[:2] and b["acc_HTK"].shape == q.shape
    np.testing.assert_array_equal(trace[-1]["acc_HTK"] / trace[-1]["l_HT"][..., None], out)


def test_blocks_and_mask_cover_the_keys_and_the_book_mask():
    for n_keys, block_size in itertools.product(range(1, 12), range(1, 14)):
        blocks = flash.key_blocks(n_keys, block_size)
        assert blocks[0][0] == 0 and blocks[-1][1] == n_keys
        assert all(hi == lo for (_, hi), (lo, _) in itertools.pairwise(blocks))
        assert all(0 < hi - lo <= block_size for lo, hi in blocks)
        n_queries = 1 + block_size % n_keys
        full = np.concatenate([flash.block_mask(n_queries, n_keys, lo, hi) for lo, hi in blocks], axis=1)
        np.testing.assert_array_equal(full, causal_mask(n_queries, n_keys))


def test_online_softmax_never_holds_all_the_scores():
    """Blocks of 64 keys: the peak of NumPy's allocations stays far below one [H, T, S] score array."""
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(2, 64, 8)), rng.normal(size=(2, 4096, 8)), rng.normal(size=(2, 4096, 8))
    tracemalloc.start()
    try:
        flash.online_softmax_attention(q, k, v, 64)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    scores_bytes = 2 * 64 * 4096 * 8
    assert peak < scores_bytes / 4, (peak, scores_bytes)


# ---------------------------------------------------------------- split-KV decode (FlashDecoding)


@settings(max_examples=150, deadline=None)
@given(problem=problems(decode=True), data=st.data(), squeeze=st.booleans())
def test_split_kv_decode_equals_plain_attention(problem, data, squeeze):
    q_H1K, k, v = problem
    n_splits = data.draw(st.integers(1, k.shape[1]), label="n_splits")
    q = q_H1K[:, 0] if squeeze else q_H1K
    out = flash.split_kv_decode(q, k, v, n_splits)
    assert out.shape == q.shape and out.dtype == q.dtype
    expected = plain_attention(q_H1K, k, v, causal=False)
    np.testing.assert_allclose(out, expected[:, 0] if squeeze else expected, **TOL[q.dtype.type])


def test_split_bounds_cover_the_keys_evenly():
    for n_keys in range(1, 20):
        for n_splits in range(1, n_keys + 1):
            bounds = flash.split_bounds(n_keys, n_splits)
            sizes = [hi - lo for lo, hi in bounds]
            assert len(bounds) == n_splits and bounds[0][0] == 0 and bounds[-1][1] == n_keys
            assert all(hi == lo for (_, hi), (lo, _) in itertools.pairwise(bounds))
            assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1


def partials_of(q, k, v, n_splits):
    return [
        flash.attend_split(q, k[:, lo:hi], v[:, lo:hi]) for lo, hi in flash.split_bounds(k.shape[1], n_splits)
    ]


def assert_same_partial(a, b, tol):
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x, y, **tol)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_splits=st.integers(2, 6),
    data=st.data(),
    dtype=st.sampled_from([np.float32, np.float64]),
)
def test_combine_splits_is_associative_and_order_free(seed, n_splits, data, dtype):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(3, 2, 4)).astype(dtype)
    k = (3 * rng.normal(size=(3, 11, 4))).astype(dtype)
    v = rng.normal(size=(3, 11, 4)).astype(dtype)
    parts = partials_of(q, k, v, n_splits)
    whole = flash.combine_splits(parts)
    tol = TOL[dtype]
    # the whole: the same as one split over every key, and as plain attention
    assert_same_partial(whole, flash.attend_split(q, k, v), tol)
    np.testing.assert_allclose(whole.o_HTK, plain_attention(q, k, v, causal=False), **tol)
    # any order, and any grouping: merge a random run first, then the rest
    order = data.draw(st.permutations(range(n_splits)), label="order")
    shuffled = [parts[i] for i in order]
    assert_same_partial(flash.combine_splits(shuffled), whole, tol)
    lo = data.draw(st.integers(0, n_splits - 1), label="lo")
    hi = data.draw(st.integers(lo + 1, n_splits), label="hi")
    grouped = shuffled[:lo] + [flash.combine_splits(shuffled[lo:hi])] + shuffled[hi:]
    assert_same_partial(flash.combine_splits(grouped), whole, tol)
    # ((a b) c) == (a (b c)) with the last split alone
    left = flash.combine_splits([flash.combine_splits(parts[:-1]), parts[-1]])
    right = flash.combine_splits([parts[0], flash.combine_splits(parts[1:])])
    assert_same_partial(left, right, tol)


# ---------------------------------------------------------------- large scores: nothing overflows


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scores_of_1e4_give_the_right_answer(dtype):
    """Scores near 1e4 (exp overflows at ~89 in float32, ~710 in float64): one key leads every row
    by 60 or more, so the answer is that key's value, in any dtype; and in float64 random scores
    of that size match plain (max-subtracted) attention."""
    d_head, n_keys = 4, 9
    k = np.zeros((1, n_keys, d_head))
    k[0, :, 0] = 5_000.0 - 30.0 * np.arange(n_keys)  # scores 1e4 - 60 s with q = [4, 0, 0, 0]
    k[0, :, 1] = np.arange(n_keys)
    q = np.zeros((1, 3, d_head))
    q[0, :, 0] = 4.0
    v = np.random.default_rng(0).normal(size=(1, n_keys, d_head))
    q, k, v = q.astype(dtype), k.astype(dtype), v.astype(dtype)
    assert (attention_scores(q, k) / math.sqrt(d_head)).max() == pytest.approx(1e4)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        for block_size in (1, 2, 4, n_keys):
            out = flash.online_softmax_attention(q, k, v, block_size, causal=False)
            np.testing.assert_allclose(out, np.broadcast_to(v[:, :1], out.shape), rtol=1e-5, atol=1e-6)
        for n_splits in range(1, n_keys + 1):
            out = flash.split_kv_decode(q[:, :1], k, v, n_splits)
            np.testing.assert_allclose(out[:, 0], v[:, 0], rtol=1e-5, atol=1e-6)
        # the largest score last: every earlier block is rescaled by exp(-60 .. -480)
        out = flash.online_softmax_attention(q, k[:, ::-1], v[:, ::-1], 2, causal=False)
        np.testing.assert_allclose(out, np.broadcast_to(v[:, :1], out.shape), rtol=1e-5, atol=1e-6)
    rng = np.random.default_rng(1)
    q, k, v = 100 * rng.normal(size=(2, 3, 4)), 100 * rng.normal(size=(2, 7, 4)), rng.normal(size=(2, 7, 4))
    assert np.abs(attention_scores(q, k) / 2).max() > 1e4
    with np.errstate(over="raise", invalid="raise"):
        np.testing.assert_allclose(flash.online_softmax_attention(q, k, v, 3), plain_attention(q, k, v))
        np.testing.assert_allclose(
            flash.split_kv_decode(q[:, :1], k, v, 3), plain_attention(q[:, :1], k, v, False)
        )


# ---------------------------------------------------------------- bad arguments, refused by name


def test_bad_block_size_and_n_splits_are_refused_by_name():
    q, k = np.zeros((2, 3, 4)), np.zeros((1, 5, 4))
    for bad, error in (
        (0, ValueError),
        (-1, ValueError),
        (1.5, TypeError),
        (True, TypeError),
        ("2", TypeError),
    ):
        with pytest.raises(error, match="block_size"):
            flash.online_softmax_attention(q, k, k, bad)
    for bad, error in ((0, ValueError), (6, ValueError), (2.0, TypeError), (None, TypeError)):
        with pytest.raises(error, match="n_splits"):
            flash.split_kv_decode(q[:, 0], k, k, bad)
    with pytest.raises(ValueError, match=r"n_splits: expected 1 <= n_splits <= 5, got 6"):
        flash.split_kv_decode(q[:, 0], k, k, 6)


@pytest.mark.parametrize(
    ("q_shape", "k_shape", "v_shape", "causal", "name", "words"),
    [
        ((3, 4), (1, 5, 4), (1, 5, 4), True, "q_HTK", "3 dimensions"),
        ((2, 3, 4), (5, 4), (5, 4), True, "k_HSK", "3 dimensions"),
        ((2, 3, 4), (1, 5, 4), (1, 6, 4), True, "v_HSK", "the shape of k_HSK"),
        ((2, 3, 4), (1, 5, 3), (1, 5, 3), True, "k_HSK", "head dimension K = 4"),
        ((3, 3, 4), (2, 5, 4), (2, 5, 4), True, "k_HSK", "divides H = 3"),
        ((2, 6, 4), (1, 5, 4), (1, 5, 4), True, "q_HTK", "at most S = 5 queries"),
        ((2, 3, 4), (1, 0, 4), (1, 0, 4), False, "k_HSK", "at least one key"),
        ((2, 0, 4), (1, 5, 4), (1, 5, 4), False, "q_HTK", "at least one query"),
    ],
)
def test_bad_shapes_are_refused_by_name(q_shape, k_shape, v_shape, causal, name, words):
    q, k, v = np.zeros(q_shape), np.zeros(k_shape), np.zeros(v_shape)
    with pytest.raises(ValueError, match=rf"^{name}: expected .*{words}"):
        flash.online_softmax_attention(q, k, v, 2, causal=causal)


def test_bad_decode_queries_and_dtypes_are_refused_by_name():
    k = np.zeros((1, 5, 4))
    with pytest.raises(
        ValueError, match=r"q_HK: expected one query per head, \[H, K\] or \[H, 1, K\], got shape \[2, 3, 4\]"
    ):
        flash.split_kv_decode(np.zeros((2, 3, 4)), k, k, 2)
    with pytest.raises(ValueError, match="q_HK: expected one query"):
        flash.split_kv_decode(np.zeros(4), k, k, 2)
    with pytest.raises(TypeError, match="q_HTK: expected a floating array.*int64"):
        flash.online_softmax_attention(np.zeros((2, 3, 4), np.int64), k, k, 2)
    with pytest.raises(TypeError, match="v_HSK: expected a floating array"):
        flash.split_kv_decode(np.zeros((2, 4)), k, k.astype(bool), 2)
    # a T > S query set is fine without the causal mask
    assert flash.online_softmax_attention(np.ones((1, 7, 4)), k, k + 1, 2, causal=False).shape == (1, 7, 4)


def test_kvtutor_flash_imports_without_torch():
    code = "import sys, kvtutor.measure.flash; assert 'torch' not in sys.modules, 'torch was imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------- the torch twins


def batched(problem, batch_size, rng):
    """A batch of problems with the shapes of one: the first row is ``problem`` itself."""
    return [
        np.stack([x] + [rng.normal(size=x.shape).astype(x.dtype) for _ in range(batch_size - 1)])
        for x in problem
    ]


@settings(max_examples=60, deadline=None)
@given(problem=problems(), data=st.data(), causal=st.booleans(), batch_size=st.integers(1, 3))
def test_online_softmax_torch_equals_numpy(problem, data, causal, batch_size):
    torch = pytest.importorskip("torch")
    qs, ks, vs = batched(problem, batch_size, np.random.default_rng(batch_size))
    block_size = data.draw(st.integers(1, ks.shape[2] + 1), label="block_size")
    out = flash.online_softmax_attention_torch(*map(torch.from_numpy, (qs, ks, vs)), block_size, causal)
    assert out.dtype == torch.from_numpy(qs).dtype and out.shape == qs.shape
    for b in range(batch_size):
        expected = flash.online_softmax_attention(qs[b], ks[b], vs[b], block_size, causal)
        np.testing.assert_allclose(out[b].numpy(), expected, **TOL[qs.dtype.type])


@settings(max_examples=60, deadline=None)
@given(problem=problems(decode=True), data=st.data(), squeeze=st.booleans(), batch_size=st.integers(1, 3))
def test_split_kv_decode_torch_equals_numpy(problem, data, squeeze, batch_size):
    torch = pytest.importorskip("torch")
    qs, ks, vs = batched(problem, batch_size, np.random.default_rng(batch_size))
    n_splits = data.draw(st.integers(1, ks.shape[2]), label="n_splits")
    q = qs[:, :, 0] if squeeze else qs
    out = flash.split_kv_decode_torch(*map(torch.from_numpy, (q, ks, vs)), n_splits)
    plain = flash.plain_attention_torch(*map(torch.from_numpy, (qs, ks, vs)))
    assert out.shape == q.shape
    for b in range(batch_size):
        expected = flash.split_kv_decode(q[b], ks[b], vs[b], n_splits)
        np.testing.assert_allclose(out[b].numpy(), expected, **TOL[qs.dtype.type])
        np.testing.assert_allclose(
            plain[b].numpy(), plain_attention(qs[b], ks[b], vs[b], False), **TOL[qs.dtype.type]
        )


def test_torch_partials_merge_like_numpy():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    q, k, v = rng.normal(size=(2, 3, 2, 4)), rng.normal(size=(2, 3, 10, 4)), rng.normal(size=(2, 3, 10, 4))
    tq, tk, tv = map(torch.from_numpy, (q, k, v))
    bounds = flash.split_bounds(10, 4)
    parts = [flash.attend_split_torch(tq, tk[:, :, lo:hi], tv[:, :, lo:hi]) for lo, hi in bounds]
    whole = flash.combine_splits_torch(parts)
    left = flash.combine_splits_torch([flash.combine_splits_torch(parts[:2]), *parts[2:]])
    for b in range(2):
        expected = flash.combine_splits(partials_of(q[b], k[b], v[b], 4))
        for got, want, other in zip(whole, expected, left, strict=True):
            np.testing.assert_allclose(got[b].numpy(), want, **TOL[np.float64])
            np.testing.assert_allclose(other[b].numpy(), want, **TOL[np.float64])


def test_torch_twins_take_bf16_and_keep_its_dtype():
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 4, n, 8, generator=gen) for n in (3, 9, 9))
    k, v = k[:, :2], v[:, :2]
    expected = flash.online_softmax_attention_torch(q, k, v, 4)
    out = flash.online_softmax_attention_torch(q.bfloat16(), k.bfloat16(), v.bfloat16(), 4)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), expected, rtol=0.05, atol=0.05)
    out = flash.split_kv_decode_torch(q[:, :, 0].bfloat16(), k.bfloat16(), v.bfloat16(), 3)
    assert out.dtype == torch.bfloat16 and out.shape == (1, 4, 8)


def test_split_kv_torch_reads_bf16_keys_and_values_without_a_float32_copy():
    """Only the small arrays (query rows, scores, weights, partial outputs) change dtype; no slice
    of K or V is copied to float32 before it is read."""
    torch = pytest.importorskip("torch")
    from torch.utils._python_dispatch import TorchDispatchMode

    copied = []

    class Copies(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket.__name__ == "_to_copy":
                copied.append(tuple(args[0].shape))
            return func(*args, **(kwargs or {}))

    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, 8, generator=gen).bfloat16()
    k, v = (torch.randn(1, 2, 40, 8, generator=gen).bfloat16() for _ in "kv")
    with Copies():
        out = flash.split_kv_decode_torch(q, k, v, 4)
    assert out.dtype == torch.bfloat16 and copied
    assert all(shape[-2:] != (10, 8) for shape in copied), copied  # a split of K or V: [1, 2, 10, 8]
    expected = flash.split_kv_decode_torch(q.double(), k.double(), v.double(), 4)
    torch.testing.assert_close(out.double(), expected, rtol=0.03, atol=0.03)


def test_torch_twins_refuse_bad_arguments_by_name():
    torch = pytest.importorskip("torch")
    q, k = torch.zeros(1, 2, 3, 4), torch.zeros(1, 1, 5, 4)
    with pytest.raises(TypeError, match="q_BHTK: expected a floating torch tensor, got ndarray"):
        flash.online_softmax_attention_torch(q.numpy(), k, k, 2)
    with pytest.raises(TypeError, match="k_BHSK: expected a floating torch tensor, got dtype torch.int64"):
        flash.online_softmax_attention_torch(q, k.long(), k, 2)
    with pytest.raises(ValueError, match="k_BHSK: expected batch size 1"):
        flash.online_softmax_attention_torch(q, k.expand(2, -1, -1, -1), k.expand(2, -1, -1, -1), 2)
    with pytest.raises(ValueError, match="q_BHTK: expected 4 dimensions"):
        flash.online_softmax_attention_torch(q[0], k, k, 2)
    with pytest.raises(ValueError, match="block_size"):
        flash.online_softmax_attention_torch(q, k, k, 0)
    with pytest.raises(
        ValueError, match=r"q_BHK: expected one query per head, \[B, H, K\] or \[B, H, 1, K\]"
    ):
        flash.split_kv_decode_torch(q, k, k, 2)
    with pytest.raises(ValueError, match="n_splits"):
        flash.split_kv_decode_torch(q[:, :, 0], k, k, 6)


# ---------------------------------------------------------------- SDPA's backend and the measurement


def test_sdpa_backend_names_a_documented_backend():
    torch = pytest.importorskip("torch")
    for kwargs in ({}, {"n_heads": 8, "n_kv_heads": 2, "n_queries": 4, "is_causal": True}, {"dtype": "bf16"}):
        backend = flash.sdpa_backend(n_keys=64, device="cpu", **kwargs)
        assert backend.name in flash.SDPA_BACKENDS, backend
        assert backend.op.startswith("aten::") and "scaled_dot_product" in backend.op, backend
    # forcing the composite path is seen as such
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        assert flash.sdpa_backend(n_keys=16, device="cpu").name == "math"
    assert torch.get_num_threads() >= 1
    with pytest.raises(ValueError, match="n_kv_heads: expected a divisor of n_heads = 8, got 3"):
        flash.sdpa_backend(n_heads=8, n_kv_heads=3, device="cpu")
    with pytest.raises(ValueError, match="n_keys"):
        flash.sdpa_backend(n_keys=0, device="cpu")


def test_measure_decode_attention_returns_a_row_per_context():
    """Tiny sizes, and no assertion on speed: only the rows' shape and bookkeeping."""
    pytest.importorskip("torch")
    rows = flash.measure_decode_attention(
        contexts=(16, 40), n_heads=4, n_kv_heads=2, d_head=8, n_splits=3, device="cpu", min_run_time=0.001
    )
    assert [row["keys"] for row in rows] == [16, 40]
    for row in rows:
        assert row["kv_bytes"] == 2 * 2 * row["keys"] * 8 * 4
        assert row["sdpa_backend"] in flash.SDPA_BACKENDS
        for way in ("plain", "sdpa", "split_kv"):
            assert row[f"{way}_s"] > 0
            assert row[way] == pytest.approx(row["kv_bytes"] / row[f"{way}_s"] / row["ceiling_bytes_per_s"])
        # SDPA is one fused operator; plain three passes; the twin about a dozen per split
        assert row["sdpa_ops"] == 1 and row["plain_ops"] == 6
        assert 12 * 3 <= row["split_kv_ops"] <= 12 * 3 + 20
    one = flash.measure_decode_attention(contexts=(8,), n_heads=2, d_head=4, n_kv_heads=1, n_splits=1,
                                         device="cpu", min_run_time=0.001, rounds=1)  # fmt: skip
    assert one[0]["split_kv_ops"] < rows[0]["split_kv_ops"]
    for bad, error in ((0, ValueError), (1.5, TypeError)):
        with pytest.raises(error, match="rounds"):
            flash.measure_decode_attention(contexts=(4,), n_splits=2, device="cpu", rounds=bad)
    with pytest.raises(ValueError, match="n_splits"):
        flash.measure_decode_attention(contexts=(4,), n_splits=5, device="cpu")
    with pytest.raises(ValueError, match=r"contexts\[1\]"):
        flash.measure_decode_attention(contexts=(4, 0), device="cpu")
    with pytest.raises(ValueError, match="n_kv_heads"):
        flash.measure_decode_attention(n_heads=4, n_kv_heads=3, device="cpu")


# ---------------------------------------------------------------- the chapter's figures


def test_figures_draw_the_trace_and_the_rows():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kvtutor.plots import flash as flash_plots

    rng = np.random.default_rng(11)
    q, k, v = (rng.normal(size=(2, n, 4)) for n in (3, 24, 24))
    trace = []
    flash.online_softmax_attention(q, k, v, 8, causal=True, trace=trace)
    fig = flash_plots.plot_online_softmax(trace, head=1, query=0)
    ax_m, ax_l = fig.axes
    scores = np.concatenate([b["s_HTP"][1, 0] for b in trace])
    points = sum(len(ln.get_xdata()) for ln in ax_m.lines if ln.get_marker() == "o")
    assert points == np.isfinite(scores).sum() == 22  # query 0 of 3 sees keys 0 .. 21
    (l_line, at_final) = ax_l.lines[:2]
    np.testing.assert_allclose(l_line.get_ydata(), [b["l_HT"][1, 0] for b in trace])
    assert at_final.get_ydata()[-1] == pytest.approx(trace[-1]["l_HT"][1, 0])
    assert [t.get_text() for t in ax_l.get_legend().get_texts()] == ["running sum l", "l at the final max"]
    with pytest.raises(ValueError, match=r"^head, query: expected a row of the \[2, 3\] trace, got \(2, 0\)"):
        flash_plots.plot_online_softmax(trace, head=2)
    with pytest.raises(ValueError, match="^trace: expected"):
        flash_plots.plot_online_softmax([])
    rows = [
        {"keys": s, "kv_bytes": 1024 * s, "plain": 0.5, "sdpa": 0.8, "split_kv": 0.3 * i}
        for i, s in enumerate((64, 256), 1)
    ]
    fig = flash_plots.plot_decode_attention(rows, title="here")
    (ax,) = fig.axes
    assert ax.get_title() == "here"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["64\n0.0625 MiB", "256\n0.25 MiB"]
    np.testing.assert_allclose(ax.lines[2].get_ydata(), [0.3, 0.6])
    with pytest.raises(ValueError, match="^rows: expected"):
        flash_plots.plot_decode_attention([])
    plt.close("all")


def test_the_figure_module_imports_without_matplotlib():
    code = "import sys, kvtutor.plots.flash; assert 'matplotlib' not in sys.modules, 'matplotlib imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
