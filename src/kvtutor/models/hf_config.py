"""Read a Hugging Face ``config.json`` into the few numbers that size the KV cache and the weights.

What each family's keys mean is a table, ``kvtutor.models.families.FAMILIES`` (by ``model_type``):
which keys give the layers, heads, KV heads, head dim, widths and context, which rules place the
sliding windows, the experts, the attention layers of a hybrid and the constant state of its
other layers. This module reads a config by that table; the book's calculator reads the same
table in the page. The families: GPT-2 and StarCoder (``gpt2``, ``gpt_bigcode``), Llama and its
relatives (Mistral, Mixtral, Qwen2/3 and their mixtures of experts, Gemma 1-3), DeepSeek-V2/V3
(latent attention), OPT, Falcon (multi-query, and ``new_decoder_architecture`` with
``num_kv_heads``), GPT-NeoX (Pythia), Phi-3/3.5/4, StarCoder2, OLMo and OLMo-2, Cohere (Command-R),
InternLM2, the hybrid Jamba (Mamba) and Bamba (Mamba-2), and the state-space models Mamba and
Mamba-2, which keep no KV cache at all. A multimodal config (LLaVA, Gemma-3) is read by its
``text_config``, where absent keys take the config class's defaults as transformers does.

Anything else is refused with an error that names every bad key: a ``model_type`` not listed, a
missing or mistyped size, or a key that changes the sizes in a way this family's rules do not
model (``kv_lora_rank`` in a Llama config, ``mlp_bias: true``, an unknown ``layer_types`` entry,
...). A wrong number is worse than no number.

A bundled table of well-known models' published configs lives in ``kvtutor/data/configs``
(``bundled_models()``), and one published config of each further family in
``kvtutor/data/configs/families`` (``family_examples()``); ``load_model_spec("llama-3-8b")`` reads
one of those, and ``load_model_spec("path/to/config.json")`` reads any file. Nothing is ever
downloaded.

Every reader returns a ``ModelSpec`` (defined in ``kvtutor.models.model_spec``, importable from here too).
"""

from __future__ import annotations

import json
import math
import operator
import os
import re
from collections.abc import Mapping
from dataclasses import fields
from importlib import resources
from pathlib import Path
from typing import Any

from ..validate import MAX_COUNT
from .families import FAMILIES, MODEL_TYPES, SIZING_KEYS, WRAPPERS, honoured_keys
from .model_spec import ModelSpec

__all__ = [
    "ModelSpec",
    "MODEL_TYPES",
    "ConfigError",
    "spec_from_dict",
    "read_hf_config",
    "bundled_models",
    "bundled_config_path",
    "family_examples",
    "family_example_path",
    "load_model_spec",
]

_SPEC_FIELDS = {f.name for f in fields(ModelSpec)}


class ConfigError(ValueError):
    """A config.json the reader refuses. ``problems`` holds (key, message) for every bad key
    found (key None when the problem is not one key's); the message lists them, one a line."""

    def __init__(self, problems: list[tuple[str | None, str]]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(message for _, message in self.problems))

    @property
    def keys(self) -> list[str]:
        """The keys named, in order."""
        return [key for key, _ in self.problems if key is not None]


class _Missing:
    """A value that could not be read: its problem is recorded, and what needs it is skipped."""

    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()


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


class _Reader:
    """Reads one config by its family's row; every problem names the key and the file, and reading
    goes on past it, so that every bad key is found."""

    def __init__(self, cfg: Mapping[str, Any], where: str, defaults: Mapping[str, Any]) -> None:
        self.cfg, self.where, self.defaults = cfg, where, defaults
        self.problems: list[tuple[str | None, str]] = []
        self.values: dict[str, Any] = {}
        self.sources: dict[str, str] = {}  # field -> the key it was read from
        self.row: dict[str, Any] = {}

    def label(self, key: str) -> str:
        return f"config[{key!r}]" + (f" in {self.where}" if self.where else "")

    def fail(self, key: str | None, message: str) -> _Missing:
        self.problems.append((key, message))
        return _MISSING

    def get(self, key: str) -> Any:
        value = self.cfg.get(key)
        return self.defaults.get(key) if value is None else value

    def int(self, key: str, low: int = 1) -> Any:
        value = self.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            kind = "a positive int" if low == 1 else f"an int >= {low}"
            return self.fail(key, f"{self.label(key)}: expected {kind}, got {_shown(value)}")
        if value > MAX_COUNT:
            return self.fail(key, f"{self.label(key)}: expected at most {MAX_COUNT:,}, got {_big(value)}")
        return value

    def bool(self, key: str, default: bool) -> Any:
        value = self.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            return self.fail(key, f"{self.label(key)}: expected true or false, got {_shown(value)}")
        return value

    def layer_list(self, key: str, n_layers: int) -> Any:
        value = self.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n_layers for i in value
        ):
            expected = f"expected a list of layer indices 0 .. {n_layers - 1}"
            return self.fail(key, f"{self.label(key)}: {expected}, got {_shown(value)}")
        return value

    # ------------------------------------------------------------ the table's expressions
    def field(self, name: str) -> Any:
        if name not in self.values:
            self.values[name] = _MISSING  # read once, even where it failed
            self.values[name] = self.eval(self.row["fields"][name], name)
        return self.values[name]

    def source(self, expr: Any) -> str | None:
        """The config key an expression reads directly (or through a field), if one."""
        if isinstance(expr, dict) and "key" in expr:
            return expr["key"]
        if isinstance(expr, dict) and "field" in expr:
            self.field(expr["field"])
            return self.sources.get(expr["field"])
        return None

    def eval(self, expr: Any, name: str | None = None, explicit: str | None = None) -> Any:
        if not isinstance(expr, dict):
            return expr
        if "key" in expr:
            return self.key(expr, name)
        if "flag" in expr:
            return self.bool(expr["flag"], expr["default"])
        if "field" in expr:
            return self.field(expr["field"])
        ((op, args),) = expr.items()
        if op == "if":
            condition = self.eval(args[0])
            return condition if condition is _MISSING else self.eval(args[1] if condition else args[2], name)
        a, b = (self.eval(arg) for arg in args)
        if a is _MISSING or b is _MISSING:
            return _MISSING
        if op == "div" and not (b and a % b == 0):
            top, bottom = self.source(args[0]), self.source(args[1])
            if top is None:  # a width computed from several keys (Mamba-2's head_dim "auto")
                return self.fail(explicit, f"{self.label(explicit)}: {a} is not a multiple of {bottom}={b}")
            also = f" (or an explicit {explicit})" if explicit else ""
            return self.fail(top, f"{self.label(top)}: expected a multiple of {bottom}={b}{also}, got {a}")
        return _ARITHMETIC[op](a, b)

    def key(self, expr: dict[str, Any], name: str | None) -> Any:
        key = expr["key"]
        if self.get(key) is None and expr.get("else_key") and self.get(expr["else_key"]) is not None:
            key = expr["else_key"]
        value = self.get(key)
        if value is None:
            if "default" in expr:
                return self.eval(expr["default"], explicit=key)
            where = f" in {self.where}" if self.where else ""
            return self.fail(key, f"config: missing key {key!r}{where}")
        if name is not None:
            self.sources[name] = key
        if value == "auto" and "auto" in expr:
            return self.eval(expr["auto"], explicit=key)
        return self.int(key, expr.get("low", 1))


_ARITHMETIC = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "eq": operator.eq,
    "div": operator.floordiv, "ceil_div": lambda a, b: -(-a // b),
}  # fmt: skip


def _big(value: int) -> str:
    return f"about 10**{int(value.bit_length() * math.log10(2))}" if value > 10**18 else f"{value:,}"


def _check_honoured(r: _Reader, model_type: str) -> None:
    """A sizing key this family's rules do not read, set to anything but 'off', is a problem."""
    honoured = set(honoured_keys(model_type))
    for key in SIZING_KEYS:
        value = r.cfg.get(key)
        if key in honoured or _is_off(value):
            continue
        r.fail(
            key,
            f"{r.label(key)}: model_type {model_type!r} does not use this key, and the calculator "
            f"cannot honour {key}={_shown(value)}: it would change the sizes in a way it does not model",
        )
    for refused in r.row.get("refuse_true", []):
        if r.bool(refused["key"], False) is True:
            r.fail(
                refused["key"],
                f"{r.label(refused['key'])}: {refused['what']} are not modelled; expected false",
            )


def _attention_layers(r: _Reader, n_layers: int) -> Any:
    """How many layers attend (the others hold a constant state), by the row's ``layers`` rule."""
    rule = r.row.get("layers", {"rule": "all"})
    if rule["rule"] == "all":
        return n_layers
    if rule["rule"] == "none":
        return 0
    if rule["rule"] == "indices":
        listed = r.layer_list(rule["indices"], n_layers)
        return listed if listed is _MISSING else len(set(listed))
    return _every(r, rule, n_layers)


def _every(r: _Reader, rule: dict[str, Any], n_layers: int) -> Any:
    """Layers i with i % period == offset (the ``period`` rule of layers and of experts)."""
    period, offset = r.eval(rule["period"]), r.eval(rule["offset"])
    if period is _MISSING or offset is _MISSING:
        return _MISSING
    if offset >= period:
        key = r.source(rule["offset"])
        return r.fail(
            key,
            f"{r.label(key)}: expected 0 .. {period - 1} (below {r.source(rule['period'])}), got {offset}",
        )
    return sum(1 for i in range(n_layers) if i % period == offset)


def _window(r: _Reader, n_layers: int, n_attention: int) -> tuple[Any, Any]:
    """(window, layers that use it) by the row's ``window`` rule and the config's layer_types."""
    rule = r.row.get("window")
    if rule is None or not n_attention:
        return None, 0
    size = r.eval(rule["size"])
    window = None if size is _MISSING or not size else size  # transformers writes 0 for "no window"
    if "on" in rule:  # a switch the config turns off wins over its layer_types (Qwen2's
        switch = r.eval(rule["on"])  # use_sliding_window: false; transformers then slides no layer)
        if switch is not _MISSING and not switch:
            return None, 0
    layer_types = r.cfg.get("layer_types") if rule.get("layer_types") else None
    if layer_types is not None:
        label, kinds = r.label("layer_types"), ("sliding_attention", "full_attention")
        unknown = [t for t in layer_types if t not in kinds] if isinstance(layer_types, list) else []
        n_sliding = sum(t == "sliding_attention" for t in layer_types) if isinstance(layer_types, list) else 0
        if not isinstance(layer_types, list) or len(layer_types) != n_layers:
            problem = f"{label}: expected a list of {n_layers} strings, got {_shown(layer_types)}"
        elif unknown:  # a list, not a set: an entry may be a list or a dict
            problem = (
                f"{label}: expected 'sliding_attention' or 'full_attention' entries, got {_shown(unknown[0])}"
            )
            problem += " (not modelled)"
        elif n_sliding and window is None and size is not _MISSING:
            problem = f"{label}: sliding layers listed but no sliding_window"
        else:
            return (window, n_sliding) if window and n_sliding else (None, 0)
        return r.fail("layer_types", problem), 0
    if window is None:
        return None, 0
    on = r.eval(rule.get("on", True))
    if on is _MISSING or not on:
        return None, 0
    kind = rule["rule"]
    if kind == "every_layer":
        n = n_attention
    elif kind == "alternate":  # layers 0, 2, 4, ... slide; the others see everything
        n = (n_layers + 1) // 2
    elif kind == "pattern":  # every pattern-th layer is global
        pattern = r.eval(rule["pattern"])
        n = pattern if pattern is _MISSING else n_layers - n_layers // pattern
    else:  # from_layer: layers start, start + 1, ... slide
        start = r.eval(rule["start"])
        n = start if start is _MISSING else n_layers - min(start, n_layers)
    return (window, n) if n is not _MISSING and n else (None, 0)


def _experts(r: _Reader, n_layers: int) -> dict[str, Any]:
    """The mixture-of-experts fields of ModelSpec (empty for a dense model), by the row's rule."""
    rule = r.row.get("experts")
    if rule is None:
        return {}
    n = r.eval(rule["n"])
    if n is _MISSING or n <= 1:
        return {}
    per_token = r.eval(rule["per_token"])
    kind = rule["rule"]
    if kind == "every_layer":
        n_dense = 0
    elif kind == "period":
        n_moe = _every(r, rule, n_layers)
        n_dense = n_moe if n_moe is _MISSING else n_layers - n_moe
    elif kind == "sparse_step":
        dense, step = r.layer_list(rule["dense_list"], n_layers), r.eval(rule["step"])
        if dense is _MISSING or step is _MISSING:
            return {}
        n_dense = sum(1 for i in range(n_layers) if i in dense or (i + 1) % step)
    else:  # first_k_freq
        first, freq = r.eval(rule["first"]), r.eval(rule["freq"])
        if first is _MISSING or freq is _MISSING:
            return {}
        n_dense = sum(1 for i in range(n_layers) if not (i >= first and i % freq == 0))
    out = {"n_experts": n, "n_experts_per_token": per_token, "n_dense_layers": n_dense}
    out["d_ff_expert"] = r.eval(rule.get("width", 0))
    out["d_ff_shared"] = r.eval(rule.get("shared", 0))
    if rule.get("shared_gate") and out["d_ff_shared"] is not _MISSING:
        out["shared_expert_gate"] = out["d_ff_shared"] > 0
    if per_token is not _MISSING and per_token > n:
        per_key, n_key = r.source(rule["per_token"]), r.source(rule["n"])
        r.fail(per_key, f"{r.label(per_key)}: expected <= {n_key}={n}, got {per_token}")
    return out


def _agree(r: _Reader) -> None:
    """Alias keys (written by transformers beside the key the row reads) must say the same."""
    for entry in r.row.get("agree", []):
        key = entry["key"]
        if _is_off(r.cfg.get(key)):
            continue
        value = r.int(key, 0)
        wanted = [r.eval(expr) for expr in entry["equals"]]
        if value is _MISSING or _MISSING in wanted or value in wanted:
            continue
        r.fail(
            key,
            f"{r.label(key)}: expected {' or '.join(map(str, wanted))} (from {entry['from']}), got {value}",
        )


def _nested(config: Mapping[str, Any], r: _Reader) -> tuple[Mapping[str, Any], str]:
    """(the language model's config, what it is nested in: the wrapper's model_type; "" when the
    config is not a wrapper)."""
    model_type = config.get("model_type")
    wrapper = WRAPPERS.get(model_type) if isinstance(model_type, str) else None
    if wrapper is None and (config.get("hidden_size") or config.get("n_embd")
                            or not isinstance(config.get("text_config"), Mapping)):  # fmt: skip
        return config, ""
    nested = config.get(wrapper["nested"] if wrapper else "text_config")
    if not isinstance(nested, Mapping):
        key = wrapper["nested"] if wrapper else "text_config"
        raise ConfigError([(key, f"{r.label(key)}: expected the language model's config (an object), "
                                 f"got {_shown(nested)}")])  # fmt: skip
    inner_type = nested.get("model_type") or (wrapper or {}).get("model_type")
    return {**nested, "model_type": inner_type}, model_type if isinstance(model_type, str) else "text_config"


def _model_type(r: _Reader, config: Mapping[str, Any]) -> str:
    model_type = config.get("model_type")
    known = ", ".join(MODEL_TYPES)
    if model_type is None:
        where = f" in {r.where}" if r.where else ""
        hint = '(add "model_type": "llama" for a Llama-style model)'
        raise ConfigError(
            [("model_type", f"config: missing key 'model_type'{where}; expected one of {known} {hint}")]
        )
    if not isinstance(model_type, str):
        raise ConfigError(
            [("model_type", f"{r.label('model_type')}: expected a string, got {_shown(model_type)}")]
        )
    if model_type not in FAMILIES:
        raise ConfigError([("model_type", f"{r.label('model_type')}: expected one of {known}, got "
                            f"{_shown(model_type)} (its cache layout is not known to the calculator, and a "
                            "guess could be wrong)")])  # fmt: skip
    return model_type


def spec_from_dict(config: Mapping[str, Any], name: str = "", where: str = "") -> ModelSpec:
    """A parsed config.json (a dict) -> ``ModelSpec``, by its family's rules in
    ``families.FAMILIES``; a ``ConfigError`` (a ValueError) names every missing, bad or unmodelled key."""
    if not isinstance(config, Mapping):
        raise TypeError(f"config: expected a JSON object (dict), got {type(config).__name__}")
    outer = config
    config, wrapper = _nested(outer, _Reader(outer, where, {}))
    r = _Reader(config, where, {})
    model_type = _model_type(r, config)
    r.row = FAMILIES[model_type]
    if wrapper:  # transformers writes a nested config's keys only where they differ from its class
        r.defaults = r.row.get("class_defaults", {})
    name = name or str(outer.get("_name_or_path") or config.get("_name_or_path") or wrapper or model_type)
    _check_honoured(r, model_type)
    for field in r.row["fields"]:
        r.field(field)
    n_layers = r.field("n_layers")
    spec = {k: v for k, v in r.values.items() if k in _SPEC_FIELDS}
    if n_layers is not _MISSING:
        n_attention = _attention_layers(r, n_layers)
        if n_attention is not _MISSING:
            spec["n_state_layers"] = n_layers - n_attention
            if n_attention < n_layers:
                spec["state_numbers_per_layer"] = r.eval(r.row["state"]["numbers"])
                spec["state_params_per_layer"] = r.eval(r.row["state"]["params"])
            spec["sliding_window"], spec["n_sliding_layers"] = _window(r, n_layers, n_attention)
        spec.update(_experts(r, n_layers))
    heads, kv = spec.get("n_heads"), spec.get("n_kv_heads")
    if isinstance(heads, int) and isinstance(kv, int) and kv and heads % kv:
        key = r.sources.get("n_kv_heads", "num_key_value_heads")
        r.fail(key, f"{r.label(key)}: expected a divisor of {r.sources.get('n_heads')}={heads}, got {kv}")
    _agree(r)
    if r.problems:
        raise ConfigError(r.problems)
    return ModelSpec(name=name, model_type=model_type, nested_in=wrapper, **spec)


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
    """Every bundled config and family example by its model name (the file's stem, lower case)."""
    folders = (_configs_dir() / "families", _configs_dir())  # a bundled model wins a shared name
    return {p.stem.lower(): p for folder in folders for p in folder.glob("*.json") if p.is_file()}


def bundled_config_path(name: str) -> Path:
    """The path of a bundled config.json by model name (case-insensitive): one of
    ``bundled_models()`` or of ``family_examples()``.

    Only a name the two folders list is looked up, never a path: ``'../runs/bench-cpu'`` or
    ``'/etc/passwd'`` is refused, whatever lies there."""
    if not isinstance(name, str):
        raise TypeError(f"name: expected a model name, got {type(name).__name__}")
    bundled = _bundled_paths()
    if name.lower() not in bundled:
        known = ", ".join(sorted(p.stem for p in _configs_dir().glob("*.json")))
        examples = ", ".join(family_examples())
        raise ValueError(f"name: no bundled config {name!r}; bundled: {known}; family examples: {examples}")
    return bundled[name.lower()]


def family_examples() -> list[str]:
    """Names of the published configs bundled as one example of each further family the calculator
    reads (OPT, Falcon, Pythia, Phi-3, StarCoder2, OLMo, Command-R, InternLM2, Gemma-3, LLaVA,
    Jamba, Bamba, Mamba, ...), by name. They are not in ``bundled_models()``, whose table the book's
    chapters print."""
    return sorted(p.stem for p in (_configs_dir() / "families").glob("*.json"))


def family_example_path(name: str) -> Path:
    """The path of one of ``family_examples()`` by name (case-insensitive)."""
    if not isinstance(name, str):
        raise TypeError(f"name: expected a model name, got {type(name).__name__}")
    if name.lower() not in family_examples():
        raise ValueError(f"name: no family example {name!r}; family examples: {', '.join(family_examples())}")
    return _configs_dir() / "families" / f"{name.lower()}.json"


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _hub_id_message(hub_id: str) -> str:
    same = [
        p.stem
        for p in sorted([*_configs_dir().glob("*.json"), *(_configs_dir() / "families").glob("*.json")])
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
    saying where to get its config.json: nothing is downloaded. A family example (``'opt-13b'``)
    is read like a bundled model.
    """
    if isinstance(name_or_path, str) and not os.path.exists(name_or_path):
        if name_or_path.lower() in _bundled_paths():
            return read_hf_config(bundled_config_path(name_or_path), name=name_or_path.lower())
        if _HUB_ID.match(name_or_path) and not name_or_path.endswith(".json"):
            raise ValueError(_hub_id_message(name_or_path))
        if not name_or_path.endswith(".json") and os.sep not in name_or_path:
            bundled_config_path(name_or_path)  # raises with the list of bundled names
    return read_hf_config(name_or_path)
