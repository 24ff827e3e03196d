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

``serve_step``, ``run_chunks`` and ``take_chunks`` check their arguments first (``check_step``,
``check_run_chunks``, ``check_take_chunks``: the policy by its exact name, the budget, the slots
against the engine and the queue), so a bad call is refused before anything runs and changes
nothing; the book shows the mechanism underneath, without the checks.

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
from typing import Any, NamedTuple

from ..validate import check_choice, check_int, check_token_ids, checked_by, positions_needed
from .backends import BatchedSlots, LoopedSlots, batch_slots, check_model
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
    "leave",
    "run_chunks",
    "take_chunks",
    "check_budget",
    "POLICIES",
    "check_step",
    "check_run_chunks",
    "check_take_chunks",
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

#: the scheduling policies: admit whenever a slot is free, or only into an empty batch
POLICIES = ("continuous", "static")


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
    check_choice("policy", policy, POLICIES)
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

    The book shows this in "Continuous batching"."""
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
    held, seconds = leave(running, step, policy), time.perf_counter() - start
    n_decoded = len(decoding)
    return StepRecord(step, n_first, n_decoded, held, seconds, work, contexts)


def leave(running: dict[int, RequestRecord], step: int, policy: str) -> int:
    """Step (4) of ``serve_step``: finished requests free their slots, every step (continuous)
    or all at once when the whole batch is done (static). Returns how many slots the step held."""
    held, done = len(running), [s for s, r in running.items() if r.done]
    for s in done:
        if running[s].finish_step < 0:  # static: done earlier, still held
            running[s].finish_step = step
    if policy == "continuous" or len(done) == held:
        for s in done:
            del running[s]
    return held


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


# ---------------------------------------------------------------- the checks of one step


class _Slots(NamedTuple):
    """What the checks need to know of an engine's batch slots."""

    n: int  # slots
    capacity: int  # positions each slot holds at most
    held: list[int]  # positions each slot holds now
    vocab_size: int


def _slots(engine: Any) -> _Slots:
    """Batch slots (``batch_slots``) -> their _Slots, or a TypeError naming ``engine``."""
    if isinstance(engine, LoopedSlots):
        caches, vocab_size = engine.caches, engine.model.config.vocab_size
        return _Slots(len(caches), caches[0].capacity if caches else 0, [len(c) for c in caches], vocab_size)
    if isinstance(engine, BatchedSlots):
        cache, vocab_size = engine.cache, engine.model.config.vocab_size
        return _Slots(engine.n_slots, cache.capacity, list(cache.host_lengths), vocab_size)
    raise TypeError(
        f"engine: expected batch slots from batch_slots(model, n_slots, capacity), "
        f"got {type(engine).__name__}"
    )


def _check_record(r: Any, where: str, slots: _Slots | None = None) -> None:
    """One RequestRecord on its own: ints where ints belong, a prompt of token ids, chunks that
    add up to at most the prompt, a first token exactly when the prompt has run, no more tokens
    than it asked for, and (given the slots) room in a slot for all of it."""
    if not isinstance(r, RequestRecord):
        raise TypeError(f"{where}: expected a RequestRecord, got {type(r).__name__}")
    vocab_size = slots.vocab_size if slots is not None else 2**63 - 1
    try:
        check_int("arrival_step", r.arrival_step, 0)
        n_prompt = len(check_token_ids(r.prompt_ids, vocab_size, "prompt_ids"))
        check_int("max_new_tokens", r.max_new_tokens, 1)
        if r.tokens:
            check_token_ids(r.tokens, vocab_size, "tokens")
        for chunk in r.chunks:
            if not (isinstance(chunk, tuple) and len(chunk) == 2):
                raise TypeError(f"chunks: expected (step, n_new) pairs, got {chunk!r}")
            check_int("chunks", chunk[1], 1)
    except (TypeError, ValueError) as err:
        raise type(err)(f"{where}: {err}") from None
    if r.n_prefilled > n_prompt:
        raise ValueError(
            f"{where}: chunks: expected at most its {n_prompt} prompt tokens, got {r.n_prefilled}"
        )
    if bool(r.tokens) != (r.n_prefilled == n_prompt) or len(r.tokens) > r.max_new_tokens:
        raise ValueError(
            f"{where}: tokens: expected a first token once the whole prompt has run and at most "
            f"{r.max_new_tokens} in all, got {len(r.tokens)} after {r.n_prefilled} of {n_prompt} "
            "prompt tokens"
        )
    needed = positions_needed(n_prompt, r.max_new_tokens)
    if slots is not None and needed > slots.capacity:
        raise ValueError(
            f"{where}: prompt of {n_prompt} + {r.max_new_tokens} new tokens needs {needed} positions, "
            f"more than a slot's capacity {slots.capacity}"
        )


def _check_running(running: Any, slots: _Slots, n_slots: int) -> None:
    """The running requests: a dict slot -> RequestRecord, each in its own slot below ``n_slots``,
    and each slot holding exactly the positions its request has run."""
    if not isinstance(running, dict):
        raise TypeError(f"running: expected a dict slot -> RequestRecord, got {type(running).__name__}")
    seen: set[int] = set()
    for slot, r in running.items():
        if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < n_slots:
            raise ValueError(f"running: expected slots in [0, {n_slots}), got {slot!r}")
        where = f"running: slot {slot}"
        _check_record(r, where, slots)
        if id(r) in seen or r.slot != slot:
            raise ValueError(
                f"{where}: expected its request, in no other slot, got one that says slot {r.slot}"
            )
        seen.add(id(r))
        cached = r.length - 1 if r.tokens else r.n_prefilled
        if r.n_prefilled and slots.held[slot] != cached:
            raise ValueError(
                f"{where}: expected the slot to hold the {cached} positions its request has run, "
                f"got {slots.held[slot]}"
            )


def _check_waiting(waiting: Any, running: dict[int, RequestRecord], slots: _Slots) -> None:
    """The queue: a deque of requests that have not started, in arrival order."""
    if not isinstance(waiting, deque):
        raise TypeError(
            f"waiting: expected a deque of RequestRecord in arrival order, got {type(waiting).__name__}"
        )
    seen = {id(r) for r in running.values()}
    last = 0
    for i, r in enumerate(waiting):
        where = f"waiting: request {i}"
        _check_record(r, where, slots)
        if r.tokens or r.chunks or id(r) in seen:
            raise ValueError(f"{where}: expected a request that has not started, got one running or run")
        if r.arrival_step < last:
            raise ValueError(f"{where}: expected the queue in arrival order, got arrival_step "
                             f"{r.arrival_step} after {last}")  # fmt: skip
        seen.add(id(r))
        last = r.arrival_step


def check_step(
    engine: Any, running: Any, waiting: Any, n_slots: Any, step: Any, policy: Any, max_step_tokens: Any
) -> None:
    """``serve_step``'s arguments, checked before anything runs: a TypeError/ValueError naming the
    first that is wrong (``engine``, ``n_slots``, ``step``, ``policy``, ``max_step_tokens``,
    ``running``, ``waiting``), and nothing changed."""
    slots = _slots(engine)
    try:
        n_slots = check_int("n_slots", n_slots, 1, slots.n)
    except ValueError as err:
        raise ValueError(f"{err} (the engine has {slots.n} slots)") from None
    step = check_int("step", step, 0)
    check_choice("policy", policy, POLICIES)
    if max_step_tokens is not None:
        check_budget(max_step_tokens, n_slots)
    _check_running(running, slots, n_slots)
    ran = [(r.start_step, r.admit_step, r.finish_step, *(s for s, _ in r.chunks)) for r in running.values()]
    last = max((s for steps in ran for s in steps), default=-1)
    if step <= last:
        raise ValueError(
            f"step: expected a step after the last one the running requests saw ({last}), got {step}"
        )
    _check_waiting(waiting, running, slots)


def check_run_chunks(engine: Any, running: Any, chunks: Any, step: Any) -> None:
    """``run_chunks``'s arguments, checked before any chunk runs: each chunk (slot, n_new) is a
    running request's and at most the prompt tokens it has left (after the chunks before it)."""
    slots = _slots(engine)
    check_int("step", step, 0)
    _check_running(running, slots, slots.n)
    if isinstance(chunks, (str, bytes)) or not isinstance(chunks, Sequence):
        raise TypeError(f"chunks: expected a list of (slot, n_new), got {type(chunks).__name__}")
    prefilled = {slot: r.n_prefilled for slot, r in running.items()}
    for i, chunk in enumerate(chunks):
        where = f"chunks: chunk {i}"
        if isinstance(chunk, (str, bytes)) or not isinstance(chunk, Sequence) or len(chunk) != 2:
            raise TypeError(f"{where}: expected a pair (slot, n_new), got {chunk!r}")
        try:
            slot, n_new = check_int("slot", chunk[0]), check_int("n_new", chunk[1], 1)
        except (TypeError, ValueError) as err:
            raise type(err)(f"{where}: {err}") from None
        if slot not in running:
            raise ValueError(f"{where}: expected the slot of a running request {sorted(running)}, got {slot}")
        left = len(running[slot].prompt_ids) - prefilled[slot]
        if n_new > left:
            raise ValueError(
                f"{where}: expected at most the {left} prompt tokens slot {slot} has left, got {n_new}"
            )
        prefilled[slot] += n_new


def check_take_chunks(running: Any, n_decoding: Any, max_step_tokens: Any) -> None:
    """``take_chunks``'s arguments: running requests whose chunks add up, a count of decoding
    requests among them, and a budget that is None or an int >= 0."""
    if not isinstance(running, dict):
        raise TypeError(f"running: expected a dict slot -> RequestRecord, got {type(running).__name__}")
    for slot, r in running.items():
        _check_record(r, f"running: slot {slot!r}")
    check_int("n_decoding", n_decoding, 0, len(running))
    if max_step_tokens is not None:
        check_int("max_step_tokens", max_step_tokens, 0)


# What the package offers as serve_step, run_chunks and take_chunks: each checks its arguments
# first, then runs the function above, the mechanism the book shows (``inspect.getsource``
# follows ``__wrapped__`` to it).
serve_step = checked_by(check_step)(serve_step)
run_chunks = checked_by(check_run_chunks)(run_chunks)
take_chunks = checked_by(check_take_chunks)(take_chunks)


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
