"""The sizes of the benchmark: the model shapes it builds (``MODELS``) and, per device and size
(``tiny`` for tests, ``quick`` for CI, ``full`` for the goals), the models, lengths, batches and
time budgets of every section (``SIZES``, ``sizes()``)."""

from __future__ import annotations

from typing import Any

from ..measure.timing import bench_size
from ..models.config import GPT2Config

__all__ = ["MODELS", "SIZES", "sizes"]

#: The model shapes the benchmark uses (random weights; nothing is downloaded).
MODELS: dict[str, GPT2Config] = {
    "tiny": GPT2Config(vocab_size=512, d_model=64, n_heads=4, n_layers=2, max_seq_len=512),
    "small": GPT2Config(vocab_size=8192, d_model=256, n_heads=4, n_layers=4, max_seq_len=4096),
    "mid": GPT2Config(vocab_size=8192, d_model=512, n_heads=8, n_layers=6, max_seq_len=1024),
    "gpt2-small": GPT2Config(vocab_size=50257, d_model=768, n_heads=12, n_layers=12, max_seq_len=1024),
    "gpt2-medium": GPT2Config(vocab_size=50257, d_model=1024, n_heads=16, n_layers=24, max_seq_len=1024),
    "gpt2-1.3b": GPT2Config(vocab_size=50257, d_model=2048, n_heads=16, n_layers=24, max_seq_len=4096),
    # drawn on the device (TorchGPT2Model.random_on_device): too large to draw in NumPy
    "gpt2-6.7b": GPT2Config(vocab_size=50257, d_model=4096, n_heads=32, n_layers=32, max_seq_len=2048),
}

_TINY = {
    "roofline_model": "tiny", "prefill_lengths": [4, 8, 16], "decode_batches": [1, 2, 4],
    "decode_context": 8, "bandwidth_model": "tiny", "bandwidth_context": 8,
    "generate_small": ("tiny", 4, 4), "generate_gpt2": ("tiny", 4, 3),
    "prefill_goal": ("tiny", 16), "concat_model": "tiny", "concat_lengths": [4, 8, 16],
    "recompute_model": "tiny", "recompute_lengths": [4, 8, 16], "min_run_time": 0.005,
    "repeats": 2, "engine_model": "tiny", "engine_capacity": 128, "engine_context": 16,
    "engine_big_model": "tiny", "engine_generate": ("tiny", 4, 8), "engine_concat": ("tiny", 40),
    "bf16_decode_model": "tiny", "batch_model": "tiny", "batch_sizes": [1, 2, 4], "batch_context": 8,
    "compiled_one_row": (256, 128, 2),
}  # fmt: skip

#: What each size measures: model names from MODELS, lengths, batches; (model, prompt, new tokens)
#: for the generate comparison; (model, T) for the prefill-vs-matmul goal (and the bf16 section's
#: prefill); the bf16 section's decode model; the batch sweep's model, batch sizes and context.
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
            "engine_concat": ("small", 256), "bf16_decode_model": "gpt2-small",
            "batch_model": "gpt2-small", "batch_sizes": [1, 2, 4, 8, 16], "batch_context": 16,
            "compiled_one_row": (4096, 1024, 6),
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
            "engine_concat": ("small", 1024), "bf16_decode_model": "gpt2-medium",
            "batch_model": "gpt2-medium", "batch_sizes": [1, 2, 4, 8, 16, 32], "batch_context": 16,
            "compiled_one_row": (4096, 1024, 12),
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
            "engine_concat": ("small", 512), "bf16_decode_model": "gpt2-medium",
            "batch_model": "gpt2-medium", "batch_sizes": [1, 4, 16, 64], "batch_context": 16,
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
            "engine_concat": ("small", 2048), "bf16_decode_model": "gpt2-1.3b",
            "batch_model": "gpt2-1.3b", "batch_sizes": [1, 4, 16, 64, 256], "batch_context": 16,
        },
    },
}  # fmt: skip


def sizes(device: str = "cpu", size: str | None = None, quick: bool | None = None) -> dict[str, Any]:
    """The measurement sizes for a device: ``size`` if given, else ``timing.bench_size(quick, device)``."""
    kind = "cuda" if str(device).startswith("cuda") else "cpu"
    size = bench_size(quick, device) if size is None else size
    if size not in SIZES[kind]:
        raise ValueError(f"size: expected one of {sorted(SIZES[kind])}, got {size!r}")
    return {"size": size, **SIZES[kind][size]}
