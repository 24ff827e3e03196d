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

import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ..caches.protocol import KVCacheBase, Plan
from ..text import fields_call
from ..validate import check_float_dtype, check_scale, check_seed
from .gpt2_weights import weight_array
from .hf_config import spec_from_dict
from .numpy_base import NumpyDecoder
from .steps import attention_core, lm_head, merge_heads, record, split_heads, store_kv

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


# ---------------------------------------------------------------- the configuration


@dataclass(frozen=True)
class LlamaConfig:
    """Sizes of a Llama-style decoder.

    ``n_kv_heads`` defaults to ``n_heads`` (0 = default) and ``d_head`` to ``d_model // n_heads``;
    ``rope_theta`` is RoPE's base, ``rms_norm_eps`` RMSNorm's epsilon. ``tie_word_embeddings``
    makes the LM head the token embedding (as GPT-2 does); Llama's own checkpoints keep them apart.
    ``qk_norm`` adds an RMSNorm of width ``d_head`` on every query and key head before RoPE (Qwen3's
    QK-norm: ``kvtutor.models.qwen3``).
    """

    vocab_size: int
    d_model: int
    n_heads: int
    n_layers: int
    max_seq_len: int
    d_ff: int
    n_kv_heads: int = 0
    d_head: int = 0
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    qk_norm: bool = False

    #: the Hugging Face ``model_type`` values ``from_hf`` reads into this config
    MODEL_TYPES = ("llama",)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_heads", "n_layers", "max_seq_len", "d_ff"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name}: expected an int, got {type(value).__name__} {value!r}")
            if value < 1:
                raise ValueError(f"{name}: expected a positive int, got {value}")
        for name in ("n_kv_heads", "d_head"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name}: expected a non-negative int (0 = default), got {value!r}")
        if self.n_kv_heads == 0:
            object.__setattr__(self, "n_kv_heads", self.n_heads)
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_kv_heads: expected a divisor of n_heads={self.n_heads}, got {self.n_kv_heads}"
            )
        if self.d_head == 0:
            if self.d_model % self.n_heads:
                raise ValueError(
                    f"d_model: expected a multiple of n_heads={self.n_heads} (or an explicit d_head), "
                    f"got {self.d_model}"
                )
            object.__setattr__(self, "d_head", self.d_model // self.n_heads)
        if self.d_head % 2:
            raise ValueError(f"d_head: expected an even number (RoPE rotates pairs), got {self.d_head}")
        for name in ("rope_theta", "rms_norm_eps"):
            object.__setattr__(self, name, check_scale(name, getattr(self, name)))
        for name in ("tie_word_embeddings", "qk_norm"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name}: expected a bool, got {type(getattr(self, name)).__name__}")

    def __str__(self) -> str:
        """The same fields as ``repr()``, wrapped to fit ``TEXT_WIDTH`` columns."""
        return fields_call(self)

    @property
    def group_size(self) -> int:
        """Query heads that share one KV head (1 for plain multi-head attention)."""
        return self.n_heads // self.n_kv_heads

    @property
    def n_params(self) -> int:
        """Parameters, counting a tied embedding / LM head once (RoPE has none)."""
        d, f, q, kv = self.d_model, self.d_ff, self.n_heads * self.d_head, self.n_kv_heads * self.d_head
        per_layer = 2 * d + d * q + 2 * d * kv + q * d + 3 * d * f  # norms, W_Q, W_K, W_V, W_O, gate/up/down
        per_layer += 2 * self.d_head if self.qk_norm else 0  # QK-norm: one gain per head dimension, q and k
        head = 0 if self.tie_word_embeddings else self.vocab_size * d
        return self.vocab_size * d + self.n_layers * per_layer + d + head

    @classmethod
    def from_hf(cls, config: Mapping[str, Any]) -> Any:
        """A Hugging Face ``config.json`` (a dict) of this family -> its config; errors name the key.

        Sizes are read by ``kvtutor.models.hf_config.spec_from_dict`` (the calculator's reader), QK-norm
        too. Refused: a ``model_type`` outside ``MODEL_TYPES``, ``attention_bias``/``mlp_bias`` true,
        a sliding window, RoPE scaling (``rope_scaling`` or a ``rope_parameters`` type other than
        ``"default"``), and a ``hidden_act`` other than ``"silu"``.
        """
        if not isinstance(config, Mapping):
            raise TypeError(f"config: expected a config.json dict, got {type(config).__name__}")
        spec = spec_from_dict(config)
        if not config.get("hidden_size") and isinstance(config.get("text_config"), Mapping):
            config = config["text_config"]  # as spec_from_dict reads a multimodal wrapper
        if spec.model_type not in cls.MODEL_TYPES:
            want = " or ".join(repr(t) for t in cls.MODEL_TYPES)
            raise ValueError(f"config['model_type']: expected {want}, got {spec.model_type!r}")
        if spec.attention_bias:
            raise ValueError("config['attention_bias']: biases on q/k/v/o are not modelled; expected false")
        if spec.sliding_window is not None:
            raise ValueError(
                f"config['sliding_window']: expected none (every layer sees the whole context), "
                f"got {config.get('sliding_window')!r}"
            )
        act = config.get("hidden_act", "silu")
        if act != "silu":
            raise ValueError(f"config['hidden_act']: expected 'silu' (SwiGLU), got {act!r}")
        return cls(
            vocab_size=spec.vocab_size, d_model=spec.d_model, n_heads=spec.n_heads, n_layers=spec.n_layers,
            max_seq_len=spec.max_seq_len, d_ff=spec.d_ff, n_kv_heads=spec.n_kv_heads, d_head=spec.d_head,
            rope_theta=_rope_theta(config), rms_norm_eps=_number(config, "rms_norm_eps", 1e-6),
            tie_word_embeddings=spec.tie_word_embeddings, qk_norm=spec.qk_norm,
        )  # fmt: skip


def _number(config: Mapping[str, Any], key: str, default: float) -> float:
    value = config.get(key)
    if value is None:
        return default
    # a comparison, not math.isfinite: an int too large for a float (10**400) is refused, not an OverflowError
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= sys.float_info.max:
        raise ValueError(f"config[{key!r}]: expected a finite number > 0, got {value!r:.80}")
    return float(value)


def _rope_theta(config: Mapping[str, Any]) -> float:
    """RoPE's base from ``rope_parameters`` (transformers 5) or ``rope_theta`` (older configs);
    any RoPE scaling is refused, naming its key."""
    scaling = config.get("rope_scaling")
    if scaling is not None and (not isinstance(scaling, Mapping) or _rope_type(scaling) != "default"):
        raise ValueError(
            f"config['rope_scaling']: RoPE scaling is not modelled; expected none, got {scaling!r}"
        )
    params = config.get("rope_parameters")
    if params is None:
        return _number(config, "rope_theta", 10000.0)
    if not isinstance(params, Mapping) or _rope_type(params) != "default":
        raise ValueError(
            f"config['rope_parameters']: expected rope_type 'default' (RoPE scaling is not modelled), "
            f"got {params!r}"
        )
    return _number(params, "rope_theta", _number(config, "rope_theta", 10000.0))


def _rope_type(params: Mapping[str, Any]) -> Any:
    return params.get("rope_type", params.get("type", "default"))


# ---------------------------------------------------------------- the weights


@dataclass
class LlamaLayerWeights:
    """One block, every matrix stored [in, out] (applied as ``x @ W``). Shapes: norms [D];
    w_q [D, H*K], w_k and w_v [D, Hkv*K], w_o [H*K, D]; w_gate and w_up [D, F], w_down [F, D];
    with QK-norm (``config.qk_norm``) the gains q_norm_K and k_norm_K [K], else None."""

    attn_norm_D: np.ndarray
    w_q: np.ndarray
    w_k: np.ndarray
    w_v: np.ndarray
    w_o: np.ndarray
    mlp_norm_D: np.ndarray
    w_gate: np.ndarray
    w_up: np.ndarray
    w_down: np.ndarray
    q_norm_K: np.ndarray | None = None
    k_norm_K: np.ndarray | None = None


# Hugging Face names of a layer's weights, in LlamaLayerWeights' order; True: a Linear [out, in]
_HF_LAYER = (
    ("input_layernorm.weight", False), ("self_attn.q_proj.weight", True), ("self_attn.k_proj.weight", True),
    ("self_attn.v_proj.weight", True), ("self_attn.o_proj.weight", True),
    ("post_attention_layernorm.weight", False), ("mlp.gate_proj.weight", True),
    ("mlp.up_proj.weight", True), ("mlp.down_proj.weight", True),
    ("self_attn.q_norm.weight", False), ("self_attn.k_norm.weight", False),
)  # fmt: skip


def _layer_names(cfg: LlamaConfig) -> tuple[tuple[str, bool], ...]:
    """The Hugging Face names of one layer's weights under ``cfg`` (QK-norm's two gains or not)."""
    return _HF_LAYER if cfg.qk_norm else _HF_LAYER[:-2]


@dataclass
class LlamaWeights:
    """Token embedding wte [V, D], the blocks, the final norm [D], and the LM head [V, D]
    (the very same array as wte when the config ties them)."""

    wte_VD: np.ndarray
    layers: list[LlamaLayerWeights]
    norm_D: np.ndarray
    head_VD: np.ndarray

    def arrays(self) -> Iterator[np.ndarray]:
        yield from (self.wte_VD, self.norm_D)
        if self.head_VD is not self.wte_VD:
            yield self.head_VD
        for layer in self.layers:
            yield from (a for a in (getattr(layer, f.name) for f in fields(layer)) if a is not None)

    def to_state_dict(self) -> dict[str, np.ndarray]:
        """Hugging Face naming (``model.`` prefix, Linear weights [out, in]), as ``LlamaForCausalLM``
        and ``Qwen3ForCausalLM`` name them."""
        sd = {"model.embed_tokens.weight": self.wte_VD}
        for i, layer in enumerate(self.layers):
            for (name, is_linear), f in zip(_HF_LAYER, fields(layer), strict=True):
                w = getattr(layer, f.name)
                if w is not None:
                    sd[f"model.layers.{i}.{name}"] = np.ascontiguousarray(w.T) if is_linear else w
        sd["model.norm.weight"] = self.norm_D
        sd["lm_head.weight"] = self.head_VD
        return sd


def _expected_shapes(cfg: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Every key of a Hugging Face Llama state dict (no ``model.`` prefix) -> its shape."""
    d, f, q, kv = cfg.d_model, cfg.d_ff, cfg.n_heads * cfg.d_head, cfg.n_kv_heads * cfg.d_head
    shapes_in_order = [(d,), (q, d), (kv, d), (kv, d), (d, q), (d,), (f, d), (f, d), (d, f)]
    shapes_in_order += [(cfg.d_head,), (cfg.d_head,)] if cfg.qk_norm else []
    names = _layer_names(cfg)
    layer = {name: shape for (name, _), shape in zip(names, shapes_in_order, strict=True)}
    shapes = {"embed_tokens.weight": (cfg.vocab_size, d)}
    for i in range(cfg.n_layers):
        shapes |= {f"layers.{i}.{name}": shape for name, shape in layer.items()}
    shapes["norm.weight"] = (d,)
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (cfg.vocab_size, d)
    return shapes


def _build(arrays: Mapping[str, np.ndarray], cfg: LlamaConfig) -> LlamaWeights:
    """Arrays in Hugging Face naming and layout -> ``LlamaWeights`` (Linear weights transposed)."""

    def get(key: str, is_linear: bool) -> np.ndarray:
        return np.ascontiguousarray(arrays[key].T) if is_linear else arrays[key]

    layers = [
        LlamaLayerWeights(*(get(f"layers.{i}.{name}", lin) for name, lin in _layer_names(cfg)))
        for i in range(cfg.n_layers)
    ]
    wte = arrays["embed_tokens.weight"]
    head = wte if cfg.tie_word_embeddings else arrays["lm_head.weight"]
    return LlamaWeights(wte, layers, arrays["norm.weight"], head)


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
    trace: dict[str, np.ndarray] | None = None,
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
    v_new_HTK = split_heads(x_TD @ layer.w_v, config.n_kv_heads)
    if layer.q_norm_K is not None:  # QK-norm (Qwen3): q and k to unit RMS
        q_HTK = rms_norm(q_HTK, layer.q_norm_K, config.rms_norm_eps)
        k_new_HTK = rms_norm(k_new_HTK, layer.k_norm_K, config.rms_norm_eps)
    q_HTK = apply_rope(q_HTK, positions_T, config.rope_theta)
    k_rot_HTK = apply_rope(k_new_HTK, positions_T, config.rope_theta)
    k_HSK, v_HSK, mask_TS = store_kv(
        cache, layer_index, k_rot_HTK, v_new_HTK, plan
    )  # fmt: skip
    record(trace, k_unrotated_HTK=k_new_HTK, q_HTK=q_HTK)
    record(trace, k_HSK=k_HSK, v_HSK=v_HSK)
    o_HTK = attention_core(q_HTK, k_HSK, v_HSK, trace, mask_TS)
    out_TD = merge_heads(o_HTK) @ layer.w_o
    record(trace, o_HTK=o_HTK, attn_out_TD=out_TD)
    return out_TD


def block(
    x_TD: np.ndarray,
    layer: LlamaLayerWeights,
    config: LlamaConfig,
    positions_T: np.ndarray,
    cache: KVCacheBase | None = None,
    plan: Plan | None = None,
    layer_index: int = 0,
    trace: dict[str, np.ndarray] | None = None,
) -> np.ndarray:
    """[T,D], [T] -> [T,D]: x + attention(RMSNorm(x)), then x + SwiGLU(RMSNorm(x))."""
    eps = config.rms_norm_eps
    h_TD = rms_norm(x_TD, layer.attn_norm_D, eps)
    x_TD = x_TD + attention(h_TD, layer, config, positions_T, cache, plan, layer_index, trace)
    x_TD = x_TD + swiglu(rms_norm(x_TD, layer.mlp_norm_D, eps), layer)
    if trace is not None:
        trace["x_out_TD"] = x_TD
    return x_TD


# ---------------------------------------------------------------- the model


@dataclass
class LlamaModel(NumpyDecoder):
    """A Llama-style decoder in NumPy, float32 by default, on every cache: its cache, passes and
    generation are ``NumpyDecoder``'s; it supplies the embedding, the block and the head, and its
    config class (``config_class``: ``LlamaConfig``, Qwen3's for ``Qwen3Model``)."""

    config_class = LlamaConfig

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
        for key, shape in _expected_shapes(config).items():
            base, scale = (1.0, 0.1) if key.endswith("norm.weight") else (0.0, std)  # norms: gains near 1
            with np.errstate(over="ignore"):  # an overflow becomes inf, reported below
                arrays[key] = (base + scale * rng.standard_normal(shape)).astype(dtype)
            if not np.isfinite(arrays[key]).all():
                raise ValueError(
                    f"std: expected draws that fit {dtype}, got std={std!r}, which puts inf in {key!r} "
                    f"(the largest {dtype} is {np.finfo(dtype).max:.4g})"
                )
        return cls(config, _build(arrays, config))

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
        expected = _expected_shapes(cfg)
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
        return cls(cfg, _build(sd, cfg))

    def to_state_dict(self) -> dict[str, np.ndarray]:
        """The weights in Hugging Face naming, ``model.`` prefix included."""
        return self.weights.to_state_dict()

    # ------------------------------------------------------------ the three hooks
    def embed(self, ids_T: np.ndarray, positions_T: np.ndarray) -> np.ndarray:
        """[T], [T] -> [T,D]: token rows alone (positions enter each block through RoPE)."""
        return embed_tokens(ids_T, self.weights.wte_VD)

    def block(self, x_TD, layer_index, positions_T, cache, plan, trace=None, core=None):
        """[T,D] -> [T,D]: block ``layer_index``, its q and k turned for ``positions_T``. A
        replaced attention core (``core``: the book's wrong variants) is GPT-2's alone."""
        if core is not None:
            raise TypeError("core: expected None (a replaced attention core is GPT-2's), got a callable")
        layer = self.weights.layers[layer_index]
        return block(x_TD, layer, self.config, positions_T, cache, plan, layer_index, trace)

    def head(self, x_TD: np.ndarray) -> np.ndarray:
        """[T,D] -> [T,V]: the final RMSNorm, then the LM head (the embedding itself when tied)."""
        return lm_head(rms_norm(x_TD, self.weights.norm_D, self.config.rms_norm_eps), self.weights.head_VD)
