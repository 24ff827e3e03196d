"""The README's example runs and prints what it promises."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path


def test_readme_example_runs():
    text = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    code = re.search(r"## The package in ten lines\s+```python\n(.*?)```", text, re.S).group(1)
    assert len(code.strip().splitlines()) <= 12
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    assert out.getvalue().splitlines() == ["(2, 4, 4)", "on the mat."]
