"""Errors that name the caller's own argument (issue 43, classes 7 and 8): the caches' measurements
name their public arguments (``n_sinks[1]``, ``prompts[0]``, ``model``), never an internal one
(``n_sink``, ``ids_BT``); a ragged batch names ``ids_BT`` and the rows' lengths; an unknown or absent
device is refused by name by every torch constructor, caches included; the book's data functions
check sizes before they allocate. Every refused call leaves its arguments and caches as they were."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import kvtutor
from kvtutor.book import demos, widgets
from kvtutor.caches.quant import measure_agreement
from kvtutor.caches.window import measure_eviction

P = [[1, 2, 3], [4, 5]]

BAD_MEASURE = [
    # (function, arguments after the model, error, message)
    ("eviction", (P, 2, 4, (0, 4)), ValueError, r"^n_sinks\[1\]: expected 0 <= n_sinks\[1\] <= 3, got 4$"),
    ("eviction", (P, 2, 4, (0, 1.5)), TypeError, r"^n_sinks\[1\]: expected an int, got float 1\.5$"),
    ("eviction", (P, 2, 4, (-1,)), ValueError, r"^n_sinks\[0\]: expected 0 <= n_sinks\[0\] <= 3, got -1$"),
    ("eviction", (P, 2, 2.5), TypeError, r"^window: expected an int, got float 2\.5$"),
    ("eviction", ([1, 2, 3], 2, 4), ValueError, r"^prompts: expected a list of token-id lists, got one flat"),
    ("agreement", ([1, 2, 3], 2), ValueError, r"^prompts: expected a list of token-id lists, got one flat"),
    (
        "eviction",
        ([[1, 2], list(range(17))], 1, 4),
        ValueError,
        r"^prompts\[1\]: expected at most 16 tokens, got 17$",
    ),
    ("agreement", ([list(range(17))], 1), ValueError, r"^prompts\[0\]: expected at most 16 tokens, got 17$"),
    ("agreement", (P, 2, "per_token", 2.5), TypeError, r"^group_size: expected an int, got float 2\.5$"),
    ("agreement", (P, 0), ValueError, r"^max_new_tokens: expected an int >= 1, got 0$"),
]


@pytest.mark.parametrize(("which", "args", "exc", "match"), BAD_MEASURE)
def test_the_measurements_name_their_own_arguments(toy_model, which, args, exc, match):
    measure = measure_eviction if which == "eviction" else measure_agreement
    before = copy.deepcopy(args)
    with pytest.raises(exc, match=match):
        measure(toy_model, *args)
    assert repr(args) == repr(before)  # the caller's prompts and options as they were


@pytest.mark.parametrize("measure", [measure_eviction, measure_agreement])
def test_the_measurements_refuse_a_torch_model_by_name(toy_model, measure):
    """They read NumPy logit rows: a torch model was refused as ``ids_BT: expected shape [B, T]``
    (agreement) or by an internal name (eviction)."""
    pytest.importorskip("torch")
    from kvtutor.models.torch_gpt2 import TorchGPT2Model

    twin = TorchGPT2Model.from_numpy(toy_model, device="cpu")
    args = (P, 2, 8) if measure is measure_eviction else (P, 2)
    with pytest.raises(TypeError, match=r"^model: expected a NumPy model .* got TorchGPT2Model$"):
        measure(twin, *args)


def test_the_measurements_still_measure(toy_model):
    (report,) = measure_eviction(toy_model, np.array([[1, 2, 3, 4]]), 3, 8, n_sinks=np.array([2]))
    assert report.n_tokens == 3 and 0.0 <= report.agreement <= 1.0
    assert measure_agreement(toy_model, P, 2).n_tokens == 4


def test_a_ragged_nested_prompt_is_named_with_its_lengths(toy_model):
    """NumPy's 'setting an array element with a sequence ... inhomogeneous shape' named nothing."""
    cache = toy_model.new_cache()
    with pytest.raises(ValueError, match=r"^prompt_ids: expected a 1-D .*nested rows of lengths \[2, 1\]$"):
        toy_model.generate([[1, 2], [3]], 2, cache=cache)
    assert len(cache) == 0
    with pytest.raises(ValueError, match=r"^prompts\[1\]: expected a 1-D .*nested rows of lengths \[2, 1\]$"):
        measure_eviction(toy_model, [[1, 2], [[1, 2], [3]]], 2, 4)


# ---------------------------------------------------------------- torch: ragged batches and devices


@pytest.fixture(scope="module")
def torch_twin(toy_model):
    pytest.importorskip("torch")
    from kvtutor.models.torch_gpt2 import TorchGPT2Model

    return TorchGPT2Model.from_numpy(toy_model, device="cpu")


@pytest.mark.parametrize(
    ("ids", "got"),
    [([[1, 2, 3], [4, 5]], r"rows of lengths \[3, 2\]"), ([[1, 2], 3], r"rows of lengths \[2, 'an int'\]")],
)
@pytest.mark.parametrize("verb", ["prefill", "forward", "generate"])
def test_a_ragged_batch_names_ids_BT_and_the_lengths(torch_twin, ids, got, verb):
    cache = torch_twin.new_cache(2)
    lengths = list(cache.host_lengths)
    with pytest.raises(ValueError, match=rf"^ids_BT: expected a rectangular \[B, T\] .*, got {got}$"):
        if verb == "generate":
            torch_twin.generate(ids, 2)
        else:
            getattr(torch_twin, verb)(ids, cache)
    assert list(cache.host_lengths) == lengths


def _cache_makers():
    import torch

    from kvtutor.caches.kv import ConcatKVCache, PreallocatedKVCache
    from kvtutor.caches.paged import PagedKVPool
    from kvtutor.caches.quant import QuantizedKVCache
    from kvtutor.caches.window import BandedKVCache, SlidingWindowKVCache

    f32 = torch.float32
    return {
        "preallocated": lambda d: PreallocatedKVCache(2, 2, 8, 4, f32, device=d),
        "concat": lambda d: ConcatKVCache(2, 2, 8, 4, f32, device=d),
        "window": lambda d: SlidingWindowKVCache(2, 2, 8, 4, 4, 1, f32, device=d),
        "banded": lambda d: BandedKVCache(2, 2, 8, 4, 4, 1, f32, device=d),
        "int8": lambda d: QuantizedKVCache(2, 2, 8, 4, f32, device=d),
        "paged pool": lambda d: PagedKVPool(2, 2, 4, 4, 2, f32, device=d),
        "build_hf_gpt2": lambda d: kvtutor.models.gpt2_weights.build_hf_gpt2(kvtutor.TOY_CONFIG, device=d),
    }


@pytest.mark.parametrize("device", ["banana", "cuda", "cuda:7", 3.5])
@pytest.mark.parametrize(
    "maker", ["preallocated", "concat", "window", "banded", "int8", "paged pool", "build_hf_gpt2"]
)
def test_every_torch_constructor_refuses_a_device_by_name(maker, device):
    """Not torch's RuntimeError ('Expected one of cpu, cuda, ...') nor its AssertionError ('Torch
    not compiled with CUDA enabled'): a ValueError naming ``device``, the devices present and what
    came."""
    torch = pytest.importorskip("torch")
    if str(device).startswith("cuda") and torch.cuda.is_available() and torch.cuda.device_count() > 7:
        pytest.skip("this machine has that CUDA device")
    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("CUDA is present here")
    with pytest.raises(ValueError, match=r"^device: expected .*(present: |a torch device such as)"):
        _cache_makers()[maker](device)


def test_a_torch_cache_still_takes_a_present_device():
    torch = pytest.importorskip("torch")
    for name, make in _cache_makers().items():
        if name != "build_hf_gpt2":
            assert make("cpu").device == torch.device("cpu")
            assert make(torch.device("cpu")).device == torch.device("cpu")


# ---------------------------------------------------------------- the book's data functions


def test_the_query_cache_checks_its_sizes_before_allocating():
    for args, exc, match in [
        ((2**17, 1, 1), ValueError, r"^n_layers: expected 1 <= n_layers <= 65536, got 131072$"),
        ((-1, 2, 2), ValueError, r"^n_layers: expected 1 <= n_layers <= 65536, got -1$"),
        ((2.5, 2, 2), TypeError, r"^n_layers: expected an int, got float 2\.5$"),
        ((2, 10**20, 10**20), ValueError, r"^n_heads \* d_head: expected at most 1,099,511,627,776"),
        ((2, 2, 0), ValueError, r"^d_head: expected an int >= 1, got 0$"),
        ((2, 2, 2, np.int8), TypeError, r"^dtype: expected a floating NumPy dtype"),
    ]:
        with pytest.raises(exc, match=match):
            demos.QCache(*args)
    assert len(demos.QCache(2, 2, 2)) == 0


def test_the_calculator_refuses_a_memory_beyond_floats_by_name():
    with pytest.raises(ValueError, match=r"^memory_gib: expected a finite number, got an int of 1329 bits"):
        widgets.kv_calculator_data(memory_gib=10**400)  # was an OverflowError
    with pytest.raises(ValueError, match=r"^memory_gib: expected a finite number, got nan"):
        widgets.kv_calculator_data(memory_gib=float("nan"))


def test_a_bool_among_token_ids_is_refused_on_both_backends():
    """``np.asarray([True, 2])`` is ``[1, 2]``: a bool inside a list of token ids is refused by
    name before it becomes token 1 (an all-bool array already was, by its dtype)."""
    from kvtutor.serving.loop import serve

    config = kvtutor.GPT2Config(vocab_size=64, d_model=32, n_heads=4, n_layers=2, max_seq_len=32)
    numpy_model = kvtutor.GPT2Model.random(config, seed=0)
    torch_model = kvtutor.TorchGPT2Model.random(config, seed=0, device="cpu")
    for call in (
        lambda: numpy_model.generate([True, 2], 2),
        lambda: serve(numpy_model, [(0, [3, False], 2)], 1),
        lambda: torch_model.generate([[2, True]], 2),
        lambda: torch_model.prefill([[np.bool_(True), 2]], torch_model.new_cache(1, 8)),
    ):
        with pytest.raises(TypeError, match="expected int token ids, got dtype bool"):
            call()
