"""The calculator reads every family people paste (issue 45): one published config.json of each
(bundled in kvtutor/data/configs/families, written by hand from the model's published file, no
download), its KV bytes per token and per sequence derived here by hand from the model's
published sizes, its weights counted by transformers' own classes, and the rule table as data that
the page reads too.

Only keys that do not change any size are left out of those files where their published values
are long lists (Phi-3.5's RoPE factors); every key that sizes the cache or the weights is there.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kvtutor.book.widgets import kv_calculator_data
from kvtutor.measure import memory
from kvtutor.models import families
from kvtutor.models.hf_config import (
    ConfigError,
    ModelSpec,
    family_example_path,
    family_examples,
    load_model_spec,
    read_hf_config,
    spec_from_dict,
)

ROOT = Path(__file__).resolve().parents[1]
B = 2  # bytes per bf16 number

# Per model: (KV bytes per token in bf16, [(sequence length, KV bytes per sequence)], state bytes
# per sequence), each from the published sizes: 2 (K and V) x attention layers x KV heads x head
# dim x 2 bytes, and for a window of W in some layers min(S, W) rows there.
PER_TOKEN = {
    # OPT-13B: the vLLM paper's example, 2 x 5120 x 40 layers x 2 B = 800 KiB a token
    "opt-13b": (2 * 40 * 40 * 128 * B, [(2048, 2048 * 2 * 40 * 5120 * B)], 0),
    "opt-350m": (2 * 24 * 16 * 64 * B, [(2048, 2048 * 2 * 24 * 1024 * B)], 0),
    # Falcon-7B: multi-query, one KV head of 4544 / 71 = 64 numbers
    "falcon-7b": (2 * 32 * 1 * 64 * B, [(2048, 2048 * 2 * 32 * 64 * B)], 0),
    # Falcon-40B: the new decoder architecture, 8 KV groups of 8192 / 128 = 64
    "falcon-40b": (2 * 60 * 8 * 64 * B, [(2048, 2048 * 2 * 60 * 8 * 64 * B)], 0),
    "pythia-6.9b": (2 * 32 * 32 * 128 * B, [(2048, 2048 * 2 * 32 * 4096 * B)], 0),
    # Phi-3-mini-4k: a window of 2047 tokens in every layer, head dim 3072 / 32 = 96
    "phi-3-mini-4k": (
        2 * 32 * 32 * 96 * B,
        [(1000, 1000 * 2 * 32 * 3072 * B), (4096, 2047 * 2 * 32 * 3072 * B)],
        0,
    ),
    "phi-3.5-mini": (2 * 32 * 32 * 96 * B, [(131072, 131072 * 2 * 32 * 3072 * B)], 0),  # window 262,144
    "phi-4": (2 * 40 * 10 * 128 * B, [(16384, 16384 * 2 * 40 * 10 * 128 * B)], 0),
    # StarCoder2-15B: a window of 4096 in every layer
    "starcoder2-15b": (
        2 * 40 * 4 * 128 * B,
        [(4096, 4096 * 2 * 40 * 512 * B), (16384, 4096 * 2 * 40 * 512 * B)],
        0,
    ),
    "olmo-7b": (2 * 32 * 32 * 128 * B, [(2048, 2048 * 2 * 32 * 4096 * B)], 0),
    "olmo-2-7b": (2 * 32 * 32 * 128 * B, [(4096, 4096 * 2 * 32 * 4096 * B)], 0),
    "command-r": (2 * 40 * 64 * 128 * B, [(8192, 8192 * 2 * 40 * 8192 * B)], 0),
    "command-r-plus": (2 * 64 * 8 * 128 * B, [(8192, 8192 * 2 * 64 * 1024 * B)], 0),
    "internlm2.5-7b": (2 * 32 * 8 * 128 * B, [(32768, 32768 * 2 * 32 * 1024 * B)], 0),
    # Gemma-3: every 6th layer global, the others a window (1B: 512, 4 of 26 global; 27B: 1024,
    # 10 of 62 global); the 27B's text_config leaves its context (131,072) to the class default
    "gemma-3-1b": (2 * 26 * 1 * 256 * B, [(32768, 2 * 256 * B * (4 * 32768 + 22 * 512))], 0),
    "gemma-3-27b": (2 * 62 * 16 * 128 * B, [(131072, 2 * 16 * 128 * B * (10 * 131072 + 52 * 1024))], 0),
    # LLaVA-1.5-7B: a Vicuna-7B (Llama-2-7B's sizes, the class defaults) in text_config
    "llava-1.5-7b": (2 * 32 * 32 * 128 * B, [(4096, 4096 * 2 * 32 * 4096 * B)], 0),
    # Jamba: attention in layers 4, 12, 20, 28 (period 8, offset 4); the 28 Mamba layers keep a
    # convolution window of 4 and an SSM state of 16 per inner channel (2 x 4096 = 8192)
    "jamba-v0.1": (2 * 4 * 8 * 128 * B, [(262144, 262144 * 2 * 4 * 8 * 128 * B)], 28 * 8192 * (4 + 16) * B),
    # Bamba-9B: attention in layers 9, 18, 27; 29 Mamba-2 layers: a convolution over x, B and C
    # (8192 + 2 x 1 x 128 channels) of 4, and 128 SSM heads x 64 x 128
    "bamba-9b": (
        2 * 3 * 8 * 128 * B,
        [(4096, 4096 * 2 * 3 * 8 * 128 * B)],
        29 * ((8192 + 2 * 128) * 4 + 128 * 64 * 128) * B,
    ),  # fmt: skip
    # Mamba-2.8B: no attention, no KV cache; 64 layers of 5120 channels x (4 + 16)
    "mamba-2.8b": (0, [(100_000, 0)], 64 * 5120 * (4 + 16) * B),
    # Mamba-Codestral-7B (Mamba-2): 64 layers, (8192 + 2 x 8 x 128) x 4 + 128 x 64 x 128
    "mamba-codestral-7b": (0, [(100_000, 0)], 64 * ((8192 + 2 * 8 * 128) * 4 + 128 * 64 * 128) * B),
}

# The publishers' sizes (billions, at the digits they quote them): model cards and papers.
PUBLISHED_BILLIONS = {
    "opt-13b": (13, 0), "pythia-6.9b": (6.86, 2), "phi-3-mini-4k": (3.8, 1), "phi-4": (14.7, 1),
    "olmo-7b": (6.9, 1), "olmo-2-7b": (7.3, 1), "command-r": (35, 0), "command-r-plus": (104, 0),
    "internlm2.5-7b": (7.7, 1), "jamba-v0.1": (52, 0), "bamba-9b": (9.78, 2), "mamba-2.8b": (2.8, 1),
    "mamba-codestral-7b": (7.3, 1), "gemma-3-1b": (1.0, 1), "falcon-7b": (7, 0), "falcon-40b": (41, 0),
}  # fmt: skip


def test_every_family_of_the_issue_has_an_example():
    types = {read_hf_config(family_example_path(n)).model_type for n in family_examples()}
    nested = {read_hf_config(family_example_path(n)).nested_in for n in family_examples()}
    assert types >= {"opt", "falcon", "gpt_neox", "phi3", "starcoder2", "olmo", "olmo2", "cohere",
                     "internlm2", "gemma3_text", "llama", "jamba", "bamba", "mamba", "mamba2"}  # fmt: skip
    assert nested >= {"gemma3", "llava"}
    assert set(PER_TOKEN) == set(family_examples())


@pytest.mark.parametrize("name", sorted(PER_TOKEN))
def test_bytes_per_token_and_per_sequence_by_hand(name):
    per_token, sequences, state = PER_TOKEN[name]
    spec = load_model_spec(name)
    assert memory.kv_bytes_per_token(spec) == per_token
    for seq_len, kv in sequences:
        assert memory.kv_bytes_per_sequence(spec, seq_len) == kv
        assert memory.stored_bytes_per_sequence(spec, seq_len).total == kv
    assert memory.state_bytes_per_sequence(spec) == state
    report = memory.kv_memory(spec, sequences[-1][0], 3)
    assert report.kv_bytes_total == 3 * (sequences[-1][1] + state)  # three sequences: KV and state


def test_opt_13b_is_the_vllm_papers_800_kib():
    assert memory.kv_bytes_per_token(load_model_spec("opt-13b"), "fp16") == 800 * 1024 == 2 * 5120 * 40 * 2


@pytest.mark.parametrize("name", sorted(PUBLISHED_BILLIONS))
def test_weights_match_the_published_size(name):
    billions, digits = PUBLISHED_BILLIONS[name]
    assert round(load_model_spec(name).n_params / 1e9, digits) == billions


def test_published_exact_counts():
    # StarCoder2's paper gives 15,957,889,024 (untied head); InternLM2's by hand: tok_embeddings and
    # output, per layer wqkv + wo (4096 x (4096 + 2 x 1024), 4096 x 4096), w1 w2 w3, two RMSNorms
    assert load_model_spec("starcoder2-15b").n_params == 15_957_889_024
    d, f, v = 4096, 14336, 92544
    layer = d * (d + 2 * 1024) + d * d + 3 * d * f + 2 * d
    assert load_model_spec("internlm2.5-7b").n_params == 2 * v * d + 32 * layer + d
    jamba = load_model_spec("jamba-v0.1")  # "12B active": 2 of 16 experts in 16 layers
    assert round(jamba.n_active_params / 1e9) == 12 and (jamba.n_moe_layers, jamba.n_experts) == (16, 16)


@pytest.mark.parametrize("name", sorted(n for n in PER_TOKEN if not n.startswith("internlm")))
def test_transformers_builds_as_many_weights_and_reads_the_same_sizes(name):
    """transformers' own config and model classes (InternLM2's are remote code, not in it): the
    same weight count, and a config it saves reads to the same spec."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    path = family_example_path(name)
    spec = read_hf_config(path)
    hf = transformers.AutoConfig.from_pretrained(str(path))
    assert spec_from_dict(hf.to_dict(), name=spec.name) == spec
    text = hf.text_config if spec.nested_in else hf
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(text)
    assert model.num_parameters() == spec.n_params


def test_hybrid_and_state_space_layouts():
    jamba, mamba = load_model_spec("jamba-v0.1"), load_model_spec("mamba-2.8b")
    assert (jamba.n_attention_layers, jamba.n_state_layers, jamba.attention_kind) == (4, 28, "GQA")
    assert (mamba.n_attention_layers, mamba.attention_kind, mamba.max_seq_len) == (0, "none", 0)
    assert memory.max_batch(mamba, 10**6, 80 * memory.GIB) == (
        80 * memory.GIB - memory.weights_bytes(mamba)
    ) // (64 * 5120 * 20 * B)
    # a quantized cache keeps the state in bf16; an fp32 one in fp32
    assert memory.state_bytes_per_sequence(jamba, "int8") == memory.state_bytes_per_sequence(jamba)
    assert memory.state_bytes_per_sequence(jamba, "fp32") == 2 * memory.state_bytes_per_sequence(jamba)
    with pytest.raises(ValueError, match=r"^spec: GPT2Config has no state-space layers \(28 in jamba-v0.1\)"):
        jamba.to_model_config()


def test_auto_sizes_are_the_config_classes():
    mamba = json.loads(family_example_path("mamba-2.8b").read_text())  # time_step_rank: ceil(2560 / 16)
    assert spec_from_dict({**mamba, "time_step_rank": "auto"}) == spec_from_dict(mamba)
    bamba = json.loads(family_example_path("bamba-9b").read_text())  # mamba_d_head: 2 x 4096 / 128
    assert spec_from_dict({**bamba, "mamba_d_head": "auto"}) == spec_from_dict(bamba)
    with pytest.raises(
        ConfigError, match=r"^config\['mamba_d_head'\]: 8192 is not a multiple of mamba_n_heads=100"
    ):
        spec_from_dict({**bamba, "mamba_d_head": "auto", "mamba_n_heads": 100})


def test_falcon_kv_heads_follow_its_two_layouts():
    falcon = json.loads(family_example_path("falcon-7b").read_text())
    assert spec_from_dict(falcon).n_kv_heads == 1  # multi_query
    assert spec_from_dict({**falcon, "multi_query": False}).n_kv_heads == 71  # plain multi-head
    assert spec_from_dict({**falcon, "num_kv_heads": 71}).n_kv_heads == 1  # ignored without the new layout
    assert spec_from_dict({**falcon, "new_decoder_architecture": True, "num_kv_heads": 1}).n_kv_heads == 1


def test_nested_configs_take_their_class_defaults_and_top_level_ones_do_not():
    assert spec_from_dict({"model_type": "llava", "text_config": {}}).n_layers == 32  # LlamaConfig's
    assert spec_from_dict({"model_type": "gemma3", "text_config": {}}).vocab_size == 262208
    with pytest.raises(ConfigError, match=r"^config: missing key 'hidden_size'"):
        spec_from_dict({"model_type": "llama", "vocab_size": 10})  # at the top: a size must be stated


def test_spec_validation_of_the_hybrid_fields():
    good = dict(name="m", model_type="jamba", arch="gated", n_layers=4, d_model=8, n_heads=2, n_kv_heads=1,
                d_head=4, d_ff=16, vocab_size=10, max_seq_len=8, n_state_layers=3,
                state_numbers_per_layer=5)  # fmt: skip
    assert ModelSpec(**good).n_attention_layers == 1
    for change, pattern in [
        ({"n_state_layers": 5}, r"^n_state_layers: expected 0 \.\. 4, got 5"),
        ({"state_numbers_per_layer": 0}, r"^state_numbers_per_layer: expected at least 1"),
        ({"norm_params": 3}, r"^norm_params: expected 0 <= norm_params <= 2, got 3"),
        ({"n_heads": 0, "n_kv_heads": 0}, r"^n_heads: expected an int >= 1, got 0"),  # one layer attends
        ({"sliding_window": 4, "n_sliding_layers": 2}, r"^n_sliding_layers: expected 0 \.\. 1, got 2"),
        (
            {"arch": "ssm", "n_state_layers": 4, "n_heads": 2, "n_kv_heads": 0},
            r"^n_kv_heads: expected a divisor",
        ),
    ]:
        with pytest.raises(ValueError, match=pattern):
            ModelSpec(**{**good, **change})
    ssm = ModelSpec(**{**good, "arch": "ssm", "n_state_layers": 4, "n_heads": 0, "n_kv_heads": 0, "d_head": 0,
                       "d_ff": 0, "max_seq_len": 0})  # fmt: skip
    assert (ssm.attention_kind, ssm.group_size, ssm.kv_numbers_per_layer) == ("none", 0, 0)


# ---------------------------------------------------------------- refusals


def test_every_bad_key_is_listed():
    config = {"model_type": "llama", "hidden_size": "2048", "num_attention_heads": 0, "num_hidden_layers": 4,
              "intermediate_size": 64, "vocab_size": 10, "max_position_embeddings": 8,
              "kv_lora_rank": 512}  # fmt: skip
    with pytest.raises(ConfigError) as info:
        spec_from_dict(config)
    assert info.value.keys == ["kv_lora_rank", "hidden_size", "num_attention_heads"]
    assert str(info.value).splitlines() == [message for _, message in info.value.problems]
    assert len(str(info.value).splitlines()) == 3


def test_unknown_families_are_still_refused_by_name():
    refused = r"^config\['model_type'\]: expected one of gpt2, .*mamba2, got 'rwkv' \(its cache layout"
    with pytest.raises(ValueError, match=refused):
        spec_from_dict({"model_type": "rwkv", "hidden_size": 64})


def test_a_file_that_is_not_a_config_gets_the_message_it_got_before(tmp_path):
    cases = {
        "list.json": ("[1, 2]", r"holds a JSON list, expected an object"),
        "text.json": ("hello", r"is not valid JSON"),
        "tokenizer.json": ('{"tokenizer_class": "X"}', r"^config: missing key 'model_type' in "),
    }
    for file, (text, message) in cases.items():
        (tmp_path / file).write_text(text)
        with pytest.raises(ValueError, match=message):
            read_hf_config(tmp_path / file)


@pytest.mark.parametrize(
    ("change", "keys"),
    [
        ({"attn_layer_offset": 8}, ["attn_layer_offset"]),
        ({"expert_layer_period": 0}, ["expert_layer_period"]),
        ({"mamba_d_state": None, "mamba_d_conv": 4.0}, ["mamba_d_state", "mamba_d_conv"]),
        ({"kv_lora_rank": 8, "layer_types": ["full_attention"] * 32}, ["layer_types", "kv_lora_rank"]),
        ({"num_key_value_heads": 7}, ["num_key_value_heads"]),
    ],
)
def test_jamba_refusals_name_the_keys(change, keys):
    config = {**json.loads(family_example_path("jamba-v0.1").read_text()), **change}
    with pytest.raises(ConfigError) as info:
        spec_from_dict(config)
    assert info.value.keys == keys


# ---------------------------------------------------------------- one table, read by both


def test_the_page_gets_the_table_the_reader_reads():
    table = families.export()
    assert kv_calculator_data()["families"] == table
    assert set(table["families"]) == set(families.MODEL_TYPES) and table["model_types"][0] == "gpt2"


def test_the_stored_page_holds_the_current_table():
    """The book shows the notebook's stored output: its calculator must carry today's table (else
    re-run the cell), which is what its page reads every config by."""
    notebook = json.loads((ROOT / "book" / "kv_memory.ipynb").read_text(encoding="utf-8"))
    found = []
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []):
            html = "".join(output.get("data", {}).get("text/html", []))
            if 'data-kvtutor-widget="kv-calculator"' in html:
                script = re.search(r'<script type="application/json">(.*?)</script>', html, re.S).group(1)
                found.append(json.loads(script))
    assert len(found) == 1 and found[0]["families"] == families.export()
    assert found[0] == kv_calculator_data()


def _family_branches(code: str) -> list[str]:
    """Family names the code compares a model_type with, or lists: a branch of code per family."""
    names = "|".join(re.escape(t) for t in families.MODEL_TYPES)
    compared = rf"""(?:==|!=|\bin\b|includes\(|case)\s*[(\[{{]?\s*["']({names})["']"""
    listed = rf"""["']({names})["']\s*[,:]\s*["'{{(\[]"""
    return sorted(set(re.findall(compared, code) + re.findall(listed, code)))


def test_families_are_data_not_branches():
    """No model_type is compared or listed in the readers' code: each family is a row of the table."""
    js = (ROOT / "book" / "_static" / "widgets" / "kv-config.js").read_text(encoding="utf-8")
    py = (ROOT / "src" / "kvtutor" / "models" / "hf_config.py").read_text(encoding="utf-8")
    assert _family_branches(js) == [] and _family_branches(py) == []
    # the check bites on the readers of before issue 45
    assert _family_branches('if model_type == "gemma2":  # layers 0, 2, 4') == ["gemma2"]
    assert _family_branches('const QWEN_MOE = ["qwen2_moe", "qwen3_moe"];') == ["qwen2_moe"]
    assert _family_branches('if (["qwen2", "qwen3", ...QWEN_MOE].includes(modelType))') == ["qwen2"]
