"""Continuous batching: decode computes one query row per request, so stack many requests' rows.

``serve`` stacks the single query rows of many requests into one batched decode step: each step,
finished requests leave, waiting requests are prefilled into the free slots, and every running
request gains one token. ``serve_static`` is the baseline that waits for a batch and holds its
slots until the longest request in it has finished. ``latency_summary`` turns a run's trace into
TTFT, TPOT and end-to-end latency with their percentiles; ``batch_size_sweep`` runs the same
requests at several batch sizes (the latency-throughput trade-off). The other answer to "one
query row": speculative decoding, in ``kvtutor.speculative``.

Both models serve. A ``NumpyModel`` runs one sequence per cache, so each request keeps its own
cache and the "batched" step is a loop over requests (same tokens, no speed-up); a ``TorchModel``
runs one batched step over a ragged cache, one length per row (``kvtutor.backends.batch_slots``).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .backends import batch_slots, check_model
from .config import ModelConfig
from .validate import check_int, check_token_ids, positions_needed

__all__ = [
    "serve",
    "serve_static",
    "run_serving",
    "ServingTrace",
    "RequestRecord",
    "StepRecord",
    "check_requests",
    "ServedOutputs",
    "latency_summary",
    "LatencySummary",
    "RequestLatency",
    "LATENCY_METRICS",
    "PERCENTILES",
    "batch_size_sweep",
    "BatchSweepRow",
]


# ---------------------------------------------------------------- continuous batching: requests


@dataclass
class RequestRecord:
    """One request's life in steps: it arrives, waits, is prefilled (its first token), decodes, leaves."""

    arrival_step: int
    prompt_ids: list[int]
    max_new_tokens: int
    admit_step: int = -1  # the step of its prefill, which gives its first token
    finish_step: int = -1  # the step that gave its last token
    slot: int = -1  # the batch row it ran in
    tokens: list[int] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return len(self.tokens) == self.max_new_tokens

    @property
    def wait_steps(self) -> int:
        """Steps spent waiting for a free slot."""
        return self.admit_step - self.arrival_step

    @property
    def first_token_steps(self) -> int:
        """Time to first token in steps, counting the arrival step (0 for a request of no tokens)."""
        return self.admit_step - self.arrival_step + 1 if self.tokens else 0

    @property
    def latency_steps(self) -> int:
        """Steps from arrival to the last token, both counted (0 for a request of no tokens)."""
        return self.finish_step - self.arrival_step + 1 if self.tokens else 0


@dataclass
class StepRecord:
    """One scheduler step: what ran, how many slots were held, and how long it took."""

    step: int
    prefilled: int  # requests prefilled this step (each gives its first token)
    decoded: int  # requests that decoded one token
    held: int  # batch slots held by requests (static batching also holds finished ones)
    seconds: float

    @property
    def tokens(self) -> int:
        return self.prefilled + self.decoded


@dataclass
class ServingTrace:
    """Everything a serving run did: per request and per step."""

    policy: str
    max_batch_size: int
    requests: list[RequestRecord]
    steps: list[StepRecord] = field(default_factory=list)

    @property
    def outputs(self) -> list[list[int]]:
        """Each request's new tokens, in request order."""
        return [r.tokens for r in self.requests]

    @property
    def n_tokens(self) -> int:
        return sum(len(r.tokens) for r in self.requests)

    @property
    def n_steps(self) -> int:
        """Steps that ran a model (idle stretches, with nothing arrived, are skipped)."""
        return len(self.steps)

    @property
    def makespan_steps(self) -> int:
        """Steps from the first arrival to the last token, idle ones included."""
        if not self.steps:
            return 0
        return self.steps[-1].step - min(r.arrival_step for r in self.requests) + 1

    @property
    def tokens_per_step(self) -> float:
        return self.n_tokens / self.n_steps if self.steps else float("nan")

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.steps)

    @property
    def tokens_per_second(self) -> float:
        return self.n_tokens / self.seconds if self.seconds > 0 else float("nan")

    def latency_seconds(self) -> list[float]:
        """Per request: the time of the steps from its arrival to its last token."""
        return [
            sum(s.seconds for s in self.steps if r.arrival_step <= s.step <= r.finish_step)
            if r.tokens else 0.0
            for r in self.requests
        ]  # fmt: skip

    def first_token_seconds(self) -> list[float]:
        """Per request: the time of the steps from its arrival to its first token."""
        return [
            sum(s.seconds for s in self.steps if r.arrival_step <= s.step <= r.admit_step)
            if r.tokens else 0.0
            for r in self.requests
        ]  # fmt: skip


def check_requests(requests: Any, config: ModelConfig) -> list[RequestRecord]:
    """requests -> one fresh RequestRecord each, or a TypeError/ValueError naming the request."""
    if isinstance(requests, (str, bytes)) or not isinstance(requests, Sequence):
        raise TypeError(f"requests: expected a list of (arrival_step, prompt_ids, max_new_tokens), got "
                        f"{type(requests).__name__}")  # fmt: skip
    records = []
    for i, req in enumerate(requests):
        where = f"requests: request {i}"
        if isinstance(req, (str, bytes)) or not isinstance(req, Sequence) or len(req) != 3:
            raise ValueError(
                f"{where}: expected a tuple (arrival_step, prompt_ids, max_new_tokens), got {req!r}"
            )
        arrival, prompt, n_new = req
        try:
            arrival = check_int("arrival_step", arrival, 0)
            prompt = check_token_ids(prompt, config.vocab_size, "prompt_ids")
            n_new = check_int("max_new_tokens", n_new, 0)
        except (TypeError, ValueError) as err:
            raise type(err)(f"{where}: {err}") from None
        needed = positions_needed(len(prompt), n_new)
        if needed > config.max_seq_len:
            raise ValueError(
                f"{where}: prompt of {len(prompt)} + {n_new} new tokens needs {needed} positions (the last "
                f"new token is not fed back), more than max_seq_len {config.max_seq_len}"
            )
        records.append(RequestRecord(arrival, [int(t) for t in prompt], n_new))
    return records


# ---------------------------------------------------------------- continuous batching: the scheduler


def run_serving(
    model: Any,
    requests: Sequence[tuple[int, Sequence[int], int]],
    max_batch_size: int,
    policy: str = "continuous",
) -> ServingTrace:
    """requests -> ServingTrace: serve them step by step with greedy decoding.

    Every step, in order: (1) fill free slots with requests that have arrived
    (first come, first served) and prefill each, which gives its first token;
    (2) one batched decode step for every other running request, one token
    each; (3) requests that have all their tokens leave. ``"continuous"``
    admits whenever a slot is free; ``"static"`` admits only into an empty
    batch and keeps every slot until the batch's longest request has finished.

    The book shows this in "Continuous batching".
    """
    cfg = check_model(model, "model")
    records = check_requests(requests, cfg)
    max_batch_size = check_int("max_batch_size", max_batch_size, 1)
    if policy not in ("continuous", "static"):
        raise ValueError(
            f"policy: expected 'continuous' or 'static', got {policy!r}",
        )
    trace = ServingTrace(policy, max_batch_size, records)
    for r in records:
        # nothing to do: done on arrival, never holds a slot
        if r.max_new_tokens == 0:
            r.admit_step = r.finish_step = r.arrival_step
    to_serve = (r for r in records if r.max_new_tokens)
    waiting = deque(sorted(to_serve, key=lambda r: r.arrival_step))
    if not waiting:
        return trace
    # positions a request needs: its prompt and its new tokens but the last
    capacity = max(positions_needed(len(r.prompt_ids), r.max_new_tokens)
                   for r in waiting)  # fmt: skip
    # more slots than requests would never be used
    n_slots = min(max_batch_size, len(waiting))
    engine = batch_slots(model, n_slots, capacity)
    running: dict[int, RequestRecord] = {}  # batch slot -> the request in it
    step = waiting[0].arrival_step
    while waiting or running:
        if not running and waiting[0].arrival_step > step:
            step = waiting[0].arrival_step  # idle until the next arrival
        start = time.perf_counter()
        # (1) join: arrived requests take free slots; each is prefilled, which
        # gives its first token
        admitted = []
        if policy == "continuous" or not running:
            free = [s for s in range(n_slots) if s not in running]
            while waiting and free and waiting[0].arrival_step <= step:
                slot, r = free.pop(0), waiting.popleft()
                r.slot, r.admit_step = slot, step
                r.tokens.append(engine.prefill(slot, r.prompt_ids))
                running[slot] = r
                admitted.append(slot)
        # (2) decode: every other unfinished request gains one token, all in
        # one batched step
        unfinished = [s for s, r in running.items() if not r.done]
        decoding = [s for s in unfinished if s not in admitted]
        if decoding:
            last_tokens = [running[s].tokens[-1] for s in decoding]
            next_tokens = engine.decode(decoding, last_tokens)
            for slot, token in zip(decoding, next_tokens, strict=True):
                running[slot].tokens.append(token)
        # (3) leave: finished requests free their slots (static: only once the
        # whole batch is done)
        held = len(running)
        for r in running.values():
            if r.done and r.finish_step < 0:
                r.finish_step = step
        if policy == "continuous" or all(r.done for r in running.values()):
            running = {s: r for s, r in running.items() if not r.done}
        seconds = time.perf_counter() - start
        record = StepRecord(step, len(admitted), len(decoding), held, seconds)
        trace.steps.append(record)
        step += 1
    return trace


def serve(
    model: Any, requests: Sequence[tuple[int, Sequence[int], int]], max_batch_size: int
) -> ServedOutputs:
    """requests (arrival_step, prompt_ids, max_new_tokens) -> each request's new greedy tokens, in order.

    Continuous batching: requests join and leave the running batch at every step; each token is
    the one that decoding the request alone would give. The list that comes back also carries
    the run's ``trace`` and its ``latency`` (TTFT, TPOT, end-to-end, throughput, percentiles).
    """
    return ServedOutputs(run_serving(model, requests, max_batch_size, "continuous"))


def serve_static(
    model: Any, requests: Sequence[tuple[int, Sequence[int], int]], max_batch_size: int
) -> ServedOutputs:
    """requests -> new tokens, with static batching: a batch runs until its longest request finishes."""
    return ServedOutputs(run_serving(model, requests, max_batch_size, "static"))


# ---------------------------------------------------------------- continuous batching: latency metrics

LATENCY_METRICS = ("ttft_steps", "tpot_steps", "e2e_steps", "ttft_s", "tpot_s", "e2e_s")
PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class RequestLatency:
    """One request's latency, in scheduler steps (deterministic) and in seconds (the steps' time).

    TTFT counts the steps from arrival to the first token, both ends included (a request prefilled
    in the step it arrives has a TTFT of 1 step); end-to-end (e2e) counts them to the last token;
    TPOT is the mean gap between consecutive tokens after the first, (e2e - TTFT) / (n_tokens - 1).
    Seconds sum the time of the same steps. NaN where undefined: every metric of a request that
    produced no token (max_new_tokens 0), and TPOT of a request that produced only one.
    """

    n_tokens: int
    ttft_steps: float
    tpot_steps: float
    e2e_steps: float
    ttft_s: float
    tpot_s: float
    e2e_s: float


@dataclass(frozen=True)
class LatencySummary:
    """One serving run's latency and throughput; ``latency_summary(trace)`` makes it.

    ``requests`` holds one RequestLatency per request, in request order. ``percentiles`` maps each
    metric name of ``LATENCY_METRICS`` to {50: p50, 90: p90, 99: p99}, over the requests where the
    metric is defined (NaN if none is). Throughput counts the steps that ran a model (tokens per
    step) and their total time (tokens per second). ``clock`` says where the seconds come from:
    ``"measured"`` (each step's perf_counter time) or ``"modelled"`` (a ``step_seconds`` function).
    """

    policy: str
    max_batch_size: int
    clock: str
    requests: list[RequestLatency]
    n_tokens: int
    n_steps: int
    makespan_steps: int
    seconds: float
    tokens_per_step: float
    tokens_per_second: float
    percentiles: dict[str, dict[int, float]]

    @property
    def n_without_tokens(self) -> int:
        """Requests that produced no token (max_new_tokens 0): left out of every percentile."""
        return sum(r.n_tokens == 0 for r in self.requests)

    def values(self, metric: str) -> np.ndarray:
        """metric name -> [N] float64: its value for each request where it is defined, in request order."""
        if metric not in LATENCY_METRICS:
            raise ValueError(f"metric: expected one of {LATENCY_METRICS}, got {metric!r}")
        return _defined(self.requests, metric)

    def percentile(self, metric: str, q: float) -> float:
        """metric name, q in [0, 100] -> the q-th percentile (numpy's linear interpolation), NaN if none."""
        if isinstance(q, bool) or not isinstance(q, (int, float, np.integer, np.floating)):
            raise TypeError(f"q: expected a number in [0, 100], got {type(q).__name__} {q!r}")
        if not 0 <= q <= 100:
            raise ValueError(f"q: expected a number in [0, 100], got {q!r}")
        return _percentile(self.values(metric), q)

    def as_dict(self) -> dict[str, float]:
        """Plain Python numbers, flat (``ttft_steps_p50``, ...), for glue, JSON or a table."""
        out: dict[str, float] = {
            "max_batch_size": self.max_batch_size,
            "n_requests": len(self.requests),
            "n_without_tokens": self.n_without_tokens,
            "n_tokens": self.n_tokens,
            "n_steps": self.n_steps,
            "makespan_steps": self.makespan_steps,
            "seconds": self.seconds,
            "tokens_per_step": self.tokens_per_step,
            "tokens_per_second": self.tokens_per_second,
        }
        for metric, by_q in self.percentiles.items():
            out.update({f"{metric}_p{q}": value for q, value in by_q.items()})
        return out


def _defined(requests: list[RequestLatency], metric: str) -> np.ndarray:
    """[N] float64: the metric for each request where it is defined (not NaN)."""
    v_N = np.array([getattr(r, metric) for r in requests], dtype=np.float64)
    return v_N[~np.isnan(v_N)]


def _percentile(v_N: np.ndarray, q: float) -> float:
    """[N] -> the q-th percentile (numpy's linear interpolation), NaN for no values."""
    return float(np.percentile(v_N, q)) if len(v_N) else float("nan")


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


def _check_step_seconds(step_seconds: Any) -> None:
    if step_seconds is not None and not callable(step_seconds):
        raise TypeError(
            "step_seconds: expected None or a function StepRecord -> seconds, got "
            f"{type(step_seconds).__name__}"
        )


def _step_seconds(trace: ServingTrace, step_seconds: Any) -> list[float]:
    """Each step's seconds: measured, or ``step_seconds(StepRecord)``, checked finite and >= 0."""
    _check_step_seconds(step_seconds)
    if step_seconds is None:
        return [s.seconds for s in trace.steps]
    out = []
    for s in trace.steps:
        value = step_seconds(s)
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise TypeError(
                f"step_seconds: expected a number of seconds, got {type(value).__name__} {value!r}"
            )
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"step_seconds: expected finite seconds >= 0, got {value!r} for step {s.step}")
        out.append(float(value))
    return out


def latency_summary(trace: ServingTrace, step_seconds: Any = None) -> LatencySummary:
    """ServingTrace -> LatencySummary: TTFT, TPOT, e2e per request (steps and seconds), throughput,
    and p50/p90/p99 of each.

    Steps are deterministic: the same requests and batch size always give the same numbers. Seconds
    are each step's measured time (requests that ran in one step share its time), or, if given,
    ``step_seconds(step_record)``: a modelled time per step (e.g. from ``kvtutor.costs``), which
    makes the seconds deterministic too. Requests that produced no token (max_new_tokens 0) have
    NaN metrics and are left out of the percentiles; so is TPOT of a single-token request.
    """
    if not isinstance(trace, ServingTrace):
        raise TypeError(f"trace: expected a ServingTrace (from run_serving), got {type(trace).__name__}")
    seconds_S = _step_seconds(trace, step_seconds)
    step_S = [s.step for s in trace.steps]  # ascending
    cum = np.concatenate([[0.0], np.cumsum(seconds_S)])

    def between(first: int, last: int) -> float:
        """Seconds of the steps first .. last, both included."""
        lo, hi = np.searchsorted(step_S, first, "left"), np.searchsorted(step_S, last, "right")
        return float(cum[hi] - cum[lo])

    nan = float("nan")
    per_request = []
    for r in trace.requests:
        n = len(r.tokens)
        if n == 0:
            per_request.append(RequestLatency(0, nan, nan, nan, nan, nan, nan))
            continue
        ttft, e2e = r.admit_step - r.arrival_step + 1, r.finish_step - r.arrival_step + 1
        ttft_s, after_s = between(r.arrival_step, r.admit_step), between(r.admit_step + 1, r.finish_step)
        tpot, tpot_s = ((e2e - ttft) / (n - 1), after_s / (n - 1)) if n > 1 else (nan, nan)
        per_request.append(RequestLatency(n, float(ttft), tpot, float(e2e), ttft_s, tpot_s, ttft_s + after_s))
    seconds = float(cum[-1])
    percentiles = {
        metric: {q: _percentile(_defined(per_request, metric), q) for q in PERCENTILES}
        for metric in LATENCY_METRICS
    }
    return LatencySummary(
        policy=trace.policy,
        max_batch_size=trace.max_batch_size,
        clock="measured" if step_seconds is None else "modelled",
        requests=per_request,
        n_tokens=trace.n_tokens,
        n_steps=trace.n_steps,
        makespan_steps=trace.makespan_steps,
        seconds=seconds,
        tokens_per_step=trace.tokens_per_step,
        tokens_per_second=trace.n_tokens / seconds if seconds > 0 else nan,
        percentiles=percentiles,
    )


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
    _check_step_seconds(step_seconds)
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
