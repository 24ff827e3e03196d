"""The notebooks' display helpers: reproducible setup, and package source shown without tool pragmas."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil

import numpy as np
import pytest

import kvtutor
from kvtutor.book import display


def _package_functions_with_pragmas():
    found = []
    for info in pkgutil.walk_packages(kvtutor.__path__, "kvtutor."):
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # torch-only modules where torch is missing
            continue
        for _, obj in inspect.getmembers(module, inspect.isfunction):
            lines = inspect.getsource(obj).splitlines()
            if obj.__module__ == module.__name__ and any(display._PRAGMA.search(line) for line in lines):
                found.append(obj)
    return found


def test_without_pragmas_drops_only_tool_comments():
    code = "x = f(\n    1, 2,\n)  # fmt: skip\nimport y  # noqa: F401\nz = 3  # a comment the reader needs\n"
    assert (
        display.without_pragmas(code)
        == "x = f(\n    1, 2,\n)\nimport y\nz = 3  # a comment the reader needs\n"
    )


def test_shown_source_is_the_real_source_less_pragmas():
    functions = _package_functions_with_pragmas()
    assert len(functions) >= 5  # the wrapped functions the book displays
    for fn in functions:
        real = display.source(fn)
        shown = display.show_source(fn).data
        assert shown.startswith("```python\n") and shown.endswith("\n```")
        body = shown.removeprefix("```python\n").removesuffix("\n```")
        assert "fmt: skip" not in body and "The book shows this in" not in body
        # comments and the docstring's chapter note only
        assert ast.dump(_without_docstring(body)) == ast.dump(_without_docstring(real)), fn.__qualname__
        assert body.splitlines()[0] == real.splitlines()[0]


def _without_docstring(code: str) -> ast.Module:
    tree = ast.parse(code)
    fn = tree.body[0]
    if ast.get_docstring(fn) is not None:
        fn.body = fn.body[1:]
    return tree


def test_shown_docstrings_lose_only_the_chapter_note():
    tagged = (
        'def f():\n    """Sum.\n\n    More.\n\n    The book shows this in "A" and\n    "B".\n'
        + '    """\n    return 1\n'
    )
    want = 'def f():\n    """Sum.\n\n    More.\n    """\n    return 1\n'
    assert display.without_chapter_tag(tagged) == want
    short = 'def f():\n    """Sum.\n\n    The book shows this in "A".\n    """\n    s = """x"""\n'
    assert display.without_chapter_tag(short) == 'def f():\n    """Sum."""\n    s = """x"""\n'
    plain = 'def f():\n    """Sum: no note.\n    """\n'
    assert display.without_chapter_tag(plain) == plain
    for name in ("generate", "decode_step", "forward"):
        shown = display.show_source(getattr(kvtutor.GPT2Model, name)).data
        assert "The book shows this in" not in shown and shown.count('"""') >= 2


def test_setup_notebook_prints_arrays_within_the_text_width():
    display.setup_notebook()
    lines = str(np.arange(100.0) * 1.5).splitlines()
    assert len(lines) > 1 and max(map(len, lines)) <= kvtutor.text.TEXT_WIDTH


@pytest.fixture(autouse=True)
def _restore_print_options():
    saved = np.get_printoptions()
    yield
    np.set_printoptions(**saved)
