"""Small helpers for the book's notebooks: a reproducible setup and showing the package's source."""

from __future__ import annotations

import inspect
import random
import textwrap
from typing import Any

import numpy as np


def setup_notebook(seed: int = 0) -> None:
    """Seed every generator and fix print options, so stored outputs are reproducible."""
    random.seed(seed)
    np.random.seed(seed)
    np.set_printoptions(precision=3, suppress=True, linewidth=100, floatmode="fixed")
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


def source(obj: Any) -> str:
    """The real source code of a function or class in the package (never a pasted copy)."""
    return textwrap.dedent(inspect.getsource(obj))


def show_source(*objs: Any) -> Any:
    """Display the source of package functions as a highlighted code block in a notebook."""
    from IPython.display import Markdown

    blocks = "\n\n".join(source(obj).rstrip() for obj in objs)
    return Markdown(f"```python\n{blocks}\n```")


def shape_str(arr: Any) -> str:
    """'[3, 8]' for an array of shape (3, 8)."""
    return "[" + ", ".join(str(n) for n in np.shape(arr)) + "]"
