"""The notebooks' display helpers: reproducible setup, and package source shown without tool pragmas."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import subprocess
import sys

import numpy as np
import pytest

import kvtutor
from kvtutor.book import display


def _package_functions_with_pragmas():
    """Every package function whose source holds a tool's pragma or whose docstring names the
    chapters that show it: what ``show_source`` must strip before the page shows it."""
    found = []
    for info in pkgutil.walk_packages(kvtutor.__path__, "kvtutor."):
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # torch-only modules where torch is missing
            continue
        for _, obj in inspect.getmembers(module, inspect.isfunction):
            lines = inspect.getsource(obj).splitlines()
            tagged = "The book shows this in" in (obj.__doc__ or "")
            if obj.__module__ == module.__name__ and (
                tagged or any(display._PRAGMA.search(line) for line in lines)
            ):
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


SEEDED_LATER = """
import sys
from kvtutor.book.display import setup_notebook
setup_notebook(SEED)
assert "torch" not in sys.modules, "setup_notebook imported torch"
import torch
later = torch.rand(4).tolist()
torch.manual_seed(SEED)
print(later == torch.rand(4).tolist(), later == torch.rand(4).tolist())
setup_notebook(SEED)  # torch imported: seeded at once, and no second hook is left behind
again = torch.rand(4).tolist()
torch.manual_seed(SEED)
print(again == torch.rand(4).tolist(), sum(type(f).__name__ == "_SeedTorchOnImport" for f in sys.meta_path))
"""


@pytest.mark.parametrize("seed", [0, 7])
def test_setup_notebook_seeds_torch_when_a_chapter_first_imports_it(seed):
    pytest.importorskip("torch")
    out = subprocess.run(
        [sys.executable, "-c", SEEDED_LATER.replace("SEED", str(seed))], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False", "True", "0"]


@pytest.fixture(autouse=True)
def _restore_print_options():
    saved = np.get_printoptions()
    yield
    np.set_printoptions(**saved)


# ---------------------------------------------------------------- tables: bad cells and rules


def _zh(header, rows):
    """The Chinese cells given, so that no label look-up is involved."""
    return {"zh_header": list(header), "zh_rows": [list(r) for r in rows]}


def test_a_pipe_in_a_cell_is_escaped_and_read_back():
    header, rows = ["name", "value"], [["a | b", 1], ["`x|y`", 2]]
    t = display.table(header, rows, **_zh(header, rows))
    assert t.markdown.splitlines()[2:] == ["| a \\| b | 1 |", "| `x\\|y` | 2 |"]
    assert all(line.count("|") - line.count("\\|") == 3 for line in t.markdown.splitlines())
    assert t.rows == (("a | b", "1"), ("`x|y`", "2")) and "a | b" in t.html
    back = display.markdown_table(t.markdown, **_zh(header, rows))
    assert back.rows == t.rows and back.markdown == t.markdown


def test_a_table_without_pipes_in_its_cells_is_written_as_before():
    t = display.table(
        ["a", "b"], [[1, 2]], align=["---", "--:"], zh_header=["甲", "乙"], zh_rows=[["1", "2"]]
    )
    assert t.markdown == "| a | b |\n| --- | --: |\n| 1 | 2 |"
    assert t.align == ("--", "-:")


BAD_TABLES = [
    ({"align": ["center", "---"]}, ValueError, r"^align: expected rules such as '---', .*, got 'center'"),
    ({"align": [5, "---"]}, TypeError, r"^align: expected rules such as .*, got int 5"),
    ({"align": "---"}, TypeError, r"^align: expected one rule per column, such as \['---', '--:'\], got str"),
    ({"align": ["---"]}, ValueError, r"^align: expected 2 rules \(one per header cell\), got 1"),
    ({"rows": [["a\nb", 1]]}, ValueError, r"^rows: row 0: cell 0: expected one line \(a Markdown table row"),
    ({"rows": [[1, 2], [3]]}, ValueError, r"^rows: row 1: expected 2 cells \(one per header cell\), got 1"),
    ({"rows": ["ab"]}, TypeError, r"^rows: row 0: expected a sequence of cells, got str"),
    ({"rows": 5}, TypeError, r"^rows: expected rows of cells, got int"),
    ({"header": "ab"}, TypeError, r"^header: expected a sequence of cells, got str"),
    ({"header": ["a", "b\r"]}, ValueError, r"^header: cell 1: expected one line"),
    ({"zh_header": ["甲"]}, ValueError, r"^zh_header: expected 2 cells \(one per header cell\), got 1"),
    ({"zh_rows": [["1"]]}, ValueError, r"^zh_rows: row 0: expected 2 cells \(the shape of rows\), got 1"),
    ({"zh_rows": [["1", "2"], ["3", "4"]]}, ValueError, r"^zh_rows: expected 1 rows of 2 cells"),
    ({"zh_rows": [["多\n行", "2"]]}, ValueError, r"^zh_rows: row 0: cell 0: expected one line"),
]  # fmt: skip


@pytest.mark.parametrize(("change", "exc", "match"), BAD_TABLES)
def test_a_bad_table_is_refused_naming_the_argument(change, exc, match):
    args = {
        "header": ["a", "b"],
        "rows": [[1, 2]],
        "zh_header": ["甲", "乙"],
        "zh_rows": [["1", "2"]],
    } | change
    with pytest.raises(exc, match=match):
        display.table(**args)


def test_figure_html_refuses_what_is_not_a_figure():
    from kvtutor.book import editions

    for bad in (None, "figure.png", np.zeros((2, 2))):
        with pytest.raises(TypeError, match=r"^fig: expected a matplotlib Figure, got "):
            editions.figure_html(bad)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"cells": [', r": expected a notebook, got invalid JSON \("),
        ("[1, 2]", r": expected a notebook \(a JSON object with a list of cells\), got none"),
        ('{"cells": [1]}', r": expected a notebook \(a JSON object with a list of cells\)"),
        (b"\xff\xfe{}", r": expected a notebook, got a file that is not UTF-8"),
    ],
)
def test_editions_check_names_a_file_that_is_not_a_notebook(tmp_path, capsys, content, message):
    import re

    from kvtutor.book import editions

    path = tmp_path / "broken.ipynb"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    assert editions.main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert re.match(rf"^error: {re.escape(str(path))}{message}", err), err
    assert err.count("\n") == 1  # one line, no traceback


def test_editions_check_of_a_missing_file_or_of_nothing_is_an_error(tmp_path, capsys):
    from kvtutor.book import editions

    assert editions.main(["check", str(tmp_path / "missing.ipynb")]) == 2
    assert "missing.ipynb" in capsys.readouterr().err
    assert editions.main(["check"]) == 2
    assert "check: expected at least one NOTEBOOK, got none" in capsys.readouterr().err
