"""Property tests of the serving loops, driven step by step: random arrivals, prompt and output
lengths, slots, budgets and policies. Every finished request's tokens are the ones the model
generates for it alone, and after every step the slots, the queue and the caches are in a state
the scheduler promises (``serve_step``); a trace replay (``simulate_trace``) on real caches gives
every request its solo tokens and counts the same memory as the bookkeeping replay."""

from __future__ import annotations

import functools
import math
from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvtutor
from kvtutor.serving.backends import batch_slots
from kvtutor.serving.loop import check_requests, serve_step
from kvtutor.serving.paged_trace import Request, simulate_trace
from kvtutor.validate import positions_needed

CFG = kvtutor.GPT2Config(vocab_size=40, d_model=16, n_heads=4, n_layers=2, max_seq_len=24, n_kv_heads=2)


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread_if_any():
    """Torch on one thread, where torch is installed: its tiny matrices run fastest so."""
    try:
        import torch
    except ImportError:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@functools.cache
def model(backend: str):
    """The float64 model, as a GPT2Model ("numpy") or a TorchGPT2Model ("torch"; None without torch).

    float64 and large weights: a chunk's products round differently from a whole prompt's, and a
    preempted request is recomputed in one prefill; in float64 no argmax flips."""
    if backend == "torch":
        try:
            import torch
        except ImportError:
            return None
        return kvtutor.TorchGPT2Model.from_numpy(model("numpy"), device="cpu", dtype=torch.float64)
    numpy_model = kvtutor.GPT2Model.random(CFG, seed=3, dtype=np.float64)
    for arr in numpy_model.weights.arrays():
        if arr.ndim == 2:
            arr *= 20.0
    return numpy_model


@functools.cache
def solo(prompt: tuple[int, ...], n: int) -> list[int]:
    """The model's own greedy tokens for ``prompt`` alone."""
    return [int(t) for t in model("numpy").generate(list(prompt), n)] if n else []


requests_strategy = st.lists(
    st.tuples(
        st.integers(0, 6),
        st.lists(st.integers(0, CFG.vocab_size - 1), min_size=1, max_size=9),
        st.integers(0, 6),
    ),
    min_size=1,
    max_size=6,
)


def held(engine) -> list[int]:
    """Positions each slot's cache holds."""
    if hasattr(engine, "caches"):
        return [len(c) for c in engine.caches]
    return list(engine.cache.host_lengths)


def drive(engine, records, n_slots, policy, budget):
    """run_serving's loop written out, checking what every serve_step promises -> its StepRecords."""
    waiting = deque(sorted((r for r in records if r.max_new_tokens), key=lambda r: r.arrival_step))
    running, steps = {}, []
    step = waiting[0].arrival_step if waiting else 0
    while waiting or running:
        assert len(steps) < 400, "the loop does not end"
        if not running and waiting[0].arrival_step > step:
            step = waiting[0].arrival_step
        before = dict(running)
        n_decoding = sum(1 for r in running.values() if r.tokens and not r.done)
        rec = serve_step(engine, running, waiting, n_slots, step, policy, budget)
        steps.append(rec)
        joined = [r for r in records if r.start_step == step and r.max_new_tokens]
        # slots: each request in its own slot, no more than n_slots held, caches holding its positions
        assert rec.held <= n_slots and len(running) <= n_slots
        assert all(r.slot == s and 0 <= s < n_slots for s, r in running.items())
        for s, r in running.items():
            want = r.length - 1 if r.tokens else r.n_prefilled
            assert held(engine)[s] == want or not r.n_prefilled
        # the step's work: one token per decoding request, the budget held
        assert rec.decoded == n_decoding
        if budget is not None:
            assert rec.batched_tokens <= budget
        if policy == "continuous":  # an arrived request waits only when every slot is taken
            assert not (waiting and waiting[0].arrival_step <= step) or rec.held == n_slots
            assert not any(r.done for r in running.values())  # a finished request leaves at once
        else:  # static: admit only into an empty batch, and leave all together
            assert not joined or not before
            assert not running or set(before) <= set(running) or not before
        step += 1
    return steps


def check_record(r, steps, budget) -> None:
    """One finished request's life: its chunks cover its prompt between taking a slot and its first
    token, then one token a step."""
    if r.max_new_tokens == 0:
        assert r.tokens == [] and r.chunks == []
        return
    assert r.arrival_step <= r.start_step <= r.admit_step <= r.finish_step
    assert r.n_prefilled == len(r.prompt_ids) and r.chunks[-1][0] == r.admit_step
    assert all(r.start_step <= s <= r.admit_step for s, _ in r.chunks)
    if budget is None:
        assert r.chunks == [(r.start_step, len(r.prompt_ids))]
    ran = [s.step for s in steps]
    assert ran.index(r.finish_step) - ran.index(r.admit_step) + 1 == r.max_new_tokens


@settings(max_examples=30, deadline=None)
@given(
    requests=requests_strategy,
    n_slots=st.integers(1, 3),
    policy=st.sampled_from(["continuous", "static"]),
    extra=st.one_of(st.none(), st.integers(0, 5)),
    backend=st.sampled_from(["numpy", "torch"]),
)
def test_every_step_keeps_the_slots_and_every_request_gets_its_solo_tokens(
    requests, n_slots, policy, extra, backend
):
    if model(backend) is None:
        pytest.skip("torch is not installed")
    records = check_requests(requests, CFG)
    budget = None if extra is None else n_slots + extra
    capacity = max(positions_needed(len(p), n) for _, p, n in requests) or 1
    engine = batch_slots(model(backend), n_slots, capacity)
    for r in records:
        if r.max_new_tokens == 0:  # done on arrival (run_serving does the same)
            r.admit_step = r.finish_step = r.start_step = r.arrival_step
    steps = drive(engine, records, n_slots, policy, budget)
    for r, (_, prompt, n) in zip(records, requests, strict=True):
        assert r.tokens == solo(tuple(prompt), n)
        check_record(r, steps, budget)
    served = [r for r in records if r.max_new_tokens]  # first come, first served:
    assert all(
        a.start_step <= b.start_step for a in served for b in served if a.arrival_step < b.arrival_step
    )


trace_strategy = st.lists(
    st.tuples(st.integers(0, 6), st.integers(1, 10), st.integers(1, 8), st.integers(0, 2**16)),
    min_size=1,
    max_size=6,
)


@settings(max_examples=30, deadline=None)
@given(
    rows=trace_strategy,
    block_size=st.integers(1, 6),
    extra_blocks=st.integers(0, 8),
    scheme=st.sampled_from(["contiguous", "paged", "prefix"]),
    shared=st.booleans(),
)
def test_a_replay_on_real_caches_gives_solo_tokens_and_counts_the_same_memory(
    rows, block_size, extra_blocks, scheme, shared
):
    max_seq_len = 18
    rng = np.random.default_rng(rows[0][3])
    common = rng.integers(0, CFG.vocab_size, 10).tolist()  # a prefix some prompts share
    trace = []
    for arrival, prompt_len, output_len, seed in rows:
        output_len = min(output_len, max_seq_len + 1 - prompt_len)
        own = np.random.default_rng(seed).integers(0, CFG.vocab_size, prompt_len).tolist()
        prompt = (common[:prompt_len] if shared and seed % 2 else own)[:prompt_len]
        trace.append(Request(arrival, prompt_len, output_len, tuple(prompt)))
    capacity = block_size * (math.ceil(max_seq_len / block_size) + extra_blocks)
    kind = "paged" if scheme == "prefix" else scheme
    args = {"trace": trace, "scheme": kind, "capacity_tokens": capacity, "max_seq_len": max_seq_len,
            "block_size": block_size, "prefix_caching": scheme == "prefix"}  # fmt: skip
    real = simulate_trace(**args, model=model("numpy"))
    book = simulate_trace(**args)
    assert real.outputs == [solo(r.prompt_ids, r.output_len) for r in trace]
    assert real.finished == book.finished == len(trace)
    assert real.tokens_generated == book.tokens_generated == sum(r.output_len for r in trace)
    same = ("reserved", "used", "running", "preemptions", "prompt_tokens", "cached_tokens", "steps")
    assert {k: getattr(real, k) for k in same} == {k: getattr(book, k) for k in same}
    for run in (real, book):
        assert len(run.reserved) == len(run.used) == len(run.running) == run.steps
        assert all(0 <= r <= capacity and u >= 0 for u, r in zip(run.used, run.reserved, strict=True))
        if scheme != "prefix":  # shared blocks are used by several requests and reserved once
            assert all(u <= r for u, r in zip(run.used, run.reserved, strict=True))
        assert run.cached_tokens <= run.prompt_tokens
        if kind == "contiguous":
            assert run.preemptions == 0
            assert all(r == max_seq_len * n for r, n in zip(run.reserved, run.running, strict=True))
        elif scheme == "paged":  # at most one unfilled block per running request
            assert all(
                r - u < block_size * max(n, 1)
                for r, u, n in zip(run.reserved, run.used, run.running, strict=True)
            )
