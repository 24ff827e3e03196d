"""A Llama-style NumPy reference model beside GPT-2: RMSNorm, SwiGLU, RoPE, GQA, an untied LM head.

The steps mirror ``kvtutor.models.gpt2`` and share ``kvtutor.models.steps``'s ``split_heads``,
``merge_heads`` and ``attention_core`` (scores, causal mask, softmax, values, GQA). QK-norm (an
RMSNorm on every query and key head, ``LlamaConfig.qk_norm``) is the one step Qwen3 adds
(``kvtutor.models.qwen3``). What changes is where positions
enter: GPT-2 adds a learned row per position to the input; Llama adds nothing to the input and
instead rotates each query and key by an angle proportional to its position (RoPE). The cache
holds keys *after* rotation, so a new token's position must be the cache length: a token rotated
for the wrong position lands among keys rotated for theirs, and every score it takes part in is off.

``LlamaModel`` runs on the same caches as ``GPT2Model`` (``PreallocatedKVCache``,
``ConcatKVCache``, ``PagedKVPool.for_model(model, ...)``) through the same protocol; only the
forward pass differs. One letter joins the dimension key here: J = K/2, the pairs of dimensions
that RoPE rotates together (dimension j with dimension j + K/2, Hugging Face's "rotate half"
layout).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..caches.protocol import KVCacheBase, Plan
from ..validate import check_float_dtype, check_scale, check_seed
from .gpt2_weights import weight_array
from .llama_weights import LlamaConfig, LlamaLayerWeights, LlamaWeights, build_weights, hf_shapes
from .numpy_base import NumpyDecoder
from .steps import attention_core, lm_head, merge_heads, split_heads

__all__ = [
    "LlamaConfig",
    "LlamaLayerWeights",
    "LlamaWeights",
    "embed_tokens",
    "rms_norm",
    "rope_angles",
    "rope_tables",
    "rotate_half",
    "apply_rope",
    "silu",
    "swiglu",
    "attention",
    "block",
    "LlamaModel",
]


# ---------------------------------------------------------------- the steps, in walkthrough order


def embed_tokens(ids_T: np.ndarray, wte_VD: np.ndarray) -> np.ndarray:
    """[T], [V,D] -> [T,D]: the token's row only; no position is added (RoPE brings it later)."""
    return wte_VD[np.asarray(ids_T)]


def rms_norm(x_TD: np.ndarray, g_D: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """[T,D], [D] -> [T,D]: divide each row by its root mean square, then scale (no mean, no bias)."""
    ms_T1 = np.mean(x_TD * x_TD, axis=-1, keepdims=True)
    return x_TD / np.sqrt(ms_T1 + eps) * g_D


def rope_angles(
    positions_T: Any,
    d_head: int,
    theta: float = 10000.0,
) -> np.ndarray:
    """[T], K -> [T,J]: the angle position * theta^(-2j/K) by which pair j is
    turned (J = K/2).

    The book shows this in "RoPE and the cache".
    """
    j2_J = np.arange(0, d_head, 2, dtype=np.float64)  # 2j for each pair j
    inv_freq_J = theta ** (-j2_J / d_head)
    positions_T = np.asarray(positions_T, dtype=np.float64)
    return positions_T[:, None] * inv_freq_J[None, :]


def rope_tables(
    positions_T: Any,
    d_head: int,
    theta: float = 10000.0,
    dtype: Any = np.float32,
) -> tuple[np.ndarray, np.ndarray]:
    """[T], K -> cos [T,K], sin [T,K]: each pair's angle written twice, at j
    and at j + K/2.

    The book shows this in "RoPE and the cache".
    """
    angles_TJ = rope_angles(positions_T, d_head, theta)
    angles_TK = np.concatenate([angles_TJ, angles_TJ], axis=-1)
    return np.cos(angles_TK).astype(dtype), np.sin(angles_TK).astype(dtype)


def rotate_half(x_HTK: np.ndarray) -> np.ndarray:
    """[H,T,K] -> [H,T,K]: (x1, x2) -> (-x2, x1) for the two halves: each pair
    turned by 90 degrees.

    The book shows this in "RoPE and the cache".
    """
    half = x_HTK.shape[-1] // 2
    return np.concatenate([-x_HTK[..., half:], x_HTK[..., :half]], axis=-1)


def apply_rope(
    x_HTK: np.ndarray,
    positions_T: Any,
    theta: float = 10000.0,
) -> np.ndarray:
    """[H,T,K], [T] -> [H,T,K]: turn each pair (j, j + K/2) of token t by its
    angle at positions_T[t].

    The book shows this in "RoPE and the cache".
    """
    d_head = x_HTK.shape[-1]
    cos_TK, sin_TK = rope_tables(positions_T, d_head, theta, x_HTK.dtype)
    return x_HTK * cos_TK + rotate_half(x_HTK) * sin_TK


def silu(x: np.ndarray) -> np.ndarray:
    """[...] -> [...]: x * sigmoid(x), with sigmoid(x) = (1 + tanh(x/2)) / 2 (never overflows)."""
    return x * (0.5 * (1.0 + np.tanh(0.5 * x)))


def swiglu(x_TD: np.ndarray, layer: LlamaLayerWeights) -> np.ndarray:
    """[T,D] -> [T,D]: (SiLU(x W_gate) * x W_up) W_down, with W_gate, W_up [D,F] and W_down [F,D]."""
    h_TF = silu(x_TD @ layer.w_gate) * (x_TD @ layer.w_up)
    return h_TF @ layer.w_down


def attention(
    x_TD: np.ndarray,
    layer: LlamaLayerWeights,
    config: LlamaConfig,
    positions_T: np.ndarray,
    cache: KVCacheBase | None = None,
    plan: Plan | None = None,
    layer_index: int = 0,
) -> np.ndarray:
    """[T,D], [T] -> [T,D]: causal self-attention of T new tokens, queries and
    keys rotated by RoPE (after QK-norm, where the family has it).

    The keys are rotated for positions_T *before* they are stored: the cache
    holds rotated keys, which never turn again. positions_T must be the slots
    they go to, len(cache) .. len(cache)+T-1 (else: the book's off-by-one).

    The book shows this in "RoPE and the cache".
    """
    q_HTK = split_heads(x_TD @ layer.w_q, config.n_heads)
    k_new_HTK = split_heads(x_TD @ layer.w_k, config.n_kv_heads)
    v_HSK = split_heads(x_TD @ layer.w_v, config.n_kv_heads)
    if layer.q_norm_K is not None:  # QK-norm (Qwen3): q and k to unit RMS
        q_HTK = rms_norm(q_HTK, layer.q_norm_K, config.rms_norm_eps)
        k_new_HTK = rms_norm(k_new_HTK, layer.k_norm_K, config.rms_norm_eps)
    q_HTK = apply_rope(q_HTK, positions_T, config.rope_theta)
    k_HSK = apply_rope(k_new_HTK, positions_T, config.rope_theta)
    mask_TS = None  # the plain causal mask
    if cache is not None:  # store the rotated rows; read all S rows held
        k_HSK, v_HSK, mask_TS = cache.update(layer_index, k_HSK, v_HSK, plan)
    o_HTK = attention_core(q_HTK, k_HSK, v_HSK, mask_TS)
    return merge_heads(o_HTK) @ layer.w_o


def block(
    x_TD: np.ndarray,
    layer: LlamaLayerWeights,
    config: LlamaConfig,
    positions_T: np.ndarray,
    cache: KVCacheBase | None = None,
    plan: Plan | None = None,
    layer_index: int = 0,
) -> np.ndarray:
    """[T,D], [T] -> [T,D]: x + attention(RMSNorm(x)), then x + SwiGLU(RMSNorm(x))."""
    eps = config.rms_norm_eps
    h_TD = rms_norm(x_TD, layer.attn_norm_D, eps)
    x_TD = x_TD + attention(h_TD, layer, config, positions_T, cache, plan, layer_index)
    return x_TD + swiglu(rms_norm(x_TD, layer.mlp_norm_D, eps), layer)


# ---------------------------------------------------------------- the model


@dataclass
class LlamaModel(NumpyDecoder):
    """A Llama-style decoder in NumPy, float32 by default, on every cache: its cache, passes and
    generation are ``NumpyDecoder``'s; it supplies the embedding, the block and the head, and its
    config class (``config_class``: ``LlamaConfig``, Qwen3's for ``Qwen3Model``)."""

    config_class = LlamaConfig
    weights_class = LlamaWeights
    traced = (block, attention, attention_core)  # what a trace reads (``tracing.capture_layers``)
    trace_aliases = {"k_new_HTK": "k_unrotated_HTK"}  # the keys before RoPE turned them

    config: LlamaConfig
    weights: LlamaWeights

    # ------------------------------------------------------------ construction
    @classmethod
    def random(
        cls, config: LlamaConfig, seed: int = 0, dtype: Any = np.float32, std: float = 0.02
    ) -> LlamaModel:
        """Random weights: matrices normal(0, std) (Llama's own init uses 0.02), norm gains near 1.

        ``std`` must be finite and > 0 (nan or inf would give NaN logits, 0 a model that ignores
        its input), and small enough that the draws fit ``dtype``."""
        if not isinstance(config, cls.config_class):
            raise TypeError(f"config: expected a {cls.config_class.__name__}, got {type(config).__name__}")
        dtype = check_float_dtype(dtype)
        std = check_scale("std", std)
        rng = np.random.default_rng(check_seed(seed))
        arrays = {}
        for key, shape in hf_shapes(config).items():
            base, scale = (1.0, 0.1) if key.endswith("norm.weight") else (0.0, std)  # norms: gains near 1
            with np.errstate(over="ignore"):  # an overflow becomes inf, reported below
                arrays[key] = (base + scale * rng.standard_normal(shape)).astype(dtype)
            if not np.isfinite(arrays[key]).all():
                raise ValueError(
                    f"std: expected draws that fit {dtype}, got std={std!r}, which puts inf in {key!r} "
                    f"(the largest {dtype} is {np.finfo(dtype).max:.4g})"
                )
        return cls(config, build_weights(arrays, config))

    @classmethod
    def from_state_dict(
        cls, state_dict: Mapping[str, Any], config: Mapping[str, Any] | LlamaConfig, dtype: Any = np.float32
    ) -> Any:
        """A Hugging Face ``state_dict`` of this family (numpy arrays or torch tensors, with or without
        the ``model.`` prefix) and its ``config.json`` as a dict (or a config) -> model.

        Refused, naming the key: keys that are not strings, values that are not floating-point
        arrays or tensors, non-finite numbers, missing or unexpected keys (biases, an extra layer),
        wrong shapes, and a tied config whose ``lm_head.weight`` differs from ``embed_tokens.weight``.
        """
        if not isinstance(state_dict, Mapping):
            raise TypeError(
                f"state_dict: expected a mapping of names to arrays, got {type(state_dict).__name__}"
            )
        if isinstance(config, cls.config_class):
            cfg = config
        elif isinstance(config, Mapping):
            cfg = cls.config_class.from_hf(config)
        else:
            raise TypeError(
                f"config: expected a config.json dict or a {cls.config_class.__name__}, "
                f"got {type(config).__name__}"
            )
        dtype = check_float_dtype(dtype)
        sd: dict[str, np.ndarray] = {}
        for key, value in state_dict.items():
            if not isinstance(key, str):
                raise TypeError(f"state_dict: expected str keys, got {type(key).__name__} key {key!r}")
            short = key.removeprefix("model.")
            if short.endswith("rotary_emb.inv_freq"):  # a buffer older checkpoints saved: no weights
                continue
            arr = weight_array(value, key, dtype)
            if short in sd:
                raise ValueError(f"state_dict: key {key!r} given twice (with and without 'model.')")
            sd[short] = arr
        expected = hf_shapes(cfg)
        missing = [k for k in expected if k not in sd]
        if missing:
            raise ValueError(f"state_dict: missing key {missing[0]!r} ({len(missing)} missing in all)")
        tied_head = sd.pop("lm_head.weight", None) if cfg.tie_word_embeddings else None
        unexpected = [k for k in sd if k not in expected]
        if unexpected:
            raise ValueError(
                f"state_dict: unexpected key {unexpected[0]!r} (the config has {cfg.n_layers} layers "
                "and no biases)"
            )
        for key, shape in expected.items():
            if sd[key].shape != shape:
                raise ValueError(
                    f"state_dict[{key!r}]: expected shape {list(shape)}, got {list(sd[key].shape)}"
                )
        if tied_head is not None:
            wte = sd["embed_tokens.weight"]
            if tied_head.shape != wte.shape or not np.array_equal(tied_head, wte):
                raise ValueError(
                    "state_dict['lm_head.weight']: expected the token embedding embed_tokens.weight "
                    "(the config says tie_word_embeddings), got a different matrix"
                )
        return cls(cfg, build_weights(sd, cfg))

    def to_state_dict(self) -> dict[str, np.ndarray]:
        """The weights in Hugging Face naming, ``model.`` prefix included."""
        return self.weights.to_state_dict()

    # ------------------------------------------------------------ the three hooks
    def embed(self, ids_T: np.ndarray, positions_T: np.ndarray) -> np.ndarray:
        """[T], [T] -> [T,D]: token rows alone (positions enter each block through RoPE)."""
        return embed_tokens(ids_T, self.weights.wte_VD)

    def block(self, x_TD, layer_index, positions_T, cache, plan):
        """[T,D] -> [T,D]: block ``layer_index``, its q and k turned for ``positions_T``."""
        layer = self.weights.layers[layer_index]
        return block(x_TD, layer, self.config, positions_T, cache, plan, layer_index)

    def head(self, x_TD: np.ndarray) -> np.ndarray:
        """[T,D] -> [T,V]: the final RMSNorm, then the LM head (the embedding itself when tied)."""
        return lm_head(rms_norm(x_TD, self.weights.norm_D, self.config.rms_norm_eps), self.weights.head_VD)
