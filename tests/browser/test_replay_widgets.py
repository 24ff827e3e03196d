"""Drive the scheduler replays (book/_static/widgets/kv-scheduler.js) in headless Chromium: play every
exported run to its end and compare every count the page shows at every step with the export.

The serving replay (kvtutor.book.scheduler_widget, the page of "Continuous batching"): each step's
tokens run, slots held and tokens given, each request's state, slot, tokens run, positions cached,
tokens out, TTFT and TPOT (steps, and ms where the trace has a clock), and the toy requests' text.
The paged replay (kvtutor.book.paged_widget, "A paged KV cache"): each step's running count, free
and cached blocks, preemptions, prompt positions computed and found cached, evictions, who holds
each block, and each request's state, blocks, positions, tokens and prefix-cache hit. The export
itself is checked against run_serving and simulate_trace in tests/test_widgets.py; here the page's
own data must equal a fresh export. Also: the pickers offer only exported runs, the keyboard
(buttons, the slider) and Play work, both editions, the theme's dark mode, 390 px, and no console
error.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from kvtutor.book.paged_widget import paged_replay
from kvtutor.book.scheduler_widget import serving_replay

pytestmark = pytest.mark.browser

_spec = importlib.util.spec_from_file_location(
    "_kvtutor_widget_checks", Path(__file__).with_name("widget_checks.py")
)
assert _spec is not None and _spec.loader is not None
checks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(checks)

LANGS = {"en": "en", "zh": "zh-CN"}
SERVING = '.kvtutor-widget[data-kvtutor-widget="serving-replay"]'
PAGED = '.kvtutor-widget[data-kvtutor-widget="paged-replay"]'
LABELS = {
    "en": {"next": "Next step", "play": "Play", "pause": "Pause"},
    "zh": {"next": "下一步", "play": "播放", "pause": "暂停"},
}


@pytest.fixture(scope="module")
def exports() -> dict:
    return {"serving": serving_replay(), "paged": paged_replay()}


# ---------------------------------------------------------------- playing a run in the page

PICK = checks.PICK
#: Every step of the run on show, from Start to the end, as the page draws it.
PLAY = """(root) => {
  const node = root.querySelector(".kvw-root");
  const press = (action) => node.querySelector(`button[data-action="${action}"]`).click();
  const cells = (tr) => Object.fromEntries(Array.from(tr.querySelectorAll("td[data-k]"),
    (td) => [td.dataset.k, {v: td.dataset.v, text: td.textContent}]));
  press("start");
  const out = [];
  for (let guard = 0; guard < 500; guard++) {
    const status = node.querySelector(".kvw-status");
    out.push({
      index: Number(node.dataset.index), run: node.dataset.run, status: {...status.dataset},
      ms: (node.querySelector(".kvw-clock [data-k=ms]") || {dataset: {}}).dataset.v || null,
      slots: Array.from(node.querySelectorAll("[data-slot]"), (s) => s.dataset.req),
      rows: Array.from(node.querySelectorAll("tr[data-req]"), cells),
      texts: Array.from(node.querySelectorAll(".kvw-text"), (p) => p.textContent),
      pool: Array.from(node.querySelectorAll("[data-block]"), (b) => b.dataset.owners),
      totals: (node.querySelector(".kvw-totals") || {}).textContent || "",
      position: node.querySelector(".kvw-position").textContent,
      said: status.textContent,
      options: Array.from(node.querySelectorAll("select option"), (o) => o.textContent),
    });
    if (node.querySelector('button[data-action="next"]').getAttribute("aria-disabled") === "true") break;
    press("next");
  }
  return out;
}"""


def _num(text: str) -> float | None:
    return float(text) if text not in ("", None) else None


def _grouped(n: int) -> str:
    return f"{n:,}"


def check_serving_run(shown: list[dict], run: dict, trace: dict, states: list[str], where: str) -> list[str]:
    """The page's steps of one run against the export, cell by cell."""
    problems = []
    if len(shown) != len(run["steps"]) or [s["index"] for s in shown] != list(range(len(run["steps"]))):
        return [f"{where}: {len(shown)} steps shown, {len(run['steps'])} exported"]
    clock = "clock" in trace
    for i, (page, step, cells) in enumerate(zip(shown, run["steps"], run["cells"], strict=True)):
        at = f"{where} step {i}"
        want = {"run": str(step["run"]), "held": str(step["held"]), "given": str(step["given"])}
        if {k: page["status"].get(k) for k in want} != want:
            problems.append(f"{at}: status {page['status']}, expected {want}")
        if clock and _num(page["ms"]) != step["ms"]:
            problems.append(f"{at}: {page['ms']} ms, expected {step['ms']}")
        holders = ["" for _ in range(trace["slots"])]
        for r, c in enumerate(cells):
            if c[4] >= 0:
                holders[c[4]] = str(r)
        if page["slots"] != holders:
            problems.append(f"{at}: slots {page['slots']}, expected {holders}")
        for r, (row, c, lat) in enumerate(zip(page["rows"], cells, run["latency"], strict=True)):
            state, n_run, cached, given = states[c[0]], c[1], c[2], c[3]
            ttft = (lat["ttft_steps"], lat.get("ttft_ms")) if given else (None, None)
            tpot = (
                (lat["tpot_steps"][given - 2], lat["tpot_ms"][given - 2] if clock else None)
                if given > 1
                else (None, None)
            )
            expect = {
                "state": (state, None),
                "run": (str(n_run), _grouped(n_run) if n_run else "\u2014"),
                "cached": (
                    str(cached),
                    "\u2014" if state in ("future", "waiting", "left") else _grouped(cached),
                ),
                "given": (str(given), str(given)),
            }
            for key, (value, text) in expect.items():
                if row[key]["v"] != value or (text is not None and row[key]["text"] != text):
                    problems.append(f"{at} request {r} {key}: shows {row[key]}, expected {value!r} {text!r}")
            for key, (steps, ms) in (("ttft", ttft), ("tpot", tpot)):
                v = [_num(x) for x in row[key]["v"].split("|")]
                text = row[key]["text"]
                if v != [steps, ms] or (steps is not None and ms is not None and f"{ms:.2f}" not in text):
                    problems.append(f"{at} request {r} {key}: shows {row[key]}, expected {steps}, {ms}")
                if steps is None and text != "\u2014":
                    problems.append(f"{at} request {r} {key}: shows {text!r} before it is known")
        if trace["requests"][0].get("words"):
            for r, (text, req) in enumerate(zip(page["texts"], trace["requests"], strict=True)):
                words = " ".join([req["text"], *req["words"][: cells[r][3]]])
                if text.split(": ", 1)[-1].split() != words.split():
                    problems.append(f"{at} request {r}: text {text!r}, expected {words!r}")
        if (i == len(run["steps"]) - 1) != bool(page["totals"]) or (
            page["totals"] and str(run["totals"]["n_steps"]) not in page["totals"]
        ):
            problems.append(f"{at}: totals {page['totals']!r}")
    return problems


def check_paged_run(shown: list[dict], run: dict, states: list[str], where: str) -> list[str]:
    problems = []
    if len(shown) != len(run["steps"]):
        return [f"{where}: {len(shown)} steps shown, {len(run['steps'])} exported"]
    keys = {
        "running": "running",
        "free": "free",
        "cachedFree": "cached_free",
        "preemptions": "preemptions",
        "promptTokens": "prompt_tokens",
        "cachedTokens": "cached_tokens",
        "evictions": "evictions",
    }
    for i, (page, step, cells) in enumerate(zip(shown, run["steps"], run["cells"], strict=True)):
        at = f"{where} step {i}"
        got = {k: page["status"].get(k) for k in keys}
        want = {k: str(step[v]) for k, v in keys.items()}
        if got != want:
            problems.append(f"{at}: status {got}, expected {want}")
        pool = ["cached" if b == [-1] else ",".join(map(str, b)) for b in step["pool"]]
        if page["pool"] != pool:
            problems.append(f"{at}: pool {page['pool']}, expected {pool}")
        for r, (row, c) in enumerate(zip(page["rows"], cells, strict=True)):
            state = states[c[0]]
            held = state in ("admitted", "running", "finished")
            expect = {"state": (state, None), "blocks": (str(c[1]), str(c[1]) if held else "\u2014"),
                      "used": (str(c[2]), str(c[2]) if held else "\u2014"), "given": (str(c[3]), str(c[3])),
                      "hit": (str(c[4]), None)}  # fmt: skip
            for key, (value, text) in expect.items():
                if row[key]["v"] != value or (text is not None and row[key]["text"] != text):
                    problems.append(f"{at} request {r} {key}: shows {row[key]}, expected {value!r} {text!r}")
    return problems


#: The step number in the status line and in the counter beside the slider, by edition.
STEP_SAID = {"en": re.compile(r"^Step (\d+):"), "zh": re.compile(r"^第 (\d+) 步")}
POSITION = {
    "en": re.compile(r"^step (\d+) of steps 0\u2013(\d+)$"),
    "zh": re.compile(r"^第 (\d+) 步（步号 0\u2013(\d+)）$"),
}
#: A count of one with a plural noun ("1 tokens"), in the English edition.
PLURALS = "tokens|slots|steps|requests|blocks|preemptions|evictions|positions|prompts"
ONE_PLURAL = re.compile(rf"(?<![\d.,])1 (?:(?!of )[a-z]+ )?({PLURALS})\b")


def check_words(shown: list[dict], run: dict, lang: str, where: str) -> list[str]:
    """Each step's status line names the step the counter shows, the scheduler's own number (from
    0, as the chapter counts), and the counter ends at the run's last step; in English a count of
    one takes the singular."""
    problems = []
    last = str(run["steps"][-1].get("step", len(run["steps"]) - 1))
    for k, (page, step) in enumerate(zip(shown, run["steps"], strict=False)):
        number = str(step.get("step", k))
        said = STEP_SAID[lang].match(page["said"])
        position = POSITION[lang].match(page["position"])
        if not said or not position or (said.group(1), *position.groups()) != (number, number, last):
            problems.append(f"{where} step {k}: says {page['said'][:30]!r} beside {page['position']!r}, "
                            f"expected step {number} of 0 to {last}")  # fmt: skip
        if lang == "en":
            for text in (page["said"], page["totals"], page["position"], *page["options"]):
                problems += [
                    f"{where} step {k}: {m.group(0)!r} in {text!r}" for m in ONE_PLURAL.finditer(text)
                ]
    return problems


def play_all(page, exported: dict, kind: str, where: str) -> list[str]:
    """Pick every exported run with the page's own pickers, play it to the end and compare."""
    root = page.locator(SERVING if kind == "serving" else PAGED).first.element_handle()
    data = exported[kind].data
    problems = []
    if json.loads(root.query_selector("script").text_content()) != data:
        problems.append(f"{where}: the page's {kind} data is not the export's (re-run its cell)")
    traces = {t["id"]: t for t in data["traces"]}
    for run in data["runs"]:
        if kind == "serving":
            picks = [["trace", run["trace"]], ["policy", run["policy"]],
                     ["budget", "whole" if run["budget"] is None else str(run["budget"])]]  # fmt: skip
        else:
            picks = [["trace", run["trace"]], ["prefix", "on" if run["prefix_caching"] else "off"]]
        if page.evaluate(PICK, [root, picks]) != run["id"]:
            problems.append(f"{where}: picking {picks} did not show {run['id']}")
            continue
        shown = root.evaluate(PLAY)
        lang = "zh" if page.evaluate("() => document.documentElement.lang").startswith("zh") else "en"
        problems += check_words(shown, run, lang, f"{where} {run['id']}")
        if kind == "serving":
            problems += check_serving_run(
                shown, run, traces[run["trace"]], data["states"], f"{where} {run['id']}"
            )
        else:
            problems += check_paged_run(shown, run, data["states"], f"{where} {run['id']}")
    return problems


# ---------------------------------------------------------------- the controls

OPTIONS = """(root) => Object.fromEntries(Array.from(root.querySelectorAll("select"), (s) => [s.dataset.field,
  {disabled: s.disabled, options: Array.from(s.options, (o) => [o.value, o.disabled])}]))"""


def drive_controls(page, lang: str) -> list[str]:
    """Only exported runs can be picked; Next, the slider and Play work from the keyboard."""
    handle = page.locator(SERVING).first
    root = handle.element_handle()
    problems = []
    page.evaluate(PICK, [root, [["trace", "toy"]]])
    got = root.evaluate(OPTIONS)
    if not got["budget"]["disabled"] or [o for o in got["budget"]["options"] if not o[1]] != [
        ["whole", False]
    ]:
        problems.append(f"toy trace: the prefill picker offers {got['budget']}, expected only whole prompts")
    page.evaluate(PICK, [root, [["trace", "long"], ["policy", "static"]]])
    if root.evaluate(OPTIONS)["budget"]["disabled"] is not True:
        problems.append("static batching: chunked runs were not exported, yet the picker offers them")
    page.evaluate(PICK, [root, [["policy", "continuous"], ["budget", "32"]]])
    if root.evaluate("(r) => r.querySelector('.kvw-root').dataset.run") != "long-continuous-32":
        problems.append("could not pick the chunked run")
    index = lambda: int(root.evaluate("(r) => r.querySelector('.kvw-root').dataset.index"))  # noqa: E731
    nxt = handle.locator('button[data-action="next"]')
    if nxt.text_content() != LABELS[lang]["next"]:
        problems.append(f"the Next button reads {nxt.text_content()!r}")
    nxt.focus()
    page.keyboard.press("Enter")
    page.keyboard.press("Space")
    if index() != 2:
        problems.append(f"Enter and Space on Next: at step {index()}, expected 2")
    slider = handle.locator('input[data-field="step"]')
    slider.focus()
    page.keyboard.press("ArrowRight")
    if index() != 3:
        problems.append(f"ArrowRight on the slider: at step {index()}, expected 3")
    page.keyboard.press("End")
    n = len(next(r for r in serving_replay_runs(root) if r["id"] == "long-continuous-32")["steps"])
    if index() != n - 1:
        problems.append(f"End on the slider: at step {index()}, expected {n - 1}")
    focus = page.evaluate("() => getComputedStyle(document.activeElement).outlineStyle")
    if focus != "solid":
        problems.append(f"the slider's focus ring is {focus!r}")
    # Play from the start: it advances by itself until paused
    handle.locator('button[data-action="start"]').click()
    play = handle.locator('button[data-action="play"]')
    play.click()
    page.wait_for_function(
        "(r) => Number(r.querySelector('.kvw-root').dataset.index) >= 2", arg=root, timeout=15000
    )
    if play.text_content() != LABELS[lang]["pause"] or play.get_attribute("aria-pressed") != "true":
        problems.append(f"while playing the button reads {play.text_content()!r}")
    play.click()
    if play.text_content() != LABELS[lang]["play"] or play.get_attribute("aria-pressed") != "false":
        problems.append(f"after Pause the button reads {play.text_content()!r}")
    return problems


def serving_replay_runs(root) -> list[dict]:
    return json.loads(root.query_selector("script").text_content())["runs"]


def phone_and_dark(page, selector: str, picks: list, where: str, widths=(1280, 800, 390)) -> list[str]:
    """A busy step of a run, in dark and light mode, and at ``widths`` (390 px: a phone)."""
    root = page.locator(selector).first.element_handle()
    page.evaluate(PICK, [root, picks])
    root.evaluate(
        "(r) => { for (let i = 0; i < 9; i++) r.querySelector('button[data-action=next]').click(); }"
    )
    problems = checks.fits(page, root, where, widths=widths)
    for mode in ("dark", "light"):
        checks.set_theme(page, mode)
        problems += checks.readable(page, root, f"{where} in {mode} mode")
    return problems


# ---------------------------------------------------------------- the tests


@pytest.mark.parametrize("lang", list(LANGS))
def test_replays_from_disk(lang: str, exports: dict, file_context, tmp_path) -> None:
    page_path = checks.widget_page(tmp_path, LANGS[lang], [exports["serving"], exports["paged"]], "replays")
    with checks.opened(file_context, page_path.as_uri()) as (page, problems):
        if lang == "en":  # the drawing of every step; the data does not depend on the language
            problems += play_all(page, exports, "serving", "from disk")
            problems += play_all(page, exports, "paged", "from disk")
        problems += drive_controls(page, lang)
        problems += phone_and_dark(
            page, SERVING, [["trace", "long"], ["policy", "continuous"]], "serving replay"
        )
        problems += phone_and_dark(page, PAGED, [["trace", "shared"], ["prefix", "on"]], "paged replay")
        if page.locator(".kvtutor-fallback").count():
            problems.append("the figure for readers without JavaScript is still on the page")
    assert not problems, "\n".join([f"{len(problems)} problem(s)", *problems[:40]])


BUILT = {"book/continuous_batching": ("serving", SERVING), "book/paged": ("paged", PAGED)}


@pytest.mark.parametrize("edition", ["", "zh/"])
@pytest.mark.parametrize("name", list(BUILT))
def test_replays_in_the_built_book(name: str, edition: str, exports: dict, request) -> None:
    path = checks.HTML / f"{edition}{name}.html"
    kind, selector = BUILT[name]
    if not path.is_file():
        pytest.fail(f"no built {path.relative_to(checks.ROOT)}: run `make book` first (or `make browser`)")
    text = path.read_text(encoding="utf-8")
    assert f'data-kvtutor-widget="{kind}-replay"' in text, (
        f"{path.name} has no {kind} replay: its cell left the chapter"
    )
    assert text.count("<svg") >= 2 and "kvtutor-fallback" in text  # the figure for readers without JavaScript
    site, context = request.getfixturevalue("site"), request.getfixturevalue("browser_context")
    with checks.opened(context, f"{site}/{edition}{name}.html") as (page, problems):
        lang = "zh" if edition else "en"
        problems += play_all(page, exports, kind, f"{edition}{name}")
        next_label = page.locator(f'{selector} button[data-action="next"]').first.text_content()
        if next_label != LABELS[lang]["next"]:
            problems.append(f"the Next button reads {next_label!r} in the {lang} edition")
        picks = [["trace", "long"], ["policy", "continuous"]] if kind == "serving" else [["trace", "random"]]
        problems += phone_and_dark(page, selector, picks, f"{edition}{name}", widths=(1280, 390))
    assert not problems, "\n".join([f"{edition}{name}: {len(problems)} problem(s)", *problems[:40]])
