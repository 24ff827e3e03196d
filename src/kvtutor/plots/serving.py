"""Figures of the serving chapters: decode throughput against batch size, request timelines,
latencies, and speculative decoding's measurements beside its theory.

Every function draws numbers handed to it (measured or counted by a notebook) and returns the
matplotlib ``Figure``; matplotlib is imported when a function runs (``style.pyplot``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..serving.loop import BatchSweepRow, LatencySummary, ServingTrace, latency_summary, step_durations
from ..serving.speculative import expected_speedup
from .style import DECODE_COLOR, POLICY_COLORS, PROMPT_COLOR, SERIES_COLORS, WAIT_COLOR, pyplot

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "plot_decode_throughput",
    "plot_batch_gain",
    "plot_schedules",
    "plot_latencies",
    "plot_tokens_per_step",
    "plot_speedups",
    "plot_speedup_vs_acceptance",
    "plot_distributions",
    "plot_ttft_tpot",
    "plot_latency_throughput",
    "plot_token_times",
]


def _vector(name: str, values: Any, n: int | None = None) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1 or len(arr) == 0 or (n is not None and len(arr) != n):
        want = "a non-empty 1-D array" if n is None else f"a 1-D array of {n} values"
        raise ValueError(f"{name}: expected {want}, got shape {list(arr.shape)}")
    return arr


def _traces(traces: Any) -> list[ServingTrace]:
    traces = list(traces)
    if not traces or not all(isinstance(t, ServingTrace) for t in traces):
        raise TypeError("traces: expected a non-empty list of ServingTrace (from run_serving)")
    return traces


def plot_decode_throughput(batch_B: Any, tokens_per_s_B: Any, title: str = "") -> Figure:
    """[N] batch sizes, [N] measured decode tokens/s -> Figure (log-log), beside B x (tokens/s at B=1).

    While a step is memory-bound its time hardly grows with B, so throughput follows the ideal
    line; once the stacked rows make it compute-bound, the curve bends away and flattens.
    """
    batch_B = _vector("batch_B", batch_B)
    rate_B = _vector("tokens_per_s_B", tokens_per_s_B, len(batch_B))
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 3.8))
    ideal = rate_B[0] / batch_B[0] * batch_B
    ax.plot(batch_B, ideal, ls="--", color="grey", label="ideal: B x (tokens/s of one row)")
    ax.plot(batch_B, rate_B, "o-", color=DECODE_COLOR, lw=2, label="measured decode step")
    return _batch_axes(fig, ax, batch_B, "tokens per second", title, y_base=10)


def _finish(fig: Figure, ax: Any, title: str) -> Figure:
    """What every one-axes figure here ends with: the legend, the title if one is given, the layout."""
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def _batch_axes(fig: Figure, ax: Any, batch_B: np.ndarray, ylabel: str, title: str, y_base: int) -> Figure:
    """The axes of a tokens/s-against-batch figure: log scales, one tick per batch size."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=y_base)
    ax.set_xticks(batch_B, [str(int(b)) for b in batch_B])
    ax.set_xlabel("batch size B (query rows stacked in one decode step)")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3, which="both")
    return _finish(fig, ax, title)


def plot_batch_gain(series: Mapping[str, tuple[Any, Any]], title: str = "") -> Figure:
    """{label: ([N] batch sizes, [N] decode tokens/s)} -> Figure (log-log): each machine's tokens/s
    as a multiple of its own at B = 1, beside the ideal B (a step that costs the same at any B)."""
    if not isinstance(series, Mapping) or not series:
        raise TypeError(f"series: expected a non-empty dict {{label: (batch_B, tokens_per_s_B)}}, got "
                        f"{type(series).__name__}")  # fmt: skip
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 3.8))
    largest = np.array([1.0])
    for j, (label, (batch, rate)) in enumerate(series.items()):
        batch_B = _vector(f"series[{label!r}] batch sizes", batch)
        rate_B = _vector(f"series[{label!r}] tokens/s", rate, len(batch_B))
        ax.plot(batch_B, rate_B / rate_B[0] * batch_B[0], "o-", lw=2,
                color=SERIES_COLORS[j % len(SERIES_COLORS)], label=str(label))  # fmt: skip
        largest = batch_B if batch_B.max() > largest.max() else largest
    ax.plot(largest, largest, ls="--", color="grey", label="ideal: B times the tokens/s of B = 1")
    return _batch_axes(fig, ax, largest, "tokens per second / tokens per second at B = 1", title, y_base=2)


def plot_schedules(traces: Sequence[ServingTrace]) -> Figure:
    """ServingTraces -> Figure, one timeline per trace: each request waiting (grey), then running.

    The x axis is the scheduler step; each request is a row, from its arrival to its last token.
    """
    traces = _traces(traces)
    plt = pyplot()
    n_req = max(len(t.requests) for t in traces)
    last = max((t.steps[-1].step for t in traces if t.steps), default=1)
    fig, axes = plt.subplots(
        len(traces), 1, figsize=(8.0, 0.16 * n_req * len(traces) + 1.2), sharex=True, squeeze=False
    )
    for ax, trace in zip(axes[:, 0], traces, strict=True):
        color = POLICY_COLORS.get(trace.policy, PROMPT_COLOR)
        for i, r in enumerate(trace.requests):
            if not r.tokens:
                continue
            ax.barh(i, r.admit_step - r.arrival_step, left=r.arrival_step, height=0.8, color=WAIT_COLOR)
            ax.barh(i, r.finish_step - r.admit_step + 1, left=r.admit_step, height=0.8, color=color)
        ax.set_ylim(len(trace.requests) - 0.4, -0.6)
        ax.set_ylabel("request")
        ax.set_title(
            f"{trace.policy} batching, {trace.max_batch_size} slots: {trace.n_steps} steps, "
            f"{trace.tokens_per_step:.2f} tokens per step",
            fontsize=9,
            loc="left",
        )
        ax.grid(alpha=0.3, axis="x")
    axes[-1, 0].set_xlim(0, last + 1)
    axes[-1, 0].set_xlabel("scheduler step (grey: waiting for a slot, colour: prefilled then decoding)")
    fig.tight_layout()
    return fig


def plot_latencies(traces: Sequence[ServingTrace]) -> Figure:
    """ServingTraces -> Figure: left, each request's latency in steps per policy; right, tokens per step."""
    traces = _traces(traces)
    plt = pyplot()
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(9.0, 3.6), gridspec_kw={"width_ratios": [3, 1]})
    width = 0.8 / len(traces)
    for j, trace in enumerate(traces):
        color = POLICY_COLORS.get(trace.policy, SERIES_COLORS[j % len(SERIES_COLORS)])
        lat = [r.latency_steps for r in trace.requests]
        ttft = [r.first_token_steps for r in trace.requests]
        x = np.arange(len(lat)) + (j - (len(traces) - 1) / 2) * width
        ax0.bar(x, lat, width=width, color=color, alpha=0.85, label=f"{trace.policy}: last token")
        ax0.scatter(
            x, ttft, marker="_", color="black", s=40, zorder=3, label="first token" if j == 0 else None
        )
        ax1.bar(j, trace.tokens_per_step, color=color)
        ax1.text(
            j, trace.tokens_per_step, f"{trace.tokens_per_step:.2f}", ha="center", va="bottom", fontsize=8
        )
    ax0.set_xlabel("request")
    ax0.set_ylabel("steps from arrival")
    ax0.legend(fontsize=8)
    ax0.grid(alpha=0.3, axis="y")
    ax1.set_xticks(range(len(traces)), [t.policy for t in traces])
    ax1.set_ylabel("tokens per step")
    ax1.set_ylim(0, max(t.tokens_per_step for t in traces) * 1.2)
    ax1.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    return fig


def _check_series(name: str, series: Any, n: int) -> dict[str, np.ndarray]:
    if not isinstance(series, Mapping) or not series:
        raise TypeError(f"{name}: expected a non-empty dict {{label: values}}, got {type(series).__name__}")
    return {str(k): _vector(f"{name}[{k!r}]", v, n) for k, v in series.items()}


def _measured_vs_theory(
    k_K: Any, measured: Any, theory: Any, ylabel: str, baseline: float | None, title: str
) -> Figure:
    k_K = _vector("k_K", k_K)
    measured = _check_series("measured", measured, len(k_K))
    theory = _check_series("theory", theory, len(k_K))
    if set(theory) - set(measured):
        raise ValueError(f"theory: expected labels among {sorted(measured)}, got {sorted(theory)}")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 3.8))
    for j, (label, values) in enumerate(measured.items()):
        color = SERIES_COLORS[j % len(SERIES_COLORS)]
        ax.plot(k_K, values, "o-", color=color, lw=2, label=f"{label}: measured")
        if label in theory:
            ax.plot(k_K, theory[label], ls="--", color=color, label=f"{label}: theory")
    if baseline is not None:
        ax.axhline(baseline, color="grey", lw=1, label="plain decoding")
    ax.set_xticks(k_K, [str(int(k)) for k in k_K])
    ax.set_xlabel("k, tokens guessed per round")
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    return _finish(fig, ax, title)


def plot_tokens_per_step(k_K: Any, measured: Any, theory: Any, title: str = "") -> Figure:
    """[K] values of k, {draft: [K] measured tokens per target pass}, {draft: [K] E(a, k)} -> Figure."""
    return _measured_vs_theory(k_K, measured, theory, "new tokens per target pass", 1.0, title)


def plot_speedups(k_K: Any, measured: Any, theory: Any, title: str = "") -> Figure:
    """[K] values of k, {draft: [K] measured speedup}, {draft: [K] E / (k c + 1)} -> Figure."""
    return _measured_vs_theory(k_K, measured, theory, "speedup over plain decoding", 1.0, title)


def plot_speedup_vs_acceptance(
    a_N: Any, measured_N: Any, k: int, c: float, v: float = 1.0, title: str = ""
) -> Figure:
    """[N] acceptance rates, [N] measured speed-ups, at one k with draft cost c and verification
    cost v (in target decode steps) -> Figure: the measured points on the curves E / (k c + 1)
    (Leviathan et al.) and E / (k c + v), over every acceptance rate, and the line of plain decoding.
    """
    a_N = _vector("a_N", a_N)
    measured_N = _vector("measured_N", measured_N, len(a_N))
    grid = np.linspace(0.0, 1.0, 101)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 3.8))
    ax.plot(grid, [expected_speedup(a, k, c) for a in grid], ls="--", color=SERIES_COLORS[0],
            label=f"E / (k c + 1), c = {c:.2f}")  # fmt: skip
    if v != 1.0:
        ax.plot(grid, [expected_speedup(a, k, c, v) for a in grid], ls=":", color=SERIES_COLORS[1],
                label=f"E / (k c + v), v = {v:.2f}")  # fmt: skip
    ax.plot(a_N, measured_N, "o", color="black", ms=7, label="measured")
    ax.axhline(1.0, color="grey", lw=1, label="plain decoding")
    ax.set_xlabel(f"acceptance rate a (k = {int(k)} guesses per round)")
    ax.set_ylabel("speed-up over plain decoding")
    ax.set_xlim(0, 1.02)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    return _finish(fig, ax, title)


def plot_distributions(p_V: Any, counts: Any, labels: Sequence[str] | None = None, title: str = "") -> Figure:
    """[V] target probabilities, {name: [V] sample counts} -> Figure: target beside sample frequencies."""
    p_V = _vector("p_V", p_V)
    counts = _check_series("counts", counts, len(p_V))
    if labels is not None and len(labels) != len(p_V):
        raise ValueError(f"labels: expected {len(p_V)} labels, got {len(labels)}")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 0.3 * len(p_V) + 2), 3.6))
    width = 0.8 / (1 + len(counts))
    x = np.arange(len(p_V))
    ax.bar(x - 0.4 + width / 2, p_V, width=width, color="black", alpha=0.7, label="target softmax")
    for j, (name, c) in enumerate(counts.items()):
        ax.bar(
            x - 0.4 + width * (j + 1.5), c / c.sum(), width=width, color=SERIES_COLORS[j % 5],
            label=f"{name} ({int(c.sum())} samples)",
        )  # fmt: skip
    ax.set_xticks(x, list(labels) if labels is not None else [str(i) for i in x], rotation=60, fontsize=8)
    ax.set_ylabel("probability / frequency")
    ax.grid(alpha=0.3, axis="y")
    return _finish(fig, ax, title)


_CLOCKS = {"seconds": ("_s", 1e3, "ms"), "steps": ("_steps", 1.0, "steps")}


def _clock(clock: Any) -> tuple[str, float, str]:
    if clock not in _CLOCKS:
        raise ValueError(f"clock: expected 'seconds' or 'steps', got {clock!r}")
    return _CLOCKS[clock]


def plot_ttft_tpot(run: Any, clock: str = "seconds", title: str = "") -> Figure:
    """LatencySummary (or ServingTrace) -> Figure: histograms of TTFT and TPOT over the requests,
    with their p50, p90 and p99 marked; ``clock`` "seconds" (shown in ms) or "steps".

    Requests without a token (and, for TPOT, with a single token) are left out, as in the percentiles.
    """
    if isinstance(run, ServingTrace):
        run = latency_summary(run)
    if not isinstance(run, LatencySummary):
        raise TypeError(f"run: expected a LatencySummary or a ServingTrace, got {type(run).__name__}")
    suffix, scale, unit = _clock(clock)
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.4))
    styles = {50: "-", 90: "--", 99: ":"}
    for ax, (name, label, color) in zip(
        axes,
        (
            ("ttft", "time to first token (TTFT)", PROMPT_COLOR),
            ("tpot", "time per output token (TPOT)", DECODE_COLOR),
        ),
        strict=True,
    ):
        metric = name + suffix
        v_N = run.values(metric) * scale
        if len(v_N):
            bins: Any = min(30, max(5, len(v_N) // 2))
            if clock == "steps" and np.all(v_N == np.round(v_N)) and np.ptp(v_N) <= 60:
                bins = np.arange(v_N.min() - 0.5, v_N.max() + 1.5)  # one bar per whole step
                ax.set_xlim(v_N.min() - 1.5, v_N.max() + 1.5)
                ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
            ax.hist(v_N, bins=bins, color=color, alpha=0.8, rwidth=0.9)
            for q, ls in styles.items():
                ax.axvline(run.percentile(metric, q) * scale, color="black", ls=ls, lw=1, label=f"p{q}")
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "no request defines it", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel(f"{label}, {unit}")
        ax.set_ylabel("requests")
        ax.grid(alpha=0.3, axis="y")
    fig.suptitle(
        title
        or f"{run.policy} batching, {run.max_batch_size} slots, {len(run.requests)} requests "
        f"({run.clock if clock == 'seconds' else 'counted'} {clock})",
        fontsize=10,
    )
    fig.tight_layout()
    return fig


def plot_latency_throughput(rows: Sequence[BatchSweepRow], clock: str = "seconds", title: str = "") -> Figure:
    """BatchSweepRows (from ``batch_size_sweep``) -> Figure: latency against throughput, one point per
    max_batch_size B; left p50 and p90 TPOT, right p50 TTFT; ``clock`` "seconds" (ms) or "steps".
    """
    rows = list(rows)
    if not rows or not all(isinstance(r, BatchSweepRow) for r in rows):
        raise TypeError("rows: expected a non-empty list of BatchSweepRow (from batch_size_sweep)")
    suffix, scale, unit = _clock(clock)
    rate = np.array([r.tokens_per_second if clock == "seconds" else r.tokens_per_step for r in rows])
    rate_label = "throughput, tokens per second" if clock == "seconds" else "throughput, tokens per step"
    plt = pyplot()
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(9.0, 3.6))
    tpot50 = np.array([getattr(r, f"tpot{suffix}_p50") for r in rows]) * scale
    tpot90 = np.array([getattr(r, f"tpot{suffix}_p90") for r in rows]) * scale
    ttft50 = np.array([getattr(r, f"ttft{suffix}_p50") for r in rows]) * scale
    ax0.plot(rate, tpot50, "o-", color=DECODE_COLOR, lw=2, label="p50")
    ax0.plot(rate, tpot90, "s--", color=DECODE_COLOR, alpha=0.6, label="p90")
    ax0.set_ylabel(f"TPOT, {unit} per token")
    ax1.plot(rate, ttft50, "o-", color=PROMPT_COLOR, lw=2, label="p50")
    ax1.set_ylabel(f"TTFT, {unit}")
    for ax, y in ((ax0, tpot50), (ax1, ttft50)):
        labels: dict[tuple[float, float], list[str]] = {}  # points that coincide share one label
        for x_i, y_i, r in zip(rate, y, rows, strict=True):
            if np.isfinite(x_i) and np.isfinite(y_i):
                labels.setdefault((float(x_i), float(y_i)), []).append(str(r.max_batch_size))
        right = np.nanmin(rate) + 0.7 * (np.nanmax(rate) - np.nanmin(rate))
        for (x_i, y_i), bs in labels.items():
            left = x_i > right  # labels of the rightmost points go to their left, inside the axes
            ax.annotate(
                f"B={', '.join(bs)}", (x_i, y_i), textcoords="offset points", xytext=(-4 if left else 4, 5),
                ha="right" if left else "left", fontsize=7,
            )  # fmt: skip
        ax.set_xlabel(rate_label)
        ax.margins(x=0.15, y=0.2)  # room for the B= labels
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_token_times(
    traces: Sequence[ServingTrace], labels: Sequence[str], step_seconds: Any = None, title: str = ""
) -> Figure:
    """ServingTraces of the same requests -> Figure, one timeline per trace: when each request's
    tokens came out (ticks), its prompt's steps (bars; several for a chunked prompt) and its wait
    (grey), on the clock of ``step_seconds`` (StepRecord -> seconds; None: measured), in ms.

    A stall shows as a stretch without ticks in the running requests' rows, the width of the steps
    that ran another request's prompt.
    """
    traces = _traces(traces)
    labels = [str(x) for x in labels]
    if len(labels) != len(traces):
        raise ValueError(f"labels: expected {len(traces)} labels, got {len(labels)}")
    plt = pyplot()
    n_req = max(len(t.requests) for t in traces)
    fig, axes = plt.subplots(
        len(traces), 1, figsize=(9.0, 0.22 * n_req * len(traces) + 1.4), sharex=True, squeeze=False
    )
    for ax, trace, label in zip(axes[:, 0], traces, labels, strict=True):
        end_S = np.cumsum(step_durations(trace, step_seconds)) * 1e3
        start_S = end_S - np.diff(np.concatenate([[0.0], end_S]))
        index = {s.step: i for i, s in enumerate(trace.steps)}
        for i, r in enumerate(trace.requests):
            if not r.tokens:
                continue
            first = int(np.searchsorted([s.step for s in trace.steps], r.arrival_step))
            chunk_at = [index[step] for step, _ in r.chunks]
            ax.barh(
                i, start_S[chunk_at[0]] - start_S[first], left=start_S[first], height=0.5, color=WAIT_COLOR
            )
            for j in chunk_at:
                ax.barh(i, end_S[j] - start_S[j], left=start_S[j], height=0.7, color=PROMPT_COLOR, alpha=0.5)
            at = end_S[index[r.admit_step] : index[r.finish_step] + 1]
            ax.plot(at, np.full(len(at), i), "|", color=DECODE_COLOR, ms=7, mew=1.2)
        ax.set_ylim(len(trace.requests) - 0.4, -0.6)
        ax.set_ylabel("request")
        ax.set_title(label, fontsize=9, loc="left")
        ax.grid(alpha=0.3, axis="x")
    axes[-1, 0].set_xlim(left=0)
    clock = "measured" if step_seconds is None else "modelled"
    axes[-1, 0].set_xlabel(f"time, ms ({clock}; bars: prompt steps, ticks: tokens, grey: waiting)")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
