"""The timing harness and the machine probe: statistics, sizes, shapes of results (no timed assertions)."""

from __future__ import annotations

import json

import pytest

import kvtutor
from kvtutor.measure import costs, matmuls, timing

torch = pytest.importorskip("torch")


def test_measurement_statistics():
    m = timing.Measurement.from_times([5.0, 1.0, 3.0, 2.0, 4.0], calls_per_sample=10)
    assert (m.median_s, m.min_s, m.max_s, m.n, m.calls_per_sample) == (3.0, 1.0, 5.0, 5, 10)
    assert m.iqr_s == pytest.approx(2.0)  # quartiles 2 and 4
    assert m.times_s == (1.0, 2.0, 3.0, 4.0, 5.0)
    d = m.as_dict()
    assert set(d) == {"median_s", "iqr_s", "min_s", "max_s", "n", "calls_per_sample"}
    json.dumps(d)
    one = timing.Measurement.from_times([0.5])
    assert (one.median_s, one.iqr_s, one.n) == (0.5, 0.0, 1)


def test_measurement_needs_times():
    with pytest.raises(ValueError, match="^times_s:"):
        timing.Measurement.from_times([])


def test_bench_size(monkeypatch):
    monkeypatch.delenv("KVTUTOR_BENCH_SIZE", raising=False)
    assert timing.bench_size(device="cpu") == "quick"
    assert timing.bench_size(device="cuda") == "full"
    assert timing.bench_size(quick=True, device="cuda") == "quick"
    monkeypatch.setenv("KVTUTOR_BENCH_SIZE", "full")
    assert timing.bench_size(device="cpu") == "full"
    assert timing.bench_size(quick=True) == "quick"
    monkeypatch.setenv("KVTUTOR_BENCH_SIZE", "tiny")
    assert timing.bench_size(quick=True) == "tiny"
    assert timing.bench_size() == "tiny"
    monkeypatch.setenv("KVTUTOR_BENCH_SIZE", "huge")
    with pytest.raises(ValueError, match="^KVTUTOR_BENCH_SIZE:"):
        timing.bench_size()


def test_time_fn_cpu_counts_calls_and_restores_threads():
    calls = []
    threads = torch.get_num_threads()
    m = timing.time_fn(
        lambda: calls.append(1), "cpu", warmup=2, min_repeats=4, min_run_time=0.0, num_threads=1
    )
    assert m.n >= 4
    assert len(calls) >= 2 + 4 * m.calls_per_sample
    assert m.calls_per_sample > 1  # a call this short is grouped into samples of about 1 ms
    assert 0 < m.min_s <= m.median_s <= m.max_s
    assert m.iqr_s >= 0
    assert torch.get_num_threads() == threads


def test_time_fn_slow_call_is_one_per_sample():
    x = torch.randn(256, 256)
    m = timing.time_fn(lambda: [x @ x for _ in range(20)], "cpu", warmup=1, min_repeats=3, min_run_time=0.0)
    assert m.n >= 3 and m.calls_per_sample >= 1


@pytest.mark.parametrize(
    "kwargs, exc, prefix",
    [
        ({"fn": 3}, TypeError, "fn:"),
        ({"device": "tpu"}, ValueError, "device:"),
        ({"min_repeats": 0}, ValueError, "min_repeats:"),
        ({"warmup": -1}, ValueError, "warmup:"),
        ({"min_repeats": 5, "max_repeats": 2}, ValueError, "max_repeats:"),
        ({"num_threads": 0}, ValueError, "num_threads:"),
    ],
)
def test_time_fn_errors(kwargs, exc, prefix):
    args = {"fn": lambda: None, "device": "cpu", **kwargs}
    fn, device = args.pop("fn"), args.pop("device")
    with pytest.raises(exc) as info:
        timing.time_fn(fn, device, **args)
    assert str(info.value).startswith(prefix)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error when there is no GPU")
def test_cuda_without_gpu_is_a_clear_error():
    with pytest.raises(ValueError, match="^device:"):
        timing.time_fn(lambda: None, "cuda")


def test_gemv_copy_and_matmul_results():
    g = timing.measure_gemv_bandwidth(512, "cpu", min_run_time=0.0)
    assert g["matrix_bytes"] == 512 * 512 * 4 and g["bytes_per_s"] > 0 and g["dtype"] == "float32"
    c = timing.measure_copy_bandwidth(1 << 20, "cpu", min_run_time=0.0)
    assert c["buffer_bytes"] == 1 << 20 and c["bytes_per_s"] > 0
    m = timing.measure_matmul_flops(64, 32, 16, "cpu", "float32", min_run_time=0.0)
    assert m["flops"] == 2 * 64 * 32 * 16 and m["flops_per_s"] > 0
    with pytest.raises(ValueError, match="^dtype:"):
        timing.measure_matmul_flops(4, 4, 4, "cpu", "int4")


def test_model_matmul_shapes_match_the_cost_model():
    cfg = kvtutor.GPT2Config(vocab_size=100, d_model=32, n_heads=4, n_layers=3, max_seq_len=64, n_kv_heads=2)
    shapes = matmuls.model_matmul_shapes(cfg, 16)
    flops = sum(2 * m * k * n * s["count"] for s in shapes for m, k, n in [s["shape"]])
    c = costs.prefill_cost(cfg, 16)
    assert flops == c.matmul_flops + c.lm_head_flops
    r = matmuls.measure_model_matmuls(cfg, 16, "cpu", min_run_time=0.0)
    assert r["flops"] == flops and r["flops_per_s"] > 0 and len(r["shapes"]) == 5
    # each shape the faster library: the whole no slower than either library alone
    alone = [r[k] for k in ("blas_flops_per_s", "onednn_flops_per_s") if k in r]
    assert alone and r["flops_per_s"] >= max(alone) * (1 - 1e-9)
    assert all(s["library"] in ("blas", "onednn") and s["library"] in s["by_library"] for s in r["shapes"])


def test_probe_machine_tiny():
    p = timing.probe_machine("cpu", size="tiny")
    assert set(p) == {"hardware", "versions", "size", "gemv", "copy", "matmul"}
    hw = p["hardware"]
    assert hw["cpu"] and hw["torch_threads"] >= 1 and hw["gpu"] is None and hw["date"].endswith("Z")
    assert (
        p["versions"]["torch"] == torch.__version__.split("+")[0]
        or p["versions"]["torch"] == torch.__version__
    )
    assert p["gemv"]["matrix_bytes"] == 1024 * 1024 * 4
    assert p["matmul"]["float32"]["shape"] == [256, 256, 256]
    json.dumps(p)
    assert hw["cpu"] in timing.describe(hw) and hw["date"][:10] in timing.describe(hw)


def test_probe_machine_rejects_a_bad_size():
    with pytest.raises(ValueError, match="^size:"):
        timing.probe_machine("cpu", size="medium")


def test_count_ops_counts_operators_not_views():
    x = torch.ones(4, 4)
    counts = timing.count_ops(lambda: (x + 1).t()[1:] * 2)
    assert counts == {"add": 1, "mul": 1}  # the transpose and the slice are views: no work
    with pytest.raises(TypeError, match="^fn:"):
        timing.count_ops(None)


def test_count_ops_can_count_every_matrix_product_as_one_kind():
    """Which library runs a CPU product is measured per machine; how many products run is not."""
    w, v = torch.ones(4, 4), torch.ones(4)
    step = lambda: (w @ v, torch.addmv(v, w, v), w @ w)  # noqa: E731
    assert timing.count_ops(step) == {"addmv": 1, "mm": 1, "mv": 1}
    assert timing.count_ops(step, merge_products=True) == {"matrix products": 3}
    with pytest.raises(TypeError, match="^merge_products:"):
        timing.count_ops(step, merge_products="yes")


def test_dtypes_come_from_the_registry_and_the_load_average_is_public():
    m = timing.measure_matmul_flops(8, 8, 8, "cpu", "fp32", min_run_time=0.0)
    assert m["dtype"] == "float32"  # an alias of validate.DTYPES, named canonically
    load = timing.load_average()
    assert load is None or (isinstance(load, float) and load >= 0)


def test_hardware_info_names_the_cpus_vector_instructions(monkeypatch, tmp_path):
    pytest.importorskip("torch")
    info = timing.hardware_info("cpu")
    assert set(info["cpu_flags"]) <= set(timing.VECTOR_FLAGS) and info["cpu_capability"]
    fake = tmp_path / "cpuinfo"
    fake.write_text("processor : 0\nflags : fpu avx2 sse4_2 avx512f amx_int8 vmx\n", encoding="utf-8")
    real_open = open
    monkeypatch.setattr(
        "builtins.open", lambda path, *a, **k: real_open(fake if path == "/proc/cpuinfo" else path, *a, **k)
    )
    assert timing.cpu_flags() == ["sse4_2", "avx2", "avx512f", "amx_int8"]  # VECTOR_FLAGS' order
    monkeypatch.setattr("builtins.open", lambda *a, **k: (_ for _ in ()).throw(OSError("none")))
    assert timing.cpu_flags() == []
