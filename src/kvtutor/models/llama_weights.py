"""The Llama-style family's configuration and weights: ``LlamaConfig`` (read from a Hugging Face
``config.json`` by ``from_hf``), ``LlamaWeights`` (its ``schema`` derived from a config, checked by
``check``) and the mapping to and from Hugging Face names (``hf_shapes``, ``build_weights``). The
model that runs them is ``kvtutor.models.llama``'s; Qwen3 (``kvtutor.models.qwen3``) adds QK-norm.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ..text import fields_call
from ..validate import check_scale
from .hf_config import spec_from_dict
from .weight_schema import check_weights

__all__ = ["LlamaConfig", "LlamaLayerWeights", "LlamaWeights", "hf_shapes", "build_weights"]

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

    def named(self) -> dict[str, Any]:
        """Every weight by name (``"wte_VD"``, ``"layers[0].w_q"``, ...; None where a layer lacks
        QK-norm's gains), for ``check``; ``head_VD`` only where it is not ``wte_VD`` itself."""
        out = {"wte_VD": self.wte_VD, "norm_D": self.norm_D}
        if self.head_VD is not self.wte_VD:
            out["head_VD"] = self.head_VD
        for i, layer in enumerate(self.layers):
            out |= {f"layers[{i}].{f.name}": getattr(layer, f.name) for f in fields(layer)}
        return out

    @staticmethod
    def schema(config: LlamaConfig) -> dict[str, tuple[int, ...]]:
        """Every weight ``config`` describes -> its shape (the names of ``named``): QK-norm's gains
        only with ``qk_norm``, a separate ``head_VD`` only without ``tie_word_embeddings``."""
        d, f, k = config.d_model, config.d_ff, config.d_head
        q, kv = config.n_heads * k, config.n_kv_heads * k
        layer = {
            "attn_norm_D": (d,), "w_q": (d, q), "w_k": (d, kv), "w_v": (d, kv), "w_o": (q, d),
            "mlp_norm_D": (d,), "w_gate": (d, f), "w_up": (d, f), "w_down": (f, d),
        }  # fmt: skip
        if config.qk_norm:
            layer |= {"q_norm_K": (k,), "k_norm_K": (k,)}
        out = {"wte_VD": (config.vocab_size, d), "norm_D": (d,)}
        if not config.tie_word_embeddings:
            out["head_VD"] = (config.vocab_size, d)
        for i in range(config.n_layers):
            out |= {f"layers[{i}].{name}": shape for name, shape in layer.items()}
        return out

    def check(self, config: LlamaConfig) -> None:
        """These weights against ``config`` (``weight_schema.check_weights``): every one present,
        QK-norm's gains exactly when the config has QK-norm, the LM head the embedding itself when
        the config ties them, each of its shape, one floating dtype, finite, no extra layer."""
        if not isinstance(config, LlamaConfig):
            raise TypeError(f"config: expected a kvtutor LlamaConfig, got {type(config).__name__}")
        if config.tie_word_embeddings and self.head_VD is not self.wte_VD:
            raise ValueError(
                "head_VD: expected the token embedding wte_VD itself (the config ties them: "
                "tie_word_embeddings=True), got a separate array"
            )
        check_weights(self, config, self.schema(config), "rms_norm_eps")

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


def hf_shapes(cfg: LlamaConfig) -> dict[str, tuple[int, ...]]:
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


def build_weights(arrays: Mapping[str, np.ndarray], cfg: LlamaConfig) -> LlamaWeights:
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
