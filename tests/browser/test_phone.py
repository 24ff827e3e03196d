"""The built book on a phone, 390 px wide (issue #44): every widget shows its newest state without
sideways hunting, no table column is cut, and a figure the page shrinks opens at full size.

- The cache stepper (decode chapter): after Prefill and after every decode step, with and
  without the cache, each head's table shows its row labels, the new token's q column and the
  newest position's column inside the visible part of its box (the box may scroll to the earlier
  positions; kv-stepper.js opens it at the newest).
- The scheduler and paged-pool replays (continuous batching, paged cache): at a busy step of every
  exported run, every column of the request table, TPOT and "found cached" included, lies inside
  the widget, and the table's box does not scroll.
- The KV calculator (KV memory): every column of its results lies inside the widget, for a model
  with long numbers.
- Figures (the prefill chapter): every code cell figure shown at under nine tenths of its own width
  has a visible button that opens it in a dialog at its full width; Escape closes it.

Both editions; the page itself never scrolls sideways. Run with `make browser` (after `make book`).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser


PHONE = {"width": 390, "height": 844}
EDITIONS = ["", "zh/"]

#: The parts of each head's table (row labels, the q column, the newest position) that lie outside
#: the visible part of the table's box or of the screen.
STEPPER_HIDDEN = """(root) => {
  const out = [];
  for (const table of root.querySelectorAll(".kvw-head-table")) {
    const seen = table.closest(".kvw-scroll").getBoundingClientRect();
    const left = Math.max(seen.left, 0), right = Math.min(seen.right, window.innerWidth);
    const head = table.querySelectorAll("thead th");
    const targets = [["row labels", table.querySelector("tbody th")],
                     ["newest position", head[head.length - 1]],
                     ["q column", table.querySelector("thead th.kvw-qcol")]];
    for (const [what, node] of targets) {
      if (!node) continue;
      const r = node.getBoundingClientRect();
      if (r.width === 0 || r.left < left - 1 || r.right > right + 1) {
        out.push(`layer ${table.dataset.layer} head ${table.dataset.head}: ${what} at ` +
                 `${Math.round(r.left)}..${Math.round(r.right)} px, ` +
                 `in view ${Math.round(left)}..${Math.round(right)}`);
      }
    }
  }
  return out;
}"""

#: Each column heading of the widget's tables that lies outside the widget, and each table box
#: that scrolls sideways.
COLUMNS_HIDDEN = """(root) => {
  const box = root.getBoundingClientRect();
  const right = Math.min(box.right, window.innerWidth);
  const out = [];
  for (const table of root.querySelectorAll("table")) {
    const heads = table.querySelectorAll("tr:first-child > *");
    heads.forEach((th, i) => {
      const r = th.getBoundingClientRect();
      if (r.right > right + 1 || r.left < box.left - 1) {
        out.push(`column ${i} ${JSON.stringify(th.textContent)} at ` +
                 `${Math.round(r.left)}..${Math.round(r.right)} px, ` +
                 `widget ${Math.round(box.left)}..${Math.round(right)}`);
      }
    });
    const scroll = table.closest(".kvw-scroll");
    if (scroll && scroll.scrollWidth > scroll.clientWidth + 1) {
      out.push(`${table.className}: its box scrolls sideways`);
    }
  }
  return out;
}"""

SIDEWAYS = "() => document.documentElement.scrollWidth > document.documentElement.clientWidth + 1"
WIDGET = '.kvtutor-widget[data-kvtutor-widget="{}"]'


def open_page(request, path: str):
    site, context = request.getfixturevalue("site"), request.getfixturevalue("browser_context")
    checks = request.getfixturevalue("checks")
    if not (checks.HTML / path).is_file():
        pytest.fail(f"no built {path}: run `make book` first (or `make browser`)")
    return checks.opened(context, f"{site}/{path}")


def press(root, action: str) -> None:
    root.query_selector(f'button[data-action="{action}"]').click()


def stepper_problems(root) -> list[str]:
    """Every state of the stepper after Prefill, with the cache and without."""
    problems = []
    press(root, "prefill")
    for state in range(1, 100):
        for mode in ("cache", "no-cache"):
            if root.evaluate("(r) => r.querySelector('.kvw-root').dataset.mode") != mode:
                press(root, "no-cache")
            problems += [f"state {state} ({mode}): {p}" for p in root.evaluate(STEPPER_HIDDEN)]
        if root.query_selector('button[data-action="next"]').get_attribute("aria-disabled") == "true":
            break
        press(root, "next")
    return problems


@pytest.mark.parametrize("edition", EDITIONS)
def test_the_stepper_shows_its_newest_column_on_a_phone(edition, request):
    with open_page(request, f"{edition}book/decode.html") as (page, problems):
        page.set_viewport_size(PHONE)
        root = page.locator('.kvtutor-widget[data-kvtutor-widget="cache-stepper"]').first.element_handle()
        problems += stepper_problems(root)
        if page.evaluate(SIDEWAYS):
            problems.append("the page scrolls sideways")
    assert not problems, "\n".join([f"{len(problems)} problem(s)", *problems[:30]])


REPLAYS = {"serving-replay": "book/continuous_batching.html", "paged-replay": "book/paged.html"}


@pytest.mark.parametrize("edition", EDITIONS)
@pytest.mark.parametrize("widget", list(REPLAYS))
def test_no_column_of_a_replay_is_cut_on_a_phone(widget, edition, request):
    with open_page(request, f"{edition}{REPLAYS[widget]}") as (page, problems):
        page.set_viewport_size(PHONE)
        root = page.locator(WIDGET.format(widget)).first.element_handle()
        runs = root.evaluate("(r) => JSON.parse(r.querySelector('script').textContent).runs")
        assert len(runs) >= 2, f"{widget}: no runs to check"
        for run in runs:
            if widget == "serving-replay":
                budget = "whole" if run["budget"] is None else str(run["budget"])
                picks = [["trace", run["trace"]], ["policy", run["policy"]], ["budget", budget]]
            else:
                picks = [["trace", run["trace"]], ["prefix", "on" if run["prefix_caching"] else "off"]]
            if page.evaluate(request.getfixturevalue("checks").PICK, [root, picks]) != run["id"]:
                problems.append(f"{widget}: could not pick {run['id']}")
                continue
            # a busy step: requests in every state, times in every column (Next stops at the end)
            root.evaluate(
                "(r) => { for (let i = 0; i < 9; i++) r.querySelector('[data-action=next]').click(); }"
            )
            problems += [f"{widget} {run['id']}: {p}" for p in root.evaluate(COLUMNS_HIDDEN)]
        if page.evaluate(SIDEWAYS):
            problems.append("the page scrolls sideways")
    assert not problems, "\n".join([f"{len(problems)} problem(s)", *problems[:30]])


@pytest.mark.parametrize("edition", EDITIONS)
def test_no_column_of_the_calculator_is_cut_on_a_phone(edition, request):
    with open_page(request, f"{edition}book/kv_memory.html") as (page, problems):
        page.set_viewport_size(PHONE)
        root = page.locator(WIDGET.format("kv-calculator")).first.element_handle()
        for model in ("deepseek-v3", "llama-3-8b"):
            root.query_selector('[data-field="model"]').select_option(model)
            root.query_selector('[data-field="batch"]').fill("1024")
            root.query_selector('[data-field="batch"]').dispatch_event("input")
            found = root.evaluate(COLUMNS_HIDDEN)
            problems += [f"{model}: {p}" for p in found]
            if not root.query_selector_all("table.kvw-results tr"):
                problems.append(f"{model}: no results shown")
        if page.evaluate(SIDEWAYS):
            problems.append("the page scrolls sideways")
    assert not problems, "\n".join([f"{len(problems)} problem(s)", *problems[:30]])


FIGURES = """() => Array.from(document.querySelectorAll(
    "article .cell_output img, article .cell_output svg, article figure img"))
  .filter((f) => f.getBoundingClientRect().width > 0 && !f.closest(".kvtutor-widget, button"))
  .map((f) => {
    const full = f instanceof HTMLImageElement ? f.naturalWidth
      : (f.viewBox && f.viewBox.baseVal && f.viewBox.baseVal.width) || 0;
    const button = f.parentElement.querySelector(":scope > .kvt-zoom");
    return {full, shown: f.getBoundingClientRect().width,
            button: !!button && !button.hidden && button.getBoundingClientRect().width > 0};
  })"""
OPEN_NTH = """([n]) => {
  const figures = Array.from(document.querySelectorAll(
    "article .cell_output img, article .cell_output svg, article figure img"))
    .filter((f) => f.getBoundingClientRect().width > 0 && !f.closest(".kvtutor-widget, button"));
  figures[n].parentElement.querySelector(":scope > .kvt-zoom").click();
  const dialog = document.querySelector("dialog.kvt-lightbox");
  const copy = dialog && dialog.querySelector(".kvt-lightbox-figure > *");
  return {open: !!dialog && dialog.open, width: copy ? copy.getBoundingClientRect().width : 0,
          scrolls: copy ? copy.parentElement.scrollWidth > copy.parentElement.clientWidth : false};
}"""


@pytest.mark.parametrize("edition", EDITIONS)
def test_a_shrunk_figure_opens_at_full_size_on_a_phone(edition, request):
    with open_page(request, f"{edition}book/prefill.html") as (page, problems):
        page.set_viewport_size(PHONE)
        page.wait_for_function("() => document.readyState === 'complete'")
        page.wait_for_timeout(200)  # the figures are marked in the frame after a resize
        figures = page.evaluate(FIGURES)
        shrunk = [i for i, f in enumerate(figures) if f["full"] and f["shown"] < 0.9 * f["full"]]
        assert len(shrunk) >= 3, f"the prefill chapter shows too few shrunk figures to check: {figures}"
        for i in shrunk:
            if not figures[i]["button"]:
                problems.append(
                    f"figure {i} ({figures[i]['shown']:.0f} of {figures[i]['full']:.0f} px): no button"
                )
                continue
            got = page.evaluate(OPEN_NTH, [i])
            if not got["open"] or got["width"] < figures[i]["full"] - 1 or not got["scrolls"]:
                problems.append(f"figure {i} ({figures[i]['full']:.0f} px wide) opens as {got}")
            page.keyboard.press("Escape")
            if page.evaluate("() => document.querySelector('dialog.kvt-lightbox').open"):
                problems.append(f"figure {i}: Escape left the dialog open")
        page.set_viewport_size({"width": 1280, "height": 900})
        page.wait_for_timeout(200)
        wide = page.evaluate(FIGURES)
        problems += [
            f"figure {i}: a button at 1280 px, where it is shown at full size"
            for i, f in enumerate(wide)
            if f["button"] and f["shown"] >= 0.9 * f["full"]
        ]
    assert not problems, "\n".join([f"{len(problems)} problem(s)", *problems[:30]])
