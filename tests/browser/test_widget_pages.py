"""Drive the cache stepper and the KV calculator (book/_static/widgets) in headless Chromium and
compare what they display with what the package computes.

The cache stepper: Prefill, then every decode step, with the cache and without; the K and V rows,
the new token's q, its scores and softmax weights, the row sums, the shapes and the sampled tokens
read off the page equal the toy model's own trace printed to the same digits, and the cost rows
equal ``measure.costs.generation_costs``. Back and the keyboard work. The KV calculator: every
bundled model at several settings shows what ``python -m kvtutor kv-memory ... --json`` prints,
typed configs (GQA, MLA) what ``kv_memory`` gives for them, every bundled config.json pasted into
its box what ``kv-memory CONFIG.json`` prints, and its config reader (kv-config.js) agrees with
``models.hf_config`` on edge configs, accepted or refused by the same key. Each refused input
blanks every result that depends on it, and its message names the field and its unit. No console
errors, both editions; in the built book also the theme's dark mode and a 390 px phone.

Two kinds of page: one written here to a temporary folder with the widgets' JavaScript, CSS and
exported HTML (opened from disk, file://, so it runs without a built book), and the built chapters
(_build/html/book/decode.html, kv_memory.html and their zh/ copies, through the local server).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

import kvtutor
from kvtutor.book.widgets import cache_stepper, kv_calculator
from kvtutor.measure import memory
from kvtutor.measure.costs import generation_costs
from kvtutor.models.hf_config import (
    ConfigError,
    ModelSpec,
    bundled_config_path,
    bundled_models,
    family_examples,
    load_model_spec,
    read_hf_config,
    spec_from_dict,
)

pytestmark = pytest.mark.browser

_spec = importlib.util.spec_from_file_location(
    "_kvtutor_widget_checks", Path(__file__).with_name("widget_checks.py")
)
assert _spec is not None and _spec.loader is not None
checks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(checks)

ROOT = checks.ROOT
HTML = checks.HTML
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
  scoreLabels: [...new Set(Array.from(root.querySelectorAll(".kvw-score-row > th"), (n) => n.textContent))],
  weightLabels: [...new Set(Array.from(root.querySelectorAll(".kvw-weight-row > th"), (n) => n.textContent))],
  scaling: (root.querySelector(".kvw-scaling") || {}).textContent || null,
  caption: (root.querySelector(".kvw-costs caption") || {}).textContent || null,
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
    # the score rows say they are raw; the softmax row and a note say it divides them by sqrt(d_h)
    raw = {"en": "(raw)", "zh": "（原始）"}[lang]
    root_d = f"\u221a{cfg.d_head} = {math.isqrt(cfg.d_head)}"
    if state >= 2 and (
        not got["scoreLabels"]
        or not all(label.endswith(raw) for label in got["scoreLabels"])
        or got["weightLabels"] != [f"softmax(q\u00b7k/\u221a{cfg.d_head})"]
        or root_d not in (got["scaling"] or "")
    ):
        problems.append(
            f"{where}: score rows {got['scoreLabels']}, softmax {got['weightLabels']}, {got['scaling']!r}"
        )
    if state and "LM" not in (got["caption"] or ""):
        problems.append(f"{where}: the cost table's caption {got['caption']!r} does not say what it counts")
    labels = {"en": "Prefill", "zh": "预填充"}[lang]
    if got["buttons"]["prefill"]["text"] != labels:
        problems.append(f"{where}: the Prefill button reads {got['buttons']['prefill']['text']!r}")
    ends = {"prefill": state == 1, "next": state == N_STEPS + 1, "back": state == 0}
    buttons = {action: got["buttons"][action]["disabled"] == "true" for action in ends}
    if buttons != ends or got["buttons"]["no-cache"]["checked"] != str(recompute).lower():
        problems.append(f"{where}: buttons {got['buttons']}, expected disabled {ends}")
    return problems


def drive_stepper(page, trace: dict, lang: str, full: bool = True) -> list[str]:
    """Every state with the cache and without, Back to the start, the keyboard; not ``full``: the
    first decode step both ways and Back (the page's language and its drawing, not the data)."""
    root = page.locator('.kvtutor-widget[data-kvtutor-widget="cache-stepper"]').first
    button = {a: root.locator(f'button[data-action="{a}"]') for a in ("prefill", "next", "back", "no-cache")}
    problems = check_state(root, trace, 0, False, lang)
    button["prefill"].click()
    problems += check_state(root, trace, 1, False, lang)
    if not full:
        button["next"].click()
        problems += check_state(root, trace, 2, False, lang)
        button["no-cache"].click()
        problems += check_state(root, trace, 2, True, lang)
        button["no-cache"].click()
        button["back"].click()
        return problems + check_state(root, trace, 1, False, lang)
    for state in range(2, N_STEPS + 2):
        button["next"].click()
        problems += check_state(root, trace, state, False, lang)
        button["no-cache"].click()
        problems += check_state(root, trace, state, True, lang)
        button["no-cache"].click()
    button["next"].click(force=True)  # aria-disabled at the end: nothing happens
    problems += check_state(root, trace, N_STEPS + 1, False, lang)
    button["no-cache"].click()  # the widest view: every row and score row, S = 6
    problems += checks.fits(page, root.element_handle(), "the last step without a cache")
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
    "state_bytes_per_sequence", "kv_scale_bytes_fixed", "kv_bytes_total", "weights_bytes", "total_bytes",
    "memory_bytes",
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
        "state_bytes_per_sequence": report["n_state_layers"] > 0,
    }  # fmt: skip
    problems += [f"{where}: {key} {'not ' if want else ''}shown" for key, want in shown_when.items()
                 if (key in got) != want]  # fmt: skip
    if (got.get("max_batch"), got.get("fits")) != (str(report["max_batch"]), str(report["fits"]).lower()):
        problems.append(f"{where}: max batch {got.get('max_batch')}, fits {got.get('fits')}, expected "
                        f"{report['max_batch']}, {report['fits']}")  # fmt: skip
    return problems


#: the bundled models a lighter check drives (every attention kind, a window, MoE)
FEW_MODELS = ("gpt2", "starcoder", "gemma-2-9b", "mixtral-8x7b", "deepseek-v2")


def drive_calculator(page, lang: str, models: tuple[str, ...] | None = None) -> list[str]:
    """Every bundled model at each of SETTINGS, and two typed configs; with ``models``, those
    models only (the page's drawing and language, not the arithmetic)."""
    root = page.locator('.kvtutor-widget[data-kvtutor-widget="kv-calculator"]').first.element_handle()
    problems = []
    for name in models or bundled_models():
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
    if models:
        return problems + checks.fits(page, root, "the calculator", widths=(1280, 800))
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
    page.evaluate(SET_AND_READ, [root, [["model", "deepseek-v3"], ["batch", "8"], ["dtype", "int8"]]])
    return problems + checks.fits(page, root, "the calculator")


# ---------------------------------------------------------------- refused input


#: (field, what is typed): each must be refused, by name and unit, with no result shown that needs it
BAD_INPUT = [
    ("n_layers", "1e30"), ("n_kv_heads", "1e30"), ("d_head", "1e30"), ("seq_len", "1e30"),
    ("batch", "1e30"), ("memory_gib", "1e30"), ("params_b", "0"), ("params_b", "-5"), ("window", "abc"),
    ("seq_len", "12x"), ("batch", ""), ("n_heads", "0"),
]  # fmt: skip
TYPED = {("n_layers", "1e30"), ("params_b", "-5"), ("window", "abc")}
#: the results each field feeds (kv_memory's fields; "formula" the line that states the per-token rule)
MODEL = ["kv_bytes_per_token", "kv_bytes_per_sequence", "kv_bytes_total", "total_bytes", "max_batch", "fits",
         "formula"]  # fmt: skip
NEEDS = {
    "n_layers": MODEL, "n_heads": MODEL, "n_kv_heads": MODEL, "d_head": MODEL,
    "seq_len": ["kv_bytes_per_sequence", "kv_bytes_total", "total_bytes", "max_batch", "fits"],
    "batch": ["kv_bytes_total", "total_bytes", "fits"],
    "window": ["kv_bytes_per_sequence", "kv_bytes_total", "total_bytes", "max_batch", "fits"],
    "memory_gib": ["memory_bytes", "max_batch", "fits"],
    "params_b": ["weights_bytes", "total_bytes", "max_batch", "fits"],
}  # fmt: skip
#: a result that does not need the field, still shown beside the refusal
STILL_SHOWN = {
    "seq_len": "kv_bytes_per_token",
    "batch": "kv_bytes_per_sequence",
    "window": "kv_bytes_per_token",
    "memory_gib": "kv_bytes_total",
    "params_b": "kv_bytes_total",
    "n_layers": "weights_bytes",
    "n_heads": "weights_bytes",
    "n_kv_heads": "weights_bytes",
    "d_head": "weights_bytes",
}
UNIT = {
    "en": {"n_layers": "layers", "n_heads": "heads", "n_kv_heads": "heads", "d_head": "dimensions per head",
           "seq_len": "tokens", "batch": "sequences", "window": "tokens", "memory_gib": "GiB",
           "params_b": "billions of parameters"},
    "zh": {"n_layers": "层", "n_heads": "头", "n_kv_heads": "头", "d_head": "每个头的维数", "seq_len": "词元",
           "batch": "序列", "window": "词元", "memory_gib": "GiB", "params_b": "十亿参数"},
}  # fmt: skip
READ_RESULTS = """(root) => {
  const node = root.querySelector(".kvw-root");
  const out = {valid: node.dataset.valid, error: node.querySelector(".kvw-error").textContent,
    label: {}, shown: {},
    invalid: [...node.querySelectorAll("[aria-invalid=true]")].map((n) => n.dataset.field)};
  node.querySelectorAll("label[for]").forEach((l) => {
    const c = document.getElementById(l.htmlFor);
    if (c && c.dataset.field) out.label[c.dataset.field] = l.textContent;
  });
  node.querySelectorAll("[data-key]").forEach((n) => { out.shown[n.dataset.key] = n.textContent; });
  out.verdict = node.querySelector(".kvw-verdict").textContent;
  out.bar = node.querySelectorAll(".kvw-bar .kvw-seg").length;
  out.note = [...node.querySelectorAll("[data-note]")].map((n) => n.textContent);
  out.fields = Object.fromEntries([...node.querySelectorAll("input[data-field]")]
    .map((n) => [n.dataset.field, n.value]));
  return out;
}"""


def has_number(text: str | None) -> bool:
    return text is not None and re.search(r"\d", text) is not None


def drive_refusals(page, lang: str) -> list[str]:
    """Type each bad value into its field (key by key, as a reader does), on Llama-3-8B's settings."""
    handle = page.locator('.kvtutor-widget[data-kvtutor-widget="kv-calculator"]').first
    root = handle.element_handle()
    problems = []
    for field, value in BAD_INPUT:
        page.evaluate(
            SET_AND_READ,
            [
                root,
                [
                    ["model", "llama-3-8b"],
                    ["seq_len", 8192],
                    ["batch", 8],
                    ["dtype", "bf16"],
                    ["window", ""],
                    ["memory_gib", 80],
                ],
            ],
        )
        control = handle.locator(f'[data-field="{field}"]')
        if (field, value) in TYPED:  # key by key: each prefix ("1", "1e", ...) is an input of its own
            control.fill("")
            control.press_sequentially(value)
        else:
            control.fill(value)
        got = root.evaluate(READ_RESULTS)
        where = f"{field} = {value!r}"
        label = got["label"][field]
        if got["valid"] != "false" or f"{label}" not in got["error"] or UNIT[lang][field] not in got["error"]:
            problems.append(
                f"{where}: expected a message naming {label!r} and its unit, got {got['error']!r}"
            )
        if f"\u201c{value}\u201d" not in got["error"] and value:
            problems.append(f"{where}: the message does not quote what was typed: {got['error']!r}")
        if field not in got["invalid"]:
            problems.append(f"{where}: the field is not marked invalid ({got['invalid']})")
        for key in NEEDS[field]:
            if has_number(got["shown"].get(key)):
                problems.append(f"{where}: {key} still shows {got['shown'][key]!r}")
        if has_number(got["verdict"]) or got["bar"]:
            problems.append(f"{where}: the verdict or the bar still shows ({got['verdict']!r})")
        if not has_number(got["shown"].get(STILL_SHOWN[field])):
            problems.append(f"{where}: {STILL_SHOWN[field]} (which does not need {field}) is blank")
        control.fill("8" if field != "window" else "")  # a good value again: every result back
        if root.evaluate(READ_RESULTS)["valid"] != "true":
            problems.append(f"{where}: still refused after a good value")
    return problems


# ---------------------------------------------------------------- config.json in the page

CONFIG_FIELDS = ("n_layers", "n_heads", "n_kv_heads", "d_head", "d_value", "kv_lora_rank", "qk_rope_head_dim",
                 "sliding_window", "n_sliding_layers", "max_seq_len", "n_params", "n_state_layers",
                 "state_numbers_per_layer", "nested_in")  # fmt: skip
#: kv-config.js reads a config by the rule table the calculator's data carries (families.export())
READ_CONFIG = """([text, fields]) => {
  const data = document.querySelector('.kvtutor-widget[data-kvtutor-widget="kv-calculator"] script');
  try {
    const s = window.kvtutorWidgets.readConfig(text, JSON.parse(data.textContent).families);
    return {ok: true, attention: s.attention,
            ...Object.fromEntries(fields.map((k) => [k, s[k] === null ? null : String(s[k])]))};
  } catch (e) {
    if (!(e instanceof window.kvtutorWidgets.ConfigError)) return {ok: false, thrown: String(e)};
    return {ok: false, key: e.key, keys: e.problems.map((p) => p.key), message: e.message};
  }
}"""
LLAMA = {"model_type": "llama", "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 4,
         "num_hidden_layers": 22, "intermediate_size": 5632, "vocab_size": 32000,
         "max_position_embeddings": 2048}  # fmt: skip
DEEPSEEK = {
    "model_type": "deepseek_v2",
    "hidden_size": 2048,
    "num_attention_heads": 16,
    "num_hidden_layers": 27,
    "intermediate_size": 10944,
    "vocab_size": 102400,
    "max_position_embeddings": 163840,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
    "n_routed_experts": 64,
    "num_experts_per_tok": 6,
    "moe_intermediate_size": 1408,
    "n_shared_experts": 2,
    "first_k_dense_replace": 1,
}
QWEN_MOE = {
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "num_hidden_layers": 48,
    "intermediate_size": 6144,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 768,
    "mlp_only_layers": [0, 1],
    "decoder_sparse_step": 1,
}
#: (what it is, the config.json text): configs the reader must read as hf_config does, or refuse
#: naming the same key
EDGE_CONFIGS = [
    ("no head_dim: hidden / heads", json.dumps(LLAMA)),
    (
        "Qwen2's window switched off, with layer_types",
        json.dumps(
            {
                **LLAMA,
                "model_type": "qwen2",
                "sliding_window": 32,
                "use_sliding_window": False,
                "layer_types": ["full_attention", "sliding_attention", "sliding_attention"],
            }
        ),  # fmt: skip
    ),
    (
        "head_dim not hidden / heads (Qwen3)",
        json.dumps(
            {**LLAMA, "model_type": "qwen3", "hidden_size": 2560, "head_dim": 128, "num_key_value_heads": 8}
        ),
    ),
    ("Qwen3's default head_dim", json.dumps({**LLAMA, "model_type": "qwen3", "hidden_size": 2560})),
    (
        "Gemma's default head_dim",
        json.dumps(
            {
                **LLAMA,
                "model_type": "gemma",
                "hidden_size": 3072,
                "num_attention_heads": 16,
                "num_key_value_heads": 16,
            }
        ),
    ),
    ("MLA with experts", json.dumps(DEEPSEEK)),
    (
        "MLA with a query latent and head_dim = rope",
        json.dumps({**DEEPSEEK, "model_type": "deepseek_v3", "q_lora_rank": 1536, "head_dim": 64}),
    ),
    (
        "a window on every layer (Mistral)",
        json.dumps({**LLAMA, "model_type": "mistral", "sliding_window": 4096}),
    ),
    (
        "a window on half the layers (Gemma-2)",
        json.dumps({**LLAMA, "model_type": "gemma2", "sliding_window": 1024, "head_dim": 64}),
    ),
    (
        "Gemma-3's window pattern",
        json.dumps(
            {
                **LLAMA,
                "model_type": "gemma3_text",
                "sliding_window": 512,
                "sliding_window_pattern": 4,
                "head_dim": 64,
            }
        ),
    ),
    (
        "Qwen2's window from max_window_layers",
        json.dumps(
            {
                **LLAMA,
                "model_type": "qwen2",
                "sliding_window": 4096,
                "use_sliding_window": True,
                "max_window_layers": 20,
            }
        ),
    ),
    (
        "a window switched off",
        json.dumps({**LLAMA, "model_type": "mistral", "sliding_window": 4096, "use_sliding_window": False}),
    ),
    (
        "layer_types",
        json.dumps(
            {
                **LLAMA,
                "model_type": "qwen3",
                "sliding_window": 256,
                "layer_types": ["sliding_attention", "full_attention"] * 11,
            }
        ),
    ),
    (
        "MoE: Mixtral",
        json.dumps({**LLAMA, "model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2}),
    ),
    ("MoE: Qwen3 with dense layers", json.dumps(QWEN_MOE)),
    (
        "MoE: Qwen2 with a shared expert",
        json.dumps(
            {**QWEN_MOE, "model_type": "qwen2_moe", "shared_expert_intermediate_size": 5632, "head_dim": None}
        ),
    ),
    (
        "GPT-2",
        json.dumps(
            {
                "model_type": "gpt2",
                "n_embd": 768,
                "n_head": 12,
                "n_layer": 12,
                "n_positions": 1024,
                "vocab_size": 50257,
                "n_inner": None,
            }
        ),
    ),
    (
        "StarCoder's multi-query",
        json.dumps(
            {
                "model_type": "gpt_bigcode",
                "n_embd": 6144,
                "n_head": 48,
                "n_layer": 40,
                "n_positions": 8192,
                "vocab_size": 49152,
            }
        ),
    ),
    ("a multimodal wrapper", json.dumps({"model_type": "llava", "text_config": LLAMA})),
    (
        "attention biases and untied head",
        json.dumps({**LLAMA, "attention_bias": True, "tie_word_embeddings": False}),
    ),
    # refused, by the key hf_config names
    ("no model_type", json.dumps({k: v for k, v in LLAMA.items() if k != "model_type"})),
    ("an unknown model_type", json.dumps({**LLAMA, "model_type": "rwkv"})),
    ("a float size", json.dumps(LLAMA).replace('"num_hidden_layers": 22', '"num_hidden_layers": 22.0')),
    ("an exponent size", json.dumps(LLAMA).replace('"hidden_size": 2048', '"hidden_size": 2e3')),
    ("a bool size", json.dumps({**LLAMA, "num_attention_heads": True})),
    ("a string size", json.dumps({**LLAMA, "vocab_size": "32000"})),
    ("a negative size", json.dumps({**LLAMA, "intermediate_size": -1})),
    ("a size past 2**40", json.dumps({**LLAMA, "vocab_size": 2**41})),
    ("no hidden_size", json.dumps({k: v for k, v in LLAMA.items() if k != "hidden_size"})),
    ("KV heads that do not divide the heads", json.dumps({**LLAMA, "num_key_value_heads": 5})),
    ("hidden not a multiple of the heads", json.dumps({**LLAMA, "hidden_size": 2050})),
    ("a key the family does not model", json.dumps({**LLAMA, "kv_lora_rank": 512})),
    ("biases on the MLP", json.dumps({**LLAMA, "mlp_bias": True})),
    (
        "layer_types of the wrong length",
        json.dumps({**LLAMA, "sliding_window": 256, "layer_types": ["full_attention"] * 3}),
    ),
    (
        "an unknown layer type",
        json.dumps({**LLAMA, "sliding_window": 256, "layer_types": ["chunked_attention"] * 22}),
    ),
    ("sliding layers without a window", json.dumps({**LLAMA, "layer_types": ["sliding_attention"] * 22})),
    (
        "MLA without its rotary key",
        json.dumps({k: v for k, v in DEEPSEEK.items() if k != "qk_rope_head_dim"}),
    ),
    ("MLA with a wrong head_dim", json.dumps({**DEEPSEEK, "head_dim": 100})),
    ("DeepSeek without kv_lora_rank", json.dumps({k: v for k, v in DEEPSEEK.items() if k != "kv_lora_rank"})),
    ("experts listed twice, differently", json.dumps({**QWEN_MOE, "num_local_experts": 64})),
    ("a dense layer past the last", json.dumps({**QWEN_MOE, "mlp_only_layers": [48]})),
    (
        "more experts per token than experts",
        json.dumps({**LLAMA, "model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 8}),
    ),
    ("a true/false key given 1", json.dumps({**LLAMA, "tie_word_embeddings": 1})),
    (
        "GPT-2 width not a multiple of heads",
        json.dumps(
            {
                "model_type": "gpt2",
                "n_embd": 770,
                "n_head": 12,
                "n_layer": 12,
                "n_positions": 1024,
                "vocab_size": 50257,
            }
        ),
    ),
    # not JSON, or not one object
    ("a trailing comma", json.dumps(LLAMA)[:-1] + ", }"),
    ("cut short", json.dumps(LLAMA)[:40]),
    ("a list", json.dumps([LLAMA])),
    ("nothing", "   "),
]


def _example(name: str, **change: object) -> str:
    config = json.loads(bundled_config_path(name).read_text(encoding="utf-8"))
    return json.dumps({k: v for k, v in {**config, **change}.items() if v is not _DROP})


_DROP = object()
#: configs of the further families, read or refused as hf_config does (refusals by every key)
FAMILY_EDGES = [
    ("Falcon, neither multi-query nor the new layout", _example("falcon-7b", multi_query=False)),
    ("Falcon's new layout with one norm", _example("falcon-40b", num_ln_in_parallel_attn=1)),
    ("Falcon with biases", _example("falcon-7b", bias=True)),
    (
        "OPT without biases or norm weights",
        _example("opt-13b", enable_bias=False, layer_norm_elementwise_affine=False),
    ),
    ("Pythia without attention biases", _example("pythia-6.9b", attention_bias=False)),
    ("StarCoder2 without biases or window", _example("starcoder2-15b", use_bias=False, sliding_window=None)),
    ("Command-R with q/k norms", _example("command-r", use_qk_norm=True)),
    ("InternLM2 with biases", _example("internlm2.5-7b", bias=True)),
    ("Jamba with a window on its attention layers", _example("jamba-v0.1", sliding_window=4096)),
    (
        "Jamba with attention every other layer",
        _example("jamba-v0.1", attn_layer_period=2, attn_layer_offset=1),
    ),
    ("Mamba's dt rank 'auto'", _example("mamba-2.8b", time_step_rank="auto")),
    ("Bamba's SSM head size 'auto'", _example("bamba-9b", mamba_d_head="auto")),
    (
        "Bamba's 'auto' head size that does not divide",
        _example("bamba-9b", mamba_d_head="auto", mamba_n_heads=100),
    ),
    (
        "a LLaVA text_config without model_type",
        json.dumps({"model_type": "llava", "text_config": {"max_position_embeddings": 4096}}),
    ),  # fmt: skip
    ("Gemma-3 multimodal, text defaults", json.dumps({"model_type": "gemma3", "text_config": {}})),
    # refused, naming every bad key
    (
        "three bad keys at once",
        json.dumps({**LLAMA, "hidden_size": "2048", "num_attention_heads": 0, "kv_lora_rank": 512}),
    ),
    (
        "Falcon with a float size and a hybrid's key",
        _example("falcon-7b", hidden_size=4544.0, attn_layer_period=8),
    ),
    ("Falcon's num_kv_heads that do not divide", _example("falcon-40b", num_kv_heads=7)),
    ("a wrapper whose text_config is not an object", json.dumps({"model_type": "gemma3", "text_config": 3})),
    ("Mamba without its state size", _example("mamba-2.8b", state_size=_DROP)),
    ("Mamba with a Llama key", _example("mamba-2.8b", num_key_value_heads=8)),
    ("Jamba's attention offset past its period", _example("jamba-v0.1", attn_layer_offset=9)),
    ("Jamba's expert offset past its period", _example("jamba-v0.1", expert_layer_offset=2)),
    ("Bamba's attention layer past the last", _example("bamba-9b", attn_layer_indices=[9, 32])),
    ("OPT without ffn_dim, vocab_size", _example("opt-13b", ffn_dim=_DROP, vocab_size=_DROP)),
    ("only a model_type: every size missing, in the table's order", json.dumps({"model_type": "opt"})),
    ("a Mamba with every size missing", json.dumps({"model_type": "mamba", "use_bias": "no"})),
    (
        "a nested Llama with a bad size",
        json.dumps({"model_type": "llava", "text_config": {"hidden_size": -1}}),
    ),
]


def python_reads(text: str) -> dict:
    """What kvtutor.models.hf_config makes of ``text``: the spec's fields, or every key it refuses
    (``keys``, in order; ``key`` the first)."""
    try:
        config = json.loads(text)
        if not isinstance(config, dict):
            raise ValueError("config: not a JSON object")
        spec = spec_from_dict(config)
    except ConfigError as exc:
        return {
            "ok": False,
            "key": exc.problems[0][0],
            "keys": [k for k, _ in exc.problems],
            "message": str(exc),
        }
    except (TypeError, ValueError) as exc:
        return {"ok": False, "key": None, "keys": None, "message": str(exc)}
    out = {k: None if getattr(spec, k) is None else str(getattr(spec, k)) for k in CONFIG_FIELDS}
    return {"ok": True, "attention": spec.attention_kind, **out}


def check_reader(page) -> list[str]:
    """kv-config.js against hf_config: every bundled config.json, every family example and every
    edge config: the same sizes, or the same keys refused, every one of them, in the same order."""
    problems = []
    cases = [(f"bundled {n}", bundled_config_path(n).read_text(encoding="utf-8"))
             for n in bundled_models() + family_examples()]  # fmt: skip
    for what, text in cases + EDGE_CONFIGS + FAMILY_EDGES:
        want, got = python_reads(text), page.evaluate(READ_CONFIG, [text, list(CONFIG_FIELDS)])
        if want["ok"] != got["ok"] or "thrown" in got:
            problems.append(
                f"{what}: Python {'reads' if want['ok'] else 'refuses'} it, the page "
                f"{'reads' if got['ok'] else 'refuses'} it: {got.get('message') or got.get('thrown')}"
            )
        elif want["ok"] and got != want:
            problems.append(f"{what}: { ({k: (got.get(k), v) for k, v in want.items() if got.get(k) != v}) }")
        elif not want["ok"] and want["keys"] is not None and got["keys"] != want["keys"]:
            problems.append(f"{what}: Python names {want['keys']!r} ({want['message']}), the page "
                            f"{got['keys']!r} ({got['message']})")  # fmt: skip
        elif not want["ok"] and not want["key"] and got["key"] and got["key"] not in text:
            problems.append(f"{what}: the page names {got['key']!r}, which the config does not hold")
    assert len(cases) == len(bundled_models()) + len(family_examples()) >= 40
    return problems


PASTE = """([root, text]) => {
  const node = root.querySelector(".kvw-root");
  node.querySelector("details.kvw-config-box").open = true;
  node.querySelector("[data-field=config]").value = text;
  node.querySelector("button[data-action=read]").click();
}"""


def paste(page, root, text: str, typed: bool = False) -> dict:
    """Paste ``text`` into the config box and press Read: as a reader does (``typed``: the
    keyboard and the mouse), or in one step."""
    if typed:
        handle = page.locator('.kvtutor-widget[data-kvtutor-widget="kv-calculator"]').first
        handle.locator("details.kvw-config-box > summary").click()
        handle.locator('[data-field="config"]').fill(text)
        handle.locator('button[data-action="read"]').click()
    else:
        page.evaluate(PASTE, [root, text])
    return root.evaluate(READ_RESULTS)


def drive_config_box(page, lang: str, tmp_path: Path) -> list[str]:
    """Paste every config of the test set (each bundled config.json, each family example, the
    edge configs Python reads) and compare with `kv-memory FILE.json`: the same bytes, a hybrid's
    state beside its KV, the context note beside the figure exactly when the CLI warns. A refused
    config lists every key Python names, shows no result, and leaves no model's numbers in the
    typed-config fields."""
    handle = page.locator('.kvtutor-widget[data-kvtutor-widget="kv-calculator"]').first
    root = handle.element_handle()
    problems = []
    settings = [["seq_len", 20000], ["batch", 3], ["dtype", "int8"], ["key_scales", "per_token"],
                ["weights_dtype", "bf16"], ["window", ""], ["memory_gib", 80]]  # fmt: skip
    argv = ["--seq-len", "20000", "--batch", "3", "--kv-dtype", "int8", "--weights-dtype", "bf16",
            "--memory-gib", "80"]  # fmt: skip
    edges = EDGE_CONFIGS + FAMILY_EDGES
    read = [(what, text) for what, text in edges if python_reads(text)["ok"]]
    cases = [
        (n, bundled_config_path(n).read_text(encoding="utf-8")) for n in bundled_models() + family_examples()
    ]
    for i, (what, text) in enumerate(cases + read):
        page.evaluate(SET_AND_READ, [root, settings])
        got = paste(page, root, text, typed=i == 0)
        path = tmp_path / f"config-{i}.json"
        path.write_text(text, encoding="utf-8")
        # what `python -m kvtutor kv-memory FILE.json ...` prints, from the function behind it
        report = memory.kv_memory(read_hf_config(path), 20000, 3, "int8", 80, "bf16").to_dict()
        if i == 0 or report["n_state_layers"] or report["beyond_context"] and i < len(cases):
            assert report == {k: v for k, v in cli_json(str(path), *argv).items() if k != "source"}
        problems += compare(page.evaluate(SET_AND_READ, [root, []]), report, f"pasted {what}")
        if root.evaluate("(r) => r.querySelector('[data-field=model]').value") != "pasted":
            problems.append(f"pasted {what}: the model is not the pasted one")
        if got["valid"] != "true":
            problems.append(f"pasted {what}: refused: {got['error']}")
        if (
            bool(got["note"]) != report["beyond_context"]
            or got["note"]
            and f"{report['max_position_embeddings']:,}" not in got["note"][0]
        ):
            problems.append(
                f"pasted {what}: context note {got['note']}, the CLI warns: {report['beyond_context']}"
            )
        if got["fields"]["n_layers"] != str(report["n_attention_layers"]):
            problems.append(f"pasted {what}: the layers field shows {got['fields']['n_layers']!r}, "
                            f"expected its {report['n_attention_layers']} attention layers")  # fmt: skip
    refused = [(what, text) for what, text in edges if not python_reads(text)["ok"]]
    for what, text in refused:
        paste(
            page, root, bundled_config_path("llama-3-8b").read_text(encoding="utf-8")
        )  # numbers in the fields
        got = paste(page, root, text)
        want = python_reads(text)
        missing = [key for key in want["keys"] or [] if key and f"'{key}'" not in got["error"]]
        if got["valid"] != "false" or missing:
            problems.append(
                f"pasted {what}: expected a message naming {want['keys']!r}, got {got['error']!r}"
            )
        numbers = {k: v for k, v in got["shown"].items() if k != "memory_bytes" and has_number(v)}
        if numbers or has_number(got["verdict"]) or got["bar"]:
            problems.append(f"pasted {what}: results shown for a refused config: {numbers or got['verdict']}")
        left = {k: v for k, v in got["fields"].items() if k in ("n_layers", "n_heads", "n_kv_heads", "d_head",
                                                                "params_b") and v}  # fmt: skip
        if left:
            problems.append(f"pasted {what}: refused, but the fields still hold {left}")
    assert (
        len(refused) >= 25
        and len(read) >= 20
        and any(len(python_reads(t)["keys"] or []) >= 3 for _, t in refused)
    )
    # the bundled configs can be loaded into the box, and read from there
    handle.locator('[data-field="load"]').select_option("mistral-7b")
    report = cli_json("mistral-7b", *argv)
    problems += compare(page.evaluate(SET_AND_READ, [root, []]), report, "loaded mistral-7b")
    page.evaluate(SET_AND_READ, [root, [["model", "llama-3-8b"]]])
    return problems


def drive_exponents(page) -> list[str]:
    """Counts typed in exponent or decimal notation are read exactly: 1e6 tokens is one million,
    1.6e1 sequences is 16, 4.096e3 is a window of 4096; 2.5 sequences is refused."""
    handle = page.locator('.kvtutor-widget[data-kvtutor-widget="kv-calculator"]').first
    root = handle.element_handle()
    problems = []
    page.evaluate(SET_AND_READ, [root, [["model", "llama-3-8b"], ["dtype", "bf16"], ["weights_dtype", "bf16"],
                                        ["memory_gib", 80], ["window", ""]]])  # fmt: skip
    for field, value in (("seq_len", "1e6"), ("batch", "1.6e1"), ("window", "4.096e3")):
        control = handle.locator(f'[data-field="{field}"]')
        control.fill("")
        control.press_sequentially(value)  # key by key, as a reader types
    got = page.evaluate(SET_AND_READ, [root, []])
    argv = ["llama-3-8b", "--seq-len", "1000000", "--batch", "16", "--window", "4096", "--memory-gib", "80"]
    problems += compare(got, cli_json(*argv), "typed 1e6 tokens, 1.6e1 sequences, a 4.096e3 window")
    handle.locator('[data-field="batch"]').fill("2.5")
    got = root.evaluate(READ_RESULTS)
    if got["valid"] != "false" or "batch" not in got["invalid"]:
        problems.append(f"2.5 sequences: not refused ({got['error']!r})")
    page.evaluate(SET_AND_READ, [root, [["seq_len", 8192], ["batch", 8], ["window", ""]]])
    return problems


# ---------------------------------------------------------------- the tests


@pytest.mark.parametrize("lang", list(LANGS))
def test_widgets_from_disk(lang: str, file_context, trace, tmp_path) -> None:
    page_path = checks.widget_page(tmp_path, LANGS[lang], [cache_stepper(), kv_calculator()])
    with checks.opened(file_context, page_path.as_uri()) as (page, problems):
        problems += drive_stepper(page, trace, lang, full=lang == "en")
        problems += drive_refusals(page, lang)
        if lang == "en":  # the arithmetic and the reader do not depend on the language
            problems += drive_calculator(page, lang)
            problems += check_reader(page)
            problems += drive_config_box(page, lang, tmp_path)
            problems += drive_exponents(page)
        else:
            problems += drive_calculator(page, lang, FEW_MODELS)
        for widget in ("cache-stepper", "kv-calculator"):
            root = page.locator(f'.kvtutor-widget[data-kvtutor-widget="{widget}"]').first.element_handle()
            problems += checks.readable(page, root, f"{widget}, no theme")
    assert not problems, "\n".join([f"{len(problems)} problem(s)", *problems[:40]])


BUILT = {"book/decode": "cache-stepper", "book/kv_memory": "kv-calculator"}


def phone_and_dark(page, widget: str) -> list[str]:
    """The widget in the theme's dark mode and light mode (contrast of every text), and at 390 px."""
    root = page.locator(f'.kvtutor-widget[data-kvtutor-widget="{widget}"]').first.element_handle()
    problems = []
    if widget == "cache-stepper":  # the widest state: the last step without a cache
        root.evaluate("""(r) => {
          for (let i = 0; i < 10; i++) r.querySelector('button[data-action="next"]').click();
          r.querySelector('button[data-action="no-cache"]').click();
        }""")
    else:
        page.evaluate(SET_AND_READ, [root, [["model", "deepseek-v3"], ["dtype", "int8"], ["window", "abc"]]])
    for mode in ("dark", "light"):
        checks.set_theme(page, mode)
        problems += checks.readable(page, root, f"{widget} in {mode} mode")
    problems += checks.fits(page, root, widget, widths=(390,))
    page.set_viewport_size({"width": 390, "height": 900})
    if widget == "cache-stepper" and page.evaluate(
        "(r) => { const s = r.querySelector('.kvw-cost-box .kvw-scroll');"
        " return s.scrollWidth > s.clientWidth + 1; }",
        root,
    ):
        problems.append("the stepper's cost table does not fit at 390 px")
    page.set_viewport_size({"width": 1280, "height": 900})
    return problems


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
    with checks.opened(context, f"{site}/{edition}{name}.html") as (page, problems):
        lang = "zh" if edition else "en"
        if page.evaluate("() => document.documentElement.lang").startswith("zh") != (lang == "zh"):
            problems.append("<html lang> is not the edition's")
        # the stored output is the export as it stands (test_widgets_from_disk drives that in full)
        script = page.locator(f'.kvtutor-widget[data-kvtutor-widget="{BUILT[name]}"] script').first
        fresh = (cache_stepper() if BUILT[name] == "cache-stepper" else kv_calculator()).data
        if json.loads(script.text_content()) != fresh:
            problems.append(f"the page's {BUILT[name]} data is not the export's: re-run its cell")
        if BUILT[name] == "cache-stepper":
            problems += drive_stepper(page, trace, lang, full=False)
        else:
            problems += drive_calculator(page, lang, FEW_MODELS[:1])
            problems += drive_refusals(page, lang)
        problems += phone_and_dark(page, BUILT[name])
    assert not problems, "\n".join([f"{edition}{name}: {len(problems)} problem(s)", *problems[:40]])
