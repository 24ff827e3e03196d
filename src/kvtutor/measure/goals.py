"""The benchmark's goals: each a ratio from a run's own numbers, against its target (issues 10 and 11),
with whether the run used the goal's configuration. ``GPU_GOALS`` is the one place the GPU goals
are written (the GPU chapter lists them).
"""

from __future__ import annotations

from typing import Any

__all__ = ["GIB", "GPU_GOALS", "evaluate_goals", "cpu_engine_goals", "engine_goals"]

GIB = 1 << 30


def _goal(gid: str, text: str, value: float | None, target: float | None, at_size: bool, note: str = "",
          extra_ok: bool = True, at_most: bool = False) -> dict[str, Any]:  # fmt: skip
    reached = None if value is None or target is None else (value <= target if at_most else value >= target)
    met = None if reached is None else bool(reached and extra_ok)
    goal = {"id": gid, "goal": text, "value": value, "target": target, "met": met,
            "at_goal_size": at_size, "note": note}  # fmt: skip
    return {**goal, "at_most": True} if at_most else goal


def _split_note(r: dict[str, Any], what: str) -> str:
    """'; products alone 0.xx, the <what> 0.yy of them' where the run timed the weight products."""
    if "products" not in r:
        return ""
    alone, rest = r["products"]["ratio"], r["ratio_to_products"]
    return f"; weight products alone {alone:.3f}, the {what} {rest:.3f} of them"


def evaluate_goals(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The performance goals of the issue, as ratios from this run's numbers, each met or not.

    ``at_goal_size`` says whether the run used the goal's configuration (quick runs use smaller ones).
    """
    goals = []
    on_gpu = str(result["device"]).startswith("cuda")
    ceil = result["ceilings"]
    bw = result.get("decode_bandwidth")
    if bw:
        if on_gpu:
            n_params = bw["config"]["n_params"]
            goals.append(_goal(
                "gpu_decode_bandwidth", "GPU bf16 batch-1 decode (fast path): weight bytes per second "
                "/ device copy bandwidth (recorded; the goals are gpu_decode_vs_products and "
                "gpu_decode_bandwidth_7b)", bw["weight_bytes_per_s"] / ceil["copy_bandwidth"], None,
                n_params >= 1e9 and bw["dtype"] == "bfloat16" and bw["fast_path"],
                f"{n_params / 1e9:.2f}B parameters, fast path {'on' if bw['fast_path'] else 'off'}",
            ))  # fmt: skip
        else:
            gemv = bw.get("gemv", result["probe"]["gemv"])  # the GEMV timed beside it, else the probe's
            ok = bw["weight_bytes"] >= GIB and gemv["matrix_bytes"] >= GIB and bw["dtype"] == "float32"
            goals.append(_goal(
                "cpu_decode_bandwidth", "CPU fp32 batch-1 decode reads its weights at >= 0.9 of a "
                ">= 1 GiB GEMV's read bandwidth", bw["ratio_to_gemv"], 0.9, ok,
                f"weights {bw['weight_bytes'] / GIB:.2f} GiB, "
                f"GEMV matrix {gemv['matrix_bytes'] / GIB:.2f} GiB"
                + (f", median of {len(bw['rounds'])} alternating rounds" if "rounds" in bw else "")
                + _split_note(bw, "step"),
            ))  # fmt: skip
            read = bw.get("read")
            goals.append(_goal(
                "cpu_decode_read_rate", "CPU fp32 batch-1 decode reads its weights at >= 0.85 of the "
                "plain read rate (a sum over the GEMV's bytes, timed beside it)", bw.get("ratio_to_read"),
                0.85, ok and read is not None,
                f"read {read['bytes_per_s'] / 1e9:.1f} GB/s; the GEMV {bw['gemv_to_read']:.3f} of it"
                if read else "not measured (a run before the read rate was recorded)",
            ))  # fmt: skip
    gen = result.get("generate_vs_transformers", {})
    for key, target, shape in (("small", 2.5, (256, 4, 8192)), ("gpt2-small", 1.25, (768, 12, 50257))):
        g = gen.get(key)
        if not g or "skipped" in g:
            reason = (g or gen or {}).get("skipped", "not measured")
            text = f"generate >= {target}x transformers generate ({key})"
            goals.append(_goal(f"generate_speedup_{key}", text, None, target, False, reason))
            continue
        c = g["config"]
        goals.append(_goal(
            f"generate_speedup_{key}",
            f"generate >= {target}x transformers generate ({key}), identical tokens",
            g["speedup"], target, (c["d_model"], c["n_layers"], c["vocab_size"]) == shape,
            f"{g['n_new']} new tokens, identical tokens: {g['identical_tokens']}", g["identical_tokens"],
        ))  # fmt: skip
    pm = result.get("prefill_vs_matmul")
    if pm:
        c = pm["config"]
        if on_gpu:
            text, target = GPU_GOALS["gpu_prefill_matmul"]
            goals.append(_goal(
                "gpu_prefill_matmul", text, pm["prefill"]["flops_per_s"] / ceil["peak_flops"], target,
                pm["n_tokens"] >= 2048 and c["n_params"] >= 1e9 and pm["dtype"] == "bfloat16",
                f"T = {pm['n_tokens']}; against the square matmul; same-shape ratio {pm['ratio']:.3f}",
            ))  # fmt: skip
        else:
            libs = {k: pm["matmul"].get(f"{k}_flops_per_s") for k in ("blas", "onednn")}
            best_of = " and ".join(f"{k} {v / 1e9:.0f}" for k, v in libs.items() if v)
            goals.append(_goal(
                "prefill_matmul", "prefill at T = 512 (GPT-2-small shapes) reaches >= 0.85 of the FLOP/s "
                "of the faster of BLAS's and oneDNN's matmul in the same shapes", pm["ratio"], 0.85,
                pm["n_tokens"] == 512 and (c["d_model"], c["n_layers"]) == (768, 12)
                and "blas_flops_per_s" in pm["matmul"],
                f"T = {pm['n_tokens']}" + (f"; GFLOP/s of {best_of}" if best_of else "; BLAS's alone")
                + _split_note(pm, "prefill"),
            ))  # fmt: skip
    sc = result.get("preallocated_vs_concat")
    if sc:
        last = sc["points"][-1]
        goals.append(_goal(
            "preallocated_vs_concat",
            "preallocated cache >= 1.2x faster than concat over 2048 generated tokens",
            last["speedup"], 1.2, last["n_new"] >= 2048, f"{last['n_new']} generated tokens",
        ))  # fmt: skip
    goals += cpu_engine_goals(result.get("bf16"), result.get("batch_sweep"), on_gpu)
    goals += engine_goals(result.get("engine"), on_gpu)
    ds = result.get("decode_sweep")
    if ds:
        pred = ds.get("predicted_compute_bound_batch")
        goals.append(_goal(
            "compute_bound_batch", "batch where decode turns compute-bound: measured beside predicted",
            ds["measured_compute_bound_batch"], None, True,
            f"predicted {pred if pred is not None else 'never'} (ridge {ds.get('predicted_ridge_batch')}); "
            f"reached in the sweep: {ds['compute_bound_reached']}"
            + (f"; fit rms {ds['knee_fit']['rms_rel_error']:.2f}" if "knee_fit" in ds else ""),
        ))  # fmt: skip
    return goals


#: The GPU goals (issue 11): id -> (what it asks, target). ``evaluate_goals`` reports each one
#: from a CUDA run; the GPU chapter lists them.
GPU_GOALS: dict[str, tuple[str, float]] = {
    "gpu_decode_vs_products": (
        "1.3B, bf16, batch 1, capacity 4096, context 16: products alone (one CUDA graph) / decode "
        "step >= 0.87", 0.87),
    "gpu_decode_bandwidth_7b": (
        "6.7B GPT-2 shape, bf16, batch 1: weight bytes per second >= 0.75 of copy bandwidth", 0.75),
    "gpu_generate_vs_hf_static": (
        "generate >= 2.5x transformers generate(cache_implementation='static'), 1.3B bf16, "
        "identical greedy tokens, first calls excluded", 2.5),
    "gpu_prefill_matmul": (
        "GPU bf16 prefill at T = 2048 reaches >= 0.75 of the square bf16 matmul's FLOP/s", 0.75),
    "gpu_graph_vs_concat": (
        "2048 generated tokens: preallocated cache with graphs >= 3x the concat cache, and the "
        "preallocated cache eager not slower than concat", 3.0),
}  # fmt: skip


def engine_goals(engine: dict[str, Any] | None, on_gpu: bool) -> list[dict[str, Any]]:
    """The fast path's goals (issue 11), from the ``engine`` section; at goal size only on a GPU."""
    if not engine:
        return []

    def shape(part: dict[str, Any], d_model: int, n_layers: int) -> bool:
        c = part["config"]
        return on_gpu and (c["d_model"], c["n_layers"]) == (d_model, n_layers) and part["dtype"] == "bfloat16"

    specs = [  # id, part, value, at size, extra condition, note
        ("gpu_decode_vs_products", "decode_vs_products", lambda p: p["ratio_to_products"],
         lambda p: shape(p, 2048, 24) and p["capacity"] == 4096 and p["context_len"] == 16,
         lambda p: True,
         lambda p: f"step {p['step_s'] * 1e3:.3f} ms, products {p['products_s'] * 1e3:.3f} ms; "
                   f"step {p['step_ratio_to_copy']:.3f} of copy bandwidth"),
        ("gpu_decode_bandwidth_7b", "big_decode", lambda p: p["ratio_to_copy"],
         lambda p: shape(p, 4096, 32), lambda p: True,
         lambda p: f"step {p['step_s'] * 1e3:.3f} ms for {p['weight_bytes'] / 1e9:.2f} GB of weights"),
        ("gpu_generate_vs_hf_static", "generate_vs_hf_static", lambda p: p["speedup"],
         lambda p: shape(p, 2048, 24), lambda p: p["identical_tokens"],
         lambda p: f"{p['n_new']} new tokens; identical tokens: {p['identical_tokens']}; transformers "
                   f"eager {p['transformers_eager_s_per_token'] * 1e3:.2f} ms/token"),
        ("gpu_graph_vs_concat", "graph_vs_concat", lambda p: p["graphs_vs_concat"],
         lambda p: on_gpu and p["n_new"] >= 2048, lambda p: p["eager_vs_concat"] >= 1.0,
         lambda p: f"preallocated eager / concat speed {p['eager_vs_concat']:.3f}; identical tokens: "
                   f"{p['identical_tokens']}"),
    ]  # fmt: skip
    goals = []
    for gid, key, value, at_size, extra, note in specs:
        text, target = GPU_GOALS[gid]
        part = engine.get(key)
        if not part or "error" in part:
            reason = part["error"] if part else "not measured"
            goals.append(_goal(gid, text, None, target, False, reason))
            continue
        goals.append(_goal(gid, text, value(part), target, at_size(part), note(part), extra(part)))
    return goals


def cpu_engine_goals(
    bf16: dict[str, Any] | None, sweep: dict[str, Any] | None, on_gpu: bool
) -> list[dict[str, Any]]:
    """The CPU engine's goals (issue 46), from the ``bf16`` and ``batches`` sections: a bf16 decode
    step at >= 1.7x float32's tokens/s where the CPU multiplies bf16 natively (bf16 prefill's ratio
    recorded beside it), and decode steps of 2 to 16 rows within 1.3x of one row's time."""
    goals = []
    if bf16:
        dec, pre = bf16["decode"], bf16["prefill"]
        f32_bytes = dec["weight_bytes"]["float32"]
        goals.append(_goal(
            "cpu_bf16_decode", "CPU bf16 batch-1 decode >= 1.7x float32's tokens/s, where the CPU has "
            "native bf16 (AMX or AVX512_BF16)", dec["speed_ratio"], 1.7,
            not on_gpu and bf16["native_bf16"] and f32_bytes >= GIB, bf16["note"], bf16["native_bf16"],
        ))  # fmt: skip
        goals.append(_goal(
            "cpu_bf16_prefill", "CPU bf16 prefill against float32's tokens/s (recorded; > 1 where the "
            "matrix units run)", pre["speed_ratio"], None, not on_gpu and pre["n_tokens"] == 512,
            f"T = {pre['n_tokens']}; native bf16: {bf16['native_bf16']}",
        ))  # fmt: skip
    for dtype, entry in (sweep or {}).get("by_dtype", {}).items():
        sizes = [p["batch_size"] for p in entry["points"]]
        c = entry["config"]
        worst = max((p for p in entry["points"] if 1 < p["batch_size"] <= 16), key=lambda p: p["ratio_to_b1"])
        goals.append(_goal(
            f"batch_decode_{dtype}", f"{dtype} decode steps of B = 2 to 16 rows take <= 1.3x one row's "
            "time (the roofline: about 1 until the step computes)", entry["worst_ratio_to_b1"], 1.3,
            not on_gpu and 16 in sizes and 2 in sizes and c["n_params"] >= 3e8,
            f"worst at B = {worst['batch_size']} (roofline {worst['predicted_ratio_to_b1']:.2f}); "
            f"{c['n_params'] / 1e6:.0f}M parameters", at_most=True,
        ))  # fmt: skip
    return goals
