"""Open every page of the built book in headless Chromium and check what a reader sees.

For each page in _toc.yml, in both editions (English in _build/html, Chinese in
_build/html/zh): the title names the page, images load, math is typeset by the book's own
MathJax, no output shows a traceback or stderr, no code or output box scrolls sideways (at
window widths from 800 to 1280 px), internal links (and their #anchors) resolve, the page
links to its counterpart in the other edition, and the console has no errors except from
external resources, which are refused so that the check is the same offline as online (and
no script of the page's own throws: every inline script is written once). On
a Chinese page, its Chinese text is drawn by a font that has the characters, not as boxes
("tofu"). A page that fails is saved as a full-page screenshot in _build/screenshots/<page>.png
(the Chinese ones under _build/screenshots/zh/); KVTUTOR_SCREENSHOTS=1 saves every page.
"""

from __future__ import annotations

import html.parser
import importlib.util
import sys
import urllib.error
import urllib.parse
import urllib.request
from functools import cache
from pathlib import Path

import pytest

from kvtutor.environment import env_flag

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
HTML = ROOT / "_build" / "html"
SCREENSHOTS = ROOT / "_build" / "screenshots"
_spec = importlib.util.spec_from_file_location("_kvtutor_tools_i18n", ROOT / "tools" / "i18n.py")
_i18n = sys.modules["_kvtutor_tools_i18n"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_i18n)  # the page list (_toc.yml) lives with the edition tooling


# The Chinese edition: the same pages under zh/ (tools/i18n.py, tools/sphinxext/kvtutor_i18n.py).
EDITION_DIR = "zh"
PAGES = _i18n.toc_pages()
ZH_PAGES = [f"{EDITION_DIR}/{page}" for page in PAGES]


def counterpart(name: str) -> str:
    """The same page in the other edition: book/intro <-> zh/book/intro."""
    prefix = f"{EDITION_DIR}/"
    return name.removeprefix(prefix) if name.startswith(prefix) else prefix + name


class _PageParser(html.parser.HTMLParser):
    """Collects the ids on a page and the text of its first <h1> (without the ¶ link)."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.h1: str | None = None
        self._in_h1 = False
        self._skip = 0
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "a" and a.get("name"):
            self.ids.add(a["name"])
        if tag == "h1" and self.h1 is None:
            self._in_h1 = True
        elif self._in_h1 and ("headerlink" in (a.get("class") or "").split() or self._skip):
            self._skip += 1

    def handle_endtag(self, tag: str) -> None:
        if self._in_h1 and self._skip:
            self._skip -= 1
        elif self._in_h1 and tag == "h1":
            self._in_h1 = False
            self.h1 = " ".join("".join(self._text).split())

    def handle_data(self, data: str) -> None:
        if self._in_h1 and not self._skip:
            self._text.append(data)


@cache
def fetch(url: str) -> tuple[int, _PageParser | None]:
    """HTTP status of a local URL and, for HTML, its parsed ids and first heading."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            status, body, kind = response.status, response.read(), response.headers.get_content_type()
    except urllib.error.HTTPError as err:
        return err.code, None
    if kind != "text/html":
        return status, None
    parser = _PageParser()
    parser.feed(body.decode("utf-8", errors="replace"))
    return status, parser


IMAGES_NOT_LOADED = """async () => {
  const images = Array.from(document.images);
  images.forEach((img) => { img.loading = "eager"; });
  await Promise.all(images.map((img) => img.decode().catch(() => null)));
  return images.filter((img) => !(img.complete && img.naturalWidth > 0))
               .map((img) => img.currentSrc || img.src);
}"""

MATH_NODES = "() => document.querySelectorAll('span.math, div.math').length"

MATH_NOT_TYPESET = """async () => {
  await MathJax.startup.promise;
  const bad = [];
  document.querySelectorAll("span.math, div.math").forEach((node) => {
    if (!node.querySelector("mjx-container")) bad.push("not typeset: " + node.textContent.trim());
  });
  document.querySelectorAll("mjx-merror").forEach((node) => {
    bad.push("MathJax error: " + (node.getAttribute("data-mjx-error") || node.textContent));
  });
  return {bad: bad, containers: document.querySelectorAll("mjx-container").length};
}"""

BAD_OUTPUTS = """() => {
  const bad = [];
  document.querySelectorAll(".output.stderr, .output.traceback").forEach((node) => {
    bad.push(node.className + ": " + node.textContent.trim().slice(0, 400));
  });
  document.querySelectorAll(".cell_output, .output").forEach((node) => {
    if (node.textContent.includes("Traceback (most recent call last)")) {
      bad.push("traceback in output: " + node.textContent.trim().slice(0, 400));
    }
  });
  return bad;
}"""

# Code and outputs are kept to 80 columns and styled to fit (book/_static/kvtutor.css): at these
# window widths no code or output box may need a sideways scrollbar (below 800 px, on a phone,
# code boxes scroll).
FIT_WIDTHS = (1280, 1240, 1200, 1000, 800)
OVERFLOWING = """() => {
  const bad = [];
  document.querySelectorAll("div.cell pre, div.cell table, main table").forEach((node) => {
    if (node.scrollWidth > node.clientWidth + 1) {
      const lines = node.textContent.split("\\n");
      const longest = lines.reduce((a, b) => (b.length > a.length ? b : a), "");
      bad.push(`${node.tagName.toLowerCase()} ${node.scrollWidth - node.clientWidth} px too wide, `
               + `longest line ${longest.length} characters: ${longest.trim().slice(0, 100)}`);
    }
  });
  const page = document.documentElement;
  if (page.scrollWidth > page.clientWidth + 1) bad.push("the page itself scrolls sideways");
  return bad;
}"""

LINKS = "() => Array.from(document.querySelectorAll('a[href]'), (a) => a.href)"

EDITION_SWITCH = """() => Array.from(document.querySelectorAll('.kvtutor-edition-switch a'),
                                    (a) => ({href: a.href, lang: a.getAttribute('hreflang')}))"""

# Chinese text drawn as boxes: each element's CJK characters are drawn on a canvas in the
# element's own computed font, beside U+0378, a code point that no font has (the browser draws
# its missing-glyph box, or nothing). A character drawn like it, or two characters drawn alike,
# had no glyph in any font of the stack or the system's fallback.
CJK = "[\\u3400-\\u9fff\\uf900-\\ufaff]"
TOFU = """() => {
  const cjk = /CJK/g;
  const hasCjk = (el) => el && (el.textContent.match(cjk) || []).length > 0;
  const nav = Array.from(document.querySelectorAll("nav a, nav .caption")).find(hasCjk);
  const elements = [document.querySelector("main h1"), nav,
                    ...Array.from(document.querySelectorAll("main p, main li, main td"))]
    .filter(hasCjk);
  const canvas = document.createElement("canvas");
  canvas.width = 64;
  canvas.height = 64;
  const ctx = canvas.getContext("2d", {willReadFrequently: true});
  const checked = [];
  const bad = [];
  for (const el of elements.slice(0, 4)) {
    const style = getComputedStyle(el);
    ctx.font = `${style.fontStyle} ${style.fontWeight} 40px ${style.fontFamily}`;
    const draw = (ch) => {
      ctx.clearRect(0, 0, 64, 64);
      ctx.fillText(ch, 4, 48);
      return ctx.getImageData(0, 0, 64, 64).data.join(",");
    };
    const missing = draw("\\u0378");
    const chars = [...new Set(el.textContent.match(cjk))].slice(0, 8);
    const drawn = chars.map(draw);
    const boxes = chars.filter((ch, i) => drawn[i] === missing);
    if (boxes.length || new Set(drawn).size < chars.length) {
      bad.push(`${el.tagName.toLowerCase()} in font ${style.fontFamily}: ${chars.join("")} `
               + `drawn as boxes (${boxes.join("") || "all alike"})`);
    }
    checked.push(chars.join(""));
  }
  return {checked: checked, bad: bad};
}""".replace("CJK", CJK)


def check_links(links: list[str], site: str) -> list[str]:
    problems = []
    for link in sorted(set(links)):
        url = urllib.parse.urlsplit(link)
        if f"{url.scheme}://{url.netloc}" != site:
            continue
        path = url.path + ("index.html" if url.path.endswith("/") else "")
        status, target = fetch(f"{site}{path}")
        if status != 200:
            problems.append(f"link {link}: HTTP {status}")
        elif url.fragment:
            anchor = urllib.parse.unquote(url.fragment)
            if target is None or anchor not in target.ids:
                problems.append(f"link {link}: no id {anchor!r} on {path}")
    return problems


def test_toc_is_built() -> None:
    assert PAGES, "no pages found in _toc.yml"
    missing = [p for p in PAGES + ZH_PAGES if not (HTML / f"{p}.html").is_file()]
    assert not missing, f"pages in _toc.yml without HTML in {HTML}: {missing} (run `make book`)"


@pytest.mark.parametrize("edition", ["", f"{EDITION_DIR}/"])
def test_index_redirects_to_root(edition: str, site: str, browser_context) -> None:
    page = browser_context.new_page()
    try:
        page.goto(f"{site}/{edition}index.html")
        page.wait_for_url(f"{site}/{edition}{PAGES[0]}.html", timeout=10_000)
    finally:
        page.close()


@pytest.mark.parametrize("name", PAGES + ZH_PAGES)
def test_page(name: str, site: str, browser_context) -> None:
    origin_prefix = f"{site}/"
    problems: list[str] = []
    external: list[str] = []

    def on_route(route) -> None:
        url = route.request.url
        if url.startswith(origin_prefix) or not url.startswith(("http:", "https:")):
            route.continue_()
        else:
            external.append(f"refused external {route.request.resource_type}: {url}")
            route.abort()

    def on_console(message) -> None:
        if message.type != "error":
            return
        source = message.location.get("url", "")
        if source.startswith(origin_prefix) or not source:
            problems.append(f"console error: {message.text} ({source})")
        else:
            external.append(f"console error from external {source}: {message.text}")

    def on_response(response) -> None:
        if response.url.startswith(origin_prefix) and response.status >= 400:
            problems.append(f"HTTP {response.status}: {response.url}")

    def on_page_error(error) -> None:
        # Every one fails the page; the one every page threw ("THEBE_JS_URL already declared",
        # Sphinx 7's second copy of sphinx-thebe's script) is gone: tools/sphinxext/kvtutor_assets.py.
        problems.append(f"uncaught JavaScript error: {error}")

    def on_request_failed(request) -> None:
        if request.url.startswith(origin_prefix):
            problems.append(f"request failed: {request.url} ({request.failure})")

    checked = False
    page = browser_context.new_page()
    page.route("**/*", on_route)
    page.on("console", on_console)
    page.on("pageerror", on_page_error)
    page.on("response", on_response)
    page.on("requestfailed", on_request_failed)
    try:
        url = f"{site}/{name}.html"
        response = page.goto(url, wait_until="load")
        assert response is not None and response.status == 200, f"{url}: not served"

        _, parsed = fetch(url)
        heading = parsed.h1 if parsed else None
        if not heading:
            problems.append("no <h1> heading")
        elif heading not in page.title():
            problems.append(f"<title> {page.title()!r} does not contain heading {heading!r}")

        problems += [f"image not loaded: {src}" for src in page.evaluate(IMAGES_NOT_LOADED)]

        if page.evaluate(MATH_NODES):
            try:
                page.wait_for_function(
                    "() => window.MathJax && MathJax.startup && MathJax.startup.promise",
                    timeout=20_000,
                )
                math = page.evaluate(MATH_NOT_TYPESET)
                problems += math["bad"]
                if not math["containers"]:
                    problems.append("page has math but no mjx-container")
            except Exception as err:  # a timeout: MathJax never started
                problems.append(f"MathJax did not load or typeset: {err}")

        problems += [f"bad output: {text}" for text in page.evaluate(BAD_OUTPUTS)]

        switch = page.evaluate(EDITION_SWITCH)
        other = f"{site}/{counterpart(name)}.html"
        if [link["href"] for link in switch] != [other]:
            problems.append(f"link to the other edition: {switch}, expected one to {other}")
        if name.startswith(f"{EDITION_DIR}/"):
            if page.evaluate("() => document.documentElement.lang") != "zh-CN":
                problems.append("<html lang> is not zh-CN")
            tofu = page.evaluate(TOFU)
            problems += tofu["bad"]
            if not tofu["checked"]:
                problems.append("no Chinese text on the page (built without the catalogs?)")
        for width in FIT_WIDTHS:  # the layout changes at 1200 px (right-hand contents) and 1280
            page.set_viewport_size({"width": width, "height": 900})
            problems += [f"scrolls sideways at {width} px: {t}" for t in page.evaluate(OVERFLOWING)]
        page.set_viewport_size({"width": 1280, "height": 900})
        problems += check_links(page.evaluate(LINKS), site)
        page.wait_for_load_state("networkidle")
        checked = True
    finally:
        # A full-page screenshot takes about as long as the checks: only for a page that failed
        # (or raised), or for every page when asked.
        shot = SCREENSHOTS / f"{name}.png"
        if problems or not checked or env_flag("KVTUTOR_SCREENSHOTS"):
            shot.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(shot), full_page=True)
        page.close()

    if external:
        print("\n".join(["external resources (refused; not failures):", *external]))
    assert not problems, "\n".join(
        [f"{name}: {len(problems)} problem(s)", *problems, *external, f"screenshot: {shot}"]
    )
