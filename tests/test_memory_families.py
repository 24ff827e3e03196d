"""The command line on the further families (issue 45): a hybrid's KV beside its state, a
state-space model's state alone, every bad key of a config, and a warning beside the figure
when the tokens asked are more than the model's context."""

from __future__ import annotations

import json

import pytest

import kvtutor
from kvtutor.measure import memory
from kvtutor.models.hf_config import family_examples, load_model_spec


def run_main(capsys, *argv: str) -> tuple[int, str, str]:
    rc = memory.main(list(argv))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_cli_reports_a_hybrids_kv_and_state(capsys):
    rc, out, err = run_main(
        capsys, "jamba-v0.1", "--seq-len", "300000", "--batch", "2", "--memory-gib", "141"
    )
    lines = out.splitlines()
    assert rc == 0
    assert "attention  4 of 32 layers, 32 query heads, 8 KV heads, head dim 128" in lines
    assert "state      28 state-space layers, 163,840 numbers each" in lines
    # 2 x 4 layers x 8 KV heads x 128 x 2 B a token; 28 x 163,840 x 2 B of state a sequence
    assert any(line.startswith("KV per token (4 attention layers)") and "16,384" in line for line in lines)
    assert any(line.startswith("state per sequence (28 layers)") and "9,175,040" in line for line in lines)
    total = 2 * (300_000 * 16_384 + 9_175_040)
    assert any(
        line.startswith("KV + state for the batch (2 x 300,000)") and f"{total:,}" in line for line in lines
    )
    # the warning sits beside the figure it concerns, and goes to stderr too
    row = next(i for i, line in enumerate(lines) if line.startswith("KV per sequence (300,000 tokens)"))
    assert lines[row + 1] == "  warning: more than this model's context (262,144 tokens)"
    assert err == (
        "kv-memory: warning: 300,000 tokens is more than this model's context "
        "(max_position_embeddings = 262,144)\n"
    )


def test_no_warning_within_the_context(capsys):
    rc, out, err = run_main(capsys, "jamba-v0.1", "--seq-len", "262144")
    assert rc == 0 and err == "" and "warning" not in out


def test_cli_json_of_a_state_space_model(capsys):
    rc, out, err = run_main(capsys, "mamba-2.8b")
    assert rc == 2 and out == ""
    assert err == (
        "kv-memory: error: --seq-len: expected a number of tokens (mamba-2.8b's config states no "
        "context length, max_position_embeddings), got none\n"
    )
    rc, out, err = run_main(capsys, "mamba-2.8b", "--seq-len", "1000000", "--json", "--kv-dtype", "int8")
    report = json.loads(out)
    assert rc == 0 and err == "" and report["attention"] == "none"
    assert (report["kv_bytes_per_token"], report["kv_bytes_per_sequence"]) == (0, 0)
    assert report["state_bytes_per_sequence"] == 64 * 5120 * (4 + 16) * 2  # int8 cache: the state in bf16
    assert report["state_dtype"] == "bf16" and report["kv_bytes_total"] == report["state_bytes_per_sequence"]
    rc, out, _ = run_main(capsys, "mamba-2.8b", "--seq-len", "1000")
    assert "attention  none: no layer attends, so there is no KV cache" in out.splitlines()


def test_cli_json_says_when_past_the_context(capsys):
    rc, out, err = run_main(capsys, "opt-13b", "--seq-len", "4096", "--json")
    report = json.loads(out)
    assert rc == 0 and report["beyond_context"] is True and "warning: 4,096 tokens" in err
    assert report["kv_bytes_per_token"] == 2 * 5120 * 40 * 2


def test_cli_lists_every_bad_key_one_a_line(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "opt", "hidden_size": "5120", "num_attention_heads": 40,
                                "num_hidden_layers": 0, "vocab_size": 50272, "max_position_embeddings": 2048,
                                "kv_lora_rank": 512}))  # fmt: skip
    rc, out, err = run_main(capsys, str(path))
    lines = err.splitlines()
    assert (
        rc == 2
        and out == ""
        and len(lines) == 4
        and all(line.startswith("kv-memory: error: ") for line in lines)
    )
    named = [line.split("config")[1][:25] for line in lines]
    assert [n.split("'")[1] for n in named] == ["kv_lora_rank", "hidden_size", "num_hidden_layers", "ffn_dim"]


@pytest.mark.parametrize("name", family_examples())
def test_reports_of_every_family_fit_the_text_width(name):
    spec = load_model_spec(name)
    seq_len = spec.max_seq_len or 100_000
    for dtype, window in (("bf16", None), ("int8", 4096), ("fp8", None)):
        m = memory.kv_memory(spec, 10 * seq_len, 1024, dtype, 80, "bf16", window=window)
        report = memory.format_report(m)
        assert max(map(len, report.splitlines())) <= kvtutor.text.TEXT_WIDTH, report
        assert ("warning" in report) == bool(spec.max_seq_len)


def test_max_batch_counts_the_state():
    jamba = load_model_spec("jamba-v0.1")
    room = 141 * memory.GIB - memory.weights_bytes(jamba)
    per_sequence = 100_000 * 16_384 + 9_175_040
    assert memory.max_batch(jamba, 100_000, 141 * memory.GIB) == room // per_sequence
    assert memory.kv_memory(jamba, 100_000, 1, memory_gib=141).max_batch == room // per_sequence
