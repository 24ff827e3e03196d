"""Edges of issue 43 outside the models' arithmetic (classes 7 and 8): sizes checked before anything
is allocated (a replay's pool, a timeline figure), figure languages and rows checked by name, torch
devices refused by name where a cache is built, and a serving run that refuses one cache object
for every slot before any request runs. Each refused call leaves its arguments as they were."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from conftest import assert_same_state, cache_state

from kvtutor.book import paged_widget, scheduler_widget
from kvtutor.book.scheduler_widget import timeline_svg
from kvtutor.models.toy import load_toy_model
from kvtutor.serving.loop import run_serving, serve
from kvtutor.serving.paged_trace import MAX_BLOCKS, Request, random_trace, simulate_trace

REQUESTS = [(0, [1, 2, 3], 3), (0, [4, 5], 3), (1, [6, 7, 8, 9], 2)]


# ---------------------------------------------------------------- run_serving: one cache per slot


def test_one_cache_for_every_slot_is_refused_before_anything_runs():
    model = load_toy_model()
    shared = model.new_cache(capacity=16)
    model.prefill(np.array([1, 2]), shared)
    before = cache_state(shared)
    with pytest.raises(
        ValueError,
        match=r"^new_cache: expected a new cache for each of the 2 slots, got the same cache object for "
        r"slots 0 and 1",
    ):
        run_serving(model, REQUESTS, 2, new_cache=lambda capacity: shared)
    assert_same_state(before, cache_state(shared))  # not emptied for a request, not written


def test_a_new_cache_per_slot_serves_the_same_tokens():
    model = load_toy_model()
    made = []

    def new_cache(capacity):
        made.append(model.new_cache(capacity=capacity))
        return made[-1]

    trace = run_serving(model, REQUESTS, 2, new_cache=new_cache)
    assert trace.outputs == serve(model, REQUESTS, 2) and len({id(c) for c in made}) == len(made) == 2


def test_a_cache_repeated_after_others_is_named_by_its_slots():
    model = load_toy_model()
    caches = [model.new_cache(capacity=16), model.new_cache(capacity=16)]
    order = iter([caches[0], caches[1], caches[0]])
    with pytest.raises(ValueError, match=r"got the same cache object for slots 0 and 2"):
        run_serving(model, REQUESTS, 3, new_cache=lambda capacity: next(order))
    assert [len(c) for c in caches] == [0, 0]


# ---------------------------------------------------------------- sizes before allocation: replays


@pytest.mark.parametrize("capacity", [10**18, 2**70, (MAX_BLOCKS + 1) * 8])
def test_a_replay_pool_too_large_to_list_is_refused_by_name(capacity):
    trace = random_trace(3, max_seq_len=64, seed=1, mean_gap=1.0)
    kept = list(trace)
    message = rf"^capacity_tokens: expected at most {MAX_BLOCKS} blocks of 8 positions .*, got {capacity}$"
    with pytest.raises(ValueError, match=message):  # before: MemoryError or OverflowError
        paged_widget.paged_steps(trace, capacity, False)
    with pytest.raises(ValueError, match=message):
        simulate_trace(trace, "paged", capacity, 64, 8)
    assert trace == kept


def test_the_widget_replay_checks_its_arguments_as_simulate_trace_does():
    with pytest.raises(TypeError, match=r"^trace: expected a list of Request, got int$"):
        paged_widget.paged_steps(5, 80, False)
    with pytest.raises(TypeError, match=r"^prefix_caching: expected a bool, got str$"):
        paged_widget.paged_steps([Request(0, 3, 2)], 80, "yes")
    with pytest.raises(
        ValueError, match=r"^trace: request 0: expected prompt_len \+ output_len <= max_seq_len"
    ):
        paged_widget.paged_steps([Request(0, 60, 10)], 80, False)
    assert paged_widget.MAX_SEQ_LEN == 64
    steps, result = paged_widget.paged_steps([Request(0, 3, 2)], 80, False)
    assert result.finished == 1 and len(steps) == result.steps


# ---------------------------------------------------------------- timeline figures: languages, rows, sizes


ROW = [["running"]]
TIMELINE_CASES = {
    "unknown language": ((ROW, ["A"], [0], "fr", "t"), ValueError,
                         r"^lang: expected one of \['en', 'zh'\], got 'fr'$"),
    "no language": ((ROW, ["A"], [0], None, "t"), TypeError,
                    r"^lang: expected one of \['en', 'zh'\], got NoneType None$"),
    "missing row": ((ROW, ["A", "B"], [0], "en", "t"), ValueError,
                    r"^rows: expected one row per name \(2\), got 1: no row for 'B'$"),
    "extra row": ((ROW + [[None]], ["A"], [0], "en", "t"), ValueError,
                  r"^rows: expected one row per name \(1\), got 2: 1 rows too many$"),
    "short row": ((ROW, ["A"], [0, 1], "en", "t"), ValueError,
                  r"^rows: the row of 'A': expected one cell per step \(2\), got 1 cells$"),
    "unknown state": (([["flying"]], ["A"], [0], "en", "t"), ValueError,
                      r"^rows: the row of 'A', step 0: expected None or one of \['waiting'"),
    "huge": (([[None] * 3], ["A"], range(10**12), "en", "t"), ValueError,
             r"^steps: expected at most 65536 cells in all, got 1 names x 1000000000000 steps$"),
    "names a string": ((ROW, "A", [0], "en", "t"), TypeError, r"^names: expected a sequence, got str$"),
    "names not strings": ((ROW, [1], [0], "en", "t"), TypeError, r"^names: expected strings, got \['int'\]$"),
    "title not a string": ((ROW, ["A"], [0], "en", 3), TypeError, r"^title: expected a string, got int$"),
}  # fmt: skip


@pytest.mark.parametrize(("args", "exc", "message"), list(TIMELINE_CASES.values()), ids=list(TIMELINE_CASES))
def test_a_timeline_checks_languages_rows_and_sizes_by_name(args, exc, message):
    # before: KeyError 'fr', IndexError, KeyError 'flying', or a loop over 10**12 steps
    kept = copy.deepcopy(args[0])
    with pytest.raises(exc, match=message):
        timeline_svg(*args)
    assert args[0] == kept


def test_a_timeline_draws_in_both_languages():
    for lang in ("en", "zh"):
        svg = timeline_svg([["running", None], ["waiting", "finished"]], ["A", "B"], [0, 1], lang, "t")
        assert svg.startswith("<svg") and svg.count("<rect") == 3 + 3  # three cells, three legend keys


def test_serving_cells_names_its_argument():
    with pytest.raises(TypeError, match=r"^trace: expected a ServingTrace \(run_serving's\), got int$"):
        scheduler_widget.serving_cells(3)


# ---------------------------------------------------------------- torch devices, refused by name


def _torch_cases():
    torch = pytest.importorskip("torch")
    from kvtutor.caches.torch_kv import TorchPreallocatedKVCache
    from kvtutor.models.config import GPT2Config
    from kvtutor.models.torch_gpt2 import TorchGPT2Model

    cfg = GPT2Config(vocab_size=16, max_seq_len=8, n_layers=1, n_heads=2, d_model=8)
    return {
        "cache": lambda device: TorchPreallocatedKVCache(1, 1, 2, 4, 4, device, torch.float32),
        "model": lambda device: TorchGPT2Model.random(cfg, device=device),
        "model from NumPy": lambda device: TorchGPT2Model.from_numpy(load_toy_model(), device=device),
    }


@pytest.mark.parametrize("what", ["cache", "model", "model from NumPy"])
def test_a_device_that_is_no_device_is_refused_by_name(what):
    build = _torch_cases()[what]
    with pytest.raises(
        ValueError, match=r"^device: expected a torch device such as 'cpu' or 'cuda', got 'banana'$"
    ):
        build("banana")  # before (the batched torch caches): RuntimeError from torch.device
    assert build("cpu").device.type == "cpu"


@pytest.mark.parametrize("what", ["cache", "model", "model from NumPy"])
def test_cuda_without_a_gpu_is_refused_by_name(what):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(ValueError, match=r"^device: expected an available device, got cuda but CUDA is not"):
        _torch_cases()[what]("cuda")  # before (the batched torch caches): AssertionError from torch
