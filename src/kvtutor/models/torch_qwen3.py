"""Qwen3 in PyTorch, batched: ``TorchLlamaModel`` over the NumPy twin's config and weights.

Everything Qwen3 changes is already in the Llama-style steps: the QK-norm gains each layer carries
(``torch_llama.attention`` applies them before RoPE) and the config (``qwen3.Qwen3Config``). The
packing, the passes, the caches and the CUDA-graph step are the base's.
"""

from __future__ import annotations

from .qwen3 import Qwen3Model
from .torch_llama import TorchLlamaModel

__all__ = ["TorchQwen3Model"]


class TorchQwen3Model(TorchLlamaModel):
    """Qwen3 in PyTorch: CUDA (bf16) when present, else the CPU (float32). Build it with ``random``,
    ``from_numpy`` (a ``Qwen3Model``) or ``from_state_dict`` (a ``Qwen3ForCausalLM`` state dict
    and its config.json)."""

    numpy_class = Qwen3Model
