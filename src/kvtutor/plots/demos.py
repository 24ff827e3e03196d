"""Figures of the demonstrations (chapters 5 to 7, ``kvtutor.book``): FLOPs with and without a
cache, bytes each cache layout writes, the top-left mask beside the right one, arithmetic intensity.

Every function draws numbers handed to it and returns the matplotlib ``Figure``; matplotlib is
imported when a function runs (``style.pyplot``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..book.wrong import top_left_causal_mask
from ..models.gpt2 import causal_mask
from .style import (
    BLUE,
    DECODE_COLOR,
    GREEN,
    LIGHT_GREY,
    ORANGE,
    PAGE_WIDTH,
    PROMPT_COLOR,
    PURPLE,
    RED,
    pyplot,
)

__all__ = ["plot_cumulative_flops", "plot_bytes_written", "plot_masks", "plot_intensity"]


def _check_1d(name: str, arr: Any, n: int | None = None) -> np.ndarray:
    arr = np.asarray(arr, dtype=float)
    if arr.ndim != 1 or (n is not None and len(arr) != n):
        want = "a 1-D array" if n is None else f"a 1-D array of {n} values"
        raise ValueError(f"{name}: expected {want}, got shape {list(arr.shape)}")
    return arr


def plot_cumulative_flops(context_N: Any, cached_N: Any, uncached_N: Any, title: str = "") -> Any:
    """[N] context lengths, [N] FLOPs per token with / without a cache -> Figure with two panels.

    Left: the GFLOPs spent on each generated token; right: their running total. Both on a log
    scale, so the cached line (hundreds of times lower) stays visible.
    """
    context_N = _check_1d("context_N", context_N)
    cached_N = _check_1d("cached_N", cached_N, len(context_N))
    uncached_N = _check_1d("uncached_N", uncached_N, len(context_N))
    plt = pyplot()
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(9.0, 3.6))
    for ax, with_, without, what in (
        (ax0, cached_N, uncached_N, "GFLOP for this token"),
        (ax1, np.cumsum(cached_N), np.cumsum(uncached_N), "GFLOP so far (cumulative)"),
    ):
        ax.semilogy(
            context_N, without / 1e9, color=DECODE_COLOR, lw=2, label="no cache: recompute everything"
        )
        ax.semilogy(context_N, with_ / 1e9, color=PROMPT_COLOR, lw=2, label="KV cache: one token per step")
        ax.set_xlabel("sequence length when the token is produced")
        ax.set_ylabel(what + " (log scale)")
        ax.grid(alpha=0.3, which="both")
    ax0.legend(fontsize=8, loc="upper left")
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def plot_bytes_written(context_N: Any, concat_N: Any, preallocated_N: Any) -> Any:
    """[N] cache lengths, [N] cumulative bytes written by each cache layout -> Figure."""
    context_N = _check_1d("context_N", context_N)
    concat_N = _check_1d("concat_N", concat_N, len(context_N))
    preallocated_N = _check_1d("preallocated_N", preallocated_N, len(context_N))
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.plot(context_N, concat_N / 1024, "o-", color=DECODE_COLOR, ms=3, label="concat: copies the history")
    ax.plot(
        context_N, preallocated_N / 1024, "o-", color=PROMPT_COLOR, ms=3, label="preallocated: new rows only"
    )
    ax.set_xlabel("cache length (tokens)")
    ax.set_ylabel("KiB written to the cache so far")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def plot_masks(n_queries: int, n_keys: int, key_labels: Any | None = None) -> Any:
    """T, S (T new queries after S - T cached keys) -> Figure: the top-left mask beside the right one.

    Green cells may be attended, grey ones are masked; rows are labelled with the query's position.
    """
    for name, value in (("n_queries", n_queries), ("n_keys", n_keys)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name}: expected a positive int, got {value!r}")
    if n_queries > n_keys:
        raise ValueError(f"n_queries: expected at most n_keys={n_keys}, got {n_queries}")
    keys = [str(i) for i in range(n_keys)] if key_labels is None else [str(s) for s in key_labels]
    if len(keys) != n_keys:
        raise ValueError(f"key_labels: expected {n_keys} labels, got {len(keys)}")
    if key_labels is not None:
        keys = [f"{i}\n{s}" for i, s in enumerate(keys)]
    plt = pyplot()
    from matplotlib.colors import ListedColormap

    cmap = ListedColormap([LIGHT_GREY, GREEN])
    offset = n_keys - n_queries
    rows = [f"query at {offset + t}" for t in range(n_queries)]
    # one panel above the other, each as wide as the page allows: labels at their own size
    cell = min(0.6, (PAGE_WIDTH - 1.4) / n_keys)
    panel_h = cell * n_queries + 1.1
    fig, axes = plt.subplots(2, 1, figsize=(cell * n_keys + 1.4, 2 * panel_h))
    panels = (
        (top_left_causal_mask(n_queries, n_keys), "top-left aligned (is_causal=True): WRONG"),
        (causal_mask(n_queries, n_keys), "aligned to the last position: right"),
    )
    for ax, (mask_TS, name) in zip(axes, panels, strict=True):
        ax.imshow(mask_TS.astype(int), cmap=cmap, vmin=0, vmax=1, aspect="equal")
        for (r, c), ok in np.ndenumerate(mask_TS):
            ax.text(c, r, "see" if ok else "-", ha="center", va="center", fontsize=9)
        ax.axvline(offset - 0.5, color="black", lw=1.5, ls="--")
        ax.set_xticks(range(n_keys), keys, fontsize=9)
        ax.set_yticks(range(n_queries), rows, fontsize=9)
        ax.set_title(name, fontsize=10)
        ax.tick_params(length=0)
    axes[-1].set_xlabel("key position (left of the dashed line: from the cache)", fontsize=9)
    fig.tight_layout()
    return fig


def plot_intensity(rows_N: Any, curves: dict[str, Any], title: str = "") -> Any:
    """[N] query rows per weight read, {label: [N] FLOPs per byte} -> Figure (log-log), one line each."""
    rows_N = _check_1d("rows_N", rows_N)
    if not curves:
        raise ValueError("curves: expected at least one curve, got none")
    checked = {label: _check_1d(f"curves[{label!r}]", y, len(rows_N)) for label, y in curves.items()}
    plt = pyplot()
    colors = [BLUE, ORANGE, RED, GREEN, PURPLE]
    markers = "so^dv"
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for i, (label, y_N) in enumerate(checked.items()):
        ax.loglog(rows_N, y_N, "-", marker=markers[i % 5], color=colors[i % 5], ms=4, label=label)
    ax.set_xlabel("query rows that share one read of the weights")
    ax.set_ylabel("FLOPs per byte moved")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="upper left")
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig
