"""The book's two overview diagrams, drawn as SVG text: the whole generate loop, and one
transformer block with the place of the KV cache in it.

SVG written here rather than a matplotlib figure: the browser draws the labels in the page's own
fonts, so the Chinese edition needs no CJK font. The shapes come from a ``GPT2Config``; the words
from a table of labels per edition, ``EN_LABELS`` (the default) and ``ZH_LABELS``, whose ``{T}``-
style fields are filled from the config. In a label, ``_`` and ``^`` set the letters and digits
after them as a subscript or superscript (``d_h``, ``H_kv``, ``QK^T``), and a newline breaks the
line. ``loop_diagram`` and ``block_diagram`` hold both editions in one ``Diagram``, whose HTML
shows the one that matches the page's language (book/_static/kvtutor.css). The output is the same
text on every run: no ids, no random numbers, coordinates written with one decimal at most.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

# EDITION_CSS: which drawing a page shows (the Chinese one where <html lang> is Chinese)
from ..book.editions import EDITION_CSS, both_editions
from .style import BLUE, DARK, DECODE_COLOR, EMPTY_COLOR, GREEN, PROMPT_COLOR, PURPLE

if TYPE_CHECKING:
    from ..models.config import GPT2Config

__all__ = [
    "EN_LABELS",
    "ZH_LABELS",
    "EDITION_CSS",
    "Diagram",
    "loop_svg",
    "block_svg",
    "loop_diagram",
    "block_diagram",
]

#: The English words of both diagrams, by name. ``{T}`` is the prompt length, ``{T1}`` the
#: position of the first new token (T + 1), ``{L}`` the layers, ``{M}`` the cache capacity,
#: ``{l}`` a layer's index.
EN_LABELS: dict[str, str] = {
    "prompt": "Prompt",
    "prompt_tokens": "T = {T} tokens",
    "prefill": "Prefill",
    "prefill_what": "all {T} tokens at once",
    "mat_mat": "matrix × matrix (GEMM)",
    "decode": "Decode step",
    "decode_what": "one token at a time",
    "mat_vec": "matrix × vector (GEMV)",
    "cache": "KV cache",
    "cache_per_layer": "K, V per layer, L = {L}:",
    "layer": "layer {l}",
    "legend_prefill": "written by prefill",
    "legend_decode": "appended by decode",
    "legend_free": "free, up to M = {M}",
    "writes": "writes K, V\nof all {T} tokens",
    "appends": "appends one\nK, V row\nper layer",
    "reads": "reads the\nwhole cache,\nall S rows",
    "first_token": "first new\ntoken x_{T1}",
    "tokens_out": "Tokens out",
    "new_token": "new token",
    "fed_back": "fed back in",
    "one_per_step": "one per step",
    "block_in": "x: one row per token",
    "block_out": "to the next block",
    "layer_norm": "LayerNorm",
    "queries": "queries",
    "keys": "keys",
    "values": "values",
    "attention": "Attention, in each head",
    "scores": "scores",
    "merge": "merge heads, project",
    "residual": "residual",
    "mlp": "MLP",
    "layer_cache": "KV cache of this layer",
    "cache_len": "S = cached + T",
    "write_rows": "write T\nnew rows",
    "read_rows": "read all\nS rows",
    "legend_token": "per-token work:\neach row on its own",
    "legend_reads": "reads the cache:\nwhere tokens meet",
    "prefill_case": "prefill: T = S = {T}",
    "decode_case": "decode: T = 1, S = {T1}",
}

#: The Chinese edition's words, with the same names and fields as ``EN_LABELS``.
ZH_LABELS: dict[str, str] = {
    "prompt": "提示词",
    "prompt_tokens": "T = {T} 个词元",
    "prefill": "预填充",
    "prefill_what": "{T} 个词元一次算完",
    "mat_mat": "矩阵 × 矩阵（GEMM）",
    "decode": "解码步",
    "decode_what": "每步一个词元",
    "mat_vec": "矩阵 × 向量（GEMV）",
    "cache": "KV 缓存",
    "cache_per_layer": "每层一份 K、V，L = {L}：",
    "layer": "第 {l} 层",
    "legend_prefill": "预填充写入",
    "legend_decode": "解码追加",
    "legend_free": "空位，最多 M = {M}",
    "writes": "写入全部\n{T} 个词元的 K、V",
    "appends": "每层追加\n一行 K、V",
    "reads": "读取整个\n缓存，共 S 行",
    "first_token": "第一个\n新词元 x_{T1}",
    "tokens_out": "输出词元",
    "new_token": "新词元",
    "fed_back": "送回输入",
    "one_per_step": "每步一个",
    "block_in": "x：每个词元一行",
    "block_out": "送往下一个块",
    "layer_norm": "层归一化",
    "queries": "查询",
    "keys": "键",
    "values": "值",
    "attention": "注意力，每个头各算",
    "scores": "分数",
    "merge": "合并各头，投影",
    "residual": "残差",
    "mlp": "MLP",
    "layer_cache": "本层的 KV 缓存",
    "cache_len": "S = 已缓存 + T",
    "write_rows": "写入 T 行\n新的 K、V",
    "read_rows": "读取全部\nS 行",
    "legend_token": "逐词元计算：\n每行各算各的",
    "legend_reads": "读取缓存：\n词元在此交汇",
    "prefill_case": "预填充：T = S = {T}",
    "decode_case": "解码：T = 1，S = {T1}",
}

WIDTH = 800  # the viewBox width: the text column is about 700 px wide at 1280 px
FONT = "var(--pst-font-family-base, system-ui, -apple-system, 'Segoe UI', 'Noto Sans', sans-serif)"
TITLE, TEXT_SIZE, SMALL, NOTE = 16, 15, 13.5, 12.5  # font sizes: titles, text, details, arrows
# fills: light versions of the strokes
PREFILL_FILL, DECODE_FILL, CACHE_FILL = "#e4edf6", "#fdecd9", "#f4f4f4"
TOKEN_STROKE, TOKEN_FILL = GREEN, "#e7f2e5"  # per-token work in the block
READS_STROKE, READS_FILL = PURPLE, "#f3e7ef"  # what reads the cache
MUTED = "#555555"  # secondary words
BOLD = "bold"
MAX_CELLS = 16  # cache positions drawn in a row; a larger capacity is cut with an ellipsis


# ---------------------------------------------------------------- the drawing primitives


def _num(v: float) -> str:
    """A coordinate with at most one decimal, the same text on every machine."""
    return f"{v:.1f}".removesuffix(".0")


_SCRIPT = re.compile(r"([_^])([A-Za-z0-9]+)")


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def _markup(text: str) -> str:
    """XML-escaped text with ``_x`` and ``^x`` as sub- and superscript tspans."""
    escaped = _escape(text)

    def script(m: re.Match[str]) -> str:
        shift = "sub" if m.group(1) == "_" else "super"
        return f'<tspan baseline-shift="{shift}" font-size="75%">{m.group(2)}</tspan>'

    return _SCRIPT.sub(script, escaped)


def _text(
    x: float, y: float, text: str, size: float = TEXT_SIZE, anchor: str = "middle", **attrs: str
) -> str:
    """Lines of text (split at newlines) centred vertically on ``y``; ``attrs`` are SVG attributes
    with ``_`` for ``-`` (``font_weight="bold"``), the fill DARK unless given."""
    lines = text.split("\n")
    step = size * 1.3
    first = y - step * (len(lines) - 1) / 2 + size * 0.35
    extra = "".join(f' {name.replace("_", "-")}="{value}"' for name, value in {"fill": DARK, **attrs}.items())
    return "".join(
        f'<text x="{_num(x)}" y="{_num(first + i * step)}" font-size="{_num(size)}"'
        f' text-anchor="{anchor}"{extra}>{_markup(line)}</text>'
        for i, line in enumerate(lines)
    )


def _box(x: float, y: float, w: float, h: float, fill: str, stroke: str = DARK, *, width: float = 1.5) -> str:
    return (
        f'<rect x="{_num(x)}" y="{_num(y)}" width="{_num(w)}" height="{_num(h)}" rx="6"'
        f' fill="{fill}" stroke="{stroke}" stroke-width="{_num(width)}"/>'
    )


def _line(points: list[tuple[float, float]], color: str = DARK, *, width: float = 1.6) -> str:
    """A polyline through ``points``."""
    path = " ".join(f"{'M' if i == 0 else 'L'}{_num(x)},{_num(y)}" for i, (x, y) in enumerate(points))
    return f'<path d="{path}" fill="none" stroke="{color}" stroke-width="{_num(width)}"/>'


def _arrow(points: list[tuple[float, float]], color: str = DARK, *, width: float = 1.6) -> str:
    """A polyline through ``points`` with a filled head at the last one (no SVG markers: they need
    ids, and the page holds several copies of each diagram)."""
    (x0, y0), (x1, y1) = points[-2], points[-1]
    length = max(((x1 - x0) ** 2 + (y1 - y0) ** 2) ** 0.5, 1e-9)
    ux, uy, head = (x1 - x0) / length, (y1 - y0) / length, 8.0
    bx, by = x1 - ux * head, y1 - uy * head  # the base of the head, where the line stops
    tip = [
        (x1, y1),
        (bx - uy * head * 0.45, by + ux * head * 0.45),
        (bx + uy * head * 0.45, by - ux * head * 0.45),
    ]
    return (
        _line([*points[:-1], (bx, by)], color, width=width)
        + f'<polygon points="{" ".join(f"{_num(px)},{_num(py)}" for px, py in tip)}" fill="{color}"/>'
    )


def _chips(x: float, y: float, names: list[str], fill: str, *, more: bool) -> str:
    """Token chips (x_1, x_2, ...) centred on ``x``, with an ellipsis after them when ``more``."""
    w, gap, dots = 30.0, 5.0, 14.0
    span = len(names) * w + (len(names) - 1) * gap + (gap + dots if more else 0)
    left = x - span / 2
    parts = []
    for i, name in enumerate(names):
        cx = left + i * (w + gap)
        parts.append(_box(cx, y - 13, w, 26, fill, fill, width=1))
        parts.append(_text(cx + w / 2, y, name, fill="#ffffff", size=SMALL))
    if more:
        parts.append(_text(left + span - dots / 2, y, "…"))
    return "".join(parts)


def _cell(x: float, y: float, color: str, size: float = 7.5) -> str:
    return (
        f'<rect x="{_num(x)}" y="{_num(y)}" width="{_num(size)}" height="12" fill="{color}"'
        ' stroke="#999999" stroke-width="0.5"/>'
    )


def _cells(x: float, y: float, n_prompt: int, n_decode: int, capacity: int, *, cell: float = 9.0) -> str:
    """One row of cache positions: prompt (blue), decoded (orange), free (empty); a capacity over
    MAX_CELLS is drawn as MAX_CELLS - 3 positions, an ellipsis and the last one."""
    literal = capacity if capacity <= MAX_CELLS else MAX_CELLS - 3
    filled = n_prompt + n_decode
    if filled > literal:  # more tokens than drawn positions: keep the proportion, one of each at least
        n_decode = max(1, round(literal * n_decode / filled))
        n_prompt = literal - n_decode
    parts = []
    for i in range(literal):
        color = PROMPT_COLOR if i < n_prompt else DECODE_COLOR if i < n_prompt + n_decode else EMPTY_COLOR
        parts.append(_cell(x + i * cell, y, color, cell - 1.5))
    if capacity > MAX_CELLS:
        end = x + literal * cell
        parts.append(_text(end + cell * 0.9, y + 6, "…", size=SMALL))
        parts.append(_cell(end + 1.8 * cell, y, EMPTY_COLOR, cell - 1.5))
    return "".join(parts)


def _svg(height: float, body: list[str], title: str) -> str:
    """The document: a white card (readable in the theme's dark mode too), width 100% of the text
    column up to its own width."""
    plain = _escape(_SCRIPT.sub(r"\2", title))
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {_num(height)}" width="100%"'
        f' role="img" aria-label="{plain}"'
        f' style="max-width: {WIDTH}px; height: auto; display: block; margin: 0 auto; font-family: {FONT}">'
        f"<title>{plain}</title>"
        f'<rect x="0" y="0" width="{WIDTH}" height="{_num(height)}" rx="8" fill="#ffffff"/>'
        + "".join(body)
        + "</svg>"
    )


# ---------------------------------------------------------------- arguments


def _config(config: GPT2Config | None) -> GPT2Config:
    if config is None:
        from ..models.config import TOY_CONFIG

        return TOY_CONFIG
    needed = ("d_model", "n_heads", "n_kv_heads", "d_head", "n_layers", "max_seq_len", "d_ff")
    missing = [name for name in needed if not isinstance(getattr(config, name, None), int)]
    if missing:
        raise TypeError(f"config: expected a GPT2Config, got {type(config).__name__} without {missing}")
    return config


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{name}: expected a positive int, got {value}")
    return value


def _words(labels: Mapping[str, str] | None, fields: dict[str, int]) -> dict[str, str]:
    """EN_LABELS overridden by ``labels``, with the fields filled in; the check names the argument."""
    if labels is None:
        labels = {}
    if not isinstance(labels, Mapping):
        raise TypeError(f"labels: expected a mapping of label names to strings, got {type(labels).__name__}")
    unknown = [key for key in labels if key not in EN_LABELS]
    if unknown:
        raise ValueError(
            f"labels: unknown key(s) {sorted(map(repr, unknown))}; the names are EN_LABELS' keys"
        )
    for key, value in labels.items():
        if not isinstance(value, str):
            raise TypeError(f"labels[{key!r}]: expected a str, got {type(value).__name__}")
    words = {}
    for key, value in {**EN_LABELS, **labels}.items():
        try:
            words[key] = value.format(**fields)
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"labels[{key!r}]: {value!r} cannot be filled ({exc!r}); its fields are {sorted(fields)}"
            ) from None
    return words


def _shape(*dims: int | str) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"


# ---------------------------------------------------------------- the generate loop


def loop_svg(
    config: GPT2Config | None = None,
    *,
    labels: Mapping[str, str] | None = None,
    prompt_len: int = 3,
    decode_steps: int = 3,
    prompt: str | None = None,
) -> str:
    """The whole generate loop as SVG text: the prompt, one prefill, the KV cache of every layer,
    and the decode steps that read it and append to it, for ``config`` (default: the toy model's)
    after ``decode_steps`` steps. ``labels`` overrides EN_LABELS (``ZH_LABELS`` for Chinese);
    ``prompt`` is shown in quotes under its title when given."""
    cfg = _config(config)
    t, steps = _count("prompt_len", prompt_len), _count("decode_steps", decode_steps)
    if t + steps > cfg.max_seq_len:
        raise ValueError(
            f"prompt_len + decode_steps: {t} + {steps} positions exceed the capacity M = {cfg.max_seq_len}"
        )
    w = _words(labels, {"T": t, "T1": t + 1, "L": cfg.n_layers, "M": cfg.max_seq_len, "l": 0})
    d, kv, k = cfg.d_model, cfg.n_kv_heads, cfg.d_head
    out = []
    # column A: the prompt and the tokens out
    ax, aw = 12.0, 136.0
    acx = ax + aw / 2
    out.append(_box(ax, 34, aw, 122, PREFILL_FILL, BLUE))
    out.append(_text(acx, 56, w["prompt"], font_weight=BOLD, size=TITLE))
    if prompt is not None:
        out.append(_text(acx, 80, f"“{prompt}”", size=SMALL, font_style="italic"))
    out.append(_chips(acx, 108, [f"x_{i + 1}" for i in range(min(t, 3))], PROMPT_COLOR, more=t > 3))
    out.append(_text(acx, 138, w["prompt_tokens"], size=SMALL))
    out.append(_box(ax, 262, aw, 122, DECODE_FILL, DECODE_COLOR))
    out.append(_text(acx, 284, w["tokens_out"], font_weight=BOLD, size=TITLE))
    out.append(_chips(acx, 318, [f"x_{t + 1 + i}" for i in range(min(steps, 3))], DECODE_COLOR, more=True))
    out.append(_text(acx, 352, w["one_per_step"], size=SMALL))
    # column B: prefill and decode
    bx, bw = 224.0, 236.0
    bcx = bx + bw / 2
    out.append(_box(bx, 34, bw, 122, PREFILL_FILL, BLUE))
    out.append(_text(bcx, 58, w["prefill"], font_weight=BOLD, size=TITLE))
    out.append(_text(bcx, 84, w["prefill_what"]))
    out.append(_text(bcx, 108, f"X {_shape(t, d)} · W {_shape(d, d)}"))
    out.append(_text(bcx, 132, w["mat_mat"], size=SMALL))
    out.append(_box(bx, 262, bw, 122, DECODE_FILL, DECODE_COLOR))
    out.append(_text(bcx, 286, w["decode"], font_weight=BOLD, size=TITLE))
    out.append(_text(bcx, 312, w["decode_what"]))
    out.append(_text(bcx, 336, f"x {_shape(1, d)} · W {_shape(d, d)}"))
    out.append(_text(bcx, 360, w["mat_vec"], size=SMALL))
    out.append(_arrow([(ax + aw, 95), (bx, 95)]))  # prompt -> prefill
    out.append(_arrow([(bcx, 156), (bcx, 262)]))  # prefill -> decode
    out.append(_text(bcx + 10, 209, w["first_token"], size=SMALL, anchor="start"))
    out.append(_arrow([(bx, 300), (ax + aw, 300)], DECODE_COLOR))  # decode -> tokens out
    out.append(_text((ax + aw + bx) / 2, 288, w["new_token"], size=12))
    out.append(_arrow([(ax + aw, 346), (bx, 346)], DECODE_COLOR))  # fed back in
    out.append(_text((ax + aw + bx) / 2, 334, w["fed_back"], size=12))
    # column C: the cache, one pair of rows per layer
    cx, cw = 590.0, 196.0
    out.append(_box(cx, 20, cw, 376, CACHE_FILL))
    out.append(_text(cx + cw / 2, 42, w["cache"], font_weight=BOLD, size=TITLE))
    out.append(_text(cx + cw / 2, 64, w["cache_per_layer"], size=NOTE))
    out.append(_text(cx + cw / 2, 84, f"{_shape('H_kv', 'S', 'd_h')} = {_shape(kv, 'S', k)}", size=NOTE))
    shown = list(range(cfg.n_layers)) if cfg.n_layers <= 3 else [0, 1, None, cfg.n_layers - 1]
    y = 102.0
    for layer in shown:
        if layer is None:
            out.append(_text(cx + cw / 2, y + 6, "⋮", size=16))
            y += 24
            continue
        name = _words(labels, {"T": t, "T1": t + 1, "L": cfg.n_layers, "M": cfg.max_seq_len, "l": layer})
        out.append(_text(cx + 12, y + 7, name["layer"], size=SMALL, anchor="start"))
        for row, letter in enumerate("KV"):
            ry = y + 18 + row * 16
            out.append(_text(cx + 20, ry + 6, letter, size=SMALL))
            out.append(_cells(cx + 32, ry, t, steps, cfg.max_seq_len))
        y += 62
    for i, (color, key) in enumerate(
        [(PROMPT_COLOR, "legend_prefill"), (DECODE_COLOR, "legend_decode"), (EMPTY_COLOR, "legend_free")]
    ):
        ly = 330 + i * 20
        out.append(_cell(cx + 14, ly - 6, color, 12))
        out.append(_text(cx + 34, ly, w[key], size=SMALL, anchor="start"))
    # between B and C: the traffic to and from the cache
    mid = (bx + bw + cx) / 2
    out.append(_arrow([(bx + bw, 95), (cx, 95)], PROMPT_COLOR))
    out.append(_text(mid, 68, w["writes"], size=NOTE))
    out.append(_arrow([(bx + bw, 282), (cx, 282)], DECODE_COLOR))
    out.append(_text(mid, 246, w["appends"], size=NOTE))
    out.append(_arrow([(cx, 318), (bx + bw, 318)], DARK))
    out.append(_text(mid, 352, w["reads"], size=NOTE))
    title = f"{w['prefill']}, {w['cache']}, {w['decode']}"
    return _svg(404, out, title)


# ---------------------------------------------------------------- one block


def block_svg(
    config: GPT2Config | None = None,
    *,
    labels: Mapping[str, str] | None = None,
    prompt_len: int = 3,
) -> str:
    """One GPT-2 block (pre-LayerNorm) as SVG text, with the shapes of ``config`` (default: the
    toy model's): where Q, K and V come from, where the KV cache sits, and which parts are
    per-token work and which read the cache. ``prompt_len`` sets the prefill and first decode
    step named beside it; ``labels`` overrides EN_LABELS (``ZH_LABELS`` for Chinese)."""
    cfg = _config(config)
    t = _count("prompt_len", prompt_len)
    if t + 1 > cfg.max_seq_len:
        raise ValueError(f"prompt_len: {t} leaves no room for a decode step in M = {cfg.max_seq_len}")
    w = _words(labels, {"T": t, "T1": t + 1, "L": cfg.n_layers, "M": cfg.max_seq_len, "l": 0})
    d, h, kv, k, f = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.d_head, cfg.d_ff
    out = []
    cx = 290.0  # the main column's centre
    lane = 34.0  # the residual path
    sx0, sx1 = 78.0, 502.0  # the span of the Q, K, V boxes
    # the input and the first LayerNorm
    out.append(_box(cx - 110, 16, 220, 40, "#ffffff"))
    out.append(_text(cx, 36, f"{w['block_in']}  {_shape('T', d)}", size=SMALL))
    out.append(_arrow([(cx, 56), (cx, 78)]))
    out.append(_box(cx - 80, 78, 160, 32, TOKEN_FILL, TOKEN_STROKE))
    out.append(_text(cx, 94, w["layer_norm"]))
    # the three projections
    bw, gap = 130.0, (sx1 - sx0 - 3 * 130.0) / 2
    centres = [sx0 + bw / 2 + i * (bw + gap) for i in range(3)]
    out.append(_line([(cx, 110), (cx, 122)]))
    out.append(_line([(centres[0], 122), (centres[2], 122)]))
    rows = [("queries", "Q", h), ("keys", "K", kv), ("values", "V", kv)]
    for centre, (key, letter, heads) in zip(centres, rows, strict=True):
        out.append(_arrow([(centre, 122), (centre, 142)]))
        out.append(_box(centre - bw / 2, 142, bw, 66, TOKEN_FILL, TOKEN_STROKE))
        out.append(_text(centre, 158, w[key], size=SMALL, fill=MUTED))
        out.append(_text(centre, 177, f"W_{letter} {_shape(d, heads * k)}", size=SMALL))
        out.append(_text(centre, 196, f"{letter} {_shape(heads, 'T', k)}", size=SMALL, font_weight=BOLD))
    # K and V into the cache, the cache into attention
    kx, vx = centres[1], centres[2]
    ry = 230.0
    out.append(_line([(kx, 208), (kx, ry), (vx, ry)], READS_STROKE))
    out.append(_arrow([(vx, 208), (vx, ry), (600, ry)], READS_STROKE))
    out.append(_text(551, ry - 20, w["write_rows"], size=NOTE))
    qx = centres[0]
    top, att_h = 262.0, 76.0
    out.append(_arrow([(qx, 208), (qx, top)]))
    out.append(_box(sx0, top, 388, att_h, READS_FILL, READS_STROKE, width=2))
    acx = sx0 + 194
    out.append(_text(acx, top + 17, w["attention"], font_weight=BOLD))
    out.append(_text(acx, top + 40, "softmax(QK^T / √d_h) V"))
    out.append(_text(acx, top + 62, f"{w['scores']} {_shape(h, 'T', 'S')} → {_shape(h, 'T', k)}", size=SMALL))
    out.append(_arrow([(600, top + 46), (sx0 + 388, top + 46)], READS_STROKE))
    out.append(_text(544, top + 74, w["read_rows"], size=NOTE))
    # the cache, right
    px, pw = 600.0, 186.0
    out.append(_box(px, 182, pw, 180, CACHE_FILL, READS_STROKE, width=2))
    out.append(_text(px + pw / 2, 204, w["layer_cache"], font_weight=BOLD, size=SMALL))
    out.append(_text(px + pw / 2, 228, f"K, V {_shape(kv, 'S', k)}", size=SMALL))
    out.append(_text(px + pw / 2, 248, w["cache_len"], size=SMALL))
    for row, letter in enumerate("KV"):
        y = 270 + row * 18
        out.append(_text(px + 18, y + 6, letter, size=SMALL))
        out.append(_cells(px + 30, y, t, 1, cfg.max_seq_len))
    out.append(_text(px + pw / 2, 326, w["prefill_case"], size=SMALL))
    out.append(_text(px + pw / 2, 346, w["decode_case"], size=SMALL))
    # the output projection, the adds, the MLP
    y = top + att_h
    out.append(_arrow([(cx, y), (cx, y + 20)]))
    out.append(_box(cx - 110, y + 20, 220, 46, TOKEN_FILL, TOKEN_STROKE))
    out.append(_text(cx, y + 35, w["merge"], size=SMALL))
    out.append(_text(cx, y + 54, f"W_O {_shape(h * k, d)}", size=SMALL))
    add1 = y + 98
    out.append(_arrow([(cx, y + 66), (cx, add1 - 12)]))
    out.append(_add(cx, add1))
    out.append(_arrow([(cx - 110, 36), (lane, 36), (lane, add1), (cx - 12, add1)]))  # residual 1
    out.append(_text(lane + 8, (36 + add1) / 2, w["residual"], size=NOTE, anchor="start", fill=MUTED))
    branch = add1 + 24
    out.append(_arrow([(cx, add1 + 12), (cx, add1 + 44)]))
    out.append(f'<circle cx="{_num(cx)}" cy="{_num(branch)}" r="3" fill="{DARK}"/>')
    out.append(_box(cx - 80, add1 + 44, 160, 32, TOKEN_FILL, TOKEN_STROKE))
    out.append(_text(cx, add1 + 60, w["layer_norm"]))
    out.append(_arrow([(cx, add1 + 76), (cx, add1 + 98)]))
    out.append(_box(cx - 175, add1 + 98, 350, 46, TOKEN_FILL, TOKEN_STROKE))
    out.append(_text(cx, add1 + 113, w["mlp"], font_weight=BOLD, size=SMALL))
    out.append(_text(cx, add1 + 132, f"W_fc {_shape(d, f)} → GELU → W_proj {_shape(f, d)}", size=SMALL))
    add2 = add1 + 176
    out.append(_arrow([(cx, add1 + 144), (cx, add2 - 12)]))
    out.append(_add(cx, add2))
    out.append(_arrow([(cx, branch), (lane, branch), (lane, add2), (cx - 12, add2)]))  # residual 2
    out.append(_text(lane + 8, (branch + add2) / 2, w["residual"], size=NOTE, anchor="start", fill=MUTED))
    out.append(_arrow([(cx, add2 + 12), (cx, add2 + 32)]))
    out.append(_box(cx - 110, add2 + 32, 220, 36, "#ffffff"))
    out.append(_text(cx, add2 + 50, f"{w['block_out']}  {_shape('T', d)}", size=SMALL))
    # the legend, right
    for i, (fill, stroke, key) in enumerate(
        [(TOKEN_FILL, TOKEN_STROKE, "legend_token"), (READS_FILL, READS_STROKE, "legend_reads")]
    ):
        ly = add1 + 60 + i * 58
        out.append(_box(px + 4, ly - 12, 24, 24, fill, stroke))
        out.append(_text(px + 38, ly, w[key], size=SMALL, anchor="start"))
    title = f"{w['layer_norm']}, Q K V, {w['layer_cache']}, {w['attention']}, {w['mlp']}"
    return _svg(add2 + 84, out, title)


def _add(x: float, y: float) -> str:
    """The residual add: a circled plus."""
    return (
        f'<circle cx="{_num(x)}" cy="{_num(y)}" r="12" fill="#ffffff" stroke="{DARK}" stroke-width="1.5"/>'
        f'<path d="M{_num(x - 7)},{_num(y)} L{_num(x + 7)},{_num(y)} M{_num(x)},{_num(y - 7)}'
        f' L{_num(x)},{_num(y + 7)}" stroke="{DARK}" stroke-width="1.5"/>'
    )


# ---------------------------------------------------------------- both editions


@dataclass(frozen=True)
class Diagram:
    """One diagram in both editions: Jupyter shows ``text`` as its plain text and the HTML of both
    SVGs, of which the book's stylesheet shows the one in the page's language."""

    svg_en: str
    svg_zh: str
    text: str

    @property
    def html(self) -> str:
        return both_editions(self.svg_en, self.svg_zh)

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return self.text


def loop_diagram(
    config: GPT2Config | None = None,
    *,
    prompt_len: int = 3,
    decode_steps: int = 3,
    prompt: str | None = None,
) -> Diagram:
    """``loop_svg`` in English and Chinese, with a one-line description of what it shows."""
    cfg = _config(config)
    kw = {"prompt_len": prompt_len, "decode_steps": decode_steps, "prompt": prompt}
    d, kv, k = cfg.d_model, cfg.n_kv_heads, cfg.d_head
    text = (
        f"generate loop: prefill of {prompt_len} tokens, X {_shape(prompt_len, d)} @ W {_shape(d, d)}; "
        f"KV cache of {cfg.n_layers} layers, K and V {_shape(kv, 'S', k)} each, up to S = {cfg.max_seq_len}; "
        f"decode steps, x {_shape(1, d)} @ W {_shape(d, d)}"
    )
    return Diagram(loop_svg(cfg, **kw), loop_svg(cfg, labels=ZH_LABELS, **kw), text)


def block_diagram(config: GPT2Config | None = None, *, prompt_len: int = 3) -> Diagram:
    """``block_svg`` in English and Chinese, with a one-line description of what it shows."""
    cfg = _config(config)
    d, h, kv, k = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.d_head
    text = (
        f"one block: x {_shape('T', d)} -> LayerNorm -> Q {_shape(h, 'T', k)}, K and V {_shape(kv, 'T', k)}"
        f" -> KV cache {_shape(kv, 'S', k)} -> attention -> W_O -> add -> LayerNorm"
        f" -> MLP {_shape(d, cfg.d_ff)}, {_shape(cfg.d_ff, d)} -> add"
    )
    return Diagram(
        block_svg(cfg, prompt_len=prompt_len), block_svg(cfg, labels=ZH_LABELS, prompt_len=prompt_len), text
    )
