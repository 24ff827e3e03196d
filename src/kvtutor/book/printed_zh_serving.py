"""The Chinese of what the later chapters' code cells print (rooflines, decode on a GPU, paged
caches, serving at scale): phrases in ``PRINTED`` and lines with ``{field}``s in
``PRINTED_LINES``, merged into ``kvtutor.book.printed_zh``'s tables (which say how they are
read). A table's heading written as one run of single spaces (no column breaks for the mechanism
to use) is given whole, spaced so that each heading still ends over its numbers."""

from __future__ import annotations

__all__ = ["PRINTED", "PRINTED_LINES"]

PRINTED: dict[str, str] = {}

PRINTED_LINES: dict[str, str] = {}
