"""The page widgets' data (kvtutor.book.widgets): what the cache stepper exports is the model's own
trace, what the KV calculator exports is the package's own models and constants, both round-trip
through the page's JSON, and bad arguments are refused by name. tests/browser/test_widget_pages.py
drives the JavaScript over the same data."""

from __future__ import annotations

import contextlib
import dataclasses
import html.parser
import io
import json

import numpy as np
import pytest

import kvtutor
from kvtutor.book import widgets
from kvtutor.book.widgets import cache_stepper, cache_stepper_data, kv_calculator, kv_calculator_data
from kvtutor.measure import memory
from kvtutor.measure.costs import generation_costs
from kvtutor.models.hf_config import bundled_models, load_model_spec


class _Container(html.parser.HTMLParser):
    """The widget container's attributes and the text of its JSON script."""

    def __init__(self) -> None:
        super().__init__()
        self.div: dict[str, str | None] | None = None
        self.script_type: str | None = None
        self.json = ""
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "div" and self.div is None:
            self.div = dict(attrs)
        if tag == "script":
            self.script_type, self._in_script = dict(attrs).get("type"), True

    def handle_endtag(self, tag: str) -> None:
        self._in_script = self._in_script and tag != "script"

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.json += data


def parsed(widget: widgets.Widget) -> tuple[dict, dict]:
    page = _Container()
    page.feed(widget.to_html())
    assert page.script_type == "application/json"
    return page.div or {}, json.loads(page.json)


@pytest.fixture(scope="module")
def stepper() -> widgets.Widget:
    return cache_stepper()


@pytest.fixture(scope="module")
def trace32(toy_model):
    """The float32 toy model's own trace: prefill, then three greedy decode steps."""
    tok = kvtutor.load_toy_tokenizer()
    ids = tok.encode(kvtutor.TOY_PROMPT)
    cache, prefill = toy_model.new_cache(), []
    token = int(np.argmax(toy_model.prefill(ids, cache, prefill)[-1]))
    steps, fed = [], []
    for _ in range(3):
        trace = []
        fed.append(token)
        token = int(np.argmax(toy_model.decode_step(token, cache, trace)))
        steps.append(trace)
    return {"ids": ids, "prefill": prefill, "steps": steps, "fed": fed, "last": token}


# ---------------------------------------------------------------- the cache stepper


def test_stepper_round_trips_through_the_page(stepper):
    div, data = parsed(stepper)
    assert div["class"] == "kvtutor-widget" and div["data-kvtutor-widget"] == "cache-stepper"
    assert data == stepper.data == json.loads(stepper.to_json())
    bundle = stepper._repr_mimebundle_()
    assert bundle["text/html"] == stepper.to_html()
    assert bundle["text/plain"] == "<kvtutor cache stepper: 3 decode steps of 'The cat sat'>"
    assert "<" not in stepper.to_json() and data["version"] == widgets.VERSION


def test_stepper_is_the_same_on_every_call(stepper):
    assert cache_stepper().to_html() == stepper.to_html()
    assert stepper.to_json() == json.dumps(stepper.data, sort_keys=True, separators=(",", ":"))


def test_stepper_holds_the_models_trace(stepper, trace32):
    """Shapes, values (to the printed digits), row sums and greedy tokens, against the float32
    model the chapters run: the export's float64 copy differs from it far below the printed digits."""
    data, cfg = stepper.data, kvtutor.TOY_CONFIG
    L, H, K, P = cfg.n_layers, cfg.n_heads, cfg.d_head, len(trace32["ids"])
    unit = 10.0 ** -data["digits"]

    def close(exported, arrays):
        exported, arrays = np.asarray(exported), np.stack(arrays)
        assert exported.shape == arrays.shape
        assert np.abs(exported - arrays).max() <= unit / 2 + 1e-4  # rounding, and float32's last bits

    close(data["prefill"]["k_LHSK"], [layer["k_HSK"] for layer in trace32["prefill"]])
    close(data["prefill"]["v_LHSK"], [layer["v_HSK"] for layer in trace32["prefill"]])
    assert np.asarray(data["prefill"]["k_LHSK"]).shape == (L, H, P, K)
    for i, (step, trace) in enumerate(zip(data["steps"], trace32["steps"], strict=True)):
        S = P + i + 1
        assert step["n_keys"] == S and step["position"] == S - 1
        assert np.asarray(step["k_LHSK"]).shape == (L, H, S, K)
        close(step["q_LHK"], [layer["q_HTK"][:, 0] for layer in trace])
        close(step["scores_LHS"], [layer["scores_HTS"][:, 0] for layer in trace])
        close(step["weights_LHS"], [layer["a_HTS"][:, 0] for layer in trace])
        close(step["k_LHSK"], [layer["k_HSK"] for layer in trace])
        close(step["v_LHSK"], [layer["v_HSK"] for layer in trace])
        assert np.asarray(step["row_sums_LH"]).tolist() == [[1.0] * H] * L
        weight_sums = np.asarray(step["weights_LHS"]).sum(axis=-1)
        assert np.abs(weight_sums - 1).max() <= S * unit / 2
        previous = data["prefill"] if i == 0 else data["steps"][i - 1]
        for key in ("k_LHSK", "v_LHSK"):  # the old rows stay, one row is appended
            assert np.asarray(step[key])[:, :, :-1].tolist() == np.asarray(previous[key]).tolist()
    tok = kvtutor.load_toy_tokenizer()
    new = [data["prefill"]["next_id"]] + [s["next_id"] for s in data["steps"]]
    assert new == trace32["fed"] + [trace32["last"]]
    model = kvtutor.load_toy_model()
    assert new == model.generate(trace32["ids"], len(new))
    assert [s["token_id"] for s in data["steps"]] == new[:-1]
    assert [s["next_token"] for s in data["steps"]] == [tok.vocab[i] for i in new[1:]]
    assert data["text"] == tok.decode(trace32["ids"] + new) == "The cat sat on the mat."


def test_stepper_recompute_is_the_same_step_without_a_cache(stepper, toy_model):
    data = stepper.data
    unit = 10.0 ** -data["digits"]
    for step in data["steps"]:
        full, S = step["recompute"], step["n_keys"]
        for key in ("k_LHSK", "v_LHSK"):
            assert np.abs(np.subtract(full[key], step[key])).max() <= unit
        assert np.asarray(full["q_LHSK"]).shape[2] == S
        assert np.asarray(full["scores_LHSS"]).shape[2:] == (S, S)
        assert np.abs(np.asarray(full["q_LHSK"])[:, :, -1] - step["q_LHK"]).max() <= unit
        assert np.abs(np.asarray(full["scores_LHSS"])[:, :, -1] - step["scores_LHS"]).max() <= unit
        assert np.abs(np.asarray(full["weights_LHSS"])[:, :, -1] - step["weights_LHS"]).max() <= unit
        assert np.all(np.triu(np.asarray(full["weights_LHSS"]), 1) == 0)  # the causal mask
    cfg, P = toy_model.config, len(data["prompt"]["ids"])
    cached = generation_costs(cfg, P, len(data["steps"]) + 1, True, dtype=4)
    recompute = generation_costs(cfg, P, len(data["steps"]) + 1, False, dtype=4)
    entries = [data["prefill"]] + data["steps"]
    for entry, c, r, n in zip(entries, cached, recompute, range(1, 5), strict=True):
        assert entry["cost"] == {"cached": {"flops": c.flops, "bytes": c.bytes},
                                 "recompute": {"flops": r.flops, "bytes": r.bytes}}  # fmt: skip
        assert entry["total"]["cached"]["flops"] == sum(x.flops for x in cached[:n])
        assert entry["total"]["recompute"]["bytes"] == sum(x.bytes for x in recompute[:n])
    assert data["steps"][0]["cost"]["cached"] == {
        "flops": 3840,
        "bytes": 8704,
    }  # as the decode chapter prints


def test_a_changed_model_changes_the_stepper(toy_model, stepper):
    layer = toy_model.weights.layers[1]
    changed = kvtutor.GPT2Model(
        toy_model.config,
        dataclasses.replace(toy_model.weights, layers=[toy_model.weights.layers[0],
                            dataclasses.replace(layer, w_k=layer.w_k * 1.5)]),
    )  # fmt: skip
    data = cache_stepper_data(changed)
    assert data["prefill"]["k_LHSK"][0] == stepper.data["prefill"]["k_LHSK"][0]  # layer 0 untouched
    assert data["prefill"]["k_LHSK"][1] != stepper.data["prefill"]["k_LHSK"][1]
    assert cache_stepper(changed).to_json() != stepper.to_json()
    assert cache_stepper_data(n_steps=1, prompt="The dog")["prompt"]["tokens"] == ["The", "dog"]


def test_stepper_refuses_bad_arguments(toy_model):
    gqa = kvtutor.GPT2Model.random(kvtutor.GPT2Config(32, 8, 2, 1, 16, n_kv_heads=1))
    wide = kvtutor.GPT2Model.random(kvtutor.GPT2Config(40, 8, 2, 1, 16))
    cases = [
        ({"model": "toy"}, TypeError, "model: expected a GPT2Model"),
        ({"model": gqa}, ValueError, "model: expected multi-head attention"),
        ({"model": wide}, ValueError, "tokenizer: expected a vocabulary of the model's 40 tokens, got 32"),
        ({"tokenizer": "words"}, TypeError, "tokenizer: expected a ToyTokenizer, got str"),
        ({"prompt": 3}, TypeError, "prompt: expected a str, got int"),
        ({"prompt": "The zebra"}, ValueError, "prompt: expected words from the toy vocabulary"),
        ({"prompt": ""}, ValueError, "prompt: expected at least one token"),
        ({"n_steps": 0}, ValueError, "n_steps: expected 1 <= n_steps <= 13, got 0"),
        ({"n_steps": 14}, ValueError, "n_steps: expected 1 <= n_steps <= 13, got 14"),
        ({"n_steps": "3"}, TypeError, "n_steps: expected an int, got str"),
        ({"digits": 7}, ValueError, "digits: expected 0 <= digits <= 6, got 7"),
    ]
    for kwargs, error, message in cases:
        with pytest.raises(error, match=message.replace("(", r"\(")):
            cache_stepper(**kwargs)


# ---------------------------------------------------------------- the KV calculator


def cli_json(*argv: str) -> dict:
    """`python -m kvtutor kv-memory ... --json`, run in this process."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert memory.main([*argv, "--json"]) == 0
    return json.loads(out.getvalue())


def test_calculator_round_trips_through_the_page():
    calc = kv_calculator()
    div, data = parsed(calc)
    assert div["data-kvtutor-widget"] == "kv-calculator"
    assert data == calc.data and kv_calculator().to_html() == calc.to_html()
    assert repr(calc) == f"<kvtutor KV calculator: {len(bundled_models())} bundled models>"
    assert data["defaults"] == {
        "model": "llama-3-8b", "seq_len": 8192, "batch": 8, "dtype": "bf16", "key_scales": "per_token",
        "group_size": 32, "weights_dtype": "bf16", "memory_gib": 80, "window": None,
    }  # fmt: skip


def test_calculator_models_are_the_command_lines():
    """Every bundled model, as `kv-memory --json` reads it; the constants, as memory.py counts."""
    data = kv_calculator_data()
    assert [m["name"] for m in data["models"]] == bundled_models()
    kinds = set()
    for row in data["models"]:
        report = cli_json(row["name"])
        for key in ("n_layers", "n_heads", "n_kv_heads", "d_head", "sliding_window", "n_sliding_layers",
                    "n_params"):  # fmt: skip
            assert row[key] == report[key], (row["name"], key)
        assert (
            row["attention"] == report["attention"]
            and row["max_seq_len"] == report["max_position_embeddings"]
        )
        spec = load_model_spec(row["name"])
        assert (row["d_value"], row["kv_lora_rank"], row["qk_rope_head_dim"]) == (
            spec.d_value, spec.kv_lora_rank, spec.qk_rope_head_dim)  # fmt: skip
        tensors = (1 if spec.kv_lora_rank else 2) * spec.n_layers
        assert memory.fixed_scale_bytes(spec, "fp8") == tensors * data["fp8_scale_bytes"]
        kinds.add(row["attention"])
    assert kinds == {"MHA", "GQA", "MQA", "MLA"}
    assert data["dtypes"] == {d: {"bits": memory.DTYPE_BITS[d], "kind": memory.KVQuant(d).kind}
                              for d in memory.KV_DTYPES}  # fmt: skip
    assert (data["scale_bits"], data["float_bits"], data["group_size"]) == (16, 16, 32)
    assert data["gib"] == memory.GIB and data["key_scales"] == list(memory.KEY_SCALES)


def test_calculator_takes_a_subset_and_other_settings():
    data = kv_calculator_data(["gpt2", "DeepSeek-V3"], model="deepseek-v3", seq_len=4096, window=1024)
    assert [m["name"] for m in data["models"]] == ["gpt2", "deepseek-v3"]
    assert data["defaults"]["model"] == "deepseek-v3" and data["defaults"]["window"] == 1024


def test_calculator_refuses_bad_arguments():
    cases = [
        ({"models": "gpt2"}, TypeError, "models: expected a list of bundled model names, got str"),
        ({"models": []}, ValueError, "models: expected names from .*, got an empty list"),
        ({"models": ["gpt2", "gpt5"]}, ValueError, "models: expected names from .*, got 'gpt5'"),
        ({"model": "gpt5"}, ValueError, "model: expected one of .*, got 'gpt5'"),
        ({"models": ["gpt2"]}, ValueError, "model: expected one of gpt2, got 'llama-3-8b'"),
        ({"dtype": "bf17"}, ValueError, "dtype: expected one of bf16, .*, got 'bf17'"),
        ({"weights_dtype": "int3"}, ValueError, "weights_dtype: expected one of .*, got 'int3'"),
        ({"memory_gib": "80"}, TypeError, "memory_gib: expected a number of GiB, got str"),
        ({"memory_gib": float("inf")}, ValueError, "memory_gib: expected a finite number"),
        ({"memory_gib": 0}, ValueError, "memory_gib: expected a finite number of GiB > 0"),
        ({"seq_len": 0}, ValueError, "seq_len: expected an int >= 1, got 0"),
        ({"batch": 0}, ValueError, "batch: expected an int >= 1, got 0"),
        ({"batch": 2.5}, TypeError, "batch: expected an int"),
        ({"window": 0}, ValueError, "window: expected an int >= 1, got 0"),
    ]
    for kwargs, error, message in cases:
        with pytest.raises(error, match=message):
            kv_calculator(**kwargs)
