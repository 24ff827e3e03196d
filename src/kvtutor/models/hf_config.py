"""Read a Hugging Face ``config.json`` into the few numbers that size the KV cache and the weights.

The families understood, by ``model_type``:

* GPT-2 (``gpt2``) and StarCoder (``gpt_bigcode``): ``n_embd``, ``n_head``, ``n_layer``,
  ``n_positions``, ``n_inner``, ``vocab_size``; ``gpt_bigcode`` adds ``multi_query`` (true: one
  key/value head shared by every query head). LayerNorm with biases, learned positions, a GELU MLP,
  biases everywhere.
* Llama and its relatives (``llama``, ``mistral``, ``mixtral``, ``qwen2``, ``qwen3``, ``gemma``,
  ``gemma2``, ``gemma3_text``): ``hidden_size``, ``num_attention_heads``, ``num_key_value_heads``,
  ``head_dim``, ``num_hidden_layers``, ``intermediate_size``, ``max_position_embeddings``,
  ``sliding_window`` (and the rules each family has for which layers use it),
  ``vocab_size``, ``tie_word_embeddings``; Mixtral's experts (``num_local_experts``,
  ``num_experts_per_tok``). RMSNorm, rotary positions (no weights), a gated MLP.
* Qwen mixtures of experts (``qwen2_moe``, ``qwen3_moe``): ``num_experts``,
  ``num_experts_per_tok``, ``moe_intermediate_size``, ``shared_expert_intermediate_size``,
  ``decoder_sparse_step``, ``mlp_only_layers``.
* DeepSeek-V2 and V3 (``deepseek_v2``, ``deepseek_v3``): multi-head latent attention
  (``kv_lora_rank``, ``q_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``)
  and DeepSeek's experts (``n_routed_experts``, ``n_shared_experts``, ``num_experts_per_tok``,
  ``moe_intermediate_size``, ``first_k_dense_replace``, ``moe_layer_freq``). DeepSeek-V3's
  multi-token-prediction module (``num_nextn_predict_layers``) is not part of the model that
  generates text and is left out, as in the published 671B.

Anything else is refused with an error that names the key: a ``model_type`` not listed, or a key
that changes the sizes in a way this family's reader does not model (``kv_lora_rank`` in a Llama
config, ``mlp_bias: true``, an unknown ``layer_types`` entry, ...). A wrong number is worse than
no number.

A bundled table of well-known models' published configs lives in ``kvtutor/data/configs``
(``bundled_models()``); ``load_model_spec("llama-3-8b")`` reads one of those, and
``load_model_spec("path/to/config.json")`` reads any file. Nothing is ever downloaded.

Every reader returns a ``ModelSpec`` (defined in ``kvtutor.models.model_spec``, importable from here too).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from ..validate import MAX_COUNT, check_at_most
from .model_spec import ModelSpec

__all__ = [
    "ModelSpec",
    "MODEL_TYPES",
    "spec_from_dict",
    "read_hf_config",
    "bundled_models",
    "bundled_config_path",
    "load_model_spec",
]

#: model_type values whose configs use the Llama key names and a gated MLP
LLAMA_STYLE = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text")
QWEN_MOE = ("qwen2_moe", "qwen3_moe")
DEEPSEEK = ("deepseek_v2", "deepseek_v3")
GPT2_STYLE = ("gpt2", "gpt_bigcode")
#: every model_type the reader understands
MODEL_TYPES = GPT2_STYLE + LLAMA_STYLE + QWEN_MOE + DEEPSEEK

# Defaults that the real config classes use when a key is absent from config.json.
_TIED_BY_DEFAULT = {"gpt2": True, "gpt_bigcode": True, "gemma": True, "gemma2": True, "gemma3_text": True}
_FOUR_NORMS = {"gemma2", "gemma3_text"}  # a norm before and after both attention and MLP
_QK_NORM = {"qwen3", "qwen3_moe", "gemma3_text"}  # an RMSNorm of width d_head on every q and k head
_HEAD_DIM_DEFAULT = {"qwen3": 128, "gemma": 256, "gemma2": 256, "gemma3_text": 256}  # else D / H

# Keys that change the cache or the weight count somewhere. A family honours some of them; any
# other one, set to something other than "off", is refused rather than ignored.
_SIZING_KEYS = (
    "multi_query", "head_dim", "num_key_value_heads", "attention_bias", "qkv_bias", "mlp_bias",
    "sliding_window", "use_sliding_window", "max_window_layers", "layer_types", "sliding_window_pattern",
    "num_local_experts", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
    "shared_expert_intermediate_size", "decoder_sparse_step", "mlp_only_layers",
    "n_routed_experts", "n_shared_experts", "first_k_dense_replace", "moe_layer_freq",
    "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
    "num_nextn_predict_layers", "attention_chunk_size", "cross_attention_layers", "no_rope_layers",
)  # fmt: skip
_WINDOW_KEYS = ("sliding_window", "use_sliding_window", "layer_types")
_HONOURED: dict[str, set[str]] = {
    "gpt2": set(),
    "gpt_bigcode": {"multi_query", "num_key_value_heads"},  # transformers writes the latter: 1 or n_head
    "llama": {"head_dim", "num_key_value_heads", "attention_bias", "mlp_bias", *_WINDOW_KEYS},
    "mistral": {"head_dim", "num_key_value_heads", *_WINDOW_KEYS},
    "mixtral": {"head_dim", "num_key_value_heads", "num_local_experts", "num_experts_per_tok", *_WINDOW_KEYS},
    "qwen2": {"head_dim", "num_key_value_heads", "max_window_layers", *_WINDOW_KEYS},
    "qwen3": {"head_dim", "num_key_value_heads", "attention_bias", "max_window_layers", *_WINDOW_KEYS},
    "gemma": {"head_dim", "num_key_value_heads", "attention_bias"},
    "gemma2": {"head_dim", "num_key_value_heads", "attention_bias", *_WINDOW_KEYS},
    "gemma3_text": {
        "head_dim", "num_key_value_heads", "attention_bias", "sliding_window_pattern", *_WINDOW_KEYS,
    },
    "qwen2_moe": {
        "head_dim", "num_key_value_heads", "qkv_bias", "max_window_layers", "num_experts",
        "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size",
        "decoder_sparse_step", "mlp_only_layers", "num_local_experts", *_WINDOW_KEYS,
    },
    "qwen3_moe": {
        "head_dim", "num_key_value_heads", "attention_bias", "max_window_layers", "num_experts",
        "num_experts_per_tok", "moe_intermediate_size", "decoder_sparse_step", "mlp_only_layers",
        "num_local_experts", *_WINDOW_KEYS,
    },
    "deepseek_v2": {
        "num_key_value_heads", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
        "v_head_dim", "n_routed_experts", "n_shared_experts", "num_experts_per_tok",
        "moe_intermediate_size", "first_k_dense_replace", "moe_layer_freq",
        "head_dim",  # transformers writes qk_rope_head_dim here; checked in _mla_fields
    },
}  # fmt: skip
_HONOURED["deepseek_v3"] = _HONOURED["deepseek_v2"] | {"num_nextn_predict_layers"}


# ---------------------------------------------------------------- reading config.json


class _Reader:
    """Looks keys up in one config dict; every error names the key and the file."""

    def __init__(self, cfg: Mapping[str, Any], where: str) -> None:
        self.cfg, self.where = cfg, where

    def _label(self, key: str) -> str:
        return f"config[{key!r}]" + (f" in {self.where}" if self.where else "")

    def has(self, key: str) -> bool:
        return self.cfg.get(key) is not None

    def int(self, key: str, default: int | None = None, low: int = 1) -> int:
        value = self.cfg.get(key)
        if value is None:
            if default is not None:
                return default
            where = f" in {self.where}" if self.where else ""
            raise ValueError(f"config: missing key {key!r}{where}")
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            kind = "a positive int" if low == 1 else f"an int >= {low}"
            raise ValueError(f"{self._label(key)}: expected {kind}, got {_shown(value)}")
        return check_at_most(self._label(key), value, MAX_COUNT)

    def bool(self, key: str, default: bool) -> bool:
        value = self.cfg.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise ValueError(f"{self._label(key)}: expected true or false, got {_shown(value)}")
        return value

    def layer_list(self, key: str, n_layers: int) -> list[int]:
        value = self.cfg.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n_layers for i in value
        ):
            raise ValueError(
                f"{self._label(key)}: expected a list of layer indices 0 .. {n_layers - 1}, "
                f"got {_shown(value)}"
            )
        return value


def _shown(value: Any) -> str:
    """``repr(value)`` for a message, cut short past 200 characters (a config value can be huge)."""
    try:
        text = repr(value)
    except (RecursionError, ValueError):  # nested too deep, or an int of too many digits
        return f"a {type(value).__name__} too large to show"
    return text if len(text) <= 200 else f"{text[:150]}... ({len(text):,} characters)"


def _is_off(value: Any) -> bool:
    """None, false, 0, [] or "": a sizing key set this way changes nothing."""
    if value is None or value is False:
        return True
    if isinstance(value, int) and not isinstance(value, bool):
        return value == 0
    return value == [] or value == ""


def _check_honoured(r: _Reader, model_type: str) -> None:
    """A sizing key this family's reader does not model, set to anything but 'off', is an error."""
    honoured = _HONOURED[model_type]
    for key in _SIZING_KEYS:
        value = r.cfg.get(key)
        if key in honoured or _is_off(value):
            continue
        raise ValueError(
            f"{r._label(key)}: model_type {model_type!r} does not use this key, and the calculator "
            f"cannot honour {key}={_shown(value)}: it would change the sizes in a way it does not model"
        )
    if r.bool("mlp_bias", False):
        raise ValueError(f"{r._label('mlp_bias')}: biases on the MLP are not modelled; expected false")


def _sliding_layers(r: _Reader, model_type: str, n_layers: int) -> tuple[int | None, int]:
    """(window, number of layers that use it), following the rules of each config class."""
    window = r.int("sliding_window", 0, low=0) or None  # transformers writes 0 for "no window"
    layer_types = r.cfg.get("layer_types")
    if layer_types is not None:
        if not isinstance(layer_types, list) or len(layer_types) != n_layers:
            raise ValueError(
                f"{r._label('layer_types')}: expected a list of {n_layers} strings, got {_shown(layer_types)}"
            )
        unknown = sorted(  # a list, not a set: an entry may be a list or a dict
            [t for t in layer_types if t not in ("sliding_attention", "full_attention")], key=str
        )
        if unknown:
            raise ValueError(
                f"{r._label('layer_types')}: expected 'sliding_attention' or 'full_attention' entries, "
                f"got {_shown(unknown[0])} (not modelled)"
            )
        n_sliding = sum(t == "sliding_attention" for t in layer_types)
        if n_sliding and window is None:
            raise ValueError(f"{r._label('layer_types')}: sliding layers listed but no sliding_window")
        return (window, n_sliding) if window and n_sliding else (None, 0)
    if window is None:
        return None, 0
    if model_type in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe"):
        # only with use_sliding_window, and only from layer max_window_layers on
        if not r.bool("use_sliding_window", False):
            return None, 0
        start = min(r.int("max_window_layers", 28, low=0), n_layers)
        return (window, n_layers - start) if start < n_layers else (None, 0)
    if not r.bool("use_sliding_window", True):
        return None, 0
    if model_type == "gemma2":  # layers 0, 2, 4, ... slide; the others see everything
        return window, (n_layers + 1) // 2
    if model_type == "gemma3_text":  # every pattern-th layer is global
        pattern = r.int("sliding_window_pattern", 6)
        return window, n_layers - n_layers // pattern
    return window, n_layers


def _model_type(r: _Reader, config: Mapping[str, Any]) -> str:
    model_type = config.get("model_type")
    known = ", ".join(MODEL_TYPES)
    if model_type is None:
        where = f" in {r.where}" if r.where else ""
        raise ValueError(
            f"config: missing key 'model_type'{where}; expected one of {known} "
            '(add "model_type": "llama" for a Llama-style model)'
        )
    if not isinstance(model_type, str):
        raise ValueError(f"{r._label('model_type')}: expected a string, got {_shown(model_type)}")
    if model_type not in MODEL_TYPES:
        raise ValueError(
            f"{r._label('model_type')}: expected one of {known}, got {_shown(model_type)} "
            "(its cache layout is not known to the calculator, and a guess could be wrong)"
        )
    return model_type


def _gpt2_spec(r: _Reader, name: str, model_type: str) -> ModelSpec:
    d_model, n_heads, n_layers = r.int("n_embd"), r.int("n_head"), r.int("n_layer")
    if d_model % n_heads:
        raise ValueError(f"{r._label('n_embd')}: expected a multiple of n_head={n_heads}, got {d_model}")
    max_seq_len = r.int("n_ctx") if r.has("n_ctx") and not r.has("n_positions") else r.int("n_positions")
    n_kv_heads = n_heads
    if model_type == "gpt_bigcode" and r.bool("multi_query", True):  # GPTBigCodeConfig's default
        n_kv_heads = 1
    if r.int("num_key_value_heads", n_kv_heads) != n_kv_heads:
        raise ValueError(
            f"{r._label('num_key_value_heads')}: expected {n_kv_heads} (from multi_query), "
            f"got {r.cfg['num_key_value_heads']!r}"
        )
    return ModelSpec(
        name=name, model_type=model_type, arch="gpt2", n_layers=n_layers, d_model=d_model,
        n_heads=n_heads, n_kv_heads=n_kv_heads, d_head=d_model // n_heads,
        d_ff=r.int("n_inner", 4 * d_model), vocab_size=r.int("vocab_size"), max_seq_len=max_seq_len,
        tie_word_embeddings=r.bool("tie_word_embeddings", True),
    )  # fmt: skip


def _moe_fields(r: _Reader, model_type: str, n_layers: int) -> dict[str, Any]:
    """The mixture-of-experts fields of ModelSpec, in each family's naming (empty for a dense model)."""
    if model_type == "mixtral":
        n = r.int("num_local_experts", 8)
        if n == 1:
            return {}
        return _routed(
            r, {"n_experts": n, "n_experts_per_token": r.int("num_experts_per_tok", 2)}, "num_local_experts"
        )
    if model_type in QWEN_MOE:
        alias = r.int("num_local_experts", 0, low=0)  # transformers' name for num_experts
        n = r.int("num_experts", alias, low=0)
        if alias and alias != n:
            raise ValueError(f"{r._label('num_local_experts')}: expected num_experts={n}, got {alias}")
        if n == 0:
            return {}
        dense = set(r.layer_list("mlp_only_layers", n_layers))
        step = r.int("decoder_sparse_step", 1)
        n_dense = sum(1 for i in range(n_layers) if i in dense or (i + 1) % step)
        shared = r.int("shared_expert_intermediate_size", 0, low=0) if model_type == "qwen2_moe" else 0
        return _routed(r, {
            "n_experts": n, "n_experts_per_token": r.int("num_experts_per_tok"),
            "d_ff_expert": r.int("moe_intermediate_size"), "n_dense_layers": n_dense,
            "d_ff_shared": shared, "shared_expert_gate": shared > 0,
        }, "num_experts")  # fmt: skip
    if model_type in DEEPSEEK:
        n = r.int("n_routed_experts", 0, low=0)
        if n == 0:
            return {}
        first, freq = r.int("first_k_dense_replace", 0, low=0), r.int("moe_layer_freq", 1)
        n_dense = sum(1 for i in range(n_layers) if not (i >= first and i % freq == 0))
        d_ff_expert = r.int("moe_intermediate_size")
        return _routed(r, {
            "n_experts": n, "n_experts_per_token": r.int("num_experts_per_tok"),
            "d_ff_expert": d_ff_expert, "n_dense_layers": n_dense,
            "d_ff_shared": r.int("n_shared_experts", 0, low=0) * d_ff_expert,
        }, "n_routed_experts")  # fmt: skip
    return {}


def _routed(r: _Reader, fields: dict[str, Any], experts_key: str) -> dict[str, Any]:
    """``fields``, if a token runs at most as many experts as there are, else a ValueError naming
    the config's own keys (``num_experts_per_tok`` and ``experts_key``)."""
    per_token, n = fields["n_experts_per_token"], fields["n_experts"]
    if per_token > n:
        raise ValueError(f"{r._label('num_experts_per_tok')}: expected <= {experts_key}={n}, got {per_token}")
    return fields


def _mla_fields(r: _Reader, n_heads: int) -> dict[str, Any]:
    """DeepSeek's latent attention: d_head is the query/key head (nope + rope)."""
    rope, nope = r.int("qk_rope_head_dim"), r.int("qk_nope_head_dim")
    if r.has("head_dim") and r.int("head_dim") not in (rope, nope + rope):
        raise ValueError(
            f"{r._label('head_dim')}: expected qk_rope_head_dim={rope} or qk_nope_head_dim + "
            f"qk_rope_head_dim={nope + rope}, got {r.cfg['head_dim']!r}"
        )
    return {
        "n_kv_heads": n_heads,  # every head gets its own K and V, expanded from the shared latent
        "d_head": nope + rope,
        "kv_lora_rank": r.int("kv_lora_rank"),
        "q_lora_rank": r.int("q_lora_rank", 0, low=0),
        "qk_rope_head_dim": rope,
        "v_head_dim": r.int("v_head_dim"),
    }


def spec_from_dict(config: Mapping[str, Any], name: str = "", where: str = "") -> ModelSpec:
    """A parsed config.json (a dict) -> ``ModelSpec``; errors name the missing, bad or unmodelled key."""
    if not isinstance(config, Mapping):
        raise TypeError(f"config: expected a JSON object (dict), got {type(config).__name__}")
    if (
        not config.get("hidden_size")
        and not config.get("n_embd")
        and isinstance(config.get("text_config"), Mapping)
    ):
        config = config["text_config"]  # multimodal wrappers keep the language model's sizes here
    r = _Reader(config, where)
    model_type = _model_type(r, config)
    name = name or str(config.get("_name_or_path") or model_type)
    _check_honoured(r, model_type)
    if model_type in GPT2_STYLE:
        return _gpt2_spec(r, name, model_type)
    d_model, n_heads, n_layers = (
        r.int("hidden_size"),
        r.int("num_attention_heads"),
        r.int("num_hidden_layers"),
    )
    fields: dict[str, Any] = {}
    if model_type in DEEPSEEK and r.cfg.get("kv_lora_rank") is not None:
        fields = _mla_fields(r, n_heads)
    else:
        if model_type in DEEPSEEK:
            raise ValueError(f"config: missing key 'kv_lora_rank'{f' in {where}' if where else ''}")
        n_kv_heads = r.int("num_key_value_heads", n_heads)  # absent in older (MHA) Llama configs
        if n_heads % n_kv_heads:
            raise ValueError(
                f"{r._label('num_key_value_heads')}: expected a divisor of "
                f"num_attention_heads={n_heads}, got {n_kv_heads}"
            )
        default_head_dim = _HEAD_DIM_DEFAULT.get(model_type, d_model // n_heads)
        if not r.has("head_dim") and model_type not in _HEAD_DIM_DEFAULT and d_model % n_heads:
            raise ValueError(
                f"{r._label('hidden_size')}: expected a multiple of num_attention_heads={n_heads} "
                f"(or an explicit head_dim), got {d_model}"
            )
        fields = {"n_kv_heads": n_kv_heads, "d_head": r.int("head_dim", default_head_dim)}
    window, n_sliding = _sliding_layers(r, model_type, n_layers) if model_type not in DEEPSEEK else (None, 0)
    if model_type == "qwen2":
        bias = "qkv"  # Qwen2 always has biases on q, k and v (not on o)
    elif model_type == "qwen2_moe":
        bias = "qkv" if r.bool("qkv_bias", True) else ""
    else:
        bias = "qkvo" if r.bool("attention_bias", False) else ""
    return ModelSpec(
        name=name, model_type=model_type, arch="gated", n_layers=n_layers, d_model=d_model,
        n_heads=n_heads, d_ff=r.int("intermediate_size"), vocab_size=r.int("vocab_size"),
        max_seq_len=r.int("max_position_embeddings"), sliding_window=window, n_sliding_layers=n_sliding,
        tie_word_embeddings=r.bool("tie_word_embeddings", _TIED_BY_DEFAULT.get(model_type, False)),
        attention_bias=bias, norms_per_layer=4 if model_type in _FOUR_NORMS else 2,
        qk_norm=model_type in _QK_NORM, **fields, **_moe_fields(r, model_type, n_layers),
    )  # fmt: skip


def read_hf_config(path: str | os.PathLike, name: str = "") -> ModelSpec:
    """A config.json file (or a model folder holding one) -> ``ModelSpec``."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path: expected a file path, got {type(path).__name__}")
    p = Path(path)
    folder = p.is_dir()
    if folder:
        p = p / "config.json"
    if not p.exists():
        inside = f" (the folder {str(p.parent)!r} has no config.json)" if folder else ""
        raise ValueError(f"path: no such file {str(p)!r}{inside}")
    if not p.is_file():
        raise ValueError(f"path: expected a config.json file, got {str(p)!r}, which exists but is not "
                         "a regular file (a device, a pipe or a socket)")  # fmt: skip
    if p.stat().st_size == 0:
        raise ValueError(f"path: expected a config.json file, got {str(p)!r}, which is empty")
    try:
        config = json.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"path: {str(p)!r} is not valid JSON ({exc})") from None
    except RecursionError:
        raise ValueError(f"path: {str(p)!r} nests its JSON too deep to read (a malformed config)") from None
    except (OSError, ValueError) as exc:  # unreadable, or an int of more digits than Python converts
        raise ValueError(f"path: {str(p)!r} could not be read as JSON ({exc})") from None
    if not isinstance(config, dict):
        raise ValueError(f"path: {str(p)!r} holds a JSON {type(config).__name__}, expected an object")
    default_name = p.parent.name if p.name == "config.json" else p.stem
    try:
        return spec_from_dict(config, name or default_name, where=str(p))
    except RecursionError:
        raise ValueError(f"config in {p}: a value nests too deep to read (a malformed config)") from None
    except (TypeError, ValueError) as exc:  # every error names the file
        if str(p) in str(exc):
            raise
        raise (TypeError if isinstance(exc, TypeError) else ValueError)(f"{exc} (in {p})") from None


# ---------------------------------------------------------------- the bundled table


def _configs_dir() -> Path:
    return Path(str(resources.files("kvtutor") / "data" / "configs"))


def bundled_models() -> list[str]:
    """Names of the bundled published configs, e.g. ``'llama-3-8b'``, smallest model first."""
    names = [p.stem for p in _configs_dir().glob("*.json")]
    return sorted(names, key=lambda n: (read_hf_config(bundled_config_path(n)).n_params, n))


def _bundled_paths() -> dict[str, Path]:
    """Every bundled config by its model name (the file's stem, lower case)."""
    return {p.stem.lower(): p for p in _configs_dir().glob("*.json") if p.is_file()}


def bundled_config_path(name: str) -> Path:
    """The path of a bundled config.json by model name (case-insensitive).

    Only a name the table lists is looked up, never a path: ``'../runs/bench-cpu'`` or
    ``'/etc/passwd'`` is refused, whatever lies there."""
    if not isinstance(name, str):
        raise TypeError(f"name: expected a model name, got {type(name).__name__}")
    bundled = _bundled_paths()
    if name.lower() not in bundled:
        raise ValueError(f"name: no bundled config {name!r}; bundled: {', '.join(sorted(bundled))}")
    return bundled[name.lower()]


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _hub_id_message(hub_id: str) -> str:
    same = [
        p.stem
        for p in sorted(_configs_dir().glob("*.json"))
        if str(json.loads(p.read_text()).get("_name_or_path", "")).lower() == hub_id.lower()
    ]
    hint = f" The bundled {same[0]!r} is that model's published config." if same else ""
    return (
        f"name_or_path: {hub_id!r} looks like a Hugging Face Hub id, not a file, and nothing is "
        f"downloaded here.{hint} `python -m kvtutor kv-memory --list` (or bundled_models()) lists "
        f"the bundled names; for another model, download https://huggingface.co/{hub_id}/resolve/"
        "main/config.json and pass the path of that file"
    )


def load_model_spec(name_or_path: str | os.PathLike) -> ModelSpec:
    """A bundled model name (``'mistral-7b'``) or a path to a config.json -> ``ModelSpec``.

    A Hub id (``'meta-llama/Llama-3.1-8B'``) that is not a local path is refused with a message
    saying where to get its config.json: nothing is downloaded.
    """
    if isinstance(name_or_path, str) and not os.path.exists(name_or_path):
        if name_or_path.lower() in _bundled_paths():
            return read_hf_config(bundled_config_path(name_or_path), name=name_or_path.lower())
        if _HUB_ID.match(name_or_path) and not name_or_path.endswith(".json"):
            raise ValueError(_hub_id_message(name_or_path))
        if not name_or_path.endswith(".json") and os.sep not in name_or_path:
            bundled_config_path(name_or_path)  # raises with the list of bundled names
    return read_hf_config(name_or_path)
