"""The GPU fast path's experiments (the ``engine`` section, CUDA's by default; they also run, eagerly,
on a CPU): decode steps against their own weight products as one CUDA graph, a large model's weight
bandwidth, ``generate`` against transformers' static cache, and the preallocated cache with and
without graphs against the concat cache.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..measure import costs
from ..models.gpt2_weights import build_hf_gpt2
from ..validate import dtype_info
from .common import (
    check_repeats,
    config_dict,
    device_of,
    measure,
    median_round,
    quiet_transformers,
    random_ids,
    rewind,
    timed,
    weight_products,
)

if TYPE_CHECKING:
    from ..models.torch_gpt2 import TorchGPT2Model

__all__ = ["run_engine", "run_big_decode", "run_generate_vs_hf_static", "run_graph_vs_concat"]


def _graphed(fn: Callable[[], Any], device: str) -> Callable[[], Any]:
    """On CUDA, ``fn`` captured as one CUDA graph (its replay); elsewhere ``fn`` itself."""
    if not device.startswith("cuda"):
        return fn
    import torch

    with torch.inference_mode():
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        torch.cuda.synchronize()
    return graph.replay


def _steps_timer(model: TorchGPT2Model, capacity: int, context_len: int, n_steps: int = 16):
    """-> (fn, cache): fn() runs ``n_steps`` fast-path decode steps of one row from ``context_len``
    - 1 tokens on, then rewinds the cache (one rewind per ``n_steps`` steps, so it hardly counts)."""
    cache = model.new_cache(1, capacity=capacity)
    model.prefill(random_ids(model, 1, context_len - 1), cache)
    step = model.compile_decode(cache, mode="cuda_graph")
    ids_B = random_ids(model, 1, 1, seed=1)[:, 0]

    def fn() -> Any:
        for _ in range(n_steps):
            out = step(ids_B, check=False)
        rewind(cache, context_len - 1)
        return out

    return fn, cache


def run_engine(
    model: TorchGPT2Model,
    capacity: int,
    context_len: int,
    copy_bandwidth: float,
    min_run_time: float = 0.2,
    repeats: int = 5,
    n_steps: int = 16,
) -> dict[str, Any]:
    """Batch-1 fast-path decode (``compile_decode``, CUDA graphs on a GPU) against the floor of the
    same work: the model's weight products alone, back to back, as one CUDA graph.

    Timed in ``repeats`` alternating rounds; ``ratio_to_products`` (products time / step time) is
    the median round's. The cache has ``capacity`` slots and holds ``context_len`` tokens, so the
    step's attention reads a key bucket, not the whole capacity.
    """
    check_repeats(repeats)
    device = device_of(model)
    fn, _ = _steps_timer(model, capacity, context_len, n_steps)
    products = _graphed(weight_products(model, 1), device)
    w = costs.decode_weight_bytes(model.config, model.dtype)
    rounds = []
    for _ in range(repeats):
        m = timed(fn, device, min_run_time, 3, warmup=1)
        p = timed(products, device, min_run_time, 3, warmup=1)
        step_s = m.median_s / n_steps
        rounds.append({"step_s": step_s, "products_s": p.median_s, "ratio": p.median_s / step_s})
    mid = median_round(rounds)
    return {
        "config": config_dict(model.config), "dtype": dtype_info(model.dtype).name, "capacity": capacity,
        "context_len": context_len, "weight_bytes": w, "step_s": mid["step_s"],
        "products_s": mid["products_s"], "ratio_to_products": mid["ratio"],
        "step_ratio_to_copy": w / mid["step_s"] / copy_bandwidth,
        "products_ratio_to_copy": w / mid["products_s"] / copy_bandwidth, "rounds": rounds,
    }  # fmt: skip


def run_big_decode(
    model: TorchGPT2Model,
    context_len: int,
    copy_bandwidth: float,
    min_run_time: float = 0.2,
    repeats: int = 3,
) -> dict[str, Any]:
    """Weight bytes per second of a batch-1 fast-path decode step of a large model, against copy
    bandwidth (measured in the same run)."""
    check_repeats(repeats)
    n_steps = 16
    fn, _ = _steps_timer(model, 64, context_len, n_steps)
    m = timed(fn, device_of(model), min_run_time, repeats, warmup=1)
    w = costs.decode_weight_bytes(model.config, model.dtype)
    step_s = m.median_s / n_steps
    return {"config": config_dict(model.config), "dtype": dtype_info(model.dtype).name,
            "context_len": context_len, "weight_bytes": w, "step_s": step_s,
            "weight_bytes_per_s": w / step_s, "ratio_to_copy": w / step_s / copy_bandwidth}  # fmt: skip


def run_generate_vs_hf_static(
    model: TorchGPT2Model, prompt_len: int, n_new: int, repeats: int = 3, min_run_time: float = 0.0
) -> dict[str, Any]:
    """``TorchGPT2Model.generate`` (graphed on CUDA) against transformers' ``generate`` on the same
    weights, with its static cache (``cache_implementation="static"``, which transformers compiles)
    and with its default dynamic cache (eager). First calls (capture, compilation) are timed apart
    and excluded; then alternating rounds, the median round's ratio kept."""
    import torch

    check_repeats(repeats)
    device = device_of(model)
    with quiet_transformers():
        hf = build_hf_gpt2(model, device, model.dtype)
    ids = random_ids(model, 1, prompt_len)
    mask = torch.ones_like(ids)

    def ours_fn() -> Any:
        return model.generate(ids, n_new)

    def hf_fn(static: bool = True) -> Any:
        extra = {"cache_implementation": "static"} if static else {}
        return hf.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=n_new, min_new_tokens=n_new,
            do_sample=False, pad_token_id=0, **extra,
        )[:, prompt_len:]  # fmt: skip

    out: dict[str, Any] = {"config": config_dict(model.config), "dtype": dtype_info(model.dtype).name,
                           "prompt_len": prompt_len, "n_new": n_new}  # fmt: skip
    with torch.inference_mode(), quiet_transformers():
        first = {}
        for name, fn in (("ours", ours_fn), ("transformers_static", hf_fn)):
            t0 = time.perf_counter()
            tokens = fn().cpu().tolist()
            first[name] = time.perf_counter() - t0
            out[f"{name}_tokens"] = tokens[0]
        out["first_call_s"] = first
        out["identical_tokens"] = out["ours_tokens"] == out["transformers_static_tokens"]
        rounds = []
        for _ in range(repeats):
            a = measure(ours_fn, device, warmup=0, min_repeats=1, min_run_time=min_run_time)
            b = measure(hf_fn, device, warmup=0, min_repeats=1, min_run_time=min_run_time)
            rounds.append({"ours_s": a.median_s, "transformers_static_s": b.median_s,
                           "ratio": b.median_s / a.median_s})  # fmt: skip
        eager = measure(lambda: hf_fn(False), device, warmup=1, min_repeats=1, min_run_time=min_run_time)
    mid = median_round(rounds)
    out.update(
        speedup=mid["ratio"], ours_s_per_token=mid["ours_s"] / n_new,
        transformers_static_s_per_token=mid["transformers_static_s"] / n_new,
        transformers_eager_s_per_token=eager.median_s / n_new, rounds=rounds,
    )  # fmt: skip
    return out


def run_graph_vs_concat(
    model: TorchGPT2Model, n_new: int, prompt_len: int = 8, repeats: int = 3, min_run_time: float = 0.0
) -> dict[str, Any]:
    """``generate`` of ``n_new`` tokens three ways: the preallocated cache with the fixed-shape step
    (``graphs=True``: CUDA graphs on a GPU), the preallocated cache eagerly, and the concat cache
    (always eager). Alternating rounds, median round's times."""
    import torch

    check_repeats(repeats)
    device = device_of(model)
    ids = random_ids(model, 1, prompt_len)
    ways = {  # JSON keys: the cache kind, with or without graphs
        "preallocated_graphs": lambda: model.generate(ids, n_new, "preallocated", graphs=True),
        "preallocated_eager": lambda: model.generate(ids, n_new, "preallocated", graphs=False),
        "concat": lambda: model.generate(ids, n_new, "concat"),
    }
    with torch.inference_mode():
        tokens = {k: fn().cpu().tolist() for k, fn in ways.items()}  # also the first (capturing) call
        rounds = []
        for _ in range(repeats):
            r = {k: measure(fn, device, warmup=0, min_repeats=1, min_run_time=min_run_time).median_s
                 for k, fn in ways.items()}  # fmt: skip
            r["ratio"] = r["concat"] / r["preallocated_graphs"]
            rounds.append(r)
    mid = median_round(rounds)
    return {
        "config": config_dict(model.config), "dtype": dtype_info(model.dtype).name, "n_new": n_new,
        "prompt_len": prompt_len, "identical_tokens": len({str(t) for t in tokens.values()}) == 1,
        "seconds": {k: mid[k] for k in ways}, "graphs_vs_concat": mid["ratio"],
        "eager_vs_concat": mid["concat"] / mid["preallocated_eager"], "rounds": rounds,
    }  # fmt: skip
