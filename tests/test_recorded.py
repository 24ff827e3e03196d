"""The recorded runs shipped in the package: they load from the package (no path relative to a
notebook), say where they were measured, and the book's hand checks hold on them."""

from __future__ import annotations

import pytest

from kvtutor import ModelConfig, costs, recorded


def test_current_and_earlier_cpu_runs_load_with_their_hardware():
    current = recorded.cpu_bench()
    xeon = recorded.cpu_bench("xeon-2026-11-29")
    for run in (current, xeon):
        assert run["device"] == "cpu" and run["size"] == "full" and run["hardware"]["cpu"]
        assert {g["id"] for g in run["goals"]} >= {"cpu_decode_bandwidth", "prefill_matmul"}
    assert "Xeon" in xeon["hardware"]["cpu"] and xeon["date"].startswith("2026-11-29")
    with pytest.raises(ValueError, match=r"^which: expected 'current' or one of"):
        recorded.cpu_bench("epyc")


def test_the_ridge_batch_hand_check_on_the_xeon_recording():
    """ridge batch 29.96 at context 32 (GPT-2 small, fp32) from that run's own ceilings."""
    run = recorded.cpu_bench("xeon-2026-11-29")
    ds = run["decode_sweep"]
    cfg = ModelConfig(**{k: v for k, v in ds["config"].items() if k != "n_params"})
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
