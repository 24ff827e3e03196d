"""Prefill/decode disaggregation, simulated: one trace of requests served by N GPUs two ways.

- **Colocated**: every GPU runs continuous batching on its own share of the requests, and a prefill
  stalls that GPU's running decodes for its whole duration; chunked prefill bounds the stall to one
  step of a token budget.
- **Disaggregated**: P GPUs only prefill, D = N - P GPUs only decode. A prefilled request's KV cache
  (``costs.kv_cache_bytes`` of its prompt) crosses a link to a decode GPU (see ``simulate``).

Time comes from a model: a step lasts ``costs.roofline_time`` of its ``costs.Cost`` on a datasheet
machine (no kernels, launch overheads, memory limit, tensor parallelism or network latency). Why a
loop of its own: its clock is modelled seconds in an event queue (``_Events``) interleaving one
scheduler per GPU and the links, whereas ``serving.loop.run_serving`` runs one engine's real
forward passes and ``serving.paged_trace.simulate_trace`` counts steps of one memory of blocks.

Definitions (times in seconds; latencies count from the request's arrival):

- A request's tokens appear at the end of the step that produced them. The first comes from its
  prefill; token k + 1 from a decode step attending to prompt_len + k keys.
- TTFT: until the first token reaches the client. Colocated: the end of the (last chunk of the)
  prefill, which starts once the request has a batch slot. Disaggregated: when the request joins a
  decode batch (the first token travels with the cache, as in serving systems), so TTFT includes the
  waits for the prefill GPU's link (one cache at a time) and for a decode slot, and the transfer.
- TPOT: (e2e - TTFT) / (output_len - 1), the mean gap between tokens after the first (NaN for one
  token); ``max_gap_s`` is the longest gap, where a stall shows.
- ``prefill_s``: the request's prefill work alone on an idle GPU, whole or in its chunks, so TTFT >=
  prefill_s + transfer_s. A whole prefill counts T x T scores (masked half included), a chunk
  n x (past + n), so a chunked prefill alone can be a few percent faster in this model.

Scheduling: first come, first served; a new request goes to the GPU with the fewest requests
assigned and not finished (ties: the lowest index); a non-chunked GPU prefills one prompt at a time
and prefers a waiting prefill over a decode step while it has a free batch slot.
"""

from __future__ import annotations

import heapq
import math
import numbers
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np

from ..measure import costs
from ..models.config import GPT2Config
from ..validate import check_int, check_seed, check_step

__all__ = [
    "LLAMA_7B_LIKE", "DEPLOYMENTS", "METRICS", "DEFAULT_RATES", "SERVING_MECHANISMS", "MECHANISMS_CHECKED",
    "Request", "make_trace", "check_requests", "StepModel", "RequestResult", "SimResult", "simulate",
    "sweep_rates", "sweep_split", "find_crossover",
]  # fmt: skip

#: Llama-2-7B's sizes (32 layers, D = 4096, 32 heads of 128, no GQA, 32000 words, 4096 positions)
#: in kvtutor's GPT-2-style GPT2Config. Llama's gated MLP has three [4096, 11008] matrices; two
#: matrices of d_ff = 3 x 11008 / 2 = 16512 hold as many weights and cost as many FLOPs, so the cost
#: model sees about Llama's 6.7 billion parameters and its KV cache (512 KiB a token in bf16).
LLAMA_7B_LIKE = GPT2Config(
    vocab_size=32000, d_model=4096, n_heads=32, n_layers=32, max_seq_len=4096, d_ff=16512
)
DEPLOYMENTS = ("colocated", "chunked", "disaggregated")
METRICS = ("ttft_s", "tpot_s", "e2e_s", "max_gap_s", "prefill_s", "transfer_s")
PERCENTILES = (50, 90, 99)
_H100 = costs.DATASHEETS["H100 SXM"]


def _check_real(name: str, value: Any, positive: bool = False, finite: bool = True) -> float:
    """A number >= 0 (> 0 if positive; finite if finite), or a TypeError/ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value):
        raise TypeError(f"{name}: expected a number, got {type(value).__name__} {value!r}")
    if value < 0 or (positive and value == 0) or (finite and math.isinf(value)):
        want = f"a {'finite ' if finite else ''}number {'>' if positive else '>='} 0"
        raise ValueError(f"{name}: expected {want}, got {value!r}")
    return float(value)


def _check_range(name: str, value: Any) -> tuple[int, int]:
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise TypeError(f"{name}: expected a (low, high) pair of ints, got {value!r}")
    low = check_int(f"{name}[0]", value[0], 1)
    return low, check_int(f"{name}[1]", value[1], low)


# ---------------------------------------------------------------- requests and traces
@dataclass(frozen=True)
class Request:
    """One request: its arrival time (seconds), prompt length and the number of tokens it generates
    (the first from its prefill, the others from decode steps)."""

    arrival_s: float
    prompt_len: int
    output_len: int

    def __post_init__(self) -> None:
        _check_real("arrival_s", self.arrival_s)
        check_int("prompt_len", self.prompt_len, 1)
        check_int("output_len", self.output_len, 1)


def make_trace(
    n_requests: int = 400,
    rate: float = 8.0,
    seed: int = 0,
    long_fraction: float = 0.2,
    short_prompt: tuple[int, int] = (64, 1024),
    long_prompt: tuple[int, int] = (2048, 3840),
    output_len: tuple[int, int] = (32, 256),
) -> list[Request]:
    """A seeded trace: Poisson arrivals at ``rate`` requests/s, a ``long_fraction`` of long prompts,
    lengths uniform in the given inclusive ranges. One seed gives the same lengths at every rate and
    the same arrival pattern scaled by 1 / rate, so a sweep over rates compares like with like."""
    n = check_int("n_requests", n_requests, 1)
    rate = _check_real("rate", rate, positive=True)
    if not 0 <= _check_real("long_fraction", long_fraction) <= 1:
        raise ValueError(f"long_fraction: expected a number in [0, 1], got {long_fraction!r}")
    s_lo, s_hi = _check_range("short_prompt", short_prompt)
    l_lo, l_hi = _check_range("long_prompt", long_prompt)
    out_lo, out_hi = _check_range("output_len", output_len)
    rng = np.random.default_rng(check_seed(seed))
    arrival_N = np.cumsum(rng.exponential(1.0, n)) / rate
    long_N = rng.random(n) < long_fraction
    prompt_N = np.where(long_N, rng.integers(l_lo, l_hi + 1, n), rng.integers(s_lo, s_hi + 1, n))
    out_N = rng.integers(out_lo, out_hi + 1, n)
    return [Request(float(a), int(p), int(o)) for a, p, o in zip(arrival_N, prompt_N, out_N, strict=True)]


def check_requests(requests: Any, config: GPT2Config) -> list[Request]:
    """A non-empty list of Request or of (arrival_s, prompt_len, output_len) triples -> Requests that
    fit ``config.max_seq_len`` (prompt_len + output_len - 1 positions: the last token is not fed back)."""
    if isinstance(requests, (str, bytes)) or not isinstance(requests, Sequence):
        raise TypeError(f"requests: expected a list of Request, got {type(requests).__name__}")
    if not requests:
        raise ValueError("requests: expected at least one request, got an empty list")
    out = []
    for i, r in enumerate(requests):
        if not isinstance(r, Request):
            if not isinstance(r, (tuple, list)) or len(r) != 3:
                raise TypeError(
                    f"requests[{i}]: expected a Request or (arrival_s, prompt_len, output_len), got {r!r}"
                )
            r = Request(*r)
        if r.prompt_len + r.output_len - 1 > config.max_seq_len:
            need = f"prompt_len {r.prompt_len} + output_len {r.output_len} - 1 positions"
            raise ValueError(f"requests[{i}]: {need} exceed max_seq_len {config.max_seq_len}")
        out.append(r)
    return out


# ---------------------------------------------------------------- the step-time model
@dataclass(frozen=True)
class StepModel:
    """Seconds of one step on one GPU: ``costs.roofline_time`` of the step's ``costs.Cost``.

    A step runs prefill chunks, each ``(n_new, n_past)`` (a whole prompt is ``(prompt_len, 0)``; one
    logit row each, ``all_logits=False``), and one decode token for each sequence at the given
    contexts (keys attended, its new one included). The weights are read once per step, however
    many requests share it. The defaults are LLAMA_7B_LIKE in bf16 on the H100 SXM datasheet."""

    config: GPT2Config = LLAMA_7B_LIKE
    peak_flops: float = _H100["bf16_flops"]
    bandwidth: float = _H100["bandwidth"]
    dtype: str = "bf16"
    _affine: tuple[float, ...] = field(init=False, repr=False, compare=False)
    _chunks: dict = field(init=False, repr=False, compare=False, default_factory=dict)  # FLOPs, bytes

    def __post_init__(self) -> None:
        if not isinstance(self.config, GPT2Config):
            raise TypeError(f"config: expected a GPT2Config, got {type(self.config).__name__}")
        _check_real("peak_flops", self.peak_flops, positive=True)
        _check_real("bandwidth", self.bandwidth, positive=True)
        # A decode step is affine in its batch B and the sum S of its contexts: per sequence the
        # products, the LM head and one new key and value written; per key attended its attention
        # FLOPs and the key and value read. Two decode_costs give the coefficients.
        one, two = (costs.decode_cost(self.config, s, 1, self.dtype) for s in (1, 2))
        weights = one.all_weight_bytes
        key_flops, key_bytes = two.flops - one.flops, two.bytes - one.bytes
        affine = (weights, one.flops - key_flops, one.bytes - weights - key_bytes, key_flops, key_bytes)
        object.__setattr__(self, "_affine", tuple(float(x) for x in affine))

    def step_cost(
        self, chunks: Sequence[tuple[int, int]] = (), contexts: Sequence[int] = ()
    ) -> costs.Cost:  # fmt: skip
        """A step's Cost: its chunks' and decodes' Costs, the weights read once.

        The book shows this in "Serving at scale: disaggregated prefill and what the engines do"."""
        cfg, dtype = self.config, self.dtype
        parts = [
            costs.forward_cost(cfg, n_new, n_past, 1, dtype, all_logits=False)
            for n_new, n_past in chunks
        ]  # fmt: skip
        parts += [costs.decode_cost(cfg, c, 1, dtype) for c in contexts]
        if not parts:
            return costs.Cost()
        w, head = parts[0].weight_bytes, parts[0].lm_head_bytes  # read once
        shared = [replace(p, weight_bytes=0, lm_head_bytes=0) for p in parts]
        return sum(shared, costs.Cost(weight_bytes=w, lm_head_bytes=head))

    def step_s(self, chunks: Sequence[tuple[int, int]] = (), contexts: Sequence[int] = ()) -> float:
        """``costs.roofline_time(step_cost(chunks, contexts), peak_flops, bandwidth)``, from cached
        FLOPs and bytes (the simulator calls it once a step). 0 for an empty step (checked)."""
        chunks, contexts = check_step(chunks, contexts)
        weights, seq_flops, seq_bytes, key_flops, key_bytes = self._affine
        b, s = len(contexts), sum(contexts)
        flops, nbytes = b * seq_flops + s * key_flops, b * seq_bytes + s * key_bytes
        for chunk in chunks:
            if chunk not in self._chunks:
                c = costs.forward_cost(self.config, chunk[0], chunk[1], 1, self.dtype, all_logits=False)
                self._chunks[chunk] = (float(c.flops), float(c.bytes - c.all_weight_bytes))
            flops, nbytes = flops + self._chunks[chunk][0], nbytes + self._chunks[chunk][1]
        if flops == 0:
            return 0.0
        return max(flops / self.peak_flops, (weights + nbytes) / self.bandwidth)

    def kv_bytes(self, n_tokens: int) -> int:
        """Bytes of a request's KV cache after n_tokens positions (what a prefill GPU sends)."""
        return costs.kv_cache_bytes(self.config, n_tokens, 1, self.dtype)


@dataclass(frozen=True)
class RequestResult:
    """What happened to one request: its prefill's time alone as run, its KV transfer's time (0
    colocated) and the absolute time of each of its tokens."""

    request: Request
    prefill_s: float
    transfer_s: float
    token_times_s: tuple[float, ...]

    @property
    def ttft_s(self) -> float:
        return self.token_times_s[0] - self.request.arrival_s

    @property
    def e2e_s(self) -> float:
        return self.token_times_s[-1] - self.request.arrival_s

    @property
    def tpot_s(self) -> float:
        n = len(self.token_times_s)
        return (self.e2e_s - self.ttft_s) / (n - 1) if n > 1 else math.nan

    @property
    def max_gap_s(self) -> float:
        t = self.token_times_s
        return max(b - a for a, b in zip(t, t[1:], strict=False)) if len(t) > 1 else math.nan


@dataclass(frozen=True)
class SimResult:
    """One simulated run: every request's result (in the order given) and the run's totals."""

    deployment: str
    n_gpus: int
    n_prefill: int  # 0 colocated
    requests: tuple[RequestResult, ...]
    n_steps: int

    def values(self, metric: str) -> np.ndarray:
        """[N] float64: the metric of each request where it is defined (TPOT needs two tokens)."""
        if metric not in METRICS:
            raise ValueError(f"metric: expected one of {METRICS}, got {metric!r}")
        v_N = np.array([getattr(r, metric) for r in self.requests], dtype=np.float64)
        return v_N[~np.isnan(v_N)]

    def summary(self) -> dict[str, Any]:
        """Plain numbers for a table: p50/p90/p99 and mean of each metric (``ttft_p90_s``, ...),
        throughput over the makespan (first arrival to last token)."""
        start = min(r.request.arrival_s for r in self.requests)
        makespan = max(r.token_times_s[-1] for r in self.requests) - start
        n_tokens = sum(len(r.token_times_s) for r in self.requests)
        out: dict[str, Any] = dict(
            deployment=self.deployment, n_gpus=self.n_gpus, n_prefill=self.n_prefill,
            n_requests=len(self.requests), n_tokens=n_tokens, n_steps=self.n_steps, makespan_s=makespan,
            tokens_per_s=n_tokens / makespan if makespan > 0 else math.nan,
            requests_per_s=len(self.requests) / makespan if makespan > 0 else math.nan,
        )  # fmt: skip
        for metric in METRICS:
            v_N, name = self.values(metric), metric.removesuffix("_s")
            for q in PERCENTILES:
                out[f"{name}_p{q}_s"] = float(np.percentile(v_N, q)) if len(v_N) else math.nan
            out[f"{name}_mean_s"] = float(v_N.mean()) if len(v_N) else math.nan
        return out


# ---------------------------------------------------------------- the event loop and the GPUs
@dataclass(eq=False)
class _Live:
    """A request in flight."""

    request: Request
    prefilled: int = 0
    prefill_s: float = 0.0
    transfer_s: float = 0.0
    times: list[float] = field(default_factory=list)

    @property
    def context(self) -> int:
        """Keys its next decode step attends to: the prompt and every token so far."""
        return self.request.prompt_len + len(self.times)

    @property
    def done(self) -> bool:
        return len(self.times) == self.request.output_len


class _Events:
    """A clock and a queue of actions; actions due at the same time run in the order scheduled."""

    def __init__(self) -> None:
        self.now, self.n_steps, self._n = 0.0, 0, 0
        self._queue: list[tuple[float, int, Callable[[], None]]] = []

    def at(self, time: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._queue, (time, self._n, action))
        self._n += 1

    def run(self) -> None:
        while self._queue:
            self.now, _, action = heapq.heappop(self._queue)
            action()


class _GPU:
    """One GPU's scheduler. Roles: "colocated" (whole prefills, prefill first), "chunked" (decodes
    plus prefill chunks up to chunk_tokens per step), "prefill" and "decode" (disaggregated)."""

    def __init__(self, events: _Events, model: StepModel, role: str, batch: int, budget: int = 0) -> None:
        self.events, self.model, self.role = events, model, role
        self.max_batch, self.chunk_tokens = batch, budget
        self.on_prefilled: Callable[[_Live], None] | None = None  # disaggregated: where it goes next
        self.waiting: deque[_Live] = deque()
        self.prefilling: list[_Live] = []
        self.running: list[_Live] = []
        self.load = 0  # requests assigned here and not finished (or handed on)
        self.busy = False

    def take(self, live: _Live) -> None:
        self.waiting.append(live)
        self.kick()

    def kick(self) -> None:
        """Start a step if idle and there is work."""
        if self.busy:
            return
        chunks, decodes = self._plan()
        if not chunks and not decodes:
            return
        self.busy = True
        self.events.n_steps += 1
        seconds = self.model.step_s([(n, live.prefilled) for live, n in chunks], [d.context for d in decodes])
        self.events.at(self.events.now + seconds, partial(self._step_done, chunks, decodes))

    def _plan(self) -> tuple[list[tuple[_Live, int]], list[_Live]]:
        """This step's prefill chunks (request, tokens) and decodes."""
        if self.role == "decode":  # a request's first token is out when it joins the batch
            while self.waiting and len(self.running) < self.max_batch:
                self.running.append(self.waiting.popleft())
                self.running[-1].times.append(self.events.now)
            return [], list(self.running)
        if self.role == "chunked":
            while self.waiting and len(self.running) + len(self.prefilling) < self.max_batch:
                self.prefilling.append(self.waiting.popleft())
            budget, chunks = self.chunk_tokens - len(self.running), []
            for live in self.prefilling:
                if budget <= 0:
                    break
                chunks.append((live, min(budget, live.request.prompt_len - live.prefilled)))
                budget -= chunks[-1][1]
            return chunks, list(self.running)
        if self.waiting and (self.role == "prefill" or len(self.running) < self.max_batch):
            live = self.waiting.popleft()
            return [(live, live.request.prompt_len)], []
        return [], list(self.running)

    def _step_done(self, chunks: list[tuple[_Live, int]], decodes: list[_Live]) -> None:
        now = self.events.now
        self.busy = False
        for live in decodes:
            live.times.append(now)
        for live, n in chunks:
            live.prefill_s += self.model.step_s([(n, live.prefilled)])
            live.prefilled += n
            if live.prefilled < live.request.prompt_len:
                continue
            if live in self.prefilling:
                self.prefilling.remove(live)
            if self.on_prefilled is not None:  # disaggregated: hand the request on
                self.load -= 1
                self.on_prefilled(live)
                continue
            live.times.append(now)
            self.running.append(live)
        for live in [r for r in self.running if r.done]:
            self.finish(live)
        self.kick()

    def finish(self, live: _Live) -> None:
        if live in self.running:
            self.running.remove(live)
        self.load -= 1


def _least_loaded(gpus: list[_GPU]) -> _GPU:
    return min(gpus, key=lambda g: g.load)  # the first of the least loaded: the lowest index


def _run(
    deployment: str, n_prefill: int, requests: list[Request], gpus: list[_GPU], events: _Events
) -> SimResult:
    """Arrive every request at the least loaded of the first n_prefill GPUs (all if 0), run."""
    front, lives = gpus[: n_prefill or len(gpus)], [_Live(r) for r in requests]

    def arrive(live: _Live) -> None:
        gpu = _least_loaded(front)
        gpu.load += 1
        gpu.take(live)

    for live in sorted(lives, key=lambda x: x.request.arrival_s):
        events.at(live.request.arrival_s, partial(arrive, live))
    events.run()
    assert all(live.done for live in lives) and all(g.load == 0 for g in gpus)
    results = tuple(RequestResult(x.request, x.prefill_s, x.transfer_s, tuple(x.times)) for x in lives)
    return SimResult(deployment, len(gpus), n_prefill, results, events.n_steps)


def simulate(
    requests: Any,
    deployment: str = "colocated",
    n_gpus: int = 4,
    n_prefill: int = 1,
    model: StepModel | None = None,
    max_batch_size: int = 32,
    chunk_tokens: int = 512,
    link_bandwidth: float = 50e9,
) -> SimResult:
    """Serve ``requests`` on n_gpus GPUs deployed one of three ways (DEPLOYMENTS), every batch of
    decodes at most max_batch_size sequences; ``model``: a StepModel (None: the default one).

    "colocated": every GPU prefills and decodes its own requests; a prefill runs alone and stalls
    that GPU's decodes for its whole time. "chunked": every step runs all running decodes plus
    prefill chunks filling the rest of a budget of ``chunk_tokens`` tokens (a decode counts one).
    "disaggregated": ``n_prefill`` GPUs prefill, the other n_gpus - n_prefill decode; each prefill
    GPU sends caches over its own link of ``link_bandwidth`` bytes/s (50e9: a 400 Gb/s NIC;
    ``math.inf``: free), one at a time while it prefills the next prompts, to the decode GPU with
    the fewest requests when the prefill ends.
    """
    if deployment not in DEPLOYMENTS:
        raise ValueError(f"deployment: expected one of {DEPLOYMENTS}, got {deployment!r}")
    model = StepModel() if model is None else model
    if not isinstance(model, StepModel):
        raise TypeError(f"model: expected a StepModel or None, got {type(model).__name__}")
    reqs = check_requests(requests, model.config)
    n = check_int("n_gpus", n_gpus, 2 if deployment == "disaggregated" else 1)
    batch = check_int("max_batch_size", max_batch_size, 1)
    events = _Events()
    if deployment != "disaggregated":
        budget = check_int("chunk_tokens", chunk_tokens, 1) if deployment == "chunked" else 0
        gpus = [_GPU(events, model, deployment, batch, budget) for _ in range(n)]
        return _run(deployment, 0, reqs, gpus, events)

    n_p = check_int("n_prefill", n_prefill, 1, n - 1)
    bandwidth = _check_real("link_bandwidth", link_bandwidth, positive=True, finite=False)
    gpus = [_GPU(events, model, "prefill" if i < n_p else "decode", batch) for i in range(n)]
    link_free = [0.0] * n_p

    def send(i: int, live: _Live) -> None:  # prefill GPU i hands a prefilled request on
        live.transfer_s = model.kv_bytes(live.request.prompt_len) / bandwidth
        link_free[i] = max(events.now, link_free[i]) + live.transfer_s
        gpu = _least_loaded(gpus[n_p:])
        gpu.load += 1
        events.at(link_free[i], partial(arrived, gpu, live))

    def arrived(gpu: _GPU, live: _Live) -> None:
        if live.request.output_len > 1:
            gpu.take(live)
        else:  # nothing to decode: the first token is the last
            live.times.append(events.now)
            gpu.finish(live)

    for i in range(n_p):
        gpus[i].on_prefilled = partial(send, i)
    return _run(deployment, n_p, reqs, gpus, events)


# ---------------------------------------------------------------- sweeps and crossovers
#: Arrival rates (requests/s) of the default sweep, from a light load to an overloaded prefill GPU.
DEFAULT_RATES = (4.0, 8.0, 16.0, 32.0, 48.0, 64.0, 80.0, 96.0)


def sweep_rates(
    rates: Sequence[float] = DEFAULT_RATES,
    deployments: Sequence[str] = DEPLOYMENTS,
    n_requests: int = 400,
    seed: int = 0,
    **options: Any,
) -> list[dict[str, Any]]:
    """One row per (rate, deployment): ``{"rate": r, **summary}`` for the seeded trace at that rate
    (make_trace(n_requests, rate, seed)); ``options`` go to ``simulate`` (n_gpus, n_prefill, ...)."""
    if isinstance(rates, (str, bytes)) or not isinstance(rates, Sequence) or not rates:
        raise TypeError(f"rates: expected a non-empty sequence of rates, got {rates!r}")
    rows = []
    for rate in rates:
        trace = make_trace(n_requests, rate, seed)
        rows += [{"rate": float(rate), **simulate(trace, d, **options).summary()} for d in deployments]
    return rows


def sweep_split(
    rate: float = 48.0, n_gpus: int = 4, n_requests: int = 400, seed: int = 0, **options: Any
) -> list[dict[str, Any]]:
    """The two colocated rows for reference, then disaggregated with every P:D split of n_gpus
    (n_prefill = 1 .. n_gpus - 1); each row is ``{"rate": rate, **summary}``."""
    n = check_int("n_gpus", n_gpus, 2)
    trace = make_trace(n_requests, rate, seed)
    runs = [simulate(trace, d, n, **options) for d in DEPLOYMENTS[:2]]
    runs += [simulate(trace, "disaggregated", n, p, **options) for p in range(1, n)]
    return [{"rate": float(rate), **r.summary()} for r in runs]


def find_crossover(
    rows: Sequence[dict[str, Any]],
    metric: str = "ttft_p90_s",
    first: str = "colocated",
    second: str = "disaggregated",
    x: str = "rate",
    rtol: float = 0.0,
) -> dict[str, Any] | None:
    """Where ``first`` and ``second`` swap places on ``metric`` (lower wins) along ``x``.

    Returns ``{"metric", "x", "below", "above"}``: the x where their difference crosses zero,
    linearly interpolated between the two sweep points around the first swap, and who wins below
    and above it; None when one of them wins (or ties) at every x both were run at. Points where
    they differ by at most ``rtol`` times the larger value count as ties (and NaN is skipped).
    """
    rtol = _check_real("rtol", rtol)
    by: dict[str, dict[float, float]] = {first: {}, second: {}}
    for row in rows:
        if row.get("deployment") in by and metric in row and x in row:
            by[row["deployment"]][float(row[x])] = float(row[metric])
    pairs = [(v, by[first][v], by[second][v]) for v in sorted(set(by[first]) & set(by[second]))]
    diffs = [(v, a - b) for v, a, b in pairs if abs(a - b) > rtol * max(abs(a), abs(b))]
    for (x0, d0), (x1, d1) in zip(diffs, diffs[1:], strict=False):
        if (d0 > 0) != (d1 > 0):
            where, winner = x0 + (x1 - x0) * d0 / (d0 - d1), {True: second, False: first}
            return {"metric": metric, "x": where, "below": winner[d0 > 0], "above": winner[d1 > 0]}
    return None


# ---------------------------------------------------------------- the mechanisms, by system
#: Where and when the names in SERVING_MECHANISMS were checked; they change between releases.
MECHANISMS_CHECKED = (
    "2026-11-30, in the public sources. vLLM: vllm/config/cache.py (002f10e), scheduler.py "
    "(01230b4), attention.py (021ebc5), kv_transfer.py (007c643), the docs 'Attention Backend "
    "Feature Support' (v0.25.0) and 'Speculative Decoding'. SGLang: docs/advanced_features/"
    "server_arguments.md (004813e). TensorRT-LLM: docs/source/features/attention.md (30d2c50), "
    "disagg-serving.md (0434b98), speculative-decoding.md (04c8822), the KvCacheConfig reference "
    "(1.4.0rc4) and the quantization page (1.3.0rc27)."
)
_MECHANISMS = [  # (mechanism, vLLM, SGLang, TensorRT-LLM)
    ("continuous batching",
     "the V1 scheduler, per iteration; max_num_seqs (--max-num-seqs) caps the batch",
     "the scheduler; --max-running-requests caps the batch",
     "'in-flight batching' (IFB); max_batch_size, max_num_tokens"),
    ("paged KV cache (PagedAttention)",
     "PagedAttention; block_size (--block-size), 16 tokens by default",
     "a token pool; --page-size, 1 token by default",
     "paged KV cache; KvCacheConfig(tokens_per_block=...), 32 by default"),
    ("chunked prefill",
     "enable_chunked_prefill (on by default), budget max_num_batched_tokens",
     "--chunked-prefill-size (-1 turns it off); --enable-mixed-chunk adds decodes",
     "'chunked context'; LLM(enable_chunked_prefill=True), budget max_num_tokens"),
    ("prefix caching",
     "automatic prefix caching; enable_prefix_caching (--enable-prefix-caching), on by default",
     "RadixAttention (a radix tree of cached prefixes), on; --disable-radix-cache",
     "'KV cache reuse'; KvCacheConfig(enable_block_reuse=True), on by default"),
    ("speculative decoding",
     "speculative_config={'method': 'ngram' | 'eagle' | 'eagle3' | 'mtp' | ..., 'num_speculative_tokens'}",
     "--speculative-algorithm EAGLE | EAGLE3 | NEXTN | STANDALONE | NGRAM",
     "speculative_config=Eagle3DecodingConfig | NGramDecodingConfig | MTPDecodingConfig | ..."),
    ("FlashAttention / FlashDecoding",
     "--attention-backend FLASH_ATTN | FLASHINFER | TRITON_ATTN | ...",
     "--attention-backend fa3 | flashinfer | triton | ...; --triton-attention-num-kv-splits",
     "TrtllmAttention: FlashAttention in the context phase; multi-block masked MHA, XQA in generation"),
    ("prefill/decode disaggregation",
     "disaggregated prefilling: kv_transfer_config (kv_connector e.g. NixlConnector, kv_role)",
     "PD disaggregation: --disaggregation-mode prefill | decode, --disaggregation-transfer-backend",
     "disaggregated serving: context and generation servers, cache_transceiver_config (UCX | NIXL)"),
    ("quantized KV cache",
     "kv_cache_dtype (--kv-cache-dtype) fp8 (= fp8_e4m3) | fp8_e5m2",
     "--kv-cache-dtype fp8_e4m3 | fp8_e5m2",
     "KvCacheConfig(dtype='fp8')"),
]  # fmt: skip
#: What vLLM, SGLang and TensorRT-LLM call each serving mechanism the book covers, and the option
#: or feature that turns it on: dicts with keys "mechanism", "vllm", "sglang" and "tensorrt_llm".
SERVING_MECHANISMS: list[dict[str, str]] = [
    dict(zip(("mechanism", "vllm", "sglang", "tensorrt_llm"), row, strict=True)) for row in _MECHANISMS
]
