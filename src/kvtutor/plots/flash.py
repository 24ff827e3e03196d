"""Figures of the chapter "Attention that streams the cache": the online softmax's running max and
sum, block by block (from the trace of ``flash.online_softmax_attention``), and decode attention's
measured read bandwidth against the ceiling (the rows of ``flash.measure_decode_attention``).
matplotlib is imported when a function runs (``style.pyplot``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .style import BLUE, DARK, GREEN, GREY, LIGHT_GREY, ORANGE, PAGE_WIDTH, SERIES_COLORS, pyplot

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["plot_online_softmax", "plot_decode_attention", "DECODE_WAYS"]

#: The ways ``measure_decode_attention`` times, and their labels in the figure.
DECODE_WAYS = {"plain": "plain: scores, softmax, A V", "sdpa": "PyTorch SDPA", "split_kv": "split-KV twin"}


def plot_online_softmax(trace: Sequence[Mapping[str, Any]], head: int = 0, query: int = 0) -> Figure:
    """One query row of an online softmax, from the trace of ``online_softmax_attention`` (a dict
    per block: lo, hi, s_HTP, m_HT, l_HT). Left: the row's scores (dots; masked ones left out) and
    the running max m after each block. Right: the running sum l after each block, and the same
    sum measured against the final max, l exp(m - m_final), which only grows."""
    if not trace:
        raise ValueError("trace: expected the per-block dicts of online_softmax_attention, got none")
    n_heads, n_queries = np.shape(trace[0]["m_HT"])
    if not (0 <= head < n_heads and 0 <= query < n_queries):
        raise ValueError(
            f"head, query: expected a row of the [{n_heads}, {n_queries}] trace, got ({head}, {query})"
        )
    plt = pyplot()
    his = np.array([b["hi"] for b in trace])
    m_N = np.array([float(b["m_HT"][head, query]) for b in trace])
    l_N = np.array([float(b["l_HT"][head, query]) for b in trace])
    fig, (ax_m, ax_l) = plt.subplots(1, 2, figsize=(PAGE_WIDTH, 3.0))
    for b in trace:
        s_P = np.asarray(b["s_HTP"])[head, query]
        keys_P = np.arange(b["lo"], b["hi"])
        seen = np.isfinite(s_P)
        ax_m.plot(keys_P[seen], s_P[seen], "o", color=GREY, markersize=3)
        ax_m.axvline(b["lo"] - 0.5, color=LIGHT_GREY, linewidth=0.8, zorder=0)
    ax_m.plot([], [], "o", color=GREY, markersize=3, label="scores")
    los = np.array([b["lo"] for b in trace])
    ax_m.hlines(m_N, los - 0.5, his - 0.5, color=BLUE, linewidth=2, label="running max m")
    ax_m.set_xlabel("key")
    ax_m.set_ylabel("score")
    ax_m.set_title("scores, block by block")
    ax_m.legend(loc="lower right", fontsize=8)
    x_N = np.arange(1, len(trace) + 1)
    ax_l.plot(x_N, l_N, "o-", color=ORANGE, label="running sum l")
    ax_l.plot(x_N, l_N * np.exp(m_N - m_N[-1]), "s--", color=GREEN, label="l at the final max")
    for n in np.flatnonzero(np.diff(m_N) > 0) + 1:  # blocks that raised the max
        ax_l.axvline(x_N[n], color=BLUE, linewidth=0.8, linestyle=":", zorder=0)
    ax_l.set_xticks(x_N)
    ax_l.set_xlabel("blocks seen")
    ax_l.set_ylabel(r"sum of $e^{s - m}$")
    ax_l.set_title("running sum (dotted: max rose)")
    ax_l.legend(loc="upper left", fontsize=8)
    for ax in (ax_m, ax_l):
        ax.grid(True, axis="y", alpha=0.25)
    fig.tight_layout()
    return fig


def plot_decode_attention(rows: Sequence[Mapping[str, Any]], title: str = "") -> Figure:
    """The rows of ``measure_decode_attention``: for each way of DECODE_WAYS, the bytes of K and V
    per second as a share of the ceiling (the GEMV read bandwidth of the same run, the dashed line
    at 1), against the number of keys; each tick also gives the MiB of K and V."""
    if not rows:
        raise ValueError("rows: expected the rows of measure_decode_attention, got none")
    plt = pyplot()
    keys = [r["keys"] for r in rows]
    fig, ax = plt.subplots(figsize=(PAGE_WIDTH, 3.2))
    for (way, label), color in zip(DECODE_WAYS.items(), SERIES_COLORS, strict=False):
        ax.plot(keys, [r[way] for r in rows], "o-", color=color, label=label)
    ax.axhline(1.0, color=DARK, linestyle="--", linewidth=1.2, label="ceiling (GEMV read)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(keys, [f"{k:,}\n{r['kv_bytes'] / 2**20:.4g} MiB" for k, r in zip(keys, rows, strict=True)])
    ax.minorticks_off()
    # room above the ceiling for the legend, at the right (the long contexts stay below 1)
    ax.set_ylim(0, max(1.5, 1.1 * max(r[w] for r in rows for w in DECODE_WAYS)))
    ax.set_xlabel("keys in the cache (and bytes of K and V)")
    ax.set_ylabel("K, V bytes/s / ceiling")
    ax.grid(True, axis="y", alpha=0.25)
    ax.legend(fontsize=8, loc="upper right", ncol=2)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig
