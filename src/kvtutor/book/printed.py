"""What code cells print, in the Chinese edition: stream and text outputs, line by line in Chinese.

The stored outputs stay as the code printed them, in English (nbval compares them, and a reader's
Jupyter or Colab shows them); the Chinese edition's build (tools/sphinxext/kvtutor_i18n.py) shows
each printed output through ``chinese_output``. A line is looked up whole (``labels.translate``,
then ``PRINTED_LINES``, whose ``{field}`` matches any text); else it is cut into columns at runs of
two or more spaces, each column looked up whole, else phrase by phrase, the longest phrase of
``PRINTED`` (or ``labels.ZH``) first. Numbers, units, names, code and the toy model's tokens stay
as they are (``labels.needs_translation``). A column keeps its place: the spaces beside it grow
or shrink by the difference in width, counting a Chinese character as two columns, as
``printed_html`` draws it, so a printed table stays aligned.

``untranslated(notebook)`` lists the words of a notebook's printed outputs with no Chinese;
``python -m kvtutor.book.printed check book/X.ipynb`` prints them, and tests/test_i18n.py fails on
any (the tables are ``printed_zh.py``'s).
"""

from __future__ import annotations

import argparse
import html
import json
import re
import sys
import unicodedata
from collections.abc import Sequence
from pathlib import Path

from ..text import TEXT_WIDTH
from .labels import ZH, compile_patterns, fill_pattern, needs_translation
from .printed_zh import PRINTED, PRINTED_LINES, VERBATIM

__all__ = [
    "PRINTED",
    "PRINTED_LINES",
    "VERBATIM",
    "display_width",
    "chinese_line",
    "chinese_output",
    "printed_html",
    "printed_texts",
    "untranslated",
    "main",
]

_COLUMNS = re.compile(r"( {2,})")
_NUMBER = re.compile(r"[-+]?[\d.,]+[%x]?")  # a number of a table's column
# a word: letters first, then letters, digits and the marks that join a word ("model's", "K/V")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_'’/\-]*(?:(?:\.|::)[A-Za-z0-9_/\-]+)*")
_CJK_RUN = re.compile(r"[\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef\u3000-\u303f]+")


def display_width(text: str) -> int:
    """Columns ``text`` takes in a monospaced output: two for a wide (Chinese) character."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


# kept as printed: Python's constants, code (a CamelCase name, anything with "::", "(" or a
# path's "/"), a shell command line, and the package's error messages (a reader's own run prints
# them in English; ``VERBATIM`` holds the lines of those that wrap)
_CODE_WORD = re.compile(r"True|False|None|.*[a-z][A-Z].*|.*(?:::|\().*|.*/.*/.*|.*\w\.\w.*/.*|.*/.*\w\.\w.*")
_VERBATIM_LINE = re.compile(r"\s*(?:\$ |[A-Z]\w*(?:Error|Exception|Warning): )")


def _keeps(word: str) -> bool:
    """A word printed as it is in both editions."""
    return not needs_translation(word) or bool(_CODE_WORD.fullmatch(word))


def _whole(text: str) -> str | None:
    """``text`` translated as one: a phrase or line of the tables, or a pattern of them."""
    if text in PRINTED:
        return PRINTED[text]
    if text in ZH:
        return ZH[text]
    for regex, zh in compile_patterns(tuple(PRINTED_LINES.items()), columns=True):
        m = regex.fullmatch(text)
        if m:
            return fill_pattern(zh, m, _field)
    return None


def _field(value: str) -> str:
    """A pattern's field in Chinese, where the tables have it; the spaces around it (a padded
    column) grow or shrink so that it keeps its width."""
    core = value.strip(" ")
    out = _whole(core) if core else None
    if out is None:
        return value
    before = value[: len(value) - len(value.lstrip(" "))]
    after = " " * max(len(value) - len(value.rstrip(" ")) + display_width(core) - display_width(out), 0)
    return before + out + after


def _join(parts: list[str]) -> str:
    """Phrases joined by a space, as the English words were (in a table's heading it parts two
    columns)."""
    return " ".join(p for p in parts if p)


# kept as printed inside a line: a quoted string (a token, a text, a dict's key), a call
# (``len(cache)``, ``E/(kc+1)``) and a keyword's name (``probe=8``)
_VERBATIM_SPAN = re.compile(r"(?<![\w'])'[^'\n]*'(?!\w)|[^\s(]+\([^()]*\)\S*|\w+=|\w+(?:\[[^\]]*\])+[\w.]*")


def _phrases(chunk: str, left: list[str]) -> str:
    """A column without a whole translation, phrase by phrase: each run of words separated by
    single spaces is covered by the longest phrases the tables hold; a word that needs none, and
    ``_VERBATIM_SPAN``, stay."""
    out, pos = [], 0
    for span in _VERBATIM_SPAN.finditer(chunk):
        out.append(_words(chunk[pos : span.start()], left))
        out.append(span.group(0))
        pos = span.end()
    out.append(_words(chunk[pos:], left))
    return "".join(out)


def _words(chunk: str, left: list[str]) -> str:
    out, pos = [], 0
    for run in re.finditer(rf"{_WORD.pattern}(?: {_WORD.pattern})*", chunk):
        out.append(chunk[pos : run.start()])
        words = run.group(0).split(" ")
        parts, i = [], 0
        while i < len(words):
            for k in range(len(words), i, -1):
                found = _whole(" ".join(words[i:k]))
                if found is not None:
                    parts.append(found)
                    i = k
                    break
            else:
                if not _keeps(words[i]):
                    left.append(words[i])
                parts.append(words[i])
                i += 1
        out.append(_join(parts))
        pos = run.end()
    out.append(chunk[pos:])
    return "".join(out)


def _chunk(chunk: str, left: list[str]) -> str:
    """A column in Chinese: whole (the tables may hold a text that needs no translation, such as
    "matrix-product GFLOPs", which reads as a name), else phrase by phrase."""
    whole = _whole(chunk)
    if whole is not None:
        return whole
    return _phrases(chunk, left) if needs_translation(chunk) else chunk


def chinese_line(line: str, below: str = "") -> tuple[str, list[str]]:
    """One printed line in Chinese, its columns kept in place (``below``, the next line, tells a
    column aligned on its left from one aligned on its right), and the words the tables lack; a
    line with such a word is given back as it is."""
    left: list[str] = []
    if not line.strip() or line.strip() in VERBATIM or _VERBATIM_LINE.match(line):
        return line, left
    indent = line[: len(line) - len(line.lstrip(" "))]
    whole = _whole(line.strip())
    if whole is not None:
        return indent + whole, left
    pieces = _COLUMNS.split(line)  # [text, spaces, text, spaces, ..., text]
    if not needs_translation(line) and all(_whole(p) is None for p in pieces[::2] if p):
        return line, left
    out = list(pieces)
    for i in range(0, len(pieces), 2):
        if not pieces[i]:
            continue
        zh = _chunk(pieces[i], left)
        out[i] = zh
        delta = display_width(pieces[i]) - display_width(zh)
        # the first column keeps its left edge (the spaces after it change); a later one keeps
        # the edge it shares with the line below (a column of numbers its right edge, the spaces
        # before it change), else a middle column its right edge and the last its left edge (a
        # note; the last column, or the first after an indentation, that shares both edges
        # with the line below keeps its left one unless numbers are under it; a column shares
        # its right edge only with a number or a column that starts under it); never fewer
        # than one space
        start = len("".join(pieces[:i]))
        end = start + len(pieces[i])
        padded = below.ljust(end + 1)
        left_edge = padded[start] != " " and padded[start - 1] == " "
        right_edge = padded[end - 1] != " " and padded[end] == " "
        under = padded[start:end].split()
        numbers = bool(under) and all(_NUMBER.fullmatch(word) for word in under)
        run = padded.rfind("  ", 0, end - 1)  # the spaces before the column that ends there
        run_start = run + 2 if run >= 0 else len(below) - len(below.lstrip(" "))
        word = padded[padded.rfind(" ", 0, end - 1) + 1 : end]
        right_edge = right_edge and (run_start >= start or bool(_NUMBER.fullmatch(word)))
        if i == len(pieces) - 1 or i == 2 and not pieces[0]:
            keep_left = not right_edge or left_edge and not numbers
        else:
            keep_left = left_edge and not right_edge
        side = i - 1 if i > 0 and not keep_left else i + 1
        if delta and 0 <= side < len(out) and out[side]:
            out[side] = " " * max(1, len(out[side]) + delta)
    # a line with a word the tables lack stays in English whole rather than half translated
    return ("".join(out) if not left else line), left


_CJK_BEFORE = r"(?<=[\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef])"


def _punctuated(line: str) -> str:
    """ ", " and ": " after a Chinese character as the full-width "，" and "：" (the same width)."""
    return re.sub(_CJK_BEFORE + ", ", "，", re.sub(_CJK_BEFORE + ": ", "：", line))


# a line that starts with a label: indentation, the label, spaces, the colon, spaces, the value
_LABEL = re.compile(r"( *)([^\s:：](?:[^:：]*?[^\s:：])?)( *)([:：])( *)(?=\S)")


def _right_aligned(english: list[str], labels: list[re.Match[str] | None], j: int) -> bool:
    """Line ``j`` and the one above are labelled, their values end in one column and start at
    most a column apart ("1.94 ms", "6.0 ms")."""
    above, this = labels[j - 1], labels[j]
    return (
        above is not None
        and this is not None
        and abs(above.end() - this.end()) <= 1
        and len(english[j - 1].rstrip()) == len(english[j].rstrip())
    )


def _aligned(english: list[str], chinese: list[str]) -> list[str]:
    """Labelled lines that English aligns (one column for their colons or their values, and
    spaces that show it was done on purpose: labels indented to the right, padded before the
    colon, or values padded after it) are aligned in Chinese too, by padding at the same place;
    an unlabelled line indented to the values' column (a value that wraps, also under a lone
    label) follows them."""
    out = list(chinese)
    labels = [_LABEL.match(line) for line in english]
    i = 0
    while i < len(english):
        m = labels[i]
        if m is None:
            i += 1
            continue
        colon, value = m.end(3), m.end()
        j = i + 1
        while j < len(english) and (
            (labels[j] is not None and colon == labels[j].end(3))  # type: ignore[union-attr]
            or (labels[j] is not None and value == labels[j].end())  # type: ignore[union-attr]
            or _right_aligned(english, labels, j)
            or (labels[j] is None and english[j].strip() and english[j].startswith(" " * value))
        ):
            j += 1
        group = [k for k in range(i, j) if labels[k] is not None]
        zh = {k: _LABEL.match(chinese[k]) for k in group}
        how = [
            (len(labels[k].group(1)) > 0, len(labels[k].group(3)) > 0, len(labels[k].group(5)) > 1)
            for k in group
        ]  # type: ignore[union-attr]
        # (a group whose values the columns of ``chinese_line`` left where English has them is
        # aligned already)
        changed = any(chinese[k] != english[k] for k in range(i, j)) and any(
            display_width(chinese[k][: zh[k].end()]) != labels[k].end()  # type: ignore[union-attr]
            for k in group
            if zh[k] is not None
        )
        # a lone label, with the lines its value wraps to starting right under the value
        wraps = all(len(english[k]) - len(english[k].lstrip(" ")) == value for k in range(i + 1, j))
        aligned = len(group) >= 2 and any(any(h) for h in how) or len(group) == 1 and j > i + 1 and wraps
        if changed and aligned and all(zh.values()):
            # labels aligned on the right: their colons in one column, their indents differ; the
            # colons in one column too when the values are not (numbers aligned on the right)
            one_colon = len({labels[k].end(3) for k in group}) == 1  # type: ignore[union-attr]
            right = one_colon and len({labels[k].start(2) for k in group}) > 1  # type: ignore[union-attr]
            before = any(h[1] for h in how)
            colons = right or before or one_colon and len({labels[k].end() for k in group}) > 1  # type: ignore[union-attr]
            heads = {k: zh[k].group(2) for k in group}  # type: ignore[union-attr]
            indent = min(len(zh[k].group(1)) for k in group)  # type: ignore[union-attr]
            starts = {k: 0 if right else display_width(zh[k].group(1)) for k in group}  # type: ignore[union-attr]
            width = max(starts[k] + display_width(heads[k]) for k in group)
            for k in group:
                z = zh[k]
                pad = " " * (width - starts[k] - display_width(heads[k]))
                after_colon = chinese[k][z.end(4) :]  # type: ignore[union-attr]
                if colons:  # the colons in one column, the values as they were after them
                    colon_text = " :" if before else z.group(4)  # type: ignore[union-attr]
                    if colon_text != "：" and not after_colon.startswith(" "):
                        after_colon = " " + after_colon
                    head = " " * indent + pad + heads[k] if right else z.group(1) + heads[k] + pad  # type: ignore[union-attr]
                    out[k] = head + colon_text + after_colon
                else:  # the values in one column
                    colon_text = z.group(4) + (" " if z.group(4) == ":" else "")  # type: ignore[union-attr]
                    out[k] = z.group(1) + heads[k] + colon_text + pad + chinese[k][z.end() :]  # type: ignore[union-attr]
            column = display_width(out[group[0]]) - display_width(chinese[group[0]][zh[group[0]].end() :])  # type: ignore[union-attr]
            for k in range(i, j):
                if k not in zh:
                    out[k] = " " * column + chinese[k].lstrip(" ")
        i = j
    return out


def chinese_output(text: str) -> tuple[str, list[str]]:
    """A printed output in Chinese, line by line, labelled values kept in their columns; and the
    words left in English."""
    lines, left = [], []
    english = text.split("\n")
    for i, line in enumerate(english):
        zh, missing = chinese_line(line, english[i + 1] if i + 1 < len(english) else "")
        lines.append(_punctuated(zh))
        left += missing
    # never wider than the English, past the book's text width (a line that would be stays English)
    limit = max([TEXT_WIDTH, *(len(line) for line in english)])
    out = [
        zh if display_width(zh) <= limit else en
        for zh, en in zip(_aligned(english, lines), english, strict=True)
    ]
    return "\n".join(out), left


def printed_html(text: str) -> str:
    """``text`` escaped for a <pre>, each run of Chinese characters in a box two columns wide per
    character (``kvt-wide``, book/_static/kvtutor.css), so that columns line up in any font."""
    out, pos = [], 0
    for run in _CJK_RUN.finditer(text):
        out.append(html.escape(text[pos : run.start()], quote=False))
        width = display_width(run.group(0))
        out.append(f'<span class="kvt-wide" style="width: {width}ch">{html.escape(run.group(0))}</span>')
        pos = run.end()
    out.append(html.escape(text[pos:], quote=False))
    return "".join(out)


# ---------------------------------------------------------------- the stored notebooks


def printed_texts(notebook: Path) -> list[tuple[int, str]]:
    """(cell index, text) of every printed output a reader of ``notebook`` sees: streams and plain
    text results of cells not removed from the page, not an error, and with no HTML of their own
    (figures and tables carry both editions already)."""
    cells = json.loads(Path(notebook).read_text(encoding="utf-8"))["cells"]
    out = []
    for i, cell in enumerate(cells):
        tags = cell.get("metadata", {}).get("tags", [])
        if cell["cell_type"] != "code" or {"remove-cell", "remove-output"} & set(tags):
            continue
        for output in cell.get("outputs", []):
            if output["output_type"] == "stream":
                out.append((i, "".join(output["text"])))
            elif output["output_type"] in ("execute_result", "display_data"):
                data = output["data"]
                if set(data) == {"text/plain"}:
                    out.append((i, "".join(data["text/plain"])))
    return out


def untranslated(notebook: Path) -> list[str]:
    """One line per printed line of ``notebook`` that keeps English words in Chinese."""
    problems = []
    for cell, text in printed_texts(notebook):
        for line in text.split("\n"):
            _, left = chinese_line(line)
            if left:
                problems.append(f"{Path(notebook).name} cell {cell}: {line.strip()!r}: {', '.join(left)}")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Chinese of the printed outputs of notebooks")
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="list the printed words with no Chinese")
    check.add_argument("notebooks", nargs="+", type=Path)
    show = sub.add_parser("show", help="print the outputs in Chinese")
    show.add_argument("notebooks", nargs="+", type=Path)
    args = parser.parse_args(argv)
    status = 0
    for notebook in args.notebooks:
        if args.command == "check":
            problems = untranslated(notebook)
            print("\n".join(problems) if problems else f"{notebook}: every printed line has its Chinese")
            status |= bool(problems)
        else:
            for cell, text in printed_texts(notebook):
                print(f"--- {notebook.name} cell {cell}\n{chinese_output(text)[0]}")
    return status


if __name__ == "__main__":
    sys.exit(main())
