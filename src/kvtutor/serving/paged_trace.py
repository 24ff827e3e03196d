"""A request trace replayed through a paged KV cache or through contiguous buffers.

``random_trace`` draws requests with Poisson arrivals and long-tailed lengths;
``shared_prefix_trace`` draws requests whose prompts begin with one of a few system prompts.
``simulate_trace`` serves them step by step, either reserving ``max_seq_len`` positions per request
up front (``"contiguous"``) or taking blocks from a ``kvtutor.caches.paged.BlockAllocator`` as sequences
grow (``"paged"``), optionally with prefix caching (``kvtutor.caches.prefix``), and records the
memory reserved and used at every step and the prompt tokens each prefill computed. With a model
the replay is real: ``PagedKVCache`` sequences (or preallocated caches) and greedy decoding.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..caches.paged import BlockAllocator, PagedKVPool
from ..caches.prefix import PrefixCachingAllocator, PrefixCachingPool, block_hashes
from ..validate import check_int

__all__ = ["Request", "random_trace", "shared_prefix_trace", "TraceResult", "simulate_trace"]


@dataclass(frozen=True)
class Request:
    """One request of a trace: it arrives at a step, brings a prompt and wants output_len tokens.

    ``prompt_ids``, if given, are the prompt's token ids (``prompt_len`` of them); without them a
    replay draws random ones, which no other request shares."""

    arrival: int
    prompt_len: int
    output_len: int
    prompt_ids: tuple[int, ...] = field(default=(), repr=False)


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


def shared_prefix_trace(
    n_requests: int,
    max_seq_len: int,
    vocab_size: int,
    n_prefixes: int = 4,
    prefix_len: int = 64,
    seed: int = 0,
    mean_gap: float = 1.0,
    mean_suffix: float = 32.0,
    mean_output: float = 32.0,
) -> list[Request]:
    """Requests whose prompts are one of ``n_prefixes`` system prompts of ``prefix_len`` tokens
    followed by the user's own tokens.

    System prompt k is chosen with probability proportional to 1 / (k + 1) (a few popular ones, a
    tail of rarer ones); user parts and outputs have geometric lengths (means ``mean_suffix`` and
    ``mean_output``, at least 1), clipped so that prompt + output <= max_seq_len. Arrivals are
    Poisson with ``mean_gap`` steps between requests. Token ids are random in [0, vocab_size).
    """
    check_int("n_requests", n_requests, 1)
    check_int("n_prefixes", n_prefixes, 1)
    check_int("vocab_size", vocab_size, 1)
    check_int("max_seq_len", max_seq_len, 3)
    check_int("prefix_len", prefix_len, 1, max_seq_len - 2)
    for name, value in (("mean_gap", mean_gap), ("mean_suffix", mean_suffix), ("mean_output", mean_output)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name}: expected a number, got {type(value).__name__}")
        if not (value >= (0 if name == "mean_gap" else 1) and math.isfinite(value)):
            raise ValueError(
                f"{name}: expected a finite number >= {0 if name == 'mean_gap' else 1}, got {value}"
            )
    rng = np.random.default_rng(seed)
    prefixes = [tuple(rng.integers(0, vocab_size, prefix_len).tolist()) for _ in range(n_prefixes)]
    weights = 1.0 / np.arange(1, n_prefixes + 1)
    trace, t = [], 0.0
    for _ in range(n_requests):
        t += rng.exponential(mean_gap) if mean_gap else 0.0
        prefix = prefixes[int(rng.choice(n_prefixes, p=weights / weights.sum()))]
        n_suffix = int(min(rng.geometric(1 / mean_suffix), max_seq_len - 1 - prefix_len))
        prompt = prefix + tuple(rng.integers(0, vocab_size, n_suffix).tolist())
        output = int(min(rng.geometric(1 / mean_output), max_seq_len - len(prompt)))
        trace.append(Request(int(t), len(prompt), output, prompt))
    return trace


@dataclass
class TraceResult:
    """What a replay of a trace measured, step by step and in total. Memory is in token positions.

    Prefills: ``prompt_tokens`` positions were prefilled in all (recomputations after preemption
    included), ``cached_tokens`` of them came from the prefix cache. Request i's first prefill,
    the one before its first token, computed ``first_prefill_tokens[i]`` positions and took
    ``first_cached_tokens[i]`` from the cache. With a model, ``outputs[i]`` are request i's
    generated tokens.
    """

    scheme: str
    capacity_tokens: int
    steps: int = 0
    finished: int = 0
    preemptions: int = 0
    tokens_generated: int = 0
    running: list[int] = field(default_factory=list)
    reserved: list[int] = field(default_factory=list)
    used: list[int] = field(default_factory=list)
    prompt_tokens: int = 0
    cached_tokens: int = 0
    evictions: int = 0
    first_prefill_tokens: list[int] = field(default_factory=list)
    first_cached_tokens: list[int] = field(default_factory=list)
    outputs: list[list[int]] = field(default_factory=list)

    @property
    def prefill_tokens(self) -> int:
        """Prompt positions the model computed (not taken from the cache)."""
        return self.prompt_tokens - self.cached_tokens

    @property
    def hit_rate(self) -> float:
        """Prefilled positions taken from the cache, as a fraction of all prefilled positions."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def first_hit_rate(self) -> float:
        """The prompt positions of first prefills taken from the cache, as a fraction of them all
        (recomputations after preemption left out)."""
        cached = sum(self.first_cached_tokens)
        total = cached + sum(self.first_prefill_tokens)
        return cached / total if total else 0.0

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
    prefix_caching: bool = False,
) -> TraceResult:
    """Replay ``trace`` on a memory of capacity_tokens token positions; record reserved vs used.

    ``"contiguous"`` reserves max_seq_len positions per request when it is admitted (its final
    length is unknown then). ``"paged"`` takes blocks of block_size positions from a
    ``BlockAllocator`` as the sequence grows; when a block is needed and none is free, the newest
    running request is preempted (its blocks freed) and recomputed when it is admitted again.
    Admission is first come, first served. Each step every running request produces one token;
    a new request's prefill produces its first.

    ``prefix_caching`` (paged only) names the full blocks of every prompt by their hash chain
    (``kvtutor.caches.prefix``): a prefill starts on the cached blocks of its prompt, finished
    requests' blocks stay cached until a new block is needed and the free list is empty, and
    they are evicted least recently used first, before any request is preempted.

    With ``model`` (a NumpyModel) the replay is real: every request gets its ``prompt_ids`` (or
    random ones), a ``PagedKVCache`` (a ``PrefixCachedSequence`` with prefix caching, a
    ``PreallocatedKVCache`` for ``"contiguous"``) and greedy decoding, and reserved and used
    positions are read off the caches and the pool.
    """
    if scheme not in ("contiguous", "paged"):
        raise ValueError(f"scheme: expected 'contiguous' or 'paged', got {scheme!r}")
    if not isinstance(prefix_caching, bool):
        raise TypeError(f"prefix_caching: expected a bool, got {type(prefix_caching).__name__}")
    if prefix_caching and scheme != "paged":
        raise ValueError(
            f"prefix_caching: expected False with scheme {scheme!r} (only paged blocks are cached), got True"
        )
    check_int("max_seq_len", max_seq_len, 1)
    check_int("block_size", block_size, 1)
    check_int("capacity_tokens", capacity_tokens, 1)
    n_blocks = capacity_tokens // block_size
    if capacity_tokens < max_seq_len or n_blocks < math.ceil(max_seq_len / block_size):
        raise ValueError(
            f"capacity_tokens: expected room for one sequence of max_seq_len={max_seq_len} "
            f"in blocks of {block_size}, got {capacity_tokens}"
        )
    _check_trace(trace, max_seq_len, model)
    if model is not None and model.config.max_seq_len < max_seq_len:
        raise ValueError(f"model: expected max_seq_len >= {max_seq_len}, got {model.config.max_seq_len}")
    paged_type = PrefixCachingPool if prefix_caching else PagedKVPool
    pool = (
        paged_type.for_model(model, n_blocks, block_size) if model is not None and scheme == "paged" else None
    )
    if pool is not None:
        allocator = pool.allocator
    else:
        allocator = PrefixCachingAllocator(n_blocks) if prefix_caching else BlockAllocator(n_blocks)
    rng = np.random.default_rng(seed)
    prompts = [
        list(r.prompt_ids) if r.prompt_ids
        else rng.integers(0, model.config.vocab_size, r.prompt_len).tolist() if model
        else []
        for r in trace
    ]  # fmt: skip
    # a look-up stops one token short of the prompt's end; every full prompt block gets a name
    lookups = [block_hashes(p[:-1], block_size) if prefix_caching else [] for p in prompts]
    names = [block_hashes(p, block_size) if prefix_caching else [] for p in prompts]

    result = TraceResult(scheme, capacity_tokens)
    result.first_prefill_tokens = [0] * len(trace)
    result.first_cached_tokens = [0] * len(trace)
    result.outputs = [[] for _ in trace] if model is not None else []
    pending = deque(sorted(range(len(trace)), key=lambda i: (trace[i].arrival, i)))
    waiting: deque[_Live] = deque()
    running: list[_Live] = []
    reserved_slots = 0  # contiguous: positions reserved

    def fits(live: _Live) -> bool:
        if scheme == "contiguous":
            return capacity_tokens - reserved_slots >= max_seq_len
        need = math.ceil(live.length / block_size)
        if prefix_caching:
            need = allocator.blocks_consumed(lookups[live.index], need)
        return allocator.n_free >= need

    def start(live: _Live) -> None:
        """Prefill the prompt, plus the tokens generated before a preemption."""
        nonlocal reserved_slots
        cached = 0
        if scheme == "contiguous":
            reserved_slots += max_seq_len
            if model is not None:
                live.cache = model.new_cache(kind="preallocated", capacity=max_seq_len)
        elif model is not None and prefix_caching:
            live.cache = pool.new_sequence(capacity=max_seq_len, token_ids=prompts[live.index])
            cached = len(live.cache)
        elif model is not None:
            live.cache = pool.new_sequence(capacity=max_seq_len)
        else:
            hits = []
            if prefix_caching:
                hits = allocator.match(lookups[live.index])
                allocator.take(hits)
            n_new = math.ceil(live.length / block_size) - len(hits)
            live.blocks = hits + [allocator.allocate() for _ in range(n_new)]
            for j in range(len(hits), len(names[live.index])):
                allocator.register(live.blocks[j], names[live.index][j])
            cached = len(hits) * block_size
        if model is not None:
            ids = prompts[live.index] + live.tokens[:-1]
            logits_V = model.prefill(ids[cached:], live.cache)[-1]
            if not live.tokens:
                live.tokens.append(int(np.argmax(logits_V)))
        result.prompt_tokens += live.length
        result.cached_tokens += cached
        if live.generated == 0:
            result.first_prefill_tokens[live.index] = live.length - cached
            result.first_cached_tokens[live.index] = cached
        live.generated = max(live.generated, 1)

    def stop(live: _Live) -> None:
        nonlocal reserved_slots
        if scheme == "contiguous":
            reserved_slots -= max_seq_len
        elif model is not None:
            live.cache.free()
        # with prefix caching, the last block first (as PrefixCachedSequence.free does)
        for block in reversed(live.blocks) if prefix_caching else live.blocks:
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
            if model is not None:
                result.outputs[live.index] = live.tokens
        step += 1
    result.steps = step
    result.evictions = allocator.evictions if prefix_caching else 0
    return result


def _check_trace(trace: Any, max_seq_len: int, model: Any) -> None:
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
        if r.prompt_ids and len(r.prompt_ids) != r.prompt_len:
            raise ValueError(
                f"trace: request {i} expected {r.prompt_len} prompt_ids (its prompt_len), "
                f"got {len(r.prompt_ids)}"
            )
        if r.prompt_ids and model is not None and max(r.prompt_ids) >= model.config.vocab_size:
            raise ValueError(
                f"trace: request {i} expected prompt_ids below the model's vocab_size "
                f"{model.config.vocab_size}, got {max(r.prompt_ids)}"
            )


def _token_bytes(model: Any) -> int:
    cfg = model.config
    return 2 * cfg.n_layers * cfg.n_kv_heads * cfg.d_head * model.weights.wte_VD.itemsize
