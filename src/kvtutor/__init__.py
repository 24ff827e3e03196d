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
E, O  input and output width of a weight matrix ([E, O]: x_E in, y_O out)
N     a count of new tokens, points or pool blocks (the module says which)
P     token positions per block of the paged cache
J     pairs of dimensions rotated together by RoPE (K / 2)
====  ============================================

Prefill has T = S (the whole prompt); decode has T = 1 (one new token, S = cached + 1).
In the book's prose and math the head width is written d_h and the vocabulary size n_vocab (K and
V there are the key and value matrices); the code's suffixes keep K and V.
"""

from __future__ import annotations

import importlib
from typing import Any

from .caches.kv import ConcatKVCache, PreallocatedKVCache
from .caches.protocol import KVCacheBase, Plan
from .extras import installed, missing_extra
from .models.config import TOY_CONFIG, GPT2Config
from .models.gpt2 import GPT2Model
from .models.llama import LlamaConfig, LlamaModel
from .models.qwen3 import Qwen3Config, Qwen3Model
from .models.tokenizer import ToyTokenizer
from .models.toy import TOY_PROMPT, load_toy_model, load_toy_tokenizer

__version__ = "0.1.0"

__all__ = [
    "GPT2Config",
    "TOY_CONFIG",
    "TOY_PROMPT",
    "GPT2Model",
    "LlamaConfig",
    "LlamaModel",
    "Qwen3Config",
    "Qwen3Model",
    "KVCacheBase",
    "Plan",
    "PreallocatedKVCache",
    "ConcatKVCache",
    "ToyTokenizer",
    "load_toy_model",
    "load_toy_tokenizer",
]

# torch is optional: kvtutor imports without it, TorchGPT2Model needs it (and `import *` offers it only then)
#: The names that need torch, and the module each comes from (imported on first use).
_TORCH_NAMES = {
    "TorchGPT2Model": "models.torch_gpt2",
    "TorchLlamaModel": "models.torch_llama",
    "TorchQwen3Model": "models.torch_qwen3",
}

if installed("torch"):
    __all__ += list(_TORCH_NAMES)


def __getattr__(name: str) -> Any:
    if name in _TORCH_NAMES:
        try:
            module = importlib.import_module(f".{_TORCH_NAMES[name]}", __name__)
        except ModuleNotFoundError as exc:
            error = missing_extra(exc, f"kvtutor.{name}")
            if error is None:
                raise
            raise error from None
        return getattr(module, name)
    raise AttributeError(f"module 'kvtutor' has no attribute {name!r}")
