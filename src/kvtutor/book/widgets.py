"""The book's two page widgets, as data written into the page: the cache stepper and the KV calculator.

A chapter's cell returns ``cache_stepper()`` or ``kv_calculator()``. In the HTML book the output
is a ``<div class="kvtutor-widget">`` holding the widget's data as ``<script
type="application/json">``, which ``book/_static/widgets/*.js`` finds and draws: no kernel, no
network, and the page works when opened from disk. Elsewhere (a terminal, Colab) the text form is
one line naming the widget. The data is the package's own: the stepper's arrays are
``GPT2Model``'s trace, the calculator's models and constants come from ``models.hf_config``,
``models.model_spec`` and ``measure.memory``, and the rule table by which it reads a pasted
config.json is ``models.families``' own; the JavaScript only lays them out, interprets that table
and does the calculator's arithmetic, which ``measure.memory.kv_memory`` states.

The output is the same on every run and every CPU, so that nbval compares it exactly: JSON with
sorted keys, floats rounded to the printed digits. The stepper runs a float64 copy of the model,
whose last bits do not depend on the CPU's SIMD kernels as float32 sums do; at the printed
precision its numbers are the float32 model's (``tests/test_widgets.py`` checks both).
"""

from __future__ import annotations

import html
import json
import numbers
from collections.abc import Sequence
from dataclasses import fields, replace
from typing import Any

import numpy as np

from ..measure.costs import Cost, generation_costs
from ..measure.memory import GIB, KEY_SCALES, KV_DTYPES, MAX_MEMORY_GIB, KVQuant, fixed_scale_bytes, kv_memory
from ..models.families import export as family_table
from ..models.gpt2 import GPT2Model
from ..models.hf_config import bundled_config_path, bundled_models, family_examples, load_model_spec
from ..models.tokenizer import ToyTokenizer
from ..models.toy import TOY_PROMPT, load_toy_model, load_toy_tokenizer
from ..validate import MAX_COUNT, check_int, check_real, greedy
from .editions import both_editions

__all__ = ["Widget", "cache_stepper", "cache_stepper_data", "kv_calculator", "kv_calculator_data"]

#: The JSON format of each widget's data; the JavaScript refuses nothing, the tests check it.
VERSION = 1


class Widget:
    """A page widget: ``name`` (the JavaScript that draws it), its JSON-ready ``data``, a one-line
    ``summary`` and the ``fallback`` HTML a page without JavaScript shows instead (both editions;
    by default the summary's note). Displayed, it is text/html (the container, the data and the
    fallback) and text/plain."""

    def __init__(self, name: str, data: dict[str, Any], summary: str, fallback: str | None = None) -> None:
        self.name, self.data, self.summary = name, data, summary
        self.fallback = _note(summary) if fallback is None else fallback

    def to_json(self) -> str:
        """The data as the page holds it: sorted keys, no spaces, and no ``<``, ``>`` or ``&``
        (escaped), so that nothing in it can end the ``<script>`` element."""
        text = json.dumps(self.data, sort_keys=True, separators=(",", ":"), allow_nan=False)
        return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")

    def to_html(self) -> str:
        return (
            f'<div class="kvtutor-widget" data-kvtutor-widget="{self.name}">\n'
            f'<script type="application/json">{self.to_json()}</script>\n'
            f'<div class="kvtutor-fallback">{self.fallback}</div>\n'
            "</div>"
        )

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"text/html": self.to_html(), "text/plain": repr(self)}

    def __repr__(self) -> str:
        return f"<kvtutor {self.summary}>"


#: What each widget shows, for a page without JavaScript (both editions).
NOTES = {
    "cache stepper": (
        "The cache stepper needs JavaScript: it steps the toy model through prefill and each decode "
        "step, showing every layer's K and V cache per head, the new token's q, its scores and "
        "softmax weights, and the same step without a cache.",
        "缓存步进器需要 JavaScript：它让玩具模型逐步完成预填充和每个解码步，显示每一层每个头的 K、V 缓存，"
        "新词元的 q、它的分数和 softmax 权重，以及不用缓存时的同一步。",
    ),
    "KV calculator": (
        "The KV calculator needs JavaScript: it reads a bundled model or a pasted config.json and "
        "computes the KV cache's bytes per token, per sequence and for a batch, and the largest "
        "batch that fits beside the weights.",
        "KV 计算器需要 JavaScript：它读取内置模型或粘贴的 config.json，计算 KV 缓存每个词元、每个序列和整批的"
        "字节数，以及权重之外还能放下的最大批。",
    ),
}


def _note(summary: str) -> str:
    en, zh = NOTES[summary.split(":")[0]]
    return both_editions(f"<p>{html.escape(en)}</p>", f"<p>{html.escape(zh)}</p>")


def _rounded(array: Any, digits: int) -> Any:
    """An array as nested lists of Python floats rounded to ``digits`` (the sign of a zero kept, as
    NumPy prints ``-0.000``)."""
    return np.round(np.asarray(array, dtype=np.float64), digits).tolist()


def _float64(model: GPT2Model) -> GPT2Model:
    """The same model with every weight in float64."""

    def cast(obj: Any) -> Any:
        return replace(obj, **{f.name: getattr(obj, f.name).astype(np.float64) for f in fields(obj)
                               if isinstance(getattr(obj, f.name), np.ndarray)})  # fmt: skip

    weights = cast(model.weights)
    return GPT2Model(model.config, replace(weights, layers=[cast(layer) for layer in weights.layers]))


def _cost(cost: Cost) -> dict[str, int]:
    return {"flops": int(cost.flops), "bytes": int(cost.bytes)}


def _costs(model: GPT2Model, n_prompt: int, n_steps: int) -> list[dict[str, Any]]:
    """Per generated token (the prefill's, then each decode step's): its pass with the cache and
    without one, and the totals so far (``measure.costs.generation_costs``, in the model's dtype).
    The prefill counts the last row's logits only, as generation needs them: the prefill page's
    ``prefill_last_flops``, not its ``prefill_flops`` of every row (tests/test_quantities.py
    checks the stored stepper against the pages' glued counts)."""
    nbytes = model.weights.wte_VD.dtype.itemsize
    cached = generation_costs(model.config, n_prompt, n_steps + 1, True, dtype=nbytes)
    recompute = generation_costs(model.config, n_prompt, n_steps + 1, False, dtype=nbytes)
    out, total_c, total_r = [], Cost(), Cost()
    for c, r in zip(cached, recompute, strict=True):
        total_c, total_r = total_c + c, total_r + r
        out.append({
            "cost": {"cached": _cost(c), "recompute": _cost(r)},
            "total": {"cached": _cost(total_c), "recompute": _cost(total_r)},
        })  # fmt: skip
    return out


def _check_stepper_args(
    model: Any, tokenizer: Any, prompt: Any, n_steps: Any, digits: Any
) -> tuple[list[int], int, int]:
    """The prompt's ids and n_steps and digits as Python ints (NumPy ints taken), or an error
    naming the argument."""
    if not isinstance(model, GPT2Model):
        raise TypeError(f"model: expected a GPT2Model (GPT-2 in NumPy), got {type(model).__name__}")
    cfg = model.config
    if cfg.n_kv_heads != cfg.n_heads:
        raise ValueError(
            f"model: expected multi-head attention (n_kv_heads == n_heads = {cfg.n_heads}), "
            f"got n_kv_heads={cfg.n_kv_heads}"
        )
    if not isinstance(tokenizer, ToyTokenizer):
        raise TypeError(f"tokenizer: expected a ToyTokenizer, got {type(tokenizer).__name__}")
    if len(tokenizer) != cfg.vocab_size:
        raise ValueError(
            f"tokenizer: expected a vocabulary of the model's {cfg.vocab_size} tokens, got {len(tokenizer)}"
        )
    if not isinstance(prompt, str):
        raise TypeError(f"prompt: expected a str, got {type(prompt).__name__}")
    try:
        ids = tokenizer.encode(prompt)
    except ValueError as exc:
        raise ValueError(f"prompt: {str(exc).removeprefix('text: ')}") from None
    if not ids:
        raise ValueError(f"prompt: expected at least one token, got {prompt!r}")
    if len(ids) >= cfg.max_seq_len:
        raise ValueError(
            f"prompt: expected fewer than the model's {cfg.max_seq_len} positions (room for a decode "
            f"step), got {len(ids)} tokens"
        )
    return (
        ids,
        check_int("n_steps", n_steps, 1, cfg.max_seq_len - len(ids)),
        check_int("digits", digits, 0, 6),
    )


def cache_stepper_data(
    model: GPT2Model | None = None,
    tokenizer: ToyTokenizer | None = None,
    prompt: str = TOY_PROMPT,
    n_steps: int = 3,
    digits: int = 3,
) -> dict[str, Any]:
    """The stepper's data: the prompt's K and V after prefill ([L][H][S][K]), then for each of
    ``n_steps`` greedy decode steps the new token's q, scores, softmax weights and row sums, the
    cache after its write, the same step recomputed without a cache, and the costs of both.
    Defaults: the toy model and tokenizer on "The cat sat"."""
    model = load_toy_model() if model is None else model
    tokenizer = load_toy_tokenizer() if tokenizer is None else tokenizer
    ids, n_steps, digits = _check_stepper_args(model, tokenizer, prompt, n_steps, digits)
    m64, cfg = _float64(model), model.config

    def r(array: Any) -> Any:
        return _rounded(array, digits)

    def per_layer(trace: list[dict], key: str, index: Any = ...) -> Any:
        return r(np.stack([layer[key][index] for layer in trace]))

    costs = _costs(model, len(ids), n_steps)
    cache, trace = m64.new_cache(), []
    token = greedy(m64.prefill(ids, cache, trace)[-1])
    prefill = {"k_LHSK": per_layer(trace, "k_HSK"), "v_LHSK": per_layer(trace, "v_HSK"),
               "next_id": token, "next_token": tokenizer.vocab[token], **costs[0]}  # fmt: skip
    sequence, steps = list(ids), []
    for i in range(n_steps):
        fed, trace, full = token, [], []
        token = greedy(m64.decode_step(fed, cache, trace))
        sequence.append(fed)
        m64.forward(sequence, None, full)  # the same step without a cache: every position again
        steps.append({
            "position": len(sequence) - 1, "token_id": fed, "token": tokenizer.vocab[fed],
            "n_keys": len(sequence), "next_id": token, "next_token": tokenizer.vocab[token],
            "q_LHK": per_layer(trace, "q_HTK", (slice(None), 0)),
            "scores_LHS": per_layer(trace, "scores_HTS", (slice(None), 0)),
            "weights_LHS": per_layer(trace, "a_HTS", (slice(None), 0)),
            "row_sums_LH": r(np.stack([layer["a_HTS"][:, 0].sum(axis=-1) for layer in trace])),
            "k_LHSK": per_layer(trace, "k_HSK"), "v_LHSK": per_layer(trace, "v_HSK"),
            "recompute": {
                "q_LHSK": per_layer(full, "q_HTK"), "k_LHSK": per_layer(full, "k_HSK"),
                "v_LHSK": per_layer(full, "v_HSK"), "scores_LHSS": per_layer(full, "scores_HTS"),
                "weights_LHSS": per_layer(full, "a_HTS"),
            },
            **costs[i + 1],
        })  # fmt: skip
    return {
        "widget": "cache-stepper", "version": VERSION, "digits": digits,
        "model": {"n_layers": cfg.n_layers, "n_heads": cfg.n_heads, "n_kv_heads": cfg.n_kv_heads,
                  "d_head": cfg.d_head, "d_model": cfg.d_model, "vocab_size": cfg.vocab_size,
                  "max_seq_len": cfg.max_seq_len, "dtype": str(model.weights.wte_VD.dtype)},
        "prompt": {"text": prompt, "ids": list(ids), "tokens": [tokenizer.vocab[i] for i in ids]},
        "prefill": prefill, "steps": steps, "text": tokenizer.decode(sequence + [token]),
    }  # fmt: skip


def cache_stepper(
    model: GPT2Model | None = None,
    tokenizer: ToyTokenizer | None = None,
    prompt: str = TOY_PROMPT,
    n_steps: int = 3,
    digits: int = 3,
) -> Widget:
    """The cache stepper, for the page of "Decode, step by step": Prefill, Next token, Back and a
    no-cache switch over ``cache_stepper_data``."""
    data = cache_stepper_data(model, tokenizer, prompt, n_steps, digits)
    return Widget("cache-stepper", data, f"cache stepper: {len(data['steps'])} decode steps of {prompt!r}")


# ---------------------------------------------------------------- the KV calculator


def _model_row(name: str) -> dict[str, Any]:
    """What the calculator needs of a bundled model: the fields ``kv_memory`` reads."""
    spec = load_model_spec(name)
    return {
        "name": spec.name, "attention": spec.attention_kind, "n_layers": spec.n_layers,
        "n_heads": spec.n_heads, "n_kv_heads": spec.n_kv_heads, "d_head": spec.d_head,
        "d_value": spec.d_value, "kv_lora_rank": spec.kv_lora_rank,
        "qk_rope_head_dim": spec.qk_rope_head_dim, "sliding_window": spec.sliding_window,
        "n_sliding_layers": spec.n_sliding_layers, "max_seq_len": spec.max_seq_len,
        "n_params": spec.n_params, "n_state_layers": spec.n_state_layers,
        "state_numbers_per_layer": spec.state_numbers_per_layer, "nested_in": spec.nested_in,
    }  # fmt: skip


def _fp8_scale_bytes(name: str) -> int:
    """Bytes of one fp8 per-tensor scale, as ``fixed_scale_bytes`` counts them for ``name``."""
    spec = load_model_spec(name)
    tensors = (1 if spec.kv_lora_rank else 2) * spec.n_attention_layers
    return fixed_scale_bytes(spec, "fp8") // tensors


def _check_names(models: Any) -> list[str]:
    known = bundled_models()
    if models is None:
        return known
    if isinstance(models, str) or not isinstance(models, Sequence):
        raise TypeError(f"models: expected a list of bundled model names, got {type(models).__name__}")
    bad = [m for m in models if not isinstance(m, str) or m.lower() not in known]
    if bad or not models:
        got = repr(bad[0]) if bad else "an empty list"
        raise ValueError(f"models: expected names from {', '.join(known)}, got {got}")
    return [m.lower() for m in models]


def kv_calculator_data(
    models: Sequence[str] | None = None,
    model: str = "llama-3-8b",
    seq_len: int = 8192,
    batch: int = 8,
    dtype: str = "bf16",
    weights_dtype: str = "bf16",
    memory_gib: float = 80,
    window: int | None = None,
) -> dict[str, Any]:
    """The calculator's data: the bundled models (or ``models``) with their config.json files and
    the family examples' (a reader loads one to edit), the rule table by which the page reads a
    config.json (``families.export()``, the one ``hf_config`` reads by), the KV dtypes with their
    bits and scales (``KVQuant``), the fp8 scale size, the limits, and the settings it opens with."""
    names = _check_names(models)
    if not isinstance(model, str) or model.lower() not in names:
        raise ValueError(f"model: expected one of {', '.join(names)}, got {model!r}")
    for name, value in (("dtype", dtype), ("weights_dtype", weights_dtype)):
        if value not in KV_DTYPES:
            raise ValueError(f"{name}: expected one of {', '.join(KV_DTYPES)}, got {value!r}")
    if isinstance(memory_gib, (bool, np.bool_)) or not isinstance(memory_gib, numbers.Real):
        raise TypeError(f"memory_gib: expected a number of GiB, got {type(memory_gib).__name__}")
    check_real("memory_gib", memory_gib)  # finite: an int beyond a float's range is refused by name
    # NumPy numbers as Python ones (the page's JSON holds only those); bools and others refused
    memory_gib = int(memory_gib) if isinstance(memory_gib, numbers.Integral) else float(memory_gib)
    seq_len, batch = check_int("seq_len", seq_len, 1), check_int("batch", batch, 1)
    window = None if window is None else check_int("window", window, 1)
    # the opening settings must be ones kv_memory takes: its checks name the argument
    kv_memory(load_model_spec(model), seq_len, batch, dtype, float(memory_gib), weights_dtype, window=window)
    quant = KVQuant()
    return {
        "widget": "kv-calculator", "version": VERSION, "gib": GIB, "max_memory_gib": MAX_MEMORY_GIB,
        "max_count": MAX_COUNT, "kv_dtypes": list(KV_DTYPES), "weights_dtypes": list(KV_DTYPES),
        "dtypes": {d: {"bits": KVQuant(d).bits[0], "kind": KVQuant(d).kind} for d in KV_DTYPES},
        "scale_dtype": quant.scale_dtype, "scale_bits": quant.bits[1], "float_bits": quant.bits[2],
        "float_dtype": quant.float_dtype,
        "key_scales": list(KEY_SCALES), "group_size": quant.group_size,
        "fp8_scale_bytes": _fp8_scale_bytes(names[0]),
        "models": [_model_row(name) for name in names],
        "configs": {name: bundled_config_path(name).read_text(encoding="utf-8") for name in names},
        "examples": {n: bundled_config_path(n).read_text(encoding="utf-8") for n in family_examples()},
        "families": family_table(),
        "defaults": {"model": model.lower(), "seq_len": seq_len, "batch": batch, "dtype": dtype,
                     "key_scales": quant.key_scales, "group_size": quant.group_size,
                     "weights_dtype": weights_dtype, "memory_gib": memory_gib, "window": window},
    }  # fmt: skip


def kv_calculator(
    models: Sequence[str] | None = None,
    model: str = "llama-3-8b",
    seq_len: int = 8192,
    batch: int = 8,
    dtype: str = "bf16",
    weights_dtype: str = "bf16",
    memory_gib: float = 80,
    window: int | None = None,
) -> Widget:
    """The KV calculator, for the page of "How big the KV cache gets", over ``kv_calculator_data``."""
    data = kv_calculator_data(models, model, seq_len, batch, dtype, weights_dtype, memory_gib, window)
    return Widget("kv-calculator", data, f"KV calculator: {len(data['models'])} bundled models")
