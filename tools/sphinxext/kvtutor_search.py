"""The Chinese edition's search: one way of cutting text into terms, at indexing and at search time.

Sphinx's own Chinese search language (sphinx/search/zh.py) cuts the pages into words with jieba
when it is installed, but the search page (searchtools.js) cuts the reader's query with its
default splitter, which keeps a run of Chinese characters whole. The two disagree: jieba cuts
"预填充" into "预" (dropped from the index, one character) and "填充", and "投机解码" into "投机"
and "解码", so a query for 预填充 looks up a term no page holds, and finds only the pages where
jieba happened to keep a longer word that contains it (Sphinx's partial match); the Chinese
edition found 4 of the 22 pages holding 预填充. jieba also cuts differently by context (词元 became
"新词", "元" in "新词元"), so no query splitter can copy it.

Here both sides cut the same way, with no dictionary: every run of Han characters becomes its
overlapping pairs (预填充 -> 预填, 填充; a lone character stays itself), and every other run of
letters, digits and underscores one word, as before. The query is cut by that rule in JavaScript
(`JS_SPLITTER`, which Sphinx writes into the edition's language_data.js as `splitQuery`), and the
page's text by the same rule in Python (`split_terms`), each of its Han characters also indexed on
its own (`index_terms`) for a query of one character; text and query are NFKC-normalised first
(full-width letters and digits become ASCII). Sphinx requires every term of a query, so a search
finds every page that holds each pair of the query: every page holding the query itself, and
rarely a page that holds the pairs apart.

_config.yml loads this extension; the Chinese build picks the language with
html_search_language = "zh" (tools/i18n.py).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from sphinx.application import Sphinx
from sphinx.search import zh

#: The Han characters, as code point ranges: CJK Unified Ideographs, Extension A, the
#: compatibility ideographs, and the supplementary planes' extensions B and later.
HAN_RANGES = ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x3134F))


def _char_class(escape: str) -> str:
    return "".join(f"{escape.format(lo)}-{escape.format(hi)}" for lo, hi in HAN_RANGES)


HAN = _char_class("\\U{:08x}")
#: A run of Han characters (group 1), or a run of other letters, digits and underscores (group 2).
TERMS = re.compile(rf"([{HAN}]+)|([^\W{HAN}]+)")

#: The same rule for the search page: `splitQuery(query)` -> its terms, as `split` gives them.
JS_SPLITTER = """
/* kvtutor (tools/sphinxext/kvtutor_search.py): a query is cut into terms as the pages were when
   they were indexed. A run of Han characters gives its overlapping pairs, other letters, digits
   and underscores one word per run. */
var splitQuery = (query) => {
  const terms = [];
  const found = query.normalize("NFKC").matchAll(/([HAN]+)|((?:(?![HAN])[\\p{L}\\p{N}_])+)/gu);
  for (const [, han, word] of found) {
    if (word !== undefined) { terms.push(word); continue; }
    const chars = Array.from(han);
    if (chars.length === 1) terms.push(han);
    for (let i = 0; i + 1 < chars.length; i++) terms.push(chars[i] + chars[i + 1]);
  }
  return terms;
};
""".replace("HAN", _char_class("\\u{{{:x}}}"))


def han_pairs(run: str) -> list[str]:
    """A run of Han characters -> its overlapping pairs ("预填充" -> ["预填", "填充"]); one
    character -> itself."""
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


def split_terms(text: str) -> list[str]:
    """The search terms of `text` as the search page cuts a query (`JS_SPLITTER`): the pairs of
    each run of Han characters, then each run of other letters, digits and underscores, in order,
    after NFKC normalisation."""
    terms: list[str] = []
    for han, word in TERMS.findall(unicodedata.normalize("NFKC", text)):
        terms.extend(han_pairs(han) if han else [word])
    return terms


def index_terms(text: str) -> list[str]:
    """The terms a page's `text` is indexed under: `split_terms`, and every Han character on its
    own too, so that a query of one character (键, 值, 头, 层: words of their own) finds every page
    that holds it, inside a longer run or not."""
    normal = unicodedata.normalize("NFKC", text)
    return split_terms(normal) + [c for han, _ in TERMS.findall(normal) if len(han) > 1 for c in han]


def is_han(term: str) -> bool:
    """Whether `term` is made of Han characters only."""
    return bool(term) and all(any(lo <= ord(c) <= hi for lo, hi in HAN_RANGES) for c in term)


class SearchChinese(zh.SearchChinese):
    """Sphinx 7.4's Chinese search language with the text cut by `index_terms`, the query by
    `JS_SPLITTER`, single Han characters kept in the index (Sphinx drops one-letter words), and its
    Latin-word lookup in a set (Sphinx's list made the build quadratic: 10 s of CPU for this book)."""

    js_splitter_code = JS_SPLITTER

    def init(self, options: dict[str, str]) -> None:
        super().init(options)
        self.latin_terms = set()  # type: ignore[assignment]

    def split(self, input: str) -> list[str]:
        terms = index_terms(input)
        self.latin_terms.update(t for t in terms if not is_han(t))  # type: ignore[attr-defined]
        return terms

    def word_filter(self, stemmed_word: str) -> bool:
        return len(stemmed_word) > 1 or is_han(stemmed_word)

    def stem(self, word: str) -> str:
        return word if is_han(word) else super().stem(word)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_search_language(SearchChinese)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
