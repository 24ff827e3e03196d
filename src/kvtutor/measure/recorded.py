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

A quantity that several pages quote comes from one function here, so that it has one value:
``h200_copy_bandwidth()`` (the recorded H200's copy bandwidth) and ``batch1_decode_share(run,
model)`` (a batch-1 decode step against the GEMV bandwidth of its run).
"""

from __future__ import annotations

import datetime
import re
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from .schema import check_result, read_json

__all__ = [
    "RUNS",
    "H200_RUN",
    "CPU_RUNS",
    "cpu_bench",
    "cuda_bench",
    "h200_run",
    "run_path",
    "run_text",
    "run_json",
    "run_day",
    "cpu_name",
    "h200_copy_bandwidth",
    "batch1_decode_share",
]

RUNS = "data/runs"
#: the folder (under ``RUNS``) of the recorded H200 run, and what it timed
H200_RUN = {"folder": "h200-2026-11-30", "commit": "6d8bdd6", "date": "2026-11-30"}


def _runs_root() -> Traversable:
    return resources.files("kvtutor").joinpath(*RUNS.split("/"))


def run_path(name: str) -> Traversable:
    """The packaged file or folder ``name`` under ``kvtutor/data/runs``: a relative path of
    '/'-separated parts that stays there. An absolute path, a part that is empty, ``.`` or
    ``..``, a backslash, and a symbolic link that leads out of the folder are refused."""
    if not isinstance(name, str):
        raise TypeError(f"name: expected a file name under {RUNS}, got {type(name).__name__}")
    parts = name.split("/")
    if not name or any(p in ("", ".", "..") or "\\" in p or "\0" in p for p in parts) or ":" in parts[0]:
        raise ValueError(f"name: expected a file name under {RUNS}, got {name!r}")
    root = _runs_root()
    path = root.joinpath(*parts)
    if isinstance(root, Path) and not path.resolve().is_relative_to(root.resolve()):
        raise ValueError(f"name: expected a file name under {RUNS}, got {name!r}, which leads out of it")
    return path


def run_text(name: str) -> str:
    """The packaged text file ``name`` under ``kvtutor/data/runs`` (``run_path``), UTF-8, or a
    FileNotFoundError/ValueError naming it."""
    path = run_path(name)
    if not path.is_file():
        raise FileNotFoundError(f"{RUNS}/{name} is missing")
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{RUNS}/{name}: expected UTF-8 text, got byte {exc.object[exc.start]:#04x} "
                         f"at offset {exc.start}") from None  # fmt: skip


def run_json(name: str) -> Any:
    """The packaged JSON file ``name`` under ``kvtutor/data/runs``, read strictly
    (``schema.read_json``), or None if there is no such file."""
    path = run_path(name)
    if not path.is_file():
        return None
    return read_json(path.read_bytes(), f"{RUNS}/{name}")


def _json(name: str) -> dict[str, Any] | None:
    result = run_json(name)
    if result is not None and not isinstance(result, dict):
        raise ValueError(f"{RUNS}/{name}: expected a JSON object, got {type(result).__name__}")
    return result


def _bench(name: str) -> dict[str, Any] | None:
    """A recorded benchmark result, checked against the bench schema (``kvtutor.measure.schema``)."""
    result = _json(name)
    return None if result is None else check_result(result, f"{RUNS}/{name}")


#: earlier CPU recordings kept beside the current one (a CPU result holds only for its CPU)
CPU_RUNS = {
    "xeon-2026-11-29": "bench-cpu-xeon-2026-11-29.json",
    # the decode step against the plain read rate, with the product of one row chosen at load time
    "epyc-2026-12-04": "bench-cpu-epyc-2026-12-04.json",
    # the book's main run until the engine's one-row product (it predates it)
    "epyc-2026-11-30": "bench-cpu-epyc-2026-11-30.json",
}


def cpu_bench(which: str = "current") -> dict[str, Any]:
    """The recorded full-size CPU benchmark: ``"current"`` (``bench-cpu.json``, what ``make bench``
    last recorded) or a name from ``CPU_RUNS`` (a recording on another CPU, earlier or later)."""
    if not isinstance(which, str):
        raise TypeError(f"which: expected 'current' or one of {sorted(CPU_RUNS)}, got {type(which).__name__}")
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
        "kernels": run_text(f"{folder}/kernels.txt"),
        "tests_log": run_text(f"{folder}/cuda-tests.log"),
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


def h200_copy_bandwidth() -> float:
    """The recorded H200's memory bandwidth in bytes per second, a 1 GiB device-to-device copy
    counting the bytes read and written: the bench's ceiling (``ceilings["bandwidth"]``), which
    its roofline predictions divide by. The anchor script (``h200_run()["anchors"]``) timed a copy
    of its own in the same run and got 0.3% more; every H200 rate the book states is divided by
    this one value instead."""
    ceilings = h200_run()["bench"]["ceilings"]
    if ceilings.get("bandwidth_source") != "copy":
        raise ValueError(f"{RUNS}/{H200_RUN['folder']}: expected a copy bandwidth ceiling, "
                         f"got {ceilings.get('bandwidth_source')!r}")  # fmt: skip
    return float(ceilings["bandwidth"])


def batch1_decode_share(run: dict[str, Any], model: str) -> float:
    """A recorded CPU run's batch-1 decode step of ``model`` against the GEMV bandwidth of the same
    run: the bytes it read per second over those of BLAS's matrix-vector product.

    The run timed batch 1 for two models: its ``sizes["roofline_model"]`` (GPT-2 small) as the
    first point of its decode sweep, every byte the cost model counts (weights, keys and values) over
    the run's GEMV ceiling; and its ``sizes["bandwidth_model"]`` (gpt2-medium) in the bandwidth
    experiment, the weight bytes over a GEMV timed in alternating rounds (``ratio_to_gemv``)."""
    if not isinstance(run, dict) or not isinstance(run.get("sizes"), dict):
        raise TypeError(f"run: expected a recorded CPU run (cpu_bench()), got {type(run).__name__}")
    sizes = run["sizes"]
    if model == sizes.get("roofline_model"):
        point = run["decode_sweep"]["points"][0]
        if point["batch_size"] != 1:
            raise ValueError(f"run: its decode sweep starts at batch {point['batch_size']}, not 1")
        return float(point["bytes"] / point["time"]["median_s"] / run["ceilings"]["bandwidth"])
    if model == sizes.get("bandwidth_model"):
        return float(run["decode_bandwidth"]["ratio_to_gemv"])
    known = [sizes.get("roofline_model"), sizes.get("bandwidth_model")]
    raise ValueError(f"model: expected one of the models the run timed at batch 1, {known}, got {model!r}")
