"""kvtutor: prefill, decode and the KV cache, in small readable code.

Dimension key (tensor names end in their dimensions, e.g. ``x_TD``, ``q_HTK``, ``scores_HTS``):

====  ============================================
B     batch (sequences decoded together)
T     new (query) tokens in this pass
S     keys attended: cached + new
M     cache capacity (max_seq_len)
H     attention heads (query heads)
K     head dimension (d_head)
D     model width (d_model)
F     feed-forward width (d_ff)
V     vocabulary size
L     layers
====  ============================================

Prefill has T = S (the whole prompt); decode has T = 1 (one new token, S = cached + 1).
"""

from __future__ import annotations

from typing import Any

from .cache import ConcatKVCache, KVCache, PreallocatedKVCache
from .config import TOY_CONFIG, ModelConfig
from .numpy_model import NumpyModel
from .tokenizer import ToyTokenizer
from .toy import TOY_PROMPT, load_toy_model, load_toy_tokenizer

__version__ = "0.1.0"

__all__ = [
    "ModelConfig",
    "TOY_CONFIG",
    "TOY_PROMPT",
    "NumpyModel",
    "KVCache",
    "PreallocatedKVCache",
    "ConcatKVCache",
    "ToyTokenizer",
    "load_toy_model",
    "load_toy_tokenizer",
    "TorchModel",
]


def __getattr__(name: str) -> Any:
    # torch is optional: kvtutor imports without it, TorchModel needs it
    if name == "TorchModel":
        from .torch_model import TorchModel

        return TorchModel
    raise AttributeError(f"module 'kvtutor' has no attribute {name!r}")
