"""What a serving run records, and the latencies a user feels, computed from it.

``kvtutor.serving.loop`` schedules requests and writes a ``ServingTrace``: a ``RequestRecord`` per
request (when it arrived, took a slot, ran its prompt chunks, gave its first and last tokens) and a
``StepRecord`` per scheduler step (what ran in it, and how long it took). This module holds those
records and turns a trace into TTFT, TPOT, end-to-end latency and the longest gap between two
tokens, per request and as p50/p90/p99 (``latency_summary``), in steps and in seconds: measured,
or modelled by a function of each step's work (``step_seconds``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..models.config import GPT2Config
from ..validate import check_int, check_token_ids, positions_needed

__all__ = [
    "RequestRecord",
    "StepRecord",
    "ServingTrace",
    "check_requests",
    "LATENCY_METRICS",
    "PERCENTILES",
    "RequestLatency",
    "LatencySummary",
    "latency_summary",
    "check_step_seconds",
    "step_durations",
    "token_times",
]


# ---------------------------------------------------------------- the records of a run


@dataclass
class RequestRecord:
    """One request's life in steps: it arrives, waits for a slot, runs its prompt (whole, or in
    chunks), gives its first token, decodes one token per step, and leaves."""

    arrival_step: int
    prompt_ids: list[int]
    max_new_tokens: int
    admit_step: int = -1  # the step of its prefill (its last chunk), which gives its first token
    finish_step: int = -1  # the step that gave its last token
    slot: int = -1  # the batch row it ran in
    tokens: list[int] = field(default_factory=list)
    start_step: int = -1  # the step it took its slot (the admit step unless its prompt was chunked)
    chunks: list[tuple[int, int]] = field(default_factory=list)  # (step, prompt tokens) of each chunk

    @property
    def done(self) -> bool:
        return len(self.tokens) == self.max_new_tokens

    @property
    def length(self) -> int:
        """Tokens of its sequence so far, prompt and new ones (the keys its next decode attends to)."""
        return len(self.prompt_ids) + len(self.tokens)

    @property
    def n_prefilled(self) -> int:
        """Prompt tokens already run through the model (in the cache)."""
        return sum(n for _, n in self.chunks)

    @property
    def wait_steps(self) -> int:
        """Steps spent waiting for a free slot."""
        return self.start_step - self.arrival_step

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
    """One scheduler step: what ran, how many slots were held, and how long it took.

    ``chunks`` holds one (n_new, n_past) per prompt chunk run in the step (a whole prompt is
    (prompt length, 0)); ``contexts`` the keys each decoding request attended to, its new one
    included. Together they are the step's work, what a cost model needs (``step_seconds``).
    """

    step: int
    prefilled: int  # requests whose prefill finished this step (each gives its first token)
    decoded: int  # requests that decoded one token
    held: int  # batch slots held by requests (static batching also holds finished ones)
    seconds: float
    chunks: tuple[tuple[int, int], ...] = ()
    contexts: tuple[int, ...] = ()

    @property
    def tokens(self) -> int:
        """Tokens given to users in this step: first tokens and decoded ones."""
        return self.prefilled + self.decoded

    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens run in this step (whole prompts or chunks)."""
        return sum(n for n, _ in self.chunks)

    @property
    def batched_tokens(self) -> int:
        """Tokens the model ran in this step: prompt tokens and one per decoding request."""
        return self.prompt_tokens + self.decoded


@dataclass
class ServingTrace:
    """Everything a serving run did: per request and per step. ``max_step_tokens`` is the token
    budget per step of chunked prefill (None: every prompt ran whole)."""

    policy: str
    max_batch_size: int
    requests: list[RequestRecord]
    steps: list[StepRecord] = field(default_factory=list)
    max_step_tokens: int | None = None

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


def check_requests(requests: Any, config: GPT2Config) -> list[RequestRecord]:
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


# ---------------------------------------------------------------- latency metrics

LATENCY_METRICS = ("ttft_steps", "tpot_steps", "e2e_steps", "ttft_s", "tpot_s", "e2e_s", "max_gap_s")
PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class RequestLatency:
    """One request's latency, in scheduler steps (deterministic) and in seconds (the steps' time).

    TTFT counts the steps from arrival to the first token, both ends included (a request prefilled
    in the step it arrives has a TTFT of 1 step); end-to-end (e2e) counts them to the last token;
    TPOT is the mean gap between consecutive tokens after the first, (e2e - TTFT) / (n_tokens - 1).
    Seconds sum the time of the same steps. ``max_gap_s`` is the longest gap between two
    consecutive tokens, where a stall shows (in steps every gap is one step). NaN where undefined:
    every metric of a request that produced no token (max_new_tokens 0), and TPOT and the longest
    gap of a request that produced only one.
    """

    n_tokens: int
    ttft_steps: float
    tpot_steps: float
    e2e_steps: float
    ttft_s: float
    tpot_s: float
    e2e_s: float
    max_gap_s: float = float("nan")


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


def check_step_seconds(step_seconds: Any) -> None:
    """A TypeError naming ``step_seconds`` unless it is None or callable."""
    if step_seconds is not None and not callable(step_seconds):
        raise TypeError(
            "step_seconds: expected None or a function StepRecord -> seconds, got "
            f"{type(step_seconds).__name__}"
        )


def step_durations(trace: ServingTrace, step_seconds: Any = None) -> np.ndarray:
    """ServingTrace -> [N] float64: the seconds of each step that ran, measured, or
    ``step_seconds(StepRecord)`` (a model of the step's work), checked finite and >= 0."""
    if not isinstance(trace, ServingTrace):
        raise TypeError(f"trace: expected a ServingTrace (from run_serving), got {type(trace).__name__}")
    check_step_seconds(step_seconds)
    if step_seconds is None:
        return np.array([s.seconds for s in trace.steps], dtype=np.float64)
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
    return np.array(out, dtype=np.float64)


def token_times(trace: ServingTrace, step_seconds: Any = None) -> list[np.ndarray]:
    """ServingTrace -> per request, [n_tokens] float64: when each of its tokens came out, in
    seconds from the start of the run's first step (a token comes out at the end of its step;
    idle stretches take no time). ``step_seconds`` as in ``step_durations``."""
    end_S = np.cumsum(step_durations(trace, step_seconds))
    step_S = [s.step for s in trace.steps]  # ascending
    out = []
    for r in trace.requests:
        first = int(np.searchsorted(step_S, r.admit_step))
        out.append(end_S[first : first + len(r.tokens)].copy())  # one token per step from the first on
    return out


def latency_summary(trace: ServingTrace, step_seconds: Any = None) -> LatencySummary:
    """ServingTrace -> LatencySummary: TTFT, TPOT, e2e and the longest gap between tokens per
    request (steps and seconds), throughput, and p50/p90/p99 of each.

    Steps are deterministic: the same requests and batch size always give the same numbers. Seconds
    are each step's measured time (requests that ran in one step share its time), or, if given,
    ``step_seconds(step_record)``: a modelled time per step (e.g. from ``kvtutor.measure.costs``, of the
    record's ``chunks`` and ``contexts``), which makes the seconds deterministic too. Requests that
    produced no token (max_new_tokens 0) have NaN metrics and are left out of the percentiles; so
    are TPOT and the longest gap of a single-token request.
    """
    seconds_S = step_durations(trace, step_seconds)
    step_S = [s.step for s in trace.steps]  # ascending
    cum = np.concatenate([[0.0], np.cumsum(seconds_S)])

    def between(first: int, last: int) -> tuple[float, float]:
        """Seconds of the steps first .. last, both included, and the longest of them."""
        lo, hi = np.searchsorted(step_S, first, "left"), np.searchsorted(step_S, last, "right")
        return float(cum[hi] - cum[lo]), float(seconds_S[lo:hi].max()) if hi > lo else float("nan")

    nan = float("nan")
    per_request = []
    for r in trace.requests:
        n = len(r.tokens)
        if n == 0:
            per_request.append(RequestLatency(0, nan, nan, nan, nan, nan, nan, nan))
            continue
        ttft, e2e = r.admit_step - r.arrival_step + 1, r.finish_step - r.arrival_step + 1
        ttft_s = between(r.arrival_step, r.admit_step)[0]
        after_s, gap_s = between(r.admit_step + 1, r.finish_step)
        tpot, tpot_s = ((e2e - ttft) / (n - 1), after_s / (n - 1)) if n > 1 else (nan, nan)
        per_request.append(
            RequestLatency(n, float(ttft), tpot, float(e2e), ttft_s, tpot_s, ttft_s + after_s, gap_s)
        )
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
