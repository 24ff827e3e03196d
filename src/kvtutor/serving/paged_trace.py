"""A request trace replayed through a paged KV cache or through contiguous buffers.

``random_trace`` draws requests with Poisson arrivals and long-tailed lengths;
``shared_prefix_trace`` draws requests whose prompts begin with one of a few system prompts.
``simulate_trace`` serves them step by step, either reserving ``max_seq_len`` positions per request
up front (``"contiguous"``) or taking blocks from a ``kvtutor.caches.paged.BlockAllocator`` as sequences
grow (``"paged"``), optionally with prefix caching (``kvtutor.caches.prefix``), and records the
memory reserved and used at every step and the prompt tokens each prefill computed. With a model
the replay is real: ``PagedKVCache`` sequences (or preallocated caches) and greedy decoding.

Why a loop of its own: ``simulate_trace`` (its loop is ``_Replay.run``) asks what *memory* allows.
A request is admitted when its blocks fit, a sequence that needs a block when none is free
preempts the newest request, and a step is one token for everyone, so the clock counts steps.
``kvtutor.serving.loop.run_serving`` asks what a fixed number of batch *slots* allows: each slot is
sized for the longest request up front, and it runs real prefills and batched decodes through an
engine and records their wall time.
``kvtutor.serving.disagg.simulate`` asks what *time* a deployment of several GPUs takes: an event
queue in modelled seconds, one scheduler per GPU, no memory and no tokens. Admission, preemption and
the clock differ in all three, so one shared loop would be a loop of switches; each keeps its own.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..caches.paged import BlockAllocator, PagedKVPool, block_fill
from ..caches.prefix import PrefixCachingAllocator, PrefixCachingPool, block_hashes
from ..models.gpt2 import NumpyDecoder
from ..validate import check_choice, check_int, check_real, check_seed, check_token_ids, greedy

__all__ = [
    "Request",
    "random_trace",
    "shared_prefix_trace",
    "TraceResult",
    "simulate_trace",
    "check_replay",
    "MAX_BLOCKS",
]

#: The most blocks a replay's pool may have: it lists every free block, so a pool of 10**18
#: positions is refused by name instead of running out of memory.
MAX_BLOCKS = 2**20


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
    rng = np.random.default_rng(check_seed(seed))
    mean_gap = check_real("mean_gap", mean_gap, 0)
    # a geometric length has a mean >= 1
    mean_output = (
        max(1.0, max_seq_len / 8) if mean_output is None else check_real("mean_output", mean_output, 1)
    )
    trace, t = [], 0.0
    for _ in range(n_requests):
        t += rng.exponential(mean_gap)
        prompt = int(min(rng.geometric(min(1.0, 8 / max_seq_len)), max_seq_len // 2))
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
    mean_gap = check_real("mean_gap", mean_gap, 0)
    mean_suffix, mean_output = (
        check_real("mean_suffix", mean_suffix, 1),
        check_real("mean_output", mean_output, 1),
    )
    rng = np.random.default_rng(check_seed(seed))
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
    ``first_cached_tokens[i]`` from the cache. Every readmission after a preemption prefilled
    again, in order, ``recomputed_tokens`` positions (its prompt and the tokens it had generated,
    less any found cached): the work preemption costs. With a model, ``outputs[i]`` are request
    i's generated tokens.
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
    recomputed_tokens: list[int] = field(default_factory=list)
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

    With ``model`` (a GPT2Model) the replay is real: every request gets its ``prompt_ids`` (or
    random ones), a ``PagedKVCache`` (a ``PrefixCachedSequence`` with prefix caching, a
    ``PreallocatedKVCache`` for ``"contiguous"``) and greedy decoding, and reserved and used
    positions are read off the caches and the pool.

    Every argument is checked before the replay starts (a TypeError/ValueError naming it): each
    Request's fields are ints (2.5 output tokens are refused, never rounded) and its prompt_ids
    the model's token ids, and ``model`` is None or a NumPy model.
    """
    check_replay(trace, scheme, capacity_tokens, max_seq_len, block_size, model, prefix_caching)
    seed, max_steps = check_seed(seed), check_int("max_steps", max_steps, 1)
    replay = _Replay(trace, scheme, capacity_tokens, max_seq_len, block_size, model, seed, prefix_caching)
    return replay.run(max_steps)


class _Replay:
    """The state of one replay (the memory, the queues, the result); ``run`` is its scheduler loop
    and the other methods are the loop's steps. The memory is a count of reserved positions
    (contiguous), a block allocator (paged, bookkeeping only) or a pool of real caches (a model)."""

    def __init__(
        self,
        trace: list[Request],
        scheme: str,
        capacity_tokens: int,
        max_seq_len: int,
        block_size: int,
        model: Any,
        seed: int,
        prefix_caching: bool,
    ) -> None:
        self.trace, self.scheme, self.model = trace, scheme, model
        self.max_seq_len, self.block_size, self.prefix_caching = max_seq_len, block_size, prefix_caching
        self.capacity_tokens = capacity_tokens
        n_blocks = capacity_tokens // block_size
        self.pool: PagedKVPool | None = None
        if model is not None and scheme == "paged":
            pool_type = PrefixCachingPool if prefix_caching else PagedKVPool
            self.pool = pool_type.for_model(model, n_blocks, block_size)
            self.allocator = self.pool.allocator
        else:
            self.allocator = PrefixCachingAllocator(n_blocks) if prefix_caching else BlockAllocator(n_blocks)
        self.reserved_slots = 0  # contiguous: positions reserved
        self.prompts = _prompt_ids(trace, model, seed)
        # a look-up stops one token short of the prompt's end; every full prompt block gets a name
        self.lookups = [block_hashes(p[:-1], block_size) if prefix_caching else [] for p in self.prompts]
        self.names = [block_hashes(p, block_size) if prefix_caching else [] for p in self.prompts]
        n = len(trace)
        self.result = TraceResult(
            scheme,
            capacity_tokens,
            first_prefill_tokens=[0] * n,
            first_cached_tokens=[0] * n,
            outputs=[[] for _ in trace] if model is not None else [],
        )
        self.pending = deque(sorted(range(n), key=lambda i: (trace[i].arrival, i)))
        self.waiting: deque[_Live] = deque()
        self.running: list[_Live] = []

    def run(self, max_steps: int) -> TraceResult:
        """Each step: arrivals queue up, every running request decodes a token, waiting requests
        are admitted while memory allows, the memory is recorded, finished requests leave."""
        step = 0
        while self.pending or self.waiting or self.running:
            if step >= max_steps:
                raise ValueError(f"max_steps: the trace did not finish within {max_steps} steps")
            self.arrive(step)
            produced = self.decode()
            produced += self.admit()
            self.record(produced)
            self.leave()
            step += 1
        self.result.steps = step
        self.result.evictions = self.allocator.evictions if self.prefix_caching else 0
        return self.result

    def arrive(self, step: int) -> None:
        while self.pending and self.trace[self.pending[0]].arrival <= step:
            i = self.pending.popleft()
            self.waiting.append(_Live(self.trace[i], i))

    def decode(self) -> int:
        """One token for every running request, oldest first -> how many were produced. A paged
        sequence whose next position opens a block gets one, preempting while none is free."""
        produced = 0
        for live in list(self.running):
            if live not in self.running:
                continue  # preempted earlier in this step
            if self.scheme == "paged" and live.length % self.block_size == 0:
                if not self.make_room(live):
                    continue
                if self.model is None:
                    live.blocks.append(self.allocator.allocate())
            if self.model is not None:
                logits_V = self.model.decode_step(live.tokens[-1], live.cache)
                live.tokens.append(greedy(logits_V))
            live.generated += 1
            produced += 1
        return produced

    def make_room(self, live: _Live) -> bool:
        """Preempt the newest running requests until a block is free; False if ``live`` went too."""
        while self.allocator.n_free == 0 and live in self.running:
            victim = self.running.pop()
            self.stop(victim)
            self.waiting.appendleft(victim)  # first in line, recomputed when admitted again
            self.result.preemptions += 1
        return live in self.running

    def admit(self) -> int:
        """Admit waiting requests, first come first served, while they fit -> first tokens given."""
        first_tokens = 0
        while self.waiting and self.fits(self.waiting[0]):
            live = self.waiting.popleft()
            first_tokens += live.generated == 0
            self.start(live)
            self.running.append(live)
        return first_tokens

    def fits(self, live: _Live) -> bool:
        if self.scheme == "contiguous":
            return self.capacity_tokens - self.reserved_slots >= self.max_seq_len
        need = math.ceil(live.length / self.block_size)
        if self.prefix_caching:
            need = self.allocator.blocks_consumed(self.lookups[live.index], need)
        return self.allocator.n_free >= need

    def start(self, live: _Live) -> None:
        """Take memory and prefill the prompt, plus the tokens generated before a preemption."""
        cached = self.take_memory(live)
        if self.model is not None:
            ids = self.prompts[live.index] + live.tokens[:-1]
            logits_V = self.model.prefill(ids[cached:], live.cache)[-1]
            if not live.tokens:
                live.tokens.append(greedy(logits_V))
        result = self.result
        result.prompt_tokens += live.length
        result.cached_tokens += cached
        if live.generated == 0:
            result.first_prefill_tokens[live.index] = live.length - cached
            result.first_cached_tokens[live.index] = cached
        else:  # readmitted after a preemption
            result.recomputed_tokens.append(live.length - cached)
        live.generated = max(live.generated, 1)

    def take_memory(self, live: _Live) -> int:
        """Reserve positions, blocks or a real cache for ``live`` -> the positions found cached."""
        if self.scheme == "contiguous":
            self.reserved_slots += self.max_seq_len
            if self.model is not None:
                live.cache = self.model.new_cache(kind="preallocated", capacity=self.max_seq_len)
            return 0
        if self.pool is not None and self.prefix_caching:
            live.cache = self.pool.new_sequence(capacity=self.max_seq_len, token_ids=self.prompts[live.index])
            return len(live.cache)
        if self.pool is not None:
            live.cache = self.pool.new_sequence(capacity=self.max_seq_len)
            return 0
        hits = []
        if self.prefix_caching:
            hits = self.allocator.match(self.lookups[live.index])
            self.allocator.take(hits)
        n_new = math.ceil(live.length / self.block_size) - len(hits)
        live.blocks = hits + [self.allocator.allocate() for _ in range(n_new)]
        names = self.names[live.index]
        for j in range(len(hits), len(names)):
            self.allocator.register(live.blocks[j], names[j])
        return len(hits) * self.block_size

    def stop(self, live: _Live) -> None:
        """Give ``live``'s memory back (preempted or finished)."""
        if self.scheme == "contiguous":
            self.reserved_slots -= self.max_seq_len
        elif self.model is not None:
            live.cache.free()
        # with prefix caching, the last block first (as PrefixCachedSequence.free does)
        for block in reversed(live.blocks) if self.prefix_caching else live.blocks:
            self.allocator.release(block)
        live.blocks, live.cache = [], None

    def record(self, produced: int) -> None:
        self.result.tokens_generated += produced
        self.result.running.append(len(self.running))
        reserved, used = self.memory()
        self.result.reserved.append(reserved)
        self.result.used.append(used)

    def memory(self) -> tuple[int, int]:
        """Token positions reserved and used now: counted, or read off the pool and the caches. A
        block that several requests share (a cached prefix) counts its positions once."""
        if self.model is None:
            if self.scheme == "contiguous":
                return self.reserved_slots, sum(live.length for live in self.running)
            filled = block_fill(((live.blocks, live.length) for live in self.running), self.block_size)
            return self.allocator.n_used * self.block_size, sum(filled.values())
        token_bytes = _token_bytes(self.model)
        if self.pool is not None:
            usage = self.pool.usage()
            return usage.bytes_reserved // token_bytes, usage.tokens_stored
        reserved = sum(live.cache.nbytes for live in self.running) // token_bytes
        return reserved, sum(len(live.cache) for live in self.running)

    def leave(self) -> None:
        for live in [x for x in self.running if x.generated >= x.request.output_len]:
            self.running.remove(live)
            self.stop(live)
            self.result.finished += 1
            if self.model is not None:
                self.result.outputs[live.index] = live.tokens


def check_replay(
    trace: Any, scheme: Any, capacity_tokens: Any, max_seq_len: Any, block_size: Any, model: Any,
    prefix_caching: Any,
) -> None:  # fmt: skip
    """simulate_trace's arguments (and ``book.paged_widget.paged_steps``'s), or a TypeError/ValueError
    naming the first that is wrong; a pool of more than ``MAX_BLOCKS`` blocks is refused before
    anything is allocated."""
    check_choice("scheme", scheme, ("contiguous", "paged"))
    if model is not None and not isinstance(model, NumpyDecoder):
        raise TypeError(
            f"model: expected None or a NumPy model (GPT2Model, LlamaModel: the replay runs NumPy caches), "
            f"got {type(model).__name__}"
        )
    if not isinstance(prefix_caching, bool):
        raise TypeError(f"prefix_caching: expected a bool, got {type(prefix_caching).__name__}")
    if prefix_caching and scheme != "paged":
        raise ValueError(
            f"prefix_caching: expected False with scheme {scheme!r} (only paged blocks are cached), got True"
        )
    check_int("max_seq_len", max_seq_len, 1)
    check_int("block_size", block_size, 1)
    check_int("capacity_tokens", capacity_tokens, 1)
    if capacity_tokens // block_size > MAX_BLOCKS:
        raise ValueError(
            f"capacity_tokens: expected at most {MAX_BLOCKS} blocks of {block_size} positions "
            f"({MAX_BLOCKS * block_size} positions), got {capacity_tokens}"
        )
    if capacity_tokens < max_seq_len or capacity_tokens // block_size < math.ceil(max_seq_len / block_size):
        raise ValueError(
            f"capacity_tokens: expected room for one sequence of max_seq_len={max_seq_len} "
            f"in blocks of {block_size}, got {capacity_tokens}"
        )
    _check_trace(trace, max_seq_len, model)
    if model is not None and model.config.max_seq_len < max_seq_len:
        raise ValueError(f"model: expected max_seq_len >= {max_seq_len}, got {model.config.max_seq_len}")


def _prompt_ids(trace: list[Request], model: Any, seed: int) -> list[list[int]]:
    """Each request's prompt ids: its own, or (a replay with a model) random ones; [] otherwise."""
    rng = np.random.default_rng(seed)
    prompts = []
    for r in trace:
        if r.prompt_ids:
            prompts.append(list(r.prompt_ids))
        elif model is not None:
            prompts.append(rng.integers(0, model.config.vocab_size, r.prompt_len).tolist())
        else:
            prompts.append([])
    return prompts


def _check_trace(trace: Any, max_seq_len: int, model: Any) -> None:
    """Each Request of ``trace``: int fields (a count of 2.5 tokens is refused, never rounded), a
    length that fits ``max_seq_len``, and its own prompt_ids (if any) as token ids of ``model``."""
    if isinstance(trace, (str, bytes)) or not isinstance(trace, (list, tuple)):
        raise TypeError(f"trace: expected a list of Request, got {type(trace).__name__}")
    vocab_size = model.config.vocab_size if model is not None else 2**63 - 1
    for i, r in enumerate(trace):
        where = f"trace: request {i}"
        if not isinstance(r, Request):
            raise TypeError(f"{where}: expected a Request, got {type(r).__name__}")
        try:
            check_int("arrival", r.arrival, 0)
            check_int("prompt_len", r.prompt_len, 1)
            check_int("output_len", r.output_len, 1)
            if not isinstance(r.prompt_ids, tuple):
                raise TypeError(
                    f"prompt_ids: expected a tuple of token ids, got {type(r.prompt_ids).__name__}"
                )
            if r.prompt_ids:
                check_token_ids(r.prompt_ids, vocab_size, "prompt_ids")
        except (TypeError, ValueError) as err:
            raise type(err)(f"{where}: {err}") from None
        if r.prompt_len + r.output_len > max_seq_len + 1:
            raise ValueError(
                f"{where}: expected prompt_len + output_len <= max_seq_len + 1 = {max_seq_len + 1} (the "
                f"last token is not cached), got {r.prompt_len} + {r.output_len}"
            )
        if r.prompt_ids and len(r.prompt_ids) != r.prompt_len:
            raise ValueError(
                f"{where}: expected {r.prompt_len} prompt_ids (its prompt_len), got {len(r.prompt_ids)}"
            )


def _token_bytes(model: Any) -> int:
    cfg = model.config
    return 2 * cfg.n_layers * cfg.n_kv_heads * cfg.d_head * model.weights.wte_VD.itemsize
