"""Chunked prefill: a prompt run a chunk at a time, each chunk at its offset against the cache, equals
one whole prefill (logits of the last chunk, the cache, the greedy tokens after it) for every chunk
size, on both models, every cache kind and the paged cache; served with a token budget per step,
every request still gets the tokens it gets alone, the budget holds, and the stall it bounds shows
in the longest gap between tokens."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvtutor
from kvtutor.caches.paged import PagedKVPool
from kvtutor.serving import backends
from kvtutor.serving.backends import forward_row, prefill_in_chunks
from kvtutor.serving.loop import (
    check_budget,
    latency_summary,
    run_serving,
    serve,
    serve_static,
    step_durations,
    take_chunks,
    token_times,
)

torch = pytest.importorskip("torch")

CFG = kvtutor.GPT2Config(vocab_size=40, d_model=16, n_heads=4, n_layers=2, max_seq_len=24, n_kv_heads=2)
PROMPT = [3, 17, 5, 29, 11, 2, 38, 7, 21]  # 9 tokens


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def numpy_model():
    # float64: a chunk's matrix products may round differently from the whole prompt's; in float64
    # that never flips an argmax, and the logits agree to 1e-12
    model = kvtutor.GPT2Model.random(CFG, seed=3, dtype=np.float64)
    for arr in model.weights.arrays():  # varied, non-repetitive greedy continuations
        if arr.ndim == 2:
            arr *= 20.0
    return model


@pytest.fixture(scope="module")
def numpy_model32():
    return kvtutor.GPT2Model.random(CFG, seed=5)


@pytest.fixture(scope="module")
def torch_model(numpy_model):
    return kvtutor.TorchGPT2Model.from_numpy(numpy_model, device="cpu", dtype=torch.float64)


def greedy_after(model, cache, logits_V, n: int) -> list[int]:
    """n greedy tokens continuing from the last logits row, decoding on ``cache``."""
    out = []
    for _ in range(n):
        out.append(int(np.argmax(logits_V)))
        logits_V = backends.forward_one(model, [out[-1]], cache)[-1]
    return out


def cache_arrays(cache, n_layers: int) -> list[np.ndarray]:
    """Every layer's keys and values, as float64 NumPy arrays of the filled positions."""
    out = []
    for layer in range(n_layers):
        for a in (cache.keys(layer), cache.values(layer)):
            out.append(a.double().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a, np.float64))
    return out


def assert_chunked_equals_whole(model, make_cache, prompt, prefix=()) -> None:
    """For every chunk size 1 .. len(prompt) + 1: the last chunk's logits equal the whole prefill's
    last rows, the cache holds the same keys and values, and greedy decoding goes on the same."""
    n_layers = model.config.n_layers
    whole = make_cache()
    if prefix:
        backends.forward_one(model, list(prefix), whole)
    whole_TV = backends.forward_one(model, prompt, whole)
    want_tokens = greedy_after(model, whole, whole_TV[-1], 5)
    whole.truncate(len(prefix) + len(prompt))
    want_cache = cache_arrays(whole, n_layers)
    for chunk_size in range(1, len(prompt) + 2):
        cache = make_cache()
        if prefix:
            backends.forward_one(model, list(prefix), cache)
        last_CV = prefill_in_chunks(model, prompt, cache, chunk_size)
        n_last = len(prompt) - (math.ceil(len(prompt) / chunk_size) - 1) * chunk_size
        assert last_CV.shape == (n_last, model.config.vocab_size)
        np.testing.assert_allclose(last_CV, whole_TV[-n_last:], rtol=0, atol=1e-10)
        assert len(cache) == len(prefix) + len(prompt)
        for got, want in zip(cache_arrays(cache, n_layers), want_cache, strict=True):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
        assert greedy_after(model, cache, last_CV[-1], 5) == want_tokens, chunk_size


# ---------------------------------------------------------------- one sequence: chunks == whole


@pytest.mark.parametrize("kind", ["preallocated", "concat"])
@pytest.mark.parametrize("prefix", [(), (4, 9, 1)])
def test_numpy_chunked_prefill_equals_whole_prefill(numpy_model, kind, prefix):
    assert_chunked_equals_whole(numpy_model, lambda: numpy_model.new_cache(kind=kind), PROMPT, prefix)


@pytest.mark.parametrize("kind", ["preallocated", "concat"])
@pytest.mark.parametrize("prefix", [(), (4, 9, 1)])
def test_torch_chunked_prefill_equals_whole_prefill(torch_model, kind, prefix):
    assert_chunked_equals_whole(torch_model, lambda: torch_model.new_cache(kind=kind), PROMPT, prefix)


@pytest.mark.parametrize("block_size", [1, 2, 4, 16])
def test_paged_chunked_prefill_equals_whole_prefill(numpy_model, block_size):
    pool = PagedKVPool.for_model(numpy_model, n_blocks=400, block_size=block_size)  # nothing is freed
    assert_chunked_equals_whole(numpy_model, pool.new_sequence, PROMPT)
    assert_chunked_equals_whole(numpy_model, pool.new_sequence, PROMPT, prefix=(4, 9, 1))


def test_paged_chunks_take_the_blocks_a_whole_prefill_takes(numpy_model):
    pool = PagedKVPool.for_model(numpy_model, n_blocks=16, block_size=4)
    for chunk_size in range(1, len(PROMPT) + 2):
        seq = pool.new_sequence()
        prefill_in_chunks(numpy_model, PROMPT, seq, chunk_size)
        assert len(seq.block_table) == -(-len(PROMPT) // 4)
        seq.free()
    assert pool.usage().blocks_used == 0


@settings(max_examples=30, deadline=None)
@given(
    prompt=st.lists(st.integers(0, CFG.vocab_size - 1), min_size=1, max_size=14),
    chunk_size=st.integers(1, 15),
    n_past=st.integers(0, 5),
)
def test_chunked_prefill_equals_whole_float32(numpy_model32, prompt, chunk_size, n_past):
    """In float32 too the logits agree (to rounding), on random prompts after a cached prefix."""
    model = numpy_model32
    prefix = list(range(n_past))
    whole, chunked = model.new_cache(), model.new_cache()
    if prefix:
        model.forward(prefix, whole)
        model.forward(prefix, chunked)
    want_TV = model.forward(prompt, whole)
    got_CV = prefill_in_chunks(model, prompt, chunked, chunk_size)
    np.testing.assert_allclose(got_CV, want_TV[-len(got_CV) :], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(chunked.keys(1), whole.keys(1), rtol=1e-4, atol=1e-5)


def test_forward_row_continues_one_row_of_a_batched_cache(torch_model):
    """A row filled chunk by chunk holds what prefill_row gives it; the other rows are untouched."""
    cache, ref = torch_model.new_cache(3, capacity=16), torch_model.new_cache(3, capacity=16)
    for c in (cache, ref):
        torch_model.prefill_row([1, 2], c, 0)
        torch_model.prefill_row([5, 6, 7, 8, 9], c, 2)
    want_TV = torch_model.prefill_row(PROMPT, ref, 1)
    before = [cache.keys(0, row).clone() for row in (0, 2)]
    torch_model.prefill_row(PROMPT[:4], cache, 1)
    last_TV = forward_row(torch_model, PROMPT[4:], cache, 1)
    torch.testing.assert_close(last_TV, want_TV[4:], rtol=0, atol=1e-10)
    torch.testing.assert_close(cache.keys(1, 1), ref.keys(1, 1), rtol=0, atol=1e-12)
    assert cache.host_lengths == [2, len(PROMPT), 5]
    assert all(torch.equal(cache.keys(0, row), b) for row, b in zip((0, 2), before, strict=True))


# ---------------------------------------------------------------- one sequence: errors


def test_prefill_in_chunks_refuses_bad_input_and_leaves_the_cache(numpy_model, torch_model):
    cache = numpy_model.new_cache(capacity=10)
    numpy_model.forward([1, 2], cache)
    keys = cache.keys(0).copy()
    for kwargs, exc, match in [
        ({"chunk_size": 0}, ValueError, "chunk_size: expected an int >= 1, got 0"),
        ({"chunk_size": 2.0}, TypeError, "chunk_size: expected an int, got float"),
        ({"prompt_ids": []}, ValueError, "prompt_ids: expected at least one token"),
        ({"prompt_ids": [1, 99]}, ValueError, "prompt_ids: expected token ids in \\[0, 40\\)"),
        ({"prompt_ids": list(range(9))}, ValueError, "9 tokens after 2 cached ones exceed the capacity 10"),
        ({"model": "gpt2"}, TypeError, "model: expected a kvtutor model, got str"),
    ]:
        args = {"model": numpy_model, "prompt_ids": [3, 4, 5], "cache": cache, "chunk_size": 2} | kwargs
        with pytest.raises(exc, match=match):
            prefill_in_chunks(**args)
        assert len(cache) == 2 and np.array_equal(cache.keys(0), keys)
    with pytest.raises(ValueError, match="cache: expected a cache of batch size 1, got 2"):
        prefill_in_chunks(torch_model, [1, 2], torch_model.new_cache(2), 1)
    with pytest.raises(TypeError, match="cache"):
        prefill_in_chunks(numpy_model, [1, 2], torch_model.new_cache(), 1)


def test_a_paged_pool_out_of_blocks_mid_prompt_leaves_the_sequence_as_it_was(numpy_model):
    pool = PagedKVPool.for_model(numpy_model, n_blocks=2, block_size=2)
    seq = pool.new_sequence()
    numpy_model.forward([1], seq)
    with pytest.raises(ValueError, match="free block"):
        prefill_in_chunks(numpy_model, [2, 3, 4, 5, 6], seq, 2)  # 6 positions need 3 blocks
    assert len(seq) == 1 and len(seq.block_table) == 1 and pool.usage().blocks_used == 1


def test_forward_row_and_slot_chunks_check_their_input(numpy_model, torch_model):
    with pytest.raises(TypeError, match="model: expected a TorchGPT2Model, got GPT2Model"):
        forward_row(numpy_model, [1], numpy_model.new_cache(), 0)
    cache = torch_model.new_cache(2, capacity=4)
    with pytest.raises(ValueError, match="row: expected"):
        forward_row(torch_model, [1], cache, 2)
    with pytest.raises(ValueError, match="ids_T"):
        forward_row(torch_model, [1, 2, 3, 4, 5], cache, 0)
    assert cache.host_lengths == [0, 0]
    with pytest.raises(ValueError, match="row: a concat cache keeps its rows at one length"):
        forward_row(torch_model, [1], torch_model.new_cache(2, kind="concat"), 0)
    for slots in (backends.batch_slots(numpy_model, 2, 8), backends.batch_slots(torch_model, 2, 8)):
        slots.prefill(1, [1, 2, 3])
        with pytest.raises(ValueError, match="start: expected the slot's length 3 .*, got 2"):
            slots.prefill(1, [4], 2)
        assert slots.prefill(1, [4, 5], 3) == slots.prefill(0, [1, 2, 3, 4, 5])


# ---------------------------------------------------------------- serving with a token budget


def alone(model, requests):
    return [model.generate(prompt, n) for _, prompt, n in requests]


requests_strategy = st.lists(
    st.tuples(
        st.integers(0, 8),
        st.lists(st.integers(0, CFG.vocab_size - 1), min_size=1, max_size=14),
        st.integers(0, 8),
    ),
    min_size=1,
    max_size=7,
)


def check_chunked_trace(trace, requests) -> None:
    """What a token budget promises, on any trace."""
    budget, records = trace.max_step_tokens, trace.requests
    steps = {s.step: s for s in trace.steps}
    for r, (_, prompt, n) in zip(records, requests, strict=True):
        assert len(r.tokens) == n
        if not n:
            continue
        chunk_steps = [s for s, _ in r.chunks]
        assert sum(c for _, c in r.chunks) == len(prompt) == r.n_prefilled
        assert r.arrival_step <= r.start_step <= chunk_steps[0]
        assert chunk_steps == sorted(set(chunk_steps)) and chunk_steps[-1] == r.admit_step
        # from its first token on, a request gains one token per step
        assert r.finish_step - r.admit_step + 1 == n
        # its chunks ran at its offsets: each continues where the last stopped
        past = 0
        for step, c in r.chunks:
            assert (c, past) in steps[step].chunks
            past += c
    for s in trace.steps:
        assert s.batched_tokens <= budget and s.tokens == s.prefilled + s.decoded
        assert s.decoded == len(s.contexts)
        assert s.prefilled == sum(1 for r in records if r.tokens and r.admit_step == s.step)
        # a prompt is cut only where the budget runs out, and at most one per step
        cut = [c for c, past in s.chunks if not any(
            past + c == len(r.prompt_ids) and (s.step, c) in r.chunks for r in records
        )]  # fmt: skip
        assert len(cut) <= 1
        if cut:
            assert s.batched_tokens == budget and s.chunks[-1][0] == cut[0]


@settings(max_examples=40, deadline=None)
@given(
    requests=requests_strategy,
    max_batch_size=st.integers(1, 4),
    extra=st.integers(0, 6),
    policy=st.sampled_from(["continuous", "static"]),
)
def test_served_with_a_budget_every_request_gets_its_tokens_numpy(
    numpy_model, requests, max_batch_size, extra, policy
):
    budget = max_batch_size + extra
    whole = run_serving(numpy_model, requests, max_batch_size, policy)
    chunked = run_serving(numpy_model, requests, max_batch_size, policy, max_step_tokens=budget)
    assert chunked.outputs == whole.outputs == alone(numpy_model, requests)
    check_chunked_trace(chunked, requests)
    if policy == "continuous":
        # chunking delays a first token, never brings it forward: a request takes its slot no
        # earlier (the requests ahead of it finish no earlier), and a whole prompt needs one step.
        # (Static batching can: a later batch may gather different requests.)
        pairs = zip(chunked.requests, whole.requests, strict=True)
        assert all(c.start_step >= w.start_step and c.admit_step >= w.admit_step for c, w in pairs)


@settings(max_examples=25, deadline=None)
@given(
    requests=requests_strategy,
    max_batch_size=st.integers(1, 4),
    extra=st.integers(0, 6),
    policy=st.sampled_from(["continuous", "static"]),
)
def test_served_with_a_budget_every_request_gets_its_tokens_torch(
    numpy_model, torch_model, requests, max_batch_size, extra, policy
):
    """Chunks into rows of one batched cache, beside ragged decodes of the other rows."""
    trace = run_serving(torch_model, requests, max_batch_size, policy, max_step_tokens=max_batch_size + extra)
    assert trace.outputs == alone(numpy_model, requests)
    check_chunked_trace(trace, requests)


@settings(max_examples=25, deadline=None)
@given(
    requests=requests_strategy,
    max_batch_size=st.integers(1, 4),
    policy=st.sampled_from(["continuous", "static"]),
)
def test_a_budget_that_fits_everything_gives_the_whole_prefill_trace(
    numpy_model, requests, max_batch_size, policy
):
    """None (today's engine) and a budget no step can exceed give the same trace, field by field."""
    whole = run_serving(numpy_model, requests, max_batch_size, policy)
    big = sum(len(p) for _, p, _ in requests) + max_batch_size
    chunked = run_serving(numpy_model, requests, max_batch_size, policy, max_step_tokens=big)
    for a, b in zip(whole.steps, chunked.steps, strict=True):
        assert (a.step, a.prefilled, a.decoded, a.held, a.chunks, a.contexts) == (
            b.step, b.prefilled, b.decoded, b.held, b.chunks, b.contexts,
        )  # fmt: skip
    for a, b in zip(whole.requests, chunked.requests, strict=True):
        assert (a.start_step, a.admit_step, a.finish_step, a.slot, a.tokens, a.chunks) == (
            b.start_step, b.admit_step, b.finish_step, b.slot, b.tokens, b.chunks,
        )  # fmt: skip
        if a.tokens:
            assert (
                a.chunks == [(a.admit_step, len(a.prompt_ids))]
                and a.wait_steps == a.admit_step - a.arrival_step
            )
    assert whole.max_step_tokens is None and chunked.max_step_tokens == big


def test_serve_and_serve_static_take_the_budget(numpy_model):
    requests = [(0, [1, 2, 3], 5), (0, [4] * 12, 3), (2, [7, 8], 4)]
    want = alone(numpy_model, requests)
    out = serve(numpy_model, requests, 2, max_step_tokens=4)
    assert out == want and out.trace.max_step_tokens == 4
    assert serve_static(numpy_model, requests, 2, max_step_tokens=2) == want


# ---------------------------------------------------------------- the schedule, counted by hand


def test_a_long_prompt_is_cut_beside_the_decodes_counted_by_hand(numpy_model):
    # two short requests decode from step 1 on; a 12-token prompt arrives at step 1.
    # budget 5: step 1 runs 2 decodes and 3 prompt tokens; steps 2, 3: 2 decodes, 3 tokens each;
    # step 4: 2 decodes and the last 3 tokens, which give the long request's first token.
    requests = [(0, [1], 6), (0, [2], 6), (1, list(range(3, 15)), 2)]
    trace = run_serving(numpy_model, requests, 3, max_step_tokens=5)
    long = trace.requests[2]
    assert long.start_step == 1 and long.chunks == [(1, 3), (2, 3), (3, 3), (4, 3)] and long.admit_step == 4
    assert [s.chunks for s in trace.steps[:5]] == [
        ((1, 0), (1, 0)),
        ((3, 0),),
        ((3, 3),),
        ((3, 6),),
        ((3, 9),),
    ]
    assert [s.contexts for s in trace.steps[:3]] == [(), (2, 2), (3, 3)]
    assert [s.batched_tokens for s in trace.steps] == [2, 5, 5, 5, 5, 3]
    whole = run_serving(numpy_model, requests, 3)
    assert [s.batched_tokens for s in whole.steps] == [2, 14, 3, 2, 2, 2]
    # the cost model "one unit per token run": the short requests' longest gap is the long
    # prompt's step without chunking (12 + 2 decodes), at most the budget with it
    per_token = lambda s: float(s.batched_tokens)  # noqa: E731
    gaps = [latency_summary(t, per_token).requests[0].max_gap_s for t in (whole, trace)]
    assert gaps == [14.0, 5.0]
    # and the price: the long request's first token comes 3 steps later
    assert [latency_summary(t).requests[2].ttft_steps for t in (whole, trace)] == [1.0, 4.0]


def test_take_chunks_is_first_come_first_served():
    from kvtutor.serving.loop import RequestRecord

    a, b, c = (RequestRecord(0, [1] * n, 2) for n in (5, 4, 3))
    b.chunks.append((0, 1))  # b has run 1 of its 4 prompt tokens
    c.tokens.append(7)
    c.chunks.append((0, 3))  # c is decoding
    running = {2: b, 0: a, 1: c}  # in the order they took their slots
    assert take_chunks(running, 1, None) == [(2, 3), (0, 5)]
    assert take_chunks(running, 1, 6) == [(2, 3), (0, 2)]
    assert take_chunks(running, 1, 3) == [(2, 2)]
    assert take_chunks(running, 3, 3) == []


# ---------------------------------------------------------------- the stall, measured by the metrics


@settings(max_examples=30, deadline=None)
@given(requests=requests_strategy, max_batch_size=st.integers(1, 4), extra=st.integers(0, 6))
def test_with_a_budget_no_gap_between_tokens_exceeds_a_budget_step(
    numpy_model, requests, max_batch_size, extra
):
    budget = max_batch_size + extra
    trace = run_serving(numpy_model, requests, max_batch_size, max_step_tokens=budget)
    s = latency_summary(trace, lambda step: float(step.batched_tokens))
    gaps = s.values("max_gap_s")
    assert all(g <= budget for g in gaps)
    times = token_times(trace, lambda step: float(step.batched_tokens))
    for r, t, rec in zip(s.requests, times, trace.requests, strict=True):
        assert len(t) == r.n_tokens
        if r.n_tokens > 1:
            assert r.max_gap_s == max(np.diff(t)) and r.tpot_s == pytest.approx((t[-1] - t[0]) / (len(t) - 1))
        if r.n_tokens:  # the first token comes at the end of the admit step
            end = np.cumsum(step_durations(trace, lambda step: float(step.batched_tokens)))
            assert t[0] == end[[x.step for x in trace.steps].index(rec.admit_step)]


def test_longest_gap_and_token_times_counted_by_hand(numpy_model):
    # TINY of the latency tests, one slot, modelled: 1 s per step plus 1 s per prefilled token
    trace = run_serving(numpy_model, [(0, [1, 2], 3), (1, [3], 2), (1, [4], 0), (2, [5], 1)], 1)
    cost = lambda s: 1.0 + s.prompt_tokens  # noqa: E731
    assert step_durations(trace, cost).tolist() == [3.0, 1.0, 1.0, 2.0, 1.0, 2.0]
    s = latency_summary(trace, cost)
    assert [r.max_gap_s for r in s.requests][:2] == [1.0, 1.0]
    assert all(math.isnan(r.max_gap_s) for r in s.requests[2:])  # no token; one token
    assert [t.tolist() for t in token_times(trace, cost)] == [[3.0, 4.0, 5.0], [7.0, 8.0], [], [10.0]]
    assert s.percentiles["max_gap_s"][50] == 1.0


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("budget", "exc", "match"),
    [
        (0, ValueError, "max_step_tokens: expected an int >= 2, got 0 \\(max_batch_size 2: a full batch"),
        (1, ValueError, "max_step_tokens: expected an int >= 2, got 1"),
        (2.5, TypeError, "max_step_tokens: expected an int, got float"),
        (True, TypeError, "max_step_tokens: expected an int, got bool"),
        ("8", TypeError, "max_step_tokens: expected an int, got str"),
    ],
)
def test_bad_budgets_are_refused(numpy_model, budget, exc, match):
    with pytest.raises(exc, match=match):
        run_serving(numpy_model, [(0, [1, 2], 3)], 2, max_step_tokens=budget)
    with pytest.raises(exc, match=match):
        serve(numpy_model, [(0, [1, 2], 3)], 2, max_step_tokens=budget)
    with pytest.raises(exc, match=match):
        check_budget(budget, 2)


def test_the_budget_is_checked_against_the_batch_size_not_the_slots_used(numpy_model):
    """One request uses one slot, but the rule is about max_batch_size, as vLLM's is: the same
    arguments are refused or accepted whatever the requests."""
    with pytest.raises(ValueError, match="max_step_tokens: expected an int >= 8, got 4"):
        run_serving(numpy_model, [(0, [1], 2)], 8, max_step_tokens=4)
    assert check_budget(np.int64(8), 8) == 8
