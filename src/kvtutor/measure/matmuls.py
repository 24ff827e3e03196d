"""The matmuls of a model's own forward pass, timed on their own: the ceiling a prefill is held
against. Each shape is timed with BLAS's matmul and, on a CPU whose torch has oneDNN, with
oneDNN's on a weight packed once for it; the faster of the two counts (``model_matmul_probe``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..validate import dtype_info
from .timing import matmul_probe

__all__ = ["model_matmul_shapes", "model_matmul_probe", "measure_model_matmuls"]


def model_matmul_shapes(config: Any, n_tokens: int) -> list[dict[str, Any]]:
    """The weight products of a forward pass over n_tokens rows: name, [m, k, n], times each runs."""
    d, f, v, L = config.d_model, config.d_ff, config.vocab_size, config.n_layers
    qkv = (config.n_heads + 2 * config.n_kv_heads) * config.d_head
    return [
        {"name": "qkv", "shape": [n_tokens, d, qkv], "count": L},
        {"name": "attn_out", "shape": [n_tokens, d, d], "count": L},
        {"name": "ffn_up", "shape": [n_tokens, d, f], "count": L},
        {"name": "ffn_down", "shape": [n_tokens, f, d], "count": L},
        {"name": "lm_head", "shape": [n_tokens, d, v], "count": 1},
    ]


def model_matmul_probe(
    config: Any, n_tokens: int, device: str = "cpu", dtype: Any = "float32"
) -> Callable[..., dict[str, Any]]:
    """Allocate the operands of every weight product of the model once; return ``measure(min_run_time=
    0.2, num_threads=None)``, which times them now and returns what ``measure_model_matmuls`` does.

    Each shape is timed as BLAS's matmul (``torch.matmul``); on a CPU whose torch has oneDNN and
    in float32 or bfloat16, also as oneDNN's on a packed weight (``matmul_probe``'s), and the
    faster of the two counts: ``flops_per_s`` is the FLOPs of all the products over the sum of
    each shape's faster time, ``blas_flops_per_s`` and ``onednn_flops_per_s`` each library's own."""
    from ..models.torch_weights import onednn_available

    shapes = model_matmul_shapes(config, n_tokens)
    libraries = ["blas"]
    if str(device) == "cpu" and dtype_info(dtype).name in ("float32", "bfloat16") and onednn_available():
        libraries.append("onednn")
    probes = [{lib: matmul_probe(*item["shape"], device, dtype, lib) for lib in libraries} for item in shapes]

    def measure(min_run_time: float = 0.2, num_threads: int | None = None) -> dict[str, Any]:
        flops, seconds = 0, dict.fromkeys([*libraries, "best"], 0.0)
        rows = []
        for item, by_lib in zip(shapes, probes, strict=True):
            timed = {lib: probe(min_run_time, num_threads) for lib, probe in by_lib.items()}
            best = min(timed, key=lambda lib: timed[lib]["time"]["median_s"])
            r = {**timed[best], "name": item["name"], "count": item["count"], "library": best}
            r["by_library"] = {lib: t["flops_per_s"] for lib, t in timed.items()}
            flops += r["flops"] * item["count"]
            for lib in (*timed, "best"):
                seconds[lib] += timed[best if lib == "best" else lib]["time"]["median_s"] * item["count"]
            rows.append(r)
        return {"n_tokens": n_tokens, "dtype": dtype_info(dtype).name, "shapes": rows, "flops": flops,
                "time_s": seconds["best"], "flops_per_s": flops / seconds["best"],
                **{f"{lib}_flops_per_s": flops / seconds[lib] for lib in libraries}}  # fmt: skip

    return measure


def measure_model_matmuls(
    config: Any,
    n_tokens: int,
    device: str = "cpu",
    dtype: Any = "float32",
    min_run_time: float = 0.2,
    num_threads: int | None = None,
) -> dict[str, Any]:
    """FLOP/s of the faster of BLAS's and oneDNN's matmul in each of the model's own shapes, and
    all together: the FLOPs of one forward pass's weight products divided by the time those
    products take on their own (``model_matmul_probe``)."""
    return model_matmul_probe(config, n_tokens, device, dtype)(min_run_time, num_threads)
