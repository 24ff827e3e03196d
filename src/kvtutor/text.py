"""Page layout for everything the package prints: the column width and wrapped call syntax.

The book's code column holds about 80 characters, so every ``str()`` of a config, a model or a
report stays within ``TEXT_WIDTH`` columns. Library reprs use these, which is why they live in the
package proper rather than in ``kvtutor.book``.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

__all__ = ["TEXT_WIDTH", "wrap_call", "fields_call"]

#: Columns that ``str()`` of a config or model stays within: the book's code column holds about 80.
TEXT_WIDTH = 78


def wrap_call(name: str, args: list[str], width: int = TEXT_WIDTH) -> str:
    """``name(a, b, ...)`` on as few lines as keep it within ``width`` columns, each continuation line
    aligned after the opening parenthesis. An argument that spans lines itself keeps that alignment."""
    if width < 1:
        raise ValueError(f"width: expected a positive int, got {width}")
    if not args:
        return name + "()"
    pad = " " * (len(name) + 1)
    lines, line = [], name + "("
    for i, arg in enumerate(args):
        piece = arg + (", " if i < len(args) - 1 else ")")
        first, *rest = piece.split("\n")
        if line.strip() and not line.endswith("(") and len(line) + len(first.rstrip()) > width:
            lines.append(line.rstrip())
            line = pad
        line += first
        for more in rest:  # a nested multi-line argument: indent its lines under ours
            lines.append(line.rstrip())
            line = pad + more
    lines.append(line.rstrip())
    return "\n".join(lines)


def fields_call(obj: Any, width: int = TEXT_WIDTH) -> str:
    """A dataclass as ``Name(field=value, ...)``, the text of its repr, wrapped to ``width``."""
    args = [f"{f.name}={getattr(obj, f.name)!r}" for f in fields(obj)]
    return wrap_call(type(obj).__name__, args, width)
