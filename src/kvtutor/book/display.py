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


def glue(name: str, value: Any, display: bool = True) -> None:
    """Keep ``value`` under ``name`` for the book's prose: myst-nb's ``glue`` where myst-nb is
    installed (building the book, nbval); in a plain kernel (Colab, Binder, a laptop without the
    book's tools) the value is only shown, if ``display``."""
    try:
        from myst_nb import glue as myst_glue
    except ImportError:
        if display:
            from IPython.display import display as show

            show(value)
        return
    myst_glue(name, value, display)


def source(obj: Any) -> str:
    """The real source code of a function or class in the package (never a pasted copy)."""
    return textwrap.dedent(inspect.getsource(obj))


# A trailing comment that speaks to a tool, not to the reader: ruff's "fmt: skip" (which keeps a
# hand-wrapped line the way the book's column needs it) and its "noqa" (with or without codes).
_PRAGMA = re.compile(r"\s*#\s*(?:fmt:\s*skip|noqa\b[:\w, ]*)\s*$")


def without_pragmas(code: str) -> str:
    """``code`` without trailing ``# fmt: skip`` and ``# noqa`` comments; every other character kept."""
    return "\n".join(_PRAGMA.sub("", line) for line in code.split("\n"))


def show_source(*objs: Any) -> Any:
    """Display the source of package functions as a highlighted code block in a notebook.

    The code is the real source (``source``), less the formatter's and linter's pragma comments.
    """
    from IPython.display import Markdown

    blocks = "\n\n".join(without_pragmas(source(obj)).rstrip() for obj in objs)
    return Markdown(f"```python\n{blocks}\n```")


def shape_str(arr: Any) -> str:
    """'[3, 8]' for an array of shape (3, 8)."""
    return "[" + ", ".join(str(n) for n in np.shape(arr)) + "]"
