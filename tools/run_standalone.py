"""Run every chapter as a reader would in Colab or Binder, on a second CPU, and compare its outputs.

    python tools/run_standalone.py [--cpu second|avx2|baseline|native] [--jobs N|auto] book/*.ipynb
    (``make standalone`` runs it in a venv of its own that has kvtutor[notebooks] and a kernel)

Each notebook is copied into a fresh temporary folder and executed there top to bottom, in an
environment without the book's tools (no myst-nb, Sphinx, Jupyter Book or nbval). Every code
cell's outputs are then compared with the stored ones as strict nbval compares them: text outputs
exactly, after the sanitizers of ``book/nbval_sanitize.cfg``; figures and the cells tagged
``nbval-ignore-output`` (timings; or marked ``# NBVAL_IGNORE_OUTPUT``) are skipped.

``--cpu second`` (the default) runs the kernel on another CPU's numeric kernels: one level below
this machine's (``second_cpu_env``), through NumPy's ``NPY_DISABLE_CPU_FEATURES``, torch's
``ATEN_CPU_CAPABILITY``, ``OPENBLAS_CORETYPE``, ``MKL_ENABLE_INSTRUCTIONS`` and
``ONEDNN_MAX_CPU_ISA``, so float32 sums and products round differently in their last bits, as on
another reader's CPU; ``--cpu avx2`` and ``--cpu baseline`` name a level. A canary computation
shows first that the results really change; outputs stored on this machine must still match.
``--jobs`` chapters run at once (``auto``: one per core). Prints one line per chapter.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

BOOK_TOOLS = ("myst_nb", "jupyter_book", "sphinx", "nbval")
SANITIZE = Path(__file__).resolve().parent.parent / "book" / "nbval_sanitize.cfg"
SLOW_S = 10.0  # a cell slower than this (here) should say so before it runs

# What strict nbval leaves out of the comparison (nbval.plugin.IPyNbFile.skip_compare).
SKIP_COMPARE = (
    "metadata",
    "traceback",
    "prompt_number",
    "output_type",
    "name",
    "execution_count",
    "application/vnd.jupyter.widget-view+json",
    "image/png",
    "image/jpeg",
)
IGNORE_MARKERS = ("NBVAL_IGNORE_OUTPUT", "PYTEST_VALIDATE_IGNORE_OUTPUT")

# Last bits that depend on the kernels: float32 reductions, elementwise maths, matrix products.
CANARY = """
import numpy as np, torch
rng = np.random.default_rng(0)
a = rng.standard_normal((64, 64)).astype(np.float32)
v = rng.standard_normal(1000).astype(np.float32)
t = torch.from_numpy(a)
print(repr(float((a @ a)[3, 5])), repr(float(np.tanh(v).sum())), repr(float((t @ t)[3, 5])),
      repr(float(torch.softmax(torch.from_numpy(v), 0)[7])))
"""


def second_cpu_env(level: str = "second") -> dict[str, str]:
    """Environment variables that put NumPy, torch and their BLAS on another CPU's kernels.

    ``"avx2"``: an AVX2 CPU without AVX-512 (AMD Zen 2 and 3, most laptops); ``"baseline"``: the
    x86-64-v2 (SSE4.2) kernels every x86 CPU has, or plain ARMv8 on ARM; ``"second"``: one level
    below this CPU (avx2 on an AVX-512 machine, baseline elsewhere), the likeliest other reader.
    """
    import numpy._core._multiarray_umath as umath

    dispatched = [f for f in umath.__cpu_dispatch__ if umath.__cpu_features__.get(f)]
    x86 = platform.machine().lower() in ("x86_64", "amd64")
    if level == "second":
        level = "avx2" if x86 and umath.__cpu_features__.get("AVX512F") else "baseline"
    if level == "avx2":
        if not (x86 and umath.__cpu_features__.get("AVX2")):
            raise ValueError("cpu: avx2 needs an x86-64 CPU with AVX2")
        off = [f for f in dispatched if f != "X86_V3"]
        env = {"ATEN_CPU_CAPABILITY": "avx2", "OPENBLAS_CORETYPE": "Haswell",
               "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}  # fmt: skip
    elif x86:
        off = dispatched
        env = {"ATEN_CPU_CAPABILITY": "default", "OPENBLAS_CORETYPE": "Nehalem",
               "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ONEDNN_MAX_CPU_ISA": "SSE41"}  # fmt: skip
    else:
        off = dispatched
        env = {"ATEN_CPU_CAPABILITY": "default", "OPENBLAS_CORETYPE": "ARMV8"}
    return env | ({"NPY_DISABLE_CPU_FEATURES": ",".join(off)} if off else {})


def canary(env: dict[str, str]) -> str:
    """The canary's printed last bits under ``env`` (added to this process's environment)."""
    out = subprocess.run(
        [sys.executable, "-c", CANARY], env=os.environ | env, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def sanitizers(path: Path = SANITIZE) -> list[tuple[str, str]]:
    """(regex, replacement) pairs, read as nbval reads ``--nbval-sanitize-with``."""
    return re.findall(r"^regex: (.*)$\n^replace: (.*)$", path.read_text(), flags=re.M)


def _text(value: object) -> object:
    """A notebook's text, stored as one string or as a list of lines, as one string."""
    return "".join(value) if isinstance(value, list) else value


def ignored(cell: dict) -> bool:
    """Is the cell's output volatile: tagged ``nbval-ignore-output``, or marked by the comment?"""
    comments = {line.strip().lstrip("#").strip() for line in _text(cell.get("source", "")).splitlines()}
    tags = set(cell.get("metadata", {}).get("tags", []))
    return bool(comments & set(IGNORE_MARKERS)) or "nbval-ignore-output" in tags


def comparable(outputs: list[dict], patterns: list[tuple[str, str]]) -> dict[str, list[object]]:
    """Outputs as nbval compares them: streams joined by name, data flattened by MIME type,
    skipped keys dropped, text sanitized; the order is kept among outputs of one key."""
    streams: dict[str, str] = {}
    merged: list[dict] = []
    for out in outputs:
        if out.get("output_type") == "stream":
            name = out.get("name", "stdout")
            if name not in streams:
                merged.append({"stream": name})
            streams[name] = streams.get(name, "") + _text(out.get("text", ""))
        else:
            merged.append(out)
    flat: dict[str, list[object]] = defaultdict(list)
    for out in merged:
        if "stream" in out:
            items = [(out["stream"], streams[out["stream"]])]
        else:
            items = [(k, v) for k, v in out.items() if k != "data"] + list(out.get("data", {}).items())
        for key, value in items:
            if key in SKIP_COMPARE:
                continue
            value = _text(value)
            if isinstance(value, str):
                for regex, replace in patterns:
                    value = re.sub(regex, replace, value)
            flat[key].append(value)
    return dict(flat)


def differences(stored: dict, fresh: dict, patterns: list[tuple[str, str]]) -> list[str]:
    """One line per code cell whose fresh outputs differ from the stored ones (empty: all agree)."""
    cells = [c for c in stored["cells"] if c["cell_type"] == "code"]
    ran = [c for c in fresh["cells"] if c["cell_type"] == "code"]
    if len(cells) != len(ran):
        return [f"{len(ran)} code cells ran, {len(cells)} are stored"]
    found = []
    for i, (ref, new) in enumerate(zip(cells, ran, strict=True)):
        if ignored(ref):
            continue
        a, b = comparable(ref.get("outputs", []), patterns), comparable(new.get("outputs", []), patterns)
        if a != b:
            key = next((k for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)), "?")
            want, got = (json.dumps(x.get(key), ensure_ascii=False)[:300] for x in (a, b))
            found.append(f"cell {i} [{key}]: stored {want}\n      ran    {got}")
    return found


def _cell_seconds(nb) -> list[tuple[int, float]]:
    """(index among the notebook's own code cells, seconds) from nbclient's timing metadata."""
    from datetime import datetime

    out = []
    code = [c for c in nb.cells if c.cell_type == "code"]
    for i, cell in enumerate(code):
        t = cell.metadata.get("execution", {})
        start, end = t.get("iopub.execute_input"), t.get("shell.execute_reply")
        if start and end:
            seconds = datetime.fromisoformat(end.rstrip("Z")) - datetime.fromisoformat(start.rstrip("Z"))
            out.append((i, seconds.total_seconds()))
    return out


def run_chapter(path: Path, patterns: list[tuple[str, str]]) -> tuple[list[str], str]:
    """Execute a copy of ``path`` in a fresh folder; (differences or the error, timing note)."""
    import nbclient
    import nbformat

    stored = json.loads(path.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory(prefix="kvtutor-reader-") as work:
        shutil.copy(path, Path(work) / path.name)
        nb = nbformat.read(Path(work) / path.name, as_version=4)
        # the kernel too must lack the book's tools (it is this environment's python3)
        check = f"import importlib.util as u\nassert not [m for m in {BOOK_TOOLS!r} if u.find_spec(m)]"
        nb.cells.insert(0, nbformat.v4.new_code_cell(check))
        client = nbclient.NotebookClient(
            nb,
            timeout=600,
            kernel_name="python3",
            resources={"metadata": {"path": work}},
            extra_arguments=["--IPKernelApp.log_level=ERROR"],  # not its note on TCP transport
        )
        try:
            client.execute()
        except nbclient.exceptions.CellExecutionError as exc:
            return [str(exc).splitlines()[-1] if str(exc) else repr(exc)], ""
    del nb.cells[0]
    seconds = _cell_seconds(nb)
    slow = [f"cell {i} {s:.0f} s" for i, s in seconds if s > SLOW_S]
    note = f"{sum(s for _, s in seconds):.0f} s" + (
        f"; over {SLOW_S:.0f} s: {', '.join(slow)}" if slow else ""
    )
    return differences(stored, json.loads(nbformat.writes(nb)), patterns), note


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", choices=("second", "avx2", "baseline", "native"), default="second")
    parser.add_argument("--jobs", default="auto", help="chapters at once: a number, or auto (one per core)")
    parser.add_argument("notebooks", nargs="+", type=Path)
    args = parser.parse_args(argv)
    present = [m for m in BOOK_TOOLS if importlib.util.find_spec(m) is not None]
    if present:
        print(f"this environment has the book's tools ({', '.join(present)}): use a reader's one, "
              "e.g. `make standalone`", file=sys.stderr)  # fmt: skip
        return 2

    os.environ.pop("MPLBACKEND", None)  # inline figures, whose text/plain nbval compares too
    if args.cpu != "native":
        env = second_cpu_env(args.cpu)
        before, after = canary({}), canary(env)
        print("second CPU: " + " ".join(f"{k}={v}" for k, v in env.items()))
        if before == after:
            print(f"note: these kernels round as this CPU's own do (canary {before}): the chapters "
                  "run on this CPU only", flush=True)  # fmt: skip
        else:
            print(f"canary (last bits): this CPU {before}\n            second CPU {after}", flush=True)
        os.environ.update(env)
    jobs = (os.cpu_count() or 1) if args.jobs == "auto" else int(args.jobs)
    patterns = sanitizers()
    failed = 0
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, min(jobs, len(args.notebooks)))) as pool:
        runs = [(path, pool.submit(run_chapter, path, patterns)) for path in args.notebooks]
        for path, run in runs:
            problems, note = run.result()
            if problems:
                failed += 1
                print(f"FAILED {path.name}:\n    " + "\n    ".join(problems), flush=True)
            else:
                print(f"ok     {path.name} ({note})", flush=True)
    print(f"{jobs} at once, {time.perf_counter() - t0:.0f} s in all")
    print(f"{len(args.notebooks) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
