"""Figures of the "Decode on a GPU" chapter: a recorded run's GPU time by kind of work, and the
anchor configurations' step times against the bandwidth floor (the numbers are read by
``kvtutor.measure.gpu_report``). matplotlib is imported when a function runs (``style.pyplot``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from .style import BLUE, DARK, GREY, KIND_COLORS, pyplot

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ..measure.gpu_report import Anchor

__all__ = ["plot_device_time", "plot_step_times"]


def plot_device_time(by_category: Mapping[str, float], title: str = "") -> Figure:
    """Device time per category (``KernelTable.device_time_by_category``) as shares of the total,
    one horizontal bar each, the matrix products highlighted."""
    total = sum(by_category.values())
    if not by_category or total <= 0:
        raise ValueError("by_category: expected positive device times per category")
    plt = pyplot()
    names = list(by_category)
    shares = [by_category[n] / total for n in names]
    fig, ax = plt.subplots(figsize=(6.4, 2.8))
    colors = [BLUE if n == "matrix products" else GREY for n in names]
    ax.barh(names, shares, color=colors)
    for y, share in enumerate(shares):
        ax.text(share + 0.01, y, f"{share:.0%}", va="center", fontsize=9)
    ax.invert_yaxis()
    ax.set_xlim(0, max(shares) * 1.18)
    ax.xaxis.set_major_formatter(_percent())
    ax.set_xlabel("share of the step's GPU time")
    ax.grid(True, axis="x", alpha=0.25)
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return fig


def _percent():
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda x, _: f"{x:.0%}")


_KIND_LABELS = {"products": "weight products alone", "kvtutor": "kvtutor", "transformers": "transformers"}


def _kind(label: str) -> str:
    first = label.split()[0]
    return first if first in KIND_COLORS else "kvtutor"


def plot_step_times(configs: Sequence[Anchor], title: str = "") -> Figure:
    """One horizontal bar per configuration (ms per token, log scale), each labelled with its
    multiple of the floor (weight bytes at copy bandwidth), drawn as a dashed line. All of one
    model."""
    if not configs:
        raise ValueError("configs: expected at least one Anchor")
    if len({a.model for a in configs}) != 1:
        raise ValueError("configs: expected the configurations of one model (one floor)")
    plt = pyplot()
    from matplotlib.patches import Patch
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    floor_ms = max(a.floor_s for a in configs) * 1e3
    ms = [a.s_per_token * 1e3 for a in configs]
    kinds = [_kind(a.label) for a in configs]
    fig, ax = plt.subplots(figsize=(6.4, 0.35 * len(configs) + 1.4))
    ax.barh([a.label for a in configs], ms, color=[KIND_COLORS[k] for k in kinds])
    for y, t in enumerate(ms):
        ax.text(t * 1.04, y, f"{t / floor_ms:.1f}x", va="center", fontsize=9)
    line = ax.axvline(floor_ms, color=DARK, linestyle="--", linewidth=1.2)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlim(floor_ms * 0.8, max(ms) * 1.5)
    ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("ms per token (log scale); label: multiple of the floor")
    ax.grid(True, axis="x", which="both", alpha=0.25)
    handles = [Patch(color=KIND_COLORS[k], label=_KIND_LABELS[k]) for k in KIND_COLORS if k in kinds]
    handles.append(line)
    line.set_label(f"floor: {floor_ms:.2f} ms")
    ax.legend(handles=handles, loc="upper right", fontsize=8)
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return fig
