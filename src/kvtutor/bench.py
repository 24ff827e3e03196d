"""``python -m kvtutor bench``: measure prefill and decode against this machine's own ceilings.

One run probes the machine (read bandwidth, copy bandwidth, matmul FLOP/s), then measures the
model and writes every number, as seconds and as ratios to those ceilings, to one JSON file:

- prefill time vs prompt length and decode time vs batch size, as points on the roofline;
- the batch size at which decode turns compute-bound, measured and predicted by the cost model;
- how fast a batch-1 decode step reads its weights, against one large GEMV (or a device copy);
- ``TorchModel.generate`` against ``transformers``' ``generate`` (same weights, same tokens);
- prefill FLOP/s against ``torch.matmul`` in the model's own shapes;
- the preallocated (static) cache against the concat cache;
- tokens/s with and without the cache as the sequence grows.

Sizes: ``tiny`` (tests), ``quick`` (CI, the default on a CPU) and ``full`` (the goals' sizes, the
default on CUDA); ``--quick``/``--size`` or ``KVTUTOR_BENCH_SIZE`` choose. Each section is also a
function that the book's chapters call with small sizes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from . import costs, timing
from .config import ModelConfig
from .knee import fit_knee
from .timing import (
    Measurement,
    _dtype_name,
    bench_size,
    describe,
    probe_machine,
    time_fn,
)
from .timing import (
    _torch_dtype as _dtype,
)

if TYPE_CHECKING:
    from .torch_model import TorchModel

__all__ = [
    "GPU_GOALS",
    "MODELS",
    "SIZES",
    "sizes",
    "ceilings",
    "make_model",
    "run_prefill_sweep",
    "run_decode_sweep",
    "run_decode_bandwidth",
    "run_prefill_vs_matmul",
    "run_generate_vs_transformers",
    "run_static_vs_concat",
    "run_append",
    "run_cache_vs_recompute",
    "add_predictions",
    "evaluate_goals",
    "run",
    "load_result",
    "main",
]

#: The model shapes the benchmark uses (random weights; nothing is downloaded).
MODELS: dict[str, ModelConfig] = {
    "tiny": ModelConfig(vocab_size=512, d_model=64, n_heads=4, n_layers=2, max_seq_len=512),
    "small": ModelConfig(vocab_size=8192, d_model=256, n_heads=4, n_layers=4, max_seq_len=4096),
    "mid": ModelConfig(vocab_size=8192, d_model=512, n_heads=8, n_layers=6, max_seq_len=1024),
    "gpt2-small": ModelConfig(vocab_size=50257, d_model=768, n_heads=12, n_layers=12, max_seq_len=1024),
    "gpt2-medium": ModelConfig(vocab_size=50257, d_model=1024, n_heads=16, n_layers=24, max_seq_len=1024),
    "gpt2-1.3b": ModelConfig(vocab_size=50257, d_model=2048, n_heads=16, n_layers=24, max_seq_len=4096),
    # drawn on the device (TorchModel.random_on_device): too large to draw in NumPy
    "gpt2-6.7b": ModelConfig(vocab_size=50257, d_model=4096, n_heads=32, n_layers=32, max_seq_len=2048),
}

_TINY = {
    "roofline_model": "tiny", "prefill_lengths": [4, 8, 16], "decode_batches": [1, 2, 4],
    "decode_context": 8, "bandwidth_model": "tiny", "bandwidth_context": 8,
    "generate_small": ("tiny", 4, 4), "generate_gpt2": ("tiny", 4, 3),
    "prefill_goal": ("tiny", 16), "concat_model": "tiny", "concat_lengths": [4, 8, 16],
    "recompute_model": "tiny", "recompute_lengths": [4, 8, 16], "min_run_time": 0.005,
    "repeats": 2, "engine_model": "tiny", "engine_capacity": 128, "engine_context": 16,
    "engine_big_model": "tiny", "engine_generate": ("tiny", 4, 8), "engine_concat": ("tiny", 40),
}  # fmt: skip

#: What each size measures: model names from MODELS, lengths, batches; (model, prompt, new tokens)
#: for the generate comparison; (model, T) for the prefill-vs-matmul goal.
SIZES: dict[str, dict[str, dict[str, Any]]] = {
    "cpu": {
        "tiny": _TINY,
        "quick": {
            "roofline_model": "mid", "prefill_lengths": [8, 16, 32, 64, 128, 256],
            "decode_batches": [1, 2, 4, 8, 16, 32, 64], "decode_context": 32,
            "bandwidth_model": "gpt2-small", "bandwidth_context": 16,
            "generate_small": ("small", 8, 32), "generate_gpt2": ("gpt2-small", 8, 8),
            "prefill_goal": ("gpt2-small", 128), "concat_model": "small",
            "concat_lengths": [64, 128, 256], "recompute_model": "small",
            "recompute_lengths": [16, 32, 64, 128, 256], "min_run_time": 0.1, "repeats": 3,
            "engine_model": "mid", "engine_capacity": 1024, "engine_context": 16,
            "engine_big_model": "gpt2-small", "engine_generate": ("small", 8, 32),
            "engine_concat": ("small", 256),
        },
        "full": {
            "roofline_model": "gpt2-small", "prefill_lengths": [8, 16, 32, 64, 128, 256, 512],
            "decode_batches": [1, 2, 4, 8, 16, 32, 64, 128], "decode_context": 32,
            "bandwidth_model": "gpt2-medium", "bandwidth_context": 16,
            "generate_small": ("small", 8, 128), "generate_gpt2": ("gpt2-small", 8, 64),
            "prefill_goal": ("gpt2-small", 512), "concat_model": "small",
            "concat_lengths": [256, 512, 1024, 2048], "recompute_model": "small",
            "recompute_lengths": [16, 32, 64, 128, 256, 512, 1024], "min_run_time": 0.3, "repeats": 5,
            "engine_model": "gpt2-small", "engine_capacity": 1024, "engine_context": 16,
            "engine_big_model": "gpt2-medium", "engine_generate": ("gpt2-small", 8, 32),
            "engine_concat": ("small", 1024),
        },
    },
    "cuda": {
        "tiny": _TINY,
        "quick": {
            "roofline_model": "gpt2-medium", "prefill_lengths": [64, 128, 256, 512, 1024],
            "decode_batches": [1, 4, 16, 64, 256], "decode_context": 16,
            "bandwidth_model": "gpt2-medium", "bandwidth_context": 16,
            "generate_small": ("small", 8, 64), "generate_gpt2": ("gpt2-small", 8, 32),
            "prefill_goal": ("gpt2-medium", 1024), "concat_model": "small",
            "concat_lengths": [256, 512], "recompute_model": "small",
            "recompute_lengths": [16, 64, 256, 1024], "min_run_time": 0.05, "repeats": 5,
            "engine_model": "gpt2-medium", "engine_capacity": 1024, "engine_context": 16,
            "engine_big_model": "gpt2-1.3b", "engine_generate": ("gpt2-medium", 8, 64),
            "engine_concat": ("small", 512),
        },
        "full": {
            "roofline_model": "gpt2-1.3b", "prefill_lengths": [64, 128, 256, 512, 1024, 2048, 4096],
            "decode_batches": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024], "decode_context": 16,
            "bandwidth_model": "gpt2-1.3b", "bandwidth_context": 16,
            "generate_small": ("small", 8, 128), "generate_gpt2": ("gpt2-small", 8, 128),
            "prefill_goal": ("gpt2-1.3b", 2048), "concat_model": "small",
            "concat_lengths": [256, 512, 1024, 2048], "recompute_model": "small",
            "recompute_lengths": [16, 32, 64, 128, 256, 512, 1024, 2048], "min_run_time": 0.1,
            "repeats": 5, "engine_model": "gpt2-1.3b", "engine_capacity": 4096, "engine_context": 16,
            "engine_big_model": "gpt2-6.7b", "engine_generate": ("gpt2-1.3b", 8, 128),
            "engine_concat": ("small", 2048),
        },
    },
}  # fmt: skip

GIB = 1 << 30


def sizes(device: str = "cpu", size: str | None = None, quick: bool | None = None) -> dict[str, Any]:
    """The measurement sizes for a device: ``size`` if given, else ``timing.bench_size(quick, device)``."""
    kind = "cuda" if str(device).startswith("cuda") else "cpu"
    size = bench_size(quick, device) if size is None else size
    if size not in SIZES[kind]:
        raise ValueError(f"size: expected one of {sorted(SIZES[kind])}, got {size!r}")
    return {"size": size, **SIZES[kind][size]}


def _torch():
    import torch

    return torch


def _config_dict(cfg: ModelConfig) -> dict[str, Any]:
    return {
        "vocab_size": cfg.vocab_size, "d_model": cfg.d_model, "n_heads": cfg.n_heads,
        "n_kv_heads": cfg.n_kv_heads, "n_layers": cfg.n_layers, "d_ff": cfg.d_ff,
        "max_seq_len": cfg.max_seq_len, "n_params": cfg.n_params,
    }  # fmt: skip


def ceilings(probe: dict[str, Any], dtype: Any) -> dict[str, Any]:
    """The roofline of a probe: peak = square-matmul FLOP/s in dtype; bandwidth = the GEMV read
    bandwidth on a CPU, the device copy bandwidth on CUDA (the ceilings the goals divide by)."""
    name = _dtype_name(dtype)
    if name not in probe["matmul"]:
        raise ValueError(f"dtype: expected one of the probed dtypes {sorted(probe['matmul'])}, got {name!r}")
    on_gpu = bool(probe["hardware"].get("gpu"))
    bw_source = "copy" if on_gpu else "gemv"
    return {
        "dtype": name,
        "peak_flops": probe["matmul"][name]["flops_per_s"],
        "bandwidth": probe[bw_source]["bytes_per_s"],
        "bandwidth_source": bw_source,
        "gemv_bandwidth": probe["gemv"]["bytes_per_s"],
        "copy_bandwidth": probe["copy"]["bytes_per_s"],
    }


def make_model(
    config: ModelConfig | str, device: str = "cpu", dtype: Any = None, seed: int = 0
) -> TorchModel:
    """A ``TorchModel`` with random weights, for a config or a name in MODELS."""
    from .torch_model import TorchModel

    cfg = MODELS[config] if isinstance(config, str) else config
    dt = None if dtype is None else _dtype(dtype)
    on_device = str(device).startswith("cuda") and cfg.n_params > 5e8
    if on_device or cfg.n_params > 3e9:  # drawing billions of numbers in NumPy on the host takes minutes
        return TorchModel.random_on_device(cfg, seed=seed, device=device, dtype=dt)
    return TorchModel.random(cfg, seed=seed, device=device, dtype=dt)


def _device_of(model: Any) -> str:
    return str(model.device)


def _rewind(cache: Any, length: int) -> None:
    """Set the cache back to ``length`` tokens (what a timing loop needs between repeats)."""
    if hasattr(cache, "truncate"):
        cache.truncate(length)
    elif hasattr(cache, "reset") and length == 0:
        cache.reset()
    else:
        raise TypeError(f"cache: expected a cache with truncate(length), got {type(cache).__name__}")


def _ids(model: Any, batch_size: int, n_tokens: int, seed: int = 0):
    torch = _torch()
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, model.config.vocab_size, (batch_size, n_tokens), generator=g)
    return ids.to(model.device)


#: called after every measurement the benchmark makes (``run`` sets it to advance its progress bar)
_on_measured: list[Callable[[], None]] = []


def _measure(fn: Callable[[], Any], device: str, **kwargs: Any) -> Measurement:
    """``timing.time_fn``, then a tick of the progress display."""
    m = time_fn(fn, device, **kwargs)
    for hook in _on_measured:
        hook()
    return m


def _timed(
    fn: Callable[[], Any], device: str, min_run_time: float, repeats: int, warmup: int = 1
) -> Measurement:
    torch = _torch()
    with torch.no_grad():
        return _measure(fn, device, warmup=warmup, min_repeats=repeats, min_run_time=min_run_time)


def _point(cost: costs.Cost, m: Measurement, **extra: Any) -> dict[str, Any]:
    return {**extra, "time": m.as_dict(), "flops": cost.flops, "bytes": cost.bytes,
            "intensity": float(cost.intensity), "flops_per_s": cost.flops / m.median_s}  # fmt: skip


def _fast_step(model: Any, cache: Any, fast: bool):
    """The decode callable: the CUDA-graph fast path when asked for and available, else decode_step."""
    if fast and _device_of(model).startswith("cuda") and hasattr(model, "compile_decode"):
        step = model.compile_decode(cache, mode="cuda_graph")
        return (lambda ids_B: step(ids_B, check=False)), True
    return (lambda ids_B: model.decode_step(ids_B, cache)), False


# ---------------------------------------------------------------- sections


def run_prefill_sweep(
    model: TorchModel,
    lengths: Sequence[int],
    min_run_time: float = 0.2,
    repeats: int = 3,
    batch_size: int = 1,
) -> dict[str, Any]:
    """Prefill time for each prompt length T, with its FLOPs, bytes and FLOP/s (points for the roofline)."""
    cfg, device = model.config, _device_of(model)
    points = []
    for t in lengths:
        cache = model.new_cache(batch_size, max_seq_len=t)
        ids = _ids(model, batch_size, t)

        def fn(ids=ids, cache=cache):
            _rewind(cache, 0)
            return model.prefill(ids, cache)

        m = _timed(fn, device, min_run_time, repeats)
        cost = costs.prefill_cost(cfg, t, batch_size, model.dtype)
        points.append(_point(cost, m, n_tokens=t, batch_size=batch_size))
        del cache
    return {"config": _config_dict(cfg), "dtype": _dtype_name(model.dtype), "points": points}


def run_decode_sweep(
    model: TorchModel,
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
    cfg, device = model.config, _device_of(model)
    points = []
    used_fast = False
    for b in batches:
        cache = model.new_cache(b, max_seq_len=context_len)
        model.prefill(_ids(model, b, context_len - 1, seed=b), cache)
        step, used_fast = _fast_step(model, cache, fast)
        ids_B = _ids(model, b, 1, seed=b + 1)[:, 0]

        def fn(step=step, ids_B=ids_B, cache=cache):
            out = step(ids_B)
            _rewind(cache, context_len - 1)
            return out

        m = _timed(fn, device, min_run_time, repeats, warmup=2)
        cost = costs.decode_cost(cfg, context_len, b, model.dtype)
        points.append(_point(cost, m, batch_size=b, tokens_per_s=b / m.median_s))
        del cache, step
    t1 = points[0]["time"]["median_s"] / batches[0]  # per-token time at the smallest batch (B=1)
    tb = points[-1]["time"]["median_s"]
    b_max = batches[-1]
    fit = fit_knee(list(batches), [p["time"]["median_s"] for p in points])
    return {
        "config": _config_dict(cfg),
        "dtype": _dtype_name(model.dtype),
        "context_len": context_len,
        "fast_path": used_fast,
        "points": points,
        "knee_fit": fit.as_dict(),
        "measured_compute_bound_batch": fit.knee if fit.resolved else None,
        "compute_bound_reached": fit.resolved,
        "per_token_time_ratio": (tb / b_max) / t1,
    }


def _check_repeats(repeats: Any) -> None:
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats: expected an int >= 1, got {repeats!r}")


def _median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round whose ratio is the median (the lower middle one when the count is even)."""
    ranked = sorted(rounds, key=lambda r: r["ratio"])
    return ranked[(len(ranked) - 1) // 2]


def _weight_products(model: TorchModel, n_rows: int) -> Callable[[], Any]:
    """-> fn() running every weight product of one forward pass over ``n_rows`` tokens back to back:
    the calls the model makes (``linear`` per layer matrix, ``lm_head``) on the model's own matrices,
    and nothing else. Inputs are allocated once. Timing it splits the gap between a forward pass and
    a probe in two: the products themselves, and everything between them."""
    torch = _torch()
    from .torch_model import linear, lm_head

    cfg = model.config
    g = torch.Generator().manual_seed(0)
    x_1TD = torch.randn(1, n_rows, cfg.d_model, generator=g).to(model.device, model.dtype)
    h_1TF = torch.randn(1, n_rows, cfg.d_ff, generator=g).to(model.device, model.dtype)

    def products() -> Any:
        for ly in model.layers:
            linear(x_1TD, ly.w_qkv, ly.b_qkv)
            linear(x_1TD, ly.w_o, ly.b_o)
            linear(x_1TD, ly.w_fc, ly.b_fc)
            linear(h_1TF, ly.w_proj, ly.b_proj)
        return lm_head(x_1TD, model.head_VD)  # the head the model multiplies (padded on CUDA)

    return products


def _products_dict(m: Measurement, amount: float, unit: str, ceiling: float) -> dict[str, Any]:
    """The weight products' timing: ``amount`` (bytes or FLOPs) per second and its ratio to the ceiling."""
    return {"time": m.as_dict(), f"{unit}_per_s": amount / m.median_s, "ratio": amount / m.median_s / ceiling}


def run_decode_bandwidth(
    model: TorchModel,
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
    into ``products["ratio"]`` (the products against the GEMV) times ``ratio_to_products``.
    """
    _check_repeats(repeats)
    cfg, device = model.config, _device_of(model)
    cache = model.new_cache(1, max_seq_len=context_len)
    model.prefill(_ids(model, 1, context_len - 1), cache)
    step, used_fast = _fast_step(model, cache, fast)
    ids_B = _ids(model, 1, 1, seed=1)[:, 0]
    w = costs.decode_weight_bytes(cfg, model.dtype)
    cost = costs.decode_cost(cfg, context_len, 1, model.dtype)

    def fn():
        out = step(ids_B)
        _rewind(cache, context_len - 1)
        return out

    out: dict[str, Any] = {
        "config": _config_dict(cfg), "dtype": _dtype_name(model.dtype), "context_len": context_len,
        "fast_path": used_fast, "weight_bytes": w, "bytes": cost.bytes,
    }  # fmt: skip
    if gemv_n is None:
        m = _timed(fn, device, min_run_time, repeats, warmup=2)
    else:
        gemv = timing.gemv_probe(gemv_n, device, "float32" if device == "cpu" else model.dtype)
        products = _weight_products(model, 1)
        rounds = []
        for _ in range(repeats):
            m = _timed(fn, device, min_run_time, 3, warmup=2)
            p = _timed(products, device, min_run_time, 3, warmup=2)
            g = gemv(min_run_time)
            rounds.append({"decode": m, "products": p, "gemv": g, "ratio": w / m.median_s / g["bytes_per_s"]})
        mid = _median_round(rounds)
        m = mid["decode"]
        out["gemv"] = mid["gemv"]
        out["ratio_to_gemv"] = mid["ratio"]
        # the median round's ratio = (products / GEMV) x (decode step / products)
        out["products"] = _products_dict(mid["products"], w, "bytes", mid["gemv"]["bytes_per_s"])
        out["ratio_to_products"] = mid["products"].median_s / m.median_s
        out["rounds"] = [{"weight_bytes_per_s": w / r["decode"].median_s,
                          "products_bytes_per_s": w / r["products"].median_s,
                          "gemv_bytes_per_s": r["gemv"]["bytes_per_s"], "ratio": r["ratio"]}
                         for r in rounds]  # fmt: skip
    out.update(time=m.as_dict(), weight_bytes_per_s=w / m.median_s, bytes_per_s=cost.bytes / m.median_s)
    return out


def run_prefill_vs_matmul(
    model: TorchModel, n_tokens: int, min_run_time: float = 0.2, repeats: int = 3
) -> dict[str, Any]:
    """Prefill FLOP/s (cost-model FLOPs / time) against ``torch.matmul`` in the same shapes, same run.

    Prefill and the matmuls are timed in ``repeats`` alternating rounds, each giving a ratio of two
    measurements taken seconds apart; ``ratio``, ``prefill`` and ``matmul`` are the median round's.
    Each round also times the model's own weight products back to back (``products``), which splits
    ``ratio`` into ``products["ratio"]`` (the products against the probe) times ``ratio_to_products``
    (the whole prefill against its products).
    """
    _check_repeats(repeats)
    cfg, device = model.config, _device_of(model)
    mm = timing.model_matmul_probe(cfg, n_tokens, device, model.dtype)
    products = _weight_products(model, n_tokens)
    rounds = []
    for _ in range(repeats):
        sweep = run_prefill_sweep(model, [n_tokens], min_run_time, 1)
        p = _timed(products, device, min_run_time, 1)
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
    mid = _median_round(rounds)
    flops = mid["matmul"]["flops"]  # the weight products' FLOPs, the same in both
    return {
        "config": sweep["config"],
        "dtype": sweep["dtype"],
        "n_tokens": n_tokens,
        "prefill": mid["prefill"],
        "matmul": mid["matmul"],
        "ratio": mid["ratio"],
        # the median round's ratio = (products / matmul) x (prefill / products), all in FLOP/s
        "products": _products_dict(mid["products"], flops, "flops", mid["matmul"]["flops_per_s"]),
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


def _hf_model(np_model: Any, device: str, dtype: Any):
    """transformers' GPT2LMHeadModel holding the weights of a NumpyModel or a TorchModel, built on
    ``device`` (a 1.3B model is never materialised in host memory)."""
    import torch
    import transformers

    cfg = np_model.config
    if cfg.n_kv_heads != cfg.n_heads:
        raise ValueError(
            f"config: expected plain multi-head attention for GPT-2, got n_kv_heads={cfg.n_kv_heads}"
        )
    hf_cfg = transformers.GPT2Config(
        vocab_size=cfg.vocab_size, n_positions=cfg.max_seq_len, n_embd=cfg.d_model, n_layer=cfg.n_layers,
        n_head=cfg.n_heads, n_inner=cfg.d_ff, activation_function="gelu_new", resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=cfg.layer_norm_eps, bos_token_id=None,
        eos_token_id=None, pad_token_id=None,
    )  # fmt: skip
    try:  # skip the random init: every weight is overwritten below
        from transformers.initialization import no_init_weights
    except ImportError:
        no_init_weights = getattr(transformers.modeling_utils, "no_init_weights", contextlib.nullcontext)
    with warnings.catch_warnings(), no_init_weights(), torch.device(device):
        warnings.simplefilter("ignore")
        hf = transformers.GPT2LMHeadModel(hf_cfg).to(_dtype(dtype))
    sd = {k: torch.as_tensor(v) for k, v in np_model.to_gpt2_state_dict().items()}
    missing, unexpected = hf.load_state_dict(sd, strict=False)
    if unexpected or any(not k.endswith((".attn.bias", ".attn.masked_bias")) for k in missing):
        raise RuntimeError(f"weights do not fit GPT2LMHeadModel: missing {missing}, unexpected {unexpected}")
    hf.tie_weights()
    return hf.to(device=device, dtype=_dtype(dtype)).eval()


@contextlib.contextmanager
def _quiet_transformers():
    import transformers

    old = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        transformers.logging.set_verbosity(old)


def run_generate_vs_transformers(
    config: ModelConfig | str,
    prompt_len: int,
    n_new: int,
    device: str = "cpu",
    dtype: Any = "float32",
    repeats: int = 3,
    min_run_time: float = 0.0,
    seed: int = 0,
) -> dict[str, Any]:
    """``TorchModel.generate`` against ``transformers``' ``generate`` (greedy, its default cache):
    same weights, the tokens of both checked equal, the speedup recorded: the two are timed in
    ``repeats`` alternating rounds and ``speedup`` is the median round's ratio (``rounds`` holds all).

    Returns ``{"skipped": reason}`` when transformers is not installed.
    """
    _check_repeats(repeats)
    try:
        import transformers  # noqa: F401
    except ImportError:
        return {"skipped": "transformers is not installed"}
    import torch

    from .numpy_model import NumpyModel
    from .torch_model import TorchModel

    cfg = MODELS[config] if isinstance(config, str) else config
    np_model = NumpyModel.random(cfg, seed=seed)
    ours = TorchModel.from_numpy(np_model, device=device, dtype=_dtype(dtype))
    with _quiet_transformers():
        hf = _hf_model(np_model, device, dtype)
    del np_model
    ids = _ids(ours, 1, prompt_len, seed=seed)
    mask = torch.ones_like(ids)

    def ours_fn():
        return ours.generate(ids, n_new)

    def hf_fn():
        return hf.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=n_new, min_new_tokens=n_new,
            do_sample=False, pad_token_id=0,
        )[:, prompt_len:]  # fmt: skip

    with torch.no_grad(), _quiet_transformers():
        ours_tokens = ours_fn().cpu().tolist()
        hf_tokens = hf_fn().cpu().tolist()
        rounds = []
        for _ in range(repeats):  # alternating, so each ratio compares two runs made seconds apart
            a = _measure(ours_fn, device, warmup=0, min_repeats=1, min_run_time=min_run_time)
            b = _measure(hf_fn, device, warmup=0, min_repeats=1, min_run_time=min_run_time)
            rounds.append({"ours": a, "transformers": b, "ratio": b.median_s / a.median_s})
    mid = _median_round(rounds)
    m_ours, m_hf = mid["ours"], mid["transformers"]
    same = ours_tokens == hf_tokens
    first_diff = None
    if not same:
        a, b = ours_tokens[0], hf_tokens[0]
        first_diff = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), len(a))
    return {
        "config": _config_dict(cfg),
        "dtype": _dtype_name(dtype),
        "prompt_len": prompt_len,
        "n_new": n_new,
        "identical_tokens": same,
        "first_difference": first_diff,
        "ours": {"time": m_ours.as_dict(), "tokens_per_s": n_new / m_ours.median_s},
        "transformers": {"time": m_hf.as_dict(), "tokens_per_s": n_new / m_hf.median_s},
        "speedup": mid["ratio"],
        "rounds": [r["ratio"] for r in rounds],
    }


def run_static_vs_concat(
    model: TorchModel,
    lengths: Sequence[int],
    prompt_len: int = 8,
    repeats: int = 3,
    min_run_time: float = 0.0,
) -> dict[str, Any]:
    """``generate`` of n tokens with the preallocated (static) cache and with the concat cache.

    Also the bytes that concat copies (every step rewrites the whole history: quadratic in n)
    against the bytes the in-place write stores (linear in n), from the cost model.
    """
    cfg, device = model.config, _device_of(model)
    ids = _ids(model, 1, prompt_len)
    points = []
    for n in lengths:
        if prompt_len + n > cfg.max_seq_len:
            raise ValueError(f"lengths: expected prompt {prompt_len} + n <= {cfg.max_seq_len}, got n={n}")
        row: dict[str, Any] = {"n_new": n}
        tokens = {}
        for kind in ("static", "concat"):
            with _torch().no_grad():
                tokens[kind] = model.generate(ids, n, cache_kind=kind).cpu().tolist()
            m = _timed(lambda kind=kind, n=n: model.generate(ids, n, cache_kind=kind), device, min_run_time,
                       repeats, warmup=0)  # fmt: skip
            row[kind] = {"time": m.as_dict(), "tokens_per_s": n / m.median_s}
        row["identical_tokens"] = tokens["static"] == tokens["concat"]
        row["speedup"] = row["concat"]["time"]["median_s"] / row["static"]["time"]["median_s"]
        # K/V bytes each step writes in place, and bytes concat copies (read + write of the history)
        row["static_write_bytes"] = costs.kv_cache_bytes(cfg, prompt_len + n - 1, 1, model.dtype)
        row["concat_copy_bytes"] = sum(
            2 * costs.kv_cache_bytes(cfg, prompt_len + i, 1, model.dtype) for i in range(n - 1)
        )
        points.append(row)
    return {"config": _config_dict(cfg), "dtype": _dtype_name(model.dtype), "prompt_len": prompt_len,
            "points": points}  # fmt: skip


def _graphed(fn: Callable[[], Any], device: str) -> Callable[[], Any]:
    """On CUDA, ``fn`` captured as one CUDA graph (its replay); elsewhere ``fn`` itself."""
    if not device.startswith("cuda"):
        return fn
    torch = _torch()
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


def _steps_timer(model: TorchModel, capacity: int, context_len: int, n_steps: int = 16):
    """-> (fn, cache): fn() runs ``n_steps`` fast-path decode steps of one row from ``context_len``
    - 1 tokens on, then rewinds the cache (one rewind per ``n_steps`` steps, so it hardly counts)."""
    cache = model.new_cache(1, max_seq_len=capacity)
    model.prefill(_ids(model, 1, context_len - 1), cache)
    step = model.compile_decode(cache, mode="cuda_graph")
    ids_B = _ids(model, 1, 1, seed=1)[:, 0]

    def fn() -> Any:
        for _ in range(n_steps):
            out = step(ids_B, check=False)
        _rewind(cache, context_len - 1)
        return out

    return fn, cache


def run_engine(
    model: TorchModel,
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
    _check_repeats(repeats)
    device = _device_of(model)
    fn, _ = _steps_timer(model, capacity, context_len, n_steps)
    products = _graphed(_weight_products(model, 1), device)
    w = costs.decode_weight_bytes(model.config, model.dtype)
    rounds = []
    for _ in range(repeats):
        m = _timed(fn, device, min_run_time, 3, warmup=1)
        p = _timed(products, device, min_run_time, 3, warmup=1)
        step_s = m.median_s / n_steps
        rounds.append({"step_s": step_s, "products_s": p.median_s, "ratio": p.median_s / step_s})
    mid = _median_round(rounds)
    return {
        "config": _config_dict(model.config), "dtype": _dtype_name(model.dtype), "capacity": capacity,
        "context_len": context_len, "weight_bytes": w, "step_s": mid["step_s"],
        "products_s": mid["products_s"], "ratio_to_products": mid["ratio"],
        "step_ratio_to_copy": w / mid["step_s"] / copy_bandwidth,
        "products_ratio_to_copy": w / mid["products_s"] / copy_bandwidth, "rounds": rounds,
    }  # fmt: skip


def run_big_decode(
    model: TorchModel, context_len: int, copy_bandwidth: float, min_run_time: float = 0.2, repeats: int = 3
) -> dict[str, Any]:
    """Weight bytes per second of a batch-1 fast-path decode step of a large model, against copy
    bandwidth (measured in the same run)."""
    _check_repeats(repeats)
    n_steps = 16
    fn, _ = _steps_timer(model, 64, context_len, n_steps)
    m = _timed(fn, _device_of(model), min_run_time, repeats, warmup=1)
    w = costs.decode_weight_bytes(model.config, model.dtype)
    step_s = m.median_s / n_steps
    return {"config": _config_dict(model.config), "dtype": _dtype_name(model.dtype),
            "context_len": context_len, "weight_bytes": w, "step_s": step_s,
            "weight_bytes_per_s": w / step_s, "ratio_to_copy": w / step_s / copy_bandwidth}  # fmt: skip


def run_generate_vs_hf_static(
    model: TorchModel, prompt_len: int, n_new: int, repeats: int = 3, min_run_time: float = 0.0
) -> dict[str, Any]:
    """``TorchModel.generate`` (graphed on CUDA) against transformers' ``generate`` on the same
    weights, with its static cache (``cache_implementation="static"``, which transformers compiles)
    and with its default dynamic cache (eager). First calls (capture, compilation) are timed apart
    and excluded; then alternating rounds, the median round's ratio kept."""
    _check_repeats(repeats)
    torch = _torch()
    device = _device_of(model)
    with _quiet_transformers():
        hf = _hf_model(model, device, model.dtype)
    ids = _ids(model, 1, prompt_len)
    mask = torch.ones_like(ids)

    def ours_fn() -> Any:
        return model.generate(ids, n_new)

    def hf_fn(static: bool = True) -> Any:
        extra = {"cache_implementation": "static"} if static else {}
        return hf.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=n_new, min_new_tokens=n_new,
            do_sample=False, pad_token_id=0, **extra,
        )[:, prompt_len:]  # fmt: skip

    out: dict[str, Any] = {"config": _config_dict(model.config), "dtype": _dtype_name(model.dtype),
                           "prompt_len": prompt_len, "n_new": n_new}  # fmt: skip
    with torch.inference_mode(), _quiet_transformers():
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
            a = _measure(ours_fn, device, warmup=0, min_repeats=1, min_run_time=min_run_time)
            b = _measure(hf_fn, device, warmup=0, min_repeats=1, min_run_time=min_run_time)
            rounds.append({"ours_s": a.median_s, "transformers_static_s": b.median_s,
                           "ratio": b.median_s / a.median_s})  # fmt: skip
        eager = _measure(lambda: hf_fn(False), device, warmup=1, min_repeats=1, min_run_time=min_run_time)
    mid = _median_round(rounds)
    out.update(
        speedup=mid["ratio"], ours_s_per_token=mid["ours_s"] / n_new,
        transformers_static_s_per_token=mid["transformers_static_s"] / n_new,
        transformers_eager_s_per_token=eager.median_s / n_new, rounds=rounds,
    )  # fmt: skip
    return out


def run_graph_vs_concat(
    model: TorchModel, n_new: int, prompt_len: int = 8, repeats: int = 3, min_run_time: float = 0.0
) -> dict[str, Any]:
    """``generate`` of ``n_new`` tokens three ways: the static cache with the fixed-shape step
    (``graphs=True``: CUDA graphs on a GPU), the static cache eagerly, and the concat cache
    (always eager). Alternating rounds, median round's times."""
    _check_repeats(repeats)
    device = _device_of(model)
    ids = _ids(model, 1, prompt_len)
    ways = {
        "static_graphs": lambda: model.generate(ids, n_new, "static", graphs=True),
        "static_eager": lambda: model.generate(ids, n_new, "static", graphs=False),
        "concat": lambda: model.generate(ids, n_new, "concat"),
    }
    with _torch().inference_mode():
        tokens = {k: fn().cpu().tolist() for k, fn in ways.items()}  # also the first (capturing) call
        rounds = []
        for _ in range(repeats):
            r = {k: _measure(fn, device, warmup=0, min_repeats=1, min_run_time=min_run_time).median_s
                 for k, fn in ways.items()}  # fmt: skip
            r["ratio"] = r["concat"] / r["static_graphs"]
            rounds.append(r)
    mid = _median_round(rounds)
    return {
        "config": _config_dict(model.config), "dtype": _dtype_name(model.dtype), "n_new": n_new,
        "prompt_len": prompt_len, "identical_tokens": len({str(t) for t in tokens.values()}) == 1,
        "seconds": {k: mid[k] for k in ways}, "graphs_vs_concat": mid["ratio"],
        "eager_vs_concat": mid["concat"] / mid["static_eager"], "rounds": rounds,
    }  # fmt: skip


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
    torch = _torch()
    dt = _dtype(dtype)
    points = []
    for s in lengths:
        k_BHSK = torch.randn(1, n_kv_heads, s, d_head, device=device, dtype=torch.float32).to(dt)
        k_new_BHTK = torch.randn(1, n_kv_heads, 1, d_head, device=device, dtype=torch.float32).to(dt)
        buf_BHMK = torch.zeros(1, n_kv_heads, s + 1, d_head, device=device, dtype=dt)
        m_cat = _timed(lambda k=k_BHSK, n=k_new_BHTK: torch.cat([k, n], dim=2), device, min_run_time, repeats)
        m_put = _timed(
            lambda b=buf_BHMK, n=k_new_BHTK, s=s: b[:, :, s : s + 1].copy_(n), device, min_run_time, repeats
        )
        row_bytes = n_kv_heads * d_head * k_BHSK.element_size()
        points.append({
            "cached": s,
            "concat": {"time": m_cat.as_dict(), "bytes_copied": 2 * (s + 1) * row_bytes},
            "in_place": {"time": m_put.as_dict(), "bytes_copied": 2 * row_bytes},
        })  # fmt: skip
    return {"n_kv_heads": n_kv_heads, "d_head": d_head, "dtype": _dtype_name(dt), "device": str(device),
            "points": points}  # fmt: skip


def run_cache_vs_recompute(
    model: TorchModel,
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
    cfg, device = model.config, _device_of(model)
    points = []
    for n in lengths:
        cache = model.new_cache(1, max_seq_len=n)
        ids = _ids(model, 1, n, seed=n)
        model.prefill(ids[:, : n - 1], cache)
        last_B = ids[:, n - 1]

        def cached(cache=cache, last_B=last_B, n=n):
            out = model.decode_step(last_B, cache)
            _rewind(cache, n - 1)
            return out

        m_c = _timed(cached, device, min_run_time, repeats, warmup=2)
        m_u = _timed(lambda ids=ids: model.logits_without_cache(ids), device, min_run_time, repeats)
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
            step, _ = _fast_step(model, cache, True)

            def graphed(step=step, last_B=last_B, cache=cache, n=n):
                out = step(last_B)
                _rewind(cache, n - 1)
                return out

            m_g = _timed(graphed, device, min_run_time, repeats, warmup=2)
            row["cached_graph"] = {"time": m_g.as_dict(), "tokens_per_s": 1 / m_g.median_s}
        points.append(row)
        del cache
    return {"config": _config_dict(cfg), "dtype": _dtype_name(model.dtype), "points": points}


def add_predictions(section: dict[str, Any], ceilings: dict[str, Any]) -> dict[str, Any]:
    """Add the roofline's prediction to a prefill or decode sweep, in place (and return it):
    ``predicted_time_s`` per point, and for decode the predicted compute-bound batch."""
    cfg = ModelConfig(**{k: v for k, v in section["config"].items() if k != "n_params"})
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


# ---------------------------------------------------------------- goals


def _goal(gid: str, text: str, value: float | None, target: float | None, at_size: bool, note: str = "",
          extra_ok: bool = True) -> dict[str, Any]:  # fmt: skip
    met = None if value is None or target is None else bool(value >= target and extra_ok)
    return {"id": gid, "goal": text, "value": value, "target": target, "met": met,
            "at_goal_size": at_size, "note": note}  # fmt: skip


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
            goals.append(_goal(
                "prefill_matmul", "prefill at T = 512 (GPT-2-small shapes) reaches >= 0.85 of same-shape "
                "torch.matmul FLOP/s", pm["ratio"], 0.85,
                pm["n_tokens"] == 512 and (c["d_model"], c["n_layers"]) == (768, 12),
                f"T = {pm['n_tokens']}" + _split_note(pm, "prefill"),
            ))  # fmt: skip
    sc = result.get("static_vs_concat")
    if sc:
        last = sc["points"][-1]
        goals.append(_goal(
            "static_vs_concat", "preallocated cache >= 1.2x faster than concat over 2048 generated tokens",
            last["speedup"], 1.2, last["n_new"] >= 2048, f"{last['n_new']} generated tokens",
        ))  # fmt: skip
    goals += _engine_goals(result.get("engine"), on_gpu)
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
    "gpu_static_graph_vs_concat": (
        "2048 generated tokens: static cache with graphs >= 3x the concat cache, and the static "
        "cache eager not slower than concat", 3.0),
}  # fmt: skip


def _engine_goals(engine: dict[str, Any] | None, on_gpu: bool) -> list[dict[str, Any]]:
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
        ("gpu_static_graph_vs_concat", "graph_vs_concat", lambda p: p["graphs_vs_concat"],
         lambda p: on_gpu and p["n_new"] >= 2048, lambda p: p["eager_vs_concat"] >= 1.0,
         lambda p: f"static eager / concat speed {p['eager_vs_concat']:.3f}; identical tokens: "
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


# ---------------------------------------------------------------- the whole run


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


def _finite(obj: Any) -> Any:
    """inf / nan -> None, so that the JSON is strict."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


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
    ``recompute``, ``engine`` (default all; ``engine``, the GPU goals of the fast path, only on CUDA).
    """
    import torch

    from .timing import default_device

    device = default_device() if device is None else str(device)
    on_gpu = device.startswith("cuda")
    sz = sizes(device, size, quick)
    dtype = ("bfloat16" if on_gpu else "float32") if dtype is None else _dtype_name(dtype)
    all_sections = ("rooflines", "bandwidth", "generate", "prefill_goal", "concat", "recompute", "engine")
    if sections is None:
        sections = all_sections if on_gpu else all_sections[:-1]
    sections = tuple(sections)
    for s in sections:
        if s not in all_sections:
            raise ValueError(f"sections: expected names from {list(all_sections)}, got {s!r}")
    log = log or (lambda msg: None)
    mrt, reps = sz["min_run_time"], sz["repeats"]
    t_start = time.perf_counter()
    result: dict[str, Any] = {"schema": 1, "device": device, "size": sz["size"], "dtype": dtype,
                              "sizes": _finite(sz), "seconds": {}}  # fmt: skip
    steps = 1 + len(sections)
    with _progress(steps, "bench") as bar, contextlib.ExitStack() as stack:
        counted = [0]

        def measured() -> None:
            counted[0] += 1
            if bar is not None:
                bar.set_postfix_str(f"{counted[0]} measurements", refresh=True)

        _on_measured.append(measured)
        stack.callback(_on_measured.remove, measured)

        def tick(name: str, t0: float) -> None:
            result["seconds"][name] = round(time.perf_counter() - t0, 3)
            log(f"{name}: {result['seconds'][name]:.1f} s ({counted[0]} measurements so far)")
            if bar is not None:
                bar.update(1)
            if checkpoint is not None:
                checkpoint(_finite({**result, "goals": evaluate_goals(result), "partial": True}))

        t0 = time.perf_counter()
        dtypes = (dtype, "float32") if on_gpu and dtype != "float32" else (dtype,)
        probe = probe_machine(device, size=sz["size"], dtypes=dtypes)
        result["probe"] = probe
        result["hardware"] = probe["hardware"]
        result["versions"] = probe["versions"]
        result["date"] = probe["hardware"]["date"]
        ceil = ceilings(probe, dtype)
        result["ceilings"] = ceil
        tick("probe", t0)
        models: dict[str, Any] = {}

        def model(name: str, dt: Any = dtype):
            key = (name, _dtype_name(dt))
            if key not in models:
                for k in [k for k in models if k[0] != name]:  # keep at most one large model alive
                    del models[k]
                if on_gpu:
                    torch.cuda.empty_cache()
                models[key] = make_model(name, device, dt)
            return models[key]

        if "rooflines" in sections:
            t0 = time.perf_counter()
            m = model(sz["roofline_model"])
            result["prefill_sweep"] = run_prefill_sweep(m, sz["prefill_lengths"], mrt, reps)
            ds = run_decode_sweep(m, sz["decode_batches"], sz["decode_context"], mrt, reps, fast=on_gpu)
            result["decode_sweep"] = add_predictions(ds, ceil)
            add_predictions(result["prefill_sweep"], ceil)
            tick("rooflines", t0)
        if "bandwidth" in sections:
            t0 = time.perf_counter()
            m = model(sz["bandwidth_model"])
            gemv_n = None if on_gpu else timing.PROBE_SIZES["cpu"][sz["size"]]["gemv_n"]
            result["decode_bandwidth"] = run_decode_bandwidth(
                m, sz["bandwidth_context"], mrt, max(reps, 5), on_gpu, gemv_n
            )
            del m
            bw = result["decode_bandwidth"]
            bw["ratio_to_probe_gemv"] = bw["weight_bytes_per_s"] / ceil["gemv_bandwidth"]
            bw.setdefault("ratio_to_gemv", bw["ratio_to_probe_gemv"])  # no GEMV timed beside it
            bw["ratio_to_copy"] = bw["weight_bytes_per_s"] / ceil["copy_bandwidth"]
            tick("bandwidth", t0)
        if "prefill_goal" in sections:
            t0 = time.perf_counter()
            name, t = sz["prefill_goal"]
            result["prefill_vs_matmul"] = run_prefill_vs_matmul(model(name), t, mrt, reps)
            result["prefill_vs_matmul"]["ratio_to_square_matmul"] = (
                result["prefill_vs_matmul"]["prefill"]["flops_per_s"] / ceil["peak_flops"]
            )
            tick("prefill_goal", t0)
        models.clear()
        if "generate" in sections:
            t0 = time.perf_counter()
            gen: dict[str, Any] = {}
            for key in ("generate_small", "generate_gpt2"):
                name, prompt, n_new = sz[key]
                label = "small" if key == "generate_small" else "gpt2-small"
                gen[label] = run_generate_vs_transformers(name, prompt, n_new, device, "float32", reps)
                gen[label]["model"] = name
                if on_gpu:
                    torch.cuda.empty_cache()
            result["generate_vs_transformers"] = gen
            tick("generate", t0)
        if "concat" in sections:
            t0 = time.perf_counter()
            result["static_vs_concat"] = run_static_vs_concat(
                model(sz["concat_model"]), sz["concat_lengths"], 8, min(reps, 3)
            )
            tick("concat", t0)
        if "recompute" in sections:
            t0 = time.perf_counter()
            result["cache_vs_recompute"] = run_cache_vs_recompute(
                model(sz["recompute_model"]), sz["recompute_lengths"], mrt, reps, on_gpu,
                ceil["peak_flops"], ceil["bandwidth"],
            )  # fmt: skip
            tick("recompute", t0)
        if "engine" in sections:
            t0 = time.perf_counter()
            result["engine"] = _run_engine_section(sz, model, ceil["copy_bandwidth"], mrt, reps, log)
            models.clear()
            tick("engine", t0)
    result["goals"] = evaluate_goals(result)
    result["load_average_1m_end"] = timing._load_average()
    result["seconds"]["total"] = round(time.perf_counter() - t_start, 3)
    return _finite(result)


def _run_engine_section(
    sz: dict[str, Any],
    model: Callable[..., TorchModel],
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


def _write_json(path: str, result: dict[str, Any]) -> None:
    """Write ``result`` as strict JSON, atomically (a reader never sees half a file)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1, allow_nan=False)
        f.write("\n")
    os.replace(tmp, path)


def load_result(path: str | os.PathLike) -> dict[str, Any]:
    """A recorded benchmark JSON (e.g. ``src/kvtutor/data/runs/bench-cpu.json``, or a file `--out` wrote)."""
    with open(path) as f:
        return json.load(f)


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

    from . import perf_plots

    os.makedirs(directory, exist_ok=True)
    written = []
    for name, fn in perf_plots.BENCH_FIGURES.items():
        fig = fn(result)
        if fig is None:
            continue
        path = os.path.join(directory, f"{name}.png")
        fig.savefig(path, dpi=100, bbox_inches="tight")
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
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default=None,
                        help="default: bfloat16 on CUDA, float32 on a CPU")  # fmt: skip
    parser.add_argument("--sections", default=None, help="comma-separated subset of the sections")
    parser.add_argument("--threads", type=int, default=None, help="torch threads on a CPU (default: torch's)")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument("--plots", default=None, help="write PNG figures into this directory")
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:  # a missing extra stops the run here, before anything is measured
        import torch

        if args.plots:
            import matplotlib  # noqa: F401
    except ModuleNotFoundError as exc:
        from . import _missing_extra

        error = _missing_extra(exc, "--plots" if exc.name == "matplotlib" else "the benchmark")
        if error is None:
            raise
        parser.exit(2, f"{parser.prog}: error: {error}\n")

    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: CUDA is not available on this machine")
    threads = torch.get_num_threads()
    if args.threads is not None:
        if args.threads < 1:
            parser.error(f"--threads: expected >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    try:
        size = args.size or (bench_size(True, args.device or "cpu") if args.quick else None)
        sections = args.sections.split(",") if args.sections else None
        log = _log_line  # a line per section on stderr (beside the bar on a terminal)
        save = None if not args.out else (lambda partial: _write_json(args.out, partial))
        result = run(args.device, size, None, args.dtype, sections, log=log, checkpoint=save)
    except ValueError as exc:
        parser.error(str(exc))
    finally:
        torch.set_num_threads(threads)
    result["command"] = "python -m kvtutor bench " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.out:
        _write_json(args.out, result)
    if args.plots:
        for path in _write_plots(result, args.plots):
            print(f"wrote {path}")
    print(summary(result))
    if args.out:
        print(f"wrote {args.out}")
    return 0
