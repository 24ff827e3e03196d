"""``python -m kvtutor bench``: the whole run and its command line.

``run`` probes the machine, measures every section (``experiments``, ``engine``), evaluates the
goals (``goals``) and returns the result, checked against the schema (``schema``); ``main`` parses
the command line, writes the JSON (after every section, so that a run cut short keeps what it
measured) and the plots, and prints the goals. Where ``--out`` and ``--plots`` point is checked
before anything is measured, and every file is written whole or not at all
(``environment.write_atomically``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..environment import check_output_path, write_atomically
from ..extras import missing_extra
from ..measure import timing
from ..measure.goals import evaluate_goals
from ..measure.schema import SCHEMA_VERSION, check_result
from ..measure.timing import bench_size, describe, load_average, probe_machine
from ..validate import default_device, dtype_info
from .common import MEASURED_HOOKS, ceilings, finite, make_model
from .cpu import model_products, run_batch_sweep, run_bf16_vs_fp32, run_compiled_one_row
from .engine import run_big_decode, run_engine, run_generate_vs_hf_static, run_graph_vs_concat
from .experiments import (
    add_predictions,
    run_cache_vs_recompute,
    run_decode_bandwidth,
    run_decode_sweep,
    run_generate_vs_transformers,
    run_preallocated_vs_concat,
    run_prefill_sweep,
    run_prefill_vs_matmul,
    run_read_attempts,
)
from .tables import sizes

if TYPE_CHECKING:
    from ..models.torch_gpt2 import TorchGPT2Model

__all__ = ["BENCH_DTYPES", "RUN_SECTIONS", "DEFAULT_SECTIONS", "run", "write_result", "summary", "main"]

#: the dtypes the benchmark times its models in
BENCH_DTYPES = ("float32", "bfloat16", "float16")


def _progress(total: int, desc: str):
    """A tqdm bar over the sections on a terminal (it counts the measurements as it goes), else None."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return contextlib.nullcontext(None)
    return tqdm(total=total, desc=desc, disable=not sys.stderr.isatty(), leave=False, unit="section")


def _log_line(msg: str) -> None:
    """A progress line on stderr that does not collide with a tqdm bar there."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        print(msg, file=sys.stderr, flush=True)
    else:
        tqdm.write(msg, file=sys.stderr)


@dataclass
class _Run:
    """What every section of one run reads: the sizes, the device, the ceilings measured first, and
    the models (built on first use, at most one large one alive at a time)."""

    sz: dict[str, Any]
    device: str
    dtype: str
    ceil: dict[str, Any]
    log: Callable[[str], None]
    models: dict[tuple[str, str], Any] = field(default_factory=dict)

    @property
    def on_gpu(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def mrt(self) -> float:
        return self.sz["min_run_time"]

    @property
    def reps(self) -> int:
        return self.sz["repeats"]

    def model(self, name: str, dt: Any = None) -> Any:
        key = (name, dtype_info(self.dtype if dt is None else dt).name)
        if key not in self.models:
            for k in [k for k in self.models if k[0] != name]:  # keep at most one large model alive
                del self.models[k]
            self.empty_gpu_cache()
            self.models[key] = make_model(name, self.device, key[1])
        return self.models[key]

    def release(self) -> None:
        """Free the models this run holds (and, on a GPU, the allocator's cached blocks)."""
        self.models.clear()
        self.empty_gpu_cache()

    def empty_gpu_cache(self) -> None:
        if self.on_gpu:
            import torch

            torch.cuda.empty_cache()


def _rooflines(r: _Run) -> dict[str, Any]:
    m, sz = r.model(r.sz["roofline_model"]), r.sz
    prefill = add_predictions(run_prefill_sweep(m, sz["prefill_lengths"], r.mrt, r.reps), r.ceil)
    decode = run_decode_sweep(m, sz["decode_batches"], sz["decode_context"], r.mrt, r.reps, fast=r.on_gpu)
    return {"prefill_sweep": prefill, "decode_sweep": add_predictions(decode, r.ceil)}


def _bandwidth(r: _Run) -> dict[str, Any]:
    gemv_n = None if r.on_gpu else timing.PROBE_SIZES["cpu"][r.sz["size"]]["gemv_n"]
    m = r.model(r.sz["bandwidth_model"])
    bw = run_decode_bandwidth(m, r.sz["bandwidth_context"], r.mrt, max(r.reps, 5), r.on_gpu, gemv_n)
    bw["ratio_to_probe_gemv"] = bw["weight_bytes_per_s"] / r.ceil["gemv_bandwidth"]
    bw.setdefault("ratio_to_gemv", bw["ratio_to_probe_gemv"])  # no GEMV timed beside it
    bw["ratio_to_copy"] = bw["weight_bytes_per_s"] / r.ceil["copy_bandwidth"]
    if gemv_n is not None:  # a CPU: the ways of reading the GEMV's bytes, beside the floor
        from ..models.torch_weights import one_row_rates

        bw["read_attempts"] = run_read_attempts(gemv_n, r.mrt)
        bw["one_row_products"] = dict(one_row_rates(m.dtype))  # what chose one_row_product
        bw["tokens_per_s"] = 1 / bw["time"]["median_s"]
        # the same model with bf16 weights: half the bytes a token, at the read rate it reaches
        b16 = run_decode_bandwidth(r.model(r.sz["bandwidth_model"], "bfloat16"), bw["context_len"], r.mrt, 3)
        bw["bf16"] = {k: b16[k] for k in ("weight_bytes", "weight_bytes_per_s", "one_row_product", "time")}
        bw["bf16"]["tokens_per_s"] = 1 / b16["time"]["median_s"]
        bw["bf16"]["ratio_to_read"] = b16["weight_bytes_per_s"] / bw["read"]["bytes_per_s"]
    return {"decode_bandwidth": bw}


def _prefill_goal(r: _Run) -> dict[str, Any]:
    name, n_tokens = r.sz["prefill_goal"]
    out = run_prefill_vs_matmul(r.model(name), n_tokens, r.mrt, r.reps)
    out["ratio_to_square_matmul"] = out["prefill"]["flops_per_s"] / r.ceil["peak_flops"]
    if not r.on_gpu:  # which product each matrix ran its rows through
        out["products_used"] = model_products(r.model(name))
    r.release()  # the next sections build their own models
    return {"prefill_vs_matmul": out}


def _generate(r: _Run) -> dict[str, Any]:
    r.release()
    gen: dict[str, Any] = {}
    for key, label in (("generate_small", "small"), ("generate_gpt2", "gpt2-small")):
        name, prompt, n_new = r.sz[key]
        gen[label] = {**run_generate_vs_transformers(name, prompt, n_new, r.device, "float32", r.reps),
                      "model": name}  # fmt: skip
        r.empty_gpu_cache()
    return {"generate_vs_transformers": gen}


def _concat(r: _Run) -> dict[str, Any]:
    m = r.model(r.sz["concat_model"])
    return {
        "preallocated_vs_concat": run_preallocated_vs_concat(m, r.sz["concat_lengths"], 8, min(r.reps, 3))
    }


def _recompute(r: _Run) -> dict[str, Any]:
    m, ceil = r.model(r.sz["recompute_model"]), r.ceil
    out = run_cache_vs_recompute(m, r.sz["recompute_lengths"], r.mrt, r.reps, r.on_gpu,
                                 ceil["peak_flops"], ceil["bandwidth"])  # fmt: skip
    return {"cache_vs_recompute": out}


def _engine(r: _Run) -> dict[str, Any]:
    out = _run_engine_section(r.sz, r.model, r.ceil["copy_bandwidth"], r.mrt, r.reps, r.log)
    r.release()
    return {"engine": out}


def _bf16(r: _Run) -> dict[str, Any]:
    r.release()
    name, n_tokens = r.sz["prefill_goal"]
    decode = {dt: r.model(r.sz["bf16_decode_model"], dt) for dt in ("float32", "bfloat16")}
    prefill = {dt: r.model(name, dt) for dt in ("float32", "bfloat16")}
    out = run_bf16_vs_fp32(decode, prefill, r.sz["bandwidth_context"], n_tokens, r.mrt, r.reps)
    del decode, prefill
    r.release()
    if not r.on_gpu:  # the product Inductor would build instead of the engine's packed oneDNN one
        sizes = r.sz["compiled_one_row"]
        out["compiled_one_row"] = run_compiled_one_row("bfloat16", *sizes, rounds=max(r.reps, 3))
    return {"bf16": out}


def _batches(r: _Run) -> dict[str, Any]:
    r.release()
    name = r.sz["batch_model"]
    dtypes = ["float32"]
    if r.on_gpu or timing.native_bf16():  # bf16 only where it is native: elsewhere it is slower
        dtypes.append("bfloat16")
    peak = {r.ceil["dtype"]: r.ceil["peak_flops"]}
    n = timing.PROBE_SIZES["cuda" if r.on_gpu else "cpu"][r.sz["size"]]["matmul_n"]
    for dt in dtypes:  # the roofline of each dtype: its own square matmul, measured now
        peak.setdefault(dt, timing.measure_matmul_flops(n, n, n, r.device, dt, r.mrt)["flops_per_s"])
    models = {dt: r.model(name, dt) for dt in dtypes}
    out = run_batch_sweep(models, r.sz["batch_sizes"], r.sz["batch_context"], peak, r.ceil["bandwidth"],
                          r.mrt, r.reps)  # fmt: skip
    del models
    r.release()
    return {"batch_sweep": out}


#: the sections of a run, in the order it measures them (``engine`` only on CUDA by default, ``bf16``
#: and ``batches`` only on a CPU): each reads the run's sizes, ceilings and models and returns its
#: keys of the result
SECTIONS: dict[str, Callable[[_Run], dict[str, Any]]] = {
    "rooflines": _rooflines,
    "bandwidth": _bandwidth,
    "generate": _generate,
    "prefill_goal": _prefill_goal,
    "concat": _concat,
    "recompute": _recompute,
    "bf16": _bf16,
    "batches": _batches,
    "engine": _engine,
}
RUN_SECTIONS = tuple(SECTIONS)
#: the sections a run measures by default on each kind of device
DEFAULT_SECTIONS = {
    "cpu": tuple(s for s in RUN_SECTIONS if s != "engine"),
    "cuda": tuple(s for s in RUN_SECTIONS if s not in ("bf16", "batches")),
}


def run(
    device: str | None = None,
    size: str | None = None,
    quick: bool | None = None,
    dtype: Any = None,
    sections: Sequence[str] | None = None,
    log: Callable[[str], None] | None = None,
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Probe the machine and measure every section; returns the result dict that ``main`` writes as JSON.

    ``checkpoint``, if given, receives the result so far (goals evaluated, ``"partial": True``) after
    every section: a run cut short by a time limit still leaves what it measured.

    sections: any of ``rooflines``, ``bandwidth``, ``generate``, ``prefill_goal``, ``concat``,
    ``recompute``, ``bf16``, ``batches``, ``engine``, or ``["all"]`` (default
    ``DEFAULT_SECTIONS``: ``engine``, the GPU goals of the fast path, only on CUDA; ``bf16`` and
    ``batches``, the CPU engine's, only on a CPU).
    """
    device = default_device() if device is None else str(device)
    on_gpu = device.startswith("cuda")
    sz = sizes(device, size, quick)
    dtype = ("bfloat16" if on_gpu else "float32") if dtype is None else dtype_info(dtype).name
    if dtype not in BENCH_DTYPES:
        raise ValueError(f"dtype: expected one of {list(BENCH_DTYPES)}, got {dtype!r}")
    if sections is None:
        sections = DEFAULT_SECTIONS["cuda" if on_gpu else "cpu"]
    elif list(sections) == ["all"]:
        sections = RUN_SECTIONS
    sections = tuple(sections)
    if not sections or sections == ("",):
        raise ValueError(f"sections: expected at least one name from {list(RUN_SECTIONS)}, got none")
    for s in sections:
        if s not in SECTIONS:
            raise ValueError(f"sections: expected names from {list(RUN_SECTIONS)}, got {s!r}")
    sections = tuple(s for s in RUN_SECTIONS if s in sections)  # always in the order above
    log = log or (lambda msg: None)
    t_start = time.perf_counter()
    result: dict[str, Any] = {"schema": SCHEMA_VERSION, "device": device, "size": sz["size"], "dtype": dtype,
                              "sizes": finite(sz), "seconds": {}}  # fmt: skip
    with _progress(1 + len(sections), "bench") as bar, contextlib.ExitStack() as stack:
        counted = [0]

        def measured() -> None:
            counted[0] += 1
            if bar is not None:
                bar.set_postfix_str(f"{counted[0]} measurements", refresh=True)

        MEASURED_HOOKS.append(measured)
        stack.callback(MEASURED_HOOKS.remove, measured)

        def tick(name: str, t0: float) -> None:
            result["seconds"][name] = round(time.perf_counter() - t0, 3)
            log(f"{name}: {result['seconds'][name]:.1f} s ({counted[0]} measurements so far)")
            if bar is not None:
                bar.update(1)
            if checkpoint is not None:
                partial = finite({**result, "goals": evaluate_goals(result), "partial": True})
                checkpoint(check_result(partial, f"run() after {name}"))

        t0 = time.perf_counter()
        dtypes = (dtype, "float32") if on_gpu and dtype != "float32" else (dtype,)
        probe = probe_machine(device, size=sz["size"], dtypes=dtypes)
        result.update(probe=probe, hardware=probe["hardware"], versions=probe["versions"],
                      date=probe["hardware"]["date"], ceilings=ceilings(probe, dtype))  # fmt: skip
        tick("probe", t0)
        state = _Run(sz, device, dtype, result["ceilings"], log)
        for name in sections:
            t0 = time.perf_counter()
            result.update(SECTIONS[name](state))
            tick(name, t0)
    result["goals"] = evaluate_goals(result)
    result["load_average_1m_end"] = load_average()
    result["seconds"]["total"] = round(time.perf_counter() - t_start, 3)
    return check_result(finite(result), "run()")


def _run_engine_section(
    sz: dict[str, Any],
    model: Callable[..., TorchGPT2Model],
    copy_bw: float,
    mrt: float,
    reps: int,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """The fast path's goals: decode vs its weight products, a large model's bandwidth, generate vs
    transformers' static cache, graphs vs the concat cache. Each part records an error instead of
    ending the run, so one failure still leaves the others measured."""
    parts: dict[str, Callable[[], dict[str, Any]]] = {
        "decode_vs_products": lambda: run_engine(
            model(sz["engine_model"]), sz["engine_capacity"], sz["engine_context"], copy_bw, mrt, reps
        ),
        "generate_vs_hf_static": lambda: run_generate_vs_hf_static(
            model(sz["engine_generate"][0]), *sz["engine_generate"][1:], repeats=min(reps, 3)
        ),
        "graph_vs_concat": lambda: run_graph_vs_concat(
            model(sz["engine_concat"][0]), sz["engine_concat"][1], repeats=min(reps, 3)
        ),
        "big_decode": lambda: run_big_decode(
            model(sz["engine_big_model"]), sz["engine_context"], copy_bw, mrt, min(reps, 3)
        ),
    }
    out: dict[str, Any] = {}
    for name, fn in parts.items():
        t0 = time.perf_counter()
        try:
            out[name] = fn()
        except Exception as exc:  # noqa: BLE001 - recorded in the JSON, the run goes on
            out[name] = {"error": f"{type(exc).__name__}: {exc}"[:800]}
        log(f"engine/{name}: {time.perf_counter() - t0:.1f} s")
    return out


def write_result(path: str, result: dict[str, Any]) -> None:
    """Write ``result`` as strict JSON, atomically (``environment.write_atomically``: a reader never sees
    half a file, and a failed write leaves nothing behind), after checking the path
    (``environment.check_output_path``) and the result against the schema (``schema.check_result``):
    an invalid result is a ValueError, not a file."""
    path = check_output_path(path, "path")
    check_result(result, path)
    text = json.dumps(result, indent=1, allow_nan=False) + "\n"  # any error here comes before a file
    write_atomically(path, lambda tmp: _write_text(tmp, text))


def _write_text(path: str, text: str) -> None:
    with open(path, "x", encoding="utf-8") as f:
        f.write(text)


def summary(result: dict[str, Any]) -> str:
    """The goals of a result as lines of text: value, target, met."""
    lines = [f"kvtutor bench on {describe(result['hardware'])} ({result['size']} sizes, {result['dtype']})"]
    for g in result["goals"]:
        value = "-" if g["value"] is None else f"{g['value']:.3f}"
        target = "" if g["target"] is None else f" (target {g['target']})"
        met = {True: "met", False: "not met", None: "recorded"}[g["met"]]
        size = "" if g["at_goal_size"] else " [not at the goal's size]"
        lines.append(f"  {g['id']:<26} {value}{target}: {met}{size}; {g['note']}")
    return "\n".join(lines)


def _write_plots(result: dict[str, Any], directory: str) -> list[str]:
    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..plots import perf

    check_output_path(directory, "directory", directory=True)
    written = []
    for name, fn in perf.BENCH_FIGURES.items():
        fig = fn(result)
        if fig is None:
            continue
        path = os.path.join(directory, f"{name}.png")
        try:
            write_atomically(
                path, lambda tmp, fig=fig: fig.savefig(tmp, format="png", dpi=100, bbox_inches="tight")
            )
        finally:
            plt.close(fig)
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m kvtutor bench [--device cpu|cuda] [--quick] [--out results.json] [--plots DIR]``"""
    parser = argparse.ArgumentParser(
        prog="python -m kvtutor bench",
        description="Measure prefill and decode against this machine's own ceilings; write JSON and plots.",
    )
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: cuda if available")
    parser.add_argument(
        "--quick", action="store_true", help="small sizes (CI); KVTUTOR_BENCH_SIZE=tiny for tests"
    )
    parser.add_argument("--size", choices=["tiny", "quick", "full"], default=None, help="overrides --quick")
    parser.add_argument("--dtype", choices=list(BENCH_DTYPES), default=None,
                        help="default: bfloat16 on CUDA, float32 on a CPU")  # fmt: skip
    parser.add_argument(
        "--sections", default=None, help="comma-separated sections, or all (engine on a CPU too)"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads on a CPU (default: torch's)")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument("--plots", default=None, help="write PNG figures into this directory")
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:  # a missing extra stops the run here, before anything is measured
        import torch

        if args.plots is not None:
            import matplotlib  # noqa: F401
    except ModuleNotFoundError as exc:
        error = missing_extra(exc, "--plots" if exc.name == "matplotlib" else "the benchmark")
        if error is None:
            raise
        parser.exit(2, f"{parser.prog}: error: {error}\n")

    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: CUDA is not available on this machine")
    try:  # where the run will write, before anything is measured ('' too is refused here)
        if args.out is not None:
            check_output_path(args.out, "--out")
        if args.plots is not None:
            check_output_path(args.plots, "--plots", directory=True)
    except ValueError as exc:
        parser.error(str(exc))
    threads = torch.get_num_threads()
    if args.threads is not None:
        if not 1 <= args.threads <= 4096:
            parser.error(f"--threads: expected 1 to 4096, got {args.threads}")
        torch.set_num_threads(args.threads)
    try:
        size = args.size or (bench_size(True, args.device or "cpu") if args.quick else None)
        sections = None if args.sections is None else args.sections.split(",")  # '' is refused
        log = _log_line  # a line per section on stderr (beside the bar on a terminal)
        save = None if args.out is None else (lambda partial: write_result(args.out, partial))
        result = run(args.device, size, None, args.dtype, sections, log=log, checkpoint=save)
    except ValueError as exc:
        parser.error(str(exc))
    finally:
        torch.set_num_threads(threads)
    result["command"] = "python -m kvtutor bench " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.out is not None:
        write_result(args.out, result)
    if args.plots is not None:
        for path in _write_plots(result, args.plots):
            print(f"wrote {path}")
    print(summary(result))
    if args.out is not None:
        print(f"wrote {args.out}")
    return 0
