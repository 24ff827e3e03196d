"""What code cells print, on the Chinese pages (issue #44): in Chinese, and a printed table still
aligned in the browser.

The Chinese edition's build shows each printed output through kvtutor.book.printed (the stored
outputs stay English; tests/test_i18n.py checks that every line of the chapters has its Chinese).
Here, in the built book in headless Chromium: the Chinese page shows the Chinese table and the
English page the English one, and on the Chinese page each heading of a printed table ends, in
pixels, where the numbers under it end, as they do on the English page. Run with `make browser`
(after `make book`).
"""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.browser


PAGE = "book/cache_vs_recompute.html"
#: A printed table of that page, by a heading of each edition.
HEADING = {"": "uncached MFLOP", "zh/": "不缓存 MFLOP"}

#: Each line of the printed output that holds `heading`: its columns (runs of text between two or
#: more spaces) with the pixel where each ends, read character by character off the page.
COLUMNS = """(heading) => {
  const pre = Array.from(document.querySelectorAll("div.cell_output pre"))
    .find((p) => p.textContent.includes(heading));
  if (!pre) return null;
  const chars = [];
  const walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (let i = 0; i < node.length; i++) {
      const range = document.createRange();
      range.setStart(node, i);
      range.setEnd(node, i + 1);
      const rect = range.getBoundingClientRect();
      chars.push([node.data[i], rect.right, rect.top]);
    }
  }
  const lines = [[]];
  for (const c of chars) (c[0] === "\\n" ? lines.push([]) : lines[lines.length - 1].push(c));
  return lines.filter((l) => l.length).map((line) => {
    const text = line.map((c) => c[0]).join("");
    const out = [];
    for (const m of text.matchAll(/\\S+(?: \\S+)*/g)) out.push([m[0], line[m.index + m[0].length - 1][1]]);
    return out;
  });
}"""


def columns(request, edition: str) -> list[list[tuple[str, float]]]:
    checks = request.getfixturevalue("checks")
    path = checks.HTML / f"{edition}{PAGE}"
    if not path.is_file():
        pytest.fail(f"no built {path.relative_to(checks.ROOT)}: run `make book` first (or `make browser`)")
    site, context = request.getfixturevalue("site"), request.getfixturevalue("browser_context")
    with checks.opened(context, f"{site}/{edition}{PAGE}") as (page, problems):
        found = page.evaluate(COLUMNS, HEADING[edition])
    assert not problems, problems
    assert found, f"{edition}{PAGE}: no printed output holds {HEADING[edition]!r}"
    return found


@pytest.mark.parametrize("edition", list(HEADING))
def test_a_printed_table_is_in_the_pages_language_and_aligned(edition, request):
    lines = columns(request, edition)
    head, rows = lines[0], lines[1:]
    other = HEADING["zh/" if edition == "" else ""]
    assert HEADING[edition] in [text for text, _ in head] and all(other not in t for t, _ in head)
    assert rows and all(len(row) == len(head) for row in rows), lines
    for row in rows:
        misaligned = [(h, r) for (h, x), (r, y) in zip(head, row, strict=True) if abs(x - y) > 1.5]
        assert not misaligned, f"{edition}{PAGE}: headings and numbers end apart: {misaligned}"
    assert all(re.fullmatch(r"[\d.]+", text) for row in rows for text, _ in row)
