"""What the widget browser tests share (test_widget_pages.py, test_replay_widgets.py): a page written
to disk with the widgets' JavaScript and CSS, a page opened with its console errors collected, the
theme's dark mode, and two checks of a drawn widget: it fits (nothing sticks out of it, the page
does not scroll sideways), and its text is readable (contrast against what is behind it).

Not a test module: each test file loads it by path (tests/browser/ is not a package), as
conftest.py loads chromium.py.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HTML = ROOT / "_build" / "html"
STATIC = ROOT / "book" / "_static" / "widgets"


def scripts() -> list[str]:
    """The widgets' scripts in the order the book loads them (html_js_files in _config.yml)."""
    text = (ROOT / "_config.yml").read_text(encoding="utf-8")
    found = re.search(r"^\s*html_js_files:\s*\[([^\]]*)\]", text, re.M)
    assert found, "_config.yml: no html_js_files"
    names = [n.strip() for n in found.group(1).split(",")]
    return [n.removeprefix("widgets/") for n in names if n.startswith("widgets/")]


def widget_page(folder: Path, lang: str, widgets: Sequence[Any], name: str = "widgets") -> Path:
    """A page with ``widgets`` (kvtutor Widgets), their CSS and JavaScript from book/_static, in ``lang``."""
    head = f'<link rel="stylesheet" href="{(STATIC / "kv-widgets.css").as_uri()}">'
    head += "".join(f'<script src="{(STATIC / n).as_uri()}"></script>' for n in scripts())
    body = "".join(w.to_html() for w in widgets)
    path = folder / f"{name}-{lang}.html"
    path.write_text(
        f'<!doctype html><html lang="{lang}"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>widgets</title>{head}'
        f'</head><body style="max-width: 46rem">{body}</body></html>',
        encoding="utf-8",
    )
    return path


@contextlib.contextmanager
def opened(context: Any, url: str) -> Iterator[tuple[Any, list[str]]]:
    """The page at ``url``, and the list its console errors, script errors and any request leaving
    the machine are appended to (nothing is fetched from outside)."""
    problems: list[str] = []

    def on_route(route: Any) -> None:
        request_url = route.request.url
        if request_url.startswith(("http:", "https:")) and not request_url.startswith("http://127.0.0.1:"):
            problems.append(f"external request: {request_url}")
            route.abort()
        else:
            route.continue_()

    page = context.new_page()
    page.route("**/*", on_route)
    page.on("console", lambda m: problems.append(f"console error: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"error: {e}"))
    page.goto(url, wait_until="load")
    try:
        yield page, problems
    finally:
        page.close()


#: Picks a replay's run with its own pickers: ``[root, [[field, value], ...]]`` -> the run's id.
PICK = """([root, picks]) => {
  for (const [name, value] of picks) {
    const control = root.querySelector(`[data-field="${name}"]`);
    control.value = value;
    control.dispatchEvent(new Event("change", {bubbles: true}));
  }
  return root.querySelector(".kvw-root").dataset.run;
}"""


def set_theme(page: Any, mode: str) -> None:
    """The theme's light or dark mode (pydata-sphinx-theme reads data-theme and data-mode)."""
    page.evaluate(
        """(mode) => { document.documentElement.dataset.theme = mode;
                      document.documentElement.dataset.mode = mode; }""",
        mode,
    )


FIT = """([root, allowScroll]) => {
  const box = root.getBoundingClientRect();
  const bad = [];
  for (const n of root.querySelectorAll("*")) {
    if (allowScroll && n.closest(".kvw-scroll") && n.closest(".kvw-scroll") !== n) continue;
    const r = n.getBoundingClientRect();
    if (r.width && r.right > box.right + 1) bad.push(`${n.tagName.toLowerCase()}.${n.className} sticks out`);
  }
  if (!allowScroll) {
    for (const n of root.querySelectorAll(".kvw-scroll")) {
      if (n.scrollWidth > n.clientWidth + 1) bad.push(`${n.firstElementChild.className} scrolls`);
    }
  }
  const page = document.documentElement;
  if (page.scrollWidth > page.clientWidth + 1) bad.push("the page scrolls sideways");
  return [...new Set(bad)].slice(0, 8);
}"""


def fits(page: Any, root: Any, where: str, widths: Sequence[int] = (1280, 1200, 1000, 800)) -> list[str]:
    """Nothing in the widget sticks out of it, nothing scrolls, the page does not scroll sideways,
    at the book's desktop widths; at a phone's 390 px a wide table may scroll inside its own box."""
    problems = []
    for width in widths:
        page.set_viewport_size({"width": width, "height": 900})
        found = page.evaluate(FIT, [root, width < 600])
        problems += [f"{where} at {width} px: {p}" for p in found]
    page.set_viewport_size({"width": 1280, "height": 900})
    return problems


READABLE = """(root) => {
  const rgba = (s) => {
    const m = s.match(/[\\d.]+/g) || ["0", "0", "0", "0"];
    return m.map(Number).concat([1]).slice(0, 4);
  };
  const over = (top, under) => {
    const a = top[3];
    return [0, 1, 2].map((i) => top[i] * a + under[i] * (1 - a)).concat([1]);
  };
  const lum = (c) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
  };
  function behind(node) {
    const layers = [];
    for (let n = node; n; n = n.parentElement) {
      const c = rgba(getComputedStyle(n).backgroundColor);
      if (c[3] > 0) layers.push(c);
      if (c[3] >= 1) break;
    }
    let color = [255, 255, 255, 1];
    for (const c of layers.reverse()) color = over(c, color);
    return color;
  }
  const faded = (n) => {
    for (; n; n = n.parentElement) if (Number(getComputedStyle(n).opacity) < 1) return true;
    return false;
  };
  const bad = [];
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  for (let t = walker.nextNode(); t; t = walker.nextNode()) {
    const n = t.parentElement;
    if (!t.textContent.trim() || !n.getClientRects().length || faded(n)) continue;
    const style = getComputedStyle(n);
    if (style.visibility === "hidden" || style.display === "none") continue;
    const bg = behind(n), fg = over(rgba(style.color), bg);
    const [a, b] = [lum(fg), lum(bg)].sort((x, y) => y - x);
    const ratio = (a + 0.05) / (b + 0.05);
    const what = `${n.tagName.toLowerCase()}.${n.className} "${t.textContent.trim().slice(0, 30)}"`;
    if (ratio < 4.5) bad.push(`${what}: ${ratio.toFixed(2)}`);
  }
  return [...new Set(bad)].slice(0, 8);
}"""


def readable(page: Any, root: Any, where: str) -> list[str]:
    """Every visible, unfaded piece of text in the widget has a WCAG contrast of at least 4.5
    against the colours behind it (its own background, its ancestors', the page's)."""
    return [f"{where}: low contrast {p}" for p in page.evaluate(READABLE, root)]
