"""Read a Hugging Face ``config.json`` into the few numbers that size the KV cache and the weights.

Two families of keys are understood:

* GPT-2 (``model_type: "gpt2"``): ``n_embd``, ``n_head``, ``n_layer``, ``n_positions``, ``n_inner``,
  ``vocab_size``. LayerNorm with biases, learned positions, a GELU MLP, biases everywhere.
* Llama and its relatives (``llama``, ``mistral``, ``mixtral``, ``qwen2``, ``qwen3``, ``gemma``,
  ``gemma2``, ``gemma3_text``, and any config with ``hidden_size``): ``hidden_size``,
  ``num_attention_heads``, ``num_key_value_heads``, ``head_dim``, ``num_hidden_layers``,
  ``intermediate_size``, ``max_position_embeddings``, ``sliding_window``, ``vocab_size``,
  ``tie_word_embeddings``. RMSNorm, rotary positions (no weights), a gated MLP
  (gate, up and down projections), optionally several experts (``num_local_experts``).

A bundled table of well-known models' published configs lives in ``kvtutor/data/configs``
(``bundled_models()``); ``load_model_spec("llama-3-8b")`` reads one of those, and
``load_model_spec("path/to/config.json")`` reads any file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from .config import ModelConfig

__all__ = [
    "ModelSpec",
    "spec_from_dict",
    "read_hf_config",
    "bundled_models",
    "bundled_config_path",
    "load_model_spec",
]

#: model_type values whose configs use the Llama key names and a gated MLP
LLAMA_STYLE = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text")

# Defaults that the real config classes use when a key is absent from config.json.
_TIED_BY_DEFAULT = {"gpt2": True, "gemma": True, "gemma2": True, "gemma3_text": True}
_QKV_BIAS = {"qwen2"}  # Qwen2 always has biases on q, k and v (not on o)
_FOUR_NORMS = {"gemma2", "gemma3_text"}  # a norm before and after both attention and MLP


@dataclass(frozen=True)
class ModelSpec:
    """The sizes of a real model that decide its KV-cache and weight memory.

    ``arch`` is ``"gpt2"`` (LayerNorm with biases, learned positions, GELU MLP with biases) or
    ``"gated"`` (RMSNorm, rotary positions, gated MLP without biases, ``n_experts`` copies of it
    when the model is a mixture of experts). ``sliding_window`` is the number of most recent
    tokens that ``n_sliding_layers`` of the layers attend to (and so need to keep); the other
    layers attend to, and keep, the whole context.
    """

    name: str
    model_type: str
    arch: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    d_ff: int
    vocab_size: int
    max_seq_len: int
    sliding_window: int | None = None
    n_sliding_layers: int = 0
    tie_word_embeddings: bool = False
    attention_bias: str = ""  # "" none, "qkv" (Qwen2), "qkvo" (Llama's attention_bias=true)
    n_experts: int = 1
    norms_per_layer: int = 2

    def __post_init__(self) -> None:
        for key in ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_head", "d_ff", "vocab_size"):
            _check_positive_int(key, getattr(self, key))
        _check_positive_int("max_seq_len", self.max_seq_len)
        _check_positive_int("n_experts", self.n_experts)
        if self.arch not in ("gpt2", "gated"):
            raise ValueError(f"arch: expected 'gpt2' or 'gated', got {self.arch!r}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_kv_heads: expected a divisor of n_heads={self.n_heads}, got {self.n_kv_heads}"
            )
        if self.sliding_window is not None:
            _check_positive_int("sliding_window", self.sliding_window)
        if not 0 <= self.n_sliding_layers <= self.n_layers:
            raise ValueError(f"n_sliding_layers: expected 0 .. {self.n_layers}, got {self.n_sliding_layers}")
        if self.n_sliding_layers and self.sliding_window is None:
            raise ValueError("n_sliding_layers: expected 0 when sliding_window is None")
        if self.attention_bias not in ("", "qkv", "qkvo"):
            raise ValueError(f"attention_bias: expected '', 'qkv' or 'qkvo', got {self.attention_bias!r}")

    # ------------------------------------------------------------ derived sizes
    @property
    def group_size(self) -> int:
        """Query heads that share one KV head: 1 is multi-head, n_heads is multi-query attention."""
        return self.n_heads // self.n_kv_heads

    @property
    def attention_kind(self) -> str:
        """'MHA', 'GQA' or 'MQA'."""
        if self.n_kv_heads == self.n_heads:
            return "MHA"
        return "MQA" if self.n_kv_heads == 1 else "GQA"

    @property
    def kv_width(self) -> int:
        """Numbers stored per token per layer for K (and again for V): n_kv_heads x d_head."""
        return self.n_kv_heads * self.d_head

    @property
    def n_full_layers(self) -> int:
        """Layers that attend to (and cache) the whole context."""
        return self.n_layers - self.n_sliding_layers

    def cached_tokens(self, seq_len: int) -> int:
        """Token rows kept over all layers for a sequence of seq_len tokens (window-aware)."""
        _check_positive_int("seq_len", seq_len)
        windowed = min(seq_len, self.sliding_window) if self.sliding_window else seq_len
        return self.n_full_layers * seq_len + self.n_sliding_layers * windowed

    @property
    def n_params(self) -> int:
        """Weight count estimate from the sizes (exact for the bundled models, tied matrices counted once)."""
        d, f, v = self.d_model, self.d_ff, self.vocab_size
        q_width, kv = self.n_heads * self.d_head, self.kv_width
        head = 0 if self.tie_word_embeddings else v * d
        if self.arch == "gpt2":
            per_layer = (
                2 * d  # ln_1
                + d * (q_width + 2 * kv) + (q_width + 2 * kv)  # W_Q, W_K, W_V and biases
                + q_width * d + d  # W_O
                + 2 * d  # ln_2
                + d * f + f + f * d + d  # c_fc, c_proj
            )  # fmt: skip
            return v * d + self.max_seq_len * d + self.n_layers * per_layer + 2 * d + head
        bias = {"": 0, "qkv": q_width + 2 * kv, "qkvo": q_width + 2 * kv + d}[self.attention_bias]
        attn = d * q_width + 2 * d * kv + q_width * d + bias
        mlp = self.n_experts * 3 * d * f + (d * self.n_experts if self.n_experts > 1 else 0)  # + router
        per_layer = attn + mlp + self.norms_per_layer * d
        return v * d + self.n_layers * per_layer + d + head

    def to_model_config(self, max_seq_len: int | None = None, vocab_size: int | None = None) -> ModelConfig:
        """A ``ModelConfig`` with the same attention shapes (so the same KV cache layout).

        For a GPT-2 config this is the model itself. For a gated (Llama-style) model the NumPy
        model built from it is GPT-2-style: its cache has the same shape per token, its weights
        do not (use ``n_params`` for those). Needs ``n_heads * d_head == d_model``.
        """
        if self.n_heads * self.d_head != self.d_model:
            raise ValueError(
                f"spec: ModelConfig needs n_heads * d_head == d_model, got {self.n_heads} * "
                f"{self.d_head} != {self.d_model} for {self.name}"
            )
        return ModelConfig(
            vocab_size=self.vocab_size if vocab_size is None else vocab_size,
            d_model=self.d_model,
            n_heads=self.n_heads,
            n_layers=self.n_layers,
            max_seq_len=self.max_seq_len if max_seq_len is None else max_seq_len,
            d_ff=self.d_ff,
            n_kv_heads=self.n_kv_heads,
        )

    @classmethod
    def from_model_config(cls, config: ModelConfig, name: str = "kvtutor") -> ModelSpec:
        """The spec of a kvtutor ``ModelConfig`` (a GPT-2-style model, tied embeddings)."""
        return cls(
            name=name, model_type="gpt2", arch="gpt2", n_layers=config.n_layers, d_model=config.d_model,
            n_heads=config.n_heads, n_kv_heads=config.n_kv_heads, d_head=config.d_head, d_ff=config.d_ff,
            vocab_size=config.vocab_size, max_seq_len=config.max_seq_len, tie_word_embeddings=True,
        )  # fmt: skip


# ---------------------------------------------------------------- reading config.json


def _check_positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected a positive int, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{name}: expected a positive int, got {value}")
    return value


class _Reader:
    """Looks keys up in one config dict; every error names the key and the file."""

    def __init__(self, cfg: Mapping[str, Any], where: str) -> None:
        self.cfg, self.where = cfg, where

    def _label(self, key: str) -> str:
        return f"config[{key!r}]" + (f" in {self.where}" if self.where else "")

    def has(self, key: str) -> bool:
        return self.cfg.get(key) is not None

    def int(self, key: str, default: int | None = None) -> int:
        value = self.cfg.get(key)
        if value is None:
            if default is not None:
                return default
            where = f" in {self.where}" if self.where else ""
            raise ValueError(f"config: missing key {key!r}{where}")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{self._label(key)}: expected a positive int, got {value!r}")
        return value

    def bool(self, key: str, default: bool) -> bool:
        value = self.cfg.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise ValueError(f"{self._label(key)}: expected true or false, got {value!r}")
        return value


def _sliding_layers(r: _Reader, model_type: str, n_layers: int) -> tuple[int | None, int]:
    """(window, number of layers that use it), following the rules of each config class."""
    window = r.int("sliding_window") if r.has("sliding_window") else None
    layer_types = r.cfg.get("layer_types")
    if layer_types is not None:
        if not isinstance(layer_types, list) or len(layer_types) != n_layers:
            raise ValueError(
                f"{r._label('layer_types')}: expected a list of {n_layers} strings, got {layer_types!r}"
            )
        n_sliding = sum(t == "sliding_attention" for t in layer_types)
        return (window, n_sliding) if window and n_sliding else (None, 0)
    if window is None:
        return None, 0
    if model_type == "qwen2":  # only with use_sliding_window, and only from layer max_window_layers on
        if not r.bool("use_sliding_window", False):
            return None, 0
        start = min(r.int("max_window_layers", 28), n_layers)
        return (window, n_layers - start) if start < n_layers else (None, 0)
    if not r.bool("use_sliding_window", True):
        return None, 0
    if model_type == "gemma2":  # layers 0, 2, 4, ... slide; the others see everything
        return window, (n_layers + 1) // 2
    if model_type == "gemma3_text":  # every pattern-th layer is global
        pattern = r.int("sliding_window_pattern", 6)
        return window, n_layers - n_layers // pattern
    return window, n_layers


def spec_from_dict(config: Mapping[str, Any], name: str = "", where: str = "") -> ModelSpec:
    """A parsed config.json (a dict) -> ``ModelSpec``; errors name the missing or bad key."""
    if not isinstance(config, Mapping):
        raise TypeError(f"config: expected a JSON object (dict), got {type(config).__name__}")
    if (
        not config.get("hidden_size")
        and not config.get("n_embd")
        and isinstance(config.get("text_config"), Mapping)
    ):
        config = config["text_config"]  # multimodal wrappers keep the language model's sizes here
    r = _Reader(config, where)
    model_type = config.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise ValueError(f"{r._label('model_type')}: expected a string, got {model_type!r}")
    name = name or str(config.get("_name_or_path") or model_type or "model")
    gpt2_keys = model_type == "gpt2" or (config.get("n_embd") is not None and not r.has("hidden_size"))
    if gpt2_keys:
        d_model, n_heads, n_layers = r.int("n_embd"), r.int("n_head"), r.int("n_layer")
        if d_model % n_heads:
            raise ValueError(f"{r._label('n_embd')}: expected a multiple of n_head={n_heads}, got {d_model}")
        max_seq_len = r.int("n_ctx") if r.has("n_ctx") and not r.has("n_positions") else r.int("n_positions")
        return ModelSpec(
            name=name, model_type=model_type or "gpt2", arch="gpt2", n_layers=n_layers, d_model=d_model,
            n_heads=n_heads, n_kv_heads=n_heads, d_head=d_model // n_heads,
            d_ff=r.int("n_inner", 4 * d_model), vocab_size=r.int("vocab_size"), max_seq_len=max_seq_len,
            tie_word_embeddings=r.bool("tie_word_embeddings", True),
        )  # fmt: skip
    if model_type is None and not r.has("hidden_size"):
        raise ValueError(
            "config: missing key 'hidden_size' (Llama-style) or 'n_embd' (GPT-2)"
            + (f" in {where}" if where else "")
        )
    model_type = model_type or "llama"
    d_model, n_heads, n_layers = (
        r.int("hidden_size"),
        r.int("num_attention_heads"),
        r.int("num_hidden_layers"),
    )
    n_kv_heads = r.int("num_key_value_heads", n_heads)  # absent in older (MHA) Llama configs
    if n_heads % n_kv_heads:
        raise ValueError(
            f"{r._label('num_key_value_heads')}: expected a divisor of "
            f"num_attention_heads={n_heads}, got {n_kv_heads}"
        )
    if not r.has("head_dim") and d_model % n_heads:
        raise ValueError(
            f"{r._label('hidden_size')}: expected a multiple of num_attention_heads={n_heads} "
            f"(or an explicit head_dim), got {d_model}"
        )
    window, n_sliding = _sliding_layers(r, model_type, n_layers)
    bias = "qkv" if model_type in _QKV_BIAS else ("qkvo" if r.bool("attention_bias", False) else "")
    return ModelSpec(
        name=name, model_type=model_type, arch="gated", n_layers=n_layers, d_model=d_model,
        n_heads=n_heads, n_kv_heads=n_kv_heads, d_head=r.int("head_dim", d_model // n_heads),
        d_ff=r.int("intermediate_size"), vocab_size=r.int("vocab_size"),
        max_seq_len=r.int("max_position_embeddings"), sliding_window=window, n_sliding_layers=n_sliding,
        tie_word_embeddings=r.bool("tie_word_embeddings", _TIED_BY_DEFAULT.get(model_type, False)),
        attention_bias=bias, n_experts=r.int("num_local_experts", 1),
        norms_per_layer=4 if model_type in _FOUR_NORMS else 2,
    )  # fmt: skip


def read_hf_config(path: str | os.PathLike, name: str = "") -> ModelSpec:
    """A config.json file (or a model folder holding one) -> ``ModelSpec``."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path: expected a file path, got {type(path).__name__}")
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise ValueError(f"path: no such file {str(p)!r}")
    try:
        config = json.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"path: {str(p)!r} is not valid JSON ({exc})") from None
    if not isinstance(config, dict):
        raise ValueError(f"path: {str(p)!r} holds a JSON {type(config).__name__}, expected an object")
    default_name = p.parent.name if p.name == "config.json" else p.stem
    return spec_from_dict(config, name or default_name, where=str(p))


# ---------------------------------------------------------------- the bundled table


def _configs_dir() -> Path:
    return Path(str(resources.files("kvtutor") / "data" / "configs"))


def bundled_models() -> list[str]:
    """Names of the bundled published configs, e.g. ``'llama-3-8b'``, smallest model first."""
    names = [p.stem for p in _configs_dir().glob("*.json")]
    return sorted(names, key=lambda n: (read_hf_config(bundled_config_path(n)).n_params, n))


def bundled_config_path(name: str) -> Path:
    """The path of a bundled config.json by model name (case-insensitive)."""
    if not isinstance(name, str):
        raise TypeError(f"name: expected a model name, got {type(name).__name__}")
    p = _configs_dir() / f"{name.lower()}.json"
    if not p.is_file():
        known = ", ".join(sorted(q.stem for q in _configs_dir().glob("*.json")))
        raise ValueError(f"name: no bundled config {name!r}; bundled: {known}")
    return p


def load_model_spec(name_or_path: str | os.PathLike) -> ModelSpec:
    """A bundled model name (``'mistral-7b'``) or a path to a config.json -> ``ModelSpec``."""
    if isinstance(name_or_path, str) and not os.path.exists(name_or_path):
        if (_configs_dir() / f"{name_or_path.lower()}.json").is_file():
            return read_hf_config(bundled_config_path(name_or_path), name=name_or_path.lower())
        if not name_or_path.endswith(".json") and os.sep not in name_or_path:
            bundled_config_path(name_or_path)  # raises with the list of bundled names
    return read_hf_config(name_or_path)
