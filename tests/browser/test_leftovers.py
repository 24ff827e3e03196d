"""Nothing on a reader's page exists only for the build, in either edition.

The built HTML of every page (English and Chinese) is read as a reader sees it, scripts and styles
left out, and must hold none of the build's leftovers: a ``glue(`` call, an ``NBVAL`` marker, a
``# fmt:`` pragma, or a docstring's "The book shows this in" note. Cells that only glue or assert
are tagged ``remove-cell`` and still run under nbval; ``show_source`` drops the note. No browser
is needed: run with `make browser` (after `make book`).
"""

from __future__ import annotations

import html.parser
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HTML = ROOT / "_build" / "html"
_spec = importlib.util.spec_from_file_location("_kvtutor_tools_i18n", ROOT / "tools" / "i18n.py")
_i18n = sys.modules.setdefault("_kvtutor_tools_i18n", importlib.util.module_from_spec(_spec))
if not hasattr(_i18n, "toc_pages"):
    _spec.loader.exec_module(_i18n)
PAGES = [*_i18n.toc_pages(), *(f"zh/{page}" for page in _i18n.toc_pages())]
LEFTOVERS = ("glue(", "NBVAL", "# fmt:", "The book shows this in")


class _Text(html.parser.HTMLParser):
    """The text a reader can see: everything but <script>, <style> and <template>."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style", "template"):
            self._skip += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style", "template") and self._skip:
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def visible_text_of(markup: str) -> str:
    parser = _Text()
    parser.feed(markup)
    return "".join(parser.parts)


def leftovers(text: str) -> list[str]:
    """Each leftover found, with the line it sits on."""
    found = []
    for line in text.splitlines():
        found += [f"{word!r} in: {line.strip()[:120]}" for word in LEFTOVERS if word in line]
    return found


def test_the_check_finds_each_leftover():
    text = visible_text_of('<p>x</p><pre>glue("k", 1)\n# NBVAL_IGNORE_OUTPUT\nf()  # fmt: skip</pre>'
                           '<p>The book shows this in "A".</p><script>glue(</script>')  # fmt: skip
    assert len(leftovers(text)) == 4 and not leftovers(visible_text_of("<p>glue, the role</p>"))


@pytest.mark.parametrize("name", PAGES)
def test_no_build_leftovers_on_the_page(name):
    page = HTML / f"{name}.html"
    if not page.is_file():
        pytest.fail(f"no {page}: run `make book` first (or `make browser`)")
    found = leftovers(visible_text_of(page.read_text(encoding="utf-8")))
    assert not found, f"{name}: {len(found)} build leftover(s)\n" + "\n".join(found)
