"""Figures for the chapters on KV-cache memory, grouped-query attention and the paged cache.

Every function draws on a matplotlib Axes (made if not given) and returns it; the notebooks call
them and end the cell with ``plt.show()``. The interactive KV calculator is a page widget
(``kvtutor.book.widgets.kv_calculator``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..measure.memory import (
    GIB,
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    kv_bytes_per_token_decompressed,
    max_batch,
    stored_bytes_per_sequence,
    weights_bytes,
)
from ..models.hf_config import load_model_spec
from .style import BLUE, COLORS, DASHES, GREEN, ORANGE, PURPLE, pyplot

if TYPE_CHECKING:
    from ..caches.paged import PagedKVCache, PagedKVPool
    from ..measure.memory import ShrinkRow
    from ..serving.paged_trace import TraceResult

__all__ = [
    "plot_memory_vs_context",
    "plot_max_batch",
    "plot_kv_per_token",
    "plot_kv_shrink",
    "plot_window_cap",
    "draw_head_sharing",
    "plot_cache_bytes",
    "draw_paged_layout",
    "plot_trace",
    "plot_waste_vs_block_size",
]


def _spread(fracs: Sequence[float], gap: float) -> list[float]:
    """Positions (axes fractions) moved apart until neighbours are at least ``gap`` apart, in order."""
    order = sorted(range(len(fracs)), key=lambda i: fracs[i])
    placed = [0.0] * len(fracs)
    last = -1.0
    for i in order:
        placed[i] = max(fracs[i], last + gap)
        last = placed[i]
    overflow = last - 1.0
    if overflow > 0:  # shift everything down to stay inside the axes
        placed = [p - overflow for p in placed]
    return placed


def _axes(ax: Any = None, figsize: tuple[float, float] | None = None) -> Any:
    if ax is None:
        _, ax = pyplot().subplots(figsize=figsize)
    return ax


def _context_label(n: int) -> str:
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else str(n)


# ---------------------------------------------------------------- KV memory


def _plain_log_axes(ax: Any, seq_lens: Sequence[int]) -> None:
    from matplotlib.ticker import FuncFormatter

    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xticks(list(seq_lens), [_context_label(n) for n in seq_lens])
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
    ax.grid(True, which="major", alpha=0.3)


def plot_memory_vs_context(
    names: Sequence[str], seq_lens: Sequence[int], dtype: str = "bf16", ax: Any = None
) -> Any:
    """One sequence's KV cache (solid) against context length, next to the weights (dashed).

    Past a model's own context (max_position_embeddings) its line turns dotted. Every weight line
    has its own dash pattern and is named, with its size, at the right-hand edge.
    """
    ax = _axes(ax, (7.0, 4.4))
    weights = []
    for i, (color, name) in enumerate(zip(COLORS, names, strict=False)):
        spec = load_model_spec(name)
        gib = np.array([kv_bytes_per_sequence(spec, n, dtype) / GIB for n in seq_lens])
        lens = np.array(seq_lens)
        inside = lens <= spec.max_seq_len
        last = int(np.flatnonzero(inside)[-1]) + 1 if inside.any() else 0
        ax.plot(lens[:last], gib[:last], "o-", color=color, ms=3, label=f"{name}")
        ax.plot(lens[max(last - 1, 0) :], gib[max(last - 1, 0) :], ":", color=color, lw=1)
        w = weights_bytes(spec, dtype) / GIB
        ax.axhline(w, color=color, ls=DASHES[i % len(DASHES)], lw=1.1)
        weights.append((name, w, color))
    _plain_log_axes(ax, seq_lens)
    ax.autoscale_view()
    low, high = (np.log2(v) for v in ax.get_ylim())
    fracs = [(np.log2(w) - low) / (high - low) for _, w, _ in weights]
    for (name, w, color), frac, y in zip(weights, fracs, _spread(fracs, 0.055), strict=True):
        # a leader from the line's end to its label; labels keep the lines' order, so none cross
        ax.plot(
            [1.0, 1.02, 1.06], [frac, frac, y], transform=ax.transAxes, clip_on=False, color=color, lw=0.6
        )
        ax.text(1.065, y, f"{name} weights, {w:.1f} GiB", transform=ax.transAxes, va="center", fontsize=7,
                color=color)  # fmt: skip
    ax.set_xlabel("context length (tokens, one sequence)")
    ax.set_ylabel(f"GiB ({dtype})")
    ax.set_title(
        "KV cache of one sequence (solid; dotted past the model's context)\nand the weights (dashed)"
    )
    ax.legend(fontsize=8, loc="upper left")
    return ax


def plot_max_batch(
    names: Sequence[str], seq_lens: Sequence[int], memory_gib: float, dtype: str = "bf16", ax: Any = None
) -> Any:
    """The largest batch whose cache fits next to the weights in memory_gib, per context length.

    Dotted past a model's own context; a model whose weights alone do not fit is named in the legend.
    """
    ax = _axes(ax, (7.0, 4.2))
    budget = int(memory_gib * GIB)
    for color, name in zip(COLORS, names, strict=False):
        spec = load_model_spec(name)
        points = [(n, max_batch(spec, n, budget, dtype)) for n in seq_lens]
        points = [(n, b) for n, b in points if b > 0]
        if not points:
            ax.plot([], [], "o-", color=color, ms=3, label=f"{name} (weights do not fit)")
            continue
        inside = [(n, b) for n, b in points if n <= spec.max_seq_len]
        beyond = [(n, b) for n, b in points if n >= (inside[-1][0] if inside else 0)]
        if inside:
            ax.plot(*zip(*inside, strict=True), "o-", color=color, ms=3, label=name)
        if len(beyond) > 1:
            ax.plot(*zip(*beyond, strict=True), ":", color=color, lw=1, label=None if inside else name)
    _plain_log_axes(ax, seq_lens)
    ax.set_xlabel("context length (tokens per sequence)")
    ax.set_ylabel("largest batch")
    ax.set_title(
        f"Sequences that fit in {memory_gib:g} GiB next to the weights ({dtype});\n"
        "dotted past the model's context"
    )
    ax.legend(fontsize=8)
    return ax


def plot_kv_per_token(names: Sequence[str], dtype: str = "bf16", ax: Any = None) -> Any:
    """KV-cache bytes per token (all layers) as bars; for latent attention (MLA) a hatched bar
    shows what the same model would keep if it cached every head's K and V expanded."""
    from matplotlib.ticker import FuncFormatter

    ax = _axes(ax, (7.0, 0.6 * len(names) + 1.2))
    ys = np.arange(len(names))[::-1]
    for y, name, color in zip(ys, names, COLORS, strict=False):
        spec = load_model_spec(name)
        stored = kv_bytes_per_token(spec, dtype) / 1024
        expanded = kv_bytes_per_token_decompressed(spec, dtype) / 1024
        y_stored = y + (0.19 if expanded != stored else 0)
        height = 0.36 if expanded != stored else 0.6
        ax.barh(y_stored, stored, height=height, color=color, alpha=0.85)
        label = f" {stored:,.1f} KiB ({spec.attention_kind})"
        ax.text(stored, y_stored, label, va="center", fontsize=7)
        if expanded != stored:
            ax.barh(y - 0.19, expanded, height=0.36, color="none", edgecolor=color, hatch="///", lw=0.8)
            ax.text(expanded, y - 0.19, f" {expanded:,.0f} KiB if heads were cached", va="center", fontsize=7)
    ax.set_yticks(ys, list(names))
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.set_xlabel(f"KV cache per token, all layers (KiB, {dtype}, log scale)")
    ax.set_title("What one more token costs in the cache", fontsize=9)
    ax.set_xlim(8, ax.get_xlim()[1] * 12)  # room for the labels
    return ax


#: the four ways ``plot_kv_shrink`` draws, as (field prefix, label, colour)
_SHRINK_KINDS = (
    ("bf16", "bf16, full", BLUE),
    ("int8", "int8 + scales", ORANGE),
    ("fp8", "fp8", GREEN),
    ("windowed", "bf16, windowed", PURPLE),
)


def plot_kv_shrink(rows: Sequence[ShrinkRow], ax: Any = None) -> Any:
    """One sequence's cache per model (rows of ``memory.kv_shrink_rows``), four bars each: bf16
    with every token kept, int8 with its scales, fp8, and bf16 with a window (hatched; absent for a
    model without one). Log scale; each windowed bar is labelled with its saving."""
    from matplotlib.ticker import FuncFormatter

    ax = _axes(ax, (7.0, 0.5 * len(rows) + 1.3))
    height, labelled = 0.8 / len(_SHRINK_KINDS), set()
    for i, row in enumerate(rows):
        y0 = len(rows) - 1 - i + 0.4 - height / 2
        for j, (kind, label, color) in enumerate(_SHRINK_KINDS):
            nbytes = getattr(row, f"{kind}_per_sequence")
            if nbytes is None:
                continue
            y = y0 - j * height
            hatch, label = ("///" if kind == "windowed" else None), (None if kind in labelled else label)
            ax.barh(y, nbytes / GIB, height=height * 0.9, color=color, alpha=0.85, hatch=hatch, label=label)
            labelled.add(kind)
            if kind == "windowed":
                ax.text(nbytes / GIB, y, f" {row.saving('windowed'):.1f}x less", va="center", fontsize=6)
    ax.set_yticks(np.arange(len(rows))[::-1], [r.model for r in rows], fontsize=8)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.set_xlabel(f"KV cache of one sequence of {_context_label(rows[0].seq_len)} tokens (GiB, log scale)")
    ax.set_title("Shrinking the cache: fp8 halves it, int8 nearly, a window caps it", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    ax.set_ylim(-0.6, len(rows) - 0.4)
    return ax


def plot_window_cap(
    names: Sequence[str], seq_lens: Sequence[int], window: int, sinks: int = 0, ax: Any = None
) -> Any:
    """One sequence's cache against context length as the model keeps it (solid) and with ``window``
    (``sinks`` of them the first tokens) imposed on every layer (dashed): the windowed line stops
    growing at ``window`` tokens."""
    ax = _axes(ax, (7.0, 3.8))
    for color, name in zip(COLORS, names, strict=False):
        spec = load_model_spec(name)
        full = [kv_bytes_per_sequence(spec, n) / GIB for n in seq_lens]
        capped = [stored_bytes_per_sequence(spec, n, "bf16", window, sinks).total / GIB for n in seq_lens]
        ax.plot(seq_lens, full, "o-", color=color, ms=3, label=f"{name}")
        ax.plot(seq_lens, capped, "s--", color=color, ms=3, label=f"{name}, window")
    ax.axvline(window, color="0.4", lw=0.8, ls=":")
    label = f" window = {window:,}" + (f" ({sinks} sinks)" if sinks else "")
    ax.text(window, 0.02, label, transform=ax.get_xaxis_transform(), va="bottom", fontsize=7)
    _plain_log_axes(ax, seq_lens)
    ax.set_xlabel("context length (tokens, one sequence)")
    ax.set_ylabel("GiB (bf16)")
    ax.set_title("A window caps the cache: full (solid) and windowed (dashed)", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", ncol=2)
    return ax


# ---------------------------------------------------------------- grouped-query attention


def draw_head_sharing(n_heads: int = 8, kv_options: Sequence[int] = (8, 2, 1), axes: Any = None) -> Any:
    """Query heads (top row) and the KV heads they read (bottom row), for MHA, GQA and MQA."""
    plt = pyplot()
    from matplotlib.patches import FancyBboxPatch

    if axes is None:
        _, axes = plt.subplots(1, len(kv_options), figsize=(3.3 * len(kv_options), 2.8))
    axes = np.atleast_1d(axes)
    for ax, n_kv in zip(axes, kv_options, strict=True):
        group = n_heads // n_kv
        kind = "MHA" if n_kv == n_heads else ("MQA" if n_kv == 1 else "GQA")
        for h in range(n_heads):
            color = COLORS[(h // group) % len(COLORS)]
            ax.add_patch(
                FancyBboxPatch((h - 0.35, 1.6), 0.7, 0.5, boxstyle="round,pad=0.02", fc=color, alpha=0.5)
            )
            ax.text(h, 1.85, f"q{h}", ha="center", va="center", fontsize=7)
        kv_xs = [(g * group + (g + 1) * group - 1) / 2 for g in range(n_kv)]
        for g, x in enumerate(kv_xs):
            width = max(0.7, group - 0.3)
            ax.add_patch(
                FancyBboxPatch((x - width / 2, 0.0), width, 0.5, boxstyle="round,pad=0.02", fc=COLORS[g % 8])
            )
            ax.text(x, 0.25, f"K,V {g}" if width > 1 else f"kv{g}", ha="center", va="center", fontsize=7)
            for h in range(g * group, (g + 1) * group):
                ax.plot([h, x], [1.6, 0.5], color="0.4", lw=0.8)
        ax.set_xlim(-0.7, n_heads - 0.3)
        ax.set_ylim(-0.4, 2.5)
        ax.set_title(f"{kind}: {n_heads} query heads, {n_kv} KV head{'s' if n_kv > 1 else ''}", fontsize=9)
        ax.text((n_heads - 1) / 2, -0.3, f"cache: {n_kv}/{n_heads} of MHA", ha="center", fontsize=8)
        ax.axis("off")
    return axes


def plot_cache_bytes(
    labels: Sequence[str], measured: Sequence[int], predicted: Sequence[int], ax: Any = None
) -> Any:
    """Measured cache bytes (bars) against bytes predicted from the head counts (markers)."""
    ax = _axes(ax, (6.0, 3.4))
    xs = np.arange(len(labels))
    ax.bar(xs, [m / 1024 for m in measured], color=[COLORS[i % 8] for i in range(len(labels))], alpha=0.7)
    ax.plot(xs, [p / 1024 for p in predicted], "k_", ms=30, mew=2, label="n_kv_heads / n_heads x MHA")
    for x, m in zip(xs, measured, strict=True):
        ax.text(x, m / 1024, f"{m / 1024:.0f} KiB", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(xs, labels)
    ax.set_ylabel("cache.nbytes (KiB)")
    ax.set_title("Measured KV-cache bytes")
    ax.legend(fontsize=8)
    return ax


# ---------------------------------------------------------------- the paged cache


def draw_paged_layout(
    pool: PagedKVPool,
    seqs: dict[str, PagedKVCache],
    ax: Any = None,
    title: str = "",
    max_blocks: int | None = None,
    arrows: bool = True,
) -> Any:
    """Each sequence's block table (rows on top) pointing at the physical blocks of the pool (bottom).

    A block is a box of P cells, one per token position; filled cells hold K/V. Hatched blocks are
    shared (reference count > 1). The label over a logical block is the pool block it maps to.
    """
    from matplotlib.patches import Rectangle

    n_show = pool.n_blocks if max_blocks is None else min(max_blocks, pool.n_blocks)
    most_logical = max([len(s.block_table) for s in seqs.values()] + [1])
    row_gap, pool_gap = 1.05, 1.5
    height = pool_gap + row_gap * len(seqs)
    ax = _axes(ax, (max(6.5, 0.62 * max(n_show, most_logical + 3)), 0.9 + 0.62 * height))
    p = pool.block_size
    cell = 0.8 / p
    owner: dict[int, int] = {}
    filled: dict[int, int] = {}
    for i, seq in enumerate(seqs.values()):
        for j, block in enumerate(seq.block_table):
            owner.setdefault(block, i)
            filled[block] = max(filled.get(block, 0), min(p, max(0, len(seq) - j * p)))

    def draw_block(x: float, y: float, n_filled: int, color: str, shared: bool) -> None:
        ax.add_patch(Rectangle((x, y), 0.8, 0.42, fc="white", ec="0.3", lw=0.8))
        for t in range(n_filled):
            ax.add_patch(
                Rectangle((x + t * cell, y), cell, 0.42, fc=color, ec="white", lw=0.4, alpha=0.8,
                          hatch="///" if shared else None)
            )  # fmt: skip
        if shared:
            ax.add_patch(Rectangle((x, y), 0.8, 0.42, fill=False, ec="black", lw=1.4))

    x0 = 1.7  # logical blocks start right of the sequence labels
    for i, (name, seq) in enumerate(seqs.items()):
        y = pool_gap + row_gap * (len(seqs) - 1 - i)
        color = COLORS[i % len(COLORS)]
        ax.text(x0 - 0.15, y + 0.21, f"{name}: {len(seq)} tokens", ha="right", va="center", fontsize=8)
        for j, block in enumerate(seq.block_table):
            shared = pool.allocator.refcount[block] > 1
            draw_block(x0 + j, y, min(p, max(0, len(seq) - j * p)), color, shared)
            ax.text(x0 + j + 0.4, y + 0.47, f"#{block}", ha="center", va="bottom", fontsize=7, color=color)
            if arrows and block < n_show:
                ax.annotate(
                    "", xy=(block + 0.4, 0.46), xytext=(x0 + j + 0.4, y - 0.02),
                    arrowprops={"arrowstyle": "->", "color": color, "lw": 0.8, "alpha": 0.55,
                                "shrinkA": 0, "shrinkB": 0},
                )  # fmt: skip
    for blk in range(n_show):
        refs = pool.allocator.refcount[blk]
        color = COLORS[owner[blk] % len(COLORS)] if blk in owner else "white"
        draw_block(blk, 0.0, filled.get(blk, 0), color, refs > 1)
        label = f"#{blk}" + (f"\nx{refs}" if refs > 1 else "\nfree" if refs == 0 else "")
        ax.text(blk + 0.4, -0.06, label, ha="center", va="top", fontsize=7)
    ax.text(-0.15, 0.21, "pool", ha="right", va="center", fontsize=8)
    free = list(reversed(pool.allocator.free_list))
    more = " ..." if len(free) > 10 else ""
    ax.text(-0.9, -1.0, f"free list, next out first: {free[:10]}{more}", ha="left", va="center", fontsize=8)
    ax.set_xlim(-1.9, max(n_show, x0 + most_logical) + 0.2)
    ax.set_ylim(-1.2, height + 0.1)
    ax.set_title(title, fontsize=9)
    ax.axis("off")
    return ax


def plot_trace(results: Sequence[TraceResult], axes: Any = None) -> Any:
    """Reserved and used token positions over a trace replay, one panel per scheme."""
    plt = pyplot()
    if axes is None:
        _, axes = plt.subplots(len(results), 1, figsize=(7.0, 2.2 * len(results)), sharex=True, sharey=True)
    axes = np.atleast_1d(axes)
    for ax, r in zip(axes, results, strict=True):
        steps = np.arange(len(r.reserved))
        ax.fill_between(steps, r.reserved, color="tab:red", alpha=0.25, step="post", label="reserved")
        ax.fill_between(
            steps, r.used, color="tab:blue", alpha=0.6, step="post", label="used (tokens in cache)"
        )
        ax.axhline(r.capacity_tokens, color="0.3", ls="--", lw=0.8)
        ax.set_ylabel("token positions")
        ax.set_title(
            f"{r.scheme}: {100 * r.waste_fraction:.0f}% of reserved memory unused, "
            f"{r.mean_running:.1f} requests running on average, {r.steps} steps",
            fontsize=9,
        )
        ax.legend(fontsize=7, loc="upper right")
    axes[-1].set_xlabel("step (one token per running request)")
    return axes


def plot_waste_vs_block_size(block_sizes: Sequence[int], waste: Sequence[float], ax: Any = None) -> Any:
    """Fraction of reserved memory left unused, per block size (paging) — measured."""
    ax = _axes(ax, (5.5, 3.0))
    ax.plot(block_sizes, [100 * x for x in waste], "o-", color="tab:blue")
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(block_sizes), [str(b) for b in block_sizes])
    ax.set_xlabel("block size (token positions)")
    ax.set_ylabel("unused reserved memory (%)")
    ax.set_title("Paging: the only waste is the unfilled end of each last block", fontsize=9)
    ax.grid(True, alpha=0.3)
    return ax
