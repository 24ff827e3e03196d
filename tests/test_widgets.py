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


# ---------------------------------------------------------------- NumPy numbers at the call


def test_widgets_take_numpy_numbers_and_refuse_bools():
    """NumPy ints and floats are numbers (the page's JSON then holds Python ones); bools and
    strings are refused at the call, by the argument's name."""
    calc = kv_calculator(
        seq_len=np.int64(4096), batch=np.int32(3), memory_gib=np.float64(40.5), window=np.int16(512)
    )
    assert calc.data["defaults"] | {} == {
        **calc.data["defaults"], "seq_len": 4096, "batch": 3, "memory_gib": 40.5, "window": 512,
    }  # fmt: skip
    assert [type(calc.data["defaults"][k]) for k in ("seq_len", "batch", "memory_gib", "window")] == [
        int,
        int,
        float,
        int,
    ]
    assert json.loads(calc.to_json())["defaults"]["memory_gib"] == 40.5
    assert kv_calculator(memory_gib=np.int64(80)).to_json() == kv_calculator().to_json()
    stepper = cache_stepper(n_steps=np.int64(2), digits=np.int64(2))
    assert stepper.data["digits"] == 2 and len(stepper.data["steps"]) == 2 and "np." not in stepper.to_json()
    assert repr(stepper) == "<kvtutor cache stepper: 2 decode steps of 'The cat sat'>"
    refused = [
        (kv_calculator, {"seq_len": True}, TypeError, "seq_len: expected an int, got bool"),
        (kv_calculator, {"batch": np.bool_(True)}, TypeError, "batch: expected an int, got bool"),
        (kv_calculator, {"window": 2.0}, TypeError, "window: expected an int, got float"),
        (
            kv_calculator,
            {"memory_gib": np.bool_(True)},
            TypeError,
            "memory_gib: expected a number of GiB, got bool",
        ),
        (
            kv_calculator,
            {"memory_gib": np.float64("nan")},
            ValueError,
            "memory_gib: expected a finite number",
        ),
        (cache_stepper, {"digits": True}, TypeError, "digits: expected an int, got bool"),
        (cache_stepper, {"n_steps": np.float64(2)}, TypeError, "n_steps: expected an int, got float64"),
        (cache_stepper, {"n_steps": "2"}, TypeError, "n_steps: expected an int, got str"),
    ]
    for make, kwargs, error, message in refused:
        with pytest.raises(error, match=message):
            make(**kwargs)


def test_stepper_refuses_a_prompt_that_fills_the_model():
    tok = kvtutor.load_toy_tokenizer()
    long_prompt = " ".join(["the"] * kvtutor.TOY_CONFIG.max_seq_len)
    assert len(tok.encode(long_prompt)) == kvtutor.TOY_CONFIG.max_seq_len
    with pytest.raises(
        ValueError, match="prompt: expected fewer than the model's 16 positions .*, got 16 tokens"
    ):
        cache_stepper_data(prompt=long_prompt)


def test_every_widget_has_a_fallback_in_both_editions():
    for widget in (cache_stepper(n_steps=1), kv_calculator(["gpt2"], model="gpt2")):
        html_text = widget.to_html()
        assert '<div class="kvtutor-fallback">' in html_text
        assert 'class="kvt-lang-en"' in html_text and 'class="kvt-lang-zh"' in html_text
        assert "JavaScript" in html_text


# ---------------------------------------------------------------- the scheduler replays


@pytest.fixture(scope="module")
def serving_export():
    from kvtutor.book.scheduler_widget import serving_replay

    return serving_replay()


@pytest.fixture(scope="module")
def paged_export():
    from kvtutor.book.paged_widget import paged_replay

    return paged_replay()


def test_serving_replay_is_run_serving_step_by_step(serving_export):
    """Every exported step against run_serving run again here: the StepRecord's counts, each
    request's chunks, decodes and cache positions (against the step's chunks and contexts), the
    slots held, and TTFT and TPOT against latency_summary and token_times."""
    from kvtutor import serving
    from kvtutor.book.scheduler_widget import STATES, serving_runs

    data = serving_export.data
    runs = serving_runs()
    assert [r["id"] for r in data["runs"]] == [
        "toy-static-whole", "toy-continuous-whole", "long-static-whole", "long-continuous-whole",
        "long-continuous-32", "long-continuous-16",
    ]  # fmt: skip
    for run, exported in zip(runs, data["runs"], strict=True):
        trace = serving.run_serving(run["model"], run["requests"], run["max_batch_size"], run["policy"],
                                    run["max_step_tokens"])  # fmt: skip
        where = exported["id"]
        assert len(exported["steps"]) == len(exported["cells"]) == trace.n_steps, where
        given_before = [0] * len(trace.requests)
        for s, step, cells in zip(trace.steps, exported["steps"], exported["cells"], strict=True):
            states = [STATES[c[0]] for c in cells]
            assert step == {
                **step,
                "step": s.step,
                "held": s.held,
                "first": s.prefilled,
                "decoded": s.decoded,
                "prompt": s.prompt_tokens,
                "run": s.batched_tokens,
                "given": s.tokens,
            }, where
            chunks = sorted(
                (c[1], c[2] - c[1]) for c, st in zip(cells, states, strict=True) if st in ("chunk", "first")
            )
            assert chunks == sorted(s.chunks), (where, s.step)
            decodes = sorted(c[2] for c, st in zip(cells, states, strict=True) if st == "decode")
            assert decodes == sorted(s.contexts) and all(
                c[1] == 1 for c, st in zip(cells, states, strict=True) if st == "decode"
            )
            assert states.count("first") == s.prefilled and sum(c[4] >= 0 for c in cells) == s.held
            assert sum(c[3] for c in cells) - sum(given_before) == s.tokens
            slots = [c[4] for c in cells if c[4] >= 0]
            assert len(slots) == len(set(slots)) and all(0 <= x < run["max_batch_size"] for x in slots)
            given_before = [c[3] for c in cells]
        assert given_before == [len(r.tokens) for r in trace.requests], where
        summary = serving.latency_summary(trace, run["clock"])
        for r, lat, mine in zip(trace.requests, summary.requests, exported["latency"], strict=True):
            assert mine["ttft_steps"] == lat.ttft_steps == r.first_token_steps
            assert (
                len(mine["tpot_steps"]) == len(r.tokens) - 1 and mine["tpot_steps"][-1] == lat.tpot_steps == 1
            )
        if run["clock"] is not None:
            ms = serving.step_durations(trace, run["clock"]) * 1e3
            assert [s["ms"] for s in exported["steps"]] == [round(x, 2) for x in ms]
            assert exported["steps"][-1]["elapsed_ms"] == round(ms.sum(), 2)
            times = serving.token_times(trace, run["clock"])
            for lat, mine, t in zip(summary.requests, exported["latency"], times, strict=True):
                assert mine["ttft_ms"] == round(lat.ttft_s * 1e3, 2)
                assert mine["tpot_ms"][-1] == round(lat.tpot_s * 1e3, 2)
                assert mine["tpot_ms"][0] == round((t[1] - t[0]) * 1e3, 2)
            assert exported["totals"]["tpot_ms_p50"] == round(summary.percentiles["tpot_s"][50] * 1e3, 2)
        assert (
            exported["totals"]["n_steps"] == trace.n_steps
            and exported["totals"]["n_tokens"] == trace.n_tokens
        )
    toy = next(t for t in data["traces"] if t["id"] == "toy")
    model, tok = kvtutor.load_toy_model(), kvtutor.load_toy_tokenizer()
    for req, (_, prompt, n) in zip(toy["requests"], runs[0]["requests"], strict=True):
        assert req["words"] == [tok.vocab[i] for i in model.generate(prompt, n)] and req[
            "text"
        ] == tok.decode(prompt)


def test_serving_replay_shows_what_the_chapter_claims(serving_export):
    """The exported runs hold the contrasts the page is there to show."""
    runs = {r["id"]: r for r in serving_export.data["runs"]}
    assert runs["toy-continuous-whole"]["totals"]["n_steps"] < runs["toy-static-whole"]["totals"]["n_steps"]
    whole, chunked = runs["long-continuous-whole"], runs["long-continuous-32"]
    assert max(s["run"] for s in whole["steps"]) > 32 >= max(s["run"] for s in chunked["steps"])
    assert chunked["totals"]["max_gap_ms_p99"] < whole["totals"]["max_gap_ms_p99"]
    assert all(s["run"] <= 16 for s in runs["long-continuous-16"]["steps"])


def test_serving_replay_is_the_same_every_time_and_has_a_figure(serving_export):
    from kvtutor.book.scheduler_widget import serving_replay

    assert serving_replay().to_html() == serving_export.to_html()
    assert repr(serving_export) == "<kvtutor scheduler replay: 6 runs of 2 traces>"
    div, data = parsed(serving_export)
    assert div["data-kvtutor-widget"] == "serving-replay" and data == serving_export.data
    fallback = serving_export.fallback
    assert fallback.count("<svg") == 2 and "kvt-lang-zh" in fallback
    assert (
        "Continuous batching of the 5 toy requests on 2 slots" in fallback
        and "玩具模型的 5 个请求" in fallback
    )
    # one cell per (request, step) of the toy continuous run, drawn where the request is present
    run = next(r for r in data["runs"] if r["id"] == "toy-continuous-whole")
    present = sum(1 for row in run["cells"] for c in row if c[0] not in (0, 7))
    assert fallback.count("<rect") == 2 * present + 2 * len(
        {c[0] for row in run["cells"] for c in row} - {0, 7}
    )


def test_paged_replay_is_simulate_trace_step_by_step(paged_export):
    from kvtutor.book.paged_widget import BLOCK_SIZE, MAX_SEQ_LEN, PAGED_STATES, paged_runs
    from kvtutor.serving.paged_trace import simulate_trace

    data = paged_export.data
    assert [r["id"] for r in data["runs"]] == ["random-plain", "shared-plain", "shared-prefix"]
    for run, exported in zip(paged_runs(), data["runs"], strict=True):
        real = simulate_trace(run["requests"], "paged", run["capacity_tokens"], MAX_SEQ_LEN, BLOCK_SIZE,
                              prefix_caching=run["prefix_caching"])  # fmt: skip
        steps, cells = exported["steps"], exported["cells"]
        assert len(steps) == real.steps
        assert [s["running"] for s in steps] == real.running
        assert [s["reserved"] for s in steps] == real.reserved and [s["used"] for s in steps] == real.used
        n_blocks = run["capacity_tokens"] // BLOCK_SIZE
        preempted = 0
        for s, row in zip(steps, cells, strict=True):
            held = [b for b in s["pool"] if b and b != [-1]]
            assert len(held) * BLOCK_SIZE == s["reserved"] and s["free"] == n_blocks - len(held)
            assert s["cached_free"] == sum(b == [-1] for b in s["pool"]) and (
                run["prefix_caching"] or not s["cached_free"]
            )
            for i, c in enumerate(row):
                assert c[1] == sum(i in b for b in held), (exported["id"], i)
            # each request's positions; a cached prefix's blocks hold positions of several
            # requests, which the pool stores (and "used" counts) once
            each = sum(c[2] for c in row)
            assert each == s["used"] if not run["prefix_caching"] else each >= s["used"]
            assert sum(PAGED_STATES[c[0]] in ("admitted", "running", "finished") for c in row) == s["running"]
            preempted += len(s["preempted"])
            assert s["preemptions"] == preempted
        x = exported["totals"]
        assert (x["preemptions"], x["evictions"], x["first_prefill_tokens"], x["first_cached_tokens"]) == (
            real.preemptions,
            real.evictions,
            real.first_prefill_tokens,
            real.first_cached_tokens,
        )
        assert (
            steps[-1]["cached_tokens"] == real.cached_tokens
            and steps[-1]["prompt_tokens"] == real.prompt_tokens
        )
    runs = {r["id"]: r for r in data["runs"]}
    assert runs["random-plain"]["totals"]["preemptions"] > 0  # the trace is there to show them
    assert (
        runs["shared-prefix"]["totals"]["first_cached_sum"]
        > 0
        == runs["shared-plain"]["totals"]["first_cached_sum"]
    )
    assert runs["shared-prefix"]["totals"]["evictions"] > 0


def test_paged_replay_refuses_to_differ_from_simulate_trace(monkeypatch):
    """The replay's guard: a step count that differs from simulate_trace's stops the export."""
    from kvtutor.book import paged_widget

    real = paged_widget.simulate_trace

    def off_by_one(*args, **kwargs):
        result = real(*args, **kwargs)
        result.used[3] += 1
        return result

    monkeypatch.setattr(paged_widget, "simulate_trace", off_by_one)
    run = paged_widget.paged_runs()[0]
    with pytest.raises(RuntimeError, match=r"paged replay: used differs from simulate_trace's"):
        paged_widget.paged_steps(run["requests"], run["capacity_tokens"], run["prefix_caching"])


def test_paged_replay_is_the_same_every_time(paged_export):
    from kvtutor.book.paged_widget import paged_replay

    assert paged_replay().to_html() == paged_export.to_html()
    assert repr(paged_export) == "<kvtutor paged-pool replay: 3 runs of 2 traces>"
    assert paged_export.fallback.count("<svg") == 2
