"""Bad input at the edges of serving: one scheduler step (``serve_step``, ``run_chunks``,
``take_chunks``), the trace replay (``random_trace``, ``shared_prefix_trace``, ``simulate_trace``)
and speculative decoding's drafts. Each bad call is refused with an error that names the argument,
and leaves the slots, the queue and the caches as they were; a draft serves run after run."""

from __future__ import annotations

import copy
from collections import deque
from dataclasses import asdict

import numpy as np
import pytest
from conftest import assert_same_state, cache_state

import kvtutor
from kvtutor.serving import speculative as spec
from kvtutor.serving.backends import batch_slots
from kvtutor.serving.loop import RequestRecord, check_requests, run_chunks, serve_step, take_chunks
from kvtutor.serving.paged_trace import Request, random_trace, shared_prefix_trace, simulate_trace

CFG = kvtutor.GPT2Config(vocab_size=40, d_model=16, n_heads=4, n_layers=2, max_seq_len=24)


@pytest.fixture(scope="module")
def model():
    return kvtutor.GPT2Model.random(CFG, seed=2, dtype=np.float64)


# ---------------------------------------------------------------- one scheduler step


def mid_run(model):
    """Two slots half-way through a run with a budget of 4 tokens a step: slot 0 decoding, slot 1
    part-way through its prompt, one request waiting -> (engine, running, waiting)."""
    engine = batch_slots(model, 2, 16)
    records = check_requests([(0, [1, 2], 5), (0, [3, 4, 5, 6, 7, 8], 3), (5, [9, 10], 2)], CFG)
    running, waiting = {}, deque(records)
    for step in range(2):
        serve_step(engine, running, waiting, 2, step, "continuous", 4)
    assert running[0].tokens and not running[1].tokens and 0 < running[1].n_prefilled < 6
    return engine, running, waiting


def state(engine, running, waiting):
    """Everything a step may change: the records (copied) and every slot's cache."""
    return (
        {s: asdict(r) for s, r in running.items()},
        [asdict(r) for r in waiting],
        [cache_state(c) for c in engine.caches],
    )


def assert_unchanged(before, after):
    assert before[0] == after[0] and before[1] == after[1]
    for a, b in zip(before[2], after[2], strict=True):
        assert_same_state(a, b)


def _args(*parts, **change):
    engine, running, waiting = parts
    args = {"engine": engine, "running": running, "waiting": waiting, "n_slots": 2, "step": 2,
            "policy": "continuous", "max_step_tokens": 4}  # fmt: skip
    return args | change


BAD_STEPS = [
    ({"policy": "Continuous"}, ValueError, r"^policy: expected one of \['continuous', 'static'\], got 'C"),
    ({"policy": "STATIC"}, ValueError, r"^policy: expected one of .*got 'STATIC'"),
    ({"policy": 1}, TypeError, r"^policy: expected one of .*got int 1"),
    ({"max_step_tokens": 0}, ValueError, r"^max_step_tokens: expected an int >= 2, got 0"),
    ({"max_step_tokens": 1}, ValueError, r"^max_step_tokens: .*a full batch's decodes and one prompt token"),
    ({"max_step_tokens": 4.0}, TypeError, r"^max_step_tokens: expected an int, got float"),
    ({"n_slots": 3}, ValueError, r"^n_slots: expected 1 <= n_slots <= 2, got 3 \(the engine has 2 slots\)"),
    ({"n_slots": 0}, ValueError, r"^n_slots: expected 1 <= n_slots <= 2, got 0"),
    ({"n_slots": 1}, ValueError, r"^running: expected slots in \[0, 1\), got 1"),
    ({"step": -1}, ValueError, r"^step: expected an int >= 0, got -1"),
    ({"step": 2.5}, TypeError, r"^step: expected an int, got float"),
    ({"step": 1}, ValueError, r"^step: expected a step after the last one .* saw \(1\), got 1"),
    ({"engine": "slots"}, TypeError, r"^engine: expected batch slots from batch_slots\(model, "),
    ({"waiting": []}, TypeError, r"^waiting: expected a deque of RequestRecord in arrival order, got list"),
    ({"running": [1]}, TypeError, r"^running: expected a dict slot -> RequestRecord, got list"),
]  # fmt: skip


@pytest.mark.parametrize(("change", "exc", "match"), BAD_STEPS)
def test_a_bad_step_argument_is_refused_by_name_and_changes_nothing(model, change, exc, match):
    engine, running, waiting = mid_run(model)
    before = state(engine, running, waiting)
    with pytest.raises(exc, match=match):
        serve_step(**_args(engine, running, waiting, **change))
    assert_unchanged(before, state(engine, running, waiting))


def _break(kind):
    """A change to the running requests or the queue that makes them impossible."""

    def change(running, waiting):
        if kind == "slot says another":
            running[0].slot = 1
        elif kind == "same request twice":
            running[1] = running[0]
        elif kind == "cache out of step":
            running[0].tokens.append(5)  # a token the slot's cache never ran
        elif kind == "chunks beyond the prompt":
            running[1].chunks.append((1, 9))
        elif kind == "token outside the vocabulary":
            waiting[0].prompt_ids[0] = 40
        elif kind == "nothing to generate":
            waiting[0].max_new_tokens = 0
        elif kind == "too long for a slot":
            waiting[0].prompt_ids = [1] * 16
        elif kind == "already started":
            waiting[0].chunks.append((0, 1))
        elif kind == "running and waiting":
            waiting.append(running[0])
        elif kind == "out of arrival order":
            waiting.appendleft(RequestRecord(9, [1, 2], 2))
        elif kind == "not a record":
            waiting.append((0, [1, 2], 2))
        elif kind == "fractional tokens":
            waiting[0].max_new_tokens = 2.5

    return change


BROKEN = [
    ("slot says another", ValueError, r"^running: slot 0: expected its request, .* says slot 1"),
    ("same request twice", ValueError, r"^running: slot 1: expected its request, in no other slot"),
    ("cache out of step", ValueError, r"^running: slot 0: expected the slot to hold the \d+ positions"),
    ("chunks beyond the prompt", ValueError, r"^running: slot 1: chunks: expected at most its 6 prompt"),
    ("token outside the vocabulary", ValueError, r"^waiting: request 0: prompt_ids: .* in \[0, 40\)"),
    ("nothing to generate", ValueError, r"^waiting: request 0: max_new_tokens: expected an int >= 1, got 0"),
    ("too long for a slot", ValueError, r"^waiting: request 0: prompt of 16 \+ 2 .* capacity 16"),
    ("already started", ValueError, r"^waiting: request 0: expected a request that has not started"),
    ("running and waiting", ValueError, r"^waiting: request 1: expected a request that has not st"),
    ("out of arrival order", ValueError, r"^waiting: request 1: expected the queue in arrival.*5 after 9"),
    ("not a record", TypeError, r"^waiting: request 1: expected a RequestRecord, got tuple"),
    ("fractional tokens", TypeError, r"^waiting: request 0: max_new_tokens: expected an int, got float 2.5"),
]  # fmt: skip


@pytest.mark.parametrize(("kind", "exc", "match"), BROKEN)
def test_impossible_slots_or_queue_are_refused_before_anything_runs(model, kind, exc, match):
    engine, running, waiting = mid_run(model)
    _break(kind)(running, waiting)
    before = (copy.deepcopy(running), copy.deepcopy(waiting), [cache_state(c) for c in engine.caches])
    with pytest.raises(exc, match=match):
        serve_step(**_args(engine, running, waiting))
    assert running == before[0] and list(waiting) == list(before[1])
    for a, c in zip(before[2], engine.caches, strict=True):
        assert_same_state(a, cache_state(c))


def test_a_capitalised_policy_no_longer_runs_as_static_batching(model):
    """The silent wrong answer the check stops: 'Continuous' was not 'continuous', so an arrived
    request waited beside a free slot, as under static batching."""
    engine = batch_slots(model, 2, 16)
    running, waiting = {}, deque(check_requests([(0, [1, 2], 4), (1, [3, 4], 2)], CFG))
    serve_step(engine, running, waiting, 2, 0, "continuous", None)
    with pytest.raises(ValueError, match="^policy:"):
        serve_step(engine, running, waiting, 2, 1, "Continuous", None)
    serve_step(engine, running, waiting, 2, 1, "continuous", None)
    assert sorted(running) == [0, 1] and not waiting  # it took the free slot


BAD_CHUNKS = [
    ([(1, 10)], ValueError, r"^chunks: chunk 0: expected at most the \d prompt .* got 10"),
    ([(1, 1), (1, 6)], ValueError, r"^chunks: chunk 1: expected at most the \d prompt tokens"),
    ([(3, 1)], ValueError, r"^chunks: chunk 0: expected the slot of a running request \[0, 1\], got 3"),
    ([(1, 0)], ValueError, r"^chunks: chunk 0: n_new: expected an int >= 1, got 0"),
    ([(1, 1.5)], TypeError, r"^chunks: chunk 0: n_new: expected an int, got float"),
    ([(1,)], TypeError, r"^chunks: chunk 0: expected a pair \(slot, n_new\), got \(1,\)"),
    ([([1], 1)], TypeError, r"^chunks: chunk 0: slot: expected an int, got list"),
    ({1: 2}, TypeError, r"^chunks: expected a list of \(slot, n_new\), got dict"),
]  # fmt: skip


@pytest.mark.parametrize(("chunks", "exc", "match"), BAD_CHUNKS)
def test_a_bad_chunk_is_refused_before_any_chunk_runs(model, chunks, exc, match):
    engine, running, waiting = mid_run(model)
    before = state(engine, running, waiting)
    with pytest.raises(exc, match=match):
        run_chunks(engine, running, chunks, 2)
    assert_unchanged(before, state(engine, running, waiting))


def test_run_chunks_for_an_empty_slot_names_the_slot_not_a_key_error(model):
    engine, running, waiting = mid_run(model)
    del running[1]
    with pytest.raises(
        ValueError, match=r"^chunks: chunk 0: expected the slot of a running request \[0\], got 1"
    ):
        run_chunks(engine, running, [(1, 1)], 2)


def test_a_good_chunk_still_runs_and_its_last_one_gives_the_first_token(model):
    engine, running, waiting = mid_run(model)
    left = 6 - running[1].n_prefilled
    work, n_first = run_chunks(engine, running, [(1, left)], 2)
    assert work == ((left, 6 - left),) and n_first == 1 and len(running[1].tokens) == 1


@pytest.mark.parametrize(
    ("args", "exc", "match"),
    [
        (("running", 0, None), TypeError, r"^running: expected a dict"),
        (({}, 1, None), ValueError, r"^n_decoding: expected 0 <= n_decoding <= 0, got 1"),
        (({}, 0, -1), ValueError, r"^max_step_tokens: expected an int >= 0, got -1"),
        (({0: "r"}, 0, None), TypeError, r"^running: slot 0: expected a RequestRecord, got str"),
    ],
)
def test_take_chunks_refuses_what_it_cannot_plan(args, exc, match):
    with pytest.raises(exc, match=match):
        take_chunks(*args)


def test_the_checks_leave_the_displayed_mechanism_as_the_book_shows_it():
    from kvtutor.book.display import source

    for fn in (serve_step, run_chunks, take_chunks):
        assert fn.__wrapped__.__name__ == fn.__name__ and fn.__doc__ == fn.__wrapped__.__doc__
        shown = source(fn)
        assert shown.startswith(f"def {fn.__name__}(") and "check" not in shown


# ---------------------------------------------------------------- traces and their replay


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"mean_output": 0}, ValueError, r"^mean_output: expected a finite number >= 1, got 0"),
        ({"mean_output": 0.5}, ValueError, r"^mean_output: expected a finite number >= 1"),
        ({"mean_gap": float("nan")}, ValueError, r"^mean_gap: expected a finite number >= 0, got nan"),
        ({"mean_gap": float("inf")}, ValueError, r"^mean_gap: expected a finite number >= 0, got inf"),
        ({"mean_gap": "1"}, TypeError, r"^mean_gap: expected a number, got str"),
        ({"seed": -1}, ValueError, r"^seed: expected 0 <= seed <= \d+, got -1"),
        ({"seed": 1.0}, TypeError, r"^seed: expected an int, got float"),
    ],
)
def test_random_trace_refuses_bad_numbers_by_name(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        random_trace(5, 64, **kwargs)


def test_random_trace_takes_numpy_numbers_and_a_short_max_seq_len():
    assert random_trace(5, 64, seed=np.int64(3), mean_gap=np.float32(2)) == random_trace(5, 64, 3, 2.0)
    assert all(1 <= r.output_len and r.prompt_len + r.output_len <= 4 for r in random_trace(20, 4))


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"seed": -2}, ValueError, r"^seed: expected 0 <= seed"),
        ({"mean_suffix": float("inf")}, ValueError, r"^mean_suffix: expected a finite number >= 1"),
        ({"mean_output": True}, TypeError, r"^mean_output: expected a number, got bool"),
    ],
)
def test_shared_prefix_trace_refuses_bad_numbers_by_name(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        shared_prefix_trace(4, 128, 40, **kwargs)


BAD_TRACES = [
    ([Request(0, 3, 2.5)], TypeError, r"^trace: request 0: output_len: expected an int, got float 2.5"),
    ([Request(0, 3.0, 2)], TypeError, r"^trace: request 0: prompt_len: expected an int, got float"),
    ([Request(-1, 3, 2)], ValueError, r"^trace: request 0: arrival: expected an int >= 0, got -1"),
    ([Request(0, 3, 0)], ValueError, r"^trace: request 0: output_len: expected an int >= 1, got 0"),
    ([Request(0, 3, 2, "abc")], TypeError, r"^trace: request 0: prompt_ids: expected a tuple .*got str"),
    ([Request(0, 2, 2, (1.0, 2.0))], TypeError, r"^trace: request 0: prompt_ids: expected int token ids"),
    ([Request(0, 2, 2, (1, -2))], ValueError, r"^trace: request 0: prompt_ids: expected token ids in \[0, "),
    (Request(0, 3, 2), TypeError, r"^trace: expected a list of Request, got Request"),
]  # fmt: skip


@pytest.mark.parametrize(("trace", "exc", "match"), BAD_TRACES)
def test_a_bad_request_of_a_trace_is_refused_never_rounded(trace, exc, match):
    with pytest.raises(exc, match=match):
        simulate_trace(trace, "paged", 64, 16, block_size=4)


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"model": "gpt2"}, TypeError, r"^model: expected None or a NumPy model \(GPT2Model, LlamaModel"),
        ({"seed": -1}, ValueError, r"^seed: expected 0 <= seed"),
        ({"max_steps": 0}, ValueError, r"^max_steps: expected an int >= 1, got 0"),
        ({"scheme": "Paged"}, ValueError, r"^scheme: expected one of \['contiguous', 'paged'\], got 'Paged'"),
    ],
)
def test_simulate_trace_refuses_bad_arguments_by_name(kwargs, exc, match):
    args = {"trace": [Request(0, 3, 2)], "scheme": "paged", "capacity_tokens": 64, "max_seq_len": 16} | kwargs
    with pytest.raises(exc, match=match):
        simulate_trace(**args)


def test_simulate_trace_refuses_a_torch_model_by_name(model):
    torch = pytest.importorskip("torch")
    torch_model = kvtutor.TorchGPT2Model.from_numpy(model, device="cpu", dtype=torch.float64)
    with pytest.raises(TypeError, match=r"^model: expected None or a NumPy model .*got TorchGPT2Model"):
        simulate_trace([Request(0, 3, 2)], "paged", 64, 16, model=torch_model)


# ---------------------------------------------------------------- drafts


class FixedDraft:
    """A user's draft that always guesses tokens 1, 2, ... with the rows ``rows(V)`` gives."""

    def __init__(self, rows):
        self.rows = rows

    def propose(self, seq, k, temperature, rng):
        return list(range(1, k + 1)), (self.rows(CFG.vocab_size)[:k] if k else None)

    def rollback(self, length):
        pass


def uniform(v):
    return np.full((8, v), 1.0 / v)


BAD_DRAFTS = [
    (lambda v: np.log(uniform(v)), r"^draft: expected probabilities .* row 0, .* sums to -147\.5"),
    (lambda v: 2 * uniform(v), r"^draft: expected probabilities .* sums to 2"),
    (lambda v: np.where(np.arange(v) == 3, np.nan, uniform(v)), r"^draft: expected probabilities"),
    (lambda v: uniform(v) + np.where(np.arange(v) == 0, -0.5, 0.5 / (v - 1)), r"^draft: .*entry -0\.475"),
    (lambda v: np.eye(v)[[0] * 8], r"^draft: expected draft token 0 \(1\) to have a probability > 0, got 0"),
]  # fmt: skip


@pytest.mark.parametrize(("rows", "match"), BAD_DRAFTS)
def test_a_draft_that_does_not_return_probabilities_is_refused(model, rows, match):
    cache = model.new_cache()
    with pytest.raises(ValueError, match=match):
        spec.speculative_run(model, FixedDraft(rows), [1, 2, 3], 6, k=3, temperature=1.0, seed=0, cache=cache)
    assert len(cache) == 0  # left empty, as it came


def test_a_proper_user_draft_is_still_used(model):
    result = spec.speculative_run(model, FixedDraft(uniform), [1, 2, 3], 6, k=3, temperature=1.0, seed=0)
    assert len(result.tokens) == 6 and sum(result.proposed) > 0


def test_a_reused_model_draft_gives_what_a_fresh_one_gives_and_counts_its_own_run(model):
    draft_model = spec.layer_cut_draft(model, 1)
    reused = spec.ModelDraft(draft_model)
    runs = [spec.speculative_run(model, reused, p, 8, k=3) for p in ([1, 2, 3], [4, 5], [1, 2, 3])]
    fresh = [
        spec.speculative_run(model, spec.ModelDraft(draft_model), p, 8, k=3) for p in ([1, 2, 3], [4, 5])
    ]
    assert [r.tokens for r in runs] == [fresh[0].tokens, fresh[1].tokens, fresh[0].tokens]
    assert [r.draft_calls for r in runs] == [fresh[0].draft_calls, fresh[1].draft_calls, fresh[0].draft_calls]
    assert runs[0].draft_calls == sum(runs[0].proposed) > 0  # one draft step per guess, this run only
    assert runs[0].tokens == model.generate([1, 2, 3], 8)


def test_a_reused_coin_draft_flips_the_same_coins_as_a_fresh_one(model):
    cut = spec.layer_cut_draft(model, 1)
    reference = [1, 2, 3, *model.generate([1, 2, 3], 10)]
    coin = spec.CoinDraft(cut, reference, 0.6, seed=4)
    first, again = (spec.speculative_run(model, coin, [1, 2, 3], 10, k=2) for _ in range(2))
    new = spec.speculative_run(model, spec.CoinDraft(cut, reference, 0.6, seed=4), [1, 2, 3], 10, k=2)
    assert first.tokens == again.tokens == new.tokens == reference[3:]
    assert first.accepted == again.accepted == new.accepted
    assert first.draft_calls == again.draft_calls == new.draft_calls


def test_a_refused_call_does_not_reset_the_draft(model):
    draft = spec.ModelDraft(spec.layer_cut_draft(model, 1))
    spec.speculative_run(model, draft, [1, 2, 3], 5, k=2)
    calls, held = draft.calls, len(draft.cache)
    with pytest.raises(ValueError, match="^seed:"):
        spec.speculative_run(model, draft, [1, 2, 3], 5, k=2, seed=-1)
    assert (draft.calls, len(draft.cache)) == (calls, held)


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"seed": -1}, ValueError, r"^seed: expected 0 <= seed"),
        ({"seed": 1.5}, TypeError, r"^seed: expected an int, got float"),
        ({"a": np.float64(0.5), "seed": -3}, ValueError, r"^seed: expected 0 <= seed"),
    ],
)
def test_coin_draft_seed_is_checked_by_name(model, kwargs, exc, match):
    args = {"a": 0.5} | kwargs
    with pytest.raises(exc, match=match):
        spec.CoinDraft(spec.layer_cut_draft(model, 1), [1, 2], **args)


def _pq():
    rng = np.random.default_rng(0)
    return rng.dirichlet(np.ones(6), 3), rng.dirichlet(np.ones(6), 2)


@pytest.mark.parametrize(
    ("change", "exc", "match"),
    [
        (
            {"q_KV": "log"},
            ValueError,
            r"^q_KV: expected probabilities \(finite, >= 0, summing to 1\) in row 0",
        ),
        (
            {"p_TV": "log"},
            ValueError,
            r"^p_TV: expected probabilities \(finite, >= 0, summing to 1\) in row 0",
        ),
        (
            {"q_KV": "zero"},
            ValueError,
            r"^q_KV: expected draft token 1 \(4\) to have a probability > 0, got 0",
        ),
        (
            {"q_KV": "short"},
            ValueError,
            r"^q_KV: expected probabilities \[k=2, V=6\] or None, got shape \[1, 6\]",
        ),
        ({"p_TV": "short"}, ValueError, r"^p_TV: expected k \+ 1 = 3 rows for 2 draft tokens, got 2"),
        ({"p_TV": "ints"}, TypeError, r"^p_TV: expected floating probabilities \[k\+1, V\], got dtype int64"),
        ({"draft_tokens": [1, 6]}, ValueError, r"^draft_tokens: expected a token id in \[0, 6\), got 6"),
        ({"draft_tokens": "ab"}, TypeError, r"^draft_tokens: expected a list of token ids, got str"),
        ({"rng": 0}, TypeError, r"^rng: expected a NumPy Generator \(np.random.default_rng\), got int"),
    ],
)
def test_verify_draft_refuses_what_is_not_a_distribution_by_name(change, exc, match):
    p_TV, q_KV = _pq()
    args = {"p_TV": p_TV, "q_KV": q_KV, "draft_tokens": [2, 4], "rng": np.random.default_rng(1)}
    made = {
        "log": lambda x: np.log(x),
        "zero": lambda x: np.where(np.arange(6) == 4, 0.0, x / (1 - x[:, 4:5])),
        "short": lambda x: x[:-1] if len(x) == 2 else x[:2],
        "ints": lambda x: (x > 0.2).astype(np.int64),
    }
    for name, value in change.items():
        args[name] = made[value](args[name]) if isinstance(value, str) and value in made else value
    with pytest.raises(exc, match=match):
        spec.verify_draft(**args)
    kept, nxt = spec.verify_draft(p_TV, q_KV, [2, 4], np.random.default_rng(1))  # the same, well formed
    assert 0 <= kept <= 2 and 0 <= nxt < 6


def test_string_prompt_ids_are_refused_by_name(model):
    with pytest.raises(TypeError, match=r"^prompt_ids: expected a sequence of int token ids, got str"):
        spec.speculative_run(model, spec.PromptLookupDraft(), "The cat", 3)
