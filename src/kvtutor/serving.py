"""Serving: two answers to "decode computes one query row, is that a waste?".

Continuous batching stacks the single query rows of many requests into one batched decode step
(``serve``): each step, finished requests leave, waiting requests are prefilled into the free
slots, and every running request gains one token. ``serve_static`` is the baseline that waits
for a batch and holds its slots until the longest request in it has finished.

Speculative decoding (``speculative_generate``) makes one request's query block taller: a cheap
draft guesses k tokens, and the target checks all of them in one forward pass over k + 1 query
rows, which is a prefill-shaped pass at an offset, so it needs the offset causal mask again.
Rejected guesses are rolled back with ``cache.truncate``. The drafts here: the target's own first
layers (``layer_cut_draft``) and prompt lookup (``PromptLookupDraft``), which needs no model.

Both work with ``NumpyModel`` and ``TorchModel``. With a ``NumpyModel`` each request keeps its own
cache and the "batched" step is a loop over requests (same tokens, no speed-up); a ``TorchModel``
runs one batched step over a ragged cache (one length per row).
"""

from __future__ import annotations

import copy
import math
import sys
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .cache import KVCache
from .config import ModelConfig
from .gpt2_weights import GPT2Weights
from .numpy_model import NumpyModel, softmax
from .validate import (
    check_max_new_tokens,
    check_temperature,
    check_token_id,
    check_token_ids,
    positions_needed,
)

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
    "speculative_generate",
    "speculative_run",
    "SpeculativeResult",
    "token_probs",
    "verify_draft",
    "Draft",
    "ModelDraft",
    "PromptLookupDraft",
    "layer_cut_draft",
    "expected_tokens_per_step",
    "expected_speedup",
]


# ---------------------------------------------------------------- one interface to both backends


def _torch_model_class() -> type | None:
    """TorchModel if kvtutor.torch_model has been imported (a model of it cannot exist otherwise)."""
    module = sys.modules.get("kvtutor.torch_model")
    return getattr(module, "TorchModel", None)


def _is_torch_model(model: Any) -> bool:
    cls = _torch_model_class()
    return cls is not None and isinstance(model, cls)


def _check_model(model: Any, name: str) -> ModelConfig:
    if not isinstance(model, NumpyModel) and not _is_torch_model(model):
        raise TypeError(f"{name}: expected a NumpyModel or a TorchModel, got {type(model).__name__}")
    return model.config


class _Runner:
    """A batch-1 view of either backend: ``forward(ids, cache) -> [T,V]`` numpy, length, truncate."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.torch = _is_torch_model(model)

    def new_cache(self) -> Any:
        if self.torch:
            return self.model.new_cache(1)
        return self.model.new_cache()

    def check_cache(self, cache: Any, name: str) -> None:
        """An empty cache of this model for one sequence."""
        self.model.check_cache(cache)
        if self.torch and cache.batch_size != 1:
            raise ValueError(f"{name}: expected a cache of batch size 1, got {cache.batch_size}")
        if self.length(cache) != 0:
            raise ValueError(f"{name}: expected an empty cache, got one holding {self.length(cache)}")

    def capacity(self, cache: Any) -> int:
        return int(cache.capacity)

    def length(self, cache: Any) -> int:
        return cache.host_lengths[0] if self.torch else len(cache)

    def forward(self, ids: Sequence[int], cache: Any) -> np.ndarray:
        """[T] -> [T,V] float64: T new tokens at positions length .. length+T-1 of the cache."""
        if not self.torch:
            return self.model.forward(np.asarray(ids, dtype=np.int64), cache).astype(np.float64)
        import torch

        ids_1T = torch.tensor([list(ids)], dtype=torch.long, device=self.model.device)
        with torch.inference_mode():
            logits_1TV = self.model.forward(ids_1T, cache)
        return logits_1TV[0].double().cpu().numpy()

    def truncate(self, cache: Any, length: int) -> None:
        cache.truncate(length)


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


def _check_int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__} {value!r}")
    if value < low:
        raise ValueError(f"{name}: expected an int >= {low}, got {value}")
    return int(value)


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
            arrival = _check_int("arrival_step", arrival, 0)
            prompt = check_token_ids(prompt, config.vocab_size, "prompt_ids")
            n_new = _check_int("max_new_tokens", n_new, 0)
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


# ---------------------------------------------------------------- continuous batching: engines


class _NumpyEngine:
    """One cache per slot; a batched step is a loop over requests (the same tokens, no speed-up)."""

    def __init__(self, model: NumpyModel, n_slots: int, capacity: int) -> None:
        self.model = model
        self.caches: list[KVCache] = [model.new_cache(capacity=capacity) for _ in range(n_slots)]

    def prefill(self, slot: int, prompt: list[int]) -> int:
        """Prompt [T] into an empty slot -> its first (greedy) token."""
        self.caches[slot].truncate(0)
        return int(np.argmax(self.model.prefill(prompt, self.caches[slot])[-1]))

    def decode(self, slots: list[int], tokens: list[int]) -> list[int]:
        """One new token for each listed slot -> the next (greedy) token of each."""
        return [
            int(np.argmax(self.model.decode_step(tok, self.caches[slot])))
            for slot, tok in zip(slots, tokens, strict=True)
        ]


class _TorchEngine:
    """One batched cache [L, B, Hkv, M, K] with a length per row; one decode step for all rows."""

    def __init__(self, model: Any, n_slots: int, capacity: int) -> None:
        import torch

        self.torch = torch
        self.model = model
        self.n_slots = n_slots
        self.cache = model.new_cache(n_slots, max_seq_len=capacity)

    def prefill(self, slot: int, prompt: list[int]) -> int:
        torch = self.torch
        self.cache.reset_row(slot)
        ids_T = torch.tensor(prompt, dtype=torch.long, device=self.model.device)
        with torch.inference_mode():
            logits_TV = self.model.prefill_row(ids_T, self.cache, slot)
        return int(logits_TV[-1].argmax())

    def decode(self, slots: list[int], tokens: list[int]) -> list[int]:
        torch = self.torch
        ids_B = torch.zeros(self.n_slots, dtype=torch.long)
        ids_B[slots] = torch.tensor(tokens, dtype=torch.long)
        active_B = np.zeros(self.n_slots, dtype=bool)
        active_B[slots] = True
        with torch.inference_mode():
            logits_BV = self.model.decode_step(ids_B.to(self.model.device), self.cache, active=active_B)
        next_B = logits_BV.argmax(dim=-1).cpu()
        return [int(next_B[s]) for s in slots]


def _engine(model: Any, n_slots: int, capacity: int) -> Any:
    if isinstance(model, NumpyModel):
        return _NumpyEngine(model, n_slots, capacity)
    return _TorchEngine(model, n_slots, capacity)


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
    """
    cfg = _check_model(model, "model")
    records = check_requests(requests, cfg)
    max_batch_size = _check_int("max_batch_size", max_batch_size, 1)
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
    engine = _engine(model, n_slots, capacity)
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
    cfg = _check_model(model, "model")
    check_requests(requests, cfg)
    _check_step_seconds(step_seconds)
    if isinstance(batch_sizes, (str, bytes)) or not isinstance(batch_sizes, Sequence):
        raise TypeError(f"batch_sizes: expected a list of ints >= 1, got {type(batch_sizes).__name__}")
    if not batch_sizes:
        raise ValueError("batch_sizes: expected at least one batch size, got none")
    sizes = []
    for b in batch_sizes:
        try:
            sizes.append(_check_int("max_batch_size", b, 1))
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


# ---------------------------------------------------------------- speculative decoding: the theory


def expected_tokens_per_step(a: float, k: int) -> float:
    """acceptance rate a, k drafts -> E = (1 - a^(k+1)) / (1 - a), tokens per target pass.

    Each draft is accepted with probability a until the first rejection; the target pass adds
    one token of its own (the correction, or a bonus token when all k are accepted).
    """
    if not 0.0 <= a <= 1.0:
        raise ValueError(f"a: expected an acceptance rate in [0, 1], got {a}")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
        raise ValueError(f"k: expected an int >= 0, got {k!r}")
    if a == 1.0:
        return float(k + 1)
    return float((1.0 - a ** (k + 1)) / (1.0 - a))


def expected_speedup(a: float, k: int, c: float) -> float:
    """a, k, c = draft step cost / target step cost -> E / (k c + 1), the wall-clock speedup.

    A round costs k draft steps and one target pass (assumed to cost one decode step, since
    k + 1 query rows read the same weights as one) and yields E tokens on average.
    """
    if not c >= 0:
        raise ValueError(f"c: expected a cost ratio >= 0, got {c}")
    return expected_tokens_per_step(a, k) / (k * c + 1.0)


# ---------------------------------------------------------------- speculative decoding: one round


def token_probs(logits_TV: np.ndarray, temperature: float) -> np.ndarray:
    """[T,V] -> [T,V] float64: softmax(logits / temperature); one-hot at the argmax if temperature = 0."""
    logits_TV = np.asarray(logits_TV, dtype=np.float64)
    if temperature == 0:
        probs_TV = np.zeros_like(logits_TV)
        probs_TV[np.arange(len(logits_TV)), logits_TV.argmax(axis=-1)] = 1.0
        return probs_TV
    return softmax(logits_TV / temperature)


def _draw(probs_V: np.ndarray, rng: np.random.Generator) -> int:
    """[V] -> token id drawn from the distribution (the argmax, without using rng, if one-hot)."""
    top = int(np.argmax(probs_V))
    if probs_V[top] == 1.0:
        return top
    return int(rng.choice(len(probs_V), p=probs_V / probs_V.sum()))


def verify_draft(
    p_TV: np.ndarray,
    q_KV: np.ndarray | None,
    draft_tokens: Sequence[int],
    rng: np.random.Generator,
) -> tuple[int, int]:
    """[k+1,V] target probs, [k,V] draft probs (None: a deterministic draft),
    k drafts -> (kept, next).

    Draft token i is kept with probability min(1, p_i(d) / q_i(d)); at the
    first rejection the next token is drawn from the residual
    max(0, p_i - q_i), normalised, and the rest is thrown away. If all k are
    kept the next token comes from p_k, the target's distribution after them.
    The tokens that come out are distributed exactly as if the target had
    sampled them itself. With temperature 0, p and q are one-hot: a draft is
    kept iff it is the target's argmax.
    """
    for i, token in enumerate(draft_tokens):
        p_V = p_TV[i]
        if q_KV is None:
            q_V = np.zeros_like(p_V)
            q_V[token] = 1.0
        else:
            q_V = q_KV[i]
        p_d, q_d = p_V[token], q_V[token]
        if p_d >= q_d or (p_d > 0 and rng.random() < p_d / q_d):
            continue  # accepted
        residual_V = np.maximum(p_V - q_V, 0.0)
        if not residual_V.sum() > 0:  # only through rounding: p and q equal
            residual_V = p_V
        return i, _draw(residual_V, rng)
    return len(draft_tokens), _draw(p_TV[len(draft_tokens)], rng)


# ---------------------------------------------------------------- speculative decoding: drafts


@runtime_checkable
class Draft(Protocol):
    """What speculative decoding needs from a draft: guesses, and forgetting rejected ones."""

    def propose(
        self, seq: list[int], k: int, temperature: float, rng: np.random.Generator
    ) -> tuple[list[int], np.ndarray | None]:
        """context -> up to k guessed next tokens and their probabilities [k,V] (None: deterministic)."""
        ...

    def rollback(self, length: int) -> None:
        """Forget everything after the first ``length`` tokens of the context."""
        ...


class ModelDraft:
    """A small language model as the draft: k decode steps on its own cache, one token each."""

    def __init__(self, model: Any) -> None:
        _check_model(model, "model")
        self.model = model
        self._runner = _Runner(model)
        self.cache: Any = None
        self.calls = 0  # forward passes run

    def propose(
        self, seq: list[int], k: int, temperature: float, rng: np.random.Generator
    ) -> tuple[list[int], np.ndarray | None]:
        """context -> k tokens sampled from the draft (its argmax at temperature 0), probs [k,V]."""
        if k == 0:
            return [], None
        if self.cache is None:
            self.cache = self._runner.new_cache()
        tokens: list[int] = []
        q_rows = []
        new = seq[self._runner.length(self.cache) :]  # the context the draft has not seen yet
        for _ in range(k):
            logits_TV = self._runner.forward(new, self.cache)
            self.calls += 1
            q_V = token_probs(logits_TV[-1:], temperature)[0]
            tokens.append(_draw(q_V, rng))
            q_rows.append(q_V)
            new = tokens[-1:]
        # the last guess is not fed to the draft: if it is accepted, the next round feeds it
        return tokens, np.stack(q_rows)

    def rollback(self, length: int) -> None:
        if self.cache is not None and self._runner.length(self.cache) > length:
            self._runner.truncate(self.cache, length)


@dataclass
class PromptLookupDraft:
    """Prompt lookup: propose what followed the most recent earlier occurrence of the last n tokens.

    No model: it finds the context's final n-gram (n = max_ngram down to min_ngram) earlier in the
    context and copies up to k tokens that came after it. It pays off on text that repeats itself
    (code edits, summaries quoting their source, ...) and proposes nothing when there is no match.
    """

    max_ngram: int = 3
    min_ngram: int = 1

    def __post_init__(self) -> None:
        for name in ("max_ngram", "min_ngram"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
        if self.min_ngram > self.max_ngram:
            raise ValueError(f"min_ngram: expected <= max_ngram={self.max_ngram}, got {self.min_ngram}")

    def propose(
        self, seq: list[int], k: int, temperature: float, rng: np.random.Generator
    ) -> tuple[list[int], np.ndarray | None]:
        """context -> the up to k tokens that followed the last earlier match of its final n-gram."""
        if k == 0:
            return [], None
        for n in range(self.max_ngram, self.min_ngram - 1, -1):
            if len(seq) <= n:
                continue
            tail = seq[-n:]
            for start in range(len(seq) - n - 1, -1, -1):  # most recent match first
                if seq[start : start + n] == tail:
                    return list(seq[start + n : start + n + k]), None
        return [], None

    def rollback(self, length: int) -> None:
        pass  # nothing cached


def layer_cut_draft(model: Any, n_layers: int) -> Any:
    """model, n -> a draft made of the model's first n blocks, then its ln_f and (tied) LM head.

    The weight arrays (NumpyModel) or tensors (TorchModel) are shared with the target, nothing is
    copied. Early layers already predict many easy tokens; the cut model runs n of the L blocks.
    """
    cfg = _check_model(model, "model")
    if isinstance(n_layers, bool) or not isinstance(n_layers, (int, np.integer)):
        raise TypeError(f"n_layers: expected an int, got {type(n_layers).__name__}")
    if not 1 <= n_layers <= cfg.n_layers:
        raise ValueError(f"n_layers: expected 1 <= n_layers <= {cfg.n_layers}, got {n_layers}")
    if _is_torch_model(model):
        return _layer_cut_torch(model, int(n_layers))
    w = model.weights
    cut = GPT2Weights(w.wte_VD, w.wpe_MD, list(w.layers[:n_layers]), w.lnf_g, w.lnf_b)
    return NumpyModel(_replace_layers(cfg, int(n_layers)), cut)


def _replace_layers(cfg: ModelConfig, n_layers: int) -> ModelConfig:
    from dataclasses import replace

    return replace(cfg, n_layers=n_layers)


def _layer_cut_torch(model: Any, n_layers: int) -> Any:
    cut = copy.copy(model)  # shares every weight tensor with the target
    cut.config = _replace_layers(model.config, n_layers)
    cut.layers = list(model.layers[:n_layers])
    return cut


# ---------------------------------------------------------------- speculative decoding: the loop


@dataclass
class SpeculativeResult:
    """What one speculative generation produced, round by round."""

    tokens: list[int]
    k: int
    proposed: list[int] = field(default_factory=list)  # per round: draft tokens proposed
    accepted: list[int] = field(default_factory=list)  # per round: draft tokens kept
    draft_calls: int = 0  # forward passes of the draft model (0 for prompt lookup)
    seconds: float = 0.0

    @property
    def rounds(self) -> int:
        """Target verification passes (one per round), not counting the prompt's prefill."""
        return len(self.proposed)

    @property
    def acceptance_rate(self) -> float:
        """Per-draft acceptance a: drafts kept / drafts judged (a judged draft is kept or is the
        round's first rejection; guesses after a rejection are never judged)."""
        judged = sum(acc + (acc < prop) for acc, prop in zip(self.accepted, self.proposed, strict=True))
        return sum(self.accepted) / judged if judged else float("nan")

    @property
    def kept_fraction(self) -> float:
        """Drafts kept / drafts proposed."""
        proposed = sum(self.proposed)
        return sum(self.accepted) / proposed if proposed else float("nan")

    @property
    def tokens_per_step(self) -> float:
        """New tokens per target pass (1 for plain decoding)."""
        return len(self.tokens) / self.rounds if self.rounds else float("nan")

    def predicted(self, c: float = 0.0, a: float | None = None) -> tuple[float, float]:
        """c, a (default: the measured rate) -> (tokens per target pass, speed-up) the theory predicts.

        The formulas applied round by round, to the number of guesses each round really made:
        sum E(a, k_r) / rounds and sum E(a, k_r) / sum (k_r c + 1). With k guesses in every
        round they are E(a, k) and E(a, k) / (k c + 1).
        """
        a = self.acceptance_rate if a is None else a
        if not self.rounds or math.isnan(a):
            return float("nan"), float("nan")
        tokens = sum(expected_tokens_per_step(a, k) for k in self.proposed)
        cost = sum(k * c + 1.0 for k in self.proposed)
        return tokens / self.rounds, tokens / cost


def _check_proposal(proposal: Any, k_round: int, vocab_size: int) -> tuple[list[int], np.ndarray | None]:
    """A draft's (tokens, probabilities) -> up to k_round int tokens and [k,V] float64 probs, or an
    error naming the draft (a bad token would otherwise surface as the target's ``ids_T``)."""
    if not isinstance(proposal, tuple) or len(proposal) != 2:
        raise TypeError(f"draft: propose() must return (tokens, probs), got {type(proposal).__name__}")
    guesses, q_KV = proposal
    if isinstance(guesses, (str, bytes)) or not isinstance(guesses, Sequence):
        raise TypeError(f"draft: propose() must return a list of token ids, got {type(guesses).__name__}")
    tokens = []
    for i, token in enumerate(list(guesses)[:k_round]):
        try:
            tokens.append(check_token_id(token, vocab_size, "draft"))
        except (TypeError, ValueError) as err:
            raise type(err)(f"{err} (proposed token {i})") from None
    if q_KV is None:
        return tokens, None
    q = np.asarray(q_KV, dtype=np.float64) if isinstance(q_KV, np.ndarray) else None
    if q is None or q.ndim != 2 or q.shape[1] != vocab_size or len(q) < len(tokens):
        shape = list(q_KV.shape) if hasattr(q_KV, "shape") else type(q_KV).__name__
        raise ValueError(
            f"draft: propose() must return probabilities [k={len(tokens)}, V={vocab_size}] or None, "
            f"got {shape}"
        )
    return tokens, q[: len(tokens)]


def _as_draft(draft: Any, target_cfg: ModelConfig) -> Draft:
    if isinstance(draft, NumpyModel) or _is_torch_model(draft):
        if draft.config.vocab_size != target_cfg.vocab_size:
            raise ValueError(
                f"draft: expected the target's vocab_size {target_cfg.vocab_size}, "
                f"got {draft.config.vocab_size}"
            )
        return ModelDraft(draft)
    if isinstance(draft, Draft):
        return draft
    raise TypeError(
        "draft: expected a NumpyModel, a TorchModel or a Draft (propose/rollback), "
        f"got {type(draft).__name__}"
    )


def speculative_run(
    target: Any,
    draft: Any,
    prompt_ids: Any,
    max_new_tokens: int,
    k: int = 4,
    temperature: float = 0.0,
    seed: int | None = None,
    cache: Any = None,
) -> SpeculativeResult:
    """prompt [T] -> SpeculativeResult: ``speculative_generate`` with what each
    round proposed and kept.

    The target's cache holds every token but the last one between rounds; a
    round feeds that token and the k guesses as one block of k + 1 query rows,
    then truncates the cache back to the tokens it kept. ``cache`` (optional,
    empty) is the target's, to inspect afterwards.
    """
    target_cfg = _check_model(target, "target")
    drafter = _as_draft(draft, target_cfg)
    token_ids = check_token_ids(prompt_ids, target_cfg.vocab_size, "prompt_ids")
    prompt = [int(t) for t in token_ids]
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k: expected an int, got {type(k).__name__}")
    if k < 0:
        raise ValueError(
            f"k: expected an int >= 0 (0 = plain decoding), got {k}",
        )
    temperature = check_temperature(temperature)
    runner = _Runner(target)
    cache_given = cache is not None
    if cache is None:
        cache = runner.new_cache()
    else:
        runner.check_cache(cache, "cache")
    limit = "the cache's capacity" if cache_given else "max_seq_len"
    n_new, n_prompt = max_new_tokens, len(prompt)
    check_max_new_tokens(n_new, n_prompt, runner.capacity(cache), limit)
    if isinstance(drafter, ModelDraft):
        draft_max_len = drafter.model.config.max_seq_len
        draft_limit = "the draft's max_seq_len"
        check_max_new_tokens(n_new, n_prompt, draft_max_len, draft_limit)
    rng = np.random.default_rng(seed)
    result = SpeculativeResult([], int(k))
    start = time.perf_counter()
    seq = list(prompt)
    try:
        while len(result.tokens) < max_new_tokens:
            k_round = min(k, max_new_tokens - len(result.tokens) - 1)
            proposal = drafter.propose(seq, k_round, temperature, rng)
            vocab = target_cfg.vocab_size
            guesses, q_KV = _check_proposal(proposal, k_round, vocab)
            if not result.tokens and len(prompt) > 1:
                # prefill; the last prompt token opens the first round
                runner.forward(prompt[:-1], cache)
            # one target pass over k + 1 query rows: the last token and the
            # guesses after it
            logits_TV = runner.forward([seq[-1], *guesses], cache)
            p_TV = token_probs(logits_TV, temperature)
            kept, next_token = verify_draft(p_TV, q_KV, guesses, rng)
            new = [*guesses[:kept], next_token]
            seq += new
            result.tokens += new
            # forget the K/V rows of rejected guesses
            runner.truncate(cache, len(seq) - 1)
            drafter.rollback(len(seq) - 1)
            result.proposed.append(len(guesses))
            result.accepted.append(kept)
    except (TypeError, ValueError):
        # a draft that fails later: the cache is left empty, as it came
        runner.truncate(cache, 0)
        raise
    result.seconds = time.perf_counter() - start
    result.draft_calls = drafter.calls if isinstance(drafter, ModelDraft) else 0
    return result


def speculative_generate(
    target: Any,
    draft: Any,
    prompt_ids: Any,
    max_new_tokens: int,
    k: int = 4,
    temperature: float = 0.0,
    seed: int | None = None,
    cache: Any = None,
) -> list[int]:
    """prompt [T] -> the new token ids, the draft guessing k at a time and the target verifying.

    Greedy (temperature 0): exactly the target's own greedy tokens. With temperature > 0 the
    tokens are distributed exactly as the target's samples. ``draft`` is a model (NumpyModel or
    TorchModel, e.g. ``layer_cut_draft(target, 1)``) or a ``Draft`` such as ``PromptLookupDraft()``.
    """
    return speculative_run(target, draft, prompt_ids, max_new_tokens, k, temperature, seed, cache).tokens
