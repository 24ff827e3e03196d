"""Every chapter runs alone, as in Colab or Binder: from a copy outside the repository, in a kernel
where the book's tools (myst-nb, Sphinx, Jupyter Book, nbval) cannot be imported. What it may use
is the package (``kvtutor[notebooks]``) and its data, read through ``importlib.resources``.

These are the static checks; ``make standalone`` (part of ``make test``) executes every chapter
that way, in a venv of its own with only ``kvtutor[notebooks]`` (``tools/run_standalone.py``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parent.parent / "book"
NOTEBOOKS = sorted(BOOK.glob("*.ipynb"))
BLOCKED = ("myst_nb", "sphinx", "jupyter_book", "nbval", "docutils")


def code_cells(path: Path) -> list[str]:
    nb = json.loads(path.read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_chapter_needs_no_book_tools_and_no_paths(path):
    cells = code_cells(path)
    assert 'find_spec("kvtutor") is None' in cells[0], "the first code cell installs kvtutor where missing"
    assert "kvtutor[notebooks]" in cells[0]
    code = "\n".join(cells)
    for tool in BLOCKED:
        assert not re.search(rf"^\s*(from|import)\s+{tool}\b", code, re.M), f"imports {tool}"
    assert "sys.path" not in code
    assert not re.search(r"""["'](\.\./|data/)""", code), "a path relative to the notebook"


def test_the_notebooks_extra_and_binder_install_what_the_chapters_import():
    import tomllib

    extras = tomllib.loads((BOOK.parent / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "kvtutor[torch,plots]" in extras["notebooks"]
    binder = (BOOK.parent / "binder" / "requirements.txt").read_text()
    assert "-e .[notebooks]" in binder and "whl/cpu" in binder
