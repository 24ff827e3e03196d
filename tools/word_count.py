"""Prose words per page, as a reader counts them: the budget of issue #25.

    python tools/word_count.py            # every page of _toc.yml, by part, with the budgets

A page's prose is its Markdown (the .md file, or a notebook's Markdown cells) without what a reader
does not read as words: code blocks and directives' options, HTML comments, math, link targets and
role markup ({term}`KV cache <kv cache>` counts as "KV cache", a glued number as one word).
Code cells and their outputs are not prose. tests/test_word_budget.py holds the budgets.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
#: At most this many words on any page, and in the parts a learner reads first.
PAGE_BUDGET = 2500
FIRST_PARTS = ("Start here", "The walkthrough")
FIRST_PARTS_BUDGET = 7000

_FENCE = re.compile(r"^(`{3,}|:{3,}).*?^\1\s*$", re.M | re.S)
_DISPLAY_MATH = re.compile(r"\$\$.*?\$\$", re.S)
_INLINE_MATH = re.compile(r"\$[^$\n]+\$")
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_ROLE = re.compile(r"\{[a-z:-]+\}`([^`<]*?)(?:\s*<[^>]*>)?`")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_CODE = re.compile(r"``?([^`]+)``?")
_WORD = re.compile(r"[A-Za-z0-9][\w'’.,:;/+-]*|[^\x00-\x7f\s]")


def prose(markdown: str) -> str:
    """The words a reader reads in a Markdown text."""
    text = _COMMENT.sub(" ", markdown)
    text = _FENCE.sub(lambda m: _directive_body(m.group(0)), text)
    text = _DISPLAY_MATH.sub(" ", text)
    text = _INLINE_MATH.sub(" x ", text)
    text = re.sub(r"\{glue:[a-z]+\}`[^`]*`", " 1 ", text)
    text = _ROLE.sub(r"\1", text)
    text = _LINK.sub(r"\1", text)
    text = _CODE.sub(r"\1", text)
    text = re.sub(r"^\(.*\)=\s*$", " ", text, flags=re.M)  # MyST targets
    return text


def _directive_body(block: str) -> str:
    """A fenced block: admonitions and figures keep their text, code and math blocks drop."""
    lines = block.splitlines()
    head = lines[0]
    if not re.match(r"^(`{3,}|:{3,})\{(note|tip|warning|important|admonition|margin|seealso|figure|"
                    r"dropdown|hint|caution|attention|sidebar|epigraph|topic|glossary)\}", head):  # fmt: skip
        return " "
    body = [ln for ln in lines[1:-1] if not re.match(r"^:[a-z-]+:", ln)]
    title = re.sub(r"^(`{3,}|:{3,})\{[a-z]+\}", "", head)
    return title + "\n" + "\n".join(body)


def words(markdown: str) -> int:
    """How many words a reader reads in `markdown` (a CJK character counts as one)."""
    return len(_WORD.findall(prose(markdown)))


def page_words(path: Path) -> int:
    """Prose words of a page (.md or .ipynb); 0 for a page not written yet."""
    if not path.exists():
        return 0
    if path.suffix == ".ipynb":
        nb = json.loads(path.read_text(encoding="utf-8"))
        cells = [c for c in nb["cells"] if c["cell_type"] == "markdown"]
        return sum(words("".join(c["source"])) for c in cells)
    return words(path.read_text(encoding="utf-8"))


def parts(root: Path = ROOT) -> list[tuple[str, list[Path]]]:
    """(caption, page files) for the root page and every part of _toc.yml."""
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))

    def file(name: str) -> Path:
        for suffix in (".ipynb", ".md"):
            if (root / f"{name}{suffix}").exists():
                return root / f"{name}{suffix}"
        return root / f"{name}.ipynb"  # not written yet: page_words says so

    found = [("Start here", [file(toc["root"])])]
    for part in toc.get("parts") or []:
        pages = [file(c["file"]) for c in part.get("chapters") or []]
        if part["caption"] == "Start here":
            found[0][1].extend(pages)
        else:
            found.append((part["caption"], pages))
    return found


def main() -> int:
    total_first = 0
    for caption, pages in parts():
        counts = [(p, page_words(p)) for p in pages]
        subtotal = sum(n for _, n in counts)
        if caption in FIRST_PARTS:
            total_first += subtotal
        print(f"{caption} ({subtotal} words)")
        for p, n in counts:
            flag = "  over the page budget" if n > PAGE_BUDGET else ""
            print(f"  {p.relative_to(ROOT).as_posix():<34} {n:>5}{flag}")
    print(f"{' + '.join(FIRST_PARTS)}: {total_first} words (budget {FIRST_PARTS_BUDGET}); "
          f"any page: at most {PAGE_BUDGET}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
