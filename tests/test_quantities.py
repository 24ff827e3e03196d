"""One value per quantity (issue #35): each number that the chapters name in several places, the
toy prompt's FLOP counts and the thresholds at which work turns compute-bound, has one glued key,
one value on every page that glues it, and its own name on the cheat sheet, which says which is
which.

The thresholds differ in what they count (the weight products alone or the whole pass, a prefill
into a cache or a pass without one, one decode step's cost model or a fit of a measured sweep) and
in the ceilings they rest on (measured in a recorded run, or a datasheet's); a reader who meets
two of them must be able to tell them apart by name. The checks read the notebooks' stored glue
outputs (as tests/test_book_shape.py does) and the prose of their Markdown cells.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

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


def test_every_quantity_has_one_value_on_every_page():
    problems = value_problems(_pages())
    assert not problems, "\n".join(problems)


def test_no_quantity_is_glued_under_a_second_key():
    problems = alias_problems(_pages())
    assert not problems, "\n".join(problems)


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
