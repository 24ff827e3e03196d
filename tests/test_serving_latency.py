"""Latency metrics of continuous batching: TTFT, TPOT and end-to-end latency per request (in steps,
counted by hand on tiny traces, and in seconds), their percentiles (numpy's), throughput, and the
batch-size sweep's properties that hold for every trace (and one that does not: static batching)."""

from __future__ import annotations

import itertools
import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvtutor
from kvtutor.serving.loop import (
    LATENCY_METRICS,
    BatchSweepRow,
    LatencySummary,
    ServedOutputs,
    ServingTrace,
    batch_size_sweep,
    latency_summary,
    run_serving,
    serve,
    serve_static,
)

CFG = kvtutor.GPT2Config(vocab_size=40, d_model=16, n_heads=4, n_layers=2, max_seq_len=20, n_kv_heads=2)
NAN = float("nan")

# (arrival_step, prompt_ids, max_new_tokens); request 2 never produces a token, request 3 only one
TINY = [(0, [1, 2], 3), (1, [3], 2), (1, [4], 0), (2, [5], 1)]


@pytest.fixture(scope="module")
def model():
    return kvtutor.GPT2Model.random(CFG, seed=3)


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def steps_of(summary: LatencySummary) -> list[tuple[int, float, float, float]]:
    return [(r.n_tokens, r.ttft_steps, r.tpot_steps, r.e2e_steps) for r in summary.requests]


def assert_steps(summary: LatencySummary, want: list[tuple[int, float, float, float]]) -> None:
    got = steps_of(summary)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert all(same(float(a), float(b)) for a, b in zip(g, w, strict=True)), (got, want)


# ---------------------------------------------------------------- hand-counted step metrics


def test_one_slot_counted_by_hand(model):
    # step 0: request 0 prefilled (token 1); steps 1, 2: its tokens 2, 3, then it leaves.
    # step 3: request 1 (arrived at 1) prefilled; step 4: its token 2. Request 2 wants nothing.
    # step 5: request 3 (arrived at 2) prefilled, its only token.
    s = latency_summary(run_serving(model, TINY, 1))
    # TTFT = first-token step - arrival + 1; e2e = last-token step - arrival + 1;
    # TPOT = (e2e - TTFT) / (n_tokens - 1)
    assert_steps(
        s,
        [
            (3, 0 - 0 + 1, (3 - 1) / 2, 2 - 0 + 1),
            (2, 3 - 1 + 1, (4 - 3) / 1, 4 - 1 + 1),
            (0, NAN, NAN, NAN),
            (1, 5 - 2 + 1, NAN, 5 - 2 + 1),
        ],
    )
    assert (s.n_tokens, s.n_steps, s.makespan_steps, s.tokens_per_step) == (6, 6, 6, 1.0)
    assert s.n_without_tokens == 1 and s.policy == "continuous" and s.max_batch_size == 1
    # percentiles over the requests where a metric is defined: TTFT of [1, 3, 4], TPOT of [1, 1]
    assert s.percentiles["ttft_steps"] == {50: 3.0, 90: pytest.approx(3.8), 99: pytest.approx(3.98)}
    assert s.percentiles["tpot_steps"] == {50: 1.0, 90: 1.0, 99: 1.0}
    assert s.percentile("e2e_steps", 0) == 3.0 and s.percentile("e2e_steps", 100) == 4.0


def test_two_slots_counted_by_hand(model):
    # step 0: request 0 prefilled. Step 1: request 1 prefilled, request 0 decodes.
    # step 2: both decode their last token; request 3 arrived, but slots are filled before they
    # are freed, so it waits. Step 3: request 3 prefilled, its only token.
    s = latency_summary(run_serving(model, TINY, 2))
    assert_steps(s, [(3, 1, 1, 3), (2, 1, 1, 2), (0, NAN, NAN, NAN), (1, 2, NAN, 2)])
    assert (s.n_steps, s.tokens_per_step) == (4, 1.5)


def test_idle_steps_count_in_steps_but_take_no_time(model):
    trace = run_serving(model, [(0, [1], 1), (5, [2], 2)], 1)
    s = latency_summary(trace, step_seconds=lambda step: 1.0)
    assert (s.n_steps, s.makespan_steps) == (3, 7)  # steps 1..4: nothing had arrived
    assert_steps(s, [(1, 1, NAN, 1), (2, 1, 1, 2)])
    assert [r.e2e_s for r in s.requests] == [1.0, 2.0]
    assert (s.seconds, s.tokens_per_second, s.clock) == (3.0, 1.0, "modelled")


def test_modelled_seconds_follow_the_step_cost(model):
    trace = run_serving(model, TINY, 2)
    # a made-up cost: 1 s per step plus 10 s per prefill
    s = latency_summary(trace, step_seconds=lambda step: 1.0 + 10.0 * step.prefilled)
    ttft = [r.ttft_s for r in s.requests]
    assert ttft[0] == 11.0 and ttft[1] == 11.0 and ttft[3] == 1.0 + 11.0  # request 3 waits a step
    assert s.requests[0].tpot_s == (11.0 + 1.0) / 2  # steps 1 (with a prefill) and 2
    assert s.seconds == 11.0 + 11.0 + 1.0 + 11.0


def test_zero_and_one_token_requests_are_explicit(model):
    s = latency_summary(run_serving(model, [(0, [1], 0), (3, [2], 0)], 2))
    assert s.n_steps == 0 and s.n_without_tokens == 2 and s.n_tokens == 0
    assert all(math.isnan(v) for by_q in s.percentiles.values() for v in by_q.values())
    assert math.isnan(s.tokens_per_step) and math.isnan(s.tokens_per_second)
    assert all(len(s.values(m)) == 0 for m in LATENCY_METRICS)
    one = latency_summary(run_serving(model, [(0, [1], 1)], 1))
    assert math.isnan(one.percentiles["tpot_steps"][50]) and one.percentiles["ttft_steps"][50] == 1.0


# ---------------------------------------------------------------- seconds, percentiles, agreement


def test_seconds_are_positive_and_agree_with_the_trace(model):
    trace = run_serving(model, TINY, 2)
    s = latency_summary(trace)
    assert s.clock == "measured" and s.seconds > 0 and s.tokens_per_second > 0
    first, last = trace.first_token_seconds(), trace.latency_seconds()
    for i, r in enumerate(s.requests):
        if r.n_tokens == 0:
            assert all(math.isnan(getattr(r, m)) for m in LATENCY_METRICS)
            continue
        assert r.ttft_s > 0 and r.e2e_s >= r.ttft_s
        assert r.ttft_s == pytest.approx(first[i]) and r.e2e_s == pytest.approx(last[i])
        if r.n_tokens > 1:
            assert r.tpot_s > 0 and r.tpot_s == pytest.approx((r.e2e_s - r.ttft_s) / (r.n_tokens - 1))
    assert s.seconds == pytest.approx(trace.seconds)


requests_strategy = st.lists(
    st.tuples(
        st.integers(0, 10),
        st.lists(st.integers(0, CFG.vocab_size - 1), min_size=1, max_size=4),
        st.integers(0, 8),
    ),
    min_size=1,
    max_size=7,
)


@settings(max_examples=25, deadline=None)
@given(
    requests=requests_strategy,
    max_batch_size=st.integers(1, 4),
    policy=st.sampled_from(["continuous", "static"]),
)
def test_percentiles_are_numpys_and_steps_match_the_records(model, requests, max_batch_size, policy):
    trace = run_serving(model, requests, max_batch_size, policy)
    s = latency_summary(trace)
    served = [r for r in trace.requests if r.tokens]
    assert [r.ttft_steps for r in s.requests if r.n_tokens] == [r.first_token_steps for r in served]
    assert [r.e2e_steps for r in s.requests if r.n_tokens] == [r.latency_steps for r in served]
    assert s.n_without_tokens == len(trace.requests) - len(served)
    for metric in LATENCY_METRICS:
        v = np.array([getattr(r, metric) for r in s.requests], dtype=float)
        v = v[~np.isnan(v)]
        for q in (50, 90, 99):
            want = float(np.percentile(v, q)) if len(v) else NAN
            assert same(s.percentiles[metric][q], want) or s.percentiles[metric][q] == pytest.approx(want)
    # every running request gains a token every step, under both policies: TPOT is one step
    assert all(r.tpot_steps == 1.0 for r in s.requests if r.n_tokens > 1)


# ---------------------------------------------------------------- what serve returns


def test_serve_returns_the_tokens_with_trace_and_latency(model):
    out = serve(model, TINY, 2)
    plain = run_serving(model, TINY, 2).outputs
    assert isinstance(out, list) and isinstance(out, ServedOutputs) and out == plain
    assert isinstance(out.trace, ServingTrace) and out.trace.policy == "continuous"
    assert_steps(out.latency, steps_of(latency_summary(out.trace)))
    static = serve_static(model, TINY, 2)
    assert static == plain and static.trace.policy == "static"
    again = pickle.loads(pickle.dumps(out))
    assert again == out and again.trace.n_steps == out.trace.n_steps
    assert serve(model, [], 2) == [] and serve(model, [], 2).latency.n_steps == 0


def test_both_backends_count_the_same_steps(model):
    torch = pytest.importorskip("torch")
    torch_model = kvtutor.TorchGPT2Model.from_numpy(model, device="cpu", dtype=torch.float64)
    a = latency_summary(run_serving(model, TINY, 2))
    b = latency_summary(run_serving(torch_model, TINY, 2))
    assert_steps(b, steps_of(a))
    assert b.seconds > 0


# ---------------------------------------------------------------- the batch-size sweep


@settings(max_examples=20, deadline=None)
@given(requests=requests_strategy)
def test_sweep_continuous_more_slots_never_cost_steps(model, requests):
    """Continuous batching admits first come, first served into any free slot. With one more slot,
    every request is admitted no later (by induction over the queue: the requests ahead of it
    finish no later, so a slot frees no later), hence finishes no later; and a step with nothing
    running under more slots has nothing running under fewer, so the steps that run a model never
    grow. TPOT stays one step. With as many slots as requests, nobody waits."""
    sizes = list(range(1, len(requests) + 2))
    rows = batch_size_sweep(model, requests, sizes)
    assert [r.max_batch_size for r in rows] == sizes
    for fewer, more in itertools.pairwise(rows):
        a, b = fewer.summary.requests, more.summary.requests
        assert all(y.ttft_steps <= x.ttft_steps for x, y in zip(a, b, strict=True) if x.n_tokens)
        assert all(y.e2e_steps <= x.e2e_steps for x, y in zip(a, b, strict=True) if x.n_tokens)
        assert more.n_steps <= fewer.n_steps and more.summary.makespan_steps <= fewer.summary.makespan_steps
        if fewer.summary.n_tokens:
            assert more.tokens_per_step >= fewer.tokens_per_step
            assert more.ttft_steps_p50 <= fewer.ttft_steps_p50
        assert same(more.tpot_steps_p50, fewer.tpot_steps_p50) and same(
            more.tpot_steps_p90, fewer.tpot_steps_p90
        )
    assert all(r.ttft_steps == 1.0 for r in rows[-1].summary.requests if r.n_tokens)


def test_sweep_static_more_slots_can_cost_steps(model):
    # static batching is not monotone: with 3 slots the first batch takes the 5-token request
    # and holds every slot until it is done, so the request arriving at step 4 starts later
    requests = [(2, [1], 2), (2, [1], 1), (2, [1], 5), (4, [1], 3)]
    rows = batch_size_sweep(model, requests, [2, 3], policy="static")
    assert [r.n_steps for r in rows] == [7, 8]
    assert [r.summary.requests[3].ttft_steps for r in rows] == [1.0, 4.0]


def test_sweep_rows_are_the_summaries_and_deterministic_in_steps(model):
    rows = batch_size_sweep(model, TINY, [2, 1])
    again = batch_size_sweep(model, TINY, (2, 1))
    step_cols = ("max_batch_size", "n_steps", "tokens_per_step", "ttft_steps_p50", "tpot_steps_p50")
    assert [[getattr(r, c) for c in step_cols] for r in rows] == [
        [getattr(r, c) for c in step_cols] for r in again
    ]
    assert [(r.max_batch_size, r.n_steps, r.ttft_steps_p50) for r in rows] == [(2, 4, 1.0), (1, 6, 3.0)]
    for r in rows:
        assert isinstance(r, BatchSweepRow) and r.tokens_per_second > 0 and r.tpot_s_p50 > 0
        p = r.summary.percentiles
        assert (r.ttft_s_p50, r.tpot_s_p50, r.tpot_s_p90) == (
            p["ttft_s"][50],
            p["tpot_s"][50],
            p["tpot_s"][90],
        )
    modelled = batch_size_sweep(model, TINY, [1, 2], step_seconds=lambda s: 0.5)
    assert [r.tokens_per_second for r in modelled] == [6 / 3.0, 6 / 2.0]


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"batch_sizes": []}, ValueError, "batch_sizes: expected at least one"),
        ({"batch_sizes": [1, 0]}, ValueError, "batch_sizes: max_batch_size: expected an int >= 1, got 0"),
        ({"batch_sizes": [1.5]}, TypeError, "batch_sizes: max_batch_size: expected an int"),
        ({"batch_sizes": [True]}, TypeError, "batch_sizes: max_batch_size: expected an int"),
        ({"batch_sizes": 4}, TypeError, "batch_sizes: expected a list of ints"),
        ({"batch_sizes": "12"}, TypeError, "batch_sizes: expected a list of ints"),
        ({"policy": "fifo"}, ValueError, "policy: expected one of \\['continuous', 'static'\\]"),
        ({"requests": [(0, [1], -1)]}, ValueError, "requests: request 0: max_new_tokens"),
        ({"model": "gpt2"}, TypeError, "model: expected a kvtutor model"),
        ({"step_seconds": 1.0}, TypeError, "step_seconds: expected None or a function"),
    ],
)
def test_sweep_errors_name_the_argument(model, kwargs, error, match):
    args = {"model": model, "requests": TINY, "batch_sizes": [1, 2], **kwargs}
    with pytest.raises(error, match=match):
        batch_size_sweep(**args)


def test_summary_errors_name_the_argument(model):
    trace = run_serving(model, TINY, 2)
    with pytest.raises(TypeError, match="trace: expected a ServingTrace"):
        latency_summary(trace.outputs)
    with pytest.raises(TypeError, match="step_seconds: expected None or a function"):
        latency_summary(trace, step_seconds=[1.0] * trace.n_steps)
    with pytest.raises(TypeError, match="step_seconds: expected a number of seconds, got str"):
        latency_summary(trace, step_seconds=lambda s: "1")
    for bad in (-1.0, NAN, math.inf):
        with pytest.raises(ValueError, match="step_seconds: expected finite seconds >= 0"):
            latency_summary(trace, step_seconds=lambda s, bad=bad: bad)
    s = latency_summary(trace)
    with pytest.raises(ValueError, match="metric: expected one of"):
        s.percentile("ttft", 50)
    with pytest.raises(ValueError, match="q: expected a number in \\[0, 100\\], got 101"):
        s.percentile("ttft_steps", 101)
    with pytest.raises(TypeError, match="q: expected a number in \\[0, 100\\], got str"):
        s.percentile("ttft_steps", "50")
    flat = s.as_dict()
    assert flat["ttft_steps_p50"] == s.percentiles["ttft_steps"][50] and flat["n_requests"] == 4
    assert all(isinstance(v, (int, float)) for v in flat.values())


# ---------------------------------------------------------------- figures


def test_latency_figures_draw_label_units_and_check_their_input(model):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kvtutor.plots import serving as serving_plots

    trace = run_serving(model, TINY, 2)
    rows = batch_size_sweep(model, TINY, [1, 2, 3, 4])
    figs = {
        "hist_s": serving_plots.plot_ttft_tpot(latency_summary(trace)),
        "hist_steps": serving_plots.plot_ttft_tpot(trace, clock="steps"),
        "curve_s": serving_plots.plot_latency_throughput(rows),
        "curve_steps": serving_plots.plot_latency_throughput(rows, clock="steps", title="sweep"),
    }
    xlabels = {name: [ax.get_xlabel() for ax in f.axes] for name, f in figs.items()}
    assert all("ms" in x for x in xlabels["hist_s"]) and all("steps" in x for x in xlabels["hist_steps"])
    assert xlabels["curve_s"] == ["throughput, tokens per second"] * 2
    assert [ax.get_ylabel() for ax in figs["curve_steps"].axes] == ["TPOT, steps per token", "TTFT, steps"]
    # 3 and 4 slots give the same run in steps: one label for both points, not two on top of each other
    labels = [t.get_text() for t in figs["curve_steps"].axes[1].texts]
    assert labels == ["B=1", "B=2", "B=3, 4"]
    for f in figs.values():
        width, height = f.get_size_inches()
        assert width == 9.0 and 3.0 <= height <= 4.0  # as plot_latencies: 9 x 3.6 inches
        plt.close(f)
    with pytest.raises(ValueError, match="clock: expected 'seconds' or 'steps', got 'minutes'"):
        serving_plots.plot_ttft_tpot(trace, clock="minutes")
    with pytest.raises(TypeError, match="run: expected a LatencySummary or a ServingTrace, got list"):
        serving_plots.plot_ttft_tpot([1.0, 2.0])
    with pytest.raises(TypeError, match="rows: expected a non-empty list of BatchSweepRow"):
        serving_plots.plot_latency_throughput([])
