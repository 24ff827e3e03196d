"""Figures for the book: attention heatmaps, the cache as a grid, matrix shapes to scale, information flow.

Every function draws real arrays or shapes handed to it by a notebook and returns the matplotlib
``Figure``; nothing here computes model quantities. matplotlib is imported
when a function runs (``style.pyplot``), so ``import kvtutor`` never needs it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .style import (
    COMPUTED_COLOR,
    DARK,
    DECODE_COLOR,
    EMPTY_COLOR,
    GREEN,
    NEW_EDGE,
    PAGE_WIDTH,
    PROMPT_COLOR,
    RESULT_COLOR,
    WEIGHT_COLOR,
    pyplot,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "Product",
    "plot_matrix",
    "plot_attention",
    "plot_token_probs",
    "plot_cache_buffer",
    "plot_cache_growth",
    "plot_matmul_shapes",
    "plot_information_flow",
]


def _check_2d(name: str, arr: Any) -> np.ndarray:
    arr = np.asarray(arr)
    if arr.ndim != 2:
        raise ValueError(f"{name}: expected a 2-D array, got shape {list(arr.shape)}")
    return arr


def _check_labels(name: str, labels: Sequence[str] | None, n: int) -> list[str]:
    if labels is None:
        return [str(i) for i in range(n)]
    labels = [str(s) for s in labels]
    if len(labels) != n:
        raise ValueError(f"{name}: expected {n} labels, got {len(labels)}")
    return labels


def _heatmap(
    ax: Axes,
    m_RC: np.ndarray,
    row_labels: list[str],
    col_labels: list[str],
    title: str,
    fmt: str = "{:.2f}",
    cmap: str = "viridis",
) -> None:
    """Draw m_RC with its values written in the cells; -inf cells grey with a minus-infinity sign."""
    finite = np.isfinite(m_RC)
    shown = np.where(finite, m_RC, np.nan).astype(float)
    lo, hi = (float(np.nanmin(shown)), float(np.nanmax(shown))) if finite.any() else (0.0, 1.0)
    if lo == hi:
        lo, hi = lo - 1.0, hi + 1.0
    ax.imshow(np.ma.masked_invalid(shown), cmap=cmap, vmin=lo, vmax=hi, aspect="equal")
    ax.set_facecolor("#bbbbbb")
    for (r, c), value in np.ndenumerate(m_RC):
        if not np.isfinite(value):
            ax.text(c, r, r"$-\infty$", ha="center", va="center", color="black", fontsize=10)
            continue
        dark = (value - lo) / (hi - lo) < 0.6
        ax.text(
            c,
            r,
            fmt.format(float(value)),
            ha="center",
            va="center",
            fontsize=9,
            color="white" if dark else "black",
        )
    ax.set_xticks(range(len(col_labels)), col_labels)
    ax.set_yticks(range(len(row_labels)), row_labels)
    ax.tick_params(length=0)
    ax.set_title(title, fontsize=10)


def _mask_map(
    ax: Axes, mask_RC: np.ndarray, row_labels: list[str], col_labels: list[str], title: str
) -> None:
    """Draw a boolean mask: 0 (light) where a query may look, minus infinity (dark) where it may not."""
    from matplotlib.colors import ListedColormap

    ax.imshow(
        mask_RC.astype(float), cmap=ListedColormap(["#444444", "#e5f5e0"]), vmin=0, vmax=1, aspect="equal"
    )
    for (r, c), allowed in np.ndenumerate(mask_RC):
        text, color = ("0", "black") if allowed else (r"$-\infty$", "white")
        ax.text(c, r, text, ha="center", va="center", fontsize=10, color=color)
    ax.set_xticks(range(len(col_labels)), col_labels)
    ax.set_yticks(range(len(row_labels)), row_labels)
    ax.tick_params(length=0)
    ax.set_title(title, fontsize=10)


def plot_matrix(
    m_RC: Any,
    row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None,
    title: str = "",
    fmt: str = "{:.2f}",
) -> Figure:
    """[R,C] -> Figure: one heatmap with the values written in the cells."""
    m_RC = _check_2d("m_RC", m_RC)
    rows = _check_labels("row_labels", row_labels, m_RC.shape[0])
    cols = _check_labels("col_labels", col_labels, m_RC.shape[1])
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(0.7 * m_RC.shape[1] + 1.5, 0.5 * m_RC.shape[0] + 1.0))
    _heatmap(ax, m_RC, rows, cols, title, fmt)
    fig.tight_layout()
    return fig


def plot_attention(
    scores_TS: Any,
    a_TS: Any,
    query_labels: Sequence[str],
    key_labels: Sequence[str],
    mask_TS: Any | None = None,
    title: str | None = None,
) -> Figure:
    """[T,S] scores, [T,S] weights, optional [T,S] bool mask -> Figure with 3 panels (2 without mask).

    Panels: the raw scores Q K^T, the causal mask (if any), the weights
    A = softmax(masked scores / sqrt(d_h)). At most ``PAGE_WIDTH`` wide, so the labels are shown at
    their own size.
    """
    scores_TS = _check_2d("scores_TS", scores_TS)
    a_TS = _check_2d("a_TS", a_TS)
    if a_TS.shape != scores_TS.shape:
        raise ValueError(
            f"a_TS: expected the shape of scores_TS {list(scores_TS.shape)}, got {list(a_TS.shape)}"
        )
    rows = _check_labels("query_labels", query_labels, scores_TS.shape[0])
    cols = _check_labels("key_labels", key_labels, scores_TS.shape[1])
    panels: list[tuple[np.ndarray, str, str, str]] = [(scores_TS, r"scores $QK^\top$", "{:.2f}", "viridis")]
    if mask_TS is not None:
        mask_TS = _check_2d("mask_TS", mask_TS).astype(bool)
        if mask_TS.shape != scores_TS.shape:
            raise ValueError(
                f"mask_TS: expected the shape of scores_TS {list(scores_TS.shape)}, got {list(mask_TS.shape)}"
            )
        panels.append((mask_TS, "causal mask (added)", "", "mask"))
    panels.append((a_TS, r"weights $A$ (rows sum to 1)", "{:.2f}", "magma"))
    plt = pyplot()
    n_t, n_s = scores_TS.shape
    # cells of at most 0.6 in, and the whole figure no wider than the page
    cell = min(0.6, (PAGE_WIDTH - 0.4 - 1.0 * len(panels)) / (len(panels) * n_s))
    fig, axes = plt.subplots(
        1, len(panels), figsize=(len(panels) * (cell * n_s + 1.0) + 0.4, cell * n_t + 1.6), squeeze=False
    )
    for ax, (m, name, fmt, cmap) in zip(axes[0], panels, strict=True):
        if cmap == "mask":
            _mask_map(ax, m, rows, cols, name)
        else:
            _heatmap(ax, m, rows, cols, name, fmt, cmap)
        ax.set_xlabel("key", fontsize=10)
    axes[0][0].set_ylabel("query", fontsize=10)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def plot_token_probs(
    probs_V: Any, vocab: Sequence[str], top_k: int = 8, title: str = "", log: bool = False
) -> Figure:
    """[V] probabilities, V token strings -> Figure: bar chart of the top_k most likely next tokens.

    ``log=True`` puts the probabilities on a log axis, so that the runners-up of a confident model show.
    """
    probs_V = np.asarray(probs_V, dtype=float)
    if probs_V.ndim != 1:
        raise ValueError(f"probs_V: expected a 1-D array, got shape {list(probs_V.shape)}")
    vocab = _check_labels("vocab", vocab, len(probs_V))
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= len(probs_V):
        raise ValueError(f"top_k: expected an int in 1..{len(probs_V)}, got {top_k!r}")
    order = np.argsort(-probs_V, kind="stable")[:top_k]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 0.32 * top_k + 1.0))
    ys = np.arange(top_k)[::-1]
    colors = [DECODE_COLOR if i == 0 else PROMPT_COLOR for i in range(top_k)]
    ax.barh(ys, probs_V[order], color=colors)
    ax.set_yticks(ys, [repr(vocab[i]) for i in order])
    for y, p in zip(ys, probs_V[order], strict=True):
        ax.text(
            float(p) * (1.3 if log else 1.0) + (0 if log else 0.01),
            y,
            f"{float(p):.1e}" if log else f"{float(p):.3f}",
            va="center",
            fontsize=8,
        )
    if log:
        ax.set_xscale("log")
        ax.set_xlim(max(float(probs_V[order].min()), 1e-300) / 3, 8.0)
    else:
        ax.set_xlim(0, 1.12)
    ax.set_xlabel("probability")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_cache_buffer(
    buf_HMK: Any, length: int, tokens: Sequence[str], new: Sequence[int] = (), title: str = ""
) -> Figure:
    """[H,M,K] buffer of one layer, filled length, token per filled position -> Figure, one panel per head.

    Columns are the M positions of the preallocated buffer; the first ``length`` are filled (values
    written in), the rest are reserved but empty. Positions in ``new`` are outlined: this step wrote them.
    """
    buf_HMK = np.asarray(buf_HMK)
    if buf_HMK.ndim != 3:
        raise ValueError(f"buf_HMK: expected a 3-D array [H, M, K], got shape {list(buf_HMK.shape)}")
    n_heads, capacity, d_head = buf_HMK.shape
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or not 0 <= length <= capacity:
        raise ValueError(f"length: expected an int in 0..{capacity}, got {length!r}")
    tokens = _check_labels("tokens", tokens, int(length))
    if any(not 0 <= p < length for p in new):
        raise ValueError(f"new: expected filled positions in 0..{length - 1}, got {list(new)}")
    plt = pyplot()
    fig, axes = plt.subplots(
        n_heads, 1, figsize=(0.42 * capacity + 1.4, 1.1 * n_heads * d_head / 4 + 0.9), squeeze=False
    )
    filled = buf_HMK[:, :length]
    lim = float(np.abs(filled).max()) if filled.size else 1.0
    for h, ax in enumerate(axes[:, 0]):
        shown = np.full((d_head, capacity), np.nan)
        shown[:, :length] = buf_HMK[h, :length].T  # (K, M): one column per position
        ax.imshow(np.ma.masked_invalid(shown), cmap="coolwarm", vmin=-lim, vmax=lim, aspect="auto")
        ax.set_facecolor(EMPTY_COLOR)
        for p in range(length):
            for k in range(d_head):
                ax.text(p, k, f"{float(buf_HMK[h, p, k]):.2f}", ha="center", va="center", fontsize=6.5)
        if length < capacity:
            ax.text(
                (length + capacity - 1) / 2,
                (d_head - 1) / 2,
                f"reserved, not yet written ({capacity - length} positions)",
                ha="center",
                va="center",
                fontsize=9,
                color="#777777",
            )
        for p in new:
            outline = ax.add_patch(_rect(p - 0.5, -0.5, 1, d_head, edge=NEW_EDGE, lw=3.0))
            outline.set_clip_on(False)
        ax.set_xticks(np.arange(capacity + 1) - 0.5, minor=True)
        ax.grid(which="minor", axis="x", color="white", lw=1.5)
        ax.tick_params(which="minor", length=0)
        labels = [f"{p}\n{tokens[p]}" if p < length else str(p) for p in range(capacity)]
        ax.set_xticks(range(capacity), labels, fontsize=8)
        ax.set_yticks(range(d_head), [f"k{i}" for i in range(d_head)], fontsize=8)
        ax.set_ylabel(f"head {h}", fontsize=9)
    axes[0, 0].set_title(
        title or f"key buffer [H={n_heads}, M={capacity}, $d_h$={d_head}], length {length}", fontsize=10
    )
    axes[-1, 0].set_xlabel("position in the buffer (token written there)", fontsize=9)
    fig.tight_layout()
    return fig


def _rect(
    x: float,
    y: float,
    w: float,
    h: float,
    face: str = "none",
    edge: str = "black",
    lw: float = 1.0,
    hatch: str | None = None,
):
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), w, h, facecolor=face, edgecolor=edge, linewidth=lw, hatch=hatch)


def plot_cache_growth(
    lengths_LN: Sequence[Sequence[int]],
    step_labels: Sequence[str],
    tokens: Sequence[str],
    capacity: int,
    n_prompt: int,
) -> Figure:
    """lengths [L][N] (cache length of each layer after each of N steps) -> Figure, one panel per layer.

    Each panel has one row per step and one column per cache position: blue cells were written by
    prefill, orange ones by decode steps, outlined cells by this step; grey cells are still empty.
    """
    lengths = [[int(n) for n in row] for row in lengths_LN]
    if not lengths or any(len(row) != len(step_labels) for row in lengths):
        raise ValueError(
            f"lengths_LN: expected one row of {len(step_labels)} lengths per layer, got {lengths_LN!r}"
        )
    top = max(max(row) for row in lengths)
    if top > capacity:
        raise ValueError(f"capacity: expected at least the longest cache length {top}, got {capacity}")
    if len(tokens) < top:
        raise ValueError(f"tokens: expected a label for each of {top} positions, got {len(tokens)}")
    plt = pyplot()
    n_steps = len(step_labels)
    fig, axes = plt.subplots(
        len(lengths), 1, figsize=(0.45 * capacity + 2.0, (0.36 * n_steps + 0.6) * len(lengths)), squeeze=False
    )
    for layer, (ax, row) in enumerate(zip(axes[:, 0], lengths, strict=True)):
        previous = 0
        for s, n in enumerate(row):
            y = n_steps - 1 - s
            for p in range(capacity):
                if p >= n:
                    ax.add_patch(_rect(p, y, 1, 1, face=EMPTY_COLOR, edge="white", lw=1.5))
                    continue
                face = PROMPT_COLOR if p < n_prompt else DECODE_COLOR
                fresh = p >= previous
                ax.add_patch(
                    _rect(
                        p, y, 1, 1, face=face, edge=NEW_EDGE if fresh else "white", lw=2.2 if fresh else 1.5
                    )
                )
                ax.text(p + 0.5, y + 0.5, tokens[p], ha="center", va="center", fontsize=7, color="white")
            ax.text(capacity + 0.2, y + 0.5, f"len {n}", va="center", fontsize=8)
            previous = n
        ax.set_xlim(0, capacity + 1.6)
        ax.set_ylim(0, n_steps)
        ax.set_yticks(np.arange(n_steps) + 0.5, list(step_labels)[::-1], fontsize=8)
        ax.set_xticks(np.arange(capacity) + 0.5, [str(p) for p in range(capacity)], fontsize=7)
        ax.tick_params(length=0)
        for side in ("top", "right", "left", "bottom"):
            ax.spines[side].set_visible(False)
        ax.set_title(
            f"layer {layer}: its own K cache (the V cache grows the same way)", fontsize=9, loc="left"
        )
    axes[-1, 0].set_xlabel("cache position", fontsize=9)
    fig.tight_layout()
    return fig


class Product(NamedTuple):
    """One product A @ B = C to draw; ``b_cached_rows``/``b_cached_cols`` of B came from the KV cache,
    and ``b_is_weight`` says that B is a weight matrix (read from memory, not computed)."""

    label: str
    a_shape: tuple[int, int]
    b_shape: tuple[int, int]
    b_cached_rows: int = 0
    b_cached_cols: int = 0
    names: tuple[str, str, str] = ("A", "B", "C")
    b_is_weight: bool = False


def _draw_matrix(
    ax: Axes,
    x: float,
    shape: tuple[int, int],
    face: str,
    name: str,
    cached_rows: int = 0,
    cached_cols: int = 0,
) -> float:
    """Draw an [R, C] matrix of unit cells with its top-left corner at (x, 0); return its right edge."""
    n_rows, n_cols = shape
    for r in range(n_rows):
        for c in range(n_cols):
            cached = r < cached_rows or c < cached_cols
            ax.add_patch(
                _rect(x + c, -r - 1, 1, 1, face=PROMPT_COLOR if cached else face, edge="white", lw=0.8)
            )
    ax.add_patch(_rect(x, -n_rows, n_cols, n_rows, edge="black", lw=1.2))
    ax.text(x + n_cols / 2, 0.35, name, ha="center", va="bottom", fontsize=9)
    ax.text(x + n_cols / 2, -n_rows - 0.4, f"[{n_rows}, {n_cols}]", ha="center", va="top", fontsize=9)
    return x + n_cols


def plot_matmul_shapes(products: dict[str, Sequence[Product]], title: str = "") -> Figure:
    """{phase: [Product, ...]} -> Figure, one panel per product and phase, every cell the same size.

    Columns are phases (e.g. prefill, decode), rows the products, so the same product in both phases
    sits side by side at one scale. Orange: the left operand, one row per new token; B is grey when
    it is a weight matrix, otherwise its blue cells were read from the KV cache and its green ones
    computed in this pass; purple: the result. A legend under the panels says so.
    """
    if not products:
        raise ValueError("products: expected at least one phase, got none")
    phases = list(products)
    n_rows = len(products[phases[0]])
    if n_rows == 0 or any(len(products[p]) != n_rows for p in phases):
        counts = {p: len(products[p]) for p in phases}
        raise ValueError(f"products: expected the same positive number of products per phase, got {counts}")
    span_x, row_heights = 0.0, [0.0] * n_rows
    for p in phases:
        for r, prod in enumerate(products[p]):
            for shape in (prod.a_shape, prod.b_shape):
                if len(shape) != 2 or min(shape) < 1:
                    raise ValueError(f"products: expected 2-D shapes, got {shape} in {prod.label!r}")
            if prod.a_shape[1] != prod.b_shape[0]:
                raise ValueError(
                    f"products: inner dimensions differ in {prod.label!r}: {prod.a_shape} @ {prod.b_shape}"
                )
            span_x = max(span_x, prod.a_shape[1] + 2 * prod.b_shape[1] + 5.5)
            row_heights[r] = max(row_heights[r], max(prod.a_shape[0], prod.b_shape[0]) + 3.2)
    plt = pyplot()
    from matplotlib.patches import Patch

    unit = 0.17  # inches per cell: "@", "=" and the shape labels need about two cells
    fig, axes = plt.subplots(
        n_rows,
        len(phases),
        figsize=(unit * span_x * len(phases) + 0.6, unit * sum(row_heights) + 0.8 + 0.3 * bool(title)),
        squeeze=False,
        gridspec_kw={"height_ratios": row_heights},
    )
    for c, phase in enumerate(phases):
        for r, prod in enumerate(products[phase]):
            ax = axes[r, c]
            (m, k), (_, n) = prod.a_shape, prod.b_shape
            a_name, b_name, c_name = prod.names
            x = _draw_matrix(ax, 0.0, (m, k), DECODE_COLOR, a_name)
            ax.text(x + 1.0, -min(m, k) / 2, "@", ha="center", va="center", fontsize=11)
            b_face = WEIGHT_COLOR if prod.b_is_weight else COMPUTED_COLOR
            x = _draw_matrix(ax, x + 2.0, (k, n), b_face, b_name, prod.b_cached_rows, prod.b_cached_cols)
            ax.text(x + 1.0, -min(m, k) / 2, "=", ha="center", va="center", fontsize=11)
            _draw_matrix(ax, x + 2.0, (m, n), RESULT_COLOR, c_name)
            ax.set_xlim(-0.3, span_x)
            ax.set_ylim(-row_heights[r] + 1.2, 1.4)
            ax.set_aspect("equal")
            ax.axis("off")
            ax.set_title(f"{phase}: {prod.label}", fontsize=9, loc="left")
    every = [prod for p in phases for prod in products[p]]
    legend = [
        (DECODE_COLOR, "left operand: the new tokens' rows", True),
        (WEIGHT_COLOR, "weight matrix, read from memory", any(p.b_is_weight for p in every)),
        (PROMPT_COLOR, "K/V read from the cache", any(p.b_cached_rows or p.b_cached_cols for p in every)),
        (
            COMPUTED_COLOR,
            "K/V computed in this pass",
            any(
                not p.b_is_weight and p.b_cached_rows < p.b_shape[0] and p.b_cached_cols < p.b_shape[1]
                for p in every
            ),
        ),
        (RESULT_COLOR, "result", True),
    ]
    legend = [(c, t) for c, t, shown in legend if shown]
    fig.legend(
        handles=[Patch(facecolor=c, edgecolor="white", label=t) for c, t in legend],
        loc="lower center",
        ncol=3,
        fontsize=9,
        frameon=False,
    )
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.6 / fig.get_figheight(), 1, 1))
    return fig


def plot_information_flow(tokens: Sequence[str], n_layers: int, next_token: str) -> Figure:
    """token strings (the last is the one being decoded), L, the predicted token -> Figure (one axes).

    One decode step: the new token's hidden state climbs through every layer; in each layer its
    query reads the keys/values that layer cached for the earlier positions, and its own k/v are
    appended to that layer's cache. The top layer feeds the LM head, which predicts ``next_token``.
    """
    tokens = [str(t) for t in tokens]
    if len(tokens) < 2:
        raise ValueError(f"tokens: expected at least 2 tokens (history + the new one), got {len(tokens)}")
    if isinstance(n_layers, bool) or not isinstance(n_layers, int) or n_layers < 1:
        raise ValueError(f"n_layers: expected a positive int, got {n_layers!r}")
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    plt = pyplot()
    n_pos = len(tokens)
    new = n_pos - 1
    dx, dy, bw, bh = 1.6, 1.5, 1.1, 0.6
    fig, ax = plt.subplots(figsize=(0.65 * (dx * n_pos + 3.2), 0.6 * dy * (n_layers + 2)))

    def box(x: float, y: float, text: str, face: str, edge: str = "black", lw: float = 1.0) -> None:
        ax.add_patch(
            FancyBboxPatch(
                (x - bw / 2, y - bh / 2),
                bw,
                bh,
                boxstyle="round,pad=0.04",
                facecolor=face,
                edgecolor=edge,
                linewidth=lw,
            )
        )
        ax.text(
            x,
            y,
            text,
            ha="center",
            va="center",
            fontsize=8,
            color="white" if face != EMPTY_COLOR else "black",
        )

    def arrow(
        xy0: tuple[float, float],
        xy1: tuple[float, float],
        style: str = "-|>",
        color: str = "black",
        ls: str = "-",
        rad: float = 0.0,
    ) -> None:
        ax.add_patch(
            FancyArrowPatch(
                xy0,
                xy1,
                arrowstyle=style,
                mutation_scale=10,
                color=color,
                linestyle=ls,
                connectionstyle=f"arc3,rad={rad}",
                shrinkA=2,
                shrinkB=2,
            )
        )

    for p, tok in enumerate(tokens):
        ax.text(
            p * dx,
            -0.05,
            repr(tok),
            ha="center",
            va="center",
            fontsize=9,
            fontweight="bold" if p == new else "normal",
        )
        ax.text(p * dx, -0.45, f"pos {p}", ha="center", va="center", fontsize=7, color="#555555")
    box(new * dx, dy * 0.55, "embed", DECODE_COLOR)
    arrow((new * dx, 0.15), (new * dx, dy * 0.55 - bh / 2))
    for layer in range(n_layers):
        y = dy * (layer + 1.4)
        ax.add_patch(_rect(-dx / 2, y - bh / 2 - 0.25, dx * n_pos, bh + 0.5, face="#f7f7f7", edge="#bbbbbb"))
        ax.text(-dx / 2 - 0.15, y, f"layer {layer}\ncache {layer}", ha="right", va="center", fontsize=8)
        for p in range(new):
            box(p * dx, y, "K, V", PROMPT_COLOR)
            arrow(
                (new * dx - bw / 2, y + 0.12),
                (p * dx + bw / 2, y + 0.12),
                color="#555555",
                ls="--",
                rad=0.25 if p < new - 1 else 0.0,
            )
        box(new * dx, y, "q | k, v", DECODE_COLOR, edge=NEW_EDGE, lw=2.0)
        below = dy * 0.55 if layer == 0 else dy * (layer + 0.4)
        arrow((new * dx, below + bh / 2), (new * dx, y - bh / 2))
    top = dy * (n_layers + 1.2)
    box(new * dx, top, "LM head", GREEN)
    arrow((new * dx, dy * (n_layers + 0.4) + bh / 2), (new * dx, top - bh / 2))
    ax.text(new * dx + bw / 2 + 0.25, top, f"next token: {next_token!r}", ha="left", va="center", fontsize=9)
    ax.text(
        -dx / 2,
        top,
        "dashed: the new query reads\nthat layer's cached K, V\nred edge: k, v appended",
        ha="left",
        va="center",
        fontsize=8,
        color=DARK,
    )
    ax.set_xlim(-dx / 2 - 1.6, dx * n_pos + 1.6)
    ax.set_ylim(-0.8, top + 0.7)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.tight_layout()
    return fig
