"""The benchmark's experiments on one model, each a function the chapters call with small sizes:
prefill and decode sweeps for the roofline, a batch-1 decode step's weight bandwidth, prefill against
``torch.matmul``, ``generate`` against transformers', the preallocated cache against concat, one
append both ways, and the cache against recomputation. ``engine`` holds the GPU fast path's.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from ..measure import costs, timing
from ..measure.knee import fit_knee
from ..measure.matmuls import model_matmul_probe
from ..models.config import GPT2Config
from ..models.gpt2_weights import build_hf_gpt2
from ..validate import dtype_info, torch_dtype
from .common import (
    check_repeats,
    config_dict,
    device_of,
    fast_step,
    measure,
    median_round,
    point,
    products_dict,
    quiet_transformers,
    random_ids,
    rewind,
    timed,
    weight_products,
)
from .tables import MODELS

if TYPE_CHECKING:
    from ..models.torch_gpt2 import TorchGPT2Model

__all__ = [
    "run_prefill_sweep",
    "run_decode_sweep",
    "run_decode_bandwidth",
    "run_prefill_vs_matmul",
    "run_generate_vs_transformers",
    "run_preallocated_vs_concat",
    "run_append",
    "run_cache_vs_recompute",
    "add_predictions",
]


def run_prefill_sweep(
    model: TorchGPT2Model,
    lengths: Sequence[int],
    min_run_time: float = 0.2,
    repeats: int = 3,
    batch_size: int = 1,
) -> dict[str, Any]:
    """Prefill time for each prompt length T, with its FLOPs, bytes and FLOP/s (points for the roofline)."""
    cfg, device = model.config, device_of(model)
    points = []
    for t in lengths:
        cache = model.new_cache(batch_size, capacity=t)
        ids = random_ids(model, batch_size, t)

        def fn(ids=ids, cache=cache):
            rewind(cache, 0)
            return model.prefill(ids, cache)

        m = timed(fn, device, min_run_time, repeats)
        cost = costs.prefill_cost(cfg, t, batch_size, model.dtype)
        points.append(point(cost, m, n_tokens=t, batch_size=batch_size))
        del cache
    return {"config": config_dict(cfg), "dtype": dtype_info(model.dtype).name, "points": points}


def run_decode_sweep(
    model: TorchGPT2Model,
    batches: Sequence[int],
    context_len: int = 32,
    min_run_time: float = 0.2,
    repeats: int = 3,
    fast: bool = False,
) -> dict[str, Any]:
    """One decode step at context_len for each batch size B: time, FLOP/s, tokens/s.

    Also the batch where decode turns compute-bound, measured (``knee.fit_knee``): the sweep fitted
    as t(B) = fixed + B x per-sequence, the knee where the two parts are equal; recorded only when
    the fit is good and the sweep reaches well past it on both sides (``knee_fit`` says how good).
    """
    cfg, device = model.config, device_of(model)
    points = []
    used_fast = False
    for b in batches:
        cache = model.new_cache(b, capacity=context_len)
        model.prefill(random_ids(model, b, context_len - 1, seed=b), cache)
        step, used_fast = fast_step(model, cache, fast)
        ids_B = random_ids(model, b, 1, seed=b + 1)[:, 0]

        def fn(step=step, ids_B=ids_B, cache=cache):
            out = step(ids_B)
            rewind(cache, context_len - 1)
            return out

        m = timed(fn, device, min_run_time, repeats, warmup=2)
        cost = costs.decode_cost(cfg, context_len, b, model.dtype)
        points.append(point(cost, m, batch_size=b, tokens_per_s=b / m.median_s))
        del cache, step
    t1 = points[0]["time"]["median_s"] / batches[0]  # per-token time at the smallest batch (B=1)
    tb = points[-1]["time"]["median_s"]
    b_max = batches[-1]
    fit = fit_knee(list(batches), [p["time"]["median_s"] for p in points])
    return {
        "config": config_dict(cfg),
        "dtype": dtype_info(model.dtype).name,
        "context_len": context_len,
        "fast_path": used_fast,
        "points": points,
        "knee_fit": fit.as_dict(),
        "measured_compute_bound_batch": fit.knee if fit.resolved else None,
        "compute_bound_reached": fit.resolved,
        "per_token_time_ratio": (tb / b_max) / t1,
    }


def run_decode_bandwidth(
    model: TorchGPT2Model,
    context_len: int = 16,
    min_run_time: float = 0.2,
    repeats: int = 5,
    fast: bool = False,
    gemv_n: int | None = None,
) -> dict[str, Any]:
    """Batch-1 decode step: the bytes of weights it must read divided by its time.

    With ``gemv_n``, the step is timed in ``repeats`` rounds that alternate with a GEMV of an
    [gemv_n, gemv_n] matrix (the ceiling), and each round gives a ratio of two measurements taken
    seconds apart: on a shared machine the bandwidth itself drifts by several percent within a minute.
    ``ratio_to_gemv`` is then the median round's ratio, and ``time`` that round's time. Each round
    also times the step's mat-vec products alone, back to back (``products``), which splits the ratio
    into ``products["ratio"]`` (the products against the GEMV) times ``ratio_to_products``, and a
    plain read of the GEMV's bytes (``read``, ``timing.read_probe``: a sum), the floor under both:
    ``ratio_to_read`` is the step against it, ``gemv_to_read`` the GEMV, each the median of the
    rounds' own ratios.
    """
    from ..models.torch_weights import one_row_product

    check_repeats(repeats)
    cfg, device = model.config, device_of(model)
    cache = model.new_cache(1, capacity=context_len)
    model.prefill(random_ids(model, 1, context_len - 1), cache)
    step, used_fast = fast_step(model, cache, fast)
    ids_B = random_ids(model, 1, 1, seed=1)[:, 0]
    w = costs.decode_weight_bytes(cfg, model.dtype)
    cost = costs.decode_cost(cfg, context_len, 1, model.dtype)

    def fn():
        out = step(ids_B)
        rewind(cache, context_len - 1)
        return out

    out: dict[str, Any] = {
        "config": config_dict(cfg), "dtype": dtype_info(model.dtype).name, "context_len": context_len,
        "fast_path": used_fast, "weight_bytes": w, "bytes": cost.bytes,
        "one_row_product": one_row_product(model.dtype) if device == "cpu" else None,
    }  # fmt: skip
    if gemv_n is None:
        m = timed(fn, device, min_run_time, repeats, warmup=2)
    else:
        probe_dtype = "float32" if device == "cpu" else model.dtype
        gemv = timing.gemv_probe(gemv_n, device, probe_dtype)
        read = timing.read_probe(gemv_n * gemv_n * dtype_info(probe_dtype).nbytes, device, probe_dtype)
        products = weight_products(model, 1)
        rounds = []
        for _ in range(repeats):
            m = timed(fn, device, min_run_time, 3, warmup=2)
            p = timed(products, device, min_run_time, 3, warmup=2)
            g, r = gemv(min_run_time), read(min_run_time)
            rounds.append({"decode": m, "products": p, "gemv": g, "read": r,
                           "ratio": w / m.median_s / g["bytes_per_s"]})  # fmt: skip
        mid = median_round(rounds)
        m = mid["decode"]
        out["gemv"], out["read"] = mid["gemv"], mid["read"]
        out["ratio_to_gemv"] = mid["ratio"]
        # against the read rate, the median of each round's own ratio: the read rate of a shared
        # machine moves between rounds more than the step's and the GEMV's do
        to_read = [w / r["decode"].median_s / r["read"]["bytes_per_s"] for r in rounds]
        gemv_to_read = [r["gemv"]["bytes_per_s"] / r["read"]["bytes_per_s"] for r in rounds]
        out["ratio_to_read"] = statistics.median(to_read)
        out["gemv_to_read"] = statistics.median(gemv_to_read)
        # the median round's ratio = (products / GEMV) x (decode step / products)
        out["products"] = products_dict(mid["products"], w, "bytes", mid["gemv"]["bytes_per_s"])
        out["ratio_to_products"] = mid["products"].median_s / m.median_s
        out["rounds"] = [{"weight_bytes_per_s": w / r["decode"].median_s,
                          "products_bytes_per_s": w / r["products"].median_s,
                          "gemv_bytes_per_s": r["gemv"]["bytes_per_s"],
                          "read_bytes_per_s": r["read"]["bytes_per_s"], "ratio": r["ratio"],
                          "ratio_to_read": x} for r, x in zip(rounds, to_read, strict=True)]  # fmt: skip
    out.update(time=m.as_dict(), weight_bytes_per_s=w / m.median_s, bytes_per_s=cost.bytes / m.median_s)
    return out


def run_read_attempts(n: int, min_run_time: float = 0.2) -> dict[str, Any]:
    """CPU: the ways a batch-1 decode step could read an [n, n] float32 matrix once, each in bytes/s
    in the same run: a plain sum (the floor), ``torch.mv`` on torch's threads (BLAS's mat-vec), the
    same product as row blocks, one block per thread and each block's BLAS call on one thread
    (Python threads: BLAS releases the GIL), one row through ``torch.mm``, bf16 weights (half the
    bytes, counted as read), and oneDNN's matmul of one row in float32 and bf16
    (``torch_weights.onednn_linear``, where this torch has it). ``ratios_to_sum`` holds each
    against the floor; ``one_row_product`` is what this CPU's decode steps run."""
    import torch

    from ..models import torch_weights

    a_NN, x_N, y_N, s = torch.randn(n, n), torch.randn(n), torch.empty(n), torch.empty(())
    threads = torch.get_num_threads()
    blocks = list(zip(a_NN.chunk(threads), y_N.chunk(threads), strict=True))
    a16_NN, x16_N = a_NN.to(torch.bfloat16), x_N.to(torch.bfloat16)
    nbytes = a_NN.numel() * a_NN.element_size()

    def rate(fn: Any, n_bytes: int = nbytes, num_threads: int = threads) -> float:
        return (
            n_bytes / timing.time_fn(fn, "cpu", min_run_time=min_run_time, num_threads=num_threads).median_s
        )

    out: dict[str, Any] = {"matrix_bytes": nbytes, "threads": threads}
    out["sum"] = rate(lambda: torch.sum(a_NN.view(-1), 0, out=s))
    out["mv"] = rate(lambda: torch.mv(a_NN, x_N, out=y_N))
    out["mm_one_row"] = rate(lambda: torch.mm(x_N[None], a_NN.mT))
    out["bf16_mv"] = rate(lambda: torch.mv(a16_NN, x16_N), nbytes // 2)
    with ThreadPoolExecutor(threads) as pool:

        def row_blocks() -> None:
            for f in [pool.submit(torch.mv, a, x_N, out=y) for a, y in blocks]:
                f.result()

        out["mv_row_blocks"] = rate(row_blocks, num_threads=1)  # the Timer sets torch to 1 thread
    names = ["mv", "mv_row_blocks", "mm_one_row", "bf16_mv"]
    if torch_weights.onednn_available():
        one_row = torch_weights.onednn_linear
        out["onednn_one_row"] = rate(lambda: one_row(x_N, a_NN, None))
        out["onednn_bf16_one_row"] = rate(lambda: one_row(x16_N, a16_NN, None), nbytes // 2)
        names += ["onednn_one_row", "onednn_bf16_one_row"]
    out["ratios_to_sum"] = {k: out[k] / out["sum"] for k in names}
    out["one_row_product"] = torch_weights.one_row_product(torch.float32)
    return out


def run_prefill_vs_matmul(
    model: TorchGPT2Model, n_tokens: int, min_run_time: float = 0.2, repeats: int = 3
) -> dict[str, Any]:
    """Prefill FLOP/s (cost-model FLOPs / time) against the matmuls of the same shapes, same run:
    each shape the faster of BLAS's and oneDNN's (``matmuls.model_matmul_probe``).

    Prefill and the matmuls are timed in ``repeats`` alternating rounds, each giving a ratio of two
    measurements taken seconds apart; ``ratio``, ``prefill`` and ``matmul`` are the median round's.
    Each round also times the model's own weight products back to back (``products``), which splits
    ``ratio`` into ``products["ratio"]`` (the products against the probe) times ``ratio_to_products``
    (the whole prefill against its products).
    """
    check_repeats(repeats)
    cfg, device = model.config, device_of(model)
    mm = model_matmul_probe(cfg, n_tokens, device, model.dtype)
    products = weight_products(model, n_tokens)
    rounds = []
    for _ in range(repeats):
        sweep = run_prefill_sweep(model, [n_tokens], min_run_time, 1)
        p = timed(products, device, min_run_time, 1)
        r = mm(min_run_time)
        prefill = sweep["points"][0]
        rounds.append(
            {
                "prefill": prefill,
                "products": p,
                "matmul": r,
                "ratio": prefill["flops_per_s"] / r["flops_per_s"],
            }
        )
    mid = median_round(rounds)
    flops = mid["matmul"]["flops"]  # the weight products' FLOPs, the same in both
    return {
        "config": sweep["config"],
        "dtype": sweep["dtype"],
        "n_tokens": n_tokens,
        "prefill": mid["prefill"],
        "matmul": mid["matmul"],
        "ratio": mid["ratio"],
        # the median round's ratio = (products / matmul) x (prefill / products), all in FLOP/s
        "products": products_dict(mid["products"], flops, "flops", mid["matmul"]["flops_per_s"]),
        "ratio_to_products": mid["prefill"]["flops_per_s"] * mid["products"].median_s / flops,
        "rounds": [
            {
                "prefill_flops_per_s": r["prefill"]["flops_per_s"],
                "products_flops_per_s": flops / r["products"].median_s,
                "matmul_flops_per_s": r["matmul"]["flops_per_s"],
                "ratio": r["ratio"],
            }
            for r in rounds
        ],  # fmt: skip
    }


def run_generate_vs_transformers(
    config: GPT2Config | str,
    prompt_len: int,
    n_new: int,
    device: str = "cpu",
    dtype: Any = "float32",
    repeats: int = 3,
    min_run_time: float = 0.0,
    seed: int = 0,
) -> dict[str, Any]:
    """``TorchGPT2Model.generate`` against ``transformers``' ``generate`` (greedy, its default cache):
    same weights, the tokens of both checked equal, the speedup recorded: the two are timed in
    ``repeats`` alternating rounds and ``speedup`` is the median round's ratio (``rounds`` holds all).

    Returns ``{"skipped": reason}`` when transformers is not installed.
    """
    check_repeats(repeats)
    try:
        import transformers  # noqa: F401
    except ImportError:
        return {"skipped": "transformers is not installed"}
    import torch

    from ..models.gpt2 import GPT2Model
    from ..models.torch_gpt2 import TorchGPT2Model

    cfg = MODELS[config] if isinstance(config, str) else config
    np_model = GPT2Model.random(cfg, seed=seed)
    ours = TorchGPT2Model.from_numpy(np_model, device=device, dtype=torch_dtype(dtype))
    with quiet_transformers():
        hf = build_hf_gpt2(np_model, device, dtype)
    del np_model
    ids = random_ids(ours, 1, prompt_len, seed=seed)
    mask = torch.ones_like(ids)

    def ours_fn():
        return ours.generate(ids, n_new)

    def hf_fn():
        return hf.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=n_new, min_new_tokens=n_new,
            do_sample=False, pad_token_id=0,
        )[:, prompt_len:]  # fmt: skip

    with torch.no_grad(), quiet_transformers():
        ours_tokens = ours_fn().cpu().tolist()
        hf_tokens = hf_fn().cpu().tolist()
        rounds = []
        for _ in range(repeats):  # alternating, so each ratio compares two runs made seconds apart
            a = measure(ours_fn, device, warmup=0, min_repeats=1, min_run_time=min_run_time)
            b = measure(hf_fn, device, warmup=0, min_repeats=1, min_run_time=min_run_time)
            rounds.append({"ours": a, "transformers": b, "ratio": b.median_s / a.median_s})
    mid = median_round(rounds)
    m_ours, m_hf = mid["ours"], mid["transformers"]
    same = ours_tokens == hf_tokens
    first_diff = None
    if not same:
        a, b = ours_tokens[0], hf_tokens[0]
        first_diff = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), len(a))
    return {
        "config": config_dict(cfg),
        "dtype": dtype_info(dtype).name,
        "prompt_len": prompt_len,
        "n_new": n_new,
        "identical_tokens": same,
        "first_difference": first_diff,
        "ours": {"time": m_ours.as_dict(), "tokens_per_s": n_new / m_ours.median_s},
        "transformers": {"time": m_hf.as_dict(), "tokens_per_s": n_new / m_hf.median_s},
        "speedup": mid["ratio"],
        "rounds": [r["ratio"] for r in rounds],
    }


def run_preallocated_vs_concat(
    model: TorchGPT2Model,
    lengths: Sequence[int],
    prompt_len: int = 8,
    repeats: int = 3,
    min_run_time: float = 0.0,
) -> dict[str, Any]:
    """``generate`` of n tokens with the preallocated cache (recorded under the key ``"preallocated"``)
    and with the concat cache.

    Also the bytes that concat copies (every step rewrites the whole history: quadratic in n)
    against the bytes the in-place write stores (linear in n), from the cost model.
    """
    import torch

    cfg, device = model.config, device_of(model)
    ids = random_ids(model, 1, prompt_len)
    points = []
    for n in lengths:
        if prompt_len + n > cfg.max_seq_len:
            raise ValueError(f"lengths: expected prompt {prompt_len} + n <= {cfg.max_seq_len}, got n={n}")
        row: dict[str, Any] = {"n_new": n}
        tokens = {}
        for kind in ("preallocated", "concat"):  # the JSON key is the cache kind
            with torch.no_grad():
                tokens[kind] = model.generate(ids, n, cache_kind=kind).cpu().tolist()
            m = timed(lambda kind=kind, n=n: model.generate(ids, n, cache_kind=kind), device, min_run_time,
                      repeats, warmup=0)  # fmt: skip
            row[kind] = {"time": m.as_dict(), "tokens_per_s": n / m.median_s}
        row["identical_tokens"] = tokens["preallocated"] == tokens["concat"]
        row["speedup"] = row["concat"]["time"]["median_s"] / row["preallocated"]["time"]["median_s"]
        # K/V bytes each step writes in place, and bytes concat copies (read + write of the history)
        row["preallocated_write_bytes"] = costs.kv_cache_bytes(cfg, prompt_len + n - 1, 1, model.dtype)
        row["concat_copy_bytes"] = sum(
            2 * costs.kv_cache_bytes(cfg, prompt_len + i, 1, model.dtype) for i in range(n - 1)
        )
        points.append(row)
    return {"config": config_dict(cfg), "dtype": dtype_info(model.dtype).name, "prompt_len": prompt_len,
            "points": points}  # fmt: skip


def run_append(
    lengths: Sequence[int],
    n_kv_heads: int = 4,
    d_head: int = 64,
    device: str = "cpu",
    dtype: Any = "float32",
    min_run_time: float = 0.1,
    repeats: int = 5,
) -> dict[str, Any]:
    """One layer's append of one token's keys, [1, Hkv, 1, K], after S cached ones, two ways:
    ``torch.cat`` into a new [1, Hkv, S+1, K] tensor (copies all S rows) and an in-place write into
    a preallocated [1, Hkv, M, K] buffer (copies one row)."""
    import torch

    dt = torch_dtype(dtype)
    points = []
    for s in lengths:
        k_BHSK = torch.randn(1, n_kv_heads, s, d_head, device=device, dtype=torch.float32).to(dt)
        k_new_BHTK = torch.randn(1, n_kv_heads, 1, d_head, device=device, dtype=torch.float32).to(dt)
        buf_BHMK = torch.zeros(1, n_kv_heads, s + 1, d_head, device=device, dtype=dt)
        m_cat = timed(lambda k=k_BHSK, n=k_new_BHTK: torch.cat([k, n], dim=2), device, min_run_time, repeats)
        m_put = timed(
            lambda b=buf_BHMK, n=k_new_BHTK, s=s: b[:, :, s : s + 1].copy_(n), device, min_run_time, repeats
        )
        row_bytes = n_kv_heads * d_head * k_BHSK.element_size()
        points.append({
            "cached": s,
            "concat": {"time": m_cat.as_dict(), "bytes_copied": 2 * (s + 1) * row_bytes},
            "in_place": {"time": m_put.as_dict(), "bytes_copied": 2 * row_bytes},
        })  # fmt: skip
    return {"n_kv_heads": n_kv_heads, "d_head": d_head, "dtype": dtype_info(dt).name, "device": str(device),
            "points": points}  # fmt: skip


def run_cache_vs_recompute(
    model: TorchGPT2Model,
    lengths: Sequence[int],
    min_run_time: float = 0.2,
    repeats: int = 3,
    fast: bool = False,
    peak_flops: float | None = None,
    bandwidth: float | None = None,
) -> dict[str, Any]:
    """Tokens/s of one new token at sequence length n: a decode step with the cache against
    recomputing all n positions without it, with the cost model's FLOP ratio (and, given the
    ceilings, its roofline prediction of each). On CUDA with ``fast``, the CUDA-graph decode too."""
    cfg, device = model.config, device_of(model)
    points = []
    for n in lengths:
        cache = model.new_cache(1, capacity=n)
        ids = random_ids(model, 1, n, seed=n)
        model.prefill(ids[:, : n - 1], cache)
        last_B = ids[:, n - 1]

        def cached(cache=cache, last_B=last_B, n=n):
            out = model.decode_step(last_B, cache)
            rewind(cache, n - 1)
            return out

        m_c = timed(cached, device, min_run_time, repeats, warmup=2)
        m_u = timed(lambda ids=ids: model.logits_without_cache(ids), device, min_run_time, repeats)
        c_cost = costs.decode_cost(cfg, n, 1, model.dtype)
        u_cost = costs.forward_cost(cfg, n, 0, 1, model.dtype, cached=False)
        row: dict[str, Any] = {
            "seq_len": n,
            "cached": {"time": m_c.as_dict(), "tokens_per_s": 1 / m_c.median_s, "flops": c_cost.flops},
            "uncached": {"time": m_u.as_dict(), "tokens_per_s": 1 / m_u.median_s, "flops": u_cost.flops},
            "speedup": m_u.median_s / m_c.median_s,
            "flops_ratio": u_cost.flops / c_cost.flops,
        }
        if peak_flops and bandwidth:
            t_c = costs.roofline_time(c_cost, peak_flops, bandwidth)
            t_u = costs.roofline_time(u_cost, peak_flops, bandwidth)
            row["predicted_speedup"] = t_u / t_c
            row["cached"]["predicted_tokens_per_s"] = 1 / t_c
            row["uncached"]["predicted_tokens_per_s"] = 1 / t_u
        if fast and device.startswith("cuda") and hasattr(model, "compile_decode"):
            step, _ = fast_step(model, cache, True)

            def graphed(step=step, last_B=last_B, cache=cache, n=n):
                out = step(last_B)
                rewind(cache, n - 1)
                return out

            m_g = timed(graphed, device, min_run_time, repeats, warmup=2)
            row["cached_graph"] = {"time": m_g.as_dict(), "tokens_per_s": 1 / m_g.median_s}
        points.append(row)
        del cache
    return {"config": config_dict(cfg), "dtype": dtype_info(model.dtype).name, "points": points}


def add_predictions(section: dict[str, Any], ceilings: dict[str, Any]) -> dict[str, Any]:
    """Add the roofline's prediction to a prefill or decode sweep, in place (and return it):
    ``predicted_time_s`` per point, and for decode the predicted compute-bound batch."""
    cfg = GPT2Config(**{k: v for k, v in section["config"].items() if k != "n_params"})
    peak, bw, dtype = ceilings["peak_flops"], ceilings["bandwidth"], section["dtype"]
    for p in section["points"]:
        if "n_tokens" in p:
            c = costs.prefill_cost(cfg, p["n_tokens"], p.get("batch_size", 1), dtype)
        else:
            c = costs.decode_cost(cfg, section["context_len"], p["batch_size"], dtype)
        p["predicted_time_s"] = costs.roofline_time(c, peak, bw)
    if "context_len" in section:
        ridge = costs.ridge_batch(cfg, section["context_len"], peak, bw, dtype)
        section["predicted_ridge_batch"] = None if math.isinf(ridge) else ridge
        section["predicted_compute_bound_batch"] = costs.compute_bound_batch(
            cfg, section["context_len"], peak, bw, dtype
        )
    return section
