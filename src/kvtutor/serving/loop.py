"""Continuous batching: decode computes one query row per request, so stack many requests' rows.

``serve`` stacks the single query rows of many requests into one batched decode step: each step,
finished requests leave, waiting requests are prefilled into the free slots, and every running
request gains one token. ``serve_static`` is the baseline that waits for a batch and holds its
slots until the longest request in it has finished. With ``max_step_tokens`` (chunked prefill)
a step runs at most that many tokens: the running requests' decode tokens first, then prompt
chunks in what is left, so a long prompt goes through in several steps beside the decodes instead
of stalling them in one. ``latency_summary`` (``kvtutor.serving.metrics``, whose names this module
also offers) turns a run's trace into TTFT, TPOT, end-to-end latency and the longest gap between
tokens, with their percentiles; ``batch_size_sweep`` runs the same requests at several batch sizes
(the latency-throughput trade-off). The other answer to "one query row": speculative decoding, in
``kvtutor.serving.speculative``.

Both models serve. A ``GPT2Model`` runs one sequence per cache, so each request keeps its own
cache and the "batched" step is a loop over requests (same tokens, no speed-up); a ``TorchGPT2Model``
runs one batched step over a ragged cache, one length per row (``kvtutor.serving.backends.batch_slots``).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..validate import check_int, positions_needed
from .backends import batch_slots, check_model
from .metrics import (
    LATENCY_METRICS,
    PERCENTILES,
    LatencySummary,
    RequestLatency,
    RequestRecord,
    ServingTrace,
    StepRecord,
    check_requests,
    check_step_seconds,
    latency_summary,
    step_durations,
    token_times,
)

__all__ = [
    "serve",
    "serve_static",
    "run_serving",
    "serve_step",
    "run_chunks",
    "take_chunks",
    "check_budget",
    "ServingTrace",
    "RequestRecord",
    "StepRecord",
    "check_requests",
    "ServedOutputs",
    "latency_summary",
    "step_durations",
    "token_times",
    "LatencySummary",
    "RequestLatency",
    "LATENCY_METRICS",
    "PERCENTILES",
    "batch_size_sweep",
    "BatchSweepRow",
]


# ---------------------------------------------------------------- the scheduler


def run_serving(
    model: Any,
    requests: Sequence[tuple[int, Sequence[int], int]],
    max_batch_size: int,
    policy: str = "continuous",
    max_step_tokens: int | None = None,
    new_cache: Any = None,
) -> ServingTrace:
    """requests -> ServingTrace: serve them step by step with greedy decoding.

    Checks the arguments, sizes the engine (one slot per request, up to
    ``max_batch_size``; room for the longest request), then runs
    ``serve_step`` until every request is done, jumping over idle steps.
    ``"continuous"`` admits whenever a slot is free; ``"static"`` admits only
    into an empty batch and keeps every slot until the batch's longest
    request has finished. ``max_step_tokens`` turns on chunked prefill.
    ``new_cache`` (capacity -> a cache of one sequence) gives every slot a
    cache of that kind (``backends.batch_slots``).
    """
    cfg = check_model(model, "model")
    records = check_requests(requests, cfg)
    max_batch_size = check_int("max_batch_size", max_batch_size, 1)
    if policy not in ("continuous", "static"):
        raise ValueError(f"policy: expected 'continuous' or 'static', got {policy!r}")
    if max_step_tokens is not None:  # room for every decode and one more
        max_step_tokens = check_budget(max_step_tokens, max_batch_size)
    trace = ServingTrace(policy, max_batch_size, records, [], max_step_tokens)
    for r in records:
        # nothing to do: done on arrival, never holds a slot
        if r.max_new_tokens == 0:
            r.admit_step = r.finish_step = r.start_step = r.arrival_step
    to_serve = (r for r in records if r.max_new_tokens)
    waiting = deque(sorted(to_serve, key=lambda r: r.arrival_step))
    if not waiting:
        return trace
    # positions a request needs: its prompt and its new tokens but the last
    capacity = max(positions_needed(len(r.prompt_ids), r.max_new_tokens) for r in waiting)
    # more slots than requests would never be used
    n_slots = min(max_batch_size, len(waiting))
    engine = batch_slots(model, n_slots, capacity, new_cache)
    running: dict[int, RequestRecord] = {}  # batch slot -> the request in it
    step = waiting[0].arrival_step
    while waiting or running:
        if not running and waiting[0].arrival_step > step:
            step = waiting[0].arrival_step  # idle until the next arrival
        trace.steps.append(serve_step(engine, running, waiting, n_slots, step, policy, max_step_tokens))
        step += 1
    return trace


def serve_step(
    engine: Any,
    running: dict[int, RequestRecord],
    waiting: deque[RequestRecord],
    n_slots: int,
    step: int,
    policy: str,
    max_step_tokens: int | None,
) -> StepRecord:
    """One scheduler step: join, prefill, decode, leave -> its StepRecord.

    The book shows this in "Continuous batching".
    """
    start = time.perf_counter()
    # (1) join: arrived requests take free slots (static: only an empty batch)
    if policy == "continuous" or not running:
        free = [s for s in range(n_slots) if s not in running]
        while waiting and free and waiting[0].arrival_step <= step:
            r = waiting.popleft()
            r.slot, r.start_step = free.pop(0), step
            running[r.slot] = r
    # (2) prefill: whole prompts, or the chunks that fit beside the decodes
    decoding = [s for s, r in running.items() if r.tokens and not r.done]
    chunks = take_chunks(running, len(decoding), max_step_tokens)
    work, n_first = run_chunks(engine, running, chunks, step)
    # (3) decode: one batched step, a token for every other running request
    contexts = tuple(running[s].length for s in decoding)
    if decoding:
        last = [running[s].tokens[-1] for s in decoding]
        next_tokens = engine.decode(decoding, last)
        for s, token in zip(decoding, next_tokens, strict=True):
            running[s].tokens.append(token)
    # (4) leave: finished requests free their slots (static: all at once)
    held, done = len(running), [s for s, r in running.items() if r.done]
    for s in done:
        if running[s].finish_step < 0:  # static: done earlier, still held
            running[s].finish_step = step
    if policy == "continuous" or len(done) == held:
        for s in done:
            del running[s]
    seconds, decoded = time.perf_counter() - start, len(decoding)
    return StepRecord(step, n_first, decoded, held, seconds, work, contexts)


def run_chunks(
    engine: Any,
    running: dict[int, RequestRecord],
    chunks: list[tuple[int, int]],
    step: int,
) -> tuple[tuple[tuple[int, int], ...], int]:
    """[(slot, n_new)] -> ((n_new, n_past) of each chunk, first tokens given).

    Runs one step's prompt chunks, each after the prompt tokens its request
    has already run; the request whose last chunk runs gets its first token.

    The book shows this in "Continuous batching".
    """
    work, n_first = [], 0
    for slot, n_new in chunks:
        r = running[slot]
        past = r.n_prefilled
        token = engine.prefill(slot, r.prompt_ids[past : past + n_new], past)
        r.chunks.append((step, n_new))
        work.append((n_new, past))
        if past + n_new == len(r.prompt_ids):  # the last chunk: a first token
            r.admit_step, n_first = step, n_first + 1
            r.tokens.append(token)
    return tuple(work), n_first


def check_budget(max_step_tokens: Any, max_batch_size: int) -> int:
    """``max_step_tokens`` as an int >= ``max_batch_size``, or a TypeError/ValueError naming it.

    A step runs one decode token for every running request first, so the budget must leave room
    for a prompt chunk of at least one token beside the decodes of a full batch (vLLM asks the
    same of ``max_num_batched_tokens`` against ``max_num_seqs``)."""
    try:
        return check_int("max_step_tokens", max_step_tokens, max_batch_size)
    except ValueError as err:
        raise ValueError(f"{err} (max_batch_size {max_batch_size}: a full batch's decodes and one "
                         "prompt token must fit)") from None  # fmt: skip


def take_chunks(
    running: dict[int, RequestRecord],
    n_decoding: int,
    max_step_tokens: int | None,
) -> list[tuple[int, int]]:
    """The prompt chunks of one step, [(slot, n_new)], for the running
    requests that have prompt tokens left, in the order they took their slots.

    Without a budget (None) each of them runs its whole prompt. With one,
    the step's decode tokens come first and the prompts share what is left,
    first come, first served: a long prompt takes as many steps as it needs,
    each chunk continuing where the last one stopped.

    The book shows this in "Continuous batching".
    """
    left = math.inf if max_step_tokens is None else max_step_tokens - n_decoding
    chunks = []
    for slot, r in running.items():
        todo = len(r.prompt_ids) - r.n_prefilled
        if todo and left > 0:
            chunks.append((slot, int(min(todo, left))))
            left -= chunks[-1][1]
    return chunks


def serve(
    model: Any,
    requests: Sequence[tuple[int, Sequence[int], int]],
    max_batch_size: int,
    max_step_tokens: int | None = None,
) -> ServedOutputs:
    """requests (arrival_step, prompt_ids, max_new_tokens) -> each request's new greedy tokens, in order.

    Continuous batching: requests join and leave the running batch at every step; each token is
    the one that decoding the request alone would give. ``max_step_tokens`` (None: whole prompts)
    turns on chunked prefill: at most that many tokens per step, decodes first, prompt chunks in
    the rest; the tokens stay the same. The list that comes back also carries the run's ``trace``
    and its ``latency`` (TTFT, TPOT, end-to-end, longest gap, throughput, percentiles).
    """
    return ServedOutputs(run_serving(model, requests, max_batch_size, "continuous", max_step_tokens))


def serve_static(
    model: Any,
    requests: Sequence[tuple[int, Sequence[int], int]],
    max_batch_size: int,
    max_step_tokens: int | None = None,
) -> ServedOutputs:
    """requests -> new tokens, with static batching: a batch runs until its longest request finishes."""
    return ServedOutputs(run_serving(model, requests, max_batch_size, "static", max_step_tokens))


class ServedOutputs(list):
    """What ``serve`` returns: the list of each request's new tokens, as before (it compares equal
    to a plain list), with the run's ``trace`` (a ServingTrace) and ``latency`` attached."""

    def __init__(self, trace: ServingTrace) -> None:
        super().__init__(trace.outputs)
        self.trace = trace

    @property
    def latency(self) -> LatencySummary:
        """The run's LatencySummary, from the measured step times."""
        return latency_summary(self.trace)


# ---------------------------------------------------------------- the batch-size sweep


@dataclass(frozen=True)
class BatchSweepRow:
    """One point of the latency-throughput curve: a run of the trace at one max_batch_size.

    Step columns are deterministic; second columns are measured (or modelled, see
    ``batch_size_sweep``). ``summary`` holds everything else.
    """

    max_batch_size: int
    n_steps: int
    tokens_per_step: float
    ttft_steps_p50: float
    tpot_steps_p50: float
    tpot_steps_p90: float
    tokens_per_second: float
    ttft_s_p50: float
    tpot_s_p50: float
    tpot_s_p90: float
    summary: LatencySummary = field(repr=False, compare=False)


def batch_size_sweep(
    model: Any,
    requests: Sequence[tuple[int, Sequence[int], int]],
    batch_sizes: Sequence[int],
    policy: str = "continuous",
    step_seconds: Any = None,
) -> list[BatchSweepRow]:
    """[N] batch sizes -> N BatchSweepRows: the same requests served at each max_batch_size.

    The latency-throughput trade-off as data: throughput (tokens per step, tokens per second)
    against p50/p90 TPOT and p50 TTFT. In steps, a running request gains one token every step, so
    TPOT is 1 step at any batch size and a larger batch only cuts waiting (TTFT); the price of a
    larger batch is a slower step, which only seconds show. ``step_seconds`` (StepRecord ->
    seconds, e.g. a function of its ``prefilled`` and ``decoded`` counts), if given, models each
    step's time instead of measuring it, the same function at every batch size.
    """
    cfg = check_model(model, "model")
    check_requests(requests, cfg)
    check_step_seconds(step_seconds)
    if isinstance(batch_sizes, (str, bytes)) or not isinstance(batch_sizes, Sequence):
        raise TypeError(f"batch_sizes: expected a list of ints >= 1, got {type(batch_sizes).__name__}")
    if not batch_sizes:
        raise ValueError("batch_sizes: expected at least one batch size, got none")
    sizes = []
    for b in batch_sizes:
        try:
            sizes.append(check_int("max_batch_size", b, 1))
        except (TypeError, ValueError) as err:
            raise type(err)(f"batch_sizes: {err}") from None
    rows = []
    for b in sizes:
        summary = latency_summary(run_serving(model, requests, b, policy), step_seconds)
        p = summary.percentiles
        rows.append(
            BatchSweepRow(
                max_batch_size=b,
                n_steps=summary.n_steps,
                tokens_per_step=summary.tokens_per_step,
                ttft_steps_p50=p["ttft_steps"][50],
                tpot_steps_p50=p["tpot_steps"][50],
                tpot_steps_p90=p["tpot_steps"][90],
                tokens_per_second=summary.tokens_per_second,
                ttft_s_p50=p["ttft_s"][50],
                tpot_s_p50=p["tpot_s"][50],
                tpot_s_p90=p["tpot_s"][90],
                summary=summary,
            )
        )
    return rows
