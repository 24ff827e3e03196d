"""Figures of the performance chapters: rooflines, decode vs batch (and a few rows against one,
measured beside the roofline's ideal), cache vs recompute, preallocated vs concat.

Each function draws sections of a benchmark result (the dicts that ``kvtutor.bench.run_*`` return,
live or loaded from a recorded JSON) and returns the matplotlib ``Figure``; none measures anything.
matplotlib is imported when a function runs (``style.pyplot``), so ``import kvtutor`` never needs it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..measure.knee import fit_sweep
from .style import DECODE_COLOR, FIT_COLOR, PREDICTED_STYLE, PROMPT_COLOR, ROOF_COLOR, TAB_RED, pyplot

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "plot_roofline",
    "plot_prefill_times",
    "plot_decode_batch",
    "plot_batch_sweep",
    "plot_cache_vs_recompute",
    "plot_preallocated_vs_concat",
    "plot_append_times",
    "plot_decode_growth",
    "BENCH_FIGURES",
]


def _check_section(name: str, section: Any, key: str = "points") -> list[dict[str, Any]]:
    if not isinstance(section, dict) or key not in section:
        raise ValueError(f"{name}: expected a benchmark section with {key!r}, got {type(section).__name__}")
    return section[key]


def _log2_axis(ax: Any) -> None:
    """A base-2 log x axis labelled with plain numbers (64, 128, ...), not powers."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _log_y(ax: Any) -> None:
    """A log y axis with ticks at 1, 2, 5 x 10^k, labelled as plain numbers."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _timing_axes(ax: Any, xlabel: str, ylabel: str | None = None) -> None:
    """The axes every timing plot here uses: log2 x, log y, labels, a light grid."""
    _log2_axis(ax)
    _log_y(ax)
    ax.set_xlabel(xlabel)
    if ylabel is not None:
        ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.25)


def _fmt_flops(x: float) -> str:
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if x >= scale:
            return f"{x / scale:.3g} {unit}FLOP/s"
    return f"{x:.3g} FLOP/s"


def _fmt_bytes(x: float) -> str:
    for unit, scale in (("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6)):
        if x >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.3g} B/s"


def plot_roofline(
    ceilings: dict[str, Any],
    prefill: dict[str, Any] | None = None,
    decode: dict[str, Any] | None = None,
    title: str = "",
) -> Figure:
    """Measured prefill (one point per prompt length T) and decode (one per batch B) on the roofline
    min(peak, intensity x bandwidth) drawn from the ceilings measured in the same run."""
    peak, bw = float(ceilings["peak_flops"]), float(ceilings["bandwidth"])
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    series = []
    if prefill is not None:
        pts = _check_section("prefill", prefill)
        series.append(("prefill, T =", "n_tokens", pts, PROMPT_COLOR, "o"))
    if decode is not None:
        pts = _check_section("decode", decode)
        series.append(("decode, B =", "batch_size", pts, DECODE_COLOR, "s"))
    intensities = [p["intensity"] for _, _, pts, _, _ in series for p in pts] or [1.0]
    ridge = peak / bw
    lo = min(min(intensities), ridge) / 4
    hi = max(max(intensities), ridge) * 4
    x = np.geomspace(lo, hi, 200)
    ax.plot(x, np.minimum(peak, x * bw), color=ROOF_COLOR, linewidth=2,
            label=f"roofline: {_fmt_bytes(bw)}, {_fmt_flops(peak)}")  # fmt: skip
    ax.axvline(ridge, color=ROOF_COLOR, linestyle=":", linewidth=1)
    # at the foot of the ridge line, where no measured point sits
    ax.text(ridge, 0.03, f" ridge {ridge:.3g} FLOP/B", transform=ax.get_xaxis_transform(), fontsize=8)
    for label, key, pts, color, marker in series:
        xs = [p["intensity"] for p in pts]
        ys = [p["flops_per_s"] for p in pts]
        ax.plot(xs, ys, marker=marker, color=color, linestyle="-", linewidth=0.8,
                label=f"{label.split(',')[0]} (measured)")  # fmt: skip
        # prefill labels above-left of their points, decode labels below-right: at small sizes a
        # prompt of T tokens and a batch of B = T sit at nearly the same intensity
        above = key == "n_tokens"
        for p, xv, yv in zip(pts, xs, ys, strict=True):
            offset, ha = ((-3, 5), "right") if above else ((3, -10), "left")
            ax.annotate(str(p[key]), (xv, yv), textcoords="offset points", xytext=offset, ha=ha, fontsize=7,
                        color=color)  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs per byte, cost model)")
    ax.set_ylabel("FLOP/s")
    ax.set_title(title or "Prefill and decode on the roofline")
    ax.legend(fontsize=8, loc="upper left")  # above the roof, where no point can be
    ax.grid(True, which="both", alpha=0.25)
    fig.tight_layout()
    return fig


def plot_prefill_times(prefill: dict[str, Any], title: str = "") -> Figure:
    """Prefill time vs prompt length T, measured, with the roofline prediction where present."""
    pts = _check_section("prefill", prefill)
    plt = pyplot()
    fig, ax = plt.subplots()
    t = [p["n_tokens"] for p in pts]
    ax.plot(t, [p["time"]["median_s"] * 1e3 for p in pts], "o-", color=PROMPT_COLOR, label="measured")
    if all("predicted_time_s" in p for p in pts):
        ax.plot(t, [p["predicted_time_s"] * 1e3 for p in pts], color=PROMPT_COLOR, label="roofline",
                **PREDICTED_STYLE)  # fmt: skip
    _timing_axes(ax, "prompt length T", "prefill time (ms)")
    ax.set_title(title or "Prefill time against prompt length T")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_decode_batch(decode: dict[str, Any], title: str = "") -> Figure:
    """Decode step time and tokens/s vs batch size, with the roofline's prediction, the two-arm fit
    of ``kvtutor.measure.knee`` and, where the sweep resolves one, the measured knee."""
    pts = _check_section("decode", decode)
    plt = pyplot()
    fig, (ax_t, ax_r) = plt.subplots(1, 2, figsize=(9.6, 3.6))
    b = [p["batch_size"] for p in pts]
    ax_t.plot(b, [p["time"]["median_s"] * 1e3 for p in pts], "s-", color=DECODE_COLOR, label="measured")
    ax_r.plot(b, [p["batch_size"] / p["time"]["median_s"] for p in pts], "s-", color=DECODE_COLOR,
              label="measured")  # fmt: skip
    if all("predicted_time_s" in p for p in pts):
        ax_t.plot(b, [p["predicted_time_s"] * 1e3 for p in pts], color=DECODE_COLOR, label="roofline",
                  **PREDICTED_STYLE)  # fmt: skip
        ax_r.plot(b, [p["batch_size"] / p["predicted_time_s"] for p in pts], color=DECODE_COLOR,
                  label="roofline", **PREDICTED_STYLE)  # fmt: skip
    fit = fit_sweep(decode) if len(pts) >= 3 else None
    if fit is not None:
        ax_t.plot(b, [fit.time(x) * 1e3 for x in b], color=FIT_COLOR, linestyle=":", linewidth=1.2,
                  label=f"two arms fitted (rms error {fit.rms_rel_error:.0%})")  # fmt: skip
    for ax in (ax_t, ax_r):
        if fit is not None and fit.resolved:
            ax.axvline(fit.knee, color=FIT_COLOR, linewidth=1, label=f"measured knee B = {fit.knee:.3g}")
        pred = decode.get("predicted_ridge_batch")
        if pred:
            ax.axvline(pred, color=FIT_COLOR, linestyle="--", linewidth=1, label=f"predicted B = {pred:.3g}")
        _timing_axes(ax, "batch size B")
    ax_t.set_ylabel("time per decode step (ms)")
    ax_r.set_ylabel("tokens/s")
    ax_t.legend(fontsize=7)
    fig.suptitle(
        title or f"Decode at context {decode.get('context_len')}: step time and tokens/s", fontsize=11
    )
    fig.tight_layout()
    return fig


def plot_batch_sweep(sweep: dict[str, Any], title: str = "") -> Figure:
    """A decode step's time at batch size B over its time at B = 1, measured (solid, one line per
    dtype of the ``batches`` section: ``bench.run_batch_sweep``) beside the roofline's ideal
    (dashed): about 1 while the step streams its weights, growing once it computes. The dotted
    line marks 1.3, the goal up to B = 16."""
    by_dtype = _check_section("sweep", sweep, "by_dtype")
    if not isinstance(by_dtype, dict) or not by_dtype:
        raise ValueError("sweep: expected a batch sweep with at least one dtype in 'by_dtype'")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    colors = {"float32": DECODE_COLOR, "bfloat16": PROMPT_COLOR, "float16": FIT_COLOR}
    top = 1.5
    for dtype, entry in sorted(by_dtype.items(), reverse=True):  # float32 first
        color = colors.get(dtype, ROOF_COLOR)
        pts = _check_section(f"sweep['by_dtype'][{dtype!r}]", entry)
        b = [p["batch_size"] for p in pts]
        top = max(top, *(1.1 * p[k] for p in pts for k in ("ratio_to_b1", "predicted_ratio_to_b1")))
        ax.plot(b, [p["ratio_to_b1"] for p in pts], "s-", color=color, label=f"{dtype}, measured")
        ax.plot(b, [p["predicted_ratio_to_b1"] for p in pts], color=color, label=f"{dtype}, roofline",
                **PREDICTED_STYLE)  # fmt: skip
    ax.axhline(1.3, color=ROOF_COLOR, linestyle=":", linewidth=1, label="1.3 x one row")
    _log2_axis(ax)
    ax.set_xlabel("batch size B")
    ax.set_ylabel("step time / step time at B = 1")
    ax.set_ylim(0, top)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8)
    ax.set_title(title or f"Decode at context {sweep.get('context_len')}: B rows against one")
    fig.tight_layout()
    return fig


def plot_cache_vs_recompute(recompute: dict[str, Any], title: str = "") -> Figure:
    """Tokens/s with and without the cache vs sequence length, measured and (dashed) predicted."""
    pts = _check_section("recompute", recompute)
    plt = pyplot()
    fig, ax = plt.subplots()
    n = [p["seq_len"] for p in pts]
    lines = (
        ("cached", DECODE_COLOR, "s", "with the cache"),
        ("uncached", PROMPT_COLOR, "o", "recompute, no cache"),
        ("cached_graph", FIT_COLOR, "^", "with the cache, CUDA graph"),
    )
    for key, color, marker, label in lines:
        if not all(key in p for p in pts):
            continue
        ax.plot(
            n, [p[key]["tokens_per_s"] for p in pts], marker=marker, color=color, label=f"{label} (measured)"
        )
        if all("predicted_tokens_per_s" in p[key] for p in pts):
            ax.plot(n, [p[key]["predicted_tokens_per_s"] for p in pts], color=color,
                    label=f"{label} (roofline)", **PREDICTED_STYLE)  # fmt: skip
    _timing_axes(ax, "sequence length n", "tokens/s (one new token)")
    ax.set_title(title or "One more token: cached decode vs recompute")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_preallocated_vs_concat(concat: dict[str, Any], title: str = "") -> Figure:
    """Left: generate time with the preallocated and the concat cache vs tokens generated. Right: the K/V
    bytes each moves (cost model): in-place writes grow linearly, concat's copies quadratically."""
    pts = _check_section("concat", concat)
    plt = pyplot()
    fig, (ax_t, ax_b) = plt.subplots(1, 2, figsize=(9.6, 3.6))
    n = [p["n_new"] for p in pts]
    ax_t.plot(
        n,
        [p["preallocated"]["time"]["median_s"] for p in pts],
        "s-",
        color=PROMPT_COLOR,
        label="preallocated (in place)",
    )
    ax_t.plot(n, [p["concat"]["time"]["median_s"] for p in pts], "o-", color=DECODE_COLOR, label="concat")
    ax_t.set_xlabel("tokens generated")
    ax_t.set_ylabel("generate time (s), measured")
    ax_t.legend(fontsize=8)
    ax_b.plot(n, [p["preallocated_write_bytes"] / 2**20 for p in pts], "s-", color=PROMPT_COLOR,
              label="written in place")  # fmt: skip
    ax_b.plot(n, [p["concat_copy_bytes"] / 2**20 for p in pts], "o-", color=DECODE_COLOR,
              label="copied by concat")  # fmt: skip
    ax_b.set_xlabel("tokens generated")
    ax_b.set_ylabel("K/V bytes moved (MiB), cost model")
    ax_b.legend(fontsize=8)
    for ax in (ax_t, ax_b):
        ax.grid(True, alpha=0.25)
    fig.suptitle(title or "Preallocated vs concat cache", fontsize=11)
    fig.tight_layout()
    return fig


def plot_append_times(append: dict[str, Any], title: str = "") -> Figure:
    """Time of one append of one token's keys vs tokens already cached: concat and in place."""
    pts = _check_section("append", append)
    plt = pyplot()
    fig, ax = plt.subplots()
    s = [p["cached"] for p in pts]
    ax.plot(s, [p["concat"]["time"]["median_s"] * 1e6 for p in pts], "o-", color=DECODE_COLOR,
            label="torch.cat (copies the history)")  # fmt: skip
    ax.plot(s, [p["in_place"]["time"]["median_s"] * 1e6 for p in pts], "s-", color=PROMPT_COLOR,
            label="write in place (one row)")  # fmt: skip
    _timing_axes(ax, "tokens already cached S", "time per append (µs), measured")
    ax.set_title(title or "Appending one token's keys to one layer")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_decode_growth(sweeps: dict[str, dict[str, Any]], title: str = "") -> Figure:
    """Decode step time relative to the smallest batch, vs batch size, one line per sweep (label ->
    decode section): how much a bigger batch costs on each machine. The dotted line is time
    proportional to B (every sequence paying full price)."""
    if not sweeps:
        raise ValueError("sweeps: expected at least one decode sweep")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    colors = (DECODE_COLOR, PROMPT_COLOR, FIT_COLOR, TAB_RED)
    b_all: list[int] = []
    for (label, decode), color in zip(sweeps.items(), colors * len(sweeps), strict=False):
        pts = _check_section(label, decode)
        b = [p["batch_size"] for p in pts]
        t0 = pts[0]["time"]["median_s"]
        ax.plot(b, [p["time"]["median_s"] / t0 for p in pts], "s-", color=color, label=label)
        b_all += b
    lo, hi = min(b_all), max(b_all)
    ax.plot(
        [lo, hi], [1, hi / lo], color=ROOF_COLOR, linestyle=":", linewidth=1, label="time proportional to B"
    )
    _timing_axes(ax, "batch size B", "step time / time at the smallest B")
    ax.set_title(title or "What a bigger decode batch costs")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _roofline_of(result: dict[str, Any]) -> Figure | None:
    if "prefill_sweep" not in result and "decode_sweep" not in result:
        return None
    return plot_roofline(result["ceilings"], result.get("prefill_sweep"), result.get("decode_sweep"))


def _section(key: str, fn: Callable[[dict[str, Any]], Figure]) -> Callable[[dict[str, Any]], Figure | None]:
    return lambda result: fn(result[key]) if key in result else None


#: The figures ``python -m kvtutor bench --plots DIR`` writes: file name -> function of the result.
BENCH_FIGURES: dict[str, Callable[[dict[str, Any]], Figure | None]] = {
    "roofline": _roofline_of,
    "prefill_times": _section("prefill_sweep", plot_prefill_times),
    "decode_batch": _section("decode_sweep", plot_decode_batch),
    "batch_sweep": _section("batch_sweep", plot_batch_sweep),
    "cache_vs_recompute": _section("cache_vs_recompute", plot_cache_vs_recompute),
    "preallocated_vs_concat": _section("preallocated_vs_concat", plot_preallocated_vs_concat),
}
