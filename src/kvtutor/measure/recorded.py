"""Benchmark runs recorded on named machines, shipped inside the package.

The measuring chapters read them through ``importlib.resources``, so they work the same from a
clone, an installed wheel, Colab or Binder (no path relative to the notebook). Every benchmark
result is checked against the bench schema (``kvtutor.measure.schema``) as it is read.

- ``cpu_bench()``: ``python -m kvtutor bench --size full`` on a CPU (``make bench`` re-records it);
  ``cpu_bench("xeon-2026-11-29")`` an earlier recording on an Intel Xeon, kept for comparison.
- ``cuda_bench()``: the same on a CUDA GPU from the current code (``tools/gpu_check.sh``), or None
  while no such run has been recorded.
- ``h200_run()``: one H200 run of an earlier commit (bench, anchors, kernel table, test log), kept
  as it was measured; its ``commit`` and ``date`` say which code it timed.
"""

from __future__ import annotations

import datetime
import json
import re
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

from .schema import check_result

__all__ = [
    "RUNS",
    "H200_RUN",
    "CPU_RUNS",
    "cpu_bench",
    "cuda_bench",
    "h200_run",
    "run_path",
    "run_day",
    "cpu_name",
]

RUNS = "data/runs"
#: the folder (under ``RUNS``) of the recorded H200 run, and what it timed
H200_RUN = {"folder": "h200-2026-11-30", "commit": "6d8bdd6", "date": "2026-11-30"}


def run_path(name: str) -> Traversable:
    """The packaged file or folder ``name`` under ``kvtutor/data/runs``."""
    if not isinstance(name, str) or not name or name.startswith(("/", ".")):
        raise ValueError(f"name: expected a file name under {RUNS}, got {name!r}")
    return resources.files("kvtutor").joinpath(RUNS, *name.split("/"))


def _json(name: str) -> dict[str, Any] | None:
    path = run_path(name)
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def _bench(name: str) -> dict[str, Any] | None:
    """A recorded benchmark result, checked against the bench schema (``kvtutor.measure.schema``)."""
    result = _json(name)
    return None if result is None else check_result(result, f"{RUNS}/{name}")


#: earlier CPU recordings kept beside the current one (a CPU result holds only for its CPU)
CPU_RUNS = {"xeon-2026-11-29": "bench-cpu-xeon-2026-11-29.json"}


def cpu_bench(which: str = "current") -> dict[str, Any]:
    """The recorded full-size CPU benchmark: ``"current"`` (``bench-cpu.json``, what ``make bench``
    last recorded) or a name from ``CPU_RUNS`` (an earlier recording on another CPU)."""
    if which != "current" and which not in CPU_RUNS:
        raise ValueError(f"which: expected 'current' or one of {sorted(CPU_RUNS)}, got {which!r}")
    name = "bench-cpu.json" if which == "current" else CPU_RUNS[which]
    result = _bench(name)
    if result is None:
        raise FileNotFoundError(f"{RUNS}/{name} is missing: run `make bench` to record it")
    return result


def cuda_bench() -> dict[str, Any] | None:
    """The recorded full-size GPU benchmark of the current code (``bench-cuda.json``), or None."""
    return _bench("bench-cuda.json")


def h200_run() -> dict[str, Any]:
    """The H200 run recorded at commit ``H200_RUN["commit"]``: ``bench`` (the bench JSON),
    ``anchors`` (the side-by-side anchor script's JSON), ``kernels`` (profiler table, text),
    ``tests_log`` (the CUDA tests' output), plus ``commit``, ``date`` and ``folder``."""
    folder = H200_RUN["folder"]
    return {
        **H200_RUN,
        "bench": _bench(f"{folder}/bench-cuda.json"),
        "anchors": _json(f"{folder}/anchors.json"),
        "kernels": run_path(f"{folder}/kernels.txt").read_text(encoding="utf-8"),
        "tests_log": run_path(f"{folder}/cuda-tests.log").read_text(encoding="utf-8"),
    }


def run_day(timestamp: str) -> str:
    """A run's date as the pages print it, the same in both editions: '2026-11-30T18:51:58Z' and
    '2026-11-30' give '2026-11-30'."""
    if not isinstance(timestamp, str):
        raise TypeError(f"timestamp: expected an ISO date string, got {type(timestamp).__name__}")
    try:
        return datetime.date.fromisoformat(timestamp[:10]).isoformat()
    except ValueError:
        raise ValueError(f"timestamp: expected an ISO date (YYYY-MM-DD...), got {timestamp!r}") from None


def cpu_name(name: str) -> str:
    """A CPU's name as the pages print it: 'Intel(R) Xeon(R) Processor' -> 'Intel Xeon'."""
    return re.sub(r"\(R\)|\(TM\)| Processor| CPU", "", name).strip()
