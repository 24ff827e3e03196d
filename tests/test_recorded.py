"""The recorded runs shipped in the package: they load from the package (no path relative to a
notebook), say where they were measured, and the book's hand checks hold on them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import kvtutor
from kvtutor import GPT2Config
from kvtutor.measure import costs, recorded, schema

RUNS = Path(kvtutor.__file__).parent / recorded.RUNS
BENCH_FILES = sorted(RUNS.rglob("bench-*.json"))


def test_current_and_earlier_cpu_runs_load_with_their_hardware():
    current = recorded.cpu_bench()
    xeon = recorded.cpu_bench("xeon-2026-11-29")
    for run in (current, xeon):
        assert run["device"] == "cpu" and run["size"] == "full" and run["hardware"]["cpu"]
        assert {g["id"] for g in run["goals"]} >= {"cpu_decode_bandwidth", "prefill_matmul"}
    assert "Xeon" in xeon["hardware"]["cpu"] and xeon["date"].startswith("2026-11-29")
    with pytest.raises(ValueError, match=r"^which: expected 'current' or one of"):
        recorded.cpu_bench("epyc")


def test_the_read_rate_run_holds_the_three_floors_and_the_product_it_chose():
    """The later AMD EPYC run: the decode step, its weight products, BLAS's GEMV and the plain read
    rate in the same rounds; which product of one row it ran, and the rates that chose it."""
    run = recorded.cpu_bench("epyc-2026-12-04")
    assert run["hardware"]["cpu"] == "AMD EPYC" and run["date"].startswith("2026-12-04")
    bw = run["decode_bandwidth"]
    assert len(bw["rounds"]) == 5 and all(r["read_bytes_per_s"] > 0 for r in bw["rounds"])
    assert bw["one_row_product"] in ("blas", "onednn")
    assert bw["one_row_product"] == max(bw["one_row_products"], key=bw["one_row_products"].get)
    assert {"prefill_vs_matmul", "generate_vs_transformers"} <= set(run)


def test_the_ridge_batch_hand_check_on_the_xeon_recording():
    """ridge batch 29.96 at context 32 (GPT-2 small, fp32) from that run's own ceilings."""
    run = recorded.cpu_bench("xeon-2026-11-29")
    ds = run["decode_sweep"]
    cfg = GPT2Config(**{k: v for k, v in ds["config"].items() if k != "n_params"})
    ceil = run["ceilings"]
    ridge = costs.ridge_batch(cfg, 32, ceil["peak_flops"], ceil["bandwidth"], "float32")
    assert ridge == pytest.approx(29.96, abs=0.005) == ds["predicted_ridge_batch"]


def test_h200_run_is_labelled_with_its_commit_and_gpu():
    run = recorded.h200_run()
    assert (run["commit"], run["date"]) == ("6d8bdd6", "2026-11-30")
    assert run["bench"]["hardware"]["gpu"] == "NVIDIA H200" and run["anchors"]["device"] == "NVIDIA H200"
    assert "aten::addmm" in run["kernels"] and "2 failed" in run["tests_log"]
    assert recorded.run_path(f"{run['folder']}/gpu_anchors.py.txt").is_file()


def test_run_path_refuses_paths_outside_the_runs():
    for bad in ("", "/etc/passwd", "../configs/gpt2.json"):
        with pytest.raises(ValueError, match=r"^name: expected a file name"):
            recorded.run_path(bad)


# ---------------------------------------------------------------- the bench schema on the recorded files


def test_there_are_recorded_bench_files():
    names = {p.relative_to(RUNS).as_posix() for p in BENCH_FILES}
    assert {
        "bench-cpu.json",
        "bench-cpu-xeon-2026-11-29.json",
        "bench-cpu-epyc-2026-12-04.json",
        "bench-cpu-epyc-2026-11-30.json",
        "h200-2026-11-30/bench-cuda.json",
    } <= names


@pytest.mark.parametrize("path", BENCH_FILES, ids=lambda p: p.relative_to(RUNS).as_posix())
def test_every_recorded_bench_file_follows_the_schema(path):
    text = path.read_text(encoding="utf-8")
    result = schema.load_result(path)
    assert result["schema"] in schema.READABLE_VERSIONS  # 2 until re-recorded with version 3
    assert result == json.loads(text)  # loaded as it is: the checker changes nothing
    assert set(result) <= set(schema.TOP_LEVEL)


def _corrupt(tmp_path, change) -> Path:
    result = json.loads((RUNS / "bench-cpu.json").read_text(encoding="utf-8"))
    change(result)
    path = tmp_path / "bad-run.json"
    path.write_text(json.dumps(result), encoding="utf-8")
    return path


def _set(*keys_and_value):
    *keys, last, value = keys_and_value

    def change(result):
        obj = result
        for k in keys:
            obj = obj[k]
        obj[last] = value

    return change


CORRUPTIONS = [
    (lambda r: r.pop("ceilings"), r"missing key 'ceilings' \(peak FLOP/s"),
    (lambda r: r["decode_sweep"].pop("points"), r"missing key 'decode_sweep\.points'"),
    (_set("schema", 1), r"key 'schema': expected a schema version in \[2, 3\], got 1"),
    (_set("schema", "2"), r"key 'schema': expected a schema version in \[2, 3\], got '2'"),
    (lambda r: r.pop("schema"), r"missing key 'schema'"),
    (_set("dtype", 32), r"key 'dtype': expected string, got integer"),
    (_set("goals", {}), r"key 'goals': expected array, got object"),
    (_set("ceilings", "peak_flops", None), r"key 'ceilings\.peak_flops': expected number, got null"),
    (_set("decode_sweep", "points", 2, "batch_size", "4"),
     r"key 'decode_sweep\.points\[2\]\.batch_size': expected integer, got string"),
    (_set("goals", 0, "met", "yes"), r"key 'goals\[0\]\.met': expected boolean or null, got string"),
    (_set("preallocated_vs_concat", "points", 0, "identical_tokens", 1),
     r"key 'preallocated_vs_concat\.points\[0\]\.identical_tokens': expected boolean, got integer"),
    (_set("hardware", "torch_threads", True),
     r"key 'hardware\.torch_threads': expected integer, got boolean"),
    (_set("prefil_sweep", {}), r"unknown key 'prefil_sweep'"),
    # an object's own keys: what the plots and the goals read
    (lambda r: r["decode_sweep"]["points"][0]["time"].pop("median_s"),
     r"missing key 'decode_sweep\.points\[0\]\.time\.median_s' \(the median seconds per call\)"),
    (lambda r: r["preallocated_vs_concat"]["points"][1]["concat"].pop("time"),
     r"missing key 'preallocated_vs_concat\.points\[1\]\.concat\.time'"),
    (_set("decode_bandwidth", "time", "median_s", "fast"),
     r"key 'decode_bandwidth\.time\.median_s': expected number, got string"),
    (_set("probe", "matmul", "float32", "flops_per_s", None),
     r"key 'probe\.matmul\.float32\.flops_per_s': expected number, got null"),
    (_set("probe", "gemv", "bytes_per_s", -1.0), r"key 'probe\.gemv\.bytes_per_s': expected a number > 0"),
    (_set("ceilings", "peak_flops", 0),
     r"key 'ceilings\.peak_flops': expected a number > 0 \(square-matmul FLOP/s\), got 0"),
]  # fmt: skip


@pytest.mark.parametrize(("change", "message"), CORRUPTIONS)
def test_a_corrupted_result_is_refused_naming_the_file_and_the_key(tmp_path, change, message):
    path = _corrupt(tmp_path, change)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}: {message}"):
        schema.load_result(path)


def test_a_file_that_is_not_strict_json_is_refused(tmp_path):
    path = tmp_path / "nan.json"
    name = re.escape(str(path))
    path.write_text('{"schema": 2, "x": NaN}', encoding="utf-8")
    with pytest.raises(ValueError, match=rf"^{name}: expected strict JSON, got the non-finite number NaN"):
        schema.load_result(path)
    path.write_text('{"schema": 2,', encoding="utf-8")
    with pytest.raises(ValueError, match=rf"^{name}: expected a JSON file, got invalid JSON"):
        schema.load_result(path)
    path.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(
        ValueError, match=rf"^{path}: expected a benchmark result \(a JSON object\), got array"
    ):
        schema.load_result(path)


def test_check_result_names_where_the_result_came_from():
    with pytest.raises(ValueError, match=r"^run\(\): missing key 'schema'"):
        schema.check_result({}, "run()")
    good = recorded.cpu_bench()
    assert schema.check_result(good) is good


def test_check_result_refuses_a_non_finite_number_in_memory():
    result = recorded.cpu_bench()
    broken = {**result, "ceilings": {**result["ceilings"], "bandwidth": float("inf")}}
    with pytest.raises(
        ValueError,
        match=r"^run\(\): key 'ceilings\.bandwidth': expected number, got the non-finite number inf",
    ):
        schema.check_result(broken, "run()")
