"""Continuous batching: every request gets exactly the tokens it would get alone, the scheduler
keeps its promises (slots, arrivals, one token per step), and bad requests are refused."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvtutor
from kvtutor.serving.loop import check_requests, run_serving, serve, serve_static

torch = pytest.importorskip("torch")

CFG = kvtutor.GPT2Config(vocab_size=40, d_model=16, n_heads=4, n_layers=2, max_seq_len=20, n_kv_heads=2)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def numpy_model():
    model = kvtutor.GPT2Model.random(CFG, seed=3)
    for arr in model.weights.arrays():  # varied, non-repetitive greedy continuations
        if arr.ndim == 2:
            arr *= 20.0
    return model


@pytest.fixture(scope="module")
def torch_model(numpy_model):
    # float64: batched and single-row matmuls may round differently; in float64 that never flips an argmax
    return kvtutor.TorchGPT2Model.from_numpy(numpy_model, device="cpu", dtype=torch.float64)


def alone(numpy_model, requests):
    return [numpy_model.generate(prompt, n) for _, prompt, n in requests]


requests_strategy = st.lists(
    st.tuples(
        st.integers(0, 12),
        st.lists(st.integers(0, CFG.vocab_size - 1), min_size=1, max_size=8),
        st.integers(0, 10),
    ),
    min_size=1,
    max_size=9,
)


@settings(max_examples=40, deadline=None)
@given(
    requests=requests_strategy,
    max_batch_size=st.integers(1, 4),
    policy=st.sampled_from(["continuous", "static"]),
)
def test_every_request_gets_the_tokens_it_gets_alone_numpy(numpy_model, requests, max_batch_size, policy):
    trace = run_serving(numpy_model, requests, max_batch_size, policy)
    assert trace.outputs == alone(numpy_model, requests)
    check_trace_invariants(trace, requests, max_batch_size)


@settings(max_examples=40, deadline=None)
@given(
    requests=requests_strategy,
    max_batch_size=st.integers(1, 4),
    policy=st.sampled_from(["continuous", "static"]),
)
def test_every_request_gets_the_tokens_it_gets_alone_torch(
    numpy_model, torch_model, requests, max_batch_size, policy
):
    """One batched decode step over a ragged cache gives each row its own tokens."""
    trace = run_serving(torch_model, requests, max_batch_size, policy)
    assert trace.outputs == alone(numpy_model, requests)
    check_trace_invariants(trace, requests, max_batch_size)


def test_torch_float32_matches_torch_alone(numpy_model):
    model32 = kvtutor.TorchGPT2Model.from_numpy(numpy_model, device="cpu", dtype=torch.float32)
    rng = np.random.default_rng(5)
    requests = [
        (int(rng.integers(0, 6)), rng.integers(0, 40, int(rng.integers(1, 9))).tolist(), 8) for _ in range(10)
    ]
    want = [model32.generate(torch.tensor([p]), n)[0].tolist() for _, p, n in requests]
    assert serve(model32, requests, 4) == want


def check_trace_invariants(trace, requests, max_batch_size):
    records = trace.requests
    assert trace.n_tokens == sum(n for _, _, n in requests)
    for r, (arrival, _, n) in zip(records, requests, strict=True):
        assert len(r.tokens) == n
        if n:
            assert arrival <= r.admit_step <= r.finish_step
            assert r.latency_steps == r.finish_step - arrival + 1
            # a running request gains exactly one token per step, from its prefill on
            assert r.finish_step - r.admit_step + 1 == n
    for s in trace.steps:
        assert 0 < s.held <= max_batch_size
        assert s.tokens == sum(1 for r in records if r.tokens and r.admit_step <= s.step <= r.finish_step)
        # the step's work: each prompt admitted in it, whole, and one decode per other running request
        admitted = sorted(
            (r for r in records if r.tokens and r.admit_step == s.step), key=lambda r: r.arrival_step
        )
        assert s.chunks == tuple((len(r.prompt_ids), 0) for r in admitted) and s.prefilled == len(admitted)
        assert len(s.contexts) == s.decoded and s.batched_tokens == s.prompt_tokens + s.decoded
        assert sorted(s.contexts) == sorted(
            len(r.prompt_ids) + s.step - r.admit_step
            for r in records
            if r.admit_step < s.step <= r.finish_step
        )
    for r in records:  # whole prompts: a request takes its slot in the step that prefills it
        assert r.start_step == r.admit_step and r.chunks == (
            [(r.admit_step, len(r.prompt_ids))] if r.tokens else []
        )
    if trace.policy == "continuous":
        # work conserving: an arrived request never waits while a slot is free
        for s in trace.steps:
            waiting = [r for r in records if r.tokens and r.arrival_step <= s.step < r.admit_step]
            if waiting:
                assert s.held == max_batch_size
    else:
        # static: a batch is admitted together and leaves together, when its longest request is done
        batches: dict[int, list] = {}
        for r in records:
            if r.tokens:
                batches.setdefault(r.admit_step, []).append(r)
        for admit, batch in batches.items():
            end = max(r.finish_step for r in batch)
            for s in trace.steps:
                if admit <= s.step <= end:
                    assert s.held == len(batch)


def test_serve_and_serve_static_give_the_same_tokens(numpy_model):
    requests = [(0, [1, 2, 3], 5), (0, [4], 9), (1, [5, 6], 2), (2, [7, 8, 9, 10], 6), (9, [11], 3)]
    assert (
        serve(numpy_model, requests, 2)
        == serve_static(numpy_model, requests, 2)
        == alone(numpy_model, requests)
    )


def test_continuous_batching_fills_the_slots_static_batching_leaves_idle(numpy_model):
    """Two slots, one long and many short requests arriving together: static batching waits for the
    long one each time; continuous batching refills the short one's slot at once."""
    requests = [(0, [1], 10)] + [(0, [2 + i], 2) for i in range(5)]
    cont = run_serving(numpy_model, requests, 2, "continuous")
    stat = run_serving(numpy_model, requests, 2, "static")
    assert cont.n_steps == 10  # the long request sets the pace; the short ones fit beside it
    assert stat.n_steps == 10 + 2 + 2  # the long one with a short one, then the other four in pairs
    assert cont.tokens_per_step > stat.tokens_per_step
    assert [r.latency_steps for r in cont.requests] == [10, 2, 4, 6, 8, 10]
    assert [r.latency_steps for r in stat.requests] == [10, 2, 12, 12, 14, 14]
    assert [s.held for s in stat.steps[:10]] == [2] * 10  # the short request's slot stays held


def test_idle_stretches_are_skipped_and_zero_token_requests_finish_on_arrival(numpy_model):
    requests = [(3, [1, 2], 2), (40, [3], 1), (5, [4], 0)]
    trace = run_serving(numpy_model, requests, 2)
    assert [s.step for s in trace.steps] == [3, 4, 40]
    assert trace.outputs == [alone(numpy_model, requests[:1])[0], numpy_model.generate([3], 1), []]
    assert trace.requests[2].latency_steps == 0 and trace.requests[2].first_token_steps == 0
    assert trace.makespan_steps == 38
    assert trace.seconds > 0 and trace.tokens_per_second > 0
    latency, first = trace.latency_seconds(), trace.first_token_seconds()
    assert latency[2] == first[2] == 0.0
    assert 0 < first[0] <= latency[0]


def test_empty_request_list(numpy_model):
    assert serve(numpy_model, [], 3) == []
    trace = run_serving(numpy_model, [(0, [1], 0)], 1)
    assert trace.outputs == [[]] and trace.n_steps == 0 and trace.makespan_steps == 0


BAD = [
    (
        {"requests": "abc"},
        TypeError,
        "requests: expected a list of \\(arrival_step, prompt_ids, max_new_tokens\\)",
    ),
    (
        {"requests": [(0, [1], 2), (0, [1])]},
        ValueError,
        "requests: request 1: expected a tuple \\(arrival_step",
    ),
    (
        {"requests": [(-1, [1], 2)]},
        ValueError,
        "requests: request 0: arrival_step: expected an int >= 0, got -1",
    ),
    (
        {"requests": [(0.5, [1], 2)]},
        TypeError,
        "requests: request 0: arrival_step: expected an int, got float",
    ),
    ({"requests": [(0, [], 2)]}, ValueError, "requests: request 0: prompt_ids: expected at least one token"),
    (
        {"requests": [(0, [1, 99], 2)]},
        ValueError,
        "requests: request 0: prompt_ids: expected token ids in \\[0, 40\\)",
    ),
    (
        {"requests": [(0, [1], -2)]},
        ValueError,
        "requests: request 0: max_new_tokens: expected an int >= 0, got -2",
    ),
    (
        {"requests": [(0, [1], True)]},
        TypeError,
        "requests: request 0: max_new_tokens: expected an int, got bool",
    ),
    (
        {"requests": [(0, [1], 2), (1, [1] * 15, 7)]},
        ValueError,
        "requests: request 1: prompt of 15 \\+ 7 new tokens needs 21 positions .*more than max_seq_len 20",
    ),
    (
        {"requests": [(0, "The cat", 2)]},
        TypeError,
        "requests: request 0: prompt_ids: expected a sequence of int token ids, got str",
    ),
    ({"max_step_tokens": 0}, ValueError, "max_step_tokens: expected an int >= 2, got 0"),
    ({"max_batch_size": 0}, ValueError, "max_batch_size: expected an int >= 1, got 0"),
    ({"max_batch_size": 2.0}, TypeError, "max_batch_size: expected an int, got float"),
    ({"policy": "greedy"}, ValueError, "policy: expected one of \\['continuous', 'static'\\], got 'greedy'"),
    ({"policy": "Continuous"}, ValueError, "policy: expected one of .*, got 'Continuous'"),
    ({"policy": None}, TypeError, "policy: expected one of .*, got NoneType"),
    ({"model": "gpt2"}, TypeError, "model: expected a kvtutor model, got str"),
]


@pytest.mark.parametrize(("change", "exc", "match"), BAD)
def test_bad_serving_input_is_rejected(numpy_model, change, exc, match):
    args = {"model": numpy_model, "requests": [(0, [1, 2], 3)], "max_batch_size": 2, "policy": "continuous"}
    args |= change
    with pytest.raises(exc, match=match):
        run_serving(**args)


def test_check_requests_returns_fresh_records():
    records = check_requests([(2, np.array([1, 2]), 3)], CFG)
    assert records[0].arrival_step == 2 and records[0].prompt_ids == [1, 2] and records[0].max_new_tokens == 3
    assert records[0].tokens == [] and records[0].admit_step == -1


# ---------------------------------------------------------------- the chapters' figures


def test_serving_figures_draw_and_check_their_input(numpy_model):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kvtutor.plots import serving as serving_plots

    requests = [(0, [1], 6), (0, [2], 2), (1, [3, 4], 3), (4, [5], 0)]
    traces = [run_serving(numpy_model, requests, 2, p) for p in ("static", "continuous")]
    figs = [
        serving_plots.plot_schedules(traces),
        serving_plots.plot_latencies(traces),
        serving_plots.plot_decode_throughput([1, 2, 4], [10.0, 19.0, 30.0]),
        serving_plots.plot_tokens_per_step([1, 2], {"a": [1.5, 1.8]}, {"a": [1.6, 1.9]}),
        serving_plots.plot_speedups([1, 2], {"a": [0.9, 0.8], "b": [1.1, 1.2]}, {"a": [1.0, 0.9]}),
        serving_plots.plot_distributions([0.5, 0.5], {"s": [4, 6]}, labels=["x", "y"]),
        serving_plots.plot_batch_gain({"a": ([1, 2, 4], [10.0, 19.0, 30.0]), "b": ([1, 8], [1.0, 7.0])}),
        serving_plots.plot_speedup_vs_acceptance([0.3, 0.9], [0.6, 1.8], 4, 0.1, 1.8),
        serving_plots.plot_token_times(traces, ["static", "continuous"], lambda s: 1.0 + s.batched_tokens),
        serving_plots.plot_token_times(traces[1:], ["measured"]),
    ]
    assert all(len(f.axes) >= 1 for f in figs)
    assert len(figs[0].axes) == 2  # one timeline per trace
    assert len(figs[6].axes[0].get_lines()) == 3  # two machines and the ideal line
    assert len(figs[7].axes[0].get_lines()) == 4  # both curves, the points, plain decoding
    assert [ax.get_title(loc="left") for ax in figs[8].axes] == ["static", "continuous"]
    assert "modelled" in figs[8].axes[-1].get_xlabel() and "measured" in figs[9].axes[-1].get_xlabel()
    for f in figs:
        plt.close(f)
    with pytest.raises(TypeError, match="traces: expected a non-empty list of ServingTrace"):
        serving_plots.plot_schedules([])
    with pytest.raises(
        ValueError, match="tokens_per_s_B: expected a 1-D array of 3 values, got shape \\[2\\]"
    ):
        serving_plots.plot_decode_throughput([1, 2, 4], [1.0, 2.0])
    with pytest.raises(ValueError, match="theory: expected labels among \\['a'\\], got \\['z'\\]"):
        serving_plots.plot_tokens_per_step([1, 2], {"a": [1, 2]}, {"z": [1, 2]})
    with pytest.raises(TypeError, match="measured: expected a non-empty dict"):
        serving_plots.plot_speedups([1, 2], [1, 2], {})
    with pytest.raises(ValueError, match="labels: expected 2 labels, got 1"):
        serving_plots.plot_distributions([0.5, 0.5], {"s": [1, 1]}, labels=["x"])
    with pytest.raises(ValueError, match="measured_N: expected a 1-D array of 2 values, got shape \\[1\\]"):
        serving_plots.plot_speedup_vs_acceptance([0.3, 0.9], [1.0], 4, 0.1)
    with pytest.raises(ValueError, match="series\\['a'\\] tokens/s: expected a 1-D array of 2 values"):
        serving_plots.plot_batch_gain({"a": ([1, 2], [1.0])})
    with pytest.raises(TypeError, match="series: expected a non-empty dict"):
        serving_plots.plot_batch_gain({})
    with pytest.raises(ValueError, match="labels: expected 2 labels, got 1"):
        serving_plots.plot_token_times(traces, ["x"])
    with pytest.raises(TypeError, match="step_seconds: expected None or a function"):
        serving_plots.plot_token_times(traces, ["x", "y"], 1.0)


# ---------------------------------------------------------------- issue 12: lengths and slots


def test_a_prompt_of_m_minus_1_and_two_new_tokens_fits(numpy_model):
    """M positions suffice: the last new token is never fed back (this used to be refused)."""
    prompt = list(range(1, CFG.max_seq_len))  # M - 1 tokens
    want = numpy_model.generate(prompt, 2)
    assert len(want) == 2
    assert serve(numpy_model, [(0, prompt, 2), (0, [3], CFG.max_seq_len)], 2) == [
        want,
        numpy_model.generate([3], CFG.max_seq_len),
    ]
    with pytest.raises(ValueError, match=r"request 0: prompt of 19 \+ 3 new tokens needs 21 positions"):
        serve(numpy_model, [(0, prompt, 3)], 2)


def test_one_request_takes_one_slot_however_large_the_batch(numpy_model, monkeypatch):
    """max_batch_size=10**6 used to allocate a million caches (8-20 s, 1.8 GB) for one request."""
    from kvtutor.serving import backends

    made = []
    original = backends.LoopedSlots.__init__

    def counting(self, model, n_slots, capacity):
        made.append((n_slots, capacity))
        assert n_slots <= 1000, "one cache per slot: this would take seconds and gigabytes"
        original(self, model, n_slots, capacity)

    monkeypatch.setattr(backends.LoopedSlots, "__init__", counting)
    trace = run_serving(numpy_model, [(0, [1, 2, 3], 4)], max_batch_size=10**6)
    assert made == [(1, 3 + 4 - 1)]  # one slot, sized for the positions the request uses
    assert trace.max_batch_size == 10**6 and trace.outputs == [numpy_model.generate([1, 2, 3], 4)]
    made.clear()
    run_serving(numpy_model, [(0, [1], 2), (3, [2], 2), (5, [1], 0)], max_batch_size=50, policy="static")
    assert made == [(2, 2)]  # a request of 0 tokens holds no slot
