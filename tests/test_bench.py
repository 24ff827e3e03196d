"""``python -m kvtutor bench`` at tiny sizes: it runs, writes strict JSON with every section and the
goals, and writes the plots. Nothing here asserts on a time."""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys

import pytest

import kvtutor
from kvtutor.environment import env_choice

torch = pytest.importorskip("torch")
pytest.importorskip("kvtutor.models.torch_gpt2")
from kvtutor import bench  # noqa: E402
from kvtutor.bench import common  # noqa: E402
from kvtutor.measure import goals as bench_goals  # noqa: E402
from kvtutor.measure import timing  # noqa: E402
from kvtutor.plots import perf  # noqa: E402

SECTIONS = [
    "probe",
    "ceilings",
    "prefill_sweep",
    "decode_sweep",
    "decode_bandwidth",
    "prefill_vs_matmul",
    "generate_vs_transformers",
    "preallocated_vs_concat",
    "cache_vs_recompute",
    "bf16",
    "batch_sweep",
    "goals",
]
GOAL_IDS = {
    "cpu_decode_bandwidth",
    "cpu_decode_read_rate",
    "generate_speedup_small",
    "generate_speedup_gpt2-small",
    "prefill_matmul",
    "preallocated_vs_concat",
    "compute_bound_batch",
    "cpu_bf16_decode",
    "cpu_bf16_prefill",
    "batch_decode_float32",
} | ({"batch_decode_bfloat16"} if timing.native_bf16() else set())


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """One tiny run of the command line, in this process (one thread: CI machines are busy)."""
    out = tmp_path_factory.mktemp("bench")
    mp = pytest.MonkeyPatch()
    mp.setenv("KVTUTOR_BENCH_SIZE", "tiny")
    threads = torch.get_num_threads()
    try:
        rc = bench.main(["--quick", "--device", "cpu", "--threads", "1", "--out", str(out / "r.json"),
                         "--plots", str(out / "plots")])  # fmt: skip
    finally:
        mp.undo()
    assert torch.get_num_threads() == threads  # --threads does not leak out of main
    assert rc == 0
    text = (out / "r.json").read_text()
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}")), out


def test_a_fresh_run_follows_the_schema(recorded, tmp_path):
    r, out = recorded
    assert r["schema"] == bench.SCHEMA_VERSION and "partial" not in r
    assert bench.load_result(out / "r.json") == r  # load_result checks it against the schema
    broken = {k: v for k, v in r.items() if k != "ceilings"}
    with pytest.raises(ValueError, match=r"bad\.json: missing key 'ceilings'"):
        bench.write_result(str(tmp_path / "bad.json"), broken)  # refused before anything is written
    assert not (tmp_path / "bad.json").exists()


def test_json_has_every_section(recorded):
    r, _ = recorded
    assert r["size"] == "tiny" and r["device"] == "cpu" and r["dtype"] == "float32"
    for key in SECTIONS:
        assert key in r, key
    assert r["hardware"]["cpu"] and r["hardware"]["torch_threads"] == 1
    assert r["versions"]["torch"] and r["versions"]["kvtutor"] == kvtutor.__version__
    assert r["date"] == r["hardware"]["date"]
    assert r["command"].startswith("python -m kvtutor bench")
    assert r["ceilings"]["bandwidth_source"] == "gemv"
    assert r["seconds"]["total"] > 0


def test_sections_hold_the_numbers(recorded):
    r, _ = recorded
    tiny = bench.SIZES["cpu"]["tiny"]
    assert [p["n_tokens"] for p in r["prefill_sweep"]["points"]] == tiny["prefill_lengths"]
    assert [p["batch_size"] for p in r["decode_sweep"]["points"]] == tiny["decode_batches"]
    for p in r["prefill_sweep"]["points"] + r["decode_sweep"]["points"]:
        assert p["time"]["median_s"] > 0 and p["flops"] > 0 and p["intensity"] > 0
        assert p["flops_per_s"] == pytest.approx(p["flops"] / p["time"]["median_s"])
        assert p["predicted_time_s"] > 0
    ds = r["decode_sweep"]
    fit = ds["knee_fit"]  # the two-arm fit; its knee is the measured batch only when resolved
    assert ds["compute_bound_reached"] == fit["resolved"]
    assert ds["measured_compute_bound_batch"] == (fit["knee"] if fit["resolved"] else None)
    assert ds["predicted_compute_bound_batch"] is None or ds["predicted_compute_bound_batch"] >= 1
    bw = r["decode_bandwidth"]
    assert bw["weight_bytes"] == kvtutor.measure.costs.decode_weight_bytes(bench.MODELS["tiny"], 4)
    probe_ratio = bw["weight_bytes_per_s"] / r["ceilings"]["gemv_bandwidth"]
    assert bw["ratio_to_probe_gemv"] == pytest.approx(probe_ratio)
    # the goal's ratio pairs the step with a GEMV timed beside it: the median of alternating rounds
    assert bw["gemv"]["shape"] == [timing.PROBE_SIZES["cpu"]["tiny"]["gemv_n"]] * 2
    assert bw["ratio_to_gemv"] == pytest.approx(bw["weight_bytes_per_s"] / bw["gemv"]["bytes_per_s"])
    ratios = sorted(x["ratio"] for x in bw["rounds"])
    assert len(ratios) == max(tiny["repeats"], 5) and bw["ratio_to_gemv"] == ratios[(len(ratios) - 1) // 2]
    for x in bw["rounds"]:
        assert x["ratio"] == pytest.approx(x["weight_bytes_per_s"] / x["gemv_bytes_per_s"])
    # the ratio splits into the mat-vec products alone (against the GEMV) and the step against them
    assert bw["ratio_to_gemv"] == pytest.approx(bw["products"]["ratio"] * bw["ratio_to_products"])
    assert bw["products"]["bytes_per_s"] == pytest.approx(bw["products"]["ratio"] * bw["gemv"]["bytes_per_s"])
    assert 0 < bw["ratio_to_products"] and all(x["products_bytes_per_s"] > 0 for x in bw["rounds"])
    # the plain read rate (a sum over the GEMV's bytes), timed in the same rounds: the floor of both
    assert bw["read"]["bytes"] == bw["gemv"]["matrix_bytes"] and bw["read"]["bytes_per_s"] > 0
    # against the read rate: the median of the rounds' own ratios
    to_read = [x["weight_bytes_per_s"] / x["read_bytes_per_s"] for x in bw["rounds"]]
    assert [x["ratio_to_read"] for x in bw["rounds"]] == pytest.approx(to_read)
    assert bw["ratio_to_read"] == pytest.approx(statistics.median(to_read))
    gemv_to_read = [x["gemv_bytes_per_s"] / x["read_bytes_per_s"] for x in bw["rounds"]]
    assert bw["gemv_to_read"] == pytest.approx(statistics.median(gemv_to_read))
    assert all(x["read_bytes_per_s"] > 0 for x in bw["rounds"])
    tried = bw["read_attempts"]  # each way of reading the matrix, against the sum in the same run
    assert tried["matrix_bytes"] == bw["gemv"]["matrix_bytes"] and tried["sum"] > 0
    for name, ratio in tried["ratios_to_sum"].items():
        assert ratio == pytest.approx(tried[name] / tried["sum"]) and tried[name] > 0
    # which product of one row this CPU's decode steps run, and the rates that chose it
    from kvtutor.models import torch_weights

    assert bw["one_row_product"] == tried["one_row_product"] == torch_weights.one_row_product()
    assert set(bw["one_row_products"]) <= set(torch_weights.ONE_ROW_PRODUCTS)
    rates = bw["one_row_products"]
    forced = env_choice("KVTUTOR_DECODE_PRODUCT", ("auto", *torch_weights.ONE_ROW_PRODUCTS), "auto")
    if torch_weights.onednn_available() and forced == "auto":
        assert bw["one_row_product"] == max(rates, key=rates.get)  # the rates that chose, not new ones
    assert bw["tokens_per_s"] == pytest.approx(1 / bw["time"]["median_s"])
    assert bw["bf16"]["weight_bytes"] * 2 == bw["weight_bytes"] and bw["bf16"]["tokens_per_s"] > 0
    if torch_weights.onednn_available():
        assert {"onednn_one_row", "onednn_bf16_one_row"} <= set(tried["ratios_to_sum"])
    pm = r["prefill_vs_matmul"]
    ratios = sorted(x["ratio"] for x in pm["rounds"])
    assert len(ratios) == tiny["repeats"] and pm["ratio"] == ratios[(len(ratios) - 1) // 2]
    assert pm["ratio"] == pytest.approx(pm["prefill"]["flops_per_s"] / pm["matmul"]["flops_per_s"])
    assert pm["ratio"] == pytest.approx(pm["products"]["ratio"] * pm["ratio_to_products"])
    assert pm["products"]["flops_per_s"] == pytest.approx(
        pm["products"]["ratio"] * pm["matmul"]["flops_per_s"]
    )
    assert all(x["products_flops_per_s"] > 0 for x in pm["rounds"])
    for key in ("small", "gpt2-small"):
        g = r["generate_vs_transformers"][key]
        assert g["identical_tokens"] is True  # same weights, greedy: the same tokens
        assert g["speedup"] > 0 and len(g["rounds"]) == tiny["repeats"]
        assert g["speedup"] == sorted(g["rounds"])[(len(g["rounds"]) - 1) // 2]
        assert g["speedup"] == pytest.approx(
            g["transformers"]["time"]["median_s"] / g["ours"]["time"]["median_s"]
        )
    for p in r["preallocated_vs_concat"]["points"]:
        assert p["identical_tokens"] is True
        assert p["concat_copy_bytes"] > 0
    pts = r["cache_vs_recompute"]["points"]
    assert [p["seq_len"] for p in pts] == tiny["recompute_lengths"]
    assert all(p["flops_ratio"] > 1 and p["predicted_speedup"] > 0 for p in pts)
    ratios = [p["flops_ratio"] for p in pts]
    assert ratios == sorted(ratios)  # recompute falls further behind as the sequence grows


def test_goals_are_recorded_with_met_or_not(recorded):
    r, _ = recorded
    goals = {g["id"]: g for g in r["goals"]}
    assert set(goals) == GOAL_IDS
    for g in goals.values():
        assert g["met"] in (True, False, None)
        if g["id"] == "compute_bound_batch" and g["value"] is None:  # no clean knee in this sweep
            continue
        assert isinstance(g["value"], float) and math.isfinite(g["value"])
        if g["target"] is not None:
            reached = g["value"] <= g["target"] if g.get("at_most") else g["value"] >= g["target"]
            extra = "identical tokens: False" not in g["note"] and "emulated" not in g["note"]
            assert g["met"] == (reached and extra)
    # tiny sizes are not the goals' configurations, and the JSON says so
    assert not goals["cpu_decode_bandwidth"]["at_goal_size"]
    assert not goals["prefill_matmul"]["at_goal_size"]


def test_the_cpu_engine_sections_write_their_ratios(recorded):
    """prefill against the faster library per shape; bf16 against float32 (decode and prefill, the
    median of the rounds' own ratios, marked slow where bf16 is emulated or slower); decode steps of
    B rows against one row's, measured beside the roofline."""
    r, _ = recorded
    tiny = bench.SIZES["cpu"]["tiny"]
    mm = r["prefill_vs_matmul"]["matmul"]
    libraries = [mm[k] for k in ("blas_flops_per_s", "onednn_flops_per_s") if k in mm]
    assert libraries and mm["flops_per_s"] >= max(libraries) * (1 - 1e-9)  # each shape's faster
    assert {s["library"] for s in mm["shapes"]} <= {"blas", "onednn"}
    b16 = r["bf16"]
    assert b16["native_bf16"] is timing.native_bf16() and b16["cpu_flags"] == timing.cpu_flags()
    for name in ("decode", "prefill"):
        part = b16[name]
        assert len(part["rounds"]) == tiny["repeats"] and part["speed_ratio"] == statistics.median(
            part["rounds"]
        )
        assert part["weight_bytes"]["float32"] == 2 * part["weight_bytes"]["bfloat16"]
        assert set(part["tokens_per_s"]) == {"float32", "bfloat16"}
    assert b16["slow"] == (
        not b16["native_bf16"] or min(b16[n]["speed_ratio"] for n in ("decode", "prefill")) < 1
    )
    assert ("SLOW" in b16["note"]) == b16["slow"]
    assert set(b16["products"]) == {"float32", "bfloat16"}
    compiled = b16["compiled_one_row"]  # Inductor's own bf16 product against the packed one
    if "error" not in compiled:
        n_out, n_in, n_mats = tiny["compiled_one_row"]
        assert compiled["shape"] == [n_out, n_in] and compiled["n_mats"] == n_mats
        rates = compiled["bytes_per_s"]
        assert compiled["inductor_over_packed"] == rates["inductor"] / rates["packed"] > 0
        assert compiled["compile_s"] > 0
    else:  # no compiler here: the message says why, and nothing else is claimed
        assert set(compiled) == {"error"} and compiled["error"]
    sweep = r["batch_sweep"]
    assert set(sweep["by_dtype"]) == ({"float32", "bfloat16"} if timing.native_bf16() else {"float32"})
    for entry in sweep["by_dtype"].values():
        pts = entry["points"]
        assert [p["batch_size"] for p in pts] == sweep["batches"] == tiny["batch_sizes"]
        assert pts[0]["ratio_to_b1"] == pts[0]["predicted_ratio_to_b1"] == 1.0
        assert entry["worst_ratio_to_b1"] == max(p["ratio_to_b1"] for p in pts[1:] if p["batch_size"] <= 16)
        ideal = [p["predicted_ratio_to_b1"] for p in pts]
        assert ideal == sorted(ideal)  # more rows never take less time on the roofline
        for p in pts:
            assert p["tokens_per_s"] == pytest.approx(p["batch_size"] / p["time_s"])
    import matplotlib

    matplotlib.use("Agg")
    fig = perf.plot_batch_sweep(sweep)  # one measured and one ideal line per dtype, and the 1.3 line
    assert len(fig.axes[0].get_lines()) == 2 * len(sweep["by_dtype"]) + 1
    for bad in ({}, {"by_dtype": {}}):
        with pytest.raises(ValueError, match="^sweep: expected"):
            perf.plot_batch_sweep(bad)


def test_plots_are_written(recorded):
    _, out = recorded
    names = sorted(p.name for p in (out / "plots").iterdir())
    assert names == sorted(f"{n}.png" for n in perf.BENCH_FIGURES)
    for p in (out / "plots").iterdir():
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_summary_lists_every_goal(recorded):
    r, _ = recorded
    text = bench.summary(r)
    assert all(gid in text for gid in GOAL_IDS)


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_sections_subset(monkeypatch, one_thread):
    monkeypatch.setenv("KVTUTOR_BENCH_SIZE", "tiny")
    r = bench.run("cpu", sections=["concat"])
    assert "preallocated_vs_concat" in r and "prefill_sweep" not in r
    assert [g["id"] for g in r["goals"]] == [
        "generate_speedup_small",
        "generate_speedup_gpt2-small",
        "preallocated_vs_concat",
    ]
    assert r["goals"][0]["value"] is None and r["goals"][0]["met"] is None


def test_generate_comparison_skips_without_transformers(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers now raises ImportError
    r = bench.run_generate_vs_transformers("tiny", 4, 2)
    assert r == {"skipped": "transformers is not installed"}


def test_errors():
    with pytest.raises(ValueError, match="^size:"):
        bench.sizes("cpu", "huge")
    with pytest.raises(ValueError, match="^sections:"):
        bench.run("cpu", size="tiny", sections=["everything"])
    with pytest.raises(ValueError, match="^dtype:"):
        bench.ceilings({"matmul": {"float32": {}}, "hardware": {}}, "bfloat16")
    with pytest.raises(ValueError, match="^dtype: expected one of"):
        bench.run("cpu", size="tiny", dtype="int8")
    tiny = bench.make_model("tiny")
    for bad, exc in ((0, ValueError), (1.5, TypeError), (True, TypeError)):
        with pytest.raises(exc, match="^repeats:"):
            bench.run_decode_bandwidth(tiny, 8, 0.0, bad, gemv_n=64)
        with pytest.raises(exc, match="^repeats:"):
            bench.run_prefill_vs_matmul(tiny, 8, 0.0, bad)
        with pytest.raises(exc, match="^repeats:"):
            bench.run_generate_vs_transformers("tiny", 4, 2, repeats=bad)
    with pytest.raises(SystemExit) as info:
        bench.main(["--device", "tpu"])
    assert info.value.code == 2
    for argv in (["--threads", "0"], ["--threads", "100000000000"], ["--sections", ""], ["--sections", ","]):
        with pytest.raises(SystemExit) as info:  # refused before anything is measured
            bench.main(["--size", "tiny", *argv])
        assert info.value.code == 2
    with pytest.raises(ValueError, match="^sections: expected at least one name"):
        bench.run("cpu", size="tiny", sections=[])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error when there is no GPU")
def test_cuda_without_gpu_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        bench.main(["--device", "cuda"])
    assert info.value.code == 2
    assert "CUDA is not available" in capsys.readouterr().err


def test_module_entry_point_help():
    out = subprocess.run(
        [sys.executable, "-m", "kvtutor", "bench", "--help"], capture_output=True, text=True, check=True
    )
    assert "--quick" in out.stdout and "--plots" in out.stdout


def test_append_micro_benchmark_and_its_plot(one_thread):
    r = bench.run_append([4, 16], n_kv_heads=2, d_head=8, min_run_time=0.0, repeats=1)
    assert [p["cached"] for p in r["points"]] == [4, 16]
    row = 2 * 8 * 4  # one token's keys in one layer, float32
    assert r["points"][1]["concat"]["bytes_copied"] == 2 * 17 * row
    assert r["points"][1]["in_place"]["bytes_copied"] == 2 * row
    import matplotlib

    matplotlib.use("Agg")
    fig = perf.plot_append_times(r)
    assert len(fig.axes) == 1


def test_rewinding_the_cache_repeats_the_same_decode_step(one_thread):
    """The timing loops rewind the cache after each step (eager or fast path): every repeat is one step."""
    model = bench.make_model("tiny")
    cache = model.new_cache(3, capacity=8)
    model.prefill(common.random_ids(model, 3, 7), cache)
    ids_B = common.random_ids(model, 3, 1, seed=5)[:, 0]
    ref_BV = model.decode_step(ids_B, cache).clone()
    common.rewind(cache, 7)
    step = model.compile_decode(cache, mode="cuda_graph")  # runs eagerly on a CPU
    for _ in range(3):
        torch.testing.assert_close(step(ids_B, check=False), ref_BV, rtol=1e-5, atol=1e-5)
        common.rewind(cache, 7)
        assert cache.host_lengths == [7, 7, 7] and cache.lengths.tolist() == [7, 7, 7]
    with pytest.raises(TypeError, match="^cache:"):
        common.rewind(object(), 0)


@pytest.mark.parametrize("product", ["blas", "onednn"])
def test_weight_products_are_the_models_own_products(monkeypatch, product):
    """weight_products makes every weight product of one forward pass and no other operation (views
    aside): one matrix call per weight matrix, logits of the right shape; one row goes through the
    CPU's product of one row, as the model's decode step does."""
    torch_weights = pytest.importorskip("kvtutor.models.torch_weights")
    monkeypatch.setenv("KVTUTOR_DECODE_PRODUCT", product)
    if torch_weights.one_row_product() != product:
        pytest.skip("this torch build has no oneDNN matmul of one row")
    model = kvtutor.TorchGPT2Model.random(bench.MODELS["tiny"], device="cpu")
    n_matrices = 4 * model.config.n_layers + 1  # W_qkv, W_o, W_fc, W_proj per layer, the LM head
    matrix = ("addmv", "mv", "addmm", "mm", "matmul", "_linear_pointwise")
    for n_rows in (1, 5):
        products = common.weight_products(model, n_rows)
        counts = timing.count_ops(products)
        matrix_ops = {op: n for op, n in counts.items() if op in matrix}
        assert sum(matrix_ops.values()) == n_matrices, counts
        assert set(counts) - set(matrix_ops) <= {"_unsafe_view", "view", "reshape"}, counts
        assert products().shape == (1, n_rows, model.config.vocab_size)
    # one row: the same calls as the model's own decode step, the products of its vectors
    cache = model.new_cache(1, 16)
    model.prefill([[1, 2, 3]], cache)
    step = timing.count_ops(lambda: model.decode_step([4], cache))
    one_row = timing.count_ops(common.weight_products(model, 1))
    want = {"addmv": n_matrices - 1, "mv": 1} if product == "blas" else {"_linear_pointwise": n_matrices}
    assert {op: step.get(op, 0) for op in one_row} == one_row == want


# ---------------------------------------------------------------- the GPU engine's goals, rehearsed on a CPU


@pytest.fixture(scope="module")
def engine_run(tmp_path_factory):
    """The ``engine`` section (CUDA's by default) at tiny sizes on the CPU, with checkpoints."""
    out = tmp_path_factory.mktemp("engine") / "r.json"
    seen = []

    def checkpoint(partial):
        seen.append(sorted(partial))
        bench.write_result(str(out), partial)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = bench.run("cpu", "tiny", sections=["bandwidth", "engine"], checkpoint=checkpoint)
    finally:
        torch.set_num_threads(threads)
    return result, seen, json.loads(out.read_text())


def test_engine_section_measures_every_part(engine_run):
    result, _, _ = engine_run
    eng = result["engine"]
    assert set(eng) == {"decode_vs_products", "generate_vs_hf_static", "graph_vs_concat", "big_decode"}
    for name, part in eng.items():
        assert "error" not in part, (name, part)
    d = eng["decode_vs_products"]
    assert d["ratio_to_products"] == pytest.approx(d["products_s"] / d["step_s"])
    assert d["ratio_to_products"] == common.median_round(d["rounds"])["ratio"]
    g = eng["generate_vs_hf_static"]
    assert g["identical_tokens"] and len(g["ours_tokens"]) == g["n_new"]  # float32 on the CPU: same tokens
    assert g["speedup"] == pytest.approx(g["transformers_static_s_per_token"] / g["ours_s_per_token"])
    c = eng["graph_vs_concat"]
    assert c["identical_tokens"] and set(c["seconds"]) == {
        "preallocated_graphs",
        "preallocated_eager",
        "concat",
    }
    assert c["graphs_vs_concat"] == pytest.approx(
        c["seconds"]["concat"] / c["seconds"]["preallocated_graphs"]
    )
    b = eng["big_decode"]
    assert b["ratio_to_copy"] == pytest.approx(
        b["weight_bytes"] / b["step_s"] / result["ceilings"]["copy_bandwidth"]
    )


def test_engine_goals_are_never_at_goal_size_on_a_cpu(engine_run):
    result, _, _ = engine_run
    goals = {g["id"]: g for g in result["goals"]}
    ids = {"gpu_decode_vs_products", "gpu_decode_bandwidth_7b", "gpu_generate_vs_hf_static",
           "gpu_graph_vs_concat"}  # fmt: skip
    assert ids <= set(goals)
    for gid in ids:
        assert goals[gid]["at_goal_size"] is False and isinstance(goals[gid]["value"], float)
    # a failed part is recorded as an unmeasured goal, not a crash
    broken = {**result["engine"], "big_decode": {"error": "RuntimeError: out of memory"}}
    goal = {g["id"]: g for g in bench_goals.engine_goals(broken, True)}["gpu_decode_bandwidth_7b"]
    assert goal["value"] is None and goal["met"] is None and "out of memory" in goal["note"]


def test_checkpoints_leave_a_json_after_every_section(engine_run):
    result, seen, last = engine_run
    assert len(seen) == 3  # probe, bandwidth, engine
    assert "engine" not in seen[1] and "engine" in seen[2]
    assert last["partial"] is True and last["goals"] == json.loads(json.dumps(result["goals"]))


def test_the_default_sections_leave_the_engine_to_cuda():
    for device in ("cpu", "cuda"):
        for size in ("tiny", "quick", "full"):
            sz = bench.sizes(device, size)
            assert {"engine_model", "engine_capacity", "engine_big_model", "engine_generate"} <= set(sz)
    full = bench.sizes("cuda", "full")
    assert (full["engine_model"], full["engine_capacity"], full["engine_big_model"]) == (
        "gpt2-1.3b",
        4096,
        "gpt2-6.7b",
    )
    assert bench.MODELS["gpt2-6.7b"].n_params > 6.5e9


def test_random_on_device_draws_the_same_distributions():
    cfg = bench.MODELS["tiny"]
    a = kvtutor.TorchGPT2Model.random_on_device(cfg, seed=1, device="cpu")
    b = kvtutor.TorchGPT2Model.random_on_device(cfg, seed=1, device="cpu")
    ref = kvtutor.TorchGPT2Model.random(cfg, seed=1, device="cpu")
    assert a.n_params == ref.n_params and a.nbytes == ref.nbytes
    for x, y, r in zip(a._weights(), b._weights(), ref._weights(), strict=True):
        assert x.shape == r.shape and torch.equal(x, y)  # seeded
        assert abs(float(x.float().std()) - float(r.float().std())) < 0.05
    assert a.generate([[1, 2, 3]], 4).shape == (1, 4)
    with pytest.raises(TypeError, match=r"^config: expected a kvtutor.GPT2Config"):
        kvtutor.TorchGPT2Model.random_on_device({"d_model": 4})


def test_progress_lines_count_the_measurements_and_leave_no_hook(one_thread):
    lines = []
    bench.run("cpu", "tiny", sections=["concat"], log=lines.append)
    assert [line.split(":")[0] for line in lines] == ["probe", "concat"]
    counts = [int(line.split("(")[1].split()[0]) for line in lines]
    assert 0 <= counts[0] < counts[1]  # every timed call of a section is counted as it happens
    assert common.MEASURED_HOOKS == []  # the hook goes with the run


@pytest.mark.parametrize(
    ("make", "flag", "message"),
    [
        (lambda d: ["--out", str(d / "file" / "r.json")], "--out", "expected a path under directories"),
        (lambda d: ["--out", str(d / "dir")], "--out", "expected a file to write, got the directory"),
        (lambda d: ["--plots", str(d / "file")], "--plots", "expected a directory, got the file"),
        (lambda d: ["--plots", str(d / "file" / "plots")], "--plots", "expected a path under directories"),
    ],
)
def test_bad_output_paths_stop_the_command_before_the_run(tmp_path, monkeypatch, capsys, make, flag, message):
    (tmp_path / "file").write_text("x")
    (tmp_path / "dir").mkdir()
    monkeypatch.setattr(bench.cli, "run", lambda *a, **k: pytest.fail("the run started"))
    with pytest.raises(SystemExit) as info:
        bench.main(["--size", "tiny", "--device", "cpu", *make(tmp_path)])
    assert info.value.code == 2
    assert f"error: {flag}: {message}" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir", "file"]
    assert (tmp_path / "file").read_text() == "x" and not any((tmp_path / "dir").iterdir())


def test_write_result_refuses_before_writing_anything(tmp_path):
    from kvtutor.measure import recorded

    result = recorded.cpu_bench()
    with pytest.raises(ValueError, match=r"^path: expected a file to write, got the directory"):
        bench.write_result(str(tmp_path), result)
    broken = {**result, "ceilings": {**result["ceilings"], "peak_flops": math.inf}}
    with pytest.raises(
        ValueError, match=r"key 'ceilings\.peak_flops': expected number, got the non-finite number inf"
    ):
        bench.write_result(str(tmp_path / "new" / "r.json"), broken)
    unlisted = {**result, "probe": {**result["probe"], "extra": math.nan}}  # not in the schema: json refuses
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        bench.write_result(str(tmp_path / "new" / "r.json"), unlisted)
    assert list(tmp_path.iterdir()) == []  # no file, no .tmp, no folder
    bench.write_result(str(tmp_path / "new" / "r.json"), result)
    assert [p.name for p in (tmp_path / "new").iterdir()] == ["r.json"]
    assert bench.load_result(tmp_path / "new" / "r.json") == result


def test_the_speculative_recorder_checks_its_out_path_before_recording(tmp_path, monkeypatch, capsys):
    from kvtutor.bench import speculative as bench_spec

    monkeypatch.setattr(bench_spec, "record", lambda *a, **k: pytest.fail("the recording started"))
    for argv, message in (
        (["--out", str(tmp_path)], "--out: expected a file to write, got the directory"),
        (["--out", str(tmp_path / "r.json"), "--rounds", "0"], "--rounds: expected >= 1, got 0"),
    ):
        with pytest.raises(SystemExit) as info:
            bench_spec.main(argv)
        assert info.value.code == 2 and message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
