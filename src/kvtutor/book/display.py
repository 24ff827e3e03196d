"""Small helpers for the book's notebooks: a reproducible setup and showing the package's source."""

from __future__ import annotations

import inspect
import random
import re
import textwrap
from typing import Any

import numpy as np

from ..text import TEXT_WIDTH


def setup_notebook(seed: int = 0) -> None:
    """Seed every generator and fix print options, so stored outputs are reproducible."""
    random.seed(seed)
    np.random.seed(seed)
    np.set_printoptions(precision=3, suppress=True, linewidth=TEXT_WIDTH, floatmode="fixed")
    try:
        import torch
    except ImportError:
        pass
    else:
        torch.manual_seed(seed)
    try:
        import matplotlib as mpl
    except ImportError:
        return
    mpl.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "figure.figsize": (6.4, 3.6)})


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
