"""The NumPy reference model: GPT-2, one small function per step of the walkthrough.

Every function carries its shapes in the first line of its docstring; the dimension key is in
``kvtutor.__doc__``. What GPT-2 has of its own is here: learned position rows added at the input
(``embed``), LayerNorm, biased projections, the GELU feed-forward and the tied LM head; the steps
every family shares (heads, masks, softmax, attention, sampling) are ``kvtutor.models.steps``'s,
re-exported here so that the walkthrough reads from one module. ``GPT2Model`` supplies the three
hooks of ``NumpyDecoder`` (``embed``, ``block``, ``head``), which strings them into ``forward``,
``prefill`` (all prompt tokens at once) and ``decode_step`` (one token against the cache).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..caches.protocol import KVCacheBase, Plan
from .config import GPT2Config
from .gpt2_weights import GPT2Weights, LayerWeights, random_weights, weights_from_state_dict
from .numpy_base import NumpyDecoder
from .steps import (
    apply_mask,
    attend,
    attention_core,
    attention_scores,
    attention_weights,
    causal_mask,
    linear,
    lm_head,
    merge_heads,
    repeat_kv,
    sample,
    softmax,
    split_heads,
)

__all__ = [
    "embed",
    "layer_norm",
    "linear",
    "project_qkv",
    "split_heads",
    "repeat_kv",
    "attention_scores",
    "causal_mask",
    "apply_mask",
    "softmax",
    "attention_weights",
    "attend",
    "attention_core",
    "merge_heads",
    "gelu",
    "ffn",
    "attention",
    "block",
    "lm_head",
    "sample",
    "GPT2Model",
]


# ---------------------------------------------------------------- the steps, in walkthrough order


def embed(
    ids_T: np.ndarray,
    wte_VD: np.ndarray,
    wpe_MD: np.ndarray,
    start: int = 0,
) -> np.ndarray:
    """[T], [V,D], [M,D] -> [T,D]: token embedding plus the embedding of
    positions start .. start+T-1.

    The book shows this in "Prefill, step by step".
    """
    ids_T = np.asarray(ids_T)
    return wte_VD[ids_T] + wpe_MD[start : start + len(ids_T)]


def layer_norm(
    x_TD: np.ndarray,
    g_D: np.ndarray,
    b_D: np.ndarray,
    eps: float = 1e-5,
) -> np.ndarray:
    """[T,D], [D], [D] -> [T,D]

    The book shows this in "Prefill, step by step".
    """
    mean_T1 = x_TD.mean(axis=-1, keepdims=True)
    var_T1 = x_TD.var(axis=-1, keepdims=True)
    return (x_TD - mean_T1) / np.sqrt(var_T1 + eps) * g_D + b_D


def project_qkv(
    x_TD: np.ndarray,
    layer: LayerWeights,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[T,D] -> q [T,H*K], k [T,Hkv*K], v [T,Hkv*K]:
    X @ W_Q, X @ W_K, X @ W_V (plus biases).

    The book shows this in "Prefill, step by step".
    """
    return (
        linear(x_TD, layer.w_q, layer.b_q),
        linear(x_TD, layer.w_k, layer.b_k),
        linear(x_TD, layer.w_v, layer.b_v),
    )


def gelu(x: np.ndarray) -> np.ndarray:
    """[...] -> [...]: GELU, tanh approximation (GPT-2's 'gelu_new')."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def ffn(x_TD: np.ndarray, layer: LayerWeights) -> np.ndarray:
    """[T,D] -> [T,D]: W_fc [D,F], GELU, W_proj [F,D].

    The book shows this in "Prefill, step by step".
    """
    h_TF = gelu(linear(x_TD, layer.w_fc, layer.b_fc))
    return linear(h_TF, layer.w_proj, layer.b_proj)


def attention(
    x_TD: np.ndarray,
    layer: LayerWeights,
    config: GPT2Config,
    cache: KVCacheBase | None = None,
    plan: Plan | None = None,
    layer_index: int = 0,
) -> np.ndarray:
    """[T,D] -> [T,D]: causal self-attention of T new tokens. Without a
    cache they attend to each other; with one, their keys and values are
    stored first and the queries read every key it holds.

    The book shows this in "Prefill, step by step".
    """
    q_TD, k_TD, v_TD = project_qkv(x_TD, layer)
    q_HTK = split_heads(q_TD, config.n_heads)
    k_HSK = split_heads(k_TD, config.n_kv_heads)  # S = T: the new rows
    v_HSK = split_heads(v_TD, config.n_kv_heads)
    mask_TS = None  # the plain causal mask
    if cache is not None:  # store the new rows; read all S rows held
        k_HSK, v_HSK, mask_TS = cache.update(layer_index, k_HSK, v_HSK, plan)
    o_HTK = attention_core(q_HTK, k_HSK, v_HSK, mask_TS)
    return linear(merge_heads(o_HTK), layer.w_o, layer.b_o)


def block(
    x_TD: np.ndarray,
    layer: LayerWeights,
    config: GPT2Config,
    cache: KVCacheBase | None = None,
    plan: Plan | None = None,
    layer_index: int = 0,
) -> np.ndarray:
    """[T,D] -> [T,D]: x + attention(LN(x)), then x + FFN(LN(x))
    (pre-LayerNorm, as GPT-2).

    The book shows this in "Prefill, step by step".
    """
    eps = config.layer_norm_eps
    h_TD = layer_norm(x_TD, layer.ln1_g, layer.ln1_b, eps)
    x_TD = x_TD + attention(h_TD, layer, config, cache, plan, layer_index)
    return x_TD + ffn(layer_norm(x_TD, layer.ln2_g, layer.ln2_b, eps), layer)


# ---------------------------------------------------------------- the model


@dataclass
class GPT2Model(NumpyDecoder):
    """GPT-2 in NumPy, float32 by default: the model the book walks through. Its cache, passes
    and generation are ``NumpyDecoder``'s; it supplies the embedding, the block and the head."""

    config_class = GPT2Config
    weights_class = GPT2Weights
    traced = (block, attention, attention_core)  # what a trace reads (``tracing.capture_layers``)
    core_module = sys.modules[__name__]  # whose ``attention_core`` a ``core=`` replaces for a pass

    config: GPT2Config
    weights: GPT2Weights

    # ------------------------------------------------------------ construction
    @classmethod
    def random(cls, config: GPT2Config, seed: int = 0, dtype=np.float32) -> GPT2Model:
        """Random weights drawn as GPT-2 initialises them (normal, std 0.02)."""
        return cls(config, random_weights(config, seed, dtype))

    @classmethod
    def from_gpt2_state_dict(
        cls,
        state_dict: Mapping[str, Any],
        n_heads: int,
        n_kv_heads: int | None = None,
        dtype=np.float32,
        hf_config: Mapping[str, Any] | None = None,
    ) -> GPT2Model:
        """A Hugging Face GPT-2 ``state_dict`` (numpy arrays or torch tensors, with or without the
        ``transformer.`` prefix) -> model; sizes are read off the shapes. Bad weights (non-finite,
        not floating point, gaps in the layers, ...) are refused; with ``hf_config`` (config.json
        as a dict) the sizes must also match the config's, so a truncated checkpoint is caught."""
        config, weights = weights_from_state_dict(state_dict, n_heads, n_kv_heads, dtype, hf_config)
        return cls(config, weights)

    def to_gpt2_state_dict(self) -> dict[str, np.ndarray]:
        """The weights in Hugging Face GPT-2 naming, ``transformer.`` prefix included."""
        return self.weights.to_state_dict()

    # ------------------------------------------------------------ the three hooks
    def embed(self, ids_T: np.ndarray, positions_T: np.ndarray) -> np.ndarray:
        """[T], [T] -> [T,D]: token rows plus the learned rows of their positions."""
        return embed(ids_T, self.weights.wte_VD, self.weights.wpe_MD, int(positions_T[0]))

    def block(self, x_TD, layer_index, positions_T, cache, plan):
        """[T,D] -> [T,D]: block ``layer_index`` (positions entered at the input)."""
        layer = self.weights.layers[layer_index]
        return block(x_TD, layer, self.config, cache, plan, layer_index)

    def head(self, x_TD: np.ndarray) -> np.ndarray:
        """[T,D] -> [T,V]: the final LayerNorm, then the tied LM head."""
        w = self.weights
        return lm_head(layer_norm(x_TD, w.lnf_g, w.lnf_b, self.config.layer_norm_eps), w.wte_VD)
