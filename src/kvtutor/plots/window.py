"""Figures for the chapter on smaller caches: window masks, cache bytes as tokens arrive, what
eviction changes, and the magnitude of key channels.

Every function draws numbers handed to it by a notebook and returns the matplotlib ``Figure`` (or
Axes); none computes model quantities.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .style import (
    BLUE,
    DASHES,
    DECODE_COLOR,
    EMPTY_COLOR,
    GREY,
    LIGHT_GREY,
    PAGE_WIDTH,
    SERIES_COLORS,
    pyplot,
)

__all__ = ["draw_window_masks", "plot_bytes_vs_tokens", "plot_eviction_kl", "plot_key_channels"]


def _axes(ax: Any, figsize: tuple[float, float]) -> Any:
    if ax is None:
        _, ax = pyplot().subplots(figsize=figsize)
    return ax


def draw_window_masks(masks: Mapping[str, Any], n_sinks: Mapping[str, int] | None = None) -> Any:
    """One panel per square mask [T, T] (query t at position t, key s at position s): visible keys
    in blue (sinks, the first ``n_sinks[label]`` positions, in orange), keys of the past that the
    mask hides in grey, the future blank. Returns the Figure."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    if not masks:
        raise ValueError("masks: expected at least one mask, got none")
    n_sinks = dict(n_sinks or {})
    plt = pyplot()
    fig, axes = plt.subplots(1, len(masks), figsize=(PAGE_WIDTH, 0.6 + PAGE_WIDTH / len(masks)))
    axes = np.atleast_1d(axes)
    # a future position, a past key the mask hides, a visible key of the window, a visible sink
    fills = {"future": EMPTY_COLOR, "hidden": LIGHT_GREY, "window": BLUE, "sink": DECODE_COLOR}
    cmap = ListedColormap([fills[k] for k in ("future", "hidden", "window", "sink")])
    for ax, (label, mask) in zip(axes, masks.items(), strict=True):
        mask_TS = np.asarray(mask, dtype=bool)
        if mask_TS.ndim != 2 or mask_TS.shape[0] != mask_TS.shape[1]:
            raise ValueError(f"masks[{label!r}]: expected a square 2-D mask, got shape {list(mask_TS.shape)}")
        n = mask_TS.shape[0]
        t_T1, s_1S = np.arange(n)[:, None], np.arange(n)[None, :]
        code_TS = np.where(s_1S <= t_T1, 1, 0)  # past: hidden unless the mask shows it
        code_TS = np.where(mask_TS, np.where(s_1S < n_sinks.get(label, 0), 3, 2), code_TS)
        ax.imshow(code_TS, cmap=cmap, vmin=0, vmax=3, aspect="equal")
        ax.set_xticks(np.arange(n) - 0.5, minor=True)
        ax.set_yticks(np.arange(n) - 0.5, minor=True)
        ax.grid(which="minor", color="white", linewidth=1)
        ax.tick_params(which="minor", length=0)
        ticks = list(range(0, n, max(1, n // 6)))
        ax.set_xticks(ticks)
        ax.set_yticks(ticks)
        ax.set_xlabel("key position s")
        ax.set_title(label, fontsize=10)
    axes[0].set_ylabel("query position t")
    kinds = [("window", "seen"), ("hidden", "hidden (evicted)"), ("future", "future")]
    if any(n_sinks.values()):
        kinds.insert(1, ("sink", "seen: sink"))
    handles = [Patch(facecolor=fills[k], edgecolor=GREY, label=text) for k, text in kinds]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def plot_bytes_vs_tokens(
    tokens_N: Sequence[int], bytes_by_label: Mapping[str, Sequence[int]], ax: Any = None
) -> Any:
    """Cache bytes (KiB) after each number of tokens, one line per cache; lines that coincide
    stay visible through their dash patterns. Returns the Axes."""
    ax = _axes(ax, (PAGE_WIDTH, 3.4))
    xs = np.asarray(tokens_N)
    for i, (label, series) in enumerate(bytes_by_label.items()):
        ys = np.asarray(series, dtype=float) / 1024
        if ys.shape != xs.shape:
            raise ValueError(f"bytes_by_label[{label!r}]: expected {len(xs)} values, got {ys.size}")
        ax.plot(
            xs,
            ys,
            color=SERIES_COLORS[i % len(SERIES_COLORS)],
            linestyle=DASHES[i % len(DASHES)] if i else "-",
            lw=2,
            label=label,
        )
    ax.set_xlabel("tokens in the sequence")
    ax.set_ylabel("cache bytes (KiB)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def plot_eviction_kl(kl_by_label: Mapping[str, Any], first_position: int = 0, ax: Any = None) -> Any:
    """KL(full || windowed) at each new token, one line per windowed cache (each series [N] or
    [B, N], averaged over B); the x axis counts positions from ``first_position``. Returns the Axes."""
    ax = _axes(ax, (PAGE_WIDTH, 3.2))
    for i, (label, kl) in enumerate(kl_by_label.items()):
        kl_N = np.atleast_2d(np.asarray(kl, dtype=float)).mean(axis=0)
        xs = first_position + np.arange(len(kl_N))
        ax.plot(xs, kl_N, color=SERIES_COLORS[i % len(SERIES_COLORS)], lw=1.2, alpha=0.85, label=label)
    ax.set_xlabel("position of the predicted token")
    ax.set_ylabel("KL(full || windowed), nats")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def plot_key_channels(max_abs_by_label: Mapping[str, Any], ax: Any = None) -> Any:
    """Bars of max |key| per channel, one group of bars per label (each [K]). Returns the Axes."""
    ax = _axes(ax, (PAGE_WIDTH, 3.0))
    n_series = len(max_abs_by_label)
    width = 0.8 / max(n_series, 1)
    for i, (label, values) in enumerate(max_abs_by_label.items()):
        v_K = np.asarray(values, dtype=float)
        xs = np.arange(len(v_K)) + (i - (n_series - 1) / 2) * width
        ax.bar(xs, v_K, width=width, color=SERIES_COLORS[i % len(SERIES_COLORS)], label=label)
    ax.set_xlabel("key channel")
    ax.set_ylabel("max |key|")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return ax
