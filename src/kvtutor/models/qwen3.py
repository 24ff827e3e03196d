"""Qwen3 in NumPy: the Llama-style decoder plus QK-norm, loaded from a Hugging Face config and state
dict. What the family adds is a config (``Qwen3Config``: ``model_type`` "qwen3", QK-norm on, RoPE's
base 10^6 by default) and the two gains per layer that QK-norm reads (``q_norm`` and ``k_norm`` in
Hugging Face's names); the block that applies them is ``llama.attention``'s, and everything else
(cache, passes, generation) is ``NumpyDecoder``'s.

QK-norm divides every query and key head by its root mean square before RoPE turns it: the scores
q . k stay bounded whatever the projections grow to. For the cache it changes nothing but what is
stored: the keys are normalised, then rotated, then cached, so a Qwen3 cache holds exactly the
[L, Hkv, M, K] a Llama cache of the same sizes holds (``kvtutor.models.model_spec`` counts it the
same way).
"""

from __future__ import annotations

from dataclasses import dataclass

from .llama import LlamaConfig, LlamaModel

__all__ = ["Qwen3Config", "Qwen3Model"]


@dataclass(frozen=True)
class Qwen3Config(LlamaConfig):
    """Sizes of a Qwen3 decoder: a ``LlamaConfig`` with QK-norm, ``d_head`` often not
    ``d_model // n_heads`` (128 in the published models), and RoPE's base 1,000,000."""

    rope_theta: float = 1_000_000.0
    qk_norm: bool = True

    MODEL_TYPES = ("qwen3",)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.qk_norm:
            raise ValueError("qk_norm: expected True (every Qwen3 layer normalises q and k), got False")


class Qwen3Model(LlamaModel):
    """Qwen3 in NumPy, float32 by default: ``LlamaModel`` with ``Qwen3Config`` (its QK-norm gains are
    in each layer's ``q_norm_K`` and ``k_norm_K``). Build it with ``random`` or ``from_state_dict``
    (a ``Qwen3ForCausalLM`` state dict and its config.json)."""

    config_class = Qwen3Config
    config: Qwen3Config
