"""The Chinese edition's search finds Chinese words (issue #35).

Sphinx's "zh" search language cuts the text into words with jieba when it is installed (a
dependency of the book's build, tools/i18n.py); without it, only Latin words and whole runs of
Chinese characters between punctuation reach the index, and a search for 解码 misses the decode
chapter. Checked twice: in the built index itself (no browser), and as a reader searches, on the
Chinese edition's search page in headless Chromium. Run with `make browser` (after `make book`).
"""

from __future__ import annotations

import json
import re
import urllib.parse
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
INDEX = ROOT / "_build" / "html" / "zh" / "searchindex.js"
# A query, and the chapter it must find among the first TOP results, on the first screen of the
# results page. Sphinx ranks a page by the words of its section titles as well as its own title,
# so several chapters with "KV 缓存" in a heading rank beside the chapter about it.
SEARCHES = {"解码": "book/decode", "KV 缓存": "book/kv_memory"}
TOP = 10

RESULTS = """() => {
  const summary = document.querySelector("#search-results p.search-summary");
  if (!summary || !summary.textContent.trim()) return null;
  return Array.from(document.querySelectorAll("#search-results ul.search li a"),
                    (a) => a.getAttribute("href"));
}"""


def load_index(path: Path = INDEX) -> dict:
    """The search index Sphinx writes: `Search.setIndex({...})`."""
    if not path.is_file():
        pytest.fail(f"no {path}: run `make book` first (or `make browser`)")
    text = path.read_text(encoding="utf-8")
    return json.loads(text[text.index("(") + 1 : text.rindex(")")])


def pages_with(index: dict, word: str) -> list[str]:
    """The pages whose text or titles hold `word` (a term of the index: Latin words lowercased)."""
    found: set[int] = set()
    for table in ("terms", "titleterms"):
        hits = index[table].get(word.lower(), [])
        found |= {hits} if isinstance(hits, int) else set(hits)
    return sorted(index["docnames"][i] for i in found)


def page_of(href: str) -> str:
    """'../book/decode.html?highlight=...' -> 'book/decode'."""
    path = urllib.parse.urlsplit(href).path
    return re.sub(r"^(\.\./)+", "", path).removesuffix(".html")


@pytest.mark.parametrize(("query", "page"), SEARCHES.items())
def test_the_chinese_index_holds_the_words(query, page):
    index = load_index()
    for word in query.split():
        assert page in pages_with(index, word), f"{word!r} is not indexed for {page}"


@pytest.mark.parametrize(("query", "page"), SEARCHES.items())
def test_a_chinese_search_finds_the_chapter(query, page, site, browser_context):
    tab = browser_context.new_page()
    try:
        tab.goto(f"{site}/zh/search.html?q={urllib.parse.quote(query)}", wait_until="load")
        results = tab.wait_for_function(RESULTS, timeout=20_000).json_value()
    finally:
        tab.close()
    pages = [page_of(href) for href in results]
    assert page in pages[:TOP], f"searching {query!r}: {page} not among the first {TOP} of {pages}"


def test_the_index_check_tells_pages_apart():
    index = {"docnames": ["book/a", "book/b"], "terms": {"解码": [0, 1], "kv": 1}, "titleterms": {"缓存": 0}}
    assert pages_with(index, "解码") == ["book/a", "book/b"]
    assert pages_with(index, "KV") == ["book/b"] and pages_with(index, "缓存") == ["book/a"]
    assert pages_with(index, "预填充") == []
    assert page_of("../book/decode.html?highlight=%E8%A7%A3%E7%A0%81") == "book/decode"
