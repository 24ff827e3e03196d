"""The sliding-window cache (a ring buffer) and attention sinks: the logits of a full cache under
the banded mask, for GPT-2 and the Llama twin, prefill and decode, chunked or not; flat memory;
the cache protocol and its errors; the mask hook of attention_core; measure_eviction."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_same_state, cache_state
from hypothesis import given, settings
from hypothesis import strategies as st
from protocol_ops import operations
from test_errors import BAD_PREFILL, BAD_TOKEN

import kvtutor
from kvtutor.caches.kv import PreallocatedKVCache
from kvtutor.caches.window import (
    BandedKVCache,
    EvictionReport,
    SlidingWindowKVCache,
    check_window,
    kept_positions,
    measure_eviction,
    window_mask,
)
from kvtutor.models.gpt2 import causal_mask
from kvtutor.models.llama import LlamaConfig, LlamaModel

# ---------------------------------------------------------------- the mask


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 30), st.data())
def test_window_mask_rows_see_the_sinks_and_the_last_w_minus_sinks(n, data):
    window = data.draw(st.integers(1, n))
    n_sink = data.draw(st.integers(0, window - 1))
    mask_TS = window_mask(np.arange(n), np.arange(n), window, n_sink)
    for p in range(n):
        seen = set(np.flatnonzero(mask_TS[p]).tolist())
        want = {s for s in range(p + 1) if s < n_sink or s > p - (window - n_sink)}
        assert seen == want
        assert len(seen) == min(p + 1, window)  # W keys once the window is full: the same memory
        assert p in seen  # every query sees itself
    assert not (mask_TS & ~causal_mask(n, n)).any()  # never a key from the future
    # a window as long as the sequence is the causal mask
    assert np.array_equal(window_mask(np.arange(n), np.arange(n), n, 0), causal_mask(n, n))


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 40), st.data())
def test_kept_positions_are_the_sinks_and_the_last_window_minus_sinks(length, data):
    window = data.draw(st.integers(1, 12))
    n_sink = data.draw(st.integers(0, window - 1))
    kept = kept_positions(length, window, n_sink).tolist()
    assert kept == sorted(set(kept)) and len(kept) == min(length, window)
    assert kept[: min(length, n_sink)] == list(range(min(length, n_sink)))
    recent = [s for s in kept if s >= n_sink]
    assert recent == list(range(length - len(recent), length))


# ---------------------------------------------------------------- the ring against the banded reference


@st.composite
def gpt2_case(draw):
    n_kv = draw(st.sampled_from([1, 2]))
    n_heads = n_kv * draw(st.integers(1, 3))
    cfg = kvtutor.GPT2Config(
        vocab_size=draw(st.integers(5, 40)),
        d_model=n_heads * draw(st.integers(1, 5)),
        n_heads=n_heads,
        n_layers=draw(st.integers(1, 3)),
        max_seq_len=draw(st.integers(2, 24)),
        n_kv_heads=n_kv,
    )
    return kvtutor.GPT2Model.random(cfg, seed=draw(st.integers(0, 2**16)), dtype=np.float64)


@st.composite
def llama_case(draw):
    n_kv = draw(st.sampled_from([1, 2]))
    n_heads = n_kv * draw(st.integers(1, 3))
    d_head = 2 * draw(st.integers(1, 3))
    cfg = LlamaConfig(
        vocab_size=draw(st.integers(5, 40)),
        d_model=draw(st.integers(2, 16)),
        n_heads=n_heads,
        n_layers=draw(st.integers(1, 3)),
        max_seq_len=draw(st.integers(2, 40)),
        d_ff=draw(st.integers(1, 24)),
        n_kv_heads=n_kv,
        d_head=d_head,
    )
    seed = draw(st.integers(0, 2**16))
    return LlamaModel.random(cfg, seed=seed, dtype=np.float64, std=0.3)


@st.composite
def run_plan(draw, model):
    """Token ids filling up to max_seq_len positions, a window with sinks, and the chunks: a first
    chunk (the prompt), then chunks of any size, decode steps (size 1) among them."""
    cfg = model.config
    n_total = draw(st.integers(1, cfg.max_seq_len))
    ids = draw(st.lists(st.integers(0, cfg.vocab_size - 1), min_size=n_total, max_size=n_total))
    window = draw(st.integers(1, cfg.max_seq_len))
    n_sink = draw(st.integers(0, window - 1))
    chunks, left = [], n_total
    while left:
        size = draw(st.sampled_from([1, 1, draw(st.integers(1, left))]))
        chunks.append(min(size, left))
        left -= chunks[-1]
    return ids, window, n_sink, chunks


def run_chunks(model, ids, chunks, cache):
    """Each chunk through the cache (decode_step for a single token after the first chunk); the
    logits of every position, stacked, and the cache's nbytes after each chunk."""
    rows, sizes, at = [], [], 0
    for i, n in enumerate(chunks):
        if i and n == 1:
            rows.append(model.decode_step(ids[at], cache)[None])
        else:
            rows.append(model.forward(ids[at : at + n], cache))
        at += n
        sizes.append(cache.nbytes)
    return np.concatenate(rows), sizes


def assert_ring_equals_banded(model, plan):
    ids, window, n_sink, chunks = plan
    ring = SlidingWindowKVCache.for_model(model, window, n_sink)
    banded = BandedKVCache.for_model(model, window, n_sink)
    got_TV, ring_bytes = run_chunks(model, ids, chunks, ring)
    want_TV, _ = run_chunks(model, ids, chunks, banded)
    np.testing.assert_allclose(got_TV, want_TV, rtol=1e-9, atol=1e-12)
    # the same rows, at the positions the window keeps, and memory of min(len, W) positions
    kept = kept_positions(len(ids), window, n_sink)
    assert len(ring) == len(banded) == len(ids)
    assert ring.positions().tolist() == kept.tolist()
    for layer in range(model.config.n_layers):
        np.testing.assert_allclose(ring.keys(layer), banded.keys(layer)[:, kept], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(ring.values(layer), banded.values(layer)[:, kept], rtol=1e-9, atol=1e-12)
    per_position = 2 * ring.k_LHWK.nbytes // window
    at = np.cumsum(chunks)
    assert ring_bytes == [per_position * min(n, window) for n in at]
    assert ring.reserved_nbytes == per_position * window


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_gpt2_ring_gives_the_logits_of_a_full_cache_with_the_banded_mask(data):
    model = data.draw(gpt2_case())
    assert_ring_equals_banded(model, data.draw(run_plan(model)))


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_llama_ring_gives_the_logits_of_a_full_cache_with_the_banded_mask(data):
    model = data.draw(llama_case())
    assert_ring_equals_banded(model, data.draw(run_plan(model)))


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_a_window_that_covers_everything_is_the_plain_full_cache(data):
    """The reference is not trivially the ring itself: with W >= the sequence and no sinks, the
    banded cache and the ring give exactly the full cache's logits."""
    model = data.draw(st.one_of(gpt2_case(), llama_case()))
    ids, _, _, chunks = data.draw(run_plan(model))
    full_TV, _ = run_chunks(model, ids, chunks, model.new_cache())
    for cache in (
        BandedKVCache.for_model(model, model.config.max_seq_len),
        SlidingWindowKVCache.for_model(model, model.config.max_seq_len),
    ):
        got_TV, _ = run_chunks(model, ids, chunks, cache)
        np.testing.assert_array_equal(got_TV, full_TV)


def test_the_band_changes_the_logits_once_the_window_is_passed(toy_model):
    ids = [1, 2, 3, 4, 5, 6, 7, 8]
    full_TV = toy_model.logits_without_cache(ids)
    for n_sink in (0, 1):
        ring = SlidingWindowKVCache.for_model(toy_model, 3, n_sink)
        got_TV = toy_model.prefill(ids, ring)
        np.testing.assert_allclose(got_TV[:3], full_TV[:3], rtol=1e-5, atol=1e-6)  # within the window
        assert np.abs(got_TV[3:] - full_TV[3:]).max(axis=-1).min() > 1e-3  # every later position


def test_chunk_longer_than_the_window_and_decode_after_it(toy_model):
    """A prefill of 12 tokens into a window of 4 keeps the last 4 rows; decoding on gives the
    banded reference's tokens, and memory stays at 4 positions per layer."""
    prompt = [5, 9, 2, 7, 1, 3, 8, 4, 6, 2, 11, 3]
    ring = SlidingWindowKVCache.for_model(toy_model, 4)
    banded = BandedKVCache.for_model(toy_model, 4)
    new_ring = toy_model.generate(prompt, 5, cache=ring)
    new_banded = toy_model.generate(prompt, 5, cache=banded)
    assert new_ring == new_banded
    assert ring.positions().tolist() == [12, 13, 14, 15] and len(ring) == 16
    assert ring.keys(0).shape == (2, 4, 4) and ring.nbytes == ring.reserved_nbytes


def test_llama_long_generation_keeps_flat_memory_and_the_reference_tokens():
    """300 tokens on the Llama twin, window 16 with 4 sinks: positions up to 331, far beyond the
    window; the kept keys keep their rotation, so the tokens are the banded full cache's."""
    cfg = LlamaConfig(
        vocab_size=64, d_model=32, n_heads=4, n_layers=2, max_seq_len=400, d_ff=64, n_kv_heads=2
    )
    model = LlamaModel.random(cfg, seed=3, std=0.2)
    prompt = list(range(32))
    ring = SlidingWindowKVCache.for_model(model, 16, n_sink=4)
    banded = BandedKVCache.for_model(model, 16, n_sink=4)
    sizes = []
    logits_ring = [model.prefill(prompt, ring)[-1]]
    logits_banded = [model.prefill(prompt, banded)[-1]]
    for _ in range(300):
        token = int(np.argmax(logits_banded[-1]))
        logits_ring.append(model.decode_step(token, ring))
        logits_banded.append(model.decode_step(token, banded))
        sizes.append(ring.nbytes)
    np.testing.assert_allclose(np.stack(logits_ring), np.stack(logits_banded), rtol=1e-4, atol=1e-5)
    assert set(sizes) == {ring.reserved_nbytes} == {2 * 2 * 2 * 16 * 8 * 4}
    assert ring.positions().tolist() == [0, 1, 2, 3, *range(320, 332)]
    assert banded.nbytes > 20 * ring.nbytes  # the reference keeps every position


# ---------------------------------------------------------------- the mask hook


def test_attention_core_takes_the_mask_from_the_cache(toy_model):
    """A cache answers its mask with its keys; one that answers a mask of the wrong shape or type
    is refused, naming the class, before attention uses it."""

    class BadMask(PreallocatedKVCache):
        wrong = np.ones((2, 2), dtype=bool)

        def update(self, layer, k_HTK, v_HTK, plan):
            k_HSK, v_HSK, _ = super().update(layer, k_HTK, v_HTK, plan)
            return k_HSK, v_HSK, self.wrong

    bad = BadMask(2, 2, 16, 4)
    with pytest.raises(
        ValueError, match=r"^cache.update: expected a mask of None or a bool array of shape \[3, 3\]"
    ):
        toy_model.prefill([1, 2, 3], bad)
    BadMask.wrong = np.ones((3, 3), dtype=int)
    with pytest.raises(ValueError, match=r"shape \[3, 3\] from BadMask.update, got int64 \[3, 3\]"):
        toy_model.prefill([1, 2, 3], bad)
    BadMask.wrong = [[True] * 3] * 3
    with pytest.raises(ValueError, match=r"got list"):
        toy_model.prefill([1, 2, 3], bad)
    assert len(bad) == 0
    # a mask that lets each query see only its own key: position 0 is as causal (it sees only
    # itself there too), the later ones are not
    BadMask.wrong = np.eye(3, dtype=bool)
    own_TV = toy_model.prefill([1, 2, 3], bad)
    causal_TV = toy_model.logits_without_cache([1, 2, 3])
    np.testing.assert_allclose(own_TV[0], causal_TV[0], rtol=1e-5, atol=1e-6)
    assert np.abs(own_TV[1:] - causal_TV[1:]).max(axis=-1).min() > 1e-3


# ---------------------------------------------------------------- the protocol and its errors


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_protocol_matches_the_banded_cache_at_the_kept_positions(data):
    """Any sequence of protocol calls, good or bad: the ring gives the banded cache's errors and
    lengths, returns its rows and its mask at the positions it attends, and holds its rows at the
    positions it keeps; only a truncate that would need rows evicted before the last advance is
    refused (and changes nothing): what the last advance pushed out comes back."""
    n_layers, n_heads, d_head, capacity = 2, 2, 3, data.draw(st.integers(1, 10))
    window = data.draw(st.integers(1, capacity))
    n_sink = data.draw(st.integers(0, window - 1))
    banded = BandedKVCache(n_layers, n_heads, capacity, d_head, window, n_sink)
    ring = SlidingWindowKVCache(n_layers, n_heads, capacity, d_head, window, n_sink)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    plans: dict[int, object] = {id(banded): None, id(ring): None}
    restorable = np.zeros(0, np.int64)  # what the last advance pushed out of the ring, or dropped
    for kind, number, fault in data.draw(operations(n_layers, capacity)):
        held, start = ring.positions(), len(ring)
        n_new = 1 + number % capacity
        layer = number % n_layers if fault != "layer_out" else n_layers
        count = number % (len(ring) + 1) if fault is None else len(ring) + 1 + number
        n_plan = 1 if plans[id(ring)] is None else plans[id(ring)].n_new
        k = rng.standard_normal((n_heads + (fault == "k_heads"), n_plan, d_head)).astype(np.float32)
        v = rng.standard_normal((n_heads, n_plan, d_head)).astype(np.float32)
        if kind == "truncate":
            lost = np.setdiff1d(kept_positions(count, window, n_sink), ring.positions())
            if 0 <= count <= len(ring) and np.setdiff1d(lost, restorable).size:
                before = cache_state(ring)
                with pytest.raises(ValueError, match="which this window has evicted"):
                    ring.truncate(count)
                assert_same_state(before, cache_state(ring))
                continue
        results = []
        for cache in (banded, ring):
            plan = plans[id(cache)]
            try:
                if kind == "plan":
                    got = plans[id(cache)] = cache.plan(n_new)
                    got = None
                elif kind == "update":
                    got = list(cache.update(layer, k, v, plan))
                    if cache is banded:
                        attended = ring.attended_positions(plan.n_new)
                        mask = got[2] if got[2] is not None else causal_mask(plan.n_new, got[0].shape[1])
                        got = [got[0][:, attended], got[1][:, attended], mask[:, attended]]
                    elif got[2] is None:  # one query: it sees every key returned
                        got[2] = np.ones((plan.n_new, got[0].shape[1]), dtype=bool)
                elif kind == "advance":
                    got = cache.advance(plan)
                    plans[id(cache)] = None
                elif kind == "truncate":
                    got = cache.truncate(count)
                    plans[id(cache)] = None
                else:
                    got = [cache.keys(layer % n_layers), cache.values(layer % n_layers)]
                    got = [a[:, ring.positions()] for a in got] if cache is banded else got
                results.append(("ok", got))
            except (TypeError, ValueError) as exc:
                results.append((type(exc), str(exc)))
        (tag_b, got_b), (tag_r, got_r) = results
        assert tag_b == tag_r, (kind, number, fault, got_b, got_r)
        if kind == "advance" and tag_b == "ok" and len(ring) > start:
            restorable = np.concatenate([held, np.arange(start, len(ring))])
        if tag_b == "ok" and got_b is not None:
            for a, b in zip(got_b, got_r, strict=True):
                np.testing.assert_array_equal(a, b)
        elif tag_b != "ok":
            assert got_b == got_r.replace("SlidingWindowKVCache", "BandedKVCache")
        assert len(banded) == len(ring)
        kept = ring.positions()
        for i in range(n_layers):
            np.testing.assert_array_equal(ring.keys(i), banded.keys(i)[:, kept])
            np.testing.assert_array_equal(ring.values(i), banded.values(i)[:, kept])


@pytest.fixture(params=[(3, 0), (3, 1), (8, 2)])
def filled(request, toy_model):
    """As in test_errors: a window cache holding [1, 2, 3] then 4 (a window of 3 has evicted one)."""
    window, n_sink = request.param
    cache = SlidingWindowKVCache.for_model(toy_model, window, n_sink)
    toy_model.prefill([1, 2, 3], cache)
    toy_model.decode_step(4, cache)
    return toy_model, cache


def full_state(cache):
    length, arrays = cache_state(cache)
    return length, [*arrays, cache.k_LHWK.copy(), cache.v_LHWK.copy()]


@pytest.mark.parametrize(("ids", "exc", "match"), BAD_PREFILL)
def test_bad_prefill_input_is_rejected_and_cache_unchanged(filled, ids, exc, match):
    model, cache = filled
    before = full_state(cache)
    with pytest.raises(exc, match=match):
        model.prefill(ids, cache)
    assert_same_state(before, full_state(cache))


@pytest.mark.parametrize(("token", "exc", "match"), BAD_TOKEN)
def test_bad_decode_token_is_rejected_and_cache_unchanged(filled, token, exc, match):
    model, cache = filled
    before = full_state(cache)
    with pytest.raises(exc, match=match):
        model.decode_step(token, cache)
    assert_same_state(before, full_state(cache))


def test_a_forward_pass_that_fails_half_way_changes_nothing(filled):
    """update() on some layers only (a pass that raised in between): the ring is untouched, and
    advance() refuses."""
    model, cache = filled
    before = full_state(cache)
    rows = np.ones((2, 2, 4), np.float32)
    plan = cache.plan(2)
    cache.update(0, rows, rows, plan)
    assert_same_state(before, full_state(cache))
    with pytest.raises(ValueError, match=r"^plan: layers \[1\] were not written under this plan"):
        cache.advance(plan)
    assert_same_state(before, full_state(cache))


def test_truncate_refuses_evicted_rows_and_allows_the_rest(toy_model):
    cache = SlidingWindowKVCache.for_model(toy_model, 4, n_sink=1)
    toy_model.prefill([1, 2, 3], cache)
    cache.truncate(2)  # nothing evicted yet: any length
    assert len(cache) == 2 and cache.positions().tolist() == [0, 1]
    toy_model.forward([5, 6, 7, 8], cache)  # 6 positions: 1 and 2 evicted
    toy_model.decode_step(9, cache)  # 7 positions: 3 evicted too, by the last advance
    before = full_state(cache)
    with pytest.raises(
        ValueError, match=r"^length: a cache of length 5 keeps positions 2\.\.3, which this window"
    ):
        cache.truncate(5)  # 3 could come back, 2 not: refused, nothing changed
    assert_same_state(before, full_state(cache))
    cache.truncate(7)  # the current length: a no-op
    assert_same_state(before, full_state(cache))
    cache.truncate(1)  # only the sink
    assert cache.positions().tolist() == [0] and cache.nbytes == cache.reserved_nbytes // 4
    np.testing.assert_array_equal(cache.keys(0), before[1][0][:, :1])


@pytest.mark.parametrize(("window", "n_sink"), [(3, 0), (4, 1), (2, 1)])
@pytest.mark.parametrize("chunk", [1, 2, 5])  # 5: longer than the ring, rows dropped from it come back too
def test_truncate_undoes_the_last_advance(toy_model, window, n_sink, chunk):
    """Any length back to where the last advance started: the same rows, and the same logits after,
    as a cache that never saw the rows truncated away (up to the rounding of another chunking)."""
    ids, more = [1, 2, 3, 4, 5, 6, 7], [8, 9, 10, 11, 12][:chunk]
    for length in range(len(ids), len(ids) + chunk + 1):
        cache = SlidingWindowKVCache.for_model(toy_model, window, n_sink)
        toy_model.prefill(ids, cache)
        toy_model.forward(more, cache)
        cache.truncate(length)
        ref = SlidingWindowKVCache.for_model(toy_model, window, n_sink)
        toy_model.prefill((ids + more)[:length], ref)
        (n, got), (n_ref, want) = cache_state(cache), cache_state(ref)
        assert n == n_ref == length and cache.positions().tolist() == ref.positions().tolist()
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(
            toy_model.decode_step(13, cache), toy_model.decode_step(13, ref), rtol=1e-5, atol=1e-5
        )


@pytest.mark.parametrize(("window", "n_sink"), [(4, 0), (3, 1), (2, 0), (6, 2)])
@pytest.mark.parametrize("k", [1, 3, 6])
def test_speculative_decoding_rolls_back_within_the_window(toy_model, window, n_sink, k):
    """speculative_generate on a window cache used to fail part-way (a rejected guess needed rows the
    ring had evicted; the message was about ``length``, an argument never passed) and left the cache
    empty. The ring keeps what the last advance pushed out, so every round rolls back: the tokens
    are plain greedy decoding's on the same window, and the cache ends holding the same rows."""
    from kvtutor.serving.speculative import PromptLookupDraft, layer_cut_draft, speculative_run

    prompt = [1, 2, 3, 1, 2, 3, 1]
    n_new = toy_model.config.max_seq_len - len(prompt) + 1
    plain = SlidingWindowKVCache.for_model(toy_model, window, n_sink)
    want = toy_model.generate(prompt, n_new, cache=plain)
    rejected = 0
    for draft in (PromptLookupDraft(), layer_cut_draft(toy_model, 1)):
        cache = SlidingWindowKVCache.for_model(toy_model, window, n_sink)
        result = speculative_run(toy_model, draft, prompt, n_new, k=k, cache=cache)
        assert result.tokens == want
        rejected += sum(p - a for p, a in zip(result.proposed, result.accepted, strict=True))
        (n, got), (n_plain, rows) = cache_state(cache), cache_state(plain)
        assert n == n_plain == len(prompt) + n_new - 1
        for a, b in zip(got, rows, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert rejected > 0  # guesses were rolled back past what the window had evicted


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"window": 0}, ValueError, r"^window: expected 1 <= window <= 16, got 0"),
        ({"window": 17}, ValueError, r"^window: expected 1 <= window <= 16, got 17"),
        ({"window": 2.0}, TypeError, r"^window: expected an int, got float"),
        ({"window": 4, "n_sink": 4}, ValueError, r"^n_sink: expected 0 <= n_sink <= 3, got 4"),
        ({"window": 4, "n_sink": -1}, ValueError, r"^n_sink: expected 0 <= n_sink <= 3, got -1"),
        ({"window": 4, "n_sink": True}, TypeError, r"^n_sink: expected an int, got bool"),
        ({"window": 4, "capacity": 17}, ValueError, r"^capacity: expected 1 <= capacity <= 16, got 17"),
        ({"window": 8, "capacity": 4}, ValueError, r"^window: expected 1 <= window <= 4, got 8"),
    ],
)
@pytest.mark.parametrize("cls", [SlidingWindowKVCache, BandedKVCache])
def test_bad_construction_names_the_argument(toy_model, cls, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        cls.for_model(toy_model, **kwargs)


def test_bad_sizes_and_models_are_refused():
    with pytest.raises(ValueError, match=r"^d_head: expected an int >= 1, got 0"):
        SlidingWindowKVCache(1, 1, 4, 0, 2)
    with pytest.raises(TypeError, match=r"^dtype"):
        SlidingWindowKVCache(1, 1, 4, 2, 2, dtype=np.int32)
    with pytest.raises(
        TypeError,
        match=r"^model: expected a kvtutor model \(.*\), got str",
    ):
        SlidingWindowKVCache.for_model("gpt2", 4)
    with pytest.raises(ValueError, match=r"^n_new: expected an int >= 1, got 0"):
        SlidingWindowKVCache(1, 1, 4, 2, 2).plan(0)
    assert check_window(np.int64(3), np.int64(1), 4) == (3, 1)


def test_a_cache_of_another_model_is_refused(toy_model):
    cfg = LlamaConfig(vocab_size=32, d_model=8, n_heads=2, n_layers=3, max_seq_len=16, d_ff=8)
    cache = SlidingWindowKVCache.for_model(LlamaModel.random(cfg), 4)
    with pytest.raises(ValueError, match=r"cache: expected \(layers, kv heads, head dim\) = \(2, 2, 4\)"):
        toy_model.prefill([1, 2], cache)
    assert len(cache) == 0


# ---------------------------------------------------------------- measuring what eviction loses


def test_measure_eviction_without_eviction_loses_nothing(toy_model):
    """A window as long as prompt + new tokens evicts nothing: every token agrees, KL 0."""
    reports = measure_eviction(toy_model, [[1, 2, 3], [4, 5]], 6, 8, n_sinks=(0, 2))
    assert [(r.window, r.n_sink) for r in reports] == [(8, 0), (8, 2)]
    for r in reports:
        assert r.n_tokens == 12 and r.agree_BN.shape == r.kl_BN.shape == r.abs_diff_BN.shape == (2, 6)
        assert r.agreement == 1.0 and r.mean_kl < 1e-12 and r.mean_abs_logit_diff < 1e-5


def test_measure_eviction_matches_a_hand_run(toy_model):
    """The report's numbers are those of running the caches by hand with the full cache's greedy
    tokens; a small window loses something."""
    prompt, n_new = [1, 2, 3, 4, 5, 6], 8
    (report,) = measure_eviction(toy_model, [prompt], n_new, 3, n_sinks=(1,))
    assert isinstance(report, EvictionReport)
    full, ring = toy_model.new_cache(), SlidingWindowKVCache.for_model(toy_model, 3, 1)
    f_V, w_V = toy_model.prefill(prompt, full)[-1], toy_model.prefill(prompt, ring)[-1]
    for i in range(n_new):
        log_p = f_V - np.log(np.exp(f_V.astype(np.float64) - f_V.max()).sum()) - f_V.max()
        log_q = w_V - np.log(np.exp(w_V.astype(np.float64) - w_V.max()).sum()) - w_V.max()
        assert report.agree_BN[0, i] == (np.argmax(f_V) == np.argmax(w_V))
        assert np.isclose(report.kl_BN[0, i], np.sum(np.exp(log_p) * (log_p - log_q)), rtol=1e-6, atol=1e-9)
        assert np.isclose(report.abs_diff_BN[0, i], np.abs(f_V - w_V).mean(), rtol=1e-5)
        token = int(np.argmax(f_V))
        f_V, w_V = toy_model.decode_step(token, full), toy_model.decode_step(token, ring)
    assert report.mean_kl > 1e-3 and report.mean_abs_logit_diff > 1e-3


@pytest.mark.parametrize(
    ("args", "exc", "match"),
    [
        (
            ("model", [[1]], 2, 4),
            TypeError,
            r"^model: expected a kvtutor model \(.*\), got str",
        ),
        ((None, "1 2", 2, 4), TypeError, r"^prompts: expected a list of token-id lists, got str"),
        ((None, [], 2, 4), ValueError, r"^prompts: expected at least one prompt"),
        ((None, [[1], [40]], 2, 4), ValueError, r"^prompts\[1\]"),
        ((None, [[1]], 0, 4), ValueError, r"^max_new_tokens: expected an int >= 1, got 0"),
        (
            (None, [[1] * 10], 8, 4),
            ValueError,
            r"^max_new_tokens: prompt of 10 \+ 8 new tokens exceeds max_seq_len",
        ),
        ((None, [[1]], 2, 0), ValueError, r"^window: expected 1 <= window <= 16, got 0"),
        ((None, [[1]], 2, 4, (0, 4)), ValueError, r"^n_sinks\[1\]: expected 0 <= n_sinks\[1\] <= 3, got 4"),
        ((None, [[1]], 2, 4, 2), TypeError, r"^n_sinks: expected a non-empty list of ints, got 2"),
        ((None, [[1]], 2, 4, ()), TypeError, r"^n_sinks: expected a non-empty list of ints"),
    ],
)
def test_measure_eviction_refuses_bad_arguments(toy_model, args, exc, match):
    model, *rest = args
    with pytest.raises(exc, match=match):
        measure_eviction(toy_model if model is None else model, *rest)


# ---------------------------------------------------------------- the chapter's figures


@pytest.fixture
def plots():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kvtutor.plots import window as window_plots

    yield window_plots
    plt.close("all")


def test_mask_figure_colours_each_cell_by_what_the_mask_says(plots):
    n = 6
    masks = {
        "window": window_mask(np.arange(n), np.arange(n), 3),
        "sinks": window_mask(np.arange(n), np.arange(n), 3, 1),
    }
    fig = plots.draw_window_masks(masks, n_sinks={"sinks": 1})
    codes = [ax.images[0].get_array() for ax in fig.axes]
    # 0 future, 1 hidden past, 2 seen in the window, 3 seen sink
    assert codes[0][5].tolist() == [1, 1, 1, 2, 2, 2] and codes[0][0].tolist() == [2, 0, 0, 0, 0, 0]
    assert codes[1][5].tolist() == [3, 1, 1, 1, 2, 2]
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "seen",
        "seen: sink",
        "hidden (evicted)",
        "future",
    ]
    with pytest.raises(ValueError, match=r"^masks\['bad'\]: expected a square 2-D mask, got shape \[2, 3\]"):
        plots.draw_window_masks({"bad": np.ones((2, 3), bool)})
    with pytest.raises(ValueError, match=r"^masks: expected at least one mask"):
        plots.draw_window_masks({})


def test_line_and_bar_figures_draw_what_they_are_given(plots):
    ax = plots.plot_bytes_vs_tokens([1, 2, 3], {"full": [1024, 2048, 3072], "window": [1024, 2048, 2048]})
    assert [line.get_ydata().tolist() for line in ax.lines] == [[1.0, 2.0, 3.0], [1.0, 2.0, 2.0]]
    with pytest.raises(ValueError, match=r"^bytes_by_label\['w'\]: expected 3 values, got 2"):
        plots.plot_bytes_vs_tokens([1, 2, 3], {"w": [1, 2]})
    ax = plots.plot_eviction_kl({"a": np.array([[1.0, 3.0], [3.0, 5.0]])}, first_position=10)
    assert ax.lines[0].get_xdata().tolist() == [10, 11] and ax.lines[0].get_ydata().tolist() == [2.0, 4.0]
    ax = plots.plot_key_channels({"a": [1.0, 5.0, 2.0], "b": [1.0, 40.0, 2.0]})
    assert [p.get_height() for p in ax.patches] == [1.0, 5.0, 2.0, 1.0, 40.0, 2.0]
