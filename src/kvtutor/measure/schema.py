"""The benchmark result's schema, written down: what ``python -m kvtutor bench --out`` writes and
``kvtutor.measure.recorded`` ships, as data (``TOP_LEVEL``, ``SECTIONS``, ``POINTS``, ``GOAL``) plus the
checker that every write and every load goes through (``check_result``, ``load_result``).

A result is one JSON object. ``"schema"`` holds its version (``SCHEMA_VERSION``; version 1 named
the preallocated cache "static"; version 3 holds prefill against the faster of BLAS's and oneDNN's
matmul, where version 2 held it against BLAS's alone, and adds the ``bf16`` and ``batch_sweep``
sections; this code reads 2 and 3). Then come what the run measured on
(device, size, dtype, the sizes it used, the machine's probe, hardware, versions, date and
ceilings), one object per section it ran, and the goals. Each
key below says which JSON types its value may take (``"number"`` includes integers; a number that
was inf or nan is written as null) and whether it must be there; an object may hold more keys than
listed, except the top level, which holds only the keys listed. Sections with ``"points"`` hold a
list of objects, each with the keys in ``POINTS``; a key whose value is an object may list that
object's own keys (``Key.keys``: a timing's ``median_s``, for one). A number is finite (``1e999``
is refused, not read as infinity), and a key marked ``positive`` holds a number > 0.

``read_json`` is the one reader of JSON text for the recorded files: strict JSON in UTF-8, with no
non-finite numbers, no integer longer than ``MAX_INT_DIGITS`` digits, no key twice in one object
and no nesting deeper than ``MAX_DEPTH``; anything else is a ValueError naming the file.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any

__all__ = [
    "SCHEMA_VERSION",
    "READABLE_VERSIONS",
    "Key",
    "TOP_LEVEL",
    "SECTIONS",
    "POINTS",
    "BATCH_SWEEP",
    "BATCH_POINT",
    "GOAL",
    "check_result",
    "load_result",
    "read_json",
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
]

#: the version this code writes
SCHEMA_VERSION = 3
#: the versions this code reads
READABLE_VERSIONS = (2, 3)


@dataclass(frozen=True)
class Key:
    """One key of a JSON object: the JSON types its value may take, what it holds, whether it
    must be there, whether its number must be > 0, and (an object) the keys that object holds."""

    types: tuple[str, ...]
    doc: str
    required: bool = True
    positive: bool = False
    keys: dict[str, Key] | None = None


def _opt(types: tuple[str, ...], doc: str, keys: dict[str, Key] | None = None) -> Key:
    return Key(types, doc, required=False, keys=keys)


# the JSON types a key may take
_OBJ, _ARR, _STR, _BOOL = ("object",), ("array",), ("string",), ("boolean",)
_INT, _NUM = ("integer",), ("number",)
_NUM_NULL, _INT_NULL, _STR_NULL = ("number", "null"), ("integer", "null"), ("string", "null")

#: every key a result may hold at its top level
TOP_LEVEL: dict[str, Key] = {
    "schema": Key(_INT, "the schema version (SCHEMA_VERSION)"),
    "device": Key(_STR, "the device measured: 'cpu' or 'cuda'"),
    "size": Key(_STR, "the sizes used: 'tiny', 'quick' or 'full'"),
    "dtype": Key(_STR, "the dtype of the timed models and of the ceilings"),
    "sizes": Key(_OBJ, "what the size measures: bench.sizes(device, size)"),
    "seconds": Key(_OBJ, "wall seconds of each finished section, and 'total' once the run ends"),
    "probe": Key(_OBJ, "the machine's ceilings: timing.probe_machine"),
    "hardware": Key(_OBJ, "the machine: timing.hardware_info"),
    "versions": Key(_OBJ, "Python's and the packages' versions: timing.versions"),
    "date": Key(_STR, "when the probe ran, ISO 8601 UTC"),
    "ceilings": Key(_OBJ, "peak FLOP/s and bandwidth the goals divide by: bench.ceilings"),
    "goals": Key(_ARR, "one object per goal (GOAL): bench.evaluate_goals"),
    "prefill_sweep": _opt(_OBJ, "section rooflines: bench.run_prefill_sweep + add_predictions"),
    "decode_sweep": _opt(_OBJ, "section rooflines: bench.run_decode_sweep + add_predictions"),
    "decode_bandwidth": _opt(_OBJ, "section bandwidth: bench.run_decode_bandwidth"),
    "prefill_vs_matmul": _opt(_OBJ, "section prefill_goal: bench.run_prefill_vs_matmul"),
    "generate_vs_transformers": _opt(_OBJ, "section generate: bench.run_generate_vs_transformers"),
    "preallocated_vs_concat": _opt(_OBJ, "section concat: bench.run_preallocated_vs_concat"),
    "cache_vs_recompute": _opt(_OBJ, "section recompute: bench.run_cache_vs_recompute"),
    "bf16": _opt(_OBJ, "section bf16: bench.run_bf16_vs_fp32"),
    "batch_sweep": _opt(_OBJ, "section batches: bench.run_batch_sweep"),
    "engine": _opt(_OBJ, "section engine (CUDA's by default): the fast path's parts"),
    "load_average_1m_end": _opt(_NUM_NULL, "the 1-minute load average when the run ended"),
    "command": _opt(_STR, "the command line that wrote the file"),
    "partial": _opt(_BOOL, "true in a file written after a section, before the run ended"),
}

_CONFIG = Key(_OBJ, "the model's sizes and n_params")
_DTYPE = Key(_STR, "the model's dtype")
#: the keys of a timing (``timing.Measurement.as_dict``)
TIME: dict[str, Key] = {
    "median_s": Key(_NUM, "the median seconds per call", positive=True),
    "iqr_s": Key(_NUM, "the interquartile range of the samples, seconds"),
    "min_s": Key(_NUM, "the fastest sample, seconds"),
    "max_s": Key(_NUM, "the slowest sample, seconds"),
    "n": Key(_INT, "the number of samples"),
    "calls_per_sample": Key(_INT, "calls timed together in one sample"),
}
_TIME = Key(
    _OBJ, "a timing.Measurement as a dict: median_s, iqr_s, min_s, max_s, n, calls_per_sample", keys=TIME
)
_RATE = Key(_NUM, "bytes (or FLOPs) per second", positive=True)
_TIMED = {"time": _TIME, "tokens_per_s": Key(_NUM, "tokens per second")}

#: the keys of one pass timed in bf16 and float32 (``bench.run_bf16_vs_fp32``)
_PAIR = {
    "tokens_per_s": Key(_OBJ, "dtype -> tokens per second, the median round's"),
    "speed_ratio": Key(_NUM, "bf16 tokens/s / float32 tokens/s, the median of the rounds'", positive=True),
    "rounds": Key(_ARR, "each round's ratio"),
}

#: the keys of the objects at the top level, by the top-level key that holds them
SECTIONS: dict[str, dict[str, Key]] = {
    "sizes": {
        "size": Key(_STR, "tiny, quick or full"),
        "min_run_time": Key(_NUM, "seconds each measurement runs at least"),
        "repeats": Key(_INT, "samples or alternating rounds per measurement"),
    },
    "probe": {
        "hardware": Key(_OBJ, "timing.hardware_info"),
        "versions": Key(_OBJ, "timing.versions"),
        "size": Key(_STR, "the probe's size"),
        "gemv": Key(_OBJ, "timing.measure_gemv_bandwidth", keys={"bytes_per_s": _RATE, "time": _TIME}),
        "copy": Key(_OBJ, "timing.measure_copy_bandwidth", keys={"bytes_per_s": _RATE, "time": _TIME}),
        "matmul": Key(_OBJ, "dtype name -> timing.measure_matmul_flops of a square matmul"),
    },
    "hardware": {
        "cpu": Key(_STR, "the CPU model"),
        "cpu_count": Key(_INT_NULL, "os.cpu_count()"),
        "torch_threads": Key(_INT, "torch.get_num_threads() during the run"),
        "device": Key(_STR, "the device measured"),
        "gpu": Key(_STR_NULL, "the GPU's name, null on a CPU run"),
        "date": Key(_STR, "ISO 8601 UTC"),
    },
    "versions": {
        "python": Key(_STR, "Python's version"),
        "torch": Key(_STR_NULL, "torch's version"),
    },
    "ceilings": {
        "dtype": Key(_STR, "the dtype of the peak"),
        "peak_flops": Key(_NUM, "square-matmul FLOP/s", positive=True),
        "bandwidth": Key(_NUM, "bytes/s: the GEMV's on a CPU, the copy's on CUDA", positive=True),
        "bandwidth_source": Key(_STR, "'gemv' or 'copy'"),
        "gemv_bandwidth": Key(_NUM, "the probe's GEMV read bytes/s", positive=True),
        "copy_bandwidth": Key(_NUM, "the probe's copy bytes/s (read + written)", positive=True),
    },
    "prefill_sweep": {"config": _CONFIG, "dtype": _DTYPE, "points": Key(_ARR, "one per prompt length")},
    "decode_sweep": {
        "config": _CONFIG,
        "dtype": _DTYPE,
        "context_len": Key(_INT, "S of every step"),
        "fast_path": Key(_BOOL, "whether the CUDA-graph step was timed"),
        "points": Key(_ARR, "one per batch size"),
        "measured_compute_bound_batch": Key(_NUM_NULL, "the fitted knee, null when not resolved"),
        "compute_bound_reached": Key(_BOOL, "whether the fit resolved a knee"),
        "per_token_time_ratio": Key(_NUM, "per-token time at the largest batch / at the smallest"),
        "knee_fit": _opt(_OBJ, "knee.KneeFit as a dict"),
        "predicted_ridge_batch": _opt(_NUM_NULL, "costs.ridge_batch with the ceilings"),
        "predicted_compute_bound_batch": _opt(_INT_NULL, "costs.compute_bound_batch"),
    },
    "decode_bandwidth": {
        "config": _CONFIG,
        "dtype": _DTYPE,
        "context_len": Key(_INT, "S of the step"),
        "fast_path": Key(_BOOL, "whether the CUDA-graph step was timed"),
        "weight_bytes": Key(_INT, "bytes of weights a step reads"),
        "bytes": Key(_INT, "all bytes a step moves (cost model)"),
        "time": _TIME,
        "weight_bytes_per_s": Key(_NUM, "weight bytes / step time"),
        "bytes_per_s": Key(_NUM, "bytes / step time"),
        "ratio_to_gemv": Key(_NUM, "against a GEMV timed beside it (else the probe's)"),
        "ratio_to_probe_gemv": Key(_NUM, "against the probe's GEMV"),
        "ratio_to_copy": Key(_NUM, "against the probe's copy bandwidth"),
        "read": _opt(_OBJ, "the median round's plain read (timing.read_probe)", keys={"bytes_per_s": _RATE}),
        "ratio_to_read": _opt(_NUM, "weight bytes / step time against the plain read rate"),
        "gemv_to_read": _opt(_NUM, "the GEMV's read rate against the plain read rate"),
        "read_attempts": _opt(_OBJ, "bench.run_read_attempts: bytes/s of each way to read the matrix"),
        "one_row_product": _opt(_STR_NULL, "the CPU's product of one row: 'blas' or 'onednn' (null on CUDA)"),
        "one_row_products": _opt(_OBJ, "torch_weights.one_row_rates: bytes/s of each, which chose"),
        "tokens_per_s": _opt(_NUM, "1 / the step's median time"),
        "bf16": _opt(_OBJ, "the same step, bf16 weights, on the CPU", keys={"tokens_per_s": _RATE}),
    },
    "prefill_vs_matmul": {
        "config": _CONFIG,
        "dtype": _DTYPE,
        "n_tokens": Key(_INT, "T of the prefill"),
        "prefill": Key(_OBJ, "the median round's prefill point", keys={"time": _TIME, "flops_per_s": _RATE}),
        "matmul": Key(
            _OBJ,
            "the median round's same-shape matmuls, each shape the faster of BLAS's and oneDNN's "
            "(timing.model_matmul_probe; schema 2: BLAS's alone)",
            keys={
                "flops_per_s": _RATE,
                "blas_flops_per_s": _opt(_NUM, "BLAS's alone"),
                "onednn_flops_per_s": _opt(_NUM, "oneDNN's alone, packed weights"),
            },
        ),  # fmt: skip
        "ratio": Key(_NUM, "prefill FLOP/s / matmul FLOP/s"),
        "ratio_to_square_matmul": _opt(_NUM, "prefill FLOP/s / the ceilings' peak"),
        "products_used": _opt(_OBJ, "CPU: each matrix's product of its rows (bench.model_products)"),
    },
    "generate_vs_transformers": {
        "small": _opt(_OBJ, "the 'small' model's comparison, or {'skipped': reason}"),
        "gpt2-small": _opt(_OBJ, "GPT-2 small's comparison, or {'skipped': reason}"),
    },
    "preallocated_vs_concat": {
        "config": _CONFIG,
        "dtype": _DTYPE,
        "prompt_len": Key(_INT, "the prompt's tokens"),
        "points": Key(_ARR, "one per number of generated tokens"),
    },
    "cache_vs_recompute": {"config": _CONFIG, "dtype": _DTYPE, "points": Key(_ARR, "one per length")},
    "bf16": {
        "device": Key(_STR, "the device measured"),
        "decode": Key(_OBJ, "batch-1 decode, bf16 against float32", keys=_PAIR),
        "prefill": Key(_OBJ, "prefill, bf16 against float32", keys=_PAIR),
        "native_bf16": Key(_BOOL, "whether this CPU multiplies bf16 in hardware (timing.native_bf16)"),
        "slow": Key(_BOOL, "bf16 emulated, or slower than float32 in either pass"),
        "note": Key(_STR, "what the two ratios say"),
        "cpu_flags": _opt(_ARR, "the CPU's vector instructions (timing.cpu_flags)"),
        "cpu_capability": _opt(_STR, "torch's kernel level"),
        "products": _opt(_OBJ, "dtype -> bench.products_in_use: the products and their rates"),
        "compiled_one_row": _opt(
            _OBJ,
            "CPU: one bf16 row, oneDNN packed against Inductor's own GEMM "
            "(bench.run_compiled_one_row), or {'error': message}",
        ),
    },
    "batch_sweep": {
        "context_len": Key(_INT, "S of every step"),
        "batches": Key(_ARR, "the batch sizes, 1 first"),
        "bandwidth": Key(_NUM, "bytes/s of the roofline (the ceilings' bandwidth)", positive=True),
        "by_dtype": Key(_OBJ, "dtype -> {config, dtype, peak_flops, points, worst_ratio_to_b1}"),
    },
    "engine": {
        name: _opt(_OBJ, f"bench.{fn}, or {{'error': message}}")
        for name, fn in (
            ("decode_vs_products", "run_engine"),
            ("generate_vs_hf_static", "run_generate_vs_hf_static"),
            ("graph_vs_concat", "run_graph_vs_concat"),
            ("big_decode", "run_big_decode"),
        )
    },
}

_FLOPS = {
    "time": _TIME,
    "flops": Key(_INT, "FLOPs of the work (cost model)"),
    "bytes": Key(_INT, "bytes the work moves (cost model)"),
    "intensity": Key(_NUM_NULL, "FLOPs per byte"),
    "flops_per_s": Key(_NUM, "flops / median time"),
    "predicted_time_s": _opt(_NUM, "the roofline's time (add_predictions)"),
}

#: the keys of each point, by the section whose ``"points"`` hold them
POINTS: dict[str, dict[str, Key]] = {
    "prefill_sweep": {"n_tokens": Key(_INT, "T"), "batch_size": Key(_INT, "B"), **_FLOPS},
    "decode_sweep": {"batch_size": Key(_INT, "B"), **_FLOPS, "tokens_per_s": Key(_NUM, "B / step time")},
    "preallocated_vs_concat": {
        "n_new": Key(_INT, "tokens generated"),
        "preallocated": Key(_OBJ, "the preallocated cache's time and tokens/s", keys=_TIMED),
        "concat": Key(_OBJ, "the concat cache's time and tokens/s", keys=_TIMED),
        "identical_tokens": Key(_BOOL, "whether both generated the same tokens"),
        "speedup": Key(_NUM, "concat time / preallocated time"),
        "preallocated_write_bytes": Key(_INT, "K/V bytes written in place"),
        "concat_copy_bytes": Key(_INT, "K/V bytes concat copies"),
    },
    "cache_vs_recompute": {
        "seq_len": Key(_INT, "n"),
        "cached": Key(_OBJ, "a decode step's time, tokens/s and FLOPs", keys=_TIMED),
        "uncached": Key(_OBJ, "recomputing all n positions: time, tokens/s and FLOPs", keys=_TIMED),
        "speedup": Key(_NUM, "uncached time / cached time"),
        "flops_ratio": Key(_NUM, "uncached FLOPs / cached FLOPs"),
        "predicted_speedup": _opt(_NUM, "the roofline's ratio"),
    },
}

#: the keys of each dtype's sweep in ``batch_sweep.by_dtype``, and of each of its points
BATCH_SWEEP: dict[str, Key] = {
    "config": _CONFIG,
    "dtype": _DTYPE,
    "peak_flops": Key(_NUM, "the dtype's square-matmul FLOP/s (the roofline's peak)", positive=True),
    "points": Key(_ARR, "one per batch size"),
    "worst_ratio_to_b1": Key(_NUM, "the largest ratio_to_b1 for 1 < B <= 16"),
    "products": _opt(_OBJ, "CPU: the product of one row and of each batch's rows"),
}
BATCH_POINT: dict[str, Key] = {
    "batch_size": Key(_INT, "B"),
    "time_s": Key(_NUM, "the median round's step time", positive=True),
    "tokens_per_s": Key(_NUM, "B / time_s"),
    "ratio_to_b1": Key(_NUM, "the median of the rounds' t(B) / t(1)", positive=True),
    "predicted_time_s": Key(_NUM, "the roofline's step time", positive=True),
    "predicted_ratio_to_b1": Key(_NUM, "the roofline's t(B) / t(1)", positive=True),
}

#: the keys of each goal in ``"goals"``
GOAL: dict[str, Key] = {
    "id": Key(_STR, "the goal's id"),
    "goal": Key(_STR, "what it asks"),
    "value": Key(_NUM_NULL, "the measured ratio, null when not measured"),
    "target": Key(_NUM_NULL, "the target, null for a recorded number"),
    "met": Key(
        ("boolean", "null"), "value >= target (<= where at_most; and any extra condition); null without both"
    ),  # fmt: skip
    "at_most": _opt(_BOOL, "true where the target is a ceiling: met when value <= target"),
    "at_goal_size": Key(_BOOL, "whether the run used the goal's configuration"),
    "note": Key(_STR, "what the number is made of"),
}


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number" if math.isfinite(value) else f"the non-finite number {value}"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _fits(value: Any, types: tuple[str, ...]) -> bool:
    kind = _json_type(value)
    return kind in types or (kind == "integer" and "number" in types)


def _check_keys(obj: Any, keys: dict[str, Key], source: str, path: str) -> None:
    """Every required key of ``keys`` is in ``obj``, every listed key present has its types (a
    positive number > 0), and an object's own listed keys are checked the same way."""
    if not isinstance(obj, dict):
        raise ValueError(f"{source}: key {path!r}: expected an object, got {_json_type(obj)}")
    for name, key in keys.items():
        where = f"{path}.{name}" if path else name
        if name not in obj:
            if key.required:
                raise ValueError(f"{source}: missing key {where!r} ({key.doc})")
            continue
        value = obj[name]
        if not _fits(value, key.types):
            got = _json_type(value)
            raise ValueError(f"{source}: key {where!r}: expected {' or '.join(key.types)}, got {got}")
        if key.positive and _json_type(value) in ("integer", "number") and not value > 0:
            raise ValueError(f"{source}: key {where!r}: expected a number > 0 ({key.doc}), got {value!r}")
        if key.keys is not None and isinstance(value, dict):
            _check_keys(value, key.keys, source, where)


def check_result(result: Any, source: str = "result") -> dict[str, Any]:
    """``result`` itself when it follows the schema; else a ValueError that names ``source`` (a
    file, or what made the result) and the offending key, e.g. ``'decode_sweep.points[2].time'``."""
    if not isinstance(result, dict):
        raise ValueError(f"{source}: expected a benchmark result (a JSON object), got {_json_type(result)}")
    if "schema" not in result:
        raise ValueError(f"{source}: missing key 'schema' ({TOP_LEVEL['schema'].doc})")
    version = result["schema"]
    if _json_type(version) != "integer" or version not in READABLE_VERSIONS:
        raise ValueError(
            f"{source}: key 'schema': expected a schema version in {list(READABLE_VERSIONS)}, got {version!r}"
        )
    _check_keys(result, TOP_LEVEL, source, "")
    unknown = sorted(set(result) - set(TOP_LEVEL))
    if unknown:
        raise ValueError(
            f"{source}: unknown key {unknown[0]!r} (schema {version} has {', '.join(TOP_LEVEL)})"
        )
    for name, keys in SECTIONS.items():
        if name in result:
            _check_keys(result[name], keys, source, name)
    for dtype, peak in result["probe"]["matmul"].items():
        _check_keys(peak, {"flops_per_s": _RATE, "time": _TIME}, source, f"probe.matmul.{dtype}")
    for name, keys in POINTS.items():
        for i, p in enumerate(result.get(name, {}).get("points", [])):
            _check_keys(p, keys, source, f"{name}.points[{i}]")
    for dtype, sweep in result.get("batch_sweep", {}).get("by_dtype", {}).items():
        where = f"batch_sweep.by_dtype.{dtype}"
        _check_keys(sweep, BATCH_SWEEP, source, where)
        for i, p in enumerate(sweep["points"]):
            _check_keys(p, BATCH_POINT, source, f"{where}.points[{i}]")
    for i, goal in enumerate(result["goals"]):
        _check_keys(goal, GOAL, source, f"goals[{i}]")
    return result


def load_result(path: str | os.PathLike) -> dict[str, Any]:
    """A recorded benchmark JSON (e.g. ``src/kvtutor/data/runs/bench-cpu.json``, or a file ``--out``
    wrote), checked against the schema: a file that is not strict JSON (``read_json``) or does not
    follow the schema is a ValueError naming the file and the offending key."""
    name = os.fspath(path)
    with open(name, "rb") as f:
        data = f.read()
    return check_result(read_json(data, name), name)


#: the deepest nesting of objects and arrays ``read_json`` reads (a result is about 6 deep)
MAX_DEPTH = 32
#: the most digits of an integer ``read_json`` reads (a count of bytes or FLOPs has about 15)
MAX_INT_DIGITS = 30


def read_json(data: bytes | str, source: str) -> Any:
    """JSON text (bytes are decoded as UTF-8) -> its value, or a ValueError that names ``source``:
    text that is not UTF-8 or not JSON, NaN or Infinity or a number too large for a float
    (``1e999``), an integer of more than ``MAX_INT_DIGITS`` digits, a key given twice in one
    object, or nesting deeper than ``MAX_DEPTH``."""

    def refuse(what: str) -> Any:
        raise ValueError(f"{source}: expected strict JSON, got {what}")

    def number(text: str) -> float:
        value = float(text)
        return value if math.isfinite(value) else refuse(f"the number {text}, beyond a float's range")

    def integer(text: str) -> int:
        digits = len(text.lstrip("-"))
        return int(text) if digits <= MAX_INT_DIGITS else refuse(f"an integer of {digits} digits")

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj: dict[str, Any] = {}
        for key, value in pairs:
            if key in obj:
                refuse(f"the key {key!r} twice in one object")
            obj[key] = value
        return obj

    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{source}: expected UTF-8 text, got byte {data[exc.start]:#04x} at offset "
                             f"{exc.start}") from None  # fmt: skip
    try:
        value = json.loads(
            data,
            parse_constant=lambda c: refuse(f"the non-finite number {c}"),
            parse_float=number,
            parse_int=integer,
            object_pairs_hook=unique,
        )
    except json.JSONDecodeError as exc:
        raise ValueError(f"{source}: expected a JSON file, got invalid JSON ({exc})") from None
    except RecursionError:
        raise ValueError(f"{source}: expected strict JSON, got nesting deeper than {MAX_DEPTH}") from None
    _check_depth(value, source)
    return value


def _check_depth(value: Any, source: str) -> None:
    """A ValueError naming ``source`` if objects and arrays nest deeper than ``MAX_DEPTH``."""
    level, depth = [value], 0
    while level := [x for x in level if isinstance(x, (dict, list))]:
        depth += 1
        if depth > MAX_DEPTH:
            raise ValueError(f"{source}: expected strict JSON, got nesting deeper than {MAX_DEPTH}")
        level = [child for x in level for child in (x.values() if isinstance(x, dict) else x)]
