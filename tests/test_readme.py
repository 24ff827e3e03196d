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


def test_readme_and_contributing_name_only_real_make_targets():
    root = Path(__file__).parents[1]
    targets = set(re.findall(r"^([a-z]+):", (root / "Makefile").read_text(encoding="utf-8"), re.M))
    for name in ["README.md", "CONTRIBUTING.md"]:
        named = set(re.findall(r"(?:`|^)make ([a-z]+)\b", (root / name).read_text(encoding="utf-8"), re.M))
        assert named and named <= targets, (name, named - targets)
