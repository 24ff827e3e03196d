"""The paged-pool replay for the page of "A paged KV cache": ``serving.paged_trace.simulate_trace``'s
schedule over two small traces, every step exported with the blocks each request holds, and
``book/_static/widgets/kv-scheduler.js`` to step or play it in the page.

The traces: ten requests of random lengths on a pool of 10 blocks of 8 positions, where growing
sequences preempt the newest one; and ten requests that begin with one of three system prompts on
12 blocks, with and without prefix caching. ``TraceResult`` keeps per step only the running
count and the positions reserved and used, not which request holds which block, so
``paged_steps`` replays the trace with the same rules on the package's own allocators
(``caches.paged.BlockAllocator``, ``caches.prefix.PrefixCachingAllocator`` and ``block_hashes``)
and records each step's blocks; the export refuses to stand if any step's running count,
reserved or used positions, or any total (preemptions, evictions, prompt positions computed and
found cached, per request too) differs from ``simulate_trace``'s own run of the same trace.
"""

from __future__ import annotations

import html
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..caches.paged import BlockAllocator, block_fill
from ..caches.prefix import PrefixCachingAllocator, block_hashes
from ..serving.paged_trace import (
    Request,
    TraceResult,
    check_replay,
    random_trace,
    shared_prefix_trace,
    simulate_trace,
)
from .editions import both_editions
from .scheduler_widget import timeline_svg
from .widgets import VERSION, Widget

__all__ = ["PAGED_STATES", "paged_runs", "paged_steps", "paged_replay", "paged_replay_data"]

#: What a request does in a step, by its code in the export.
PAGED_STATES = ("future", "waiting", "admitted", "running", "preempted", "finished", "done")
MAX_SEQ_LEN, BLOCK_SIZE = 64, 8


def paged_runs() -> list[dict[str, Any]]:
    """The exported runs, each the arguments of one ``simulate_trace`` call (``trace`` is its id)."""
    random = random_trace(10, max_seq_len=MAX_SEQ_LEN, seed=11, mean_gap=1.0)
    shared = shared_prefix_trace(10, max_seq_len=MAX_SEQ_LEN, vocab_size=32, n_prefixes=3, prefix_len=16,
                                 seed=5, mean_gap=1.5, mean_suffix=6, mean_output=8)  # fmt: skip
    runs = [{"trace": "random", "requests": random, "capacity_tokens": 80, "prefix_caching": False}]
    runs += [
        {"trace": "shared", "requests": shared, "capacity_tokens": 96, "prefix_caching": pc}
        for pc in (False, True)
    ]
    return runs


@dataclass
class _Live:
    index: int
    request: Request
    generated: int = 0
    blocks: list[int] = field(default_factory=list)

    @property
    def length(self) -> int:
        return self.request.prompt_len + max(0, self.generated - 1)


@dataclass
class _Step:
    running: int
    reserved: int
    used: int
    free: int
    cached_free: int
    evictions: int
    preemptions: int
    prompt_tokens: int
    cached_tokens: int
    pool: list[list[int]]  # per block: the requests holding it; [-1] cached and held by nobody
    events: dict[str, list[int]]
    cells: list[list[int]]


class _PagedReplay:
    """``simulate_trace``'s loop for a paged pool without a model, with every step's blocks kept."""

    def __init__(self, trace: list[Request], capacity_tokens: int, prefix_caching: bool) -> None:
        self.trace, self.bs, self.prefix = trace, BLOCK_SIZE, prefix_caching
        n_blocks = capacity_tokens // BLOCK_SIZE
        self.alloc = PrefixCachingAllocator(n_blocks) if prefix_caching else BlockAllocator(n_blocks)
        prompts = [list(r.prompt_ids) for r in trace]
        self.lookups = [block_hashes(p[:-1], BLOCK_SIZE) if prefix_caching else [] for p in prompts]
        self.names = [block_hashes(p, BLOCK_SIZE) if prefix_caching else [] for p in prompts]
        self.pending = deque(sorted(range(len(trace)), key=lambda i: (trace[i].arrival, i)))
        self.waiting: deque[_Live] = deque()
        self.running: list[_Live] = []
        self.result = TraceResult("paged", capacity_tokens, first_prefill_tokens=[0] * len(trace),
                                  first_cached_tokens=[0] * len(trace))  # fmt: skip
        self.lives = [_Live(i, r) for i, r in enumerate(trace)]
        self.steps: list[_Step] = []
        self.events: dict[str, list[int]] = {}
        self.hits = [0] * len(trace)

    def run(self) -> None:
        step = 0
        while self.pending or self.waiting or self.running:
            self.events = {"admitted": [], "preempted": [], "finished": []}
            while self.pending and self.trace[self.pending[0]].arrival <= step:
                self.waiting.append(self.lives[self.pending.popleft()])
            produced = self.decode()
            produced += self.admit()
            self.record(produced, step)
            for live in [x for x in self.running if x.generated >= x.request.output_len]:
                self.running.remove(live)
                self.stop(live)
                self.result.finished += 1
            step += 1
        self.result.steps = step
        self.result.evictions = self.alloc.evictions if self.prefix else 0

    def decode(self) -> int:
        produced = 0
        for live in list(self.running):
            if live not in self.running:
                continue
            if live.length % self.bs == 0:
                while self.alloc.n_free == 0 and live in self.running:
                    victim = self.running.pop()
                    self.stop(victim)
                    self.waiting.appendleft(victim)
                    self.result.preemptions += 1
                    self.events["preempted"].append(victim.index)
                if live not in self.running:
                    continue
                live.blocks.append(self.alloc.allocate())
            live.generated += 1
            produced += 1
        return produced

    def admit(self) -> int:
        first = 0
        while self.waiting and self.fits(self.waiting[0]):
            live = self.waiting.popleft()
            first += live.generated == 0
            self.start(live)
            self.running.append(live)
            self.events["admitted"].append(live.index)
        return first

    def fits(self, live: _Live) -> bool:
        need = math.ceil(live.length / self.bs)
        if self.prefix:
            need = self.alloc.blocks_consumed(self.lookups[live.index], need)
        return self.alloc.n_free >= need

    def start(self, live: _Live) -> None:
        hits = self.alloc.match(self.lookups[live.index]) if self.prefix else []
        if hits:
            self.alloc.take(hits)
        n_new = math.ceil(live.length / self.bs) - len(hits)
        live.blocks = hits + [self.alloc.allocate() for _ in range(n_new)]
        names = self.names[live.index]
        for j in range(len(hits), len(names)):
            self.alloc.register(live.blocks[j], names[j])
        cached = len(hits) * self.bs
        self.result.prompt_tokens += live.length
        self.result.cached_tokens += cached
        self.hits[live.index] = cached
        if live.generated == 0:
            self.result.first_prefill_tokens[live.index] = live.length - cached
            self.result.first_cached_tokens[live.index] = cached
        live.generated = max(live.generated, 1)

    def stop(self, live: _Live) -> None:
        for block in reversed(live.blocks) if self.prefix else live.blocks:
            self.alloc.release(block)
        live.blocks = []

    def record(self, produced: int, step: int) -> None:
        result = self.result
        result.tokens_generated += produced
        result.running.append(len(self.running))
        result.reserved.append(self.alloc.n_used * self.bs)
        filled = block_fill(((live.blocks, live.length) for live in self.running), self.bs)
        result.used.append(sum(filled.values()))  # a shared block's positions once
        pool: list[list[int]] = [[] for _ in range(self.alloc.n_blocks)]
        for live in self.running:
            for block in live.blocks:
                pool[block].append(live.index)
        for block in getattr(self.alloc, "evictable", {}):
            pool[block] = [-1]
        ends = {x.index for x in self.running if x.generated >= x.request.output_len}
        cells = []
        for live in self.lives:
            i = live.index
            if live.request.arrival > step:
                state = "future"
            elif i in ends:
                state = "finished"
            elif live in self.running:
                state = "admitted" if i in self.events["admitted"] else "running"
            elif live in self.waiting:
                state = "preempted" if i in self.events["preempted"] else "waiting"
            else:
                state = "done"
            held = len(live.blocks) if live in self.running else 0
            length = live.length if live in self.running else 0
            cells.append([PAGED_STATES.index(state), held, length, live.generated, self.hits[i]])
        evictable = len(getattr(self.alloc, "evictable", {}))
        self.steps.append(_Step(len(self.running), result.reserved[-1], result.used[-1], self.alloc.n_free,
                                evictable, getattr(self.alloc, "evictions", 0), result.preemptions,
                                result.prompt_tokens, result.cached_tokens, pool,
                                {k: list(v) for k, v in self.events.items()}, cells))  # fmt: skip


def paged_steps(
    trace: list[Request], capacity_tokens: int, prefix_caching: bool
) -> tuple[list[Any], TraceResult]:
    """Every step of ``simulate_trace(trace, "paged", capacity_tokens, 64, 8, prefix_caching=...)``
    with the blocks each request holds, and the run's TraceResult; a RuntimeError if any count
    differs from ``simulate_trace``'s own. The arguments are ``simulate_trace``'s and checked as
    they are there (``check_replay``), before any pool is made."""
    check_replay(trace, "paged", capacity_tokens, MAX_SEQ_LEN, BLOCK_SIZE, None, prefix_caching)
    replay = _PagedReplay(trace, capacity_tokens, prefix_caching)
    replay.run()
    real = simulate_trace(
        trace, "paged", capacity_tokens, MAX_SEQ_LEN, BLOCK_SIZE, prefix_caching=prefix_caching
    )
    mine = replay.result
    for key in (
        "steps",
        "finished",
        "preemptions",
        "tokens_generated",
        "running",
        "reserved",
        "used",
        "prompt_tokens",
        "cached_tokens",
        "evictions",
        "first_prefill_tokens",
        "first_cached_tokens",
    ):
        if getattr(mine, key) != getattr(real, key):
            raise RuntimeError(f"paged replay: {key} differs from simulate_trace's ({getattr(real, key)!r})")
    return replay.steps, real


def _run_data(run: dict[str, Any]) -> dict[str, Any]:
    steps, result = paged_steps(run["requests"], run["capacity_tokens"], run["prefix_caching"])
    return {
        "id": f"{run['trace']}-{'prefix' if run['prefix_caching'] else 'plain'}",
        "trace": run["trace"],
        "prefix_caching": run["prefix_caching"],
        "steps": [
            {
                "running": s.running,
                "reserved": s.reserved,
                "used": s.used,
                "free": s.free,
                "cached_free": s.cached_free,
                "evictions": s.evictions,
                "preemptions": s.preemptions,
                "prompt_tokens": s.prompt_tokens,
                "cached_tokens": s.cached_tokens,
                "pool": s.pool,
                **s.events,
            }
            for s in steps
        ],
        "cells": [s.cells for s in steps],
        "totals": {
            "steps": result.steps,
            "preemptions": result.preemptions,
            "evictions": result.evictions,
            "prompt_tokens": result.prompt_tokens,
            "cached_tokens": result.cached_tokens,
            "first_prefill_tokens": result.first_prefill_tokens,
            "first_cached_tokens": result.first_cached_tokens,
            "tokens_generated": result.tokens_generated,
            "first_prefill_sum": sum(result.first_prefill_tokens),
            "first_cached_sum": sum(result.first_cached_tokens),
        },
    }


def _trace_info(run: dict[str, Any]) -> dict[str, Any]:
    prefixes: dict[tuple[int, ...], int] = {}
    requests = []
    for i, r in enumerate(run["requests"]):
        entry = {
            "name": chr(ord("A") + i),
            "arrival": r.arrival,
            "prompt": r.prompt_len,
            "wants": r.output_len,
        }
        if r.prompt_ids:  # which system prompt it begins with, numbered in order of appearance
            entry["system"] = prefixes.setdefault(tuple(r.prompt_ids[:16]), len(prefixes))
        requests.append(entry)
    return {"id": run["trace"], "requests": requests, "n_blocks": run["capacity_tokens"] // BLOCK_SIZE,
            "block_size": BLOCK_SIZE, "max_seq_len": MAX_SEQ_LEN}  # fmt: skip


def paged_replay_data() -> dict[str, Any]:
    """The replay's data: the traces (requests, the pool's size) and, per run, every step's pool
    (who holds each block), counts and events, and each request's state, blocks, positions used,
    tokens and prefix-cache hit."""
    runs = paged_runs()
    traces = {run["trace"]: _trace_info(run) for run in runs}
    return {"widget": "paged-replay", "version": VERSION, "states": list(PAGED_STATES),
            "traces": list(traces.values()), "runs": [_run_data(run) for run in runs]}  # fmt: skip


FALLBACK = {
    "en": (
        "Without JavaScript the replay cannot run: it steps through the package's paged-pool "
        "replay (simulate_trace) on two traces, showing each step's blocks, who holds them, the "
        "free and cached ones, preemptions and prefix-cache hits. Here is one of its runs:",
        "{n} requests on a pool of {blocks} blocks of {size} positions",
    ),
    "zh": (
        "没有 JavaScript，回放无法运行：它逐步展示本包的分页缓存池回放（simulate_trace）"
        "在两条请求轨迹上的运行，显示每一步的块、谁持有它们、空闲和缓存的块、抢占以及前缀缓存命中。下面是其中一次运行：",
        "{n} 个请求共用一个 {blocks} 块、每块 {size} 个位置的缓存池",
    ),
}
_FIGURE_STATE = {"waiting": "waiting", "admitted": "admitted", "running": "running", "preempted": "preempted",
                 "finished": "finished"}  # fmt: skip


def _fallback(data: dict[str, Any]) -> str:
    run = next(r for r in data["runs"] if r["id"] == "random-plain")
    trace = next(t for t in data["traces"] if t["id"] == "random")
    names = [r["name"] for r in trace["requests"]]
    rows = [[_FIGURE_STATE.get(PAGED_STATES[row[i][0]]) for row in run["cells"]] for i in range(len(names))]
    steps = list(range(len(run["steps"])))
    sizes = {"n": len(names), "blocks": trace["n_blocks"], "size": trace["block_size"]}
    parts = {}
    for lang, (note, title) in FALLBACK.items():
        figure = timeline_svg(rows, names, steps, lang, title.format(**sizes))
        parts[lang] = f"<p>{html.escape(note)}</p>{figure}"
    return both_editions(parts["en"], parts["zh"])


def paged_replay() -> Widget:
    """The paged-pool replay, for the page of "A paged KV cache" (``paged_replay_data``)."""
    data = paged_replay_data()
    summary = f"paged-pool replay: {len(data['runs'])} runs of {len(data['traces'])} traces"
    return Widget("paged-replay", data, summary, fallback=_fallback(data))
