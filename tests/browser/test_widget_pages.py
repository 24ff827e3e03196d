"""Drive the page widgets (book/_static/widgets) in headless Chromium and compare what they display
with what the package computes.

The cache stepper: Prefill, then every decode step, with the cache and without; the K and V rows,
the new token's q, its scores and softmax weights, the row sums, the shapes and the sampled tokens
read off the page equal the toy model's own trace printed to the same digits, and the cost rows
equal ``measure.costs.generation_costs``. Back and the keyboard work. The KV calculator: every
bundled model at several settings shows what ``python -m kvtutor kv-memory ... --json`` prints,
and typed configs (GQA, MLA) what ``kv_memory`` gives for them. No console errors, both editions.

Two kinds of page: one written here to a temporary folder with the widgets' JavaScript, CSS and
exported HTML (opened from disk, file://, so it runs without a built book), and the built chapters
(_build/html/book/decode.html, kv_memory.html and their zh/ copies, through the local server).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest

import kvtutor
from kvtutor.book.widgets import cache_stepper, kv_calculator
from kvtutor.measure import memory
from kvtutor.measure.costs import generation_costs
from kvtutor.models.hf_config import ModelSpec, bundled_models, load_model_spec

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
HTML = ROOT / "_build" / "html"
STATIC = ROOT / "book" / "_static" / "widgets"
SCRIPTS = ("kv-widgets.js", "kv-stepper.js", "kv-calculator.js")  # the order of html_js_files
# Sphinx 7 writes sphinx-thebe's inline config twice (see KNOWN_PAGE_ERRORS in test_browser.py).
KNOWN_PAGE_ERRORS = {"Identifier 'THEBE_JS_URL' has already been declared"}
LANGS = {"en": "en", "zh": "zh-CN"}
N_STEPS = 3


# ---------------------------------------------------------------- the Python side


@pytest.fixture(scope="module")
def trace():
    """The toy model's trace, float64 (as the export runs it), to the printed digits."""
    toy = kvtutor.load_toy_model()
    sd, heads = toy.to_gpt2_state_dict(), toy.config.n_heads
    model = kvtutor.GPT2Model.from_gpt2_state_dict(sd, n_heads=heads, dtype=np.float64)
    tok = kvtutor.load_toy_tokenizer()
    ids = tok.encode(kvtutor.TOY_PROMPT)
    cache, prefill = model.new_cache(), []
    token = int(np.argmax(model.prefill(ids, cache, prefill)[-1]))
    sequence, steps, sampled = list(ids), [], [token]
    for _ in range(N_STEPS):
        layers, full = [], []
        sequence.append(token)
        token = int(np.argmax(model.decode_step(token, cache, layers)))
        model.forward(sequence, None, full)
        steps.append({"layers": layers, "full": full})
        sampled.append(token)
    assert sampled == toy.generate(ids, N_STEPS + 1)  # the float32 model's greedy tokens
    cfg = toy.config
    costs = {mode: generation_costs(cfg, len(ids), N_STEPS + 1, mode == "cached", dtype=4)
             for mode in ("cached", "recompute")}  # fmt: skip
    return {"ids": ids, "prefill": prefill, "steps": steps, "tokens": [tok.vocab[i] for i in sequence],
            "sampled": [tok.vocab[i] for i in sampled], "costs": costs, "cfg": cfg}  # fmt: skip


def shown(x: float) -> str:
    return f"{x:.3f}"


def cli_json(*argv: str) -> dict:
    """`python -m kvtutor kv-memory ... --json`, run in this process."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert memory.main([*argv, "--json"]) == 0
    return json.loads(out.getvalue())


# ---------------------------------------------------------------- pages and the browser


def widget_page(folder: Path, lang: str) -> Path:
    """A page with both widgets, their CSS and JavaScript from book/_static, in ``lang``."""
    head = f'<link rel="stylesheet" href="{(STATIC / "kv-widgets.css").as_uri()}">'
    head += "".join(f'<script src="{(STATIC / name).as_uri()}"></script>' for name in SCRIPTS)
    body = cache_stepper().to_html() + kv_calculator().to_html()
    path = folder / f"widgets-{lang}.html"
    path.write_text(
        f'<!doctype html><html lang="{lang}"><head><meta charset="utf-8"><title>widgets</title>{head}'
        f'</head><body style="max-width: 46rem">{body}</body></html>',
        encoding="utf-8",
    )
    return path


@contextlib.contextmanager
def opened(context, url: str):
    """The page at ``url``, and the list its console errors, script errors and any request
    leaving the machine are appended to (nothing is fetched from outside)."""
    problems: list[str] = []

    def on_route(route) -> None:
        request_url = route.request.url
        if request_url.startswith(("http:", "https:")) and not request_url.startswith("http://127.0.0.1:"):
            problems.append(f"external request: {request_url}")
            route.abort()
        else:
            route.continue_()

    page = context.new_page()
    page.route("**/*", on_route)
    page.on("console", lambda m: problems.append(f"console error: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: None if str(e) in KNOWN_PAGE_ERRORS else problems.append(f"error: {e}"))
    page.goto(url, wait_until="load")
    try:
        yield page, problems
    finally:
        page.close()


OUTSIDE = """(root) => {
  const box = root.getBoundingClientRect();
  const bad = Array.from(root.querySelectorAll("table, .kvw-scroll, fieldset"))
    .filter((n) => n.getBoundingClientRect().right > box.right + 1 || n.scrollWidth > n.clientWidth + 1)
    .map((n) => n.className || n.tagName);
  const page = document.documentElement;
  return page.scrollWidth > page.clientWidth + 1 ? bad.concat(["the page scrolls sideways"]) : bad;
}"""


def fits(page, root, where: str) -> list[str]:
    """Nothing in the widget sticks out of it or scrolls, from 800 to 1280 px (as the book's pages)."""
    problems = []
    for width in (1280, 1200, 1000, 800):
        page.set_viewport_size({"width": width, "height": 900})
        problems += [f"{where} at {width} px: {name} does not fit" for name in root.evaluate(OUTSIDE)]
    page.set_viewport_size({"width": 1280, "height": 900})
    return problems


# ---------------------------------------------------------------- the cache stepper

CELLS = """(root) => Array.from(root.querySelectorAll("[data-kind]"), (node) => ({
  ...node.dataset, text: node.textContent}))"""
STATE = """(root) => ({state: Number(root.querySelector(".kvw-root").dataset.state),
  mode: root.querySelector(".kvw-root").dataset.mode,
  shapes: Array.from(root.querySelectorAll(".kvw-shape"), (n) => n.textContent),
  next: (root.querySelector("[data-role=next]") || {}).textContent || null,
  sequence: Array.from(root.querySelectorAll(".kvw-sequence .kvw-token:not(.kvw-token-next)"),
                       (n) => n.textContent),
  costs: Object.fromEntries(Array.from(root.querySelectorAll("[data-cost]"),
                                       (n) => [n.dataset.cost, n.textContent])),
  wasted: root.querySelectorAll("td.kvw-col-wasted[data-kind=k], td.kvw-col-wasted[data-kind=v]").length,
  buttons: Object.fromEntries(Array.from(root.querySelectorAll("button"), (b) => [b.dataset.action,
    {text: b.textContent, disabled: b.getAttribute("aria-disabled"),
     checked: b.getAttribute("aria-checked")}]))})"""


def expected_cells(trace: dict, state: int, recompute: bool) -> dict[tuple, str]:
    """What the page should print at ``state`` (1: prefilled, 1 + i: after step i), by cell."""
    out: dict[tuple, str] = {}
    if state == 1:
        layers = trace["prefill"]
    else:
        step = trace["steps"][state - 2]
        layers = step["full"] if recompute else step["layers"]
    for l, layer in enumerate(layers):
        for kind in ("k", "v"):
            for h, rows in enumerate(layer[f"{kind}_HSK"]):
                for pos, row in enumerate(rows):
                    out.update({(l, h, kind, pos, j): shown(x) for j, x in enumerate(row)})
        if state == 1:
            continue
        S = layer["k_HSK"].shape[1]
        for h in range(layer["q_HTK"].shape[0]):
            out.update({(l, h, "q", None, j): shown(x) for j, x in enumerate(layer["q_HTK"][h, -1])})
            out.update(
                {(l, h, "score", pos, None): shown(x) for pos, x in enumerate(layer["scores_HTS"][h, -1])}
            )
            out.update({(l, h, "weight", pos, None): shown(x) for pos, x in enumerate(layer["a_HTS"][h, -1])})
            out[(l, h, "sum", None, None)] = shown(layer["a_HTS"][h, -1].sum())
            for t in range(S - 1 if recompute else 0):
                out.update({(l, h, f"score-old{t}", pos, None): shown(x)
                            for pos, x in enumerate(layer["scores_HTS"][h, t])})  # fmt: skip
    return out


def displayed_cells(root) -> dict[tuple, str]:
    out = {}
    for cell in root.evaluate(CELLS):
        kind = cell["kind"] + cell.get("query", "")
        pos = int(cell["pos"]) if "pos" in cell else None
        dim = int(cell["dim"]) if "dim" in cell else None
        text = cell["text"].split()[-1] if kind == "sum" else cell["text"]
        out[(int(cell["layer"]), int(cell["head"]), kind, pos, dim)] = text
    return out


def check_state(root, trace: dict, state: int, recompute: bool, lang: str) -> list[str]:
    problems = []
    got = root.evaluate(STATE)
    cfg, P = trace["cfg"], len(trace["ids"])
    S = 0 if state == 0 else P + state - 1
    where = f"state {state}{' without a cache' if recompute else ''}"
    if (got["state"], got["mode"]) != (state, "no-cache" if recompute else "cache"):
        return [f"{where}: the page is at state {got['state']}, {got['mode']}"]
    shape = f"[{cfg.n_heads}, {S}, {cfg.d_head}]"
    if len(got["shapes"]) != cfg.n_layers or not all(shape in s for s in got["shapes"]):
        problems.append(f"{where}: shapes {got['shapes']}, expected {shape} in each of {cfg.n_layers} layers")
    if got["sequence"] != trace["tokens"][:S]:
        problems.append(f"{where}: sequence {got['sequence']}, expected {trace['tokens'][:S]}")
    if state:
        expected = trace["sampled"][state - 1]
        if not (got["next"] or "").endswith(expected):
            problems.append(f"{where}: next token {got['next']!r}, expected {expected!r}")
        want = expected_cells(trace, state, recompute)
        have = displayed_cells(root)
        if have != want:
            diff = sorted(set(want.items()) ^ set(have.items()), key=str)[:6]
            problems.append(f"{where}: {len(have)} cells shown, {len(want)} expected; differing: {diff}")
        for mode in ("cached", "recompute"):
            costs = trace["costs"][mode]
            totals = {
                "flops": sum(c.flops for c in costs[:state]),
                "bytes": sum(c.bytes for c in costs[:state]),
            }
            step = costs[state - 1]
            pairs = [("step-flops", step.flops), ("step-bytes", step.bytes)]
            pairs += [("total-flops", totals["flops"]), ("total-bytes", totals["bytes"])]
            for key, value in pairs:
                if got["costs"].get(f"{mode}-{key}") != f"{value:,}":
                    problems.append(
                        f"{where}: {mode}-{key} shows {got['costs'].get(f'{mode}-{key}')}, expected {value:,}"
                    )
        wasted = 2 * cfg.n_layers * cfg.n_heads * (S - 1) * cfg.d_head if recompute and state > 1 else 0
        if got["wasted"] != wasted:
            problems.append(f"{where}: {got['wasted']} K/V cells marked recomputed, expected {wasted}")
    labels = {"en": "Prefill", "zh": "预填充"}[lang]
    if got["buttons"]["prefill"]["text"] != labels:
        problems.append(f"{where}: the Prefill button reads {got['buttons']['prefill']['text']!r}")
    ends = {"prefill": state == 1, "next": state == N_STEPS + 1, "back": state == 0}
    buttons = {action: got["buttons"][action]["disabled"] == "true" for action in ends}
    if buttons != ends or got["buttons"]["no-cache"]["checked"] != str(recompute).lower():
        problems.append(f"{where}: buttons {got['buttons']}, expected disabled {ends}")
    return problems


def drive_stepper(page, trace: dict, lang: str) -> list[str]:
    root = page.locator('.kvtutor-widget[data-kvtutor-widget="cache-stepper"]').first
    button = {a: root.locator(f'button[data-action="{a}"]') for a in ("prefill", "next", "back", "no-cache")}
    problems = check_state(root, trace, 0, False, lang)
    button["prefill"].click()
    problems += check_state(root, trace, 1, False, lang)
    for state in range(2, N_STEPS + 2):
        button["next"].click()
        problems += check_state(root, trace, state, False, lang)
        button["no-cache"].click()
        problems += check_state(root, trace, state, True, lang)
        button["no-cache"].click()
    button["next"].click(force=True)  # aria-disabled at the end: nothing happens
    problems += check_state(root, trace, N_STEPS + 1, False, lang)
    button["no-cache"].click()  # the widest view: every row and score row, S = 6
    problems += fits(page, root, "the last step without a cache")
    button["no-cache"].click()
    for state in range(N_STEPS, -1, -1):
        button["back"].click()
        problems += check_state(root, trace, state, False, lang)
    # the keyboard: Tab to a button, Enter and Space press it; the focus ring shows; at the end
    # the button keeps the focus
    button["back"].focus()
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Enter")
    for _ in range(N_STEPS + 1):
        page.keyboard.press("Space")
    problems += check_state(root, trace, N_STEPS + 1, False, lang)
    focus = page.evaluate("""() => ({action: document.activeElement.dataset.action,
      outline: getComputedStyle(document.activeElement).outlineStyle})""")
    if focus != {"action": "next", "outline": "solid"}:
        problems.append(f"keyboard: the focus is on {focus}, expected a solid ring on Next token")
    return problems


# ---------------------------------------------------------------- the KV calculator

SET_AND_READ = """([root, values]) => {
  const node = root.querySelector(".kvw-root");
  for (const [name, value] of values) {
    const control = node.querySelector(`[data-field="${name}"]`);
    control.value = value;
    control.dispatchEvent(new Event(control.tagName === "SELECT" ? "change" : "input", {bubbles: true}));
  }
  const out = {valid: node.dataset.valid, error: node.querySelector(".kvw-error").textContent};
  node.querySelectorAll("[data-key]").forEach((n) => {
    out[n.dataset.key] = n.dataset.value !== undefined ? n.dataset.value : n.textContent;
  });
  return out;
}"""
#: (seq_len or None for the model's context, batch, KV dtype, weights dtype, GiB, window, key scales)
SETTINGS = [
    (None, 1, "bf16", "bf16", 80, None, "per_token"),
    (8192, 8, "int8", "bf16", 80, None, "per_token"),
    (32768, 4, "fp8", "fp8", 141, 4096, "per_token"),
    (1000, 3, "int4", "bf16", 24.5, 300, "per_channel"),
    (131072, 16, "fp32", "int8", 640, None, "per_token"),
]
RESULT_KEYS = (
    "kv_bytes_per_token", "kv_scale_bytes_per_token", "kv_bytes_per_token_decompressed",
    "kv_bytes_per_sequence", "kv_bytes_per_sequence_full", "kv_bytes_per_sequence_bf16",
    "kv_scale_bytes_fixed", "kv_bytes_total", "weights_bytes", "total_bytes", "memory_bytes",
)  # fmt: skip


def compare(got: dict, report: dict, where: str) -> list[str]:
    problems = [] if got["valid"] == "true" else [f"{where}: refused: {got['error']}"]
    for key in RESULT_KEYS:
        if key in got and int(got[key].replace(",", "")) != report[key]:
            problems.append(f"{where}: {key} shows {got[key]}, expected {report[key]:,}")
    shown_when = {
        "kv_bytes_per_token": True, "kv_bytes_per_sequence": True, "kv_bytes_total": True,
        "weights_bytes": True, "kv_scale_bytes_per_token": report["kv_scale_bytes_per_token"] > 0,
        "kv_bytes_per_token_decompressed": report["attention"] == "MLA",
        "kv_bytes_per_sequence_full": report["kv_bytes_per_sequence_full"] != report["kv_bytes_per_sequence"],
        "kv_bytes_per_sequence_bf16": report["kv_bytes_per_sequence_bf16"] != report["kv_bytes_per_sequence"],
        "kv_scale_bytes_fixed": report["kv_scale_bytes_fixed"] > 0,
    }  # fmt: skip
    problems += [f"{where}: {key} {'not ' if want else ''}shown" for key, want in shown_when.items()
                 if (key in got) != want]  # fmt: skip
    if (got.get("max_batch"), got.get("fits")) != (str(report["max_batch"]), str(report["fits"]).lower()):
        problems.append(f"{where}: max batch {got.get('max_batch')}, fits {got.get('fits')}, expected "
                        f"{report['max_batch']}, {report['fits']}")  # fmt: skip
    return problems


def drive_calculator(page, lang: str) -> list[str]:
    root = page.locator('.kvtutor-widget[data-kvtutor-widget="kv-calculator"]').first.element_handle()
    problems = []
    for name in bundled_models():
        spec = load_model_spec(name)
        for seq, batch, dtype, wdtype, gib, window, keys in SETTINGS:
            keys = "per_token" if spec.kv_lora_rank else keys
            seq = spec.max_seq_len if seq is None else seq
            values = [["model", name], ["seq_len", seq], ["batch", batch], ["dtype", dtype],
                      ["key_scales", keys], ["group_size", 32], ["weights_dtype", wdtype],
                      ["window", "" if window is None else window], ["memory_gib", gib]]  # fmt: skip
            argv = [name, "--seq-len", str(seq), "--batch", str(batch), "--kv-dtype", dtype,
                    "--weights-dtype", wdtype, "--memory-gib", str(gib), "--key-scales", keys]  # fmt: skip
            report = cli_json(*argv, *(["--window", str(window)] if window else []))
            problems += compare(page.evaluate(SET_AND_READ, [root, values]), report, " ".join(argv))
    # typed configs: a small GQA model and an MLA one, against kv_memory on the same sizes
    gqa = ModelSpec(name="custom", model_type="llama", arch="gated", n_layers=22, d_model=2048, n_heads=32,
                    n_kv_heads=4, d_head=64, d_ff=5632, vocab_size=32000, max_seq_len=2048)  # fmt: skip
    mla = ModelSpec(name="custom", model_type="deepseek_v2", arch="gated", n_layers=27, d_model=2048,
                    n_heads=16, n_kv_heads=16, d_head=192, d_ff=10944, vocab_size=102400,
                    max_seq_len=163840, kv_lora_rank=512, qk_rope_head_dim=64)  # fmt: skip
    for spec, params in ((gqa, 1.1), (mla, 15.7)):
        typed = [["n_layers", spec.n_layers], ["n_heads", spec.n_heads], ["n_kv_heads", spec.n_kv_heads],
                 ["d_head", spec.d_head], ["kv_lora_rank", spec.kv_lora_rank],
                 ["qk_rope_head_dim", spec.qk_rope_head_dim], ["params_b", params]]  # fmt: skip
        for dtype, window in (("bf16", None), ("int8", 512), ("fp8", None)):
            got = page.evaluate(SET_AND_READ, [root, [["model", "gpt2"], *typed, ["seq_len", 5000],
                                ["batch", 7], ["dtype", dtype], ["weights_dtype", "bf16"],
                                ["window", window or ""], ["memory_gib", 40]]])  # fmt: skip
            report = memory.kv_memory(spec, 5000, 7, dtype, 40, "bf16", window=window).to_dict()
            report["weights_bytes"] = math.ceil(round(params * 1e9) * 16 / 8)
            report["total_bytes"] = report["weights_bytes"] + report["kv_bytes_total"]
            room = 40 * memory.GIB - report["weights_bytes"] - report["kv_scale_bytes_fixed"]
            report["max_batch"] = max(0, room // report["kv_bytes_per_sequence"])
            report["fits"] = report["total_bytes"] <= 40 * memory.GIB
            problems += compare(got, report, f"typed {spec.attention_kind} {dtype} window {window}")
            if root.evaluate("(r) => r.querySelector('[data-field=model]').value") != "custom":
                problems.append("typing a config number did not switch the model to custom")
    # refused input: named in the page, the numbers greyed, no error thrown
    labels = {"en": ("batch B", "KV heads"), "zh": ("批大小 B", "KV 头")}[lang]
    for (field, value), label in zip((("batch", "0"), ("n_kv_heads", "5")), labels, strict=True):
        got = page.evaluate(SET_AND_READ, [root, [["model", "llama-3-8b"], [field, value]]])
        if got["valid"] != "false" or label not in got["error"]:
            problems.append(
                f"{field}={value}: expected a message naming it, got {got['valid']}, {got['error']!r}"
            )
    page.evaluate(SET_AND_READ, [root, [["model", "deepseek-v3"], ["batch", "8"], ["dtype", "int8"]]])
    return problems + fits(page, root, "the calculator")


# ---------------------------------------------------------------- the tests


@pytest.mark.parametrize("lang", list(LANGS))
def test_widgets_from_disk(lang: str, file_context, trace, tmp_path) -> None:
    page_path = widget_page(tmp_path, LANGS[lang])
    with opened(file_context, page_path.as_uri()) as (page, problems):
        problems += drive_stepper(page, trace, lang)
        problems += drive_calculator(page, lang)
    assert not problems, "\n".join([f"{len(problems)} problem(s)", *problems[:40]])


BUILT = {"book/decode": "cache-stepper", "book/kv_memory": "kv-calculator"}


@pytest.mark.parametrize("edition", ["", "zh/"])
@pytest.mark.parametrize("name", list(BUILT))
def test_widgets_in_the_built_book(name: str, edition: str, trace, request) -> None:
    path = HTML / f"{edition}{name}.html"
    if not path.is_file():
        pytest.fail(f"no built {path.relative_to(ROOT)}: run `make book` first (or `make browser`)")
    assert f'data-kvtutor-widget="{BUILT[name]}"' in path.read_text(encoding="utf-8"), (
        f"{path.relative_to(ROOT)} has no {BUILT[name]} widget: its cell left the chapter"
    )
    site, context = request.getfixturevalue("site"), request.getfixturevalue("browser_context")
    with opened(context, f"{site}/{edition}{name}.html") as (page, problems):
        lang = "zh" if edition else "en"
        if page.evaluate("() => document.documentElement.lang").startswith("zh") != (lang == "zh"):
            problems.append("<html lang> is not the edition's")
        problems += (
            drive_stepper(page, trace, lang)
            if BUILT[name] == "cache-stepper"
            else drive_calculator(page, lang)
        )
    assert not problems, "\n".join([f"{edition}{name}: {len(problems)} problem(s)", *problems[:40]])
