"""Figures of the chapter on serving at scale: token timelines that show a prefill stalling the
decodes beside it, latency percentiles against the arrival rate for each deployment, and the
prefill:decode split.

Every function draws what ``kvtutor.serving.disagg`` computed (its ``SimResult`` or the rows of
``sweep_rates`` and ``sweep_split``) and returns the matplotlib ``Figure``; matplotlib is imported
when a function runs (``style.pyplot``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..serving.disagg import SimResult
from .style import DASHES, DECODE_COLOR, GREEN, PAGE_WIDTH, PROMPT_COLOR, PURPLE, RED, SERIES_COLORS, pyplot

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["row_label", "metric_label", "plot_token_times", "plot_rate_sweep", "plot_split_sweep"]

_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "end to end", "max_gap": "longest gap",
          "prefill": "prefill alone", "transfer": "KV transfer"}  # fmt: skip


def row_label(row: Mapping[str, Any]) -> str:
    """A summary row (or SimResult.summary()) -> its deployment as a figure or table names it:
    "colocated", "chunked", or "disagg. P:D" with its prefill and decode GPUs ("disagg. 1:3")."""
    if row.get("deployment") == "disaggregated":
        n_p = int(row["n_prefill"])
        return f"disagg. {n_p}:{int(row['n_gpus']) - n_p}"
    return str(row.get("deployment"))


def metric_label(metric: str) -> str:
    """A summary column -> its axis label: "ttft_p90_s" -> "TTFT p90", "max_gap_p99_s" -> "longest
    gap p99", "tpot_mean_s" -> "TPOT mean"."""
    name, _, stat = metric.removesuffix("_s").rpartition("_")
    if name not in _NAMES or not (stat == "mean" or stat[:1] == "p" and stat[1:].isdigit()):
        raise ValueError(f"metric: expected a summary column such as 'ttft_p90_s', got {metric!r}")
    return f"{_NAMES[name]} {stat}"


def _color(label: str) -> str:
    return {"colocated": RED, "chunked": PURPLE}.get(label, GREEN)


def _rows(rows: Any, metrics: Sequence[str]) -> list[Mapping[str, Any]]:
    rows = list(rows) if isinstance(rows, Sequence) and not isinstance(rows, str) else None
    if not rows or not all(isinstance(r, Mapping) for r in rows):
        raise TypeError("rows: expected a non-empty list of summary rows (from sweep_rates or sweep_split)")
    for metric in metrics:
        metric_label(metric)
        if not all(metric in r for r in rows):
            raise ValueError(f"metrics: {metric!r} is not a column of every row")
    return rows


def plot_token_times(
    results: Mapping[str, SimResult],
    highlight: Sequence[int] = (),
    start_s: float | None = None,
    end_s: float | None = None,
) -> Figure:
    """{title: SimResult} -> Figure, one panel per result: a tick at every token of every request
    (one row per request, in the order given), between start_s and end_s.

    The requests numbered in ``highlight`` are drawn in the prefill colour, with a bar from their
    arrival to their first token; the others in the decode colour. A prefill that stalls the other
    requests shows as a gap in their rows under the bar.
    """
    if not isinstance(results, Mapping) or not results:
        raise TypeError("results: expected a non-empty dict of {title: SimResult}")
    if not all(isinstance(r, SimResult) for r in results.values()):
        raise TypeError("results: expected SimResult values (from disagg.simulate)")
    n = min(len(r.requests) for r in results.values())
    if any(not isinstance(i, int) or not 0 <= i < n for i in highlight):
        raise ValueError(f"highlight: expected request numbers in [0, {n}), got {list(highlight)!r}")
    every = [t for r in results.values() for q in r.requests for t in (q.request.arrival_s, *q.token_times_s)]
    lo = min(every) if start_s is None else float(start_s)
    hi = max(every) if end_s is None else float(end_s)
    if not hi > lo:
        raise ValueError(f"end_s: expected a time after start_s {lo}, got {hi}")
    plt = pyplot()
    height = 0.8 + (0.4 + 0.2 * n) * len(results)
    fig, axes = plt.subplots(len(results), 1, figsize=(PAGE_WIDTH, height), sharex=True, squeeze=False)
    for ax, (title, result) in zip(axes[:, 0], results.items(), strict=True):
        for row, q in enumerate(result.requests):
            times_ms = np.array(q.token_times_s) * 1e3
            times_ms = times_ms[(times_ms >= lo * 1e3) & (times_ms <= hi * 1e3)]
            color = PROMPT_COLOR if row in highlight else DECODE_COLOR
            ax.vlines(times_ms, row - 0.3, row + 0.3, color=color, lw=0.8)
            if row in highlight:
                wait = (q.request.arrival_s * 1e3, q.ttft_s * 1e3)
                ax.broken_barh([wait], (row - 0.3, 0.6), color=PROMPT_COLOR, alpha=0.35)
        ax.set_xlim(lo * 1e3, hi * 1e3)
        ax.set_ylim(len(result.requests) - 0.5, -0.5)
        ax.set_yticks(range(len(result.requests)))
        ax.tick_params(axis="y", labelsize=6, length=0)
        ax.set_ylabel("request", fontsize=8)
        ax.set_title(title, fontsize=9, loc="left")
    axes[-1, 0].set_xlabel("time (ms): a tick per token; bar: from arrival to first token")
    fig.tight_layout()
    return fig


def plot_rate_sweep(
    rows: Sequence[Mapping[str, Any]],
    metrics: Sequence[str] = ("ttft_p90_s", "tpot_p90_s", "max_gap_p99_s"),
    title: str = "",
) -> Figure:
    """Rows of ``sweep_rates`` -> Figure, one panel per metric (in ms) against the arrival rate,
    one line per deployment; a panel whose values span more than 20 times is drawn on a log scale."""
    rows = _rows(rows, metrics)
    if not all("rate" in r for r in rows):
        raise ValueError("rows: expected a 'rate' in every row (from sweep_rates)")
    labels = list(dict.fromkeys(row_label(r) for r in rows))
    splits = [label for label in labels if label.startswith("disagg.")]
    plt = pyplot()
    fig, axes = plt.subplots(1, len(metrics), figsize=(PAGE_WIDTH, 2.9), squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=True):
        for label in labels:
            mine = sorted((r["rate"], r[metric] * 1e3) for r in rows if row_label(r) == label)
            x, y = np.array(mine).T
            k = splits.index(label) if label in splits else 0  # several splits: dashed lines
            ls = DASHES[(k - 1) % len(DASHES)] if k else "-"
            ax.plot(x, y, marker="o", ls=ls, ms=3, lw=1.5, color=_color(label), label=label)
        values = np.array([r[metric] for r in rows], dtype=float)
        values = values[np.isfinite(values) & (values > 0)]
        if len(values) and values.max() > 20 * values.min():
            ax.set_yscale("log")
        ax.set_title(metric_label(metric) + " (ms)", fontsize=9)
        ax.set_xlabel("requests per second", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3, which="both")
    axes[0, 0].legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_split_sweep(
    rows: Sequence[Mapping[str, Any]],
    panels: Sequence[Sequence[str]] = (("ttft_p50_s", "ttft_p99_s"), ("tpot_p90_s", "max_gap_p99_s")),
    title: str = "",
) -> Figure:
    """Rows of ``sweep_split`` -> Figure: one panel per group of metrics, a group of bars (in ms) per
    deployment; a panel whose values span more than 20 times is drawn on a log scale."""
    if isinstance(panels, str) or not panels or any(isinstance(p, str) or not p for p in panels):
        raise TypeError(f"panels: expected a list of lists of metrics, got {panels!r}")
    rows = _rows(rows, [m for panel in panels for m in panel])
    labels = [row_label(r) for r in rows]
    plt = pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(PAGE_WIDTH, 3.0), squeeze=False)
    x = np.arange(len(rows))
    for ax, panel in zip(axes[0], panels, strict=True):
        width = 0.8 / len(panel)
        for j, metric in enumerate(panel):
            y = np.array([r[metric] for r in rows], dtype=float) * 1e3
            ax.bar(x + (j - (len(panel) - 1) / 2) * width, y, width, color=SERIES_COLORS[j % 5],
                   label=metric_label(metric))  # fmt: skip
        values = np.array([r[m] for r in rows for m in panel], dtype=float)
        values = values[np.isfinite(values) & (values > 0)]
        if len(values) and values.max() > 20 * values.min():
            ax.set_yscale("log")
        ax.set_xticks(x, labels, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("ms", fontsize=8)
        ax.tick_params(axis="y", labelsize=8)
        ax.grid(alpha=0.3, axis="y", which="both")
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
