"""The CPU engine's own experiments (the ``bf16`` and ``batches`` sections; they run on CUDA too
when asked for by name): bfloat16 against float32, decode and prefill, on the products this CPU
chose; and decode steps of a few rows against the roofline.

Each times its candidates in alternating rounds and keeps ratios taken within a round: on a shared
machine the bandwidth moves between rounds more than a ratio does.
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..measure import costs, timing
from ..validate import dtype_info, torch_dtype
from .common import check_repeats, config_dict, device_of, random_ids, rewind, timed

if TYPE_CHECKING:
    from ..models.torch_gpt2 import TorchGPT2Model

__all__ = [
    "WORST_BATCH",
    "products_in_use",
    "model_products",
    "run_bf16_vs_fp32",
    "run_batch_sweep",
    "run_compiled_one_row",
]

#: The batch sweep's goal looks at decode steps of up to this many rows against one row's.
WORST_BATCH = 16


def products_in_use(dtype: Any) -> dict[str, Any]:
    """CPU: the products a model in ``dtype`` runs its large matrices through, one row, a few rows
    (8) and many (512), with the rates each choice was made by (``torch_weights``)."""
    from ..models import torch_weights as tw

    dt = torch_dtype(dtype)
    return {
        "one_row": tw.one_row_product(dt),
        "few_rows": tw.rows_product(dt, 8),
        "many_rows": tw.rows_product(dt, 512),
        "one_row_rates": dict(tw.one_row_rates(dt)) if tw.onednn_available() else None,
        "rows_rates": {k: dict(v) for k, v in tw.rows_rates(dt).items()} if tw.onednn_available() else None,
    }


def model_products(model: TorchGPT2Model) -> dict[str, dict[str, str]]:
    """CPU: the product each of a model's matrices (layer 0's and the LM head) runs one row, a few
    rows and many rows through: "packed" where it reads its packed copy, else "blas" or "onednn"
    (one row on the plain weights), as chosen when the model was built."""
    from ..models import torch_weights as tw

    layer = model.layers[0]
    named = {"w_qkv": layer.w_qkv_OE, "w_o": layer.w_o_OE, "lm_head": model.head_VD}
    for name in ("w_fc", "w_proj", "w_gate_up", "w_down"):
        if hasattr(layer, name):
            named[name] = getattr(layer, f"{name}_OE")
    out = {}
    for name, w_OE in named.items():
        packed = tw.packed_weight(w_OE)
        plain_one = "onednn" if tw.one_row_onednn(w_OE) else "blas"
        out[name] = {
            "one_row": "packed" if packed is not None and packed.one_row else plain_one,
            "few_rows": "packed" if packed is not None and packed.few_rows else "blas",
            "many_rows": "packed" if packed is not None and packed.many_rows else "blas",
        }
    return out


def _decode_fn(model: TorchGPT2Model, batch_size: int, context_len: int) -> Callable[[], Any]:
    """fn() runs one decode step of ``batch_size`` rows at ``context_len`` (the cache rewound after)."""
    cache = model.new_cache(batch_size, capacity=context_len)
    model.prefill(random_ids(model, batch_size, context_len - 1, seed=batch_size), cache)
    ids_B = random_ids(model, batch_size, 1, seed=batch_size + 1)[:, 0]

    def fn() -> Any:
        out = model.decode_step(ids_B, cache)
        rewind(cache, context_len - 1)
        return out

    return fn


def _prefill_fn(model: TorchGPT2Model, n_tokens: int) -> Callable[[], Any]:
    cache = model.new_cache(1, capacity=n_tokens)
    ids = random_ids(model, 1, n_tokens)

    def fn() -> Any:
        rewind(cache, 0)
        return model.prefill(ids, cache)

    return fn


def _paired(
    fns: dict[str, Callable[[], Any]], device: str, min_run_time: float, repeats: int
) -> tuple[dict[str, float], list[float]]:
    """Two callables timed in ``repeats`` alternating rounds -> ({name: the median round's
    seconds}, [each round's first time / second time]: the second's speed over the first's)."""
    rounds = [
        {name: timed(fn, device, min_run_time, 3, warmup=1).median_s for name, fn in fns.items()}
        for _ in range(repeats)
    ]
    a, b = fns
    ratios = [r[a] / r[b] for r in rounds]
    return {name: statistics.median(r[name] for r in rounds) for name in fns}, ratios


def run_bf16_vs_fp32(
    decode_models: dict[str, TorchGPT2Model],
    prefill_models: dict[str, TorchGPT2Model],
    context_len: int,
    n_tokens: int,
    min_run_time: float = 0.2,
    repeats: int = 5,
) -> dict[str, Any]:
    """Tokens/s of a batch-1 decode step and of a prefill of ``n_tokens``, the same model in bf16
    and float32 (``{"float32": model, "bfloat16": model}`` for each), timed in alternating rounds:
    ``speed_ratio`` = bf16 tokens/s / float32 tokens/s, the median of the rounds' own ratios.

    On a CPU it also records whether bf16 is native (``timing.native_bf16``), the vector flags and
    the products each dtype runs (``products_in_use``); ``slow`` is true where bf16 is not native
    or is slower than float32 in either pass (the benchmark marks it, the engine never hides it)."""
    check_repeats(repeats)
    device = device_of(decode_models["float32"])
    on_cpu = device == "cpu"
    out: dict[str, Any] = {"device": device}
    for name, models, make in (
        ("decode", decode_models, lambda m: _decode_fn(m, 1, context_len)),
        ("prefill", prefill_models, lambda m: _prefill_fn(m, n_tokens)),
    ):
        f32, b16 = models["float32"], models["bfloat16"]
        pair = {"float32": make(f32), "bfloat16": make(b16)}
        seconds, ratios = _paired(pair, device, min_run_time, repeats)
        tokens = 1 if name == "decode" else n_tokens
        out[name] = {
            "config": config_dict(f32.config),
            "context_len" if name == "decode" else "n_tokens": context_len if name == "decode" else n_tokens,
            "weight_bytes": {k: costs.decode_weight_bytes(m.config, m.dtype) for k, m in models.items()},
            "tokens_per_s": {k: tokens / s for k, s in seconds.items()},
            "speed_ratio": statistics.median(ratios),
            "rounds": ratios,
        }
    if on_cpu:
        import torch

        out["native_bf16"] = timing.native_bf16()
        out["cpu_flags"] = timing.cpu_flags()
        out["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        out["products"] = {dt: products_in_use(dt) for dt in ("float32", "bfloat16")}
        for dt in ("float32", "bfloat16"):  # what each matrix of the two models chose
            out["products"][dt]["decode_model"] = model_products(decode_models[dt])
            out["products"][dt]["prefill_model"] = model_products(prefill_models[dt])
    else:
        import torch

        out["native_bf16"] = bool(torch.cuda.is_bf16_supported())
    ratios = (out["decode"]["speed_ratio"], out["prefill"]["speed_ratio"])
    out["slow"] = not out["native_bf16"] or min(ratios) < 1
    out["note"] = (
        ("bf16 native" if out["native_bf16"] else "bf16 emulated on this CPU (no AMX or AVX512_BF16)")
        + f"; decode {ratios[0]:.2f}x, prefill {ratios[1]:.2f}x float32's tokens/s"
        + ("; SLOW: use float32 here" if out["slow"] else "")
    )
    return out


def run_batch_sweep(
    models: dict[str, TorchGPT2Model],
    batches: Sequence[int],
    context_len: int,
    peak_flops: dict[str, float],
    bandwidth: float,
    min_run_time: float = 0.2,
    repeats: int = 3,
) -> dict[str, Any]:
    """Decode step time at each batch size B against B = 1's, measured and ideal, for each model of
    ``models`` (one per dtype, e.g. ``{"float32": m}``): in ``repeats`` rounds every B is timed,
    and each point's ``ratio_to_b1`` is the median of the rounds' t(B) / t(1). The ideal is the
    roofline's (``costs.roofline_time`` with ``peak_flops[dtype]`` and ``bandwidth``): nearly 1
    while the step streams its weights, growing once it computes. ``worst_ratio_to_b1`` is the
    largest measured ratio for 1 < B <= ``WORST_BATCH`` (the goal: at most 1.3)."""
    check_repeats(repeats)
    batches = sorted(set(batches))
    if not batches or batches[0] != 1 or len(batches) < 2:
        raise ValueError(f"batches: expected batch sizes 1 and more, got {list(batches)}")
    out: dict[str, Any] = {"context_len": context_len, "batches": batches, "bandwidth": bandwidth,
                           "by_dtype": {}}  # fmt: skip
    for dt, model in models.items():
        device, cfg = device_of(model), model.config
        fns = {b: _decode_fn(model, b, context_len) for b in batches}
        rounds = []
        for _ in range(repeats):
            rounds.append({b: timed(fn, device, min_run_time, 3, warmup=1).median_s for b, fn in fns.items()})
        peak = peak_flops[dt]
        ideal = {b: costs.roofline_time(costs.decode_cost(cfg, context_len, b, model.dtype), peak, bandwidth)
                 for b in batches}  # fmt: skip
        points = []
        for b in batches:
            seconds = statistics.median(r[b] for r in rounds)
            points.append({
                "batch_size": b, "time_s": seconds, "tokens_per_s": b / seconds,
                "ratio_to_b1": statistics.median(r[b] / r[1] for r in rounds),
                "predicted_time_s": ideal[b], "predicted_ratio_to_b1": ideal[b] / ideal[1],
            })  # fmt: skip
        near = [p["ratio_to_b1"] for p in points if 1 < p["batch_size"] <= WORST_BATCH] or [1.0]
        entry: dict[str, Any] = {
            "config": config_dict(cfg), "dtype": dtype_info(model.dtype).name, "peak_flops": peak,
            "points": points, "worst_ratio_to_b1": max(near),
        }  # fmt: skip
        if device == "cpu":
            rows = {str(b): _rows_product(dt, b) for b in batches if b > 1}
            entry["products"] = {"one_row": products_in_use(dt)["one_row"], "rows": rows}
        out["by_dtype"][dt] = entry
    return out


def _rows_product(dtype: str, n_rows: int) -> str:
    from ..models import torch_weights as tw

    return tw.rows_product(torch_dtype(dtype), n_rows)


def run_compiled_one_row(
    dtype: Any = "bfloat16", n_out: int = 4096, n_in: int = 1024, n_mats: int = 12, rounds: int = 5
) -> dict[str, Any]:
    """CPU: one row through ``n_mats`` [n_out, n_in] matrices in ``dtype``, two ways, timed in
    alternating rounds (``torch_weights.fastest_rounds``: each its fastest round): oneDNN's matmul
    on its packed copy (the engine's bf16 product, ``torch_weights.pack``) and the product
    Inductor builds for it under ``torch.compile`` with frozen weights and ``max_autotune`` (its
    C++ GEMM templates, on AMX its micro-kernels, against oneDNN's: the faster one runs).

    Returns ``{"shape", "n_mats", "dtype", "bytes_per_s": {"packed", "inductor"},
    "inductor_over_packed", "compile_s"}``, or ``{"error": message}`` where the compiler cannot
    run (no C++ compiler, a torch without Inductor): the engine does not compile its CPU steps, so
    this records what that would win, per CPU."""
    import torch
    from torch._inductor import config as inductor_config

    from ..models import torch_weights as tw

    dt = torch_dtype(dtype)
    for name, value in (("n_out", n_out), ("n_in", n_in), ("n_mats", n_mats), ("rounds", rounds)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: expected a positive int, got {value!r}")
    g = torch.Generator().manual_seed(0)
    layers = torch.nn.ModuleList(torch.nn.Linear(n_in, n_out) for _ in range(n_mats)).to(dt).eval()
    x_1E = (torch.rand(1, n_in, generator=g) - 0.5).to(dt)
    packed = [(tw.pack(layer.weight.detach()), layer.bias.detach()) for layer in layers]

    class Products(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = layers

        def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
            return [layer(x) for layer in self.layers]

    settings = {
        "freezing": True,
        "max_autotune": True,
        "max_autotune_gemm_backends": "CPP,ATEN",
        "autotune_num_choices_displayed": 0,
        "max_autotune_report_choices_stats": False,
    }
    with torch.no_grad(), inductor_config.patch(settings), warnings.catch_warnings():
        warnings.filterwarnings("ignore", "TypedStorage is deprecated")  # Inductor's own autotuner's
        start = time.perf_counter()
        try:
            compiled = torch.compile(Products(), dynamic=False)
            want = compiled(x_1E)
        except Exception as err:  # noqa: BLE001  (no C++ compiler, a backend failure: recorded)
            first = (str(err).strip().splitlines() or [""])[0][:200]
            return {"error": f"{type(err).__name__}: {first}"}
        compile_s = time.perf_counter() - start

        def by_onednn() -> list[torch.Tensor]:
            return [tw.onednn_linear(x_1E, w, b) for w, b in packed]

        pairs = zip(want, by_onednn(), strict=True)
        if not all(torch.allclose(a.float(), b.float(), rtol=2e-2, atol=2e-2) for a, b in pairs):
            raise AssertionError("the compiled products and oneDNN's disagree")  # a wrong kernel is no result
        seconds = tw.fastest_rounds({"packed": by_onednn, "inductor": lambda: compiled(x_1E)}, rounds)
    size = n_mats * n_out * n_in * x_1E.element_size()
    rates = {name: size / s for name, s in seconds.items()}
    return {
        "shape": [n_out, n_in], "n_mats": n_mats, "dtype": dtype_info(dt).name, "bytes_per_s": rates,
        "inductor_over_packed": rates["inductor"] / rates["packed"], "compile_s": compile_s,
    }  # fmt: skip
