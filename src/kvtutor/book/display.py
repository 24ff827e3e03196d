"""Small helpers for the book's notebooks: a reproducible setup (which makes figures display in both
editions, ``kvtutor.book.editions``), showing the package's source, and tables printed in both
editions (``table``, ``markdown_table``: the English Markdown, and HTML with the Chinese cells from
``kvtutor.book.labels``)."""

from __future__ import annotations

import html
import importlib.abc
import importlib.util
import inspect
import random
import re
import sys
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..text import TEXT_WIDTH
from ..validate import check_int
from .editions import both_editions, missing, register_figure_formatter
from .labels import translate

__all__ = [
    "setup_notebook",
    "GLUE_PREFIX",
    "GLUE_FORMAT",
    "glue",
    "shown",
    "source",
    "show_source",
    "shape_str",
    "without_pragmas",
    "without_chapter_tag",
    "Table",
    "table",
    "markdown_table",
]


def setup_notebook(seed: int = 0) -> None:
    """Seed every generator and fix print options, so stored outputs are reproducible; in a
    notebook with inline figures, figures display in both editions (``editions.figure_html``)."""
    seed = check_int("seed", seed, 0, 2**32 - 1)  # what np.random.seed takes
    random.seed(seed)
    np.random.seed(seed)
    np.set_printoptions(precision=3, suppress=True, linewidth=TEXT_WIDTH, floatmode="fixed")
    seed_torch_on_import(seed)
    try:
        import matplotlib as mpl
    except ImportError:
        return
    mpl.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "figure.figsize": (6.4, 3.6)})
    register_figure_formatter()


class _SeedTorchOnImport(importlib.abc.MetaPathFinder):
    """Seeds torch as its import ends: a chapter that never uses torch does not pay its 2 s import,
    and one that does draws the same numbers as if ``torch.manual_seed`` had run at setup."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "torch":
            return None
        sys.meta_path.remove(self)  # one import, and the search below must not find this finder
        spec = importlib.util.find_spec("torch")
        if spec is not None and spec.loader is not None:
            exec_module, seed = spec.loader.exec_module, self.seed

            def exec_and_seed(module: Any) -> None:
                exec_module(module)
                module.manual_seed(seed)

            spec.loader.exec_module = exec_and_seed  # type: ignore[method-assign]
        return spec


def seed_torch_on_import(seed: int) -> None:
    """``torch.manual_seed(seed)`` now if torch is imported, else as soon as it is."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _SeedTorchOnImport)]
    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(seed)
    elif importlib.util.find_spec("torch") is not None:
        sys.meta_path.insert(0, _SeedTorchOnImport(seed))


# myst-nb's glue format: a value glued with display=False is stored under these MIME types, which
# Jupyter Book reads and notebook front ends leave undrawn; metadata["scrapbook"] names it.
GLUE_PREFIX = "application/papermill.record/"


#: The formats a glued float may be shown with: fixed, exponent or percent, with its digits.
GLUE_FORMAT = re.compile(r",?\.(\d+)([fe%])")


def shown(value: float, fmt: str) -> float:
    """``value`` rounded to what ``format(value, fmt)`` shows: 0.5962 and ".2f" give 0.6, and
    0.9537 and ".0%" give 0.95, so that a glued number holds no digits the page leaves out."""
    if not GLUE_FORMAT.fullmatch(fmt):
        raise ValueError(f"fmt: expected a fixed, exponent or percent format like '.2f', got {fmt!r}")
    text = format(value, fmt).replace(",", "")
    if text.endswith("%"):
        return round(float(text[:-1]) / 100, int(fmt.lstrip(",.")[:-1]) + 2)
    return float(text)


def glue(name: str, value: Any, display: bool = True, *, fmt: str | None = None) -> None:
    """Keep ``value`` under ``name`` for the book's prose, in myst-nb's glue format.

    The output is the one ``myst_nb.glue`` writes, made here so that it is the same in every
    kernel: the book's (with myst-nb) and a reader's (Colab, Binder, a laptop without the book's
    tools), whose outputs ``make standalone`` compares with the stored ones. A float is glued as
    the page shows it: ``fmt=".2f"`` for ``{glue:text}`key:.2f``` rounds it (``shown``), so its
    last bits, which differ from CPU to CPU, never reach the stored output.
    """
    from IPython.core.formatters import format_display_data
    from IPython.display import display as show

    if fmt is not None:
        value = shown(value, fmt)
    bundle, metadata = format_display_data(value)
    prefix = "" if display else GLUE_PREFIX
    metadata["scrapbook"] = {"name": name, "mime_prefix": prefix}
    show({prefix + k: v for k, v in bundle.items()}, raw=True, metadata=metadata)


def source(obj: Any) -> str:
    """The real source code of a function or class in the package (never a pasted copy)."""
    return textwrap.dedent(inspect.getsource(obj))


# A trailing comment that speaks to a tool, not to the reader: ruff's "fmt: skip" (which keeps a
# hand-wrapped line the way the book's column needs it) and its "noqa" (with or without codes).
_PRAGMA = re.compile(r"\s*#\s*(?:fmt:\s*skip|noqa\b[:\w, ]*)\s*$")


def without_pragmas(code: str) -> str:
    """``code`` without trailing ``# fmt: skip`` and ``# noqa`` comments; every other character kept."""
    return "\n".join(_PRAGMA.sub("", line) for line in code.split("\n"))


# The last paragraph of a displayed function's docstring names the chapters that show it, for the
# package's readers (tests/test_architecture.py checks it both ways); the book's reader is there.
_CHAPTER_TAG = re.compile(r"\n\n[ \t]*The book shows this in .*?\.(\n[ \t]*)?(?=\"\"\"$)", re.S | re.M)
_ONE_LINE = re.compile(r'^"""([^\n]*)\n[ \t]*"""$')


def without_chapter_tag(code: str) -> str:
    """``code`` with its docstring's closing paragraph on the chapters that show it removed (a
    docstring left with one line closes on it); every other character kept."""
    start = code.find('"""')
    end = code.find('"""', start + 3)
    if start < 0 or end < 0:
        return code
    doc, removed = _CHAPTER_TAG.subn(lambda m: m.group(1) or "", code[start : end + 3], count=1)
    if not removed:
        return code
    return code[:start] + _ONE_LINE.sub(r'"""\1"""', doc) + code[end + 3 :]


def show_source(*objs: Any) -> Any:
    """Display the source of package functions as a highlighted code block in a notebook.

    The code is the real source (``source``), less the formatter's and linter's pragma comments
    and the docstring's note of the chapters that show it.
    """
    from IPython.display import Markdown

    blocks = "\n\n".join(without_chapter_tag(without_pragmas(source(obj))).rstrip() for obj in objs)
    return Markdown(f"```python\n{blocks}\n```")


def shape_str(arr: Any) -> str:
    """'[3, 8]' for an array of shape (3, 8)."""
    return "[" + ", ".join(str(n) for n in np.shape(arr)) + "]"


# ---------------------------------------------------------------- tables

_ALIGN = {":-": "text-left", "-:": "text-right", "::": "text-center"}
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_CODE = re.compile(r"`([^`]+)`")


def _inline(cell: str) -> str:
    """A cell's Markdown (``**bold**``, ``code``) as HTML, everything else escaped."""
    out = html.escape(cell, quote=False)
    out = _CODE.sub(r"<code>\1</code>", out)
    return _BOLD.sub(r"<strong>\1</strong>", out)


def _html_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: Sequence[str]) -> str:
    """The table as Sphinx writes a Markdown table in the book's theme (the same classes)."""

    def row(cells: Sequence[str], tag: str, parity: str) -> str:
        extra = "head " if tag == "th" else ""
        out = []
        for cell, side in zip(cells, align, strict=True):
            cls = f"{extra}{_ALIGN.get(side, '')}".strip()
            attr = f' class="{cls}"' if cls else ""
            out.append(f"<{tag}{attr}><p>{_inline(cell)}</p></{tag}>")
        return f'<tr class="row-{parity}">' + "".join(out) + "</tr>"

    body = "".join(row(r, "td", "even" if i % 2 == 0 else "odd") for i, r in enumerate(rows))
    return (
        '<div class="pst-scrollable-table-container"><table class="table">'
        f"<thead>{row(header, 'th', 'odd')}</thead><tbody>{body}</tbody></table></div>"
    )


@dataclass(frozen=True)
class Table:
    """A table in both editions: ``markdown`` (English) is the text/markdown nbval compares and
    the plain text; the HTML holds the English and the Chinese table (``EDITION_CSS``)."""

    markdown: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    align: tuple[str, ...]
    zh_header: tuple[str, ...]
    zh_rows: tuple[tuple[str, ...], ...]

    @property
    def html(self) -> str:
        en = _html_table(self.header, self.rows, self.align)
        return both_editions(en, _html_table(self.zh_header, self.zh_rows, self.align))

    def _repr_markdown_(self) -> str:
        return self.markdown

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return self.markdown


def _chinese(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    zh_header: Sequence[str] | None,
    zh_rows: Sequence[Sequence[Any]] | None,
) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    """The Chinese header and rows: those given, else each cell through ``labels.translate``
    (the untranslated named together: an EditionError in strict mode)."""
    left: list[str] = []

    def cell(s: str) -> str:
        out = translate(s)
        if out is None:
            left.append(s)
            return s
        return out

    zh_h = tuple(str(c) for c in zh_header) if zh_header is not None else tuple(cell(c) for c in header)
    if zh_rows is not None:
        zh_r = tuple(tuple(str(c) for c in r) for r in zh_rows)
    else:
        zh_r = tuple(tuple(cell(c) for c in r) for r in rows)
    if len(zh_h) != len(header):
        raise ValueError(f"zh_header: expected {len(header)} cells (one per header cell), got {len(zh_h)}")
    if [len(r) for r in zh_r] != [len(r) for r in rows]:
        raise ValueError(
            f"zh_rows: expected {len(rows)} rows of {len(header)} cells (the shape of rows), got "
            f"{len(zh_r)} rows of {sorted({len(r) for r in zh_r})} cells"
        )
    missing(left, "Chinese table " + repr(" | ".join(header)))
    return zh_h, zh_r


def table(
    header: Sequence[Any],
    rows: Iterable[Sequence[Any]],
    *,
    align: Sequence[str] | None = None,
    zh_header: Sequence[Any] | None = None,
    zh_rows: Sequence[Sequence[Any]] | None = None,
) -> Table:
    """A table of ``rows`` under ``header`` (cells printed with ``str``) in both editions.

    The Markdown is written as ``| a | b |`` lines under a ``| --- |`` rule (``align``: one of
    "---", ":--", "--:", ":-:" per column, as in Markdown); a "|" in a cell is escaped, and a
    cell of more than one line, a row of another width or another rule is refused (a
    TypeError/ValueError naming ``header``, ``rows`` or ``align``). The Chinese cells are
    ``zh_header`` and ``zh_rows`` where given, else the English ones through
    ``kvtutor.book.labels``.
    """
    head, body, sides = _check_table(header, rows, align)
    if zh_header is not None:
        zh_header = _cells_of("zh_header", zh_header)
    if zh_rows is not None:
        zh_rows = _check_table(header, zh_rows, None, "zh_rows")[1]

    def line(cells: Sequence[str]) -> str:  # a "|" in a cell is escaped: it does not end the cell
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    lines = [line(head), "|" + "".join(f" {a} |" for a in sides)] + [line(r) for r in body]
    zh_h, zh_r = _chinese(head, body, zh_header, zh_rows)
    return Table("\n".join(lines), head, body, tuple(_side(a) for a in sides), zh_h, zh_r)


#: a column's rule in a Markdown table: dashes, a colon at either end for the alignment
_RULE = re.compile(r":?-+:?")


def _cells_of(name: str, cells: Any) -> tuple[str, ...]:
    """A row of cells -> its cells printed with ``str``, each one line, or an error naming ``name``."""
    if isinstance(cells, (str, bytes)) or not isinstance(cells, Sequence):
        raise TypeError(f"{name}: expected a sequence of cells, got {type(cells).__name__}")
    out = tuple(str(c) for c in cells)
    for j, cell in enumerate(out):
        if "\n" in cell or "\r" in cell:
            raise ValueError(
                f"{name}: cell {j}: expected one line (a Markdown table row is one line), got {cell!r}"
            )
    return out


def _check_table(
    header: Any, rows: Any, align: Any, rows_name: str = "rows"
) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...], tuple[str, ...]]:
    """``table``'s header, rows and align -> (header cells, rows of cells, rules), each row as wide
    as the header and each rule like ``---``, ``:--``, ``--:`` or ``:-:``; else a TypeError or
    ValueError naming the argument."""
    head = _cells_of("header", header)
    if isinstance(rows, (str, bytes)) or not isinstance(rows, Iterable):
        raise TypeError(f"{rows_name}: expected rows of cells, got {type(rows).__name__}")
    body = tuple(_cells_of(f"{rows_name}: row {i}", r) for i, r in enumerate(rows))
    why = "one per header cell" if rows_name == "rows" else "the shape of rows"
    for i, r in enumerate(body):
        if len(r) != len(head):
            raise ValueError(f"{rows_name}: row {i}: expected {len(head)} cells ({why}), got {len(r)}")
    if align is None:
        return head, body, ("---",) * len(head)
    if isinstance(align, (str, bytes)) or not isinstance(align, Sequence):
        raise TypeError(
            f"align: expected one rule per column, such as ['---', '--:'], got {type(align).__name__}"
        )
    for a in align:
        if not isinstance(a, str):
            raise TypeError(
                f"align: expected rules such as '---', ':--', '--:' or ':-:', got {type(a).__name__} {a!r}"
            )
        if not _RULE.fullmatch(a.strip()):
            raise ValueError(f"align: expected rules such as '---', ':--', '--:' or ':-:', got {a!r}")
    if len(align) != len(head):
        raise ValueError(f"align: expected {len(head)} rules (one per header cell), got {len(align)}")
    return head, body, tuple(a.strip() for a in align)


def _side(rule: str) -> str:
    """':---:' -> '::', '---:' -> '-:', ':---' -> ':-', '---' -> '--'."""
    rule = rule.strip()
    return rule[0] + rule[-1] if len(rule) >= 2 else "--"


def _cells(line: str) -> tuple[str, ...]:
    """A Markdown table line -> its cells, split at every "|" that is not escaped ("\\|" is a "|"
    inside a cell)."""
    inner = line.strip().removeprefix("|")
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    return tuple(c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", inner))


def markdown_table(
    text: str, *, zh_header: Sequence[Any] | None = None, zh_rows: Sequence[Sequence[Any]] | None = None
) -> Table:
    """``table`` from a Markdown table as code writes it (header, rule, rows); its Markdown is
    ``text`` itself, so a stored text/markdown output stays as it was."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if len(lines) < 2 or not set(lines[1]) <= set("|:- "):
        raise ValueError("a Markdown table needs a header line and a rule line (|---|---:|)")
    head, sides = _cells(lines[0]), tuple(_side(a) for a in _cells(lines[1]))
    body = tuple(_cells(line) for line in lines[2:])
    if len(sides) != len(head) or any(len(r) != len(head) for r in body):
        raise ValueError(f"every line of the table needs {len(head)} cells")
    zh_h, zh_r = _chinese(head, body, zh_header, zh_rows)
    return Table(text, head, body, sides, zh_h, zh_r)
