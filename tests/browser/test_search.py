"""The Chinese edition's search finds every page that holds what a reader types (issues #35, #44).

The pages are indexed and the query is cut by one rule (tools/sphinxext/kvtutor_search.py): each
run of Chinese characters into its overlapping pairs, in Python when Sphinx builds the index and
in the search page's JavaScript (`splitQuery`) when the reader searches. Checked three ways: the
JavaScript cuts the book's own Chinese text exactly as Python does (no built book needed); the
built index holds every pair of each term for every page whose text holds the term; and, as a
reader searches on the Chinese edition's search page in headless Chromium, each term finds every
built page whose article text holds it, and no page missing one of its pairs. The expected pages
are read from the built HTML, not listed by hand. Run with `make browser` (after `make book`).
"""

from __future__ import annotations

import importlib.util
import json
import re
import unicodedata
import urllib.parse
from functools import cache
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
ZH = ROOT / "_build" / "html" / "zh"
INDEX = ZH / "searchindex.js"
_spec = importlib.util.spec_from_file_location(
    "_kvtutor_search", ROOT / "tools" / "sphinxext" / "kvtutor_search.py"
)
assert _spec is not None and _spec.loader is not None
search = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(search)

#: Terms a reader of the Chinese edition types: the book's words for its subjects.
TERMS = ("预填充", "解码", "投机解码", "前缀缓存", "连续批处理", "词元", "KV 缓存", "键", "头")
# A query, and the chapter it must find among the first TOP results, on the first screen of the
# results page. Sphinx ranks a page by the words of its section titles as well as its own title,
# so several chapters with "KV 缓存" in a heading rank beside the chapter about it.
SEARCHES = {"解码": "book/decode", "KV 缓存": "book/kv_memory"}
TOP = 10
# Strings whose cutting the JavaScript must agree on, beside the catalogs' Chinese text:
# full-width letters and digits, characters beyond the Basic Multilingual Plane, a lone character.
EDGES = ["ＫＶ缓存２", "𠀀𠀁字", "层", "a_b·c 预填充—解码", "KV缓存（prefix）", "é 和 ü", "３ 个词元"]

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


def article_text(markup: str) -> str:
    """The text of a built page's article (what Sphinx indexed; the sidebar, which names every
    chapter, left out), NFKC-normalised and lowercased as the index is."""
    article = BeautifulSoup(markup, "html.parser").select_one("article.bd-article")
    text = article.get_text(" ") if article is not None else ""
    return unicodedata.normalize("NFKC", text).lower()


@cache
def texts() -> dict[str, str]:
    """Every indexed page of the Chinese edition -> its article text."""
    return {d: article_text((ZH / f"{d}.html").read_text(encoding="utf-8")) for d in load_index()["docnames"]}


def holding(term: str) -> set[str]:
    """The built pages whose text holds `term` as typed (its words in this order, with or without
    spaces between them)."""
    pattern = re.compile(r"\s*".join(re.escape(w.lower()) for w in term.split()))
    return {d for d, text in texts().items() if pattern.search(text)}


def holding_each_term(term: str) -> set[str]:
    """The built pages whose text holds each search term of `term`, anywhere: all that a search
    may find, since Sphinx requires every term of a query and keeps no positions."""
    return {d for d, text in texts().items() if all(t.lower() in text for t in search.split_terms(term))}


def searched(context, site: str, query: str) -> list[str]:
    """The pages the Chinese edition's search page lists for `query`, in order."""
    tab = context.new_page()
    try:
        tab.goto(f"{site}/zh/search.html?q={urllib.parse.quote(query)}", wait_until="load")
        results = tab.wait_for_function(RESULTS, timeout=20_000).json_value()
    finally:
        tab.close()
    return [page_of(href) for href in results]


# ---------------------------------------------------------------- the same cut on both sides


def catalog_texts() -> list[str]:
    """The Chinese of every message in the book's catalogs."""
    from babel.messages.pofile import read_po

    out = []
    for po in sorted((ROOT / "locales" / "zh_CN" / "LC_MESSAGES").rglob("*.po")):
        with po.open("rb") as f:
            out += [m.string for m in read_po(f) if m.id and isinstance(m.string, str) and m.string]
    return out


def test_the_query_is_cut_as_the_pages_were(file_context):
    strings = catalog_texts() + EDGES
    assert len(strings) > 1000
    tab = file_context.new_page()
    try:
        tab.add_script_tag(content=search.JS_SPLITTER)
        cut = tab.evaluate("(strings) => strings.map((s) => splitQuery(s))", strings)
    finally:
        tab.close()
    python = [search.split_terms(s) for s in strings]
    differ = [(s, js, py) for s, js, py in zip(strings, cut, python, strict=True) if js != py]
    assert not differ, f"{len(differ)} strings cut differently, e.g. {differ[:3]}"


# ---------------------------------------------------------------- the built index


@pytest.mark.parametrize("term", TERMS)
def test_the_index_holds_each_pair_for_every_page_that_holds_the_term(term):
    index = load_index()
    pages = holding(term)
    assert pages, f"no built page holds {term!r}: the check would pass on anything"
    for part in search.split_terms(term):
        left_out = pages - set(pages_with(index, part))
        assert not left_out, f"{part!r} is not indexed for {sorted(left_out)}"


# ---------------------------------------------------------------- a reader's search


@pytest.mark.parametrize("term", TERMS)
def test_a_chinese_search_finds_every_page_holding_the_term(term, site, browser_context):
    expected = holding(term)
    assert expected, f"no built page holds {term!r}: the check would pass on anything"
    found = set(searched(browser_context, site, term))
    assert not expected - found, (
        f"searching {term!r} finds {len(expected & found)} of the {len(expected)} pages that hold it; "
        f"missed: {sorted(expected - found)}"
    )
    stray = found - holding_each_term(term)
    assert not stray, f"{term!r} found pages without its terms: {sorted(stray)}"


@pytest.mark.parametrize(("query", "page"), SEARCHES.items())
def test_a_chinese_search_ranks_the_chapter_first_screen(query, page, site, browser_context):
    pages = searched(browser_context, site, query)
    assert page in pages[:TOP], f"searching {query!r}: {page} not among the first {TOP} of {pages}"


def test_the_index_check_tells_pages_apart():
    index = {"docnames": ["book/a", "book/b"], "terms": {"解码": [0, 1], "kv": 1}, "titleterms": {"缓存": 0}}
    assert pages_with(index, "解码") == ["book/a", "book/b"]
    assert pages_with(index, "KV") == ["book/b"] and pages_with(index, "缓存") == ["book/a"]
    assert pages_with(index, "预填充") == []
    assert page_of("../book/decode.html?highlight=%E8%A7%A3%E7%A0%81") == "book/decode"
    markup = '<nav>解码</nav><article class="bd-article"><p>ＫＶ 缓存</p></article>'
    assert article_text(markup).split() == ["kv", "缓存"]
