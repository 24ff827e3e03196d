"""The disaggregation simulator: its step-time model against kvtutor.measure.costs, hand-built traces where
the answer is known (no queueing, a long prompt arriving mid-stream), properties of every run
(conservation, causality, determinism) over random traces, the sweep and crossover helpers, clear
errors for bad input, and the figures of kvtutor.plots.disagg (Agg backend)."""

from __future__ import annotations

import json
import math
from dataclasses import fields, replace
from importlib import resources

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtutor.measure import costs
from kvtutor.models.config import GPT2Config
from kvtutor.serving.disagg import (
    DEFAULT_RATES,
    DEPLOYMENTS,
    LLAMA_7B_LIKE,
    MECHANISMS_CHECKED,
    METRICS,
    SERVING_MECHANISMS,
    Request,
    SimResult,
    StepModel,
    check_requests,
    find_crossover,
    make_trace,
    simulate,
    sweep_rates,
    sweep_split,
)

MODEL = StepModel()
# a small model for the random traces: fast, and its steps are far from the 7B model's sizes
SMALL = StepModel(
    GPT2Config(vocab_size=1000, d_model=256, n_heads=4, n_layers=4, max_seq_len=512, n_kv_heads=2)
)


def roofline(cost: costs.Cost, model: StepModel = MODEL) -> float:
    return costs.roofline_time(cost, model.peak_flops, model.bandwidth)


def prefill_s(prompt_len: int, model: StepModel = MODEL) -> float:
    """A whole prompt's prefill alone, straight from kvtutor.measure.costs."""
    cost = costs.prefill_cost(model.config, prompt_len, 1, model.dtype, all_logits=False)
    return roofline(cost, model)


def run(requests, deployment: str, **options) -> SimResult:
    return simulate(requests, deployment, **options)


# ---------------------------------------------------------------- the step-time model


def test_default_model_is_llama_2_7b_on_the_h100_datasheet():
    hf = json.loads(resources.files("kvtutor").joinpath("data/configs/llama-2-7b.json").read_text())
    cfg = LLAMA_7B_LIKE
    assert (cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.vocab_size, cfg.max_seq_len) == (
        hf["hidden_size"], hf["num_hidden_layers"], hf["num_attention_heads"],
        hf["num_key_value_heads"], hf["vocab_size"], hf["max_position_embeddings"],
    )  # fmt: skip
    # two [D, F] matrices hold as many weights as Llama's three [D, 11008]
    assert 2 * cfg.d_model * cfg.d_ff == 3 * hf["hidden_size"] * hf["intermediate_size"]
    assert cfg.n_params == pytest.approx(6.74e9, rel=0.03)  # Llama-2-7B: 6,738,415,616
    assert MODEL.kv_bytes(1) == 512 * 1024  # bf16: 2 x 32 layers x 4096 x 2 bytes
    sheet = costs.DATASHEETS["H100 SXM"]
    assert (MODEL.peak_flops, MODEL.bandwidth) == (sheet["bf16_flops"], sheet["bandwidth"])
    assert MODEL.dtype == "bf16"


def test_step_cost_is_the_cost_models_prefill_and_decode():
    cfg = MODEL.config
    assert MODEL.step_cost([(700, 0)]) == costs.prefill_cost(cfg, 700, 1, "bf16", all_logits=False)
    assert MODEL.step_cost([(300, 400)]) == costs.forward_cost(cfg, 300, 400, 1, "bf16", all_logits=False)
    assert MODEL.step_cost((), [900] * 7) == costs.decode_cost(cfg, 900, 7, "bf16")
    assert MODEL.step_cost() == costs.Cost() and MODEL.step_s() == 0.0


@settings(max_examples=60, deadline=None)
@given(
    chunks=st.lists(st.tuples(st.integers(1, 2048), st.integers(0, 2048)), max_size=3),
    contexts=st.lists(st.integers(1, 4000), max_size=40),
)
def test_step_s_is_the_roofline_time_of_the_step_cost(chunks, contexts):
    cost = MODEL.step_cost(chunks, contexts)
    assert MODEL.step_s(chunks, contexts) == pytest.approx(roofline(cost), rel=1e-12)
    # the weights are read once per step, however many requests share it
    assert cost.all_weight_bytes == (MODEL.step_cost([(1, 0)]).all_weight_bytes if chunks or contexts else 0)


def test_step_cost_fits_the_books_code_column():
    """The chapter shows StepModel.step_cost: every line it displays within 80 columns."""
    from kvtutor.book.display import show_source

    lines = show_source(StepModel.step_cost).data.splitlines()
    assert max(len(line) for line in lines) <= 80


def test_step_times_by_regime():
    # a decode step of one short sequence reads the weights: memory-bound
    weights = MODEL.step_cost((), [1]).all_weight_bytes
    assert MODEL.step_s((), [1]) == pytest.approx(weights / MODEL.bandwidth, rel=1e-3)
    # a long prefill is compute-bound, and far slower than a decode step
    assert prefill_s(3000) == pytest.approx(MODEL.step_cost([(3000, 0)]).flops / MODEL.peak_flops)
    assert prefill_s(3000) > 10 * MODEL.step_s((), [1])
    # sharing a step costs less than running its parts one after the other (the weights are shared)
    assert MODEL.step_s([(64, 0)], [500] * 8) < MODEL.step_s([(64, 0)]) + MODEL.step_s((), [500] * 8)


# ---------------------------------------------------------------- traces


def test_make_trace_is_seeded_and_rate_only_scales_time():
    a, b = make_trace(200, 8.0, seed=3), make_trace(200, 8.0, seed=3)
    assert a == b and a != make_trace(200, 8.0, seed=4)
    fast = make_trace(200, 16.0, seed=3)
    assert [(r.prompt_len, r.output_len) for r in fast] == [(r.prompt_len, r.output_len) for r in a]
    assert [r.arrival_s for r in fast] == pytest.approx([r.arrival_s / 2 for r in a])
    arrivals = [r.arrival_s for r in a]
    assert arrivals == sorted(arrivals) and arrivals[0] > 0


def test_make_trace_mixes_long_and_short_prompts():
    trace = make_trace(2000, 8.0, seed=0, long_fraction=0.25)
    long = [r for r in trace if r.prompt_len >= 2048]
    assert 0.2 < len(long) / len(trace) < 0.3
    assert all(64 <= r.prompt_len <= 1024 for r in trace if r.prompt_len < 2048)
    assert all(r.prompt_len <= 3840 and 32 <= r.output_len <= 256 for r in trace)
    assert len(trace) / trace[-1].arrival_s == pytest.approx(8.0, rel=0.1)  # the Poisson rate
    assert all(r.prompt_len < 2048 for r in make_trace(100, 8.0, long_fraction=0))


def test_requests_may_be_plain_triples():
    plain = [(0.0, 100, 5), (0.01, 200, 3)]
    assert check_requests(plain, LLAMA_7B_LIKE) == [Request(0.0, 100, 5), Request(0.01, 200, 3)]
    assert run(plain, "colocated") == run([Request(*r) for r in plain], "colocated")


# ---------------------------------------------------------------- traces with known answers


@pytest.mark.parametrize("deployment", DEPLOYMENTS)
def test_without_queueing_or_transfer_ttft_is_the_prefill_time(deployment):
    """One GPU per request (and per decode), a free link: nothing waits, so TTFT is the prefill
    alone. Whole prefills take exactly the cost model's prefill time."""
    trace = [Request(0.001 * i, p, 4) for i, p in enumerate([50, 700, 3000, 1200, 9])]
    n = len(trace)
    result = run(trace, deployment, n_gpus=2 * n, n_prefill=n, link_bandwidth=math.inf, chunk_tokens=512)
    for r in result.requests:
        assert r.ttft_s == pytest.approx(r.prefill_s, rel=1e-9) and r.transfer_s == 0
        if deployment != "chunked":
            assert r.prefill_s == pytest.approx(prefill_s(r.request.prompt_len), rel=1e-12)
        # alone on its GPU, every later token is one decode step of one sequence
        gaps = [b - a for a, b in zip(r.token_times_s, r.token_times_s[1:], strict=False)]
        want = [MODEL.step_s((), [r.request.prompt_len + k]) for k in range(1, len(r.token_times_s))]
        assert gaps == pytest.approx(want, rel=1e-9)


def test_the_transfer_is_the_cache_over_the_link():
    trace = [Request(0.0, 2000, 3), Request(0.0, 100, 3)]
    result = run(trace, "disaggregated", n_gpus=3, n_prefill=1, link_bandwidth=10e9)
    first, second = result.requests
    assert first.transfer_s == MODEL.kv_bytes(2000) / 10e9  # about 0.1 s for 1 GiB
    # one prefill GPU: the short prompt waits for the long one, then for its link
    assert first.ttft_s == pytest.approx(prefill_s(2000) + first.transfer_s, rel=1e-9)
    link_free = prefill_s(2000) + first.transfer_s
    assert second.ttft_s == pytest.approx(
        max(prefill_s(2000) + prefill_s(100), link_free) + second.transfer_s
    )


# eight chats decoding, and a long prompt arriving while they do
CHATS = [Request(0.0, 128, 200) for _ in range(8)]
LONG = Request(0.2, 3000, 10)


def chat_gaps(result: SimResult) -> float:
    """The chats' longest gap between tokens once they are all decoding (their own prefills done)."""
    times = [[t for t in r.token_times_s if t > 0.1] for r in result.requests[:8]]
    return max(b - a for t in times for a, b in zip(t, t[1:], strict=False))


def test_a_long_prompt_stalls_colocated_decodes_for_its_whole_prefill():
    alone, mixed = run(CHATS, "colocated", n_gpus=1), run([*CHATS, LONG], "colocated", n_gpus=1)
    assert chat_gaps(mixed) >= prefill_s(3000) > 5 * chat_gaps(alone)
    for before, after in zip(alone.requests, mixed.requests, strict=False):
        assert after.tpot_s > before.tpot_s


def test_chunking_bounds_the_stall_by_one_chunks_step():
    budget = 256
    chunked = run([*CHATS, LONG], "chunked", n_gpus=1, chunk_tokens=budget)
    # the worst step: a full budget of prefill at the end of the long prompt, beside every chat
    worst_step = MODEL.step_s([(budget, LONG.prompt_len)], [128 + 200] * 8)
    assert chat_gaps(chunked) <= worst_step < prefill_s(3000) / 5
    assert chunked.requests[8].ttft_s >= chunked.requests[8].prefill_s


def test_disaggregated_decodes_never_wait_for_a_prefill():
    result = run([*CHATS, LONG], "disaggregated", n_gpus=2, n_prefill=1, link_bandwidth=math.inf)
    worst_step = MODEL.step_s((), [LONG.prompt_len + LONG.output_len] + [128 + 200] * 8)
    for r in result.requests:  # every gap after the first token is one decode step
        assert r.max_gap_s <= worst_step < prefill_s(3000) / 5


def test_a_full_decode_batch_delays_the_first_token_not_the_second():
    trace = [Request(0.0, 100, 50), Request(0.0, 100, 50)]
    result = run(trace, "disaggregated", n_gpus=2, max_batch_size=1, link_bandwidth=math.inf)
    first, second = result.requests
    assert second.ttft_s >= first.e2e_s  # it joins when the first leaves
    assert second.max_gap_s == pytest.approx(MODEL.step_s((), [100 + 49]), rel=1e-9)


# ---------------------------------------------------------------- properties of every run

requests_st = st.lists(
    st.tuples(st.floats(0, 0.05, allow_nan=False), st.integers(1, 400), st.integers(1, 40)),
    min_size=1,
    max_size=10,
)


@settings(max_examples=60, deadline=None)
@given(
    requests=requests_st,
    deployment=st.sampled_from(DEPLOYMENTS),
    n_gpus=st.integers(2, 4),
    n_prefill=st.integers(1, 3),
    batch=st.integers(1, 4),
    chunk=st.integers(1, 300),
    bandwidth=st.sampled_from([1e9, 50e9, math.inf]),
)
def test_every_run_conserves_requests_and_respects_causality(
    requests, deployment, n_gpus, n_prefill, batch, chunk, bandwidth
):
    options = dict(model=SMALL, max_batch_size=batch, chunk_tokens=chunk, link_bandwidth=bandwidth)
    result = run(requests, deployment, n_gpus=n_gpus, n_prefill=min(n_prefill, n_gpus - 1), **options)
    assert [r.request for r in result.requests] == [Request(*r) for r in requests]
    for r in result.requests:
        times = r.token_times_s
        assert len(times) == r.request.output_len  # every request finishes, with every token
        assert all(b > a for a, b in zip(times, times[1:], strict=False))
        assert r.ttft_s >= r.prefill_s + r.transfer_s - 1e-12 and r.prefill_s > 0
        if deployment == "disaggregated":
            assert r.transfer_s == SMALL.kv_bytes(r.request.prompt_len) / bandwidth
        else:
            assert r.transfer_s == 0
        assert r.e2e_s >= r.ttft_s and (math.isnan(r.tpot_s) == (len(times) == 1))
    summary = result.summary()
    assert summary["n_tokens"] == sum(o for _, _, o in requests) and summary["n_requests"] == len(requests)
    assert run(requests, deployment, n_gpus=n_gpus, n_prefill=min(n_prefill, n_gpus - 1), **options) == result


@settings(max_examples=40, deadline=None)
@given(requests=requests_st, batch=st.integers(1, 4))
def test_one_gpu_does_all_the_prefill_work_in_turn(requests, batch):
    result = run(requests, "colocated", n_gpus=1, model=SMALL, max_batch_size=batch)
    start = min(r.request.arrival_s for r in result.requests)
    end = max(r.token_times_s[-1] for r in result.requests)
    assert end - start >= sum(r.prefill_s for r in result.requests) * (1 - 1e-9)
    for r in result.requests:  # whole prefills take the cost model's time
        assert r.prefill_s == pytest.approx(prefill_s(r.request.prompt_len, SMALL), rel=1e-12)


@settings(max_examples=30, deadline=None)
@given(
    requests=st.lists(
        st.tuples(st.floats(0, 0.05, allow_nan=False), st.integers(1, 400), st.integers(1, 40)),
        min_size=2,
        max_size=8,
        unique_by=lambda r: r[0],
    ),
    deployment=st.sampled_from(DEPLOYMENTS),
)
def test_the_order_of_the_list_does_not_matter(requests, deployment):
    forward = run(requests, deployment, model=SMALL, n_gpus=3)
    backward = run(requests[::-1], deployment, model=SMALL, n_gpus=3)
    assert forward.requests == backward.requests[::-1]


# ---------------------------------------------------------------- summaries, sweeps, crossovers


def test_summary_holds_percentiles_of_each_metric():
    result = run(make_trace(50, 20.0, seed=1), "chunked")
    summary = result.summary()
    for metric in METRICS:
        name = metric.removesuffix("_s")
        v = result.values(metric)
        assert summary[f"{name}_p50_s"] <= summary[f"{name}_p90_s"] <= summary[f"{name}_p99_s"] <= v.max()
        assert summary[f"{name}_mean_s"] == pytest.approx(v.mean())
    assert summary["tokens_per_s"] == pytest.approx(summary["n_tokens"] / summary["makespan_s"])


def test_summary_splits_ttft_into_prefill_and_transfer():
    trace = make_trace(40, 20.0, seed=2)
    colocated, disaggregated = (
        run(trace, d, link_bandwidth=25e9).summary() for d in ("colocated", "disaggregated")
    )
    want = sum(MODEL.kv_bytes(r.prompt_len) for r in trace) / 25e9 / len(trace)
    assert disaggregated["transfer_mean_s"] == pytest.approx(want)
    assert colocated["transfer_p99_s"] == 0 and colocated["prefill_mean_s"] > 0
    # whole prefills, one prompt at a time: the same work either way
    assert colocated["prefill_mean_s"] == pytest.approx(disaggregated["prefill_mean_s"])
    # prefill and transfer both grow with the prompt, so their medians add up
    for s in (colocated, disaggregated):
        assert s["ttft_p50_s"] >= s["prefill_p50_s"] + s["transfer_p50_s"] - 1e-12


def test_a_small_sweep_shows_the_stall_and_its_cures():
    rows = sweep_rates(rates=(8.0, 96.0), n_requests=120)
    assert [(r["rate"], r["deployment"]) for r in rows] == [(x, d) for x in (8.0, 96.0) for d in DEPLOYMENTS]
    assert rows == sweep_rates(rates=(8.0, 96.0), n_requests=120)  # deterministic
    by = {(r["rate"], r["deployment"]): r for r in rows}
    for rate in (8.0, 96.0):
        stall = by[rate, "colocated"]["max_gap_p99_s"]
        assert by[rate, "chunked"]["max_gap_p99_s"] < stall / 3
        assert by[rate, "disaggregated"]["max_gap_p99_s"] < stall / 3
    # one prefill GPU of four cannot keep up at 96 requests/s: its queue shows in TTFT
    assert by[96.0, "disaggregated"]["ttft_p50_s"] > 5 * by[96.0, "colocated"]["ttft_p50_s"]
    assert DEFAULT_RATES == tuple(sorted(DEFAULT_RATES))


def test_sweep_split_tries_every_split():
    rows = sweep_split(rate=20.0, n_gpus=4, n_requests=60)
    assert [(r["deployment"], r["n_prefill"]) for r in rows] == [
        ("colocated", 0), ("chunked", 0), ("disaggregated", 1), ("disaggregated", 2), ("disaggregated", 3)
    ]  # fmt: skip
    assert all(r["n_gpus"] == 4 and r["rate"] == 20.0 for r in rows)


def test_find_crossover_by_hand():
    rows = [
        {"rate": 1.0, "deployment": "colocated", "tpot_p90_s": 1.0},
        {"rate": 1.0, "deployment": "disaggregated", "tpot_p90_s": 2.0},
        {"rate": 2.0, "deployment": "colocated", "tpot_p90_s": 3.0},
        {"rate": 2.0, "deployment": "disaggregated", "tpot_p90_s": 2.0},
        {"rate": 3.0, "deployment": "colocated", "tpot_p90_s": 8.0},
        {"rate": 3.0, "deployment": "disaggregated", "tpot_p90_s": 2.0},
    ]
    # difference colocated - disaggregated: -1 at 1, +1 at 2: zero at 1.5
    assert find_crossover(rows, "tpot_p90_s") == {
        "metric": "tpot_p90_s", "x": 1.5, "below": "colocated", "above": "disaggregated"
    }  # fmt: skip
    assert find_crossover(rows[2:], "tpot_p90_s") is None  # disaggregated wins throughout
    assert find_crossover(rows, "ttft_p90_s") is None  # no such column
    flipped = [{**r, "tpot_p90_s": -r["tpot_p90_s"]} for r in rows]
    assert find_crossover(flipped, "tpot_p90_s")["below"] == "disaggregated"
    nan_row = {"rate": 1.5, "deployment": "colocated", "tpot_p90_s": float("nan")}
    nan_row2 = {**nan_row, "deployment": "disaggregated"}
    assert find_crossover([*rows, nan_row, nan_row2], "tpot_p90_s")["x"] == 1.5
    # within 40%, 3.0 against 2.0 is a tie: the swap is between -1 at 1 and +6 at 3
    assert find_crossover(rows, "tpot_p90_s", rtol=0.4)["x"] == pytest.approx(1 + 2 / 7)
    assert find_crossover(rows, "tpot_p90_s", rtol=0.8) is None  # every point a tie
    assert find_crossover(rows, "tpot_p90_s", "disaggregated", "colocated")["below"] == "colocated"


# ---------------------------------------------------------------- what the systems call it


def test_the_mechanism_table_covers_the_book():
    names = [m["mechanism"] for m in SERVING_MECHANISMS]
    for word in ("continuous batching", "paged", "chunked prefill", "prefix caching", "speculative",
                 "FlashAttention", "disaggregation", "quantized KV"):  # fmt: skip
        assert sum(word in n for n in names) == 1, word
    for row in SERVING_MECHANISMS:
        assert set(row) == {"mechanism", "vllm", "sglang", "tensorrt_llm"}
        assert all(isinstance(v, str) and 0 < len(v) <= 100 for v in row.values())
    # where and when the names were checked, for the chapter to print
    assert MECHANISMS_CHECKED.startswith("20") and MECHANISMS_CHECKED[:10].count("-") == 2
    for system in ("vLLM", "SGLang", "TensorRT-LLM"):
        assert f"{system}:" in MECHANISMS_CHECKED


# ---------------------------------------------------------------- errors


ONE = [(0.0, 10, 1)]


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: simulate(ONE, "split"), ValueError, "deployment: expected one of"),
        (lambda: simulate(ONE, n_gpus=0), ValueError, "n_gpus: expected an int >= 1"),
        (lambda: simulate(ONE, n_gpus=2.0), TypeError, "n_gpus: expected an int"),
        (lambda: simulate(ONE, "disaggregated", n_gpus=1), ValueError, "n_gpus: expected an int >= 2"),
        (lambda: simulate(ONE, "disaggregated", n_prefill=4), ValueError, "n_prefill"),
        (lambda: simulate(ONE, max_batch_size=0), ValueError, "max_batch_size"),
        (lambda: simulate(ONE, "chunked", chunk_tokens=0), ValueError, "chunk_tokens"),
        (lambda: simulate(ONE, "disaggregated", link_bandwidth=0), ValueError, "link_bandwidth"),
        (lambda: simulate(ONE, "disaggregated", link_bandwidth="x"), TypeError, "link_bandwidth"),
        (lambda: simulate(ONE, model="7b"), TypeError, "model: expected a StepModel"),
        (lambda: simulate([]), ValueError, "requests: expected at least one"),
        (lambda: simulate("abc"), TypeError, "requests: expected a list"),
        (lambda: simulate([(0, 10)]), TypeError, r"requests\[0\]: expected a Request"),
        (lambda: simulate([(0, 4000, 100)]), ValueError, r"requests\[0\]: .* exceed max_seq_len 4096"),
        (lambda: Request(-1.0, 10, 1), ValueError, "arrival_s: expected a finite number >= 0"),
        (lambda: Request(math.inf, 10, 1), ValueError, "arrival_s"),
        (lambda: Request(0.0, 0, 1), ValueError, "prompt_len: expected an int >= 1"),
        (lambda: Request(0.0, 10.0, 1), TypeError, "prompt_len: expected an int"),
        (lambda: Request(0.0, 10, 0), ValueError, "output_len"),
        (lambda: make_trace(rate=0), ValueError, "rate: expected a finite number > 0"),
        (lambda: make_trace(long_fraction=1.5), ValueError, "long_fraction"),
        (lambda: make_trace(short_prompt=(10, 5)), ValueError, r"short_prompt\[1\]"),
        (lambda: make_trace(long_prompt=7), TypeError, "long_prompt: expected a"),
        (lambda: make_trace(n_requests=0), ValueError, "n_requests"),
        (lambda: make_trace(seed=-1), ValueError, "seed"),
        (lambda: StepModel(config="llama"), TypeError, "config: expected a GPT2Config"),
        (lambda: StepModel(peak_flops=0.0), ValueError, "peak_flops"),
        (lambda: StepModel(bandwidth=math.inf), ValueError, "bandwidth"),
        (lambda: StepModel(dtype="fp7"), ValueError, "dtype"),
        (lambda: sweep_rates(rates=[]), TypeError, "rates"),
        (lambda: sweep_split(n_gpus=1), ValueError, "n_gpus"),
        (lambda: find_crossover([], rtol=-0.1), ValueError, "rtol"),
    ],
)
def test_bad_input_names_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_unknown_metric_is_refused():
    with pytest.raises(ValueError, match="metric: expected one of"):
        run([(0.0, 10, 2)], "colocated").values("latency")


def test_step_model_is_a_plain_value():
    assert StepModel() == MODEL and hash(StepModel()) == hash(MODEL)
    faster = replace(MODEL, bandwidth=2 * MODEL.bandwidth)
    assert faster != MODEL and faster.step_s((), [10]) < MODEL.step_s((), [10])
    assert {f.name for f in fields(StepModel) if f.init} == {"config", "peak_flops", "bandwidth", "dtype"}


# ---------------------------------------------------------------- the figures


@pytest.fixture
def plots():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kvtutor.plots import disagg as disagg_plots

    yield disagg_plots
    plt.close("all")


def test_kvtutor_plots_disagg_does_not_import_matplotlib():
    import subprocess
    import sys

    code = "import sys, kvtutor.plots.disagg; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_labels_of_rows_and_metrics(plots):
    rows = sweep_split(rate=20.0, n_gpus=3, n_requests=20)
    assert [plots.row_label(r) for r in rows] == [
        "colocated", "chunked", "disagg. 1:2", "disagg. 2:1"
    ]  # fmt: skip
    assert plots.metric_label("ttft_p90_s") == "TTFT p90"
    assert plots.metric_label("max_gap_p99_s") == "longest gap p99"
    assert plots.metric_label("transfer_mean_s") == "KV transfer mean"
    for bad in ("ttft_s", "latency_p90_s", "tpot_q90_s"):
        with pytest.raises(ValueError, match="metric: expected a summary column"):
            plots.metric_label(bad)


def test_token_times_draw_every_token_in_the_window(plots):
    results = {d: run([*CHATS, LONG], d, n_gpus=2) for d in DEPLOYMENTS}
    fig = plots.plot_token_times(results, highlight=[8], start_s=0.15, end_s=0.35)
    axes = fig.axes
    assert [ax.get_title(loc="left") for ax in axes] == list(DEPLOYMENTS)
    for ax, result in zip(axes, results.values(), strict=True):
        ticks = sum(len(c.get_segments()) for c in ax.collections if hasattr(c, "get_segments"))
        want = sum(0.15 <= t <= 0.35 for r in result.requests for t in r.token_times_s)
        assert ticks == want
        assert ax.get_xlim() == pytest.approx((150.0, 350.0))
    with pytest.raises(ValueError, match="highlight"):
        plots.plot_token_times(results, highlight=[9])
    with pytest.raises(ValueError, match="end_s"):
        plots.plot_token_times(results, start_s=0.3, end_s=0.2)
    with pytest.raises(TypeError, match="results"):
        plots.plot_token_times({})
    with pytest.raises(TypeError, match="results"):
        plots.plot_token_times({"a": "b"})


def test_rate_sweep_draws_a_line_per_deployment(plots):
    rows = sweep_rates(rates=(8.0, 96.0), n_requests=120)
    fig = plots.plot_rate_sweep(rows, metrics=("ttft_p50_s", "tpot_p90_s"))
    ttft, tpot = fig.axes
    assert [line.get_label() for line in ttft.get_lines()] == list(DEPLOYMENTS[:2]) + ["disagg. 1:3"]
    x, y = ttft.get_lines()[0].get_data()
    colocated = [r for r in rows if r["deployment"] == "colocated"]
    assert list(x) == [8.0, 96.0] and list(y) == pytest.approx([r["ttft_p50_s"] * 1e3 for r in colocated])
    # TTFT spans more than 20 times across the sweep (the queue at 96/s): a log scale
    assert ttft.get_yscale() == "log" and tpot.get_yscale() == "linear"
    with pytest.raises(TypeError, match="rows"):
        plots.plot_rate_sweep([])
    with pytest.raises(ValueError, match="metrics: 'e2e_p90_s'"):
        plots.plot_rate_sweep([{"rate": 1.0, "deployment": "chunked", "ttft_p90_s": 1.0}], ("e2e_p90_s",))
    with pytest.raises(ValueError, match="rate"):
        plots.plot_rate_sweep([{k: v for k, v in r.items() if k != "rate"} for r in rows])


def test_split_sweep_draws_a_bar_per_row_and_metric(plots):
    rows = sweep_split(rate=20.0, n_gpus=4, n_requests=40)
    fig = plots.plot_split_sweep(rows, panels=[["ttft_p50_s", "ttft_p99_s"], ["tpot_p90_s"]])
    left, right = fig.axes
    assert len(left.patches) == 2 * len(rows) and len(right.patches) == len(rows)
    assert [t.get_text() for t in right.get_xticklabels()] == [plots.row_label(r) for r in rows]
    heights = [bar.get_height() for bar in right.patches]
    assert heights == pytest.approx([r["tpot_p90_s"] * 1e3 for r in rows])
    with pytest.raises(TypeError, match="panels"):
        plots.plot_split_sweep(rows, panels="ttft_p50_s")
    with pytest.raises(TypeError, match="panels"):
        plots.plot_split_sweep(rows, panels=[[]])
