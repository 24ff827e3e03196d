"""Both editions of the book in one stored output: a figure drawn in English and in Chinese, and a
table printed in both.

The book's two editions show the same stored outputs (``execute_notebooks: "off"``). An output
that holds words holds them twice, as HTML whose ``kvt-lang-en`` and ``kvt-lang-zh`` parts the
page's language picks (``EDITION_CSS``, also in book/_static/kvtutor.css; the copy in each output
serves Jupyter and Colab, which show the English).

- Figures: ``setup_notebook`` registers ``figure_html`` as IPython's HTML formatter for matplotlib
  figures under the inline backend. It holds the English PNG as drawn and a Chinese PNG drawn from a
  copy of the figure whose words ``kvtutor.book.labels`` translates, set in a CJK font
  (``cjk_font``), with each image's ``alt`` text in its language. The bare PNG is left out of the
  output (Jupyter shows the HTML, and it would store the English image twice).
- Tables: ``kvtutor.book.display.table`` and ``markdown_table`` print the English table as
  Markdown, which nbval compares as before, and both editions as HTML.

Strict mode (``KVTUTOR_STRICT_ZH=1``, set by ``make notebooks`` and ``make nbval``; a yes/no variable,
``environment.env_flag``): a word with no translation, or no CJK font, is an ``EditionError``.
Otherwise (a reader's Colab) the Chinese copy keeps the English words it cannot translate or draw,
silently; ``KVTUTOR_ZH_MISSING=FILE`` appends
each untranslated string to FILE, one JSON string per line, for the translator.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import html
import io
import json
import logging
import re
import shutil
import subprocess
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from ..environment import env_flag, env_text
from .labels import translate

__all__ = [
    "EDITION_CSS",
    "both_editions",
    "STRICT_ENV",
    "MISSING_ENV",
    "FONT_ENV",
    "EditionError",
    "CJKFont",
    "strict",
    "cjk_font",
    "zh",
    "missing",
    "chinese_copy",
    "figure_html",
    "register_figure_formatter",
    "main",
]

#: Which of the two renderings a page shows: the Chinese one on pages whose <html lang> is Chinese
#: (the Chinese edition's is "zh-CN"), the English one elsewhere (kvtutor.plots.diagrams's too).
EDITION_CSS = 'html:not([lang^="zh"]) .kvt-lang-zh, html[lang^="zh"] .kvt-lang-en { display: none; }'
STRICT_ENV = "KVTUTOR_STRICT_ZH"


def both_editions(en_html: str, zh_html: str) -> str:
    """One output in both editions: the English and the Chinese HTML side by side, with the rule
    (``EDITION_CSS``) that shows the one in the page's language. Figures, tables and diagrams all
    come out this way."""
    return (
        f"<style>{EDITION_CSS}</style>"
        f'<div class="kvt-lang-en">{en_html}</div><div class="kvt-lang-zh">{zh_html}</div>'
    )


MISSING_ENV = "KVTUTOR_ZH_MISSING"
#: a font file to use for the Chinese figures, before the ones found on the machine
FONT_ENV = "KVTUTOR_CJK_FONT"

#: CJK fonts by family name (as matplotlib knows them), then by file, in order of preference:
#: Debian's fonts-wqy-zenhei (``make font`` installs it), Noto Sans CJK / Source Han Sans,
#: macOS's PingFang and Heiti, Windows's Microsoft YaHei and SimHei.
CJK_FONT_NAMES = (
    "WenQuanYi Zen Hei",
    "Noto Sans CJK SC",
    "Noto Sans SC",
    "Source Han Sans SC",
    "Source Han Sans CN",
    "PingFang SC",
    "Heiti SC",
    "STHeiti",
    "Hiragino Sans GB",
    "Microsoft YaHei",
    "SimHei",
    "Noto Sans CJK JP",
)
CJK_FONT_FILES = (
    "/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc",
    "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/noto-cjk/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/google-noto-cjk/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/adobe-source-han-sans/SourceHanSansCN-Regular.otf",
    "/System/Library/Fonts/PingFang.ttc",
    "/System/Library/Fonts/STHeiti Medium.ttc",
    "/System/Library/Fonts/Hiragino Sans GB.ttc",
    "C:/Windows/Fonts/msyh.ttc",
    "C:/Windows/Fonts/simhei.ttf",
)
#: characters a font must have to draw the Chinese figures
_PROBE = "预填充解码缓存词元注意力批大小，：（）"
NO_FONT = (
    "no CJK font for the Chinese figures: install one (`make font`, or Debian's fonts-wqy-zenhei) "
    f"or name its file in {FONT_ENV} (if set, it must be a .ttf, .ttc or .otf file with Chinese glyphs)"
)


class EditionError(ValueError):
    """The Chinese rendering of an output cannot be made in strict mode."""


def strict() -> bool:
    """Is strict mode on (``KVTUTOR_STRICT_ZH`` yes: 1, true, yes or on; no: 0, false, no, off
    or unset; anything else a ValueError naming it)?"""
    return env_flag(STRICT_ENV)


def missing(strings: Iterable[str], where: str) -> None:
    """Untranslated ``strings``: an EditionError in strict mode, else a note in the file that
    ``KVTUTOR_ZH_MISSING`` names (if any); never a word on stdout or stderr."""
    strings = list(dict.fromkeys(strings))
    if not strings:
        return
    if strict():
        listed = ", ".join(repr(s) for s in strings)
        raise EditionError(f"{where}: no Chinese for {listed} (add it to kvtutor/book/labels.py)")
    log = env_text(MISSING_ENV)
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.writelines(json.dumps(s, ensure_ascii=False) + "\n" for s in strings)


def zh(text: str, where: str = "Chinese edition") -> str:
    """``text`` in Chinese (``labels.translate``); without a translation, an EditionError in strict
    mode, else ``text`` itself."""
    out = translate(text)
    if out is None:
        missing([text], where)
        return text
    return out


# ---------------------------------------------------------------- the CJK font


@dataclass(frozen=True)
class CJKFont:
    """A font that draws Chinese: its family name as matplotlib knows it, and its file."""

    name: str
    path: str


@cache
def _ft2font(path: str) -> Any:
    from matplotlib.ft2font import FT2Font

    try:
        return FT2Font(path)
    except (OSError, RuntimeError, ValueError):
        return None


def _has_chars(path: str, chars: str) -> bool:
    """Has the font file ``path`` a glyph for every character of ``chars``?"""
    font = _ft2font(path)
    return font is not None and all(font.get_char_index(ord(c)) for c in chars)


def _candidates() -> Iterable[str]:
    """Font files to try, best first: $KVTUTOR_CJK_FONT alone when it is set, else the CJK fonts
    matplotlib has found, the usual files, and what fontconfig knows to draw Chinese."""
    from matplotlib import font_manager

    named = env_text(FONT_ENV)
    if named is not None:
        yield named
        return
    known = {f.name: f.fname for f in font_manager.fontManager.ttflist}
    yield from (known[n] for n in CJK_FONT_NAMES if n in known)
    yield from (p for p in CJK_FONT_FILES if Path(p).is_file())
    if shutil.which("fc-list"):
        try:
            listed = subprocess.run(
                ["fc-list", ":lang=zh-cn", "file"], capture_output=True, text=True, timeout=10
            ).stdout
        except (OSError, subprocess.SubprocessError):
            return
        yield from sorted(line.strip().rstrip(":") for line in listed.splitlines() if line.strip())


@cache
def cjk_font() -> CJKFont | None:
    """The CJK font the Chinese figures are drawn in, registered with matplotlib (whose font list
    may predate its install); None when the machine has none."""
    from matplotlib import font_manager

    fonts = font_manager.fontManager.ttflist
    for path in _candidates():
        if not path.lower().endswith((".ttf", ".ttc", ".otf")) or not _has_chars(path, _PROBE):
            continue
        if all(Path(f.fname) != Path(path) for f in fonts):
            font_manager.fontManager.addfont(path)
        name = _ft2font(path).family_name
        entry = next(f for f in fonts if Path(f.fname) == Path(path) and f.name == name)
        # The font stands in for every weight (a CJK font often has one, "medium"), so that no
        # lookup logs matplotlib's "Failed to find font weight" warning into a notebook.
        fonts.extend(dataclasses.replace(entry, weight=w) for w in range(100, 1000, 100))
        return CJKFont(name, path)
    return None


# ---------------------------------------------------------------- figures

_MATH = re.compile(r"(?<!\\)\$.*?(?<!\\)\$")


def _drawable(text: str, font: CJKFont, fallback: str | None) -> bool:
    """Can ``text``'s characters outside math be drawn: by the CJK font, or (in plain text, where
    matplotlib falls back glyph by glyph) by the text's own font?"""
    if _MATH.search(text):
        return _has_chars(font.path, _MATH.sub("", text).replace("\n", ""))
    return all(
        _has_chars(font.path, c) or (fallback is not None and _has_chars(fallback, c))
        for c in set(text) - {"\n"}
    )


@cache
def _translated_formatter() -> type:
    """A tick formatter that looks the labels another one makes up in a mapping (the class is
    made on first use: matplotlib is imported only when a figure is drawn)."""
    from matplotlib.ticker import Formatter

    class TranslatedFormatter(Formatter):
        def __init__(self, inner: Any, mapping: dict[str, str]) -> None:
            self.inner, self.mapping = inner, mapping

        def __call__(self, x: float, pos: int | None = None) -> str:
            s = self.inner(x, pos)
            return self.mapping.get(s, s)

        def format_ticks(self, values: Sequence[float]) -> list[str]:
            return [self.mapping.get(s, s) for s in self.inner.format_ticks(values)]

        def set_locs(self, locs: Sequence[float]) -> None:
            self.inner.set_locs(locs)

        def get_offset(self) -> str:
            return self.inner.get_offset()

        def set_axis(self, axis: Any) -> None:
            super().set_axis(axis)
            self.inner.set_axis(axis)

    return TranslatedFormatter


def chinese_copy(fig: Any, font: CJKFont | None = None) -> tuple[Any, list[str]]:
    """A copy of ``fig`` with its words in Chinese (titles, axis labels, legend entries,
    annotations, texts, tick labels), each set in ``font`` (default ``cjk_font()``), and the
    strings it left in English: without a translation, or with a character the fonts lack."""
    from matplotlib.text import Text

    font = font or cjk_font()
    manager = fig.canvas.manager
    fig.canvas.manager = None  # the copy is not one of pyplot's figures (nothing shows it again)
    try:
        out = copy.deepcopy(fig)
    finally:
        fig.canvas.manager = manager
    out.draw_without_rendering()  # the tick labels, as the formatters make them
    left: list[str] = []

    def chinese(text: str, fallback: str | None) -> str:
        zh_text = translate(text)
        if zh_text is None:
            left.append(text)
            return text
        if zh_text != text and (font is None or not _drawable(zh_text, font, fallback)):
            left.append(text)
            return text
        return zh_text

    ticks: set[int] = set()
    for ax in out.axes:
        for axis in (ax.xaxis, ax.yaxis):
            labels = axis.get_ticklabels(which="both")
            ticks.update(id(t) for t in labels)
            fallback = _font_file(labels[0]) if labels else None
            mapping = {t.get_text(): chinese(t.get_text(), fallback) for t in labels if t.get_text()}
            mapping = {k: v for k, v in mapping.items() if k != v}
            if mapping and font is not None:
                translated = _translated_formatter()
                axis.set_major_formatter(translated(axis.get_major_formatter(), mapping))
                axis.set_minor_formatter(translated(axis.get_minor_formatter(), mapping))
                axis.set_tick_params(which="both", labelfontfamily=_families(labels[0], font, ""))
    for text in out.findobj(Text):
        s = text.get_text()
        if id(text) in ticks or not text.get_visible() or not s.strip():
            continue
        zh_text = chinese(s, _font_file(text))
        if zh_text != s and font is not None:
            text.set_text(zh_text)
            text.set_fontfamily(_families(text, font, zh_text))
    return out, left


def _font_file(text: Any) -> str | None:
    from matplotlib import font_manager

    try:
        return font_manager.findfont(text.get_fontproperties(), fallback_to_default=False)
    except ValueError:
        return None


def _families(text: Any, font: CJKFont, s: str) -> list[str]:
    """The Chinese text's font families: its own first, then the CJK font, glyph by glyph; in
    math text, whose letters outside the math come from the first font alone, the CJK font first."""
    own = list(text.get_fontfamily())
    return [font.name, *own] if _MATH.search(s) else [*own, font.name]


def _png(fig: Any) -> bytes:
    """The figure as IPython's inline backend draws it: PNG at the figure's dpi, cropped to what
    it draws; no version text in the file, so that the same figure gives the same bytes; in 256
    colours (``_compact``)."""
    buf = io.BytesIO()
    fig.savefig(
        buf,
        format="png",
        dpi=fig.dpi,
        bbox_inches="tight",
        facecolor=fig.get_facecolor(),
        edgecolor=fig.get_edgecolor(),
        metadata={"Software": None},
    )
    return _compact(buf.getvalue())


def _compact(png: bytes) -> bytes:
    """An opaque PNG in a palette of 256 colours (median cut, no dithering): a third of the bytes
    for the book's figures, whose flat colours and anti-aliased edges it keeps to the eye. A
    transparent image, or one that would not shrink, is returned as it is."""
    from PIL import Image

    image = Image.open(io.BytesIO(png))
    if image.mode != "RGBA" or image.getextrema()[3] != (255, 255):
        return png
    palette = image.convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    buf = io.BytesIO()
    palette.save(buf, format="PNG", optimize=True)
    return buf.getvalue() if buf.tell() < len(png) else png


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


_FONT_TROUBLE = re.compile(r"glyph|font", re.I)


def _quiet_chinese(fig: Any, font: CJKFont) -> tuple[bytes, list[str], list[str]]:
    """The Chinese copy of ``fig`` drawn (``chinese_copy``, ``_png``): its PNG, the strings left
    in English, and the font trouble matplotlib warned or logged meanwhile (a missing glyph, a
    font not found), caught so that none reaches the notebook's stderr. Other warnings, about the
    figure itself, the English drawing has already given."""
    logger, handler = logging.getLogger("matplotlib"), _Records()
    logger.addHandler(handler)
    propagate, logger.propagate = logger.propagate, False
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            copy_, left = chinese_copy(fig, font)
            png = _png(copy_)
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
    said = [str(w.message) for w in caught] + handler.messages
    return png, left, [m for m in dict.fromkeys(said) if _FONT_TROUBLE.search(m)]


def _alt(fig: Any, words: Callable[[str], str]) -> str:
    """The figure's titles (else its axis labels), through ``words``: the image's alt text."""
    titles = [fig.get_suptitle()] + [
        ax.get_title(loc) for ax in fig.axes for loc in ("left", "center", "right")
    ]
    found = [t for t in titles if t.strip()]
    if not found:
        found = [label for ax in fig.axes for label in (ax.get_xlabel(), ax.get_ylabel()) if label.strip()]
    said = "; ".join(" ".join(words(t).split()) for t in dict.fromkeys(found))
    return said or words("figure")


def _img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt, quote=True)}">'


def _alt_zh(text: str) -> str:
    out = translate(text)
    return text if out is None else out


def figure_html(fig: Any) -> str:
    """``fig`` in both editions: the English PNG and the Chinese one, each in its ``kvt-lang-*``
    part, after ``EDITION_CSS``. Without a CJK font, or where a word cannot be drawn in Chinese,
    the Chinese part shows the English words (strict mode: an EditionError); the alt texts are
    the same either way, so the output compares equal on every machine once its images are
    sanitized. Anything but a matplotlib Figure is a TypeError naming ``fig``."""
    from matplotlib.figure import Figure

    if not isinstance(fig, Figure):
        raise TypeError(f"fig: expected a matplotlib Figure, got {type(fig).__name__}")
    en = _png(fig)
    font = cjk_font()
    where = "Chinese figure " + repr(_alt(fig, str))
    if font is None and strict():
        raise EditionError(NO_FONT)
    zh_png = en
    if font is not None:
        drawn, left, problems = _quiet_chinese(fig, font)
        missing(left, where)
        if problems and strict():
            raise EditionError(f"{where}: " + "; ".join(problems))
        if not problems:
            zh_png = drawn
    return both_editions(_img(en, _alt(fig, str)), _img(zh_png, _alt(fig, _alt_zh)))


def _html_then_no_png(fig: Any) -> str:
    """The HTML formatter: it runs before IPython's PNG formatter for the same figure, and takes
    that one out again if ``%matplotlib inline`` put it back."""
    from IPython import get_ipython
    from matplotlib.figure import Figure

    shell = get_ipython()
    if shell is not None:
        shell.display_formatter.formatters["image/png"].pop(Figure, None)
    return figure_html(fig)


def register_figure_formatter(shell: Any = None) -> bool:
    """Under IPython with matplotlib's inline backend: figures display as ``figure_html`` (and no
    bare PNG). False, and nothing changed, anywhere else."""
    try:
        import matplotlib
        from IPython import get_ipython
    except ImportError:
        return False
    shell = shell or get_ipython()
    # the backend as set (ipykernel's MPLBACKEND), without resolving an unset one
    backend = matplotlib.get_backend(auto_select=False) or env_text("MPLBACKEND") or ""
    if shell is None or "inline" not in backend:
        return False
    import matplotlib_inline.backend_inline  # noqa: F401 - its IPython set-up runs now, not later
    from matplotlib.figure import Figure

    formatters = shell.display_formatter.formatters
    formatters["text/html"].for_type(Figure, _html_then_no_png)
    formatters["image/png"].pop(Figure, None)
    return True


# ---------------------------------------------------------------- the Makefile's checks


def _errors(path: str) -> list[str]:
    """The EditionError outputs stored in the notebook at ``path`` (a figure's formatter cannot
    fail its cell: IPython stores what it raised as an error output). A file that cannot be read
    as a notebook is a ValueError naming it (an OSError where it cannot be read at all)."""
    try:
        nb = json.loads(Path(path).read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{path}: expected a notebook, got a file that is not UTF-8 ({exc.reason})"
        ) from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: expected a notebook, got invalid JSON ({exc})") from None
    cells = nb.get("cells") if isinstance(nb, dict) else None
    if not isinstance(cells, list) or not all(isinstance(c, dict) for c in cells):
        raise ValueError(f"{path}: expected a notebook (a JSON object with a list of cells), got none")
    code = [c for c in cells if c.get("cell_type") == "code"]
    return [
        f"{path}: code cell {i}: {out.get('ename')}: {out.get('evalue')}"
        for i, cell in enumerate(code)
        for out in cell.get("outputs", [])
        if isinstance(out, dict)
        and out.get("output_type") == "error"
        and out.get("ename") == EditionError.__name__
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """``font``: print the CJK font the Chinese figures use, or a one-line error (exit 1).
    ``check NOTEBOOK...``: name each EditionError stored in the notebooks (exit 1 if any)."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["font"]:
        font = cjk_font()
        if font is None:
            print(f"error: {NO_FONT}", file=sys.stderr)
            return 1
        print(f"CJK font for the Chinese figures: {font.name} ({font.path})")
        return 0
    if args[:1] == ["check"]:
        if not args[1:]:
            print("error: check: expected at least one NOTEBOOK, got none", file=sys.stderr)
            return 2
        try:
            found = [line for path in args[1:] for line in _errors(path)]
        except (OSError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        for line in found:
            print(line, file=sys.stderr)
        return 1 if found else 0
    print("usage: python -m kvtutor.book.editions font | check NOTEBOOK...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
