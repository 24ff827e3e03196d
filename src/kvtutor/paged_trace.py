"""A request trace replayed through a paged KV cache or through contiguous buffers.

``random_trace`` draws requests with Poisson arrivals and long-tailed lengths. ``simulate_trace``
serves them step by step, either reserving ``max_seq_len`` positions per request up front
(``"contiguous"``) or taking blocks from a ``kvtutor.paged.BlockAllocator`` as sequences grow
(``"paged"``), and records the memory reserved and the memory used at every step. With a model
the replay is real: ``PagedKVCache`` sequences (or preallocated caches) and greedy decoding.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .paged import BlockAllocator, PagedKVPool
from .validate import check_int

__all__ = ["Request", "random_trace", "TraceResult", "simulate_trace"]


@dataclass(frozen=True)
class Request:
    """One request of a trace: it arrives at a step, brings a prompt and wants output_len tokens."""

    arrival: int
    prompt_len: int
    output_len: int


def random_trace(
    n_requests: int, max_seq_len: int, seed: int = 0, mean_gap: float = 1.0, mean_output: float | None = None
) -> list[Request]:
    """Requests with Poisson arrivals and long-tailed prompt and output lengths.

    Prompts and outputs are drawn from geometric distributions (many short, a few long), clipped
    so that prompt + output <= max_seq_len, which is what a server must be ready for.
    """
    check_int("n_requests", n_requests, 1)
    check_int("max_seq_len", max_seq_len, 4)
    rng = np.random.default_rng(seed)
    mean_output = max_seq_len / 8 if mean_output is None else mean_output
    trace, t = [], 0.0
    for _ in range(n_requests):
        t += rng.exponential(mean_gap)
        prompt = int(min(rng.geometric(8 / max_seq_len), max_seq_len // 2))
        output = int(min(rng.geometric(1 / mean_output), max_seq_len - prompt))
        trace.append(Request(int(t), prompt, output))
    return trace


@dataclass
class TraceResult:
    """What a replay of a trace measured, step by step and in total. Memory is in token positions."""

    scheme: str
    capacity_tokens: int
    steps: int = 0
    finished: int = 0
    preemptions: int = 0
    tokens_generated: int = 0
    running: list[int] = field(default_factory=list)
    reserved: list[int] = field(default_factory=list)
    used: list[int] = field(default_factory=list)

    @property
    def waste_fraction(self) -> float:
        """Reserved but unused positions, as a fraction of reserved, summed over the replay."""
        reserved = sum(self.reserved)
        return (reserved - sum(self.used)) / reserved if reserved else 0.0

    @property
    def mean_running(self) -> float:
        return float(np.mean(self.running)) if self.running else 0.0

    @property
    def tokens_per_step(self) -> float:
        return self.tokens_generated / self.steps if self.steps else 0.0


class _Live:
    """A request being served: tokens generated so far and its memory (blocks, or a real cache)."""

    def __init__(self, request: Request, index: int) -> None:
        self.request, self.index = request, index
        self.generated = 0
        self.blocks: list[int] = []  # bookkeeping-only paged replay
        self.cache: Any = None  # replay with a model
        self.tokens: list[int] = []

    @property
    def length(self) -> int:
        """Positions in the cache: the prompt and every generated token but the newest."""
        return self.request.prompt_len + max(0, self.generated - 1)


def simulate_trace(
    trace: list[Request],
    scheme: str,
    capacity_tokens: int,
    max_seq_len: int,
    block_size: int = 16,
    model: Any = None,
    seed: int = 0,
    max_steps: int = 100_000,
) -> TraceResult:
    """Replay ``trace`` on a memory of capacity_tokens token positions; record reserved vs used.

    ``"contiguous"`` reserves max_seq_len positions per request when it is admitted (its final
    length is unknown then). ``"paged"`` takes blocks of block_size positions from a
    ``BlockAllocator`` as the sequence grows; when a block is needed and none is free, the newest
    running request is preempted (its blocks freed) and recomputed when it is admitted again.
    Admission is first come, first served. Each step every running request produces one token;
    a new request's prefill produces its first.

    With ``model`` (a NumpyModel) the replay is real: every request gets random prompt tokens, a
    ``PagedKVCache`` (or a ``PreallocatedKVCache`` for ``"contiguous"``) and greedy decoding, and
    reserved and used positions are read off the caches and the pool.
    """
    if scheme not in ("contiguous", "paged"):
        raise ValueError(f"scheme: expected 'contiguous' or 'paged', got {scheme!r}")
    check_int("max_seq_len", max_seq_len, 1)
    check_int("block_size", block_size, 1)
    check_int("capacity_tokens", capacity_tokens, 1)
    n_blocks = capacity_tokens // block_size
    if capacity_tokens < max_seq_len or n_blocks < math.ceil(max_seq_len / block_size):
        raise ValueError(
            f"capacity_tokens: expected room for one sequence of max_seq_len={max_seq_len} "
            f"in blocks of {block_size}, got {capacity_tokens}"
        )
    if not isinstance(trace, (list, tuple)) or not all(isinstance(r, Request) for r in trace):
        raise TypeError("trace: expected a list of Request")
    for i, r in enumerate(trace):
        if (
            r.arrival < 0
            or r.prompt_len < 1
            or r.output_len < 1
            or r.prompt_len + r.output_len > max_seq_len + 1
        ):
            raise ValueError(f"trace: request {i} {r} does not fit max_seq_len={max_seq_len}")
    if model is not None and model.config.max_seq_len < max_seq_len:
        raise ValueError(f"model: expected max_seq_len >= {max_seq_len}, got {model.config.max_seq_len}")
    pool = (
        PagedKVPool.for_model(model, n_blocks, block_size)
        if model is not None and scheme == "paged"
        else None
    )
    allocator = pool.allocator if pool is not None else BlockAllocator(n_blocks)
    rng = np.random.default_rng(seed)
    prompts = [
        rng.integers(0, model.config.vocab_size, r.prompt_len).tolist() if model else [] for r in trace
    ]

    result = TraceResult(scheme, capacity_tokens)
    pending = deque(sorted(range(len(trace)), key=lambda i: (trace[i].arrival, i)))
    waiting: deque[_Live] = deque()
    running: list[_Live] = []
    reserved_slots = 0  # contiguous: positions reserved

    def fits(live: _Live) -> bool:
        if scheme == "contiguous":
            return capacity_tokens - reserved_slots >= max_seq_len
        return allocator.n_free >= math.ceil(live.length / block_size)

    def start(live: _Live) -> None:
        """Prefill the prompt, plus the tokens generated before a preemption."""
        nonlocal reserved_slots
        if scheme == "contiguous":
            reserved_slots += max_seq_len
            if model is not None:
                live.cache = model.new_cache(kind="preallocated", capacity=max_seq_len)
        elif model is not None:
            live.cache = pool.new_sequence(capacity=max_seq_len)
        else:
            live.blocks = [allocator.allocate() for _ in range(math.ceil(live.length / block_size))]
        if model is not None:
            logits_V = model.prefill(prompts[live.index] + live.tokens[:-1], live.cache)[-1]
            if not live.tokens:
                live.tokens.append(int(np.argmax(logits_V)))
        live.generated = max(live.generated, 1)

    def stop(live: _Live) -> None:
        nonlocal reserved_slots
        if scheme == "contiguous":
            reserved_slots -= max_seq_len
        elif model is not None:
            live.cache.free()
        for block in live.blocks:
            allocator.release(block)
        live.blocks, live.cache = [], None

    step = 0
    while pending or waiting or running:
        if step >= max_steps:
            raise ValueError(f"max_steps: the trace did not finish within {max_steps} steps")
        while pending and trace[pending[0]].arrival <= step:
            i = pending.popleft()
            waiting.append(_Live(trace[i], i))
        produced = 0
        for live in list(running):  # decode, oldest request first
            if live not in running:
                continue  # preempted earlier in this step
            if scheme == "paged" and live.length % block_size == 0:  # the next position opens a block
                while allocator.n_free == 0 and live in running:
                    victim = running.pop()
                    stop(victim)
                    waiting.appendleft(victim)
                    result.preemptions += 1
                if live not in running:
                    continue
                if model is None:
                    live.blocks.append(allocator.allocate())
            if model is not None:
                logits_V = model.decode_step(live.tokens[-1], live.cache)
                live.tokens.append(int(np.argmax(logits_V)))
            live.generated += 1
            produced += 1
        while waiting and fits(waiting[0]):  # admission; a first prefill gives the first token
            live = waiting.popleft()
            produced += live.generated == 0
            start(live)
            running.append(live)
        result.tokens_generated += produced
        result.running.append(len(running))
        if model is None:
            reserved = reserved_slots if scheme == "contiguous" else allocator.n_used * block_size
            used = sum(live.length for live in running)
        else:
            token_bytes = _token_bytes(model)
            if pool is not None:
                reserved = pool.usage().bytes_reserved // token_bytes
            else:
                reserved = sum(live.cache.nbytes for live in running) // token_bytes
            used = sum(len(live.cache) for live in running)
        result.reserved.append(reserved)
        result.used.append(used)
        for live in [x for x in running if x.generated >= x.request.output_len]:
            running.remove(live)
            stop(live)
            result.finished += 1
        step += 1
    result.steps = step
    return result


def _token_bytes(model: Any) -> int:
    cfg = model.config
    return 2 * cfg.n_layers * cfg.n_kv_heads * cfg.d_head * model.weights.wte_VD.itemsize
