"""One value per quantity (issues #35 and #44): each number that the chapters name in several
places, the toy prompt's FLOP counts and the thresholds at which work turns compute-bound, has one
glued key, one value on every page that glues it, and its own name on the cheat sheet, which says
which is which.

Issue #44 adds three checks. A key glued on two pages carries one value. The quantities that
several pages or a page and its widget quote (``SHARED``: the H200's copy bandwidth, Llama-2-7B's
weights, a batch-1 decode step against the GEMV bandwidth, ...) each come from one function of the
package, and every key that shows one equals it; a key of the same kind whose value lies within a
few percent of one of them, without being registered, is the same quantity glued a second time with
a second value. And the widgets show their page's numbers: the cache stepper's FLOPs and bytes are
the pages' glued counts, the scheduler replay's longest gap and TPOT the table's.

The thresholds differ in what they count (the weight products alone or the whole pass, a prefill
into a cache or a pass without one, one decode step's cost model or a fit of a measured sweep) and
in the ceilings they rest on (measured in a recorded run, or a datasheet's); a reader who meets
two of them must be able to tell them apart by name. The checks read the notebooks' stored glue
outputs (as tests/test_book_shape.py does) and the prose of their Markdown cells.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
CHEAT_SHEET = BOOK / "cheat_sheet.ipynb"


@dataclass(frozen=True)
class Quantity:
    """A number the book names: its glue key, the name the cheat sheet gives it, and a pattern
    of the key names under which the same kind of number would be glued (a second key for it)."""

    key: str
    name: str
    family: str


# The FLOP counts of the toy prompt ("The cat sat") and the thresholds of the recorded machines.
FLOPS = r"flops"
THRESHOLDS = r"ridge|balance|batch|knee|threshold|tokens|_T_|_n$|step|products|rows"
QUANTITIES = (
    Quantity("prefill_flops", "prefill FLOPs, logits of every position", FLOPS),
    Quantity("prefill_last_flops", "prefill FLOPs, logits of the last position only", FLOPS),
    Quantity("decode_flops", "decode step FLOPs", FLOPS),
    Quantity("cs_cpu_ridge", "ridge point, recorded CPU (measured)", THRESHOLDS),
    Quantity("cs_gpu_ridge", "ridge point, recorded H200 (measured)", THRESHOLDS),
    Quantity("cs_h200_sheet_ridge", "ridge point, H200 datasheet", THRESHOLDS),
    Quantity("cs_h100_sheet_ridge", "ridge point, H100 datasheet", THRESHOLDS),
    Quantity("cs_cpu_batch", "products batch, recorded CPU", THRESHOLDS),
    Quantity("cs_gpu_batch", "products batch, recorded H200", THRESHOLDS),
    Quantity("cs_cpu_prefill_tokens", "prefill threshold, recorded CPU", THRESHOLDS),
    Quantity("cs_gpu_prefill_tokens", "prefill threshold, recorded H200", THRESHOLDS),
    Quantity("cs_cpu_recompute_tokens", "recompute threshold, recorded CPU", THRESHOLDS),
    Quantity("cs_gpu_recompute_tokens", "recompute threshold, recorded H200", THRESHOLDS),
    Quantity("cs_h200_step_batch", "decode B*, measured H200 ceilings", THRESHOLDS),
    Quantity("cs_h200_sheet_step_batch", "decode B*, H200 datasheet", THRESHOLDS),
    Quantity("cs_h200_knee", "measured knee, recorded H200 sweep", THRESHOLDS),
)
# Keys of the same families that are other quantities, whose value happens to equal one above:
# the 1-minute load average is no threshold, and so on. Empty: none does today.
OTHER_QUANTITIES: frozenset[str] = frozenset()
# The names of the cheat sheet's section on thresholds, each a term of its definition list.
THRESHOLD_NAMES = (
    "Ridge point",
    "Products batch",
    "Prefill threshold",
    "Recompute threshold",
    "Decode $B^*$",
    "Measured knee",
)
GLUE_ROLE = re.compile(r"\{glue(?::\w+)?\}`([\w-]+)(?::[^`]*)?`")


def notebooks() -> list[Path]:
    return sorted(BOOK.glob("*.ipynb"))


def glued(path: Path) -> dict[str, str]:
    """Every value a notebook glues, by key, as its stored text."""
    found = {}
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        for out in cell.get("outputs", []):
            name = out.get("metadata", {}).get("scrapbook", {}).get("name")
            text = out.get("data", {}).get("application/papermill.record/text/plain")
            if name is not None and text is not None:
                found[name] = text
    return found


def markdown(path: Path) -> str:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def value_problems(pages: dict[str, dict[str, str]], quantities=QUANTITIES) -> list[str]:
    """One line per quantity glued with two values, or never glued."""
    problems = []
    for q in quantities:
        values = {page: glue[q.key] for page, glue in pages.items() if q.key in glue}
        if not values:
            problems.append(f"{q.key} ({q.name}): glued on no page")
        elif len(set(values.values())) > 1:
            problems.append(f"{q.key} ({q.name}): {values}")
    return problems


def alias_problems(pages: dict[str, dict[str, str]], quantities=QUANTITIES,
                   others: frozenset[str] = OTHER_QUANTITIES) -> list[str]:  # fmt: skip
    """One line per key that glues the value of a quantity under a name of its family: the same
    number under a second key (a value shared by two registered quantities is fine)."""
    registered = {q.key for q in quantities}
    value = {}
    for glue in pages.values():
        for q in quantities:
            value.setdefault(q.key, glue.get(q.key))
    problems = []
    for page, glue in pages.items():
        for key, text in glue.items():
            if key in registered or key in others:
                continue
            for q in quantities:
                if value[q.key] == text and re.search(q.family, key):
                    problems.append(f"{page}: {key} = {text} is {q.key} ({q.name}) under a second key")
    return problems


def typed_problems(
    texts: dict[str, str], pages: dict[str, dict[str, str]], quantities=QUANTITIES
) -> list[str]:
    """One line per prose that types a quantity's value by hand instead of gluing it (values of
    three digits or more, with or without a thousands separator)."""
    problems = []
    for q in quantities:
        text = next((glue[q.key] for glue in pages.values() if q.key in glue), None)
        if text is None:
            continue
        number = float(text)
        if number < 100 or number != int(number):
            continue
        forms = {f"{int(number)}", f"{int(number):,}"}
        for page, prose in texts.items():
            bare = GLUE_ROLE.sub(" ", prose)
            for form in forms:
                if re.search(rf"(?<![\w.,]){re.escape(form)}(?![\w]|[.,]\d)", bare):
                    problems.append(f"{page}: types {form} ({q.name}); glue {q.key}")
    return problems


def cheat_sheet_problems(glue: dict[str, str], prose: str, quantities=QUANTITIES,
                         names=THRESHOLD_NAMES) -> list[str]:  # fmt: skip
    """What the cheat sheet lacks: a quantity it does not glue or does not show, a threshold it
    does not name as a term of its list."""
    shown = set(GLUE_ROLE.findall(prose))
    problems = [f"{q.key} ({q.name}) is not glued on the cheat sheet" for q in quantities
                if q.key not in glue]  # fmt: skip
    problems += [f"{q.key} ({q.name}) is not shown on the cheat sheet" for q in quantities
                 if q.key not in shown]  # fmt: skip
    problems += [f"the cheat sheet names no {name!r}" for name in names
                 if not re.search(rf"(?m)^{re.escape(name)}(?=[\s(]|$)", prose)]  # fmt: skip
    return problems


# The book


def _pages() -> dict[str, dict[str, str]]:
    return {path.stem: glued(path) for path in notebooks()}


def test_no_page_types_a_quantity_by_hand():
    texts = {path.stem: markdown(path) for path in notebooks()}
    texts |= {path.stem: path.read_text(encoding="utf-8") for path in sorted(BOOK.glob("*.md"))}
    problems = typed_problems(texts, _pages())
    assert not problems, "\n".join(problems)


def test_the_cheat_sheet_names_each_threshold():
    problems = cheat_sheet_problems(glued(CHEAT_SHEET), markdown(CHEAT_SHEET))
    assert not problems, "\n".join(problems)


def test_the_quantities_are_distinct_keys_and_names():
    assert len({q.key for q in QUANTITIES}) == len({q.name for q in QUANTITIES}) == len(QUANTITIES)


# Each check bites


def test_two_values_or_none_fail():
    q = (Quantity("cs_gpu_ridge", "ridge", THRESHOLDS), Quantity("cs_h200_knee", "knee", THRESHOLDS))
    pages = {"a": {"cs_gpu_ridge": "160.0"}, "b": {"cs_gpu_ridge": "165.0"}}
    problems = value_problems(pages, q)
    assert len(problems) == 2 and "165.0" in problems[0] and "glued on no page" in problems[1]
    assert value_problems({"a": {"cs_gpu_ridge": "160.0"}, "b": {"cs_gpu_ridge": "160.0"}}, q[:1]) == []


def test_a_second_key_for_a_quantity_fails():
    q = (Quantity("cs_gpu_ridge", "ridge", THRESHOLDS), Quantity("cs_gpu_batch", "rows", THRESHOLDS))
    pages = {
        "rooflines": {"cs_gpu_ridge": "160.0", "cs_gpu_batch": "160.0"},  # two quantities, one value
        "flash": {"flash_h200_ridge": "160.0", "flash_n_layers": "160.0"},  # an alias; not a threshold
    }
    problems = alias_problems(pages, q)
    assert len(problems) == 2, problems  # flash_h200_ridge against each of the two
    assert all(p.startswith("flash: flash_h200_ridge = 160.0") for p in problems)
    assert alias_problems(pages, q, frozenset({"flash_h200_ridge"})) == []


def test_a_typed_value_fails():
    q = (Quantity("prefill_flops", "prefill", FLOPS), Quantity("cs_gpu_prefill_tokens", "tokens", THRESHOLDS))
    pages = {"prefill": {"prefill_flops": "11328", "cs_gpu_prefill_tokens": "165"}}
    texts = {
        "a": "It counts 11,328 FLOPs.",
        "b": "Past the threshold of 165 tokens.",
        "c": "It counts {glue:text}`prefill_flops` FLOPs, from {glue:text}`cs_gpu_prefill_tokens` tokens.",
        "d": "A 1165-token prompt, 165.5 GB/s, 0.165 s.",
    }
    problems = typed_problems(texts, pages, q)
    assert [p.split(":")[0] for p in problems] == ["a", "b"], problems


def test_a_cheat_sheet_without_a_name_fails():
    q = (Quantity("cs_gpu_ridge", "ridge", THRESHOLDS), Quantity("cs_h200_knee", "knee", THRESHOLDS))
    prose = "Ridge point (FLOP/byte)\n: {glue:text}`cs_gpu_ridge:.0f` on the H200."
    problems = cheat_sheet_problems({"cs_gpu_ridge": "160.0"}, prose, q, ("Ridge point", "Measured knee"))
    assert problems == [
        "cs_h200_knee (knee) is not glued on the cheat sheet",
        "cs_h200_knee (knee) is not shown on the cheat sheet",
        "the cheat sheet names no 'Measured knee'",
    ]


# One key, one value, on every page (issue #44)


def disagreements(paths: list[Path]) -> list[str]:
    """Keys glued on two pages with different values: one quantity has one key and one value."""
    seen: dict[str, tuple[str, str]] = {}
    found = []
    for path in paths:
        for key, value in glued(path).items():
            if key in seen and seen[key][1] != value:
                found.append(f"{key}: {value} on {path.stem}, {seen[key][1]} on {seen[key][0]}")
            seen.setdefault(key, (path.stem, value))
    return found


def test_a_key_glued_on_two_pages_has_one_value():
    assert not disagreements(notebooks()), "\n".join(disagreements(notebooks()))


def test_the_glue_check_finds_two_values_for_one_key(tmp_path):
    def page(name: str, value: str) -> Path:
        out = {"output_type": "display_data", "metadata": {"scrapbook": {"name": "kv_gib"}},
               "data": {"application/papermill.record/text/plain": value}}  # fmt: skip
        path = tmp_path / f"{name}.ipynb"
        path.write_text(json.dumps({"cells": [{"cell_type": "code", "outputs": [out]}]}), encoding="utf-8")
        return path

    assert disagreements([page("a", "1.0"), page("b", "1.0")]) == []
    assert disagreements([page("a", "1.0"), page("c", "1.07")]) == ["kv_gib: 1.07 on c, 1.0 on a"]


# Quantities that several pages, or a page and its widget, quote (issue #44)


@dataclass(frozen=True)
class Shared:
    """A quantity the book quotes in several places: what it is (with its model and run), the glue
    keys that show it, the one package function that gives it, the decimals the pages show, the
    pattern of key names under which the same kind of number would be glued, and the words (its
    model) that every paragraph quoting it must contain."""

    name: str
    keys: tuple[str, ...]
    value: Callable[[], float]
    digits: int
    family: str
    names: tuple[str, ...] = ()


def _toy_costs(kind: str) -> float:
    import kvtutor
    from kvtutor.measure import costs

    cfg, n = kvtutor.load_toy_model().config, len(kvtutor.load_toy_tokenizer().encode(kvtutor.TOY_PROMPT))
    cost = {
        "prefill": costs.prefill_cost(cfg, n),
        "prefill_last": costs.prefill_cost(cfg, n, all_logits=False),
        "decode": costs.decode_cost(cfg, n + 1),
    }[kind.removesuffix("_bytes").removesuffix("_intensity")]
    if kind.endswith("_bytes"):
        return float(cost.bytes)
    return float(cost.intensity if kind.endswith("_intensity") else cost.flops)


def _recorded(what: str) -> float:
    from kvtutor.measure import recorded

    if what == "h200_copy_tbps":
        return recorded.h200_copy_bandwidth() / 1e12
    return recorded.batch1_decode_share(recorded.cpu_bench(), what)


def _llama_2_7b(what: str) -> float:
    from kvtutor.measure import memory
    from kvtutor.models.hf_config import load_model_spec
    from kvtutor.serving import disagg

    if what == "weights":
        return memory.weights_bytes(load_model_spec("llama-2-7b"), "bf16") / memory.GIB
    return disagg.StepModel().step_cost((), [1]).all_weight_bytes / memory.GIB


_REPLAY: dict = {}


def _replay(run: str, total: str) -> float:
    """A total of the scheduler replay's run, as the widget computes it (one computation, cached)."""
    if not _REPLAY:
        from kvtutor.book.scheduler_widget import serving_replay_data

        _REPLAY.update({r["id"]: r for r in serving_replay_data()["runs"]})
    return float(_REPLAY[run]["totals"][total])


SHARED = (
    Shared("the recorded H200's copy bandwidth, TB/s (2026-11-30)", ("h200_copy_tbps",),
           lambda: _recorded("h200_copy_tbps"), 2, r"tbps|bw_tb|copy_tb"),
    Shared("Llama-2-7B's weights in bf16, GiB: all its parameters, embedding table and LM head included",
           ("llama_2_7b_weights_gib",), lambda: _llama_2_7b("weights"), 1, r"weights?_gib", ("Llama-2-7B",)),
    Shared("the weight bytes a decode step of Llama-2-7B's size reads: all but the embedding table, GiB",
           ("sas_step_weights_gib",), lambda: _llama_2_7b("step"), 1, r"weights?_gib", ("Llama-2-7B",)),
    Shared("GPT-2 small's batch-1 decode step against the GEMV bandwidth (recorded CPU, 2026-11-30)",
           ("rooflines_rec_bw1",), lambda: _recorded("gpt2-small"), 2, r"gemv|_bw1$", ("GPT-2 small",)),
    Shared("gpt2-medium's batch-1 decode step against the GEMV bandwidth (recorded CPU, 2026-11-30)",
           ("rooflines_dec_vs_gemv",), lambda: _recorded("gpt2-medium"), 2, r"gemv|_bw1$", ("gpt2-medium",)),
    Shared("the toy prompt's prefill FLOPs, logits of every position", ("prefill_flops",),
           lambda: _toy_costs("prefill"), 0, FLOPS),
    Shared("the toy prompt's prefill FLOPs, the last logits only (the cache stepper's prefill)",
           ("prefill_last_flops",), lambda: _toy_costs("prefill_last"), 0, FLOPS),
    Shared("the toy prompt's prefill FLOPs per byte, logits of every position",
           ("prefill_intensity", "decode_prefill_intensity", "side_by_side_prefill_intensity"),
           lambda: _toy_costs("prefill_intensity"), 2,
           r"prefill_intensity"),
    Shared("the toy's first decode step: FLOPs", ("decode_flops",), lambda: _toy_costs("decode"), 0, FLOPS),
    Shared("the toy's first decode step: bytes", ("decode_bytes",), lambda: _toy_costs("decode_bytes"), 0,
           r"decode_bytes"),
    Shared("chunked prefill's longest gap, no budget: p99 of the requests', ms", ("cb_chunk_gap_none",),
           lambda: _replay("long-continuous-whole", "max_gap_ms_p99"), 1, r"chunk.*gap"),
    Shared("chunked prefill's longest gap at 32 tokens a step, ms", ("cb_chunk_gap_32",),
           lambda: _replay("long-continuous-32", "max_gap_ms_p99"), 2, r"chunk.*gap"),
    Shared("chunked prefill's longest gap at 16 tokens a step, ms", ("cb_chunk_gap_16",),
           lambda: _replay("long-continuous-16", "max_gap_ms_p99"), 2, r"chunk.*gap"),
    Shared("chunked prefill's median TPOT, no budget, ms", ("cb_chunk_tpot_none",),
           lambda: _replay("long-continuous-whole", "tpot_ms_p50"), 2, r"chunk.*tpot"),
    Shared("chunked prefill's median TPOT at 32 tokens a step, ms", ("cb_chunk_tpot_32",),
           lambda: _replay("long-continuous-32", "tpot_ms_p50"), 2, r"chunk.*tpot"),
)  # fmt: skip
# Keys of a SHARED family whose value lies near one of them but that glue another quantity.
OTHER_SHARED: dict[str, str] = {}
#: How close a value of the same family must come to count as the same quantity glued twice.
NEAR = 0.05


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def shared_problems(pages: dict[str, dict[str, str]], shared=SHARED) -> list[str]:
    """One line per registered key glued with another value than its function gives (at the
    digits the pages show), and per quantity that no page glues."""
    problems = []
    for q in shared:
        want = round(q.value(), q.digits)
        found = [(page, key, glue[key]) for page, glue in pages.items() for key in q.keys if key in glue]
        if not found:
            problems.append(f"{q.name}: none of {q.keys} is glued")
        problems += [f"{page}: {key} = {text}, but {q.name} is {want}" for page, key, text in found
                     if _number(text) != want]  # fmt: skip
    return problems


def near_problems(pages: dict[str, dict[str, str]], shared=SHARED, others=OTHER_SHARED) -> list[str]:
    """One line per unregistered key of a quantity's family whose value equals it or lies within
    ``NEAR`` of it: the same quantity glued a second time, under another key."""
    registered = {key for q in shared for key in q.keys}
    wants = [(q, round(q.value(), q.digits)) for q in shared]
    problems = []
    for page, glue in pages.items():
        for key, text in glue.items():
            value = _number(text)
            if key in registered or key in others or value is None:
                continue
            for q, want in wants:
                if re.search(q.family, key) and abs(value - want) <= NEAR * abs(want):
                    problems.append(f"{page}: {key} = {text} is {q.name} ({want}) under a second key")
    return problems


def paragraphs(prose: str) -> list[str]:
    return [p for p in re.split(r"\n\s*\n|\n(?=[-*] |\d+\. )", prose) if p.strip()]


def naming_problems(texts: dict[str, str], shared=SHARED) -> list[str]:
    """One line per paragraph that quotes a registered quantity without naming its model."""
    problems = []
    for page, prose in texts.items():
        for para in paragraphs(prose):
            shown = set(GLUE_ROLE.findall(para))
            for q in shared:
                if q.names and shown & set(q.keys) and not any(n in para for n in q.names):
                    problems.append(f"{page}: a paragraph quotes {q.name} without naming {q.names[0]}: "
                                    f"{' '.join(para.split())[:100]}...")  # fmt: skip
    return problems


@pytest.mark.parametrize(
    "check", [value_problems, alias_problems, shared_problems, near_problems], ids=lambda f: f.__name__
)
def test_every_quantity_has_one_key_and_one_value(check):
    """Each check over every page's glued values: the registered quantities with one value on
    every page, none under a second key, each shared one equal to its function, none glued twice."""
    problems = check(_pages())
    assert not problems, "\n".join(problems)


def test_every_paragraph_quoting_a_shared_quantity_names_its_model():
    problems = naming_problems({path.stem: markdown(path) for path in notebooks()})
    assert not problems, "\n".join(problems)


def test_the_shared_quantities_are_distinct():
    keys = [key for q in SHARED for key in q.keys]
    assert len(set(keys)) == len(keys) and len({q.name for q in SHARED}) == len(SHARED)


# The widgets show their page's numbers


WIDGET = re.compile(r'data-kvtutor-widget="([\w-]+)">\s*<script type="application/json">(.*?)</script>', re.S)


def stored_widget(path: Path, name: str) -> dict:
    """The data of the widget ``name`` as the notebook stores it (what the built page shows)."""
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        for out in cell.get("outputs", []):
            for found, data in WIDGET.findall("".join(out.get("data", {}).get("text/html", ""))):
                if found == name:
                    return json.loads(data)
    raise AssertionError(f"{path.name} stores no {name} widget")


def stepper_problems(stepper: dict, glue: dict[str, str]) -> list[str]:
    """Where the cache stepper's FLOPs and bytes differ from the pages' glued counts and from
    ``costs.generation_costs``, the one function the stepper and the pages take them from."""
    import kvtutor
    from kvtutor.measure import costs

    cfg = kvtutor.load_toy_model().config
    passes = [stepper["prefill"], *stepper["steps"]]
    want = costs.generation_costs(cfg, len(stepper["prompt"]["ids"]), len(passes))
    shown = [(p["cost"]["cached"]["flops"], p["cost"]["cached"]["bytes"]) for p in passes]
    counted = [(c.flops, c.bytes) for c in want]
    problems = [f"pass {i}: the stepper counts {s}, generation_costs {c}"
                for i, (s, c) in enumerate(zip(shown, counted, strict=True)) if s != c]  # fmt: skip
    pairs = (
        ("prefill_last_flops", passes[0]["cost"]["cached"]["flops"]),
        ("decode_flops", passes[1]["cost"]["cached"]["flops"]),
        ("decode_bytes", passes[1]["cost"]["cached"]["bytes"]),
    )
    problems += [f"the stepper shows {value}, the pages glue {key} = {glue.get(key)}" for key, value in pairs
                 if glue.get(key) is None or float(glue[key]) != value]  # fmt: skip
    return problems


def test_the_cache_stepper_shows_the_pages_counts():
    glue = {key: text for page in _pages().values() for key, text in page.items()}
    problems = stepper_problems(stored_widget(BOOK / "decode.ipynb", "cache-stepper"), glue)
    assert not problems, "\n".join(problems)


def test_the_stepper_check_bites():
    stepper = stored_widget(BOOK / "decode.ipynb", "cache-stepper")
    glue = {"prefill_last_flops": "11328", "decode_flops": "3840", "decode_bytes": "8704"}
    wrong = ["the stepper shows 10304, the pages glue prefill_last_flops = 11328"]
    assert stepper_problems(stepper, glue) == wrong
    stepper["steps"][0]["cost"]["cached"]["flops"] += 1
    assert len(stepper_problems(stepper, {**glue, "prefill_last_flops": "10304"})) == 2


def test_the_scheduler_replay_shows_the_tables_numbers():
    """The stored replay's totals are the numbers the chapter's table glues (both come from
    ``serving.latency_summary`` of the same runs)."""
    page = BOOK / "continuous_batching.ipynb"
    replay = {r["id"]: r["totals"] for r in stored_widget(page, "serving-replay")["runs"]}
    glue = glued(page)
    runs = {"none": "long-continuous-whole", "32": "long-continuous-32", "16": "long-continuous-16"}
    totals = {"gap": "max_gap_ms_p99", "tpot": "tpot_ms_p50"}
    checked = 0
    for q in SHARED:
        key = q.keys[0]
        if key.startswith("cb_chunk_"):
            shown = replay[runs[key.split("_")[-1]]][totals[key.split("_")[2]]]
            assert float(glue[key]) == round(shown, q.digits), (key, glue[key], shown)
            checked += 1
    assert checked == 5


# Each check bites


def test_a_shared_quantity_with_another_value_or_none_fails():
    q = (Shared("copy", ("h200_copy_tbps",), lambda: 4.2492, 2, r"tbps"),
         Shared("gap", ("cb_chunk_gap_16",), lambda: 1.03, 2, r"gap"))  # fmt: skip
    pages = {"a": {"h200_copy_tbps": "4.25"}, "b": {"h200_copy_tbps": "4.26"}}
    assert shared_problems(pages, q) == ["b: h200_copy_tbps = 4.26, but copy is 4.25",
                                         "gap: none of ('cb_chunk_gap_16',) is glued"]  # fmt: skip


def test_a_near_value_under_a_second_key_fails():
    q = (Shared("copy", ("h200_copy_tbps",), lambda: 4.25, 2, r"tbps"),
         Shared("llama", ("llama_2_7b_weights_gib",), lambda: 12.55, 1, r"weights?_gib"))  # fmt: skip
    pages = {
        "gpu": {"gpu_copy_tbps": "4.26", "gpu_weight_gib": "2.44", "h200_copy_tbps": "4.25"},
        "sas": {"sas_weights_gib": "12.3", "sas_peak_tflops": "4.25"},  # not the copy's family
    }
    assert near_problems(pages, q, {}) == [
        "gpu: gpu_copy_tbps = 4.26 is copy (4.25) under a second key",
        "sas: sas_weights_gib = 12.3 is llama (12.6) under a second key",
    ]
    assert near_problems(pages, q, {"gpu_copy_tbps": "x", "sas_weights_gib": "y"}) == []


def test_a_paragraph_without_its_model_fails():
    q = (Shared("share", ("rooflines_rec_bw1",), lambda: 0.87, 2, r"_bw1$", ("GPT-2 small",)),)
    texts = {
        "r": "A step read at {glue:text}`rooflines_rec_bw1:.2f` of the GEMV.\n\n"
        "GPT-2 small's step read at {glue:text}`rooflines_rec_bw1:.2f`.\n"
        "- a list item at {glue:text}`rooflines_rec_bw1:.2f`",
    }
    problems = naming_problems(texts, q)
    assert len(problems) == 2 and all(p.startswith("r: a paragraph quotes share") for p in problems)


@pytest.mark.parametrize("q", SHARED, ids=lambda q: q.keys[0])
def test_every_shared_quantity_comes_from_a_function_that_answers_a_number(q):
    value = q.value()
    assert isinstance(value, float) and value == value and re.search(q.family, q.keys[0]) is not None
