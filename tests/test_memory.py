"""The KV-memory calculator: formulas, measured bytes, the largest batch, and the command line."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvtutor
from kvtutor.measure import memory
from kvtutor.measure.memory import (
    GIB,
    KVBytes,
    KVQuant,
    fixed_scale_bytes,
    format_bytes,
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    kv_bytes_total,
    kv_memory,
    kv_shrink_rows,
    max_batch,
    stored_bytes_per_sequence,
    stored_bytes_per_token,
    weights_bytes,
)
from kvtutor.models.hf_config import ModelSpec, load_model_spec, spec_from_dict


def test_bytes_per_token_of_well_known_models():
    # 2 (K, V) x layers x KV heads x head dim x 2 bytes
    assert kv_bytes_per_token(load_model_spec("llama-2-7b")) == 2 * 32 * 32 * 128 * 2 == 512 * 1024
    assert kv_bytes_per_token(load_model_spec("llama-3-8b")) == 2 * 32 * 8 * 128 * 2 == 128 * 1024
    assert kv_bytes_per_token(load_model_spec("llama-2-70b")) == 2 * 80 * 8 * 128 * 2
    assert kv_bytes_per_token(load_model_spec("gpt2"), "fp32") == 2 * 12 * 12 * 64 * 4
    assert kv_bytes_per_token(load_model_spec("gemma-2b")) == 2 * 18 * 1 * 256 * 2


def test_dtypes_scale_the_bytes():
    spec = load_model_spec("llama-3-8b")
    per = {d: kv_bytes_per_token(spec, d) for d in ("fp32", "bf16", "fp16", "fp8", "int8", "int4")}
    assert per["fp32"] == 2 * per["bf16"] == 2 * per["fp16"] == 4 * per["fp8"] == 4 * per["int8"]
    assert per["int4"] * 2 == per["int8"]
    assert kv_bytes_per_token(spec, "BF16") == per["bf16"]
    assert memory.dtype_bytes("int4") == 0.5


def test_sequence_and_batch():
    spec = load_model_spec("llama-3-8b")
    assert kv_bytes_per_sequence(spec, 8192) == 8192 * 128 * 1024 == GIB
    assert kv_bytes_total(spec, 8192, 8) == 8 * GIB


def test_sliding_window_caps_the_sequence():
    spec = load_model_spec("mistral-7b")  # all 32 layers keep the last 4096 tokens
    per_token = kv_bytes_per_token(spec)
    assert kv_bytes_per_sequence(spec, 1000) == 1000 * per_token
    assert kv_bytes_per_sequence(spec, 32768) == kv_bytes_per_sequence(spec, 4096) == 4096 * per_token
    gemma2 = load_model_spec("gemma-2-9b")  # half the layers slide
    half = kv_bytes_per_token(gemma2) // 2
    assert kv_bytes_per_sequence(gemma2, 8192) == half * 8192 + half * 4096


def test_weights_bytes():
    spec = load_model_spec("llama-3-8b")
    assert weights_bytes(spec) == 2 * 8_030_261_248
    assert weights_bytes(spec, "int4") == 8_030_261_248 // 2


def test_max_batch_boundaries():
    spec = load_model_spec("llama-3-8b")
    w, seq = weights_bytes(spec), kv_bytes_per_sequence(spec, 4096)
    assert max_batch(spec, 4096, w + 10 * seq) == 10
    assert max_batch(spec, 4096, w + 10 * seq - 1) == 9
    assert max_batch(spec, 4096, w - 1) == 0
    assert max_batch(spec, 4096, w + 10 * seq, weights_dtype="int4") > 10
    assert max_batch(spec, 4096, 80 * GIB) == (80 * GIB - w) // seq


def test_report_numbers_agree():
    spec = load_model_spec("llama-2-70b")
    m = kv_memory(spec, 4096, batch=4, dtype="fp16", memory_gib=160)
    assert m.kv_bytes_total == 4 * m.kv_bytes_per_sequence == 4 * 4096 * m.kv_bytes_per_token
    assert m.total_bytes == m.weights_bytes + m.kv_bytes_total
    assert m.memory_bytes == 160 * GIB
    assert m.fits == (m.total_bytes <= 160 * GIB)
    assert m.max_batch == max_batch(spec, 4096, 160 * GIB, "fp16")
    assert kv_memory(spec, 4096).max_batch is None


def test_formula_equals_bytes_measured_on_numpy_caches():
    for n_kv in (8, 4, 2, 1):
        cfg = kvtutor.GPT2Config(
            vocab_size=20, d_model=32, n_heads=8, n_layers=3, max_seq_len=24, n_kv_heads=n_kv
        )
        spec = ModelSpec.from_model_config(cfg)
        model = kvtutor.GPT2Model.random(cfg)
        pre = model.new_cache(kind="preallocated")  # reserves max_seq_len rows
        assert pre.nbytes == kv_bytes_per_sequence(spec, 24, "fp32")
        concat = model.new_cache(kind="concat")  # holds only what was written
        model.prefill(list(range(10)), concat)
        assert (
            concat.nbytes == kv_bytes_per_sequence(spec, 10, "fp32") == 10 * kv_bytes_per_token(spec, "fp32")
        )


def test_formula_equals_bytes_measured_on_a_transformers_cache():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    cfg = dict(
        model_type="llama", hidden_size=64, num_attention_heads=8, num_key_value_heads=2,
        num_hidden_layers=3, intermediate_size=96, max_position_embeddings=64, vocab_size=100,
    )  # fmt: skip
    hf_model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**cfg)).eval()
    with torch.no_grad():
        out = hf_model(torch.arange(10)[None], use_cache=True)
    layers = out.past_key_values.layers
    measured = sum(t.numel() * t.element_size() for layer in layers for t in (layer.keys, layer.values))
    assert measured == kv_bytes_per_sequence(spec_from_dict(cfg), 10, "fp32")


def test_argument_errors():
    spec = load_model_spec("gpt2")
    with pytest.raises(ValueError, match=r"^dtype: expected one of \["):
        kv_bytes_per_token(spec, "fp7")
    with pytest.raises(ValueError, match=r"^seq_len: expected an int >= 1, got 0"):
        kv_bytes_per_sequence(spec, 0)
    with pytest.raises(TypeError, match=r"^seq_len: expected an int, got float"):
        kv_bytes_per_sequence(spec, 10.0)
    with pytest.raises(ValueError, match=r"^batch: expected an int >= 1, got -1"):
        kv_bytes_total(spec, 10, -1)
    with pytest.raises(TypeError, match=r"^spec: expected a ModelSpec"):
        kv_bytes_per_token({"n_layers": 2})
    with pytest.raises(ValueError, match=r"^memory_gib: expected a finite number of GiB > 0, got 0"):
        kv_memory(spec, 10, memory_gib=0)
    # issue 12: inf overflowed, 1e-12 blamed memory_bytes
    with pytest.raises(ValueError, match=r"^memory_gib: expected a finite number of GiB > 0, got inf"):
        kv_memory(spec, 10, memory_gib=float("inf"))
    with pytest.raises(ValueError, match=r"^memory_gib: expected a finite number of GiB > 0, got nan"):
        kv_memory(spec, 10, memory_gib=float("nan"))
    with pytest.raises(
        ValueError, match=r"^memory_gib: expected at least one byte \(2\*\*-30 GiB\), got 1e-12"
    ):
        kv_memory(spec, 10, memory_gib=1e-12)
    with pytest.raises(TypeError, match=r"^memory_gib: expected a number of GiB, got str"):
        kv_memory(spec, 10, memory_gib="80")
    with pytest.raises(ValueError, match=r"^weights_dtype: expected one of"):
        kv_memory(spec, 10, weights_dtype="fp9")
    with pytest.raises(TypeError, match=r"^memory_bytes: expected an int"):
        max_batch(spec, 10, 1.5)


def test_format_bytes():
    assert format_bytes(512) == "512 B"
    assert format_bytes(1536) == "1.50 KiB"
    assert format_bytes(GIB) == "1.00 GiB"
    assert format_bytes(3 * 2**40) == "3.00 TiB"


# ---------------------------------------------------------------- command line


def run_main(capsys, *argv):
    rc = memory.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_json(capsys):
    rc, out, err = run_main(
        capsys, "llama-3-8b", "--seq-len", "8192", "--batch", "8", "--dtype", "bf16", "--json"
    )
    assert rc == 0 and err == ""
    data = json.loads(out)
    assert data["kv_bytes_per_token"] == 131072
    assert data["kv_bytes_total"] == 8 * GIB
    assert data["weights_bytes"] == 2 * 8_030_261_248
    assert data["source"] == "bundled:llama-3-8b" and data["max_batch"] is None


def test_cli_table_with_budget(capsys):
    rc, out, err = run_main(capsys, "llama-3-8b", "--seq-len", "8192", "--batch", "8", "--memory-gib", "80")
    assert rc == 0 and err == ""
    assert "KV per token (all layers)" in out and "128.00 KiB" in out
    assert "8.00 GiB" in out and "largest batch that fits: 65" in out
    assert "grouped-query: 4 query heads per KV head" in out


def test_cli_reads_a_file_and_defaults_to_the_models_context(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2,
                                "n_positions": 128, "vocab_size": 100}))  # fmt: skip
    rc, out, _ = run_main(capsys, str(path), "--json", "--dtype", "fp32")
    data = json.loads(out)
    assert rc == 0 and data["seq_len"] == 128 and data["source"] == str(path)
    assert data["kv_bytes_total"] == 128 * 2 * 2 * 64 * 4


def test_cli_notes_a_context_longer_than_the_model(capsys):
    rc, out, _ = run_main(capsys, "gpt2", "--seq-len", "4096")
    assert rc == 0 and "more than this model's context" in out


def test_cli_lists_bundled_models(capsys):
    rc, out, _ = run_main(capsys, "--list")
    assert rc == 0 and "mistral-7b" in out.split()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["MISSING"], "config: missing key 'num_hidden_layers'"),
        (["BROKEN"], "is not valid JSON"),
        (["/nonexistent/config.json"], "CONFIG: no such file"),
        (["llama-9"], "CONFIG: no bundled config 'llama-9'"),
        (["meta-llama/Llama-3.1-8B"], "CONFIG: 'meta-llama/Llama-3.1-8B' looks like a Hugging Face Hub id"),
        (["meta-llama/Llama-3.1-8B"], "kv-memory --list"),
        (["org/some-model"], "download https://huggingface.co/org/some-model/resolve/main/config.json"),
        (["gpt2", "--memory-gib", "inf"], "--memory-gib: expected a finite number of GiB > 0, got inf"),
        (["gpt2", "--memory-gib", "1e-12"], "--memory-gib: expected at least one byte"),
        (["UNKNOWN"], "config['model_type'] in"),
        (["gpt2", "--dtype", "fp7"], "--dtype: expected one of"),
        (["gpt2", "--weights-dtype", "fp7"], "--weights-dtype: expected one of"),
        (["gpt2", "--batch", "0"], "--batch: expected an int >= 1, got 0"),
        (["gpt2", "--seq-len", "-5"], "--seq-len: expected an int >= 1, got -5"),
        (["gpt2", "--memory-gib", "-1"], "--memory-gib: expected a finite number of GiB > 0, got -1.0"),
        (["gpt2", "--batch", "x"], "invalid int value"),
        ([], "config: expected a config.json path or a bundled model name"),
    ],
)
def test_cli_errors_exit_2_with_a_clear_message(capsys, tmp_path, argv, message):
    missing = tmp_path / "missing.json"
    cfg = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 8, "intermediate_size": 96,
           "max_position_embeddings": 64, "vocab_size": 100}  # fmt: skip
    missing.write_text(json.dumps(cfg))
    broken = tmp_path / "broken.json"
    broken.write_text('{"hidden_size": 4096,')
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({**cfg, "model_type": "rwkv", "num_hidden_layers": 2}))
    argv = [{"MISSING": str(missing), "BROKEN": str(broken), "UNKNOWN": str(unknown)}.get(a, a) for a in argv]
    rc, out, err = run_main(capsys, *argv)
    assert rc == 2 and out == ""
    assert message in err and "Traceback" not in err


def test_module_entry_point_exit_code_and_no_traceback(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    bad = subprocess.run(
        [sys.executable, "-m", "kvtutor", "kv-memory", str(path)], capture_output=True, text=True, check=False
    )
    assert bad.returncode == 2
    assert "config: missing key 'num_attention_heads'" in bad.stderr and "Traceback" not in bad.stderr
    good = subprocess.run(
        [sys.executable, "-m", "kvtutor", "kv-memory", "qwen2.5-7b", "--seq-len", "1000", "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert json.loads(good.stdout)["kv_bytes_per_token"] == 2 * 28 * 4 * 128 * 2


def test_numbers_are_exact_integers():
    m = kv_memory(load_model_spec("mixtral-8x7b"), 32768, 2, "fp8", memory_gib=96)
    for key in ("kv_bytes_per_token", "kv_bytes_per_sequence", "kv_bytes_total", "weights_bytes"):
        assert isinstance(getattr(m, key), int)
    assert np.isclose(m.weights_bytes, 46_702_792_704)


@pytest.mark.parametrize("name", kvtutor.models.hf_config.bundled_models())
def test_report_fits_the_text_width(name):
    spec = load_model_spec(name)
    for seq_len in (spec.max_seq_len, 10 * spec.max_seq_len):  # the longest lines the report has
        report = memory.format_report(memory.kv_memory(spec, seq_len, 1024, "fp8", 80, "bf16"))
        assert max(map(len, report.splitlines())) <= kvtutor.text.TEXT_WIDTH, report


# ---------------------------------------------------------------- issue 12: MLA, MQA, MoE


def test_deepseek_v2_bytes_per_token_is_the_latent():
    """60 layers x (512 + 64) x 2 bytes (the old reading gave 1,228,800)."""
    spec = load_model_spec("deepseek-v2")
    assert kv_bytes_per_token(spec) == 60 * (512 + 64) * 2 == 69_120
    assert memory.kv_bytes_per_token_decompressed(spec) == 60 * 128 * (192 + 128) * 2
    assert kv_bytes_per_sequence(spec, 1000) == 1000 * 69_120
    assert kv_bytes_per_token(load_model_spec("deepseek-v3"), "fp8") == 61 * 576


def test_starcoder_bytes_per_token_has_one_kv_head():
    """40 layers x 2 (K, V) x 1 head x 128 x 2 bytes (the old reading gave 983,040)."""
    assert kv_bytes_per_token(load_model_spec("starcoder")) == 40 * 2 * 128 * 2 == 20_480


def test_decompressed_equals_stored_without_a_latent():
    for name in ("llama-3-8b", "gpt2", "starcoder", "gemma-2-9b"):
        spec = load_model_spec(name)
        assert memory.kv_bytes_per_token_decompressed(spec) == kv_bytes_per_token(spec)


def test_cli_json_of_deepseek_v2(capsys):
    rc, out, err = run_main(capsys, "deepseek-v2", "--seq-len", "4096", "--batch", "2", "--json")
    assert rc == 0 and err == ""
    data = json.loads(out)
    assert data["kv_bytes_per_token"] == 69_120 and data["attention"] == "MLA"
    assert data["kv_bytes_total"] == 2 * 4096 * 69_120
    assert data["kv_bytes_per_token_decompressed"] == 4_915_200
    assert data["n_params"] == 235_741_434_880 and data["weights_bytes"] == 2 * data["n_params"]
    assert round(data["n_active_params"] / 1e9) == 21
    assert (data["n_experts"], data["n_experts_per_token"]) == (160, 6)


@pytest.mark.parametrize(
    ("name", "kind"),
    [("llama-2-7b", "MHA"), ("llama-3-8b", "GQA"), ("starcoder", "MQA"), ("deepseek-v3", "MLA")],
)
def test_cli_json_names_the_attention_kind(capsys, name, kind):
    rc, out, _ = run_main(capsys, name, "--seq-len", "128", "--json")
    data = json.loads(out)
    assert rc == 0 and data["attention"] == kind
    assert data["n_active_params"] <= data["n_params"]


def test_cli_table_of_moe_and_mla(capsys):
    rc, out, _ = run_main(capsys, "deepseek-v2", "--seq-len", "4096")
    assert rc == 0
    assert "21.38 B active per token (6 of 160 routed experts)" in out
    assert "multi-head latent" in out and "69,120" in out and "4,915,200" in out
    rc, out, _ = run_main(capsys, "starcoder", "--seq-len", "4096")
    assert "multi-query: 48 query heads per KV head" in out and "20,480" in out


def test_mla_decode_costs_by_hand():
    spec = load_model_spec("deepseek-v2")
    c = memory.mla_decode_costs(spec, 4096)
    s, h = 4096, 128
    assert c["latent_bytes"] == s * 576 * 2 and c["heads_bytes"] == s * h * 320 * 2
    assert c["heads_flops"] == 2 * s * h * (192 + 128)
    assert c["expand_flops"] == 2 * s * 512 * h * (128 + 128) + c["heads_flops"]
    assert c["absorbed_flops"] == 2 * 512 * h * 256 + 2 * s * h * 576 + 2 * s * h * 512
    assert c["up_projection_weight_bytes"] == 512 * h * 256 * 2
    with pytest.raises(ValueError, match=r"^spec: expected a latent-attention \(MLA\) model, got GQA"):
        memory.mla_decode_costs(load_model_spec("llama-3-8b"), 10)
    with pytest.raises(ValueError, match=r"^seq_len: expected an int >= 1, got 0"):
        memory.mla_decode_costs(spec, 0)


def test_plots_of_kv_per_token_and_memory_draw():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kvtutor.plots import memory as memory_plots

    ax = memory_plots.plot_kv_per_token(["llama-3-70b", "mixtral-8x7b", "deepseek-v2"])
    assert len(ax.patches) == 4  # one bar each, and the expanded one for the MLA model
    names = ["llama-2-7b", "llama-3.1-8b", "mistral-7b", "gemma-2-9b", "qwen2.5-7b"]
    ax = memory_plots.plot_memory_vs_context(names, [1024, 4096])
    dashed = [line for line in ax.lines if line.get_linestyle() not in ("-", ":", "None")]
    assert (
        len(
            {str(line.get_dashes() if hasattr(line, "get_dashes") else line._dash_pattern) for line in dashed}
        )
        == 5
    )
    labels = [t.get_text() for t in ax.texts]
    assert all(any(t.startswith(f"{n} weights") for t in labels) for n in names)
    plt.close("all")


# ---------------------------------------------------------------- issue 16: scales and windows


def test_int8_and_int4_per_token_by_hand():
    """Llama-3-8B: 32 layers x 8 KV heads x (128 + 128) numbers, plus one fp16 scale per KV head
    and token for K and one for V: 32 x 8 x 2 x 2 = 1,024 bytes of scales per token."""
    spec = load_model_spec("llama-3-8b")
    assert stored_bytes_per_token(spec, "int8") == KVBytes(payload=32 * 8 * 256, scales=1024)
    assert stored_bytes_per_token(spec, "int8").total == 66_560
    assert stored_bytes_per_token(spec, "int4") == KVBytes(payload=32 * 8 * 256 // 2, scales=1024)
    assert stored_bytes_per_token(spec, "bf16") == KVBytes(payload=kv_bytes_per_token(spec))
    # GPT-2: 12 layers x 12 heads x (64 + 64) int8, 12 x 12 x 2 fp16 scales
    assert stored_bytes_per_token(load_model_spec("gpt2"), "int8").total == 12 * 12 * 128 + 12 * 12 * 2 * 2
    # DeepSeek-V2 (MLA): one row of 512 + 64 per layer, one scale per row
    v2 = load_model_spec("deepseek-v2")
    assert stored_bytes_per_token(v2, "int8") == KVBytes(payload=60 * 576, scales=60 * 2)
    # a wider scale costs more: fp32 scales double the scale bytes
    assert stored_bytes_per_token(spec, KVQuant("int8", scale_dtype="fp32")).scales == 2048


def test_int8_saves_just_under_2x_because_of_scales():
    """bf16 / int8 = 2 K / (K + 2) for head dim K with one 2-byte scale per K numbers."""
    for name, k in (("gpt2", 64), ("llama-3-8b", 128), ("gemma-7b", 256)):
        spec = load_model_spec(name)
        saving = kv_bytes_per_sequence(spec, 1000) / stored_bytes_per_sequence(spec, 1000, "int8").total
        assert saving == pytest.approx(2 * k / (k + 2)) and 1.9 < saving < 2


def test_fp8_per_tensor_scales_cost_a_fixed_few_bytes():
    spec = load_model_spec("llama-3-8b")
    assert stored_bytes_per_token(spec, "fp8") == KVBytes(payload=65_536)
    assert fixed_scale_bytes(spec, "fp8") == 2 * 32 * 4  # one fp32 per layer for K and for V
    assert fixed_scale_bytes(load_model_spec("deepseek-v2"), "e5m2") == 60 * 4
    assert fixed_scale_bytes(spec, "int8") == fixed_scale_bytes(spec, "bf16") == 0
    m = kv_memory(spec, 8192, batch=3, dtype="fp8")
    assert m.kv_bytes_total == 3 * m.kv_bytes_per_sequence + 256
    assert m.saving_vs_bf16 == 2.0 and m.kv_scale_bytes_fixed == 256


def test_per_channel_key_scales_by_hand():
    """Llama-3-8B int8, keys per channel in groups of 32, 100 tokens: 96 keys quantized (3 groups),
    4 in bf16; values per token."""
    spec = load_model_spec("llama-3-8b")
    q = KVQuant("int8", key_scales="per-channel", group_size=32)
    assert q.key_scales == "per_channel"
    per_layer = KVBytes(
        payload=100 * 8 * 128 + 96 * 8 * 128,  # values, quantized keys
        scales=100 * 8 * 2 + 3 * 8 * 128 * 2,  # one per head and token; per head, group and channel
        residual=4 * 8 * 128 * 2,  # the unfilled group's keys in bf16
    )
    assert stored_bytes_per_sequence(spec, 100, q) == KVBytes(*(32 * x for x in vars(per_layer).values()))
    # per token: value scales + K / G key scales per head, spread over the group
    assert stored_bytes_per_token(spec, q).scales == 32 * 8 * (2 + 128 * 2 // 32)


@pytest.mark.parametrize("key_mode", ["per_token", "per_channel"])
@pytest.mark.parametrize("n_tokens", [1, 7, 8, 19, 24])
def test_formula_equals_bytes_measured_on_the_int8_cache(key_mode, n_tokens):
    from kvtutor.caches.quant import QuantizedKVCache

    cfg = kvtutor.GPT2Config(vocab_size=30, d_model=32, n_heads=8, n_layers=3, max_seq_len=24, n_kv_heads=2)
    model = kvtutor.GPT2Model.random(cfg)
    cache = QuantizedKVCache.for_model(model, key_mode=key_mode, group_size=8)
    model.prefill(list(range(n_tokens)), cache)
    quant = KVQuant("int8", key_mode, 8, scale_dtype="fp32", float_dtype="fp32")  # a float32 model's cache
    assert memory.kv_quant_of(cache) == quant
    stored = stored_bytes_per_sequence(ModelSpec.from_model_config(cfg), n_tokens, quant)
    assert stored.total == cache.nbytes
    assert stored_bytes_per_sequence(ModelSpec.from_model_config(cfg), n_tokens, "fp32").total == (
        cache.float_nbytes
    )


def test_kv_quant_of_refuses_a_float_cache():
    model = kvtutor.GPT2Model.random(
        kvtutor.GPT2Config(vocab_size=8, d_model=8, n_heads=2, n_layers=1, max_seq_len=4)
    )
    with pytest.raises(TypeError, match="cache: expected a QuantizedKVCache, got PreallocatedKVCache"):
        memory.kv_quant_of(model.new_cache())


def test_float_formats_agree_with_the_plain_formula():
    for name in kvtutor.models.hf_config.bundled_models():
        spec = load_model_spec(name)
        for dtype in ("bf16", "fp32", "fp8"):
            for n in (1, 4095, 4096, 5000, 40_000):
                assert stored_bytes_per_sequence(spec, n, dtype).total == kv_bytes_per_sequence(
                    spec, n, dtype
                )


def test_a_window_caps_the_sequence():
    spec = load_model_spec("llama-3-8b")  # no window of its own
    per_token = kv_bytes_per_token(spec)
    capped = [stored_bytes_per_sequence(spec, n, "bf16", window=1024, sinks=4).total for n in (1024, 8192)]
    assert capped == [1024 * per_token, 1024 * per_token]  # the 4 sinks are among the 1024 kept
    assert stored_bytes_per_sequence(spec, 500, window=1024, sinks=4).total == 500 * per_token
    # Gemma-2: an imposed window longer than its own leaves the sliding layers at their own 4096
    gemma2 = load_model_spec("gemma-2-9b")
    half = kv_bytes_per_token(gemma2) // 2
    assert stored_bytes_per_sequence(gemma2, 32768, window=8192).total == half * 8192 + half * 4096
    assert stored_bytes_per_sequence(gemma2, 32768, window=1024).total == 2 * half * 1024
    # scales follow the window too
    assert stored_bytes_per_sequence(spec, 8192, "int8", window=1024).total == (
        1024 * stored_bytes_per_token(spec, "int8").total
    )


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(["gpt2", "llama-3-8b", "mistral-7b", "gemma-2-9b", "deepseek-v2"]),
    seq_len=st.integers(1, 20_000),
    window=st.integers(1, 8192),
    sinks=st.integers(0, 16),
    dtype=st.sampled_from(["bf16", "int8", "int4", "fp8"]),
)
def test_window_properties(name, seq_len, window, sinks, dtype):
    spec, sinks = load_model_spec(name), min(sinks, window - 1)
    windowed = stored_bytes_per_sequence(spec, seq_len, dtype, window, sinks).total
    full = stored_bytes_per_sequence(spec.without_window(), seq_len, dtype).total
    longer = stored_bytes_per_sequence(spec, seq_len + 1, dtype, window, sinks).total
    assert windowed <= stored_bytes_per_sequence(spec, seq_len, dtype).total <= full
    assert windowed <= longer  # never shrinks as the sequence grows
    if seq_len >= window:  # every layer's window is full: one more token adds nothing
        assert longer == windowed
    if seq_len <= min(window, spec.sliding_window or seq_len):
        assert windowed == full


def test_kv_memory_reports_quantization_and_window():
    spec = load_model_spec("mistral-7b")
    m = kv_memory(spec, 32768, batch=2, dtype="int8", weights_dtype="bf16", memory_gib=80)
    assert m.kv_bytes_per_sequence == 4096 * 66_560 and m.kv_bytes_per_sequence_full == 32768 * 66_560
    assert m.kv_bytes_per_sequence_bf16 == 4096 * 131_072 and m.window_saving == 8.0
    assert m.saving_vs_bf16 == pytest.approx(131_072 / 66_560)
    assert m.kv_scale_bytes_per_sequence == 4096 * 1024 and m.kv_bytes_total == 2 * m.kv_bytes_per_sequence
    assert m.max_batch == (80 * GIB - m.weights_bytes) // m.kv_bytes_per_sequence
    w = kv_memory(load_model_spec("llama-3-8b"), 8192, window=1024, sinks=4)
    assert w.kv_bytes_per_sequence == 1024 * 131_072 and w.window == 1024 and w.sinks == 4
    # the float path gives the same numbers as before
    plain = kv_memory(load_model_spec("llama-3-8b"), 8192, 8, "fp16")
    assert plain.kv_bytes_total == kv_bytes_total(load_model_spec("llama-3-8b"), 8192, 8, "fp16")
    assert (plain.saving_vs_bf16, plain.window_saving, plain.kv_scale_bytes_per_token) == (1.0, 1.0, 0)


def test_shrink_rows_of_every_bundled_model():
    rows = kv_shrink_rows(32768)
    assert [r.model for r in rows] == kvtutor.models.hf_config.bundled_models()
    for r in rows:
        assert 1.9 < r.saving("int8") < 2 and r.saving("fp8") == 2
        assert r.int8_per_token > r.bf16_per_token // 2 and r.fp8_per_token * 2 == r.bf16_per_token
        assert r.bf16_per_sequence == 32768 * r.bf16_per_token
    by_name = {r.model: r for r in rows}
    mistral = by_name["mistral-7b"]
    assert (mistral.window, mistral.n_windowed_layers, mistral.windowed_per_token) == (4096, 32, 0)
    assert mistral.saving("windowed") == 8.0
    gemma2 = by_name["gemma-2-9b"]  # half the layers slide: token 32,769 adds to the other half
    assert gemma2.windowed_per_token == gemma2.bf16_per_token // 2
    assert (
        by_name["llama-3-8b"].windowed_per_sequence is None
        and by_name["llama-3-8b"].saving("windowed") is None
    )
    given_ = kv_shrink_rows(8192, window=1024, sinks=4, names=["llama-3-8b", "deepseek-v2"])
    assert [r.windowed_per_token for r in given_] == [0, 0]
    assert given_[0].windowed_per_sequence == 1024 * 131_072 and given_[1].n_windowed_layers == 60


def test_errors_name_the_argument():
    spec = load_model_spec("llama-3-8b")
    with pytest.raises(ValueError, match=r"^sinks: expected 0 without a window, got 4"):
        stored_bytes_per_sequence(spec, 100, sinks=4)
    with pytest.raises(ValueError, match=r"^window: expected an int >= 1, got 0"):
        stored_bytes_per_sequence(spec, 100, window=0)
    with pytest.raises(ValueError, match=r"^sinks: expected an int >= 0, got -1"):
        kv_memory(spec, 100, window=10, sinks=-1)
    with pytest.raises(ValueError, match=r"^sinks: expected 0 <= sinks <= 9, got 10"):
        kv_memory(spec, 100, window=10, sinks=10)
    with pytest.raises(TypeError, match=r"^window: expected an int, got float"):
        kv_shrink_rows(100, window=10.0, names=["gpt2"])
    with pytest.raises(ValueError, match=r"^key_scales: expected one of \['per_token', 'per_channel'\]"):
        KVQuant("int8", key_scales="per_head")
    with pytest.raises(ValueError, match=r"^key_scales: 'per_channel' applies to int8 and int4 caches"):
        KVQuant("fp8", key_scales="per_channel")
    with pytest.raises(ValueError, match=r"^key_scales: 'per_channel' needs separate keys; latent attention"):
        stored_bytes_per_token(load_model_spec("deepseek-v2"), KVQuant("int8", "per_channel"))
    with pytest.raises(ValueError, match=r"^group_size: expected an int >= 1, got 0"):
        KVQuant("int8", group_size=0)
    with pytest.raises(ValueError, match=r"^scale_dtype: expected a float format"):
        KVQuant("int8", scale_dtype="int8")
    with pytest.raises(ValueError, match=r"^float_dtype: expected a dtype name"):
        KVQuant("int8", float_dtype=None)
    with pytest.raises(ValueError, match=r"^dtype: expected one of"):
        KVQuant("fp7")
    with pytest.raises(TypeError, match=r"^quant: expected a dtype name or a KVQuant, got int"):
        stored_bytes_per_token(spec, 8)
    with pytest.raises(TypeError, match=r"^spec: expected a ModelSpec"):
        stored_bytes_per_token("llama-3-8b", "int8")
    with pytest.raises(TypeError, match=r"^names: expected a list of model names"):
        kv_shrink_rows(100, names="gpt2")
    with pytest.raises(ValueError, match=r"^kind: expected 'int8', 'fp8' or 'windowed', got 'int4'"):
        kv_shrink_rows(100, names=["gpt2"])[0].saving("int4")


def test_cli_kv_dtype_and_dtype(capsys):
    rc, out, err = run_main(capsys, "llama-3-8b", "--seq-len", "8192", "--kv-dtype", "int8", "--json")
    data = json.loads(out)
    assert rc == 0 and err == ""
    assert (data["dtype"], data["weights_dtype"]) == ("int8", "bf16")
    assert data["kv_bytes_per_token"] == 66_560 and data["kv_scale_bytes_per_token"] == 1024
    assert data["kv_bytes_per_sequence_bf16"] == GIB and data["weights_bytes"] == 2 * 8_030_261_248
    # --dtype stays the default for both; --kv-dtype overrides it for the cache
    rc, out, _ = run_main(capsys, "llama-3-8b", "--seq-len", "8192", "--dtype", "int8", "--json")
    assert json.loads(out)["weights_dtype"] == "int8" and json.loads(out)["kv_bytes_per_token"] == 66_560
    rc, out, _ = run_main(capsys, "llama-3-8b", "--dtype", "int8", "--kv-dtype", "bf16", "--json")
    assert (json.loads(out)["dtype"], json.loads(out)["weights_dtype"]) == ("bf16", "int8")


def test_cli_table_shows_bytes_and_savings(capsys):
    rc, out, _ = run_main(capsys, "llama-3-8b", "--seq-len", "8192", "--kv-dtype", "int8")
    assert rc == 0
    assert "scales     one fp16 per KV head and token, for K and for V" in out
    assert "  of which scales" in out and "1,024" in out and "  the same in bf16" in out
    assert "int8 vs bf16: 1.97x smaller per sequence" in out
    rc, out, _ = run_main(capsys, "mistral-7b", "--seq-len", "32768")
    assert "  without the window                  4,294,967,296" in out
    assert "window: 8.00x smaller than the full cache at 32,768 tokens" in out
    rc, out, _ = run_main(capsys, "gemma-2-9b", "--seq-len", "8192", "--window", "1024", "--sinks", "4")
    assert "what-if: 1,024 tokens in every layer (4 sinks + the last 1,020)" in out
    assert "(its own: 4,096 tokens in 21 of 42 layers)" in out
    rc, out, _ = run_main(capsys, "llama-3-8b", "--seq-len", "8192")  # bf16, no window: nothing added
    assert "scales" not in out and "vs bf16" not in out and "without the window" not in out


@pytest.mark.parametrize("name", kvtutor.models.hf_config.bundled_models())
def test_quantized_and_windowed_reports_fit_the_text_width(name, capsys):
    spec = load_model_spec(name)
    key_scales = "per_token" if spec.kv_lora_rank else "per_channel"
    for argv in (
        ["--kv-dtype", "int4", "--key-scales", key_scales, "--window", "100000", "--sinks", "99999"],
        ["--kv-dtype", "fp8", "--window", "4096", "--batch", "1024", "--memory-gib", "80"],
        ["--kv-dtype", "int8", "--seq-len", str(10 * spec.max_seq_len)],
    ):
        rc, out, _ = run_main(capsys, name, *argv)
        assert rc == 0 and max(map(len, out.splitlines())) <= kvtutor.text.TEXT_WIDTH, out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["gpt2", "--kv-dtype", "fp7"], "--kv-dtype: expected one of"),
        (["gpt2", "--key-scales", "per-head"], "--key-scales: expected one of ['per_token', 'per_channel']"),
        (["gpt2", "--key-scales", "per-channel"], "--key-scales: 'per_channel' applies to int8 and int4"),
        (
            ["deepseek-v2", "--kv-dtype", "int8", "--key-scales", "per-channel"],
            "--key-scales: 'per_channel' needs",
        ),
        (["gpt2", "--kv-dtype", "int8", "--group-size", "0"], "--group-size: expected an int >= 1, got 0"),
        (["gpt2", "--window", "0"], "--window: expected an int >= 1, got 0"),
        (["gpt2", "--window", "8", "--sinks", "-1"], "--sinks: expected an int >= 0, got -1"),
        (["gpt2", "--sinks", "4"], "--sinks: expected 0 without a window, got 4"),
        (["gpt2", "--window", "8", "--sinks", "8"], "--sinks: expected 0 <= sinks <= 7, got 8"),
        (["gpt2", "--window", "x"], "invalid int value"),
    ],
)
def test_cli_errors_name_the_new_flags(capsys, argv, message):
    rc, out, err = run_main(capsys, *argv)
    assert rc == 2 and out == "" and message in err and "Traceback" not in err


def test_plots_of_shrinking_draw():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kvtutor.plots import memory as memory_plots

    rows = kv_shrink_rows(32768, names=["llama-3-8b", "mistral-7b", "deepseek-v2"])
    ax = memory_plots.plot_kv_shrink(rows)
    assert len(ax.patches) == 3 * 3 + 1  # bf16, int8, fp8 each; a window only for Mistral
    assert [t.get_text() for t in ax.texts] == [" 8.0x less"]
    ax = memory_plots.plot_window_cap(["llama-3-8b"], [1024, 4096, 16384], window=2048, sinks=4)
    capped = ax.lines[1].get_ydata()
    assert capped[1] == capped[2] < ax.lines[0].get_ydata()[2]
    plt.close("all")
