"""What the benchmark's experiments share: the models they build, random prompts, the cache rewound
between repeats, timed calls (each one counted for the progress display), the median of alternating
rounds, the model's weight products on their own, and the roofline ceilings of a probe.

torch and transformers are imported only when a function needs them.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..environment import check_output_path, write_atomically  # offered here too, as before
from ..measure import costs
from ..measure.timing import Measurement, time_fn
from ..models.config import GPT2Config
from ..validate import check_int, check_seed, dtype_info, torch_dtype
from .tables import MODELS

if TYPE_CHECKING:
    from ..models.torch_gpt2 import TorchGPT2Model

__all__ = [
    "MEASURED_HOOKS",
    "ceilings",
    "check_output_path",
    "check_repeats",
    "config_dict",
    "device_of",
    "fast_step",
    "finite",
    "make_model",
    "measure",
    "median_round",
    "point",
    "products_dict",
    "quiet_transformers",
    "random_ids",
    "rewind",
    "timed",
    "weight_products",
    "write_atomically",
]

#: called after every measurement the benchmark makes (``cli.run`` adds one that advances its progress)
MEASURED_HOOKS: list[Callable[[], None]] = []


def config_dict(cfg: GPT2Config) -> dict[str, Any]:
    """A config's sizes and its parameter count, as the result JSON records them."""
    return {
        "vocab_size": cfg.vocab_size, "d_model": cfg.d_model, "n_heads": cfg.n_heads,
        "n_kv_heads": cfg.n_kv_heads, "n_layers": cfg.n_layers, "d_ff": cfg.d_ff,
        "max_seq_len": cfg.max_seq_len, "n_params": cfg.n_params,
    }  # fmt: skip


def ceilings(probe: dict[str, Any], dtype: Any) -> dict[str, Any]:
    """The roofline of a probe: peak = square-matmul FLOP/s in dtype; bandwidth = the GEMV read
    bandwidth on a CPU, the device copy bandwidth on CUDA (the ceilings the goals divide by)."""
    name = dtype_info(dtype).name
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
    config: GPT2Config | str, device: str = "cpu", dtype: Any = None, seed: int = 0
) -> TorchGPT2Model:
    """A ``TorchGPT2Model`` with random weights, for a config or a name in MODELS."""
    from ..models.torch_gpt2 import TorchGPT2Model

    cfg = MODELS[config] if isinstance(config, str) else config
    dt = None if dtype is None else torch_dtype(dtype)
    on_device = str(device).startswith("cuda") and cfg.n_params > 5e8
    if on_device or cfg.n_params > 3e9:  # drawing billions of numbers in NumPy on the host takes minutes
        return TorchGPT2Model.random_on_device(cfg, seed=seed, device=device, dtype=dt)
    return TorchGPT2Model.random(cfg, seed=seed, device=device, dtype=dt)


def device_of(model: Any) -> str:
    """The model's device as a string ("cpu", "cuda", "cuda:1")."""
    return str(model.device)


def rewind(cache: Any, length: int) -> None:
    """Set the cache back to ``length`` tokens (what a timing loop needs between repeats)."""
    if not hasattr(cache, "truncate"):
        raise TypeError(f"cache: expected a cache with truncate(length), got {type(cache).__name__}")
    cache.truncate(length)


def random_ids(model: Any, batch_size: int, n_tokens: int, seed: int = 0) -> Any:
    """Seeded random token ids [batch_size, n_tokens] in the model's vocabulary, on its device."""
    import torch

    g = torch.Generator().manual_seed(check_seed(seed))
    ids = torch.randint(0, model.config.vocab_size, (batch_size, n_tokens), generator=g)
    return ids.to(model.device)


def measure(fn: Callable[[], Any], device: str, **kwargs: Any) -> Measurement:
    """``timing.time_fn``, then every hook in ``MEASURED_HOOKS`` (a tick of the progress display)."""
    m = time_fn(fn, device, **kwargs)
    for hook in MEASURED_HOOKS:
        hook()
    return m


def timed(
    fn: Callable[[], Any], device: str, min_run_time: float, repeats: int, warmup: int = 1
) -> Measurement:
    """``measure`` under ``torch.no_grad()``, with at least ``repeats`` samples."""
    import torch

    with torch.no_grad():
        return measure(fn, device, warmup=warmup, min_repeats=repeats, min_run_time=min_run_time)


def point(cost: costs.Cost, m: Measurement, **extra: Any) -> dict[str, Any]:
    """One point of a sweep: ``extra``, the time, the cost model's FLOPs, bytes and intensity, FLOP/s."""
    return {**extra, "time": m.as_dict(), "flops": cost.flops, "bytes": cost.bytes,
            "intensity": float(cost.intensity), "flops_per_s": cost.flops / m.median_s}  # fmt: skip


def fast_step(model: Any, cache: Any, fast: bool) -> tuple[Callable[[Any], Any], bool]:
    """-> (step, used_fast): the decode callable ``step(ids_B)``, the CUDA-graph fast path when asked
    for and available, else ``decode_step``; and whether it is the fast path."""
    if fast and device_of(model).startswith("cuda") and hasattr(model, "compile_decode"):
        step = model.compile_decode(cache, mode="cuda_graph")
        return (lambda ids_B: step(ids_B, check=False)), True
    return (lambda ids_B: model.decode_step(ids_B, cache)), False


def check_repeats(repeats: Any) -> int:
    """The number of alternating rounds: an int >= 1."""
    return check_int("repeats", repeats, 1)


def median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round whose ratio is the median (the lower middle one when the count is even)."""
    ranked = sorted(rounds, key=lambda r: r["ratio"])
    return ranked[(len(ranked) - 1) // 2]


def weight_products(model: TorchGPT2Model, n_rows: int) -> Callable[[], Any]:
    """-> fn() running every weight product of one forward pass over ``n_rows`` tokens back to back:
    the calls the model makes (``linear`` per layer matrix, ``lm_head``) on the model's own matrices,
    and nothing else. Inputs are allocated once. Timing it splits the gap between a forward pass and
    a probe in two: the products themselves, and everything between them."""
    import torch

    from ..models.torch_mirror import as_rows, linear, lm_head

    cfg = model.config
    g = torch.Generator().manual_seed(0)
    # one row on the CPU is a vector, as the model's own pass has it (``as_rows``: mat-vec products)
    x_1TD = as_rows(torch.randn(1, n_rows, cfg.d_model, generator=g).to(model.device, model.dtype))
    h_1TF = as_rows(torch.randn(1, n_rows, cfg.d_ff, generator=g).to(model.device, model.dtype))

    def products() -> Any:
        for ly in model.layers:
            linear(x_1TD, ly.w_qkv_OE, ly.b_qkv)
            linear(x_1TD, ly.w_o_OE, ly.b_o)
            linear(x_1TD, ly.w_fc_OE, ly.b_fc)
            linear(h_1TF, ly.w_proj_OE, ly.b_proj)
        return lm_head(x_1TD, model.head_VD)  # the head the model multiplies (padded on CUDA)

    return products


def products_dict(m: Measurement, amount: float, unit: str, ceiling: float) -> dict[str, Any]:
    """The weight products' timing: ``amount`` (bytes or FLOPs) per second and its ratio to the ceiling."""
    return {"time": m.as_dict(), f"{unit}_per_s": amount / m.median_s, "ratio": amount / m.median_s / ceiling}


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' logging at errors only and Python warnings ignored, inside the block."""
    import transformers

    old = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        transformers.logging.set_verbosity(old)


# ---------------------------------------------------------------- the files a run writes


def finite(obj: Any) -> Any:
    """inf / nan -> None, in nested dicts and lists too, so that the JSON is strict."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj
