"""Reading Hugging Face config.json files, and the bundled table of published configs."""

from __future__ import annotations

import json

import numpy as np
import pytest

import kvtutor
from kvtutor.models.hf_config import (
    ModelSpec,
    bundled_config_path,
    bundled_models,
    load_model_spec,
    read_hf_config,
    spec_from_dict,
)

# Parameter counts the model publishers and the Hugging Face hub report. A wrong number in a
# bundled config (heads, KV heads, widths, layers, vocabulary, tying) would change these.
PUBLISHED_PARAMS = {
    "gpt2": 124_439_808,
    "gpt2-medium": 354_823_168,
    "gpt2-large": 774_030_080,
    "gpt2-xl": 1_557_611_200,
    "llama-2-7b": 6_738_415_616,
    "llama-2-13b": 13_015_864_320,
    "llama-2-70b": 68_976_648_192,
    "llama-3-8b": 8_030_261_248,
    "llama-3.1-8b": 8_030_261_248,
    "llama-3-70b": 70_553_706_496,
    "mistral-7b": 7_241_732_096,
    "mixtral-8x7b": 46_702_792_704,
    "qwen2.5-0.5b": 494_032_768,
    "qwen2.5-7b": 7_615_616_512,
    "qwen2.5-72b": 72_706_203_648,
    "gemma-2b": 2_506_172_416,
    "gemma-7b": 8_537_680_896,
    "gemma-2-9b": 9_241_705_984,
    # equal to what transformers builds from the same file (checked below); the MoE and MLA
    # models are the issue-12 cases: the publishers say 15.5B, 236B and 671B
    "starcoder": 15_517_456_384,
    "deepseek-v2": 235_741_434_880,
    "deepseek-v3": 671_026_404_352,
}

# (layers, query heads, KV heads, head dim, window, windowed layers, context) from the model cards
KV_SHAPES = {
    "gpt2": (12, 12, 12, 64, None, 0, 1024),
    "gpt2-xl": (48, 25, 25, 64, None, 0, 1024),
    "llama-2-7b": (32, 32, 32, 128, None, 0, 4096),
    "llama-2-70b": (80, 64, 8, 128, None, 0, 4096),
    "llama-3-8b": (32, 32, 8, 128, None, 0, 8192),
    "llama-3.1-8b": (32, 32, 8, 128, None, 0, 131072),
    "llama-3-70b": (80, 64, 8, 128, None, 0, 8192),
    "mistral-7b": (32, 32, 8, 128, 4096, 32, 32768),
    "mixtral-8x7b": (32, 32, 8, 128, None, 0, 32768),
    "qwen2.5-7b": (28, 28, 4, 128, None, 0, 131072),
    "gemma-2b": (18, 8, 1, 256, None, 0, 8192),
    "gemma-7b": (28, 16, 16, 256, None, 0, 8192),
    "gemma-2-9b": (42, 16, 8, 256, 4096, 21, 8192),
    "starcoder": (40, 48, 1, 128, None, 0, 8192),
    "deepseek-v2": (60, 128, 128, 192, None, 0, 163840),  # MLA: d_head is nope 128 + rope 64
    "deepseek-v3": (61, 128, 128, 192, None, 0, 163840),
}


def test_bundled_table_lists_every_file_and_the_requested_models():
    names = bundled_models()
    assert set(names) == set(PUBLISHED_PARAMS)
    for name in ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "llama-2-7b", "llama-2-70b", "llama-3-8b"):
        assert name in names
    sizes = [load_model_spec(n).n_params for n in names]
    assert sizes == sorted(sizes)


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_weight_count_matches_the_published_parameter_count(name):
    assert load_model_spec(name).n_params == PUBLISHED_PARAMS[name]


@pytest.mark.parametrize("name", sorted(KV_SHAPES))
def test_kv_shapes_of_bundled_models(name):
    s = load_model_spec(name)
    got = (s.n_layers, s.n_heads, s.n_kv_heads, s.d_head, s.sliding_window, s.n_sliding_layers, s.max_seq_len)
    assert got == KV_SHAPES[name]


def test_bundled_files_use_the_real_key_names():
    llama = json.loads(bundled_config_path("llama-3-8b").read_text())
    assert llama["num_key_value_heads"] == 8 and llama["model_type"] == "llama"
    assert "n_embd" in json.loads(bundled_config_path("gpt2").read_text())
    assert json.loads(bundled_config_path("qwen2.5-7b").read_text())["use_sliding_window"] is False


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_transformers_reads_the_same_sizes_and_builds_as_many_parameters(name):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    spec = load_model_spec(name)
    hf = transformers.AutoConfig.from_pretrained(str(bundled_config_path(name)))
    if spec.arch == "gated":
        assert hf.num_key_value_heads == spec.n_kv_heads
        if spec.attention_kind != "MLA":  # transformers' DeepSeek head_dim is the rope part
            assert getattr(hf, "head_dim", None) in (None, spec.d_head)
        layer_types = getattr(hf, "layer_types", None)
        if layer_types is not None:
            assert sum(t == "sliding_attention" for t in layer_types) == spec.n_sliding_layers
    with torch.device("meta"):  # shapes only, no memory
        model = transformers.AutoModelForCausalLM.from_config(hf)
    assert model.num_parameters() == spec.n_params


def test_gpt2_keys_and_conversion_to_model_config():
    cfg = {"model_type": "gpt2", "n_embd": 48, "n_head": 4, "n_layer": 3, "n_positions": 32, "vocab_size": 97}
    spec = spec_from_dict(cfg, name="tiny")
    assert (spec.arch, spec.d_head, spec.d_ff, spec.n_kv_heads, spec.tie_word_embeddings) == (
        "gpt2",
        12,
        192,
        4,
        True,
    )
    mc = spec.to_model_config()
    assert mc == kvtutor.GPT2Config(vocab_size=97, d_model=48, n_heads=4, n_layers=3, max_seq_len=32)
    assert spec.n_params == mc.n_params == kvtutor.GPT2Model.random(mc).n_params
    assert spec_from_dict({**cfg, "n_inner": 100}).d_ff == 100
    no_positions = {k: v for k, v in cfg.items() if k != "n_positions"}
    assert spec_from_dict({**no_positions, "n_ctx": 64}).max_seq_len == 64


def test_gpt2_keys_from_a_transformers_config():
    transformers = pytest.importorskip("transformers")
    hf = transformers.GPT2Config(n_embd=32, n_head=4, n_layer=2, n_positions=16, vocab_size=50)
    spec = spec_from_dict(hf.to_dict())
    assert spec.to_model_config() == kvtutor.GPT2Config(50, 32, 4, 2, 16)


def test_model_config_round_trip_keeps_gqa():
    mc = kvtutor.GPT2Config(vocab_size=40, d_model=32, n_heads=8, n_layers=2, max_seq_len=24, n_kv_heads=2)
    spec = ModelSpec.from_model_config(mc)
    assert spec.attention_kind == "GQA" and spec.group_size == 4
    assert spec.to_model_config() == mc
    assert spec.n_params == mc.n_params


def test_llama_spec_converts_with_the_same_cache_shape():
    spec = load_model_spec("llama-3-8b")
    mc = spec.to_model_config(max_seq_len=64, vocab_size=10)
    assert (mc.n_layers, mc.n_kv_heads, mc.d_head) == (32, 8, 128)
    assert mc.max_seq_len == 64 and mc.vocab_size == 10


def test_explicit_head_dim_that_does_not_fit_model_config_is_refused():
    spec = load_model_spec("gemma-7b")  # 16 heads x 256 = 4096 != hidden_size 3072
    assert spec.n_heads * spec.d_head != spec.d_model
    with pytest.raises(ValueError, match=r"^spec: GPT2Config needs n_heads \* d_head == d_model"):
        spec.to_model_config()


def test_attention_kinds():
    assert load_model_spec("llama-2-7b").attention_kind == "MHA"
    assert load_model_spec("llama-2-70b").attention_kind == "GQA"
    assert load_model_spec("gemma-2b").attention_kind == "MQA"


LLAMA = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "num_hidden_layers": 3,
    "intermediate_size": 96,
    "max_position_embeddings": 128,
    "vocab_size": 100,
}


def test_llama_defaults():
    spec = spec_from_dict(LLAMA)
    assert (spec.d_head, spec.n_kv_heads, spec.sliding_window, spec.tie_word_embeddings) == (
        8,
        2,
        None,
        False,
    )
    mha = spec_from_dict({k: v for k, v in LLAMA.items() if k != "num_key_value_heads"})
    assert mha.n_kv_heads == 8  # older Llama configs have no num_key_value_heads: every head its own
    assert spec_from_dict({**LLAMA, "head_dim": 16}).d_head == 16
    assert spec_from_dict({**LLAMA, "num_key_value_heads": None}).n_kv_heads == 8
    no_type = {k: v for k, v in LLAMA.items() if k != "model_type"}
    with pytest.raises(ValueError, match=r"^config: missing key 'model_type'; expected one of gpt2, "):
        spec_from_dict(no_type)


def test_biases_and_experts_enter_the_weight_count():
    base = spec_from_dict(LLAMA).n_params
    n_layers, q, kv, d, f = 3, 64, 16, 64, 96
    assert spec_from_dict({**LLAMA, "model_type": "qwen2"}).n_params == base + n_layers * (q + 2 * kv)
    assert spec_from_dict({**LLAMA, "attention_bias": True}).n_params == base + n_layers * (q + 2 * kv + d)
    moe = spec_from_dict({**LLAMA, "model_type": "mixtral", "num_local_experts": 4}).n_params
    assert moe == base + n_layers * (3 * (3 * d * f) + d * 4)  # 3 more experts and a router
    tied = spec_from_dict({**LLAMA, "tie_word_embeddings": True}).n_params
    assert tied == base - 100 * 64


def test_multimodal_wrapper_reads_text_config():
    spec = spec_from_dict({"model_type": "llava", "text_config": LLAMA})
    assert spec.n_kv_heads == 2 and spec.n_layers == 3


@pytest.mark.parametrize(
    ("extra", "window", "n_sliding"),
    [
        ({"model_type": "mistral", "sliding_window": 32}, 32, 3),
        ({"model_type": "mistral", "sliding_window": None}, None, 0),
        ({"model_type": "qwen2", "sliding_window": 32, "use_sliding_window": False}, None, 0),
        (
            {"model_type": "qwen2", "sliding_window": 32, "use_sliding_window": True, "max_window_layers": 1},
            32,
            2,
        ),
        ({"model_type": "gemma2", "sliding_window": 32}, 32, 2),
        ({"model_type": "gemma3_text", "sliding_window": 32, "sliding_window_pattern": 2}, 32, 2),
        (
            {"sliding_window": 32, "layer_types": ["sliding_attention", "full_attention", "full_attention"]},
            32,
            1,
        ),
        ({"sliding_window": 32, "layer_types": ["full_attention"] * 3}, None, 0),
        (  # the switch off wins over layer_types, as transformers' Qwen2Config has it
            {
                "model_type": "qwen2",
                "sliding_window": 32,
                "use_sliding_window": False,
                "layer_types": ["full_attention", "sliding_attention", "sliding_attention"],
            },
            None,
            0,
        ),  # fmt: skip
    ],
)
def test_sliding_window_rules(extra, window, n_sliding):
    spec = spec_from_dict({**LLAMA, **extra})
    assert (spec.sliding_window, spec.n_sliding_layers) == (window, n_sliding)


def test_sliding_window_rules_agree_with_transformers():
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    for extra in (
        {"model_type": "qwen2", "sliding_window": 32, "use_sliding_window": True, "max_window_layers": 1},
        {"model_type": "gemma2", "sliding_window": 32, "head_dim": 8},
    ):
        d = {**LLAMA, **extra}
        hf = transformers.AutoConfig.for_model(**d)
        assert sum(t == "sliding_attention" for t in hf.layer_types) == spec_from_dict(d).n_sliding_layers


def test_cached_tokens_respects_the_window():
    spec = load_model_spec("gemma-2-9b")  # 21 of 42 layers keep 4096 tokens
    assert spec.cached_tokens(1000) == 42 * 1000
    assert spec.cached_tokens(8192) == 21 * 8192 + 21 * 4096


def test_layer_tokens_by_hand():
    gemma2 = load_model_spec("gemma-2-9b")  # 21 full layers, 21 with a 4096-token window
    assert gemma2.layer_tokens(8192) == [(21, 8192), (21, 4096)]
    assert gemma2.layer_tokens(1000) == [(21, 1000), (21, 1000)]
    assert gemma2.layer_tokens(8192, window=1024, sinks=4) == [(21, 1024), (21, 1024)]
    assert gemma2.layer_tokens(32768, window=8192) == [(21, 8192), (21, 4096)]  # its own is shorter
    assert load_model_spec("mistral-7b").layer_tokens(8192) == [(32, 4096)]
    assert load_model_spec("llama-3-8b").layer_tokens(100, window=64, sinks=4) == [(32, 64)]
    assert load_model_spec("llama-3-8b").layer_tokens(50, window=64, sinks=63) == [(32, 50)]
    assert gemma2.without_window().layer_tokens(8192) == [(42, 8192)]
    assert gemma2.without_window().n_params == gemma2.n_params


@pytest.mark.parametrize("name", bundled_models())
def test_layer_tokens_sum_to_cached_tokens(name):
    spec = load_model_spec(name)
    for seq_len in (1, 100, 4096, 4097, 10**6):
        pairs = spec.layer_tokens(seq_len)
        assert sum(layers for layers, _ in pairs) == spec.n_layers
        assert sum(layers * tokens for layers, tokens in pairs) == spec.cached_tokens(seq_len)


def test_layer_tokens_errors():
    spec = load_model_spec("llama-3-8b")
    with pytest.raises(ValueError, match=r"^sinks: expected 0 without a window, got 2"):
        spec.layer_tokens(10, sinks=2)
    with pytest.raises(ValueError, match=r"^window: expected an int >= 1, got 0"):
        spec.layer_tokens(10, window=0)
    with pytest.raises(ValueError, match=r"^sinks: expected an int >= 0, got -3"):
        spec.layer_tokens(10, window=4, sinks=-3)
    with pytest.raises(ValueError, match=r"^sinks: expected 0 <= sinks <= 3, got 4"):  # inside the window
        spec.layer_tokens(10, window=4, sinks=4)
    with pytest.raises(ValueError, match=r"^seq_len: expected an int >= 1, got 0"):
        spec.layer_tokens(0, window=4)


# ---------------------------------------------------------------- files and errors


def test_read_file_and_folder(tmp_path):
    path = tmp_path / "my-model" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(LLAMA))
    assert read_hf_config(path).name == "my-model"
    assert read_hf_config(path.parent) == read_hf_config(path)
    other = tmp_path / "x.json"
    other.write_text(json.dumps(LLAMA))
    assert load_model_spec(str(other)).name == "x"
    assert load_model_spec("LLAMA-3-8B").name == "llama-3-8b"


@pytest.mark.parametrize(
    "key", ["hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size", "vocab_size"]
)
def test_missing_llama_key_is_named(tmp_path, key):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in LLAMA.items() if k != key}))
    with pytest.raises(ValueError, match=rf"^config: missing key '{key}' in .*config.json"):
        read_hf_config(path)


@pytest.mark.parametrize("key", ["n_embd", "n_head", "n_layer", "vocab_size", "n_positions"])
def test_missing_gpt2_key_is_named(key):
    cfg = {"model_type": "gpt2", "n_embd": 48, "n_head": 4, "n_layer": 3, "n_positions": 32, "vocab_size": 97}
    with pytest.raises(ValueError, match=rf"^config: missing key '{key}'"):
        spec_from_dict({k: v for k, v in cfg.items() if k != key})


def test_config_without_any_size_key():
    with pytest.raises(ValueError, match=r"^config: missing key 'model_type'"):
        spec_from_dict({"vocab_size": 10})
    with pytest.raises(ValueError, match=r"^config: missing key 'hidden_size'"):
        spec_from_dict({"model_type": "llama", "vocab_size": 10})


@pytest.mark.parametrize(
    ("change", "pattern"),
    [
        ({"hidden_size": "64"}, r"^config\['hidden_size'\]: expected a positive int, got '64'"),
        ({"num_hidden_layers": 0}, r"^config\['num_hidden_layers'\]: expected a positive int, got 0"),
        ({"num_key_value_heads": 3}, r"^config\['num_key_value_heads'\]: expected a divisor"),
        ({"hidden_size": 60}, r"^config\['hidden_size'\]: expected a multiple of num_attention_heads=8"),
        ({"tie_word_embeddings": "yes"}, r"^config\['tie_word_embeddings'\]: expected true or false"),
        ({"model_type": 3}, r"^config\['model_type'\]: expected a string"),
        ({"layer_types": ["full_attention"]}, r"^config\['layer_types'\]: expected a list of 3 strings"),
        ({"num_hidden_layers": True}, r"^config\['num_hidden_layers'\]: expected a positive int, got True"),
    ],
)
def test_bad_values_are_named(change, pattern):
    with pytest.raises(ValueError, match=pattern):
        spec_from_dict({**LLAMA, **change})


def test_bad_files(tmp_path):
    with pytest.raises(ValueError, match=r"^path: no such file"):
        read_hf_config(tmp_path / "nope.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(ValueError, match=r"^path: .* is not valid JSON"):
        read_hf_config(broken)
    array = tmp_path / "array.json"
    array.write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"^path: .* holds a JSON list, expected an object"):
        read_hf_config(array)
    with pytest.raises(TypeError, match=r"^path: expected a file path"):
        read_hf_config(3)
    with pytest.raises(TypeError, match=r"^config: expected a JSON object"):
        spec_from_dict([1])


def test_unknown_bundled_name_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"^name: no bundled config 'llama-9'; bundled: .*llama-3-8b"):
        load_model_spec("llama-9")
    with pytest.raises(TypeError, match=r"^name: expected a model name"):
        bundled_config_path(None)


def test_spec_validation():
    good = dict(
        name="m", model_type="llama", arch="gated", n_layers=2, d_model=8, n_heads=2, n_kv_heads=1,
        d_head=4, d_ff=16, vocab_size=10, max_seq_len=8,
    )  # fmt: skip
    ModelSpec(**good)
    for change, pattern in [
        ({"arch": "rnn"}, r"^arch: expected one of 'gpt2', 'gated', 'plain', 'ssm', got 'rnn'"),
        ({"n_kv_heads": 3}, r"^n_kv_heads: expected a divisor of n_heads=2"),
        ({"n_sliding_layers": 1}, r"^n_sliding_layers: expected 0 when sliding_window is None"),
        ({"sliding_window": 4, "n_sliding_layers": 3}, r"^n_sliding_layers: expected 0 \.\. 2"),
        ({"attention_bias": "q"}, r"^attention_bias: expected"),
        ({"d_ff": 0}, r"^d_ff: expected an int >= 1, got 0"),
    ]:
        with pytest.raises(ValueError, match=pattern):
            ModelSpec(**{**good, **change})
    with pytest.raises(TypeError, match=r"^n_layers: expected an int, got float 2.0"):
        ModelSpec(**{**good, "n_layers": 2.0})
    with pytest.raises(ValueError, match=r"^seq_len: expected an int >= 1, got 0"):
        ModelSpec(**good).cached_tokens(0)
    numpy_sized = ModelSpec(**{**good, "n_layers": np.int64(2), "d_ff_expert": np.int32(0)})
    assert numpy_sized == ModelSpec(**good) and type(numpy_sized.n_layers) is int


def test_numpy_model_from_a_converted_spec_runs():
    mc = load_model_spec("gpt2").to_model_config(max_seq_len=8, vocab_size=16)
    small = kvtutor.GPT2Config(16, 8, 2, 1, 8, n_kv_heads=1)
    assert mc.n_kv_heads == mc.n_heads  # GPT-2 is plain multi-head attention
    model = kvtutor.GPT2Model.random(small)
    assert np.isfinite(model.logits_without_cache([1, 2, 3])).all()


# ---------------------------------------------------------------- issue 12: real architectures


def test_deepseek_v2_caches_the_latent_not_the_heads():
    """Hand computation: 60 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) numbers per token."""
    s = load_model_spec("deepseek-v2")
    assert s.attention_kind == "MLA"
    assert (s.kv_lora_rank, s.qk_rope_head_dim, s.q_lora_rank, s.d_value) == (512, 64, 1536, 128)
    assert s.kv_numbers_per_layer == 512 + 64
    # expanded: 128 heads x (key 128 + 64, value 128)
    assert s.kv_numbers_per_layer_decompressed == 128 * (192 + 128)
    # about 236B in all; 6 of 160 routed experts (plus 2 shared) per token: about 21B active
    assert round(s.n_params / 1e9) == 236 and round(s.n_active_params / 1e9) == 21
    assert (s.n_experts, s.n_experts_per_token, s.n_dense_layers, s.d_ff_expert) == (160, 6, 1, 1536)
    assert s.d_ff_shared == 2 * 1536


def test_deepseek_v2_parameters_by_hand():
    d, h, v, n_layers = 5120, 128, 102400, 60
    attn = (
        d * 1536 + 1536 + 1536 * h * 192  # q: down, norm, up
        + d * 576 + 512 + 512 * h * (128 + 128)  # kv: down (latent + rope key), norm, up
        + h * 128 * d  # o
    )  # fmt: skip
    expert = 3 * d * 1536
    moe = 160 * expert + 2 * expert + d * 160  # routed, shared, router
    dense = 3 * d * 12288
    total = 2 * v * d + n_layers * (attn + 2 * d) + dense + 59 * moe + d
    assert load_model_spec("deepseek-v2").n_params == total
    assert load_model_spec("deepseek-v2").n_active_params == total - 59 * (160 - 6) * expert


def test_deepseek_v3_sizes():
    s = load_model_spec("deepseek-v3")
    assert s.kv_numbers_per_layer * s.n_layers == 61 * 576
    assert round(s.n_params / 1e9) == 671 and round(s.n_active_params / 1e9) == 38  # "37B activated"
    assert (s.n_experts, s.n_experts_per_token, s.n_dense_layers, s.d_ff_shared) == (256, 8, 3, 2048)


def test_starcoder_has_one_kv_head():
    s = load_model_spec("starcoder")
    assert (s.model_type, s.attention_kind, s.n_kv_heads, s.d_head) == ("gpt_bigcode", "MQA", 1, 128)
    assert s.n_layers * s.kv_numbers_per_layer == 40 * 2 * 128
    mha = spec_from_dict({**json.loads(bundled_config_path("starcoder").read_text()), "multi_query": False})
    assert mha.n_kv_heads == 48 and mha.n_params > s.n_params
    # a StarCoder-shaped NumPy model has the same cache layout: one KV head
    assert s.to_model_config(max_seq_len=8, vocab_size=10).n_kv_heads == 1


def test_mixtral_active_parameters():
    s = load_model_spec("mixtral-8x7b")
    expert = 3 * 4096 * 14336
    assert s.n_active_params == s.n_params - 32 * (8 - 2) * expert
    assert round(s.n_active_params / 1e9, 1) == 12.9  # Mistral AI: "12.9B active"
    assert load_model_spec("llama-3-8b").n_active_params == load_model_spec("llama-3-8b").n_params


QWEN2_MOE = {
    **LLAMA,
    "model_type": "qwen2_moe",
    "num_experts": 6,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 24,
    "shared_expert_intermediate_size": 48,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [0],
}
QWEN3_MOE = {
    **{k: v for k, v in QWEN2_MOE.items() if k != "shared_expert_intermediate_size"},
    "model_type": "qwen3_moe",
    "head_dim": 8,
}
DEEPSEEK_SMALL = {
    "model_type": "deepseek_v3", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4,
    "num_hidden_layers": 3, "intermediate_size": 96, "max_position_embeddings": 128, "vocab_size": 100,
    "kv_lora_rank": 16, "q_lora_rank": 24, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8,
    "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2, "moe_intermediate_size": 12,
    "first_k_dense_replace": 1, "moe_layer_freq": 1, "n_group": 2, "topk_group": 1,
}  # fmt: skip


def test_moe_naming_by_hand():
    d, f_e, n_layers = 64, 24, 3
    dense = spec_from_dict({**LLAMA, "model_type": "qwen2"}).n_params  # qkv biases, like Qwen2-MoE
    q = spec_from_dict(QWEN2_MOE)
    moe = 6 * 3 * d * f_e + d * 6 + 3 * d * 48 + d  # experts, router, shared expert and its gate
    assert q.n_dense_layers == 1 and q.n_params == dense + 2 * (moe - 3 * d * 96)
    assert q.n_active_params == q.n_params - 2 * 4 * 3 * d * f_e
    q3 = spec_from_dict(QWEN3_MOE)
    assert q3.qk_norm and q3.attention_bias == "" and q3.d_ff_shared == 0  # shared expert: Qwen2 only
    with pytest.raises(
        ValueError, match=r"^config\['shared_expert_intermediate_size'\]: model_type 'qwen3_moe'"
    ):
        spec_from_dict({**QWEN3_MOE, "shared_expert_intermediate_size": 48})
    assert spec_from_dict({**QWEN2_MOE, "decoder_sparse_step": 3, "mlp_only_layers": []}).n_dense_layers == 2
    assert n_layers == q.n_layers


@pytest.mark.parametrize(
    "config", [QWEN2_MOE, QWEN3_MOE, DEEPSEEK_SMALL, {**DEEPSEEK_SMALL, "q_lora_rank": None}]
)
def test_moe_and_mla_counts_agree_with_transformers(config):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    spec = spec_from_dict(config)
    hf = transformers.AutoConfig.for_model(**config)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf)
    assert model.num_parameters() == spec.n_params


@pytest.mark.parametrize(
    ("config", "pattern"),
    [
        ({**LLAMA, "model_type": "rwkv"}, r"^config\['model_type'\]: expected one of gpt2, .*got 'rwkv'"),
        ({**LLAMA, "kv_lora_rank": 512}, r"^config\['kv_lora_rank'\]: model_type 'llama' does not use this"),
        ({**LLAMA, "num_local_experts": 8}, r"^config\['num_local_experts'\]: model_type 'llama'"),
        ({**LLAMA, "mlp_bias": True}, r"^config\['mlp_bias'\]: biases on the MLP are not modelled"),
        (
            {**LLAMA, "model_type": "mistral", "attention_bias": True},
            r"^config\['attention_bias'\]: model_type",
        ),
        (
            {**LLAMA, "layer_types": ["chunked_attention"] * 3},
            r"^config\['layer_types'\]: expected 'sliding_attention' or 'full_attention'.*'chunked_",
        ),
        ({**LLAMA, "attention_chunk_size": 8192}, r"^config\['attention_chunk_size'\]"),
        (
            {
                "model_type": "gpt2",
                "n_embd": 48,
                "n_head": 4,
                "n_layer": 3,
                "n_positions": 32,
                "vocab_size": 97,
                "multi_query": True,
            },
            r"^config\['multi_query'\]: model_type 'gpt2' does not use this key",
        ),  # fmt: skip
        (
            {**DEEPSEEK_SMALL, "attention_bias": True},
            r"^config\['attention_bias'\]: model_type 'deepseek_v3'",
        ),
        (
            {k: v for k, v in DEEPSEEK_SMALL.items() if k != "kv_lora_rank"},
            r"^config: missing key 'kv_lora_rank'",
        ),
        (
            {**DEEPSEEK_SMALL, "qk_rope_head_dim": "64"},
            r"^config\['qk_rope_head_dim'\]: expected a positive int",
        ),
        ({**QWEN2_MOE, "mlp_only_layers": [7]}, r"^config\['mlp_only_layers'\]: expected a list of layer"),
    ],
)
def test_unknown_types_and_unmodelled_keys_are_refused_by_name(config, pattern):
    with pytest.raises(ValueError, match=pattern):
        spec_from_dict(config)


def test_off_values_of_unused_keys_are_fine():
    assert spec_from_dict({**LLAMA, "kv_lora_rank": None, "num_experts": 0, "mlp_bias": False}).n_params


def test_hub_id_is_not_a_guess_and_not_a_download():
    with pytest.raises(
        ValueError, match=r"^name_or_path: 'meta-llama/Llama-3.1-8B' looks like a Hugging Face"
    ):
        load_model_spec("meta-llama/Llama-3.1-8B")
    with pytest.raises(ValueError, match=r"bundled 'llama-3.1-8b' is that model's published config.*--list"):
        load_model_spec("meta-llama/Llama-3.1-8B")
    with pytest.raises(ValueError, match=r"huggingface.co/org/new-model/resolve/main/config.json"):
        load_model_spec("org/new-model")


def test_latent_spec_refuses_a_model_config():
    with pytest.raises(ValueError, match=r"^spec: GPT2Config has no latent attention"):
        load_model_spec("deepseek-v2").to_model_config()


def test_spec_validation_of_the_new_fields():
    good = dict(
        name="m", model_type="llama", arch="gated", n_layers=2, d_model=8, n_heads=2, n_kv_heads=1,
        d_head=4, d_ff=16, vocab_size=10, max_seq_len=8,
    )  # fmt: skip
    for change, pattern in [
        ({"n_experts": 4, "n_experts_per_token": 5}, r"^n_experts_per_token: expected <= n_experts=4"),
        ({"n_dense_layers": 3}, r"^n_dense_layers: expected 0 \.\. 2"),
        ({"kv_lora_rank": 8, "qk_rope_head_dim": 2}, r"^kv_lora_rank: latent attention expects"),
        (
            {"kv_lora_rank": 8, "n_kv_heads": 2, "qk_rope_head_dim": 4},
            r"^qk_rope_head_dim: expected 1 \.\. d_head-1",
        ),
        ({"q_lora_rank": 8}, r"^q_lora_rank: expected 0 without latent attention"),
        ({"d_ff_shared": -1}, r"^d_ff_shared: expected an int >= 0"),
    ]:
        with pytest.raises(ValueError, match=pattern):
            ModelSpec(**{**good, **change})


ROUND_TRIP = {
    "llama": LLAMA,
    "mixtral": {**LLAMA, "model_type": "mixtral", "num_local_experts": 4},
    "qwen3": {**LLAMA, "model_type": "qwen3"},  # no head_dim: Qwen3Config's default is 128
    "gemma": {**LLAMA, "model_type": "gemma"},  # Gemma's default head_dim is 256
    "gemma2": {**LLAMA, "model_type": "gemma2", "sliding_window": 32, "head_dim": 8},
    "gemma3_text": {**LLAMA, "model_type": "gemma3_text", "head_dim": 8, "sliding_window": 16},
    "qwen2_moe": QWEN2_MOE,
    "qwen3_moe": QWEN3_MOE,
    "deepseek_v3": DEEPSEEK_SMALL,
    **{name: json.loads(bundled_config_path(name).read_text()) for name in ("starcoder", "deepseek-v2")},
}


@pytest.mark.parametrize("name", sorted(ROUND_TRIP))
def test_configs_saved_by_transformers_read_the_same(name):
    """transformers writes some keys its own way (num_local_experts for num_experts, head_dim =
    qk_rope_head_dim for DeepSeek, num_key_value_heads for StarCoder, sliding_window 0): same spec."""
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    config = ROUND_TRIP[name]
    saved = transformers.AutoConfig.for_model(**config).to_dict()
    assert spec_from_dict(saved, name="x") == spec_from_dict(config, name="x")


def test_family_head_dim_defaults():
    assert spec_from_dict({**LLAMA, "model_type": "qwen3"}).d_head == 128
    assert spec_from_dict({**LLAMA, "model_type": "gemma"}).d_head == 256
    assert spec_from_dict(LLAMA).d_head == 64 // 8


@pytest.mark.parametrize(
    ("config", "pattern"),
    [
        (
            {**DEEPSEEK_SMALL, "head_dim": 5},
            r"^config\['head_dim'\]: expected 4 or 12 \(from qk_rope_head_dim or .*\), got 5",
        ),
        (
            {**QWEN3_MOE, "num_local_experts": 5},
            r"^config\['num_local_experts'\]: expected 6 \(from num_experts\), got 5",
        ),
        (
            {**json.loads(bundled_config_path("starcoder").read_text()), "num_key_value_heads": 48},
            r"^config\['num_key_value_heads'\]: expected 1 \(from multi_query\), got 48",
        ),
    ],
)
def test_aliases_that_disagree_are_refused(config, pattern):
    with pytest.raises(ValueError, match=pattern):
        spec_from_dict(config)


@pytest.mark.parametrize(
    ("name", "experts_key"),
    [("mixtral-8x7b", "num_local_experts"), ("deepseek-v3", "n_routed_experts")],
)
def test_more_experts_per_token_than_experts_is_refused_by_the_configs_own_keys(name, experts_key):
    """The message names what the user wrote (config['num_experts_per_tok'], and the experts
    key of that family), not the package's field n_experts_per_token."""
    config = json.loads(bundled_config_path(name).read_text(encoding="utf-8"))
    n = config[experts_key]
    config["num_experts_per_tok"] = n + 1
    with pytest.raises(
        ValueError, match=rf"^config\['num_experts_per_tok'\]: expected <= {experts_key}={n}, got {n + 1}$"
    ):
        spec_from_dict(config)
    config["num_experts_per_tok"] = n  # every expert for every token: allowed
    assert spec_from_dict(config).n_experts_per_token == n
