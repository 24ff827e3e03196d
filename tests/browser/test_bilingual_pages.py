"""Figures and tables in both editions, as a reader's browser shows them (kvtutor.book.editions).

An output holds the English and the Chinese rendering; the page's language picks one. Checked on
a page written here (opened from disk, so it runs without a built book), in English and in
Chinese, with the output's own CSS and with the book's stylesheet alone: the edition's image and
table are shown at their size, the other edition's are not displayed, and the Chinese image is
another drawing than the English one (its words are Chinese, not the fallback). Then on the built
book, where it holds such figures: on every Chinese page each figure shows its Chinese drawing,
and on every English page its English one.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from kvtutor.book.display import table  # noqa: E402
from kvtutor.book.editions import cjk_font, figure_html  # noqa: E402
from kvtutor.plots import serving as serving_plots  # noqa: E402

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
HTML = ROOT / "_build" / "html"
CSS = ROOT / "book" / "_static" / "kvtutor.css"
LANGS = {"en": "en", "zh": "zh-CN"}

SHOWN = """() => Array.from(document.querySelectorAll('.kvt-lang-en, .kvt-lang-zh')).map((part) => {
  const box = part.getBoundingClientRect();
  const img = part.querySelector('img');
  return {lang: part.className.replace('kvt-lang-', ''), shown: getComputedStyle(part).display !== 'none'
          && box.width > 0 && box.height > 0, kind: img ? 'img' : 'table',
          loaded: img ? img.complete && img.naturalWidth > 0 : true,
          fits: img ? img.getBoundingClientRect().width >= Math.min(img.naturalWidth, box.width) - 1 : true,
          src: img ? img.src : '', alt: img ? img.alt : ''};
})"""


@pytest.fixture(scope="module")
def outputs() -> str:
    """One figure and one table, as the stored outputs hold them."""
    if cjk_font() is None:
        pytest.fail("no CJK font for the Chinese figures: run `make font`", pytrace=False)
    fig = serving_plots.plot_decode_throughput(
        [1, 2, 4, 8], [100.0, 190.0, 330.0, 420.0], title="What a bigger decode batch costs"
    )
    shape = table(["", "prefill (T = 3)", "decode (T = 1)"], [("input X", "[3, 8]", "[1, 8]")])
    return figure_html(fig) + shape.html


@contextlib.contextmanager
def opened(context, url: str):
    problems: list[str] = []
    page = context.new_page()
    # a failed load is reported with its URL below; the browser's own favicon.ico request is not ours
    page.on(
        "console",
        lambda m: (
            problems.append(f"console error: {m.text}")
            if m.type == "error" and not m.text.startswith("Failed to load resource")
            else None
        ),
    )
    page.on(
        "response",
        lambda r: (
            problems.append(f"{r.status}: {r.url}")
            if r.status >= 400 and not r.url.endswith("/favicon.ico")
            else None
        ),
    )
    page.on("pageerror", lambda e: problems.append(f"error: {e}"))
    page.goto(url, wait_until="load")
    try:
        yield page, problems
    finally:
        page.close()


def check_edition(parts: list[dict], lang: str, where: str) -> list[str]:
    """The problems with what a page in ``lang`` shows of the two-edition outputs ``parts``."""
    other = "en" if lang == "zh" else "zh"
    problems = [
        f"{where}: a {p['kind']} of the {lang} edition is not shown"
        for p in parts
        if p["lang"] == lang and not p["shown"]
    ]
    problems += [
        f"{where}: a {p['kind']} of the {other} edition is shown"
        for p in parts
        if p["lang"] == other and p["shown"]
    ]
    problems += [
        f"{where}: an image did not load or is squeezed" for p in parts if not (p["loaded"] and p["fits"])
    ]
    figures = [p for p in parts if p["kind"] == "img"]
    for en, zh in zip(figures[0::2], figures[1::2], strict=True):
        if (en["lang"], zh["lang"]) != ("en", "zh"):
            problems.append(f"{where}: a figure's parts are not English then Chinese")
        elif en["src"] == zh["src"]:
            problems.append(
                f"{where}: the Chinese drawing of {en['alt']!r} is the English one (no font, or untranslated)"
            )
    return problems


def page(folder: Path, body: str, lang: str, inline_css: bool) -> Path:
    if not inline_css:
        body = re.sub(r"<style>.*?</style>", "", body)
    path = folder / f"bilingual-{lang}-{'inline' if inline_css else 'book'}.html"
    path.write_text(
        f'<!doctype html><html lang="{LANGS[lang]}"><head><meta charset="utf-8"><title>editions</title>'
        f'<link rel="stylesheet" href="{CSS.as_uri()}"></head>'
        f'<body style="max-width: 46rem">{body}</body></html>',
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize("inline_css", [True, False], ids=["output-css", "book-css"])
@pytest.mark.parametrize("lang", list(LANGS))
def test_each_edition_shows_its_own_figure_and_table(lang, inline_css, file_context, outputs, tmp_path):
    with opened(file_context, page(tmp_path, outputs, lang, inline_css).as_uri()) as (pg, problems):
        parts = pg.evaluate(SHOWN)
        assert len(parts) == 4, parts
        problems += check_edition(parts, lang, lang)
        if lang == "zh":
            zh_alt = next(p["alt"] for p in parts if p["lang"] == "zh" and p["kind"] == "img")
            assert zh_alt == "更大的解码批要付出什么"
    assert not problems, "\n".join(problems)


def _built_pages() -> list[str]:
    """Built pages (English and Chinese) that hold a figure in both editions."""
    if not HTML.is_dir():
        return []
    marker = '<div class="kvt-lang-zh"><img'
    return sorted(
        str(p.relative_to(HTML))
        for p in HTML.glob("**/*.html")
        if marker in p.read_text(encoding="utf-8", errors="ignore")
    )


BUILT = _built_pages()


@pytest.mark.skipif(
    not BUILT, reason="no built page holds a figure in both editions yet (`make book` after `make notebooks`)"
)
@pytest.mark.parametrize("name", BUILT or ["none"])
def test_the_built_book_shows_each_pages_own_figures(name, request):
    site, context = request.getfixturevalue("site"), request.getfixturevalue("browser_context")
    lang = "zh" if name.startswith("zh/") else "en"
    with opened(context, f"{site}/{name}") as (pg, problems):
        pg.evaluate("() => document.querySelectorAll('img').forEach((img) => { img.loading = 'eager'; })")
        pg.wait_for_load_state("load")
        parts = pg.evaluate(SHOWN)
        problems = [p for p in problems if "THEBE_JS_URL" not in p]
        problems += check_edition(parts, lang, name)
    assert not problems, "\n".join(problems[:20])
