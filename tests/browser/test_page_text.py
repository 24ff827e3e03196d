"""What a reader reads on every built page, in both editions (issue #35).

- **Short displayed code.** No code block a reader sees without opening anything is over
  MAX_LINES lines: a cell's source, a function the page shows with ``show_source``, a code block of
  the prose. Plotting and setup go into hidden cells (``remove-input``); code in a collapsed
  ``hide-input`` cell or a dropdown is not displayed until the reader asks for it. The package
  functions that the book shows and that are still longer are listed in TO_SHORTEN, each until it
  is shortened: the test fails on a listed function that fits, so that the list only shrinks.
- **Each inline script once.** Sphinx 7 writes some of them twice, and a second `const`
  declaration throws in the browser (tools/sphinxext/kvtutor_assets.py drops the copies).
- **No text the reader cannot see.** The book once followed two source texts that it never shows;
  no page may refer to them ("the worked example", "the explainer", "the source documents", or
  their Chinese names).

The built HTML is read as a reader sees it; no browser is needed. Run with `make browser` (after
`make book`).
"""

from __future__ import annotations

import html.parser
import importlib.util
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HTML = ROOT / "_build" / "html"
_spec = importlib.util.spec_from_file_location("_kvtutor_tools_i18n", ROOT / "tools" / "i18n.py")
_i18n = sys.modules.setdefault("_kvtutor_tools_i18n", importlib.util.module_from_spec(_spec))
if not hasattr(_i18n, "toc_pages"):
    _spec.loader.exec_module(_i18n)
PAGES = [*_i18n.toc_pages(), *(f"zh/{page}" for page in _i18n.toc_pages())]

MAX_LINES = 35
# Package functions the book displays in full and that are over MAX_LINES lines: the functions to
# shorten (src/kvtutor/models, caches and serving are the lead's), by the name of the function the
# block shows and the page that shows it. Empty this as they are shortened.
TO_SHORTEN: set[tuple[str, str]] = set()
# Code highlighted as program output, not as code: stream and text outputs.
OUTPUT_LANGUAGES = {"myst-ansi", "none", "default", "text"}
UNSEEN = re.compile(
    r"worked example|explainer|source documents?|the two documents"
    r"|演算示例|原理说明|源文档|两份文档|文档写作",
    re.I,
)


@dataclass
class CodeBlock:
    language: str
    lines: list[str] = field(default_factory=list)

    @property
    def shows(self) -> str | None:
        """The name of the function or class the block defines first, if it starts with one."""
        for line in self.lines:
            match = re.match(r"\s*(?:async\s+)?(?:def|class)\s+(\w+)", line)
            if match:
                return match.group(1)
            if line.strip() and not line.lstrip().startswith("@"):
                return None
        return None


class _Page(html.parser.HTMLParser):
    """The code blocks a reader sees without opening anything, and the page's visible text."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks: list[CodeBlock] = []
        self.text: list[str] = []
        self._open: list[tuple[str, str]] = []  # (tag, class) of the open elements
        self._block: CodeBlock | None = None
        self._pre = 0

    def _hidden(self) -> bool:
        return any(tag == "details" or tag in ("script", "style", "template") for tag, _ in self._open)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = dict(attrs).get("class") or ""
        if tag in ("br", "img", "meta", "link", "input", "hr", "wbr"):
            return
        self._open.append((tag, classes))
        if tag == "pre" and not self._hidden():
            language = next(
                (m.group(1) for _, c in reversed(self._open) if (m := re.search(r"\bhighlight-([\w-]+)", c))),
                None,
            )
            if language is not None and language not in OUTPUT_LANGUAGES:
                self._block = CodeBlock(language, [""])
                self._pre = len(self._open)

    def handle_endtag(self, tag: str) -> None:
        if not any(t == tag for t, _ in self._open):
            return
        while self._open:
            top, _ = self._open.pop()
            if self._block is not None and len(self._open) < self._pre:
                block, self._block = self._block, None
                while block.lines and not block.lines[-1].strip():
                    block.lines.pop()
                self.blocks.append(block)
            if top == tag:
                break

    def handle_data(self, data: str) -> None:
        if self._block is not None:
            parts = data.split("\n")
            self._block.lines[-1] += parts[0]
            self._block.lines.extend(parts[1:])
        if not any(tag in ("script", "style", "template") for tag, _ in self._open):
            self.text.append(data)


def parse(markup: str) -> _Page:
    page = _Page()
    page.feed(markup)
    page.close()
    return page


def long_blocks(blocks: list[CodeBlock], page: str, to_shorten=TO_SHORTEN) -> tuple[list[str], set]:
    """The displayed blocks over MAX_LINES lines that are not listed in to_shorten (one line each),
    and the listed (function, page) pairs that are over it."""
    problems, listed = [], set()
    for block in blocks:
        if len(block.lines) <= MAX_LINES:
            continue
        if (block.shows, page) in to_shorten:
            listed.add((block.shows, page))
            continue
        first = next((line.strip() for line in block.lines if line.strip()), "")
        problems.append(f"{page}: {len(block.lines)} lines of {block.language} code from {first[:70]!r}")
    return problems, listed


def unseen_mentions(text: str) -> list[str]:
    return [
        f"{m.group(0)!r} in: {text[max(0, m.start() - 60) : m.end() + 60].strip()!r}"
        for m in UNSEEN.finditer(text)
    ]


def _read(name: str) -> _Page:
    path = HTML / f"{name}.html"
    if not path.is_file():
        pytest.fail(f"no {path}: run `make book` first (or `make browser`)")
    return parse(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", PAGES)
def test_no_displayed_code_block_is_too_long(name):
    problems, _ = long_blocks(_read(name).blocks, name.removeprefix("zh/"))
    assert not problems, "\n".join(problems)


def test_every_function_to_shorten_is_still_too_long():
    """TO_SHORTEN holds exactly the listed functions that are still over the limit."""
    found = set()
    for page in {page for _, page in TO_SHORTEN}:
        found |= long_blocks(_read(page).blocks, page)[1]
    fitted = sorted(TO_SHORTEN - found)
    assert not fitted, f"shortened (or no longer shown): remove {fitted} from TO_SHORTEN"


@pytest.mark.parametrize("name", PAGES)
def test_no_page_mentions_a_text_the_reader_cannot_see(name):
    found = unseen_mentions(" ".join(_read(name).text))
    assert not found, f"{name}: " + "\n".join(found)


INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.S)


def repeated_scripts(markup: str) -> list[str]:
    """The inline scripts of a page that repeat an earlier one (a second `const` declaration
    throws in the browser: tools/sphinxext/kvtutor_assets.py drops such copies)."""
    seen: set[str] = set()
    repeated = []
    for body in INLINE_SCRIPT.findall(markup):
        if body.strip() and body in seen:
            repeated.append(body.strip()[:100])
        seen.add(body)
    return repeated


@pytest.mark.parametrize("name", PAGES)
def test_no_inline_script_is_written_twice(name):
    path = HTML / f"{name}.html"
    if not path.is_file():
        pytest.fail(f"no {path}: run `make book` first (or `make browser`)")
    found = repeated_scripts(path.read_text(encoding="utf-8"))
    assert not found, f"{name}: inline scripts written twice: {found}"


# Each check bites


def _cell(code: str, *, hidden: bool = False, language: str = "ipython3") -> str:
    pre = f'<div class="highlight-{language}"><div class="highlight"><pre>{code}</pre></div></div>'
    inner = f'<div class="cell_input docutils container">{pre}</div>'
    if hidden:
        inner = f'<details class="hide above-input"><summary>Show code cell source</summary>{inner}</details>'
    return f'<div class="cell docutils container">{inner}</div>'


def test_the_check_counts_displayed_code_only():
    long = "\n".join(f"x{i} = {i}" for i in range(40))
    shown = "def serve_step(a):\n" + "\n".join(f"    <span>y{i}</span> = {i}" for i in range(37))
    markup = (
        _cell(long)
        + _cell(long, hidden=True)
        + _cell(long, language="myst-ansi")  # an output
        + _cell("\n".join("z" for _ in range(35)) + "\n\n")  # 35 lines and trailing blank ones
        + '<div class="cell_output"><div class="highlight-python"><div class="highlight">'
        + f"<pre>{shown}</pre></div></div></div>"
        + "<p>text</p><br>"
    )
    blocks = parse(markup).blocks
    assert [len(b.lines) for b in blocks] == [40, 35, 38]
    assert blocks[2].shows == "serve_step" and blocks[0].shows is None
    problems, listed = long_blocks(blocks, "book/x", {("serve_step", "book/x")})
    assert len(problems) == 1 and "40 lines" in problems[0] and listed == {("serve_step", "book/x")}
    problems, listed = long_blocks(blocks, "book/x", set())
    assert len(problems) == 2 and not listed


def test_the_check_finds_a_repeated_script():
    thebe = '<script>const THEBE_JS_URL = "x"</script>'
    assert repeated_scripts(f"{thebe}<script src='a.js'></script>{thebe}") == ['const THEBE_JS_URL = "x"']
    assert repeated_scripts(f"{thebe}<script>let y = 1</script>") == []


def test_the_check_finds_a_mention_of_an_unseen_text():
    assert len(unseen_mentions("As the worked example does; the explainer's table; 演算示例")) == 3
    assert unseen_mentions("An example small enough to follow by hand; 示例") == []
