"""The calculator's rule table: for every config.json family, by ``model_type``, which keys give the
sizes of the KV cache and the weights, and which rules place sliding windows, experts, attention
layers and state-space layers. It is data, not code: ``kvtutor.models.hf_config.spec_from_dict``
reads a config by it, and the book's calculator (``book/_static/widgets/kv-config.js``) reads the
same table, exported into the page by ``kvtutor.book.widgets.kv_calculator_data`` (``export()``).

A family row holds:

* ``fields``: ``ModelSpec`` fields (``arch``, the weights' layout, among them), read in order and
  on demand (names starting with ``_`` are intermediate values), each an *expression*:

  - a number or true/false: itself;
  - ``{"key": K}``: the config's positive int ``K`` (``"low": 0`` takes 0 too; ``"default": E``
    when ``K`` is absent or null; ``"auto": E`` when ``K`` is the string "auto");
  - ``{"flag": K, "default": b}``: the config's true/false ``K``;
  - ``{"field": F}``: a field read before;
  - ``{"add"|"sub"|"mul"|"ceil_div"|"eq": [E, E]}``, ``{"div": [E, E]}`` (a whole quotient, else
    an error naming both keys), ``{"if": [E, E, E]}``.

* ``window``: which layers keep only the last ``size`` tokens (``size`` 0: none): ``every_layer``,
  ``alternate`` (layers 0, 2, 4, ...), ``pattern`` (all but every ``pattern``-th) or ``from_layer``
  (from layer ``start`` on); ``on`` switches it; ``layer_types`` lets that key list the layers.
* ``layers``: which layers attend (and keep K and V): all (no entry), ``period`` (i % period ==
  offset), ``indices`` (the listed ones) or ``none``; the others hold a ``state`` of constant size.
* ``state``: ``numbers`` (one sequence's state in one such layer) and ``params`` (its weights).
* ``experts``: ``n`` routed experts of width ``width``, ``per_token`` of them per token, in the
  layers a rule picks: ``every_layer``, ``sparse_step`` (not in ``dense_list``, (i + 1) % step == 0),
  ``first_k_freq`` (i >= first and i % freq == 0) or ``period``; shared experts of total width
  ``shared``.
* ``agree``: alias keys that must equal one of the ``equals`` expressions when set (transformers
  writes some sizes twice, under two names).
* ``refuse_true``: keys read only to refuse them when true (a layout not modelled).
* ``ignores``: keys that change nothing for this family (honoured, not read).
* ``class_defaults``: what the config class assumes for an absent key, used only inside a nested
  ``text_config`` (where transformers writes only the keys that differ).

``WRAPPERS`` lists multimodal configs whose language model is nested, and the ``model_type`` it has
when the nested config omits it. Any key of ``SIZING_KEYS`` that a family does not read is refused
when set to anything but "off" (None, false, 0, [] or ""): a wrong number is worse than no number.
"""

from __future__ import annotations

import json
from typing import Any

from .model_spec import ARCH_PRESETS

__all__ = ["FAMILIES", "WRAPPERS", "SIZING_KEYS", "MODEL_TYPES", "honoured_keys", "export"]


def _key(name: str, default: Any = None, low: int = 1, auto: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {"key": name}
    if default is not None:
        out["default"] = default
    if low != 1:
        out["low"] = low
    if auto is not None:
        out["auto"] = auto
    return out


def _flag(name: str, default: bool) -> dict[str, Any]:
    return {"flag": name, "default": default}


def _f(name: str) -> dict[str, str]:
    return {"field": name}


def _op(op: str, *args: Any) -> dict[str, list]:
    return {op: list(args)}


def _bias(flag: dict[str, Any], kind: str = "qkvo") -> dict[str, list]:
    return _op("if", flag, kind, "")


def _sum(*terms: Any) -> Any:
    total = terms[0]
    for term in terms[1:]:
        total = _op("add", total, term)
    return total


# fmt: off
D, H = _f("d_model"), _f("n_heads")
HEADS = {"d_model": _key("hidden_size"), "n_heads": _key("num_attention_heads"),
         "n_layers": _key("num_hidden_layers")}
KV_HEADS = _key("num_key_value_heads", H)  # absent in older (MHA) configs: every head its own
HEAD_DIM = _op("div", D, H)  # hidden_size / num_attention_heads, which must divide
SIZES = {"d_ff": _key("intermediate_size"), "vocab_size": _key("vocab_size"),
         "max_seq_len": _key("max_position_embeddings")}
SLIDING = {"size": _key("sliding_window", 0, low=0), "on": _flag("use_sliding_window", True),
           "layer_types": True}
EVERY_LAYER = {"rule": "every_layer", **SLIDING}
OWN_WINDOW = {"rule": "every_layer", "size": _key("sliding_window", 0, low=0)}  # no switch, no layer_types
GATED = {"arch": "gated", "norm_params": 1, "mlp_gated": True, "mlp_bias": False}
PLAIN = {"arch": "plain", "norm_params": 2, "mlp_gated": False}
ATTENTION_BIAS = _bias(_flag("attention_bias", False))


def _gated(kv: Any = KV_HEADS, head_dim: Any = None, bias: Any = "", tie: bool = False, **extra: Any) -> dict:
    """A Llama-style row: RMSNorm, rotary positions, a gated MLP without biases."""
    fields = {**HEADS, "n_kv_heads": kv,
              "d_head": _key("head_dim", HEAD_DIM if head_dim is None else head_dim), **SIZES,
              "tie_word_embeddings": _flag("tie_word_embeddings", tie), "attention_bias": bias, **GATED,
              "norms_per_layer": 2, "qk_norm": False}
    return {"fields": {**fields, **extra.pop("fields", {})}, **extra}


def _plain(**fields: Any) -> dict:
    """A row of LayerNorms with biases, rotary (or no) positions and an MLP that is not gated."""
    return {"fields": {**HEADS, "d_head": HEAD_DIM, **PLAIN, "norms_per_layer": 2, **fields}}


def _selective_scan(prefix: str, names: dict[str, str], norms: bool) -> dict[str, Any]:
    """Mamba's mixer (selective scan): per sequence, a convolution window of d_conv columns and an
    SSM state of d_state numbers for each inner channel, as transformers caches them."""
    k = {n: prefix + names.get(n, n)
         for n in ("expand", "d_state", "d_conv", "dt_rank", "conv_bias", "proj_bias")}
    i, n, c, r = _f("_inner"), _f("_d_state"), _f("_d_conv"), _f("_dt_rank")
    fields = {"_inner": _op("mul", _key(k["expand"]), D), "_d_state": _key(k["d_state"]),
              "_d_conv": _key(k["d_conv"]), "_dt_rank": _key(k["dt_rank"], auto=_op("ceil_div", D, 16)),
              "_conv_bias": _flag(k["conv_bias"], True), "_proj_bias": _flag(k["proj_bias"], False)}
    params = _sum(
        _op("mul", D, _op("mul", 2, i)),  # in_proj, to x and the gate
        _op("if", _f("_proj_bias"), _op("add", _op("mul", 2, i), D), 0),  # biases of in_proj and out_proj
        _op("mul", i, c), _op("if", _f("_conv_bias"), i, 0),  # the depthwise convolution
        _op("mul", i, _op("add", r, _op("mul", 2, n))),  # x_proj to dt, B, C
        _op("add", _op("mul", r, i), i),  # dt_proj with its bias
        _op("mul", i, n), i, _op("mul", i, D),  # A_log, D, out_proj
        _op("add", r, _op("mul", 2, n)) if norms else 0,  # RMSNorms of dt, B and C (Jamba)
    )
    return {"fields": fields, "numbers": _op("add", _op("mul", i, c), _op("mul", i, n)), "params": params}


def _ssd(prefix: str, names: dict[str, str]) -> dict[str, Any]:
    """Mamba-2's mixer (state-space duality): per sequence, a convolution window over x, B and C,
    and an SSM state of head_dim x d_state numbers for each SSM head."""
    k = {n: prefix + names.get(n, n) for n in
         ("n_heads", "head_dim", "n_groups", "d_state", "d_conv", "expand", "conv_bias", "proj_bias")}
    i, h, n, c, conv = _f("_inner"), _f("_ssm_heads"), _f("_d_state"), _f("_d_conv"), _f("_conv_dim")
    fields = {"_inner": _op("mul", _key(k["expand"]), D), "_ssm_heads": _key(k["n_heads"]),
              "_ssm_head_dim": _key(k["head_dim"], auto=_op("div", i, h)), "_n_groups": _key(k["n_groups"]),
              "_d_state": _key(k["d_state"]), "_d_conv": _key(k["d_conv"]),
              "_conv_bias": _flag(k["conv_bias"], True), "_proj_bias": _flag(k["proj_bias"], False),
              "_conv_dim": _op("add", i, _op("mul", 2, _op("mul", _f("_n_groups"), n)))}
    proj = _sum(i, conv, h)  # in_proj: the gate, x B C, dt
    params = _sum(
        _op("mul", D, proj), _op("if", _f("_proj_bias"), _op("add", proj, D), 0),  # in_proj, out_proj biases
        _op("mul", conv, c), _op("if", _f("_conv_bias"), conv, 0),  # the depthwise convolution
        _op("mul", 3, h), i, _op("mul", i, D),  # dt_bias, A_log and D; the gated RMSNorm; out_proj
    )
    numbers = _op("add", _op("mul", conv, c), _op("mul", h, _op("mul", _f("_ssm_head_dim"), n)))
    return {"fields": fields, "numbers": numbers, "params": params}


def _hybrid(state: dict[str, Any], layers: dict[str, Any], **row: Any) -> dict[str, Any]:
    """A row whose ``layers`` rule picks the attention layers; its other layers hold ``state``."""
    return {**row, "fields": {**row["fields"], **state["fields"]}, "layers": layers,
            "state": {"numbers": state["numbers"], "params": state["params"]}}


def _ssm(tie: bool) -> dict[str, Any]:
    """A state-space model's own fields: no attention heads, no MLP, no context length."""
    return {"d_model": _key("hidden_size"), "n_layers": _key("num_hidden_layers"), "n_heads": 0,
            "n_kv_heads": 0, "d_head": 0, "d_ff": 0, "vocab_size": _key("vocab_size"), "max_seq_len": 0,
            "tie_word_embeddings": _flag("tie_word_embeddings", tie), "arch": "ssm", "norm_params": 1,
            "norms_per_layer": 1}


FALCON_NORMS = _key("num_ln_in_parallel_attn", _op("if", _flag("new_decoder_architecture", False), 2, 1))
QWEN_WINDOW = {"rule": "from_layer", **SLIDING, "on": _flag("use_sliding_window", False),
               "start": _key("max_window_layers", 28, low=0)}
QWEN_EXPERTS = {"rule": "sparse_step", "n": _key("num_experts", _key("num_local_experts", 0, low=0), low=0),
                "per_token": _key("num_experts_per_tok"), "width": _key("moe_intermediate_size"),
                "dense_list": "mlp_only_layers", "step": _key("decoder_sparse_step", 1)}
QWEN_AGREE = [{"key": "num_local_experts", "equals": [QWEN_EXPERTS["n"]], "from": "num_experts"}]
DEEPSEEK = _gated(
    kv=H, ignores=["num_key_value_heads"],
    fields={"_nope": _key("qk_nope_head_dim"), "qk_rope_head_dim": _key("qk_rope_head_dim"),
            "d_head": _op("add", _f("_nope"), _f("qk_rope_head_dim")), "kv_lora_rank": _key("kv_lora_rank"),
            "q_lora_rank": _key("q_lora_rank", 0, low=0), "v_head_dim": _key("v_head_dim")},
    experts={"rule": "first_k_freq", "n": _key("n_routed_experts", 0, low=0),
             "per_token": _key("num_experts_per_tok"), "width": _key("moe_intermediate_size"),
             "first": _key("first_k_dense_replace", 0, low=0), "freq": _key("moe_layer_freq", 1),
             "shared": _op("mul", _key("n_shared_experts", 0, low=0), _key("moe_intermediate_size"))},
    agree=[{"key": "head_dim", "equals": [_f("qk_rope_head_dim"), _f("d_head")],
            "from": "qk_rope_head_dim or qk_nope_head_dim + qk_rope_head_dim"}],
)
GPT2 = {"fields": {
    "arch": "gpt2", "d_model": _key("n_embd"), "n_heads": _key("n_head"), "n_layers": _key("n_layer"),
    "n_kv_heads": H, "d_head": HEAD_DIM, "d_ff": _key("n_inner", _op("mul", 4, D)),
    "vocab_size": _key("vocab_size"), "max_seq_len": {"key": "n_positions", "else_key": "n_ctx"},
    "tie_word_embeddings": _flag("tie_word_embeddings", True), "attention_bias": "qkvo",
    "norm_params": 2, "mlp_gated": False, "mlp_bias": True, "position_rows": _f("max_seq_len"),
}}

FAMILIES: dict[str, dict[str, Any]] = {
    # ---------------------------------------------------------------- GPT-2 and StarCoder
    "gpt2": GPT2,
    "gpt_bigcode": {  # multi_query (its default): one K/V head shared by every query head
        "fields": {**GPT2["fields"], "n_kv_heads": _op("if", _flag("multi_query", True), 1, H)},
        "agree": [{"key": "num_key_value_heads", "equals": [_f("n_kv_heads")], "from": "multi_query"}],
    },
    # ---------------------------------------------------------------- Llama and its relatives
    "llama": _gated(bias=ATTENTION_BIAS, window=EVERY_LAYER,
                    refuse_true=[{"key": "mlp_bias", "what": "biases on the MLP"}],
                    class_defaults={"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                                    "num_attention_heads": 32, "max_position_embeddings": 2048,
                                    "vocab_size": 32000}),
    "mistral": _gated(window=EVERY_LAYER),
    "mixtral": _gated(window=EVERY_LAYER, experts={"rule": "every_layer", "n": _key("num_local_experts", 8),
                                                   "per_token": _key("num_experts_per_tok", 2)}),
    "qwen2": _gated(bias="qkv", window=QWEN_WINDOW),  # Qwen2 always has biases on q, k and v
    "qwen3": _gated(head_dim=128, bias=ATTENTION_BIAS, window=QWEN_WINDOW, fields={"qk_norm": True}),
    "gemma": _gated(head_dim=256, bias=ATTENTION_BIAS, tie=True),
    "gemma2": _gated(head_dim=256, bias=ATTENTION_BIAS, tie=True, window={"rule": "alternate", **SLIDING},
                     fields={"norms_per_layer": 4}),
    "gemma3_text": _gated(
        head_dim=256, bias=ATTENTION_BIAS, tie=True,
        window={"rule": "pattern", **SLIDING, "pattern": _key("sliding_window_pattern", 6)},
        fields={"norms_per_layer": 4, "qk_norm": True},
        class_defaults={"hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
                        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                        "max_position_embeddings": 131072, "vocab_size": 262208, "sliding_window": 4096},
    ),
    "qwen2_moe": _gated(bias=_bias(_flag("qkv_bias", True), "qkv"), window=QWEN_WINDOW, agree=QWEN_AGREE,
                        experts={**QWEN_EXPERTS, "shared": _key("shared_expert_intermediate_size", 0, low=0),
                                 "shared_gate": True}),
    "qwen3_moe": _gated(bias=ATTENTION_BIAS, window=QWEN_WINDOW, agree=QWEN_AGREE, experts=QWEN_EXPERTS,
                        fields={"qk_norm": True}),
    "deepseek_v2": DEEPSEEK,
    "deepseek_v3": {**DEEPSEEK, "ignores": ["num_key_value_heads", "num_nextn_predict_layers"]},
    # ---------------------------------------------------------------- their own key names
    "opt": {"fields": {  # learned positions with an offset of 2, LayerNorm, a ReLU MLP
        "arch": "gpt2", **HEADS, "n_kv_heads": H, "d_head": HEAD_DIM, "d_ff": _key("ffn_dim"),
        "vocab_size": _key("vocab_size"), "max_seq_len": _key("max_position_embeddings"),
        "tie_word_embeddings": _flag("tie_word_embeddings", True),
        "attention_bias": _bias(_flag("enable_bias", True)), "mlp_bias": _flag("enable_bias", True),
        "norm_params": _op("if", _flag("layer_norm_elementwise_affine", True), 2, 0), "mlp_gated": False,
        "position_rows": _op("add", _f("max_seq_len"), 2),
        "d_embed": _key("word_embed_proj_dim", D),  # OPT-350M: a narrower embedding, projected in and out
        "final_norm": _op("if", _flag("do_layer_norm_before", True),
                          _op("eq", _flag("_remove_final_layer_norm", False), False), False),
    }},
    "falcon": _plain(  # one fused QKV; multi_query: 1 KV head; new_decoder_architecture: num_kv_heads
        n_kv_heads=_op("if", _flag("new_decoder_architecture", False), _key("num_kv_heads", H),
                       _op("if", _flag("multi_query", True), 1, H)),
        d_ff=_key("ffn_hidden_size", _op("mul", 4, D)), vocab_size=_key("vocab_size"),
        max_seq_len=_key("max_position_embeddings", 2048),  # FalconConfig's, where Falcon-7B's is silent
        tie_word_embeddings=_flag("tie_word_embeddings", True),
        attention_bias=_bias(_flag("bias", False)), mlp_bias=_flag("bias", False),
        norms_per_layer=_op("if", _flag("parallel_attn", True),  # one norm, or ln_attn and ln_mlp
                            _op("if", _op("eq", FALCON_NORMS, 2), 2, 1), 2),
    ),
    "gpt_neox": _plain(  # Pythia: one fused QKV with biases, a parallel residual
        n_kv_heads=H, **SIZES, tie_word_embeddings=_flag("tie_word_embeddings", False),
        attention_bias=_bias(_flag("attention_bias", True)), mlp_bias=True,
    ),
    "phi3": _gated(window=OWN_WINDOW, ignores=["attention_bias"]),  # Phi-3, 3.5, 4: fused qkv and gate_up
    "starcoder2": {**_plain(  # a window in every layer, use_bias on every projection
        n_kv_heads=KV_HEADS, **SIZES, tie_word_embeddings=_flag("tie_word_embeddings", True),
        attention_bias=_bias(_flag("use_bias", True)), mlp_bias=_flag("use_bias", True),
    ), "window": OWN_WINDOW},
    "olmo": _gated(bias=ATTENTION_BIAS, fields={"norm_params": 0}),  # its norms have no weights
    "olmo2": _gated(bias=ATTENTION_BIAS,  # norms after attention and MLP, q/k norms of full width
                    fields={"qk_norm": True, "qk_norm_width": True}),
    "cohere": _gated(bias=ATTENTION_BIAS, tie=True,  # one LayerNorm (no bias) per layer
                     fields={"norms_per_layer": 1, "qk_norm": _flag("use_qk_norm", False),
                             "qk_norm_width": True}),
    "internlm2": _gated(bias=_bias(_flag("bias", True))),  # wqkv and wo take the one "bias" key
    # ---------------------------------------------------------------- hybrids and state-space models
    "jamba": _hybrid(  # attention every attn_layer_period-th layer, Mamba in the others; experts every other
        _selective_scan("mamba_", {}, norms=True),
        {"rule": "period", "period": _key("attn_layer_period"), "offset": _key("attn_layer_offset", low=0)},
        **_gated(window=OWN_WINDOW, experts={
            "rule": "period", "n": _key("num_experts", 16), "per_token": _key("num_experts_per_tok", 2),
            "period": _key("expert_layer_period"), "offset": _key("expert_layer_offset", low=0)}),
    ),
    "bamba": _hybrid(  # attention in the listed layers, Mamba-2 in the others
        _ssd("mamba_", {"head_dim": "d_head"}),
        {"rule": "indices", "indices": "attn_layer_indices"},
        **_gated(bias=ATTENTION_BIAS, fields={"mlp_bias": _flag("mlp_bias", False)}),
    ),
    "mamba": _hybrid(
        _selective_scan("", {"d_state": "state_size", "d_conv": "conv_kernel", "dt_rank": "time_step_rank",
                             "conv_bias": "use_conv_bias", "proj_bias": "use_bias"}, norms=False),
        {"rule": "none"}, fields=_ssm(tie=True),
    ),
    "mamba2": _hybrid(
        _ssd("", {"n_heads": "num_heads", "d_state": "state_size", "d_conv": "conv_kernel",
                  "conv_bias": "use_conv_bias", "proj_bias": "use_bias"}),
        {"rule": "none"}, fields=_ssm(tie=False),
    ),
}

#: multimodal configs that nest their language model in ``text_config``, and the model_type the
#: nested config has when it does not say
WRAPPERS: dict[str, dict[str, str]] = {
    "llava": {"nested": "text_config", "model_type": "llama"},
    "llava_next": {"nested": "text_config", "model_type": "llama"},
    "gemma3": {"nested": "text_config", "model_type": "gemma3_text"},
}

#: Keys that change the cache or the weight count somewhere. A family honours the ones it reads;
#: any other one, set to something other than "off", is refused rather than ignored.
SIZING_KEYS = (
    "multi_query", "head_dim", "num_key_value_heads", "attention_bias", "qkv_bias", "mlp_bias",
    "sliding_window", "use_sliding_window", "max_window_layers", "layer_types", "sliding_window_pattern",
    "num_local_experts", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
    "shared_expert_intermediate_size", "decoder_sparse_step", "mlp_only_layers",
    "n_routed_experts", "n_shared_experts", "first_k_dense_replace", "moe_layer_freq",
    "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
    "num_nextn_predict_layers", "attention_chunk_size", "cross_attention_layers", "no_rope_layers",
    # keys of the families added later: set in a family that does not read them, they are refused
    "num_kv_heads", "new_decoder_architecture", "word_embed_proj_dim", "enable_bias", "bias", "use_bias",
    "use_qk_norm", "attn_layer_period", "attn_layer_offset", "attn_layer_indices", "expert_layer_period",
    "layers_block_type", "mamba_d_state", "state_size", "hybrid_override_pattern",
)
# fmt: on

#: every model_type the reader understands, the ones it read first first
MODEL_TYPES = tuple(FAMILIES)


def _keys_in(node: Any, found: set[str]) -> None:
    """Every config key an expression or rule reads."""
    if isinstance(node, dict):
        for name, value in node.items():
            if name in ("key", "flag", "else_key", "dense_list", "indices") and isinstance(value, str):
                found.add(value)
            elif name == "layer_types" and value is True:
                found.add("layer_types")
            elif name == "class_defaults":
                continue
            else:
                _keys_in(value, found)
    elif isinstance(node, list):
        for item in node:
            _keys_in(item, found)


def honoured_keys(model_type: str) -> list[str]:
    """The sizing keys ``model_type``'s row reads or knowingly ignores (sorted); the reader refuses
    the others when they are set."""
    row = FAMILIES[model_type]
    found: set[str] = set(row.get("ignores", []))
    _keys_in(row, found)
    found.update(entry["key"] for entry in row.get("agree", []) + row.get("refuse_true", []))
    return sorted(found & set(SIZING_KEYS))


def export() -> dict[str, Any]:
    """The table as the page reads it (JSON-ready): families (each with the ``order`` in which its
    fields are read), wrappers, sizing keys, the keys each family honours, the model types in
    order, and what each ``ModelSpec.arch`` presets."""
    table = {
        # a row's field order goes with it: the page's JSON sorts an object's keys
        "families": {t: {**row, "order": list(row["fields"])} for t, row in FAMILIES.items()},
        "wrappers": WRAPPERS,
        "sizing_keys": list(SIZING_KEYS),
        "arch_presets": ARCH_PRESETS,
        "model_types": list(MODEL_TYPES),
        "honoured": {t: honoured_keys(t) for t in MODEL_TYPES},
    }
    return json.loads(json.dumps(table))  # plain lists and dicts, as the page's JSON holds them
