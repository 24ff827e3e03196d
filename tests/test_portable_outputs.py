"""Stored outputs hold on any reader's CPU.

- Every float glued into the prose carries only the digits the page shows, so the last bits, which
  differ between CPUs (AVX-512, AVX2, Apple silicon), never reach a stored output.
- ``kvtutor.book.display.glue`` writes exactly what ``myst_nb.glue`` writes, in any kernel.
- ``make standalone``'s second CPU (and the baseline one) really changes the numeric kernels: the
  same book computation differs in its last bits, while its printed form does not; and its
  comparison of outputs is nbval's (it catches a changed output, skips ignored cells and figures,
  applies the sanitizers).
"""

from __future__ import annotations

import ast
import json
import math
import os
import platform
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from kvtutor.book.display import GLUE_FORMAT, GLUE_PREFIX, glue, shown

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))
standalone = runpy.run_path(str(ROOT / "tools" / "run_standalone.py"))

ROLE = re.compile(r"\{glue(?::\w*)?\}`([^`]+)`")


def glued_values(nb: dict) -> dict[str, str]:
    """Every glued key of a notebook and its stored text/plain form."""
    values = {}
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            book = out.get("metadata", {}).get("scrapbook")
            if book:
                text = out["data"][book["mime_prefix"] + "text/plain"]
                values[book["name"]] = "".join(text) if isinstance(text, list) else text
    return values


def prose_formats(nb: dict) -> dict[str, list[str]]:
    """The format specs with which the markdown shows each glued key ('' when it has none)."""
    specs: dict[str, list[str]] = {}
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            for m in ROLE.finditer("".join(cell["source"])):
                key, _, spec = m.group(1).partition(":")
                specs.setdefault(key.split("::")[-1], []).append(spec)
    return specs


def holds_only_shown_digits(value: float, specs: list[str]) -> bool:
    """True when ``value`` is rounded as its most precise format shows it (or one digit finer);
    a float shown with no format has at most six significant digits."""
    matches = [m for s in specs if (m := GLUE_FORMAT.fullmatch(s))]
    parsed = [(int(m.group(1)) + 2 * (m.group(2) == "%"), m.group(2)) for m in matches]
    if not parsed:
        digits = re.sub(r"e.*", "", repr(value)).replace("-", "").replace(".", "").lstrip("0")
        return len(digits) <= 6
    n, kind = max(parsed)
    candidates = [f".{d}{kind if kind != '%' else 'f'}" for d in (n, n + 1)]
    return any(math.isclose(value, shown(value, c), rel_tol=1e-12, abs_tol=0) for c in candidates)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_glued_floats_hold_only_the_digits_the_page_shows(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    values, specs = glued_values(nb), prose_formats(nb)
    assert set(specs) <= set(values), f"prose shows keys never glued: {sorted(set(specs) - set(values))}"
    noisy = []
    for key, text in values.items():
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            continue
        if isinstance(value, float) and not holds_only_shown_digits(value, specs.get(key, [""])):
            noisy.append(f"{key}={text} shown as {specs.get(key)}")
    assert not noisy, "glue these with fmt= (or round them) to the digits shown: " + "; ".join(noisy)


def test_the_check_catches_a_float_with_more_digits_than_shown():
    assert holds_only_shown_digits(0.6, [".2f"]) and holds_only_shown_digits(0.95, [".0%"])
    assert holds_only_shown_digits(1.2e-05, [".1e"]) and holds_only_shown_digits(0.125, [""])
    assert not holds_only_shown_digits(0.9999566759642713, [".5f"])
    assert not holds_only_shown_digits(3.8146428017464857, [".2f", ".1f"])
    assert not holds_only_shown_digits(2.2649765014648438e-06, [".1e"])
    assert not holds_only_shown_digits(0.9999566759642713, [""])


@pytest.mark.parametrize(
    ("value", "fmt", "want"),
    [(0.5962, ".2f", 0.6), (0.9537, ".0%", 0.95), (0.95437, ".1%", 0.954), (6708.625, ",.0f", 6709.0),
     (1.1876368666090788e-05, ".1e", 1.2e-05), (3.8146428017464857, ".2f", 3.81)],
)  # fmt: skip
def test_shown_rounds_to_what_the_format_prints(value, fmt, want):
    assert shown(value, fmt) == want
    assert format(shown(value, fmt), fmt) == format(value, fmt)


@pytest.mark.parametrize("fmt", ["", "g", ".3g", "d", "2f", ".2f%"])
def test_shown_refuses_a_format_it_cannot_round_to(fmt):
    with pytest.raises(ValueError, match="fmt: expected"):
        shown(1.5, fmt)


@pytest.mark.parametrize("display", [True, False])
def test_glue_writes_what_myst_nb_glue_writes(display):
    myst_nb = pytest.importorskip("myst_nb")
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    InteractiveShell.instance()
    with capture_output() as ours:
        glue("key", 0.25, display=display)
        glue("key", shown(0.2537, ".2f"), display=display)
    with capture_output() as theirs:
        myst_nb.glue("key", 0.25, display=display)
        myst_nb.glue("key", 0.25, display=display)
    assert [(o.data, o.metadata) for o in ours.outputs] == [(o.data, o.metadata) for o in theirs.outputs]
    prefix = "" if display else GLUE_PREFIX
    assert ours.outputs[0].data == {prefix + "text/plain": "0.25"}


# The same book computation under this CPU's kernels and under the second CPU's: a float32
# forward pass of the toy model, a float32 product and attention weights over 1,000 keys (a
# softmax: on an AMD CPU with AVX-512, MKL and OpenBLAS take their AVX2 paths anyway, so only
# torch's own vectorised kernels change there), as raw bits and as the book prints them.
BOOK_COMPUTATION = """
import numpy as np, torch, kvtutor
from kvtutor.book.display import setup_notebook
setup_notebook()
model, tok = kvtutor.load_toy_model(), kvtutor.load_toy_tokenizer()
logits_TV = model.logits_without_cache(tok.encode("The cat sat on the mat"))
rng = np.random.default_rng(0)
a = rng.standard_normal((64, 64)).astype(np.float32)
t = torch.from_numpy(a)
scores_HS = torch.from_numpy(rng.standard_normal((4, 1000)).astype(np.float32))
results = {"logits": logits_TV, "numpy a @ a": a @ a, "torch a @ a": (t @ t).numpy(),
           "torch softmax": torch.softmax(scores_HS, -1).numpy() * 1000}
print(repr({k: (v.tobytes().hex(), str(v[:2, :6])) for k, v in results.items()}))
"""


def run_book_computation(env: dict[str, str]) -> dict[str, tuple[str, str]]:
    out = subprocess.run(
        [sys.executable, "-c", BOOK_COMPUTATION],
        env=os.environ | {"OPENBLAS_NUM_THREADS": "1"} | env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stderr == "", out.stderr
    return ast.literal_eval(out.stdout)


def _has_avx2() -> bool:
    """As ``second_cpu_env`` sees the CPU: through NumPy's runtime feature detection."""
    import numpy._core._multiarray_umath as umath

    return bool(umath.__cpu_features__.get("AVX2"))


@pytest.mark.skipif(
    platform.machine() != "x86_64" or not _has_avx2(),
    reason="the second CPU is x86-64's baseline kernels: a CPU without AVX2 already runs them",
)
@pytest.mark.parametrize("level", ["second", "baseline"])
def test_the_second_cpu_changes_last_bits_but_not_what_the_book_prints(level):
    env = standalone["second_cpu_env"](level)
    here, there = run_book_computation({}), run_book_computation(env)
    changed = [name for name in here if here[name][0] != there[name][0]]
    assert changed, (
        f"the {level} CPU ({env}) computes every result bit for bit as this one: it checks nothing"
    )
    for name in here:
        assert here[name][1] == there[name][1], f"{name} prints differently"
    assert standalone["canary"]({}) != standalone["canary"](env)


def _nb(*cells: dict) -> dict:
    return {"cells": list(cells), "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def _code(source: str, *outputs: dict) -> dict:
    return {
        "cell_type": "code",
        "metadata": {},
        "source": source,
        "outputs": list(outputs),
        "execution_count": 1,
    }


def _stream(text: str) -> dict:
    return {"output_type": "stream", "name": "stdout", "text": text}


def _result(text: str, png: str = "") -> dict:
    data = {"text/plain": text} | ({"image/png": png} if png else {})
    return {"output_type": "execute_result", "data": data, "metadata": {}, "execution_count": 1}


def test_the_comparison_is_nbvals():
    patterns = standalone["sanitizers"]()
    differences = standalone["differences"]
    stored = _nb(
        _code("print(1)", _stream("a\n"), _stream("b\n")),
        _code("# NBVAL_IGNORE_OUTPUT\nt", _stream("1.234 s\n")),
        _code("fig", _result("<Figure>", png="AAAA")),
        _code("obj", _result("<object at 0x7f00aa>")),
    )
    same = _nb(
        _code("print(1)", _stream("a\nb\n")),  # one stream or two: the same text
        _code("# NBVAL_IGNORE_OUTPUT\nt", _stream("9.876 s\n")),  # a timing, ignored
        _code("fig", _result("<Figure>", png="BBBB")),  # figures are not compared
        _code("obj", _result("<object at 0x7f11bb>")),  # the sanitizer's memory addresses
    )
    assert differences(stored, same, patterns) == []
    changed = json.loads(json.dumps(same))
    changed["cells"][0]["outputs"] = [_stream("a\nc\n")]
    found = differences(stored, changed, patterns)
    assert len(found) == 1 and found[0].startswith("cell 0 [stdout]")
    fewer = json.loads(json.dumps(same))
    fewer["cells"][3]["outputs"] = []
    assert differences(stored, fewer, patterns)[0].startswith("cell 3 [text/plain]")
    assert differences(stored, _nb(*same["cells"][:3]), patterns) == ["3 code cells ran, 4 are stored"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_timing_cells_are_tagged_and_say_why(path):
    """The ignore marker is a cell tag, not a comment on the reader's page, and the cell's first
    line says why its output is volatile."""
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        source = "".join(cell["source"])
        assert "NBVAL_" not in source, f"a comment marker on the page: {source.splitlines()[0]!r}"
        if "nbval-ignore-output" in cell["metadata"].get("tags", []):
            assert source.startswith("# "), f"a volatile cell without its reason: {source[:60]!r}"
