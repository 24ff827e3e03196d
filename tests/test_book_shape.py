"""The book's shape, as issue #25 set it: the word budgets (a walkthrough one sitting long, no page
too long) and the ending of every chapter (three to five takeaways, then exercises).

Words are counted by tools/word_count.py, the prose a reader reads (see its docstring)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("_kvtutor_word_count", ROOT / "tools" / "word_count.py")
assert _spec is not None and _spec.loader is not None
word_count = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(word_count)

PARTS = word_count.parts()
PAGES = [page for _, pages in PARTS for page in pages]
#: Chapters: every notebook outside the Reference part.
CHAPTERS = [p for caption, pages in PARTS if caption != "Reference" for p in pages if p.suffix == ".ipynb"]
#: Pages without exercises: the overview is a picture, not a chapter to practise.
NO_EXERCISES = {"overview"}
#: Chapters that each read in one sitting (issue #44): the rooflines chapter, split in two, in
#: fewer words than this each (the English edition's count).
ONE_SITTING = ("rooflines", "rooflines_batch")
ONE_SITTING_BUDGET = 1800


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_no_page_is_longer_than_the_page_budget(page):
    assert page.exists(), f"_toc.yml names {page.name}, which does not exist"
    words = word_count.page_words(page)
    assert words <= word_count.PAGE_BUDGET, f"{page.name}: {words} words (at most {word_count.PAGE_BUDGET})"


@pytest.mark.parametrize("stem", ONE_SITTING)
def test_each_rooflines_chapter_reads_in_one_sitting(stem):
    page = ROOT / "book" / f"{stem}.ipynb"
    assert page in PAGES, f"_toc.yml does not name {page.name}"
    words = word_count.page_words(page)
    assert words < ONE_SITTING_BUDGET, f"{page.name}: {words} words (fewer than {ONE_SITTING_BUDGET})"


def test_start_here_and_the_walkthrough_make_one_sitting():
    first = [p for caption, pages in PARTS if caption in word_count.FIRST_PARTS for p in pages]
    words = {p.stem: word_count.page_words(p) for p in first}
    total = sum(words.values())
    assert total <= word_count.FIRST_PARTS_BUDGET, f"{total} words: {words}"


def _headings_and_bullets(path: Path) -> list[tuple[str, list[str]]]:
    """(level-2 heading, the bullet items under it) in the order of the page."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    sections = []
    for block in re.split(r"(?m)^(?=## )", text):
        if block.startswith("## "):
            heading, _, body = block.partition("\n")
            bullets = re.findall(r"(?m)^[-*] (.+)", body)
            sections.append((heading[3:].strip(), bullets))
    return sections


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_every_chapter_ends_with_takeaways_then_exercises(chapter):
    sections = _headings_and_bullets(chapter)
    names = [h for h, _ in sections]
    assert "Takeaways" in names, f"{chapter.name}: no '## Takeaways'"
    bullets = dict(sections)["Takeaways"]
    assert 3 <= len(bullets) <= 5, f"{chapter.name}: {len(bullets)} takeaways (three to five)"
    expected = ["Takeaways"] if chapter.stem in NO_EXERCISES else ["Takeaways", "Exercises"]
    assert names[-len(expected) :] == expected, f"{chapter.name} ends with {names[-2:]}"


def test_the_ending_check_finds_a_missing_or_misplaced_ending(tmp_path):
    def page(*markdown: str) -> Path:
        nb = {"cells": [{"cell_type": "markdown", "source": [m]} for m in markdown]}
        path = tmp_path / f"p{len(list(tmp_path.iterdir()))}.ipynb"
        path.write_text(json.dumps(nb), encoding="utf-8")
        return path

    good = page("# T\n## A\ntext", "## Takeaways\n- one\n- two\n- three", "## Exercises\n1. x")
    test_every_chapter_ends_with_takeaways_then_exercises(good)
    for bad in (
        page("# T\n## Exercises\n1. x"),
        page("## Takeaways\n- one\n- two", "## Exercises\n1. x"),
        page("## Exercises\n1. x", "## Takeaways\n- a\n- b\n- c"),
    ):
        with pytest.raises(AssertionError):
            test_every_chapter_ends_with_takeaways_then_exercises(bad)


def test_the_word_count_reads_prose_only():
    text = "A {term}`KV cache <kv cache>` of $x$ bytes: {glue:text}`n`.\n\n```python\nx = 1\n```\n"
    assert word_count.words(text) == word_count.words("A KV cache of x bytes: 1.")
