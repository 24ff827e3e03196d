"""Figures of prefix caching: requests whose block tables share cached blocks, named by their
hashes, and the hit rate of a trace against the size of the pool."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..caches.paged import block_owners
from .style import COLORS, DARK, EMPTY_COLOR, LIGHT_GREY, PAGE_WIDTH, PREDICTED_STYLE, PROMPT_COLOR, pyplot

if TYPE_CHECKING:
    from ..caches.prefix import PrefixCachedSequence, PrefixCachingPool

__all__ = ["draw_prefix_sharing", "plot_hit_rate_vs_pool"]


def draw_prefix_sharing(
    pool: PrefixCachingPool,
    seqs: dict[str, PrefixCachedSequence],
    ax: Any = None,
    title: str = "",
    hash_digits: int = 4,
) -> Any:
    """Each sequence's blocks (rows on top, one cell per position with its token id) pointing at the
    pool's blocks (bottom row).

    A full block is labelled with the first ``hash_digits`` hex digits of its hash; a cell is
    coloured by the first sequence in ``seqs`` that holds its block, so a block that one request
    computed and another found in the cache has the same colour in both rows. Thick outlines mark
    blocks held by more than one sequence. In the pool, a grey block is cached but held by nobody
    (its number in the least-recently-used order beside it: 1 is evicted first); a white one is free.
    """
    from matplotlib.patches import Rectangle

    plt = pyplot()
    alloc = pool.allocator
    p = pool.block_size
    most = max([len(s.block_table) for s in seqs.values()] + [1])
    n_show = pool.n_blocks
    row_gap, pool_gap = 1.25, 1.7
    height = pool_gap + row_gap * len(seqs)
    if ax is None:
        _, ax = plt.subplots(figsize=(PAGE_WIDTH, 0.9 + 0.55 * height))
    width, box_h = 0.86, 0.46
    cell = width / p
    owner, filled = block_owners(seqs.values())
    lru = {block: rank + 1 for rank, block in enumerate(alloc.evictable)}

    def draw_block(x: float, y: float, block: int, tokens: Sequence[int | None], color: str) -> None:
        for t, token in enumerate(tokens):
            fc = color if token is not None else "white"
            ax.add_patch(Rectangle((x + t * cell, y), cell, box_h, fc=fc, ec="white", lw=0.5, alpha=0.85))
            if token is not None and p <= 8:
                ax.text(x + (t + 0.5) * cell, y + box_h / 2, str(token), ha="center", va="center",
                        fontsize=6.5 if token < 10 else 5.5, color="white")  # fmt: skip
        shared = alloc.refcount[block] > 1
        ax.add_patch(Rectangle((x, y), width, box_h, fill=False, ec=DARK, lw=1.8 if shared else 0.7))

    x0 = 2.2  # logical blocks start right of the sequence labels
    for i, (name, seq) in enumerate(seqs.items()):
        y = pool_gap + row_gap * (len(seqs) - 1 - i)
        cached = f", {seq.n_cached_tokens} cached" if seq.n_cached_tokens else ""
        ax.text(x0 - 0.15, y + box_h / 2, f"{name}: {len(seq)} tokens{cached}", ha="right", va="center",
                fontsize=7.5)  # fmt: skip
        for j, block in enumerate(seq.block_table):
            n_rows = min(p, max(0, len(seq) - j * p))
            ids = seq.token_ids[j * p : j * p + n_rows]
            tokens = list(ids) + [None] * (p - len(ids))
            color = COLORS[owner[block] % len(COLORS)]
            draw_block(x0 + j, y, block, tokens, color)
            ax.text(x0 + j + width / 2, y + box_h + 0.04, f"#{block}", ha="center", va="bottom", fontsize=6.5,
                    color=color)  # fmt: skip
            name_j = seq.block_hashes[j][:hash_digits] if j < len(seq.block_hashes) else "no hash"
            ax.text(x0 + j + width / 2, y - 0.05, name_j, ha="center", va="top", fontsize=6.5,
                    family="monospace", color=DARK)  # fmt: skip
            ax.annotate(
                "", xy=(block + width / 2, box_h + 0.04), xytext=(x0 + j + width / 2, y - 0.28),
                arrowprops={"arrowstyle": "->", "color": color, "lw": 0.7, "alpha": 0.5,
                            "shrinkA": 0, "shrinkB": 0},
            )  # fmt: skip
    for block in range(n_show):
        refs = alloc.refcount[block]
        n_filled = p
        if refs:
            color = COLORS[owner[block] % len(COLORS)] if block in owner else PROMPT_COLOR
            state = f"x{refs}" if refs > 1 else "held"
            n_filled = filled.get(block, p)
        elif block in lru:
            color, state = LIGHT_GREY, f"cached {lru[block]}"
        else:
            color, state, n_filled = EMPTY_COLOR, "free", 0
        ax.add_patch(Rectangle((block, 0), width, box_h, fc=EMPTY_COLOR, ec="none"))
        ax.add_patch(Rectangle((block, 0), n_filled * cell, box_h, fc=color, ec="none", alpha=0.85))
        ax.add_patch(Rectangle((block, 0), width, box_h, fill=False, ec=DARK, lw=1.8 if refs > 1 else 0.7))
        label = alloc.hash_of[block][:hash_digits] if block in alloc.hash_of else ""
        ax.text(block + width / 2, box_h / 2, label, ha="center", va="center", fontsize=6, family="monospace")
        ax.text(block + width / 2, -0.06, f"#{block}\n{state}", ha="center", va="top", fontsize=6.5)
    ax.text(-0.15, box_h / 2, "pool", ha="right", va="center", fontsize=7.5)
    ax.set_xlim(-1.2, max(n_show, x0 + most) + 0.1)
    ax.set_ylim(-0.75, height)
    ax.set_title(title, fontsize=9)
    ax.axis("off")
    return ax


def plot_hit_rate_vs_pool(
    pool_blocks: Sequence[int],
    hit_rates: Sequence[float],
    ceiling: float | None = None,
    ax: Any = None,
) -> Any:
    """The share of first-prefill prompt tokens found in the cache against the pool's size in
    blocks; ``ceiling`` (dashed) is the share with room for every block."""
    plt = pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 3.0))
    ax.plot(pool_blocks, [100 * r for r in hit_rates], "o-", color=PROMPT_COLOR, label="prefix caching")
    if ceiling is not None:
        ax.axhline(100 * ceiling, color=DARK, **PREDICTED_STYLE, label="no eviction (unlimited pool)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(pool_blocks))
    ax.set_xticklabels([str(n) for n in pool_blocks])
    ax.minorticks_off()
    ax.set_xlabel("pool size (blocks)")
    ax.set_ylabel("prompt tokens from the cache (%)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return ax
