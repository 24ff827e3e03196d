"""Every cache with every model: GPT-2, the Llama-style model and Qwen3, in NumPy and in torch
(float64, float32 and bf16), through prefill, decode, chunked prefill, speculative decoding and
serving. A cache whose policy keeps every position gives exactly what the preallocated cache gives
(float64: the same tokens as the NumPy twin alone); the int8 cache stays within its rounding; a
window that evicts gives, in torch, its NumPy twin's logits. A pairing that cannot work is refused
up front in words that name the cache.

The float64 torch twins make exact comparisons possible: a batched and a single-row matmul may
round differently, and in float64 that never flips an argmax.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvtutor
from kvtutor.caches.kv import ConcatKVCache, PreallocatedKVCache
from kvtutor.caches.paged import PagedKVPool
from kvtutor.caches.prefix import PrefixCachingPool
from kvtutor.caches.quant import QuantizedKVCache
from kvtutor.caches.window import BandedKVCache, SlidingWindowKVCache
from kvtutor.models.llama import LlamaConfig, LlamaModel
from kvtutor.models.numpy_base import NumpyDecoder
from kvtutor.models.qwen3 import Qwen3Config, Qwen3Model
from kvtutor.serving.backends import check_model, forward_one, prefill_in_chunks
from kvtutor.serving.loop import run_serving
from kvtutor.serving.speculative import PromptLookupDraft, layer_cut_draft, speculative_generate

torch = pytest.importorskip("torch")
from kvtutor.models.torch_base import TorchDecoder  # noqa: E402
from kvtutor.models.torch_llama import TorchLlamaModel  # noqa: E402
from kvtutor.models.torch_qwen3 import TorchQwen3Model  # noqa: E402

VOCAB, MAX_LEN = 24, 24
GPT2 = kvtutor.GPT2Config(
    vocab_size=VOCAB, d_model=16, n_heads=4, n_layers=3, max_seq_len=MAX_LEN, n_kv_heads=2
)
LLAMA = LlamaConfig(
    vocab_size=VOCAB, d_model=16, n_heads=4, n_kv_heads=2, n_layers=3, max_seq_len=MAX_LEN, d_ff=24
)
QWEN3 = Qwen3Config(
    vocab_size=VOCAB, d_model=16, n_heads=4, n_kv_heads=2, d_head=6, n_layers=3, max_seq_len=MAX_LEN, d_ff=24
)
FAMILIES = ["gpt2", "llama", "qwen3"]
MODELS = [f"{f}-{b}" for f in FAMILIES for b in ("numpy", "torch")]
TORCH_MODELS = [m for m in MODELS if m.endswith("torch")]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _numpy_twins() -> dict[str, NumpyDecoder]:
    gpt2 = kvtutor.GPT2Model.random(GPT2, seed=3, dtype=np.float64)
    for arr in gpt2.weights.arrays():  # varied, non-repetitive greedy continuations
        if arr.ndim == 2:
            arr *= 20.0
    return {
        "gpt2": gpt2,
        "llama": LlamaModel.random(LLAMA, seed=3, dtype=np.float64, std=0.5),
        "qwen3": Qwen3Model.random(QWEN3, seed=3, dtype=np.float64, std=0.5),
    }


NUMPY = _numpy_twins()
TORCH_CLASS = {"gpt2": kvtutor.TorchGPT2Model, "llama": TorchLlamaModel, "qwen3": TorchQwen3Model}


def torch_twin(family: str, dtype: torch.dtype) -> TorchDecoder:
    return TORCH_CLASS[family].from_numpy(NUMPY[family], device="cpu", dtype=dtype)


ALL = {f"{f}-numpy": NUMPY[f] for f in FAMILIES} | {
    f"{f}-torch": torch_twin(f, torch.float64) for f in FAMILIES
}
LOW = {
    f"{f}-{name}": torch_twin(f, dt)
    for f in FAMILIES
    for name, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16))
}


def alone(name: str, prompt: list[int], n: int) -> list[int]:
    """The NumPy twin's greedy tokens for one request: the reference every model must meet."""
    return NUMPY[name.split("-")[0]].generate(prompt, n)


def test_every_model_is_one_of_the_two_bases_and_a_family_is_its_hooks():
    for name, model in ALL.items():
        base = TorchDecoder if name.endswith("torch") else NumpyDecoder
        assert isinstance(model, base) and check_model(model, "model") is model.config
    shared = {
        NumpyDecoder: ("new_cache", "check_cache", "forward", "prefill", "decode_step", "generate",
                       "logits_without_cache", "first_layers"),
        TorchDecoder: ("new_cache", "check_cache", "forward", "prefill", "decode_step", "generate",
                       "logits_without_cache", "first_layers", "run_pass", "compile_decode", "row_major",
                       "_run"),
    }  # fmt: skip
    families = {
        NumpyDecoder: (kvtutor.GPT2Model, LlamaModel, Qwen3Model),
        TorchDecoder: (kvtutor.TorchGPT2Model, TorchLlamaModel, TorchQwen3Model),
    }
    hooks = {NumpyDecoder: ("embed", "block", "head"), TorchDecoder: ("embed", "block", "final_norm")}
    for base, classes in families.items():
        for method in shared[base]:  # owned by the base, copied onto no family
            assert method in vars(base), method
            assert all(method not in vars(cls) for cls in classes), method
        for cls in classes[:2]:  # GPT-2 and Llama supply the hooks; Qwen3 inherits Llama's
            assert all(hook in vars(cls) for hook in hooks[base]), cls


# ---------------------------------------------------------------- every cache with every model


def _paged(model, capacity, pool_class=PagedKVPool):
    return pool_class.for_model(model, n_blocks=MAX_LEN, block_size=2).new_sequence(capacity)


#: caches whose policy keeps every position: the same answers as the preallocated cache
KEEP_ALL = {
    "preallocated": lambda model, m: PreallocatedKVCache.for_model(model, m),
    "concat": lambda model, m: ConcatKVCache.for_model(model, m),
    "window": lambda model, m: SlidingWindowKVCache.for_model(model, window=m, capacity=m),
    "window with a sink": lambda model, m: SlidingWindowKVCache.for_model(
        model, window=m, n_sink=1, capacity=m
    ),
    "banded": lambda model, m: BandedKVCache.for_model(model, window=m, capacity=m),
    "paged": _paged,
    "prefix-cached": lambda model, m: _paged(model, m, PrefixCachingPool),
    "new_cache": lambda model, m: model.new_cache(1, m),
    "new_cache concat": lambda model, m: model.new_cache(1, m, kind="concat"),
}
PROMPT, N_NEW = [3, 1, 4, 1, 5, 9, 2], 6


def greedy(model, prompt: list[int], n_new: int, cache) -> tuple[list[int], list[np.ndarray]]:
    """``n_new`` greedy tokens of any model through ``cache``, and the logits of every pass."""
    logits = [forward_one(model, prompt, cache)]
    tokens = [int(np.argmax(logits[-1][-1]))]
    while len(tokens) < n_new:
        logits.append(forward_one(model, [tokens[-1]], cache))
        tokens.append(int(np.argmax(logits[-1][-1])))
    return tokens, logits


TOLERANCE = {"numpy": 1e-9, "torch": 1e-9, "fp32": 1e-5, "bf16": 0.0}


@pytest.mark.parametrize("cache_kind", list(KEEP_ALL))
@pytest.mark.parametrize("name", MODELS + list(LOW))
def test_every_cache_that_keeps_every_position_answers_as_the_preallocated_cache(name, cache_kind):
    """Prefill and decode, then a chunked prefill, through every cache kind, against the
    preallocated cache of the same model; float64 models also against the NumPy twin alone."""
    model = ALL.get(name) or LOW[name]
    if cache_kind.startswith("new_cache") and isinstance(model, NumpyDecoder):
        cache_kind = cache_kind.replace("new_cache", "preallocated").split()[0]
    make, ref_make = KEEP_ALL[cache_kind], KEEP_ALL["preallocated"]
    tokens, logits = greedy(model, PROMPT, N_NEW, make(model, MAX_LEN))
    want_tokens, want_logits = greedy(model, PROMPT, N_NEW, ref_make(model, MAX_LEN))
    tol = TOLERANCE[name.split("-")[1]]
    if tol or cache_kind in ("preallocated", "banded", "paged", "prefix-cached"):
        assert tokens == want_tokens
    for got, want in zip(logits, want_logits, strict=True):  # bf16: the very same numbers
        np.testing.assert_allclose(got, want, rtol=0, atol=tol if tol else 0.05)
    if name.split("-")[1] in ("numpy", "torch"):
        assert tokens == alone(name, PROMPT, N_NEW)
    chunked = prefill_in_chunks(model, PROMPT, make(model, MAX_LEN), 3)
    np.testing.assert_allclose(chunked[-1], want_logits[0][-1], rtol=0, atol=tol if tol else 0.1)


@pytest.mark.parametrize("cache_kind", list(KEEP_ALL))
@pytest.mark.parametrize("name", MODELS)
def test_speculative_decoding_and_serving_take_every_cache(name, cache_kind):
    """Greedy speculative decoding through the cache (rolled back after every rejected guess)
    and continuous batching with one such cache per slot give each request its tokens alone."""
    model = ALL[name]
    if cache_kind.startswith("new_cache") and isinstance(model, NumpyDecoder):
        cache_kind = cache_kind.replace("new_cache", "preallocated").split()[0]
    make = KEEP_ALL[cache_kind]
    got = speculative_generate(
        model, layer_cut_draft(model, 1), PROMPT, N_NEW, k=3, cache=make(model, MAX_LEN)
    )
    assert got == alone(name, PROMPT, N_NEW)
    requests = [(0, PROMPT, 4), (1, [2, 7], 5), (1, [8, 8, 8], 3)]
    trace = run_serving(model, requests, 2, max_step_tokens=4, new_cache=lambda m: make(model, m))
    assert trace.outputs == [alone(name, p, n) for _, p, n in requests]


@pytest.mark.parametrize("name", MODELS + list(LOW))
def test_an_int8_cache_stays_within_its_rounding_of_the_full_cache(name):
    """int8 keys and values (per-channel keys, per-token values) move every logit by less than a
    bound set by the quantisation step, for every model and dtype; a float64 torch model's int8
    logits are its NumPy twin's."""
    model = ALL.get(name) or LOW[name]
    full, int8 = PreallocatedKVCache.for_model(model), QuantizedKVCache.for_model(model)
    for cache in (full, int8):
        forward_one(model, PROMPT, cache)
    a, b = forward_one(model, [5], full), forward_one(model, [5], int8)
    spread = float(np.abs(a).max())
    assert 0 < float(np.abs(a - b).max()) < 0.05 * spread
    if name.endswith("-torch"):
        twin = NUMPY[name.split("-")[0]]
        twin_int8 = QuantizedKVCache.for_model(twin)
        forward_one(twin, PROMPT, twin_int8)
        np.testing.assert_allclose(b, forward_one(twin, [5], twin_int8), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("n_sink", [0, 1])
def test_a_torch_model_evicts_as_its_numpy_twin(family, n_sink):
    """A window shorter than the sequence (it evicts), on the device: the torch model's logits
    equal its NumPy twin's through the same window, step by step, so the band mask reaches the
    torch attention; and they differ from the full cache's, so the eviction is real."""
    models = ALL[f"{family}-numpy"], ALL[f"{family}-torch"]
    caches = [SlidingWindowKVCache.for_model(m, window=4, n_sink=n_sink) for m in models]
    assert caches[1].backend == "torch" and caches[1].k_LHWK.dtype == torch.float64  # no host copy
    full = models[1].new_cache(1, MAX_LEN)
    logits = [forward_one(m, PROMPT, c) for m, c in zip(models, caches, strict=True)]
    full_logits = forward_one(models[1], PROMPT, full)
    moved = 0.0
    for _ in range(8):
        np.testing.assert_allclose(logits[1], logits[0], rtol=1e-9, atol=1e-9)
        moved = max(moved, float(np.abs(logits[1][-1] - full_logits[-1]).max()))
        token = [int(np.argmax(logits[0][-1]))]
        logits = [forward_one(m, token, c) for m, c in zip(models, caches, strict=True)]
        full_logits = forward_one(models[1], token, full)
    assert len(caches[1]) == len(PROMPT) + 8 and caches[1].positions().size == 4
    assert moved > 1e-3  # the window changed what the model saw


@pytest.mark.parametrize("name", TORCH_MODELS)
def test_a_cache_that_cannot_serve_the_model_is_refused_up_front(name):
    """A NumPy cache given to a torch model, a torch cache of another dtype, a batched pass on a
    cache of one sequence, the graphed step on a window: each refused by name, nothing run."""
    model = ALL[name]
    numpy_window = SlidingWindowKVCache.for_model(ALL[name.replace("torch", "numpy")], 4)
    with pytest.raises(TypeError, match=r"^cache: this SlidingWindowKVCache holds NumPy arrays, and a Torch"):
        model.forward([[1, 2]], numpy_window)
    half = SlidingWindowKVCache.for_model(LOW[name.replace("torch", "bf16")], 4)
    with pytest.raises(
        ValueError, match=r"^cache: this SlidingWindowKVCache holds torch.bfloat16 on cpu, the mod"
    ):
        model.forward([[1, 2]], half)
    window = SlidingWindowKVCache.for_model(model, 4)
    with pytest.raises(ValueError, match=r"^ids_BT: expected the cache's batch size 1, got 2 rows"):
        model.forward([[1, 2], [3, 4]], window)
    with pytest.raises(ValueError, match=r"^row: expected 0 <= row < 1, got 1"):
        model.forward_row([4], window, 1)
    with pytest.raises(
        ValueError, match=r"^cache: expected a kind='preallocated' cache, got a SlidingWindowKVCache"
    ):
        model.compile_decode(window)
    pool = PagedKVPool.for_model(model, n_blocks=2, block_size=2)
    seq = pool.new_sequence()
    forward_one(model, [1, 2, 3], seq)
    keys = seq.keys(0).clone()
    with pytest.raises(ValueError, match="^cache: out of blocks"):
        forward_one(model, [4, 5], seq)  # refused at plan time: nothing written, nothing taken
    assert len(seq) == 3 and pool.allocator.n_free == 0 and torch.equal(seq.keys(0), keys)
    assert len(window) == 0 and len(numpy_window) == 0 and len(half) == 0


# ---------------------------------------------------------------- serving and drafts, at random


requests_strategy = st.lists(
    st.tuples(
        st.integers(0, 6),
        st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=7),
        st.integers(0, 8),
    ),
    min_size=1,
    max_size=6,
)


@pytest.mark.parametrize("name", MODELS)
@settings(max_examples=12, deadline=None)
@given(
    requests=requests_strategy,
    max_batch_size=st.integers(1, 3),
    policy=st.sampled_from(["continuous", "static"]),
    spare=st.sampled_from([None, 0, 3]),
)
def test_serving_gives_every_request_its_tokens_alone(name, requests, max_batch_size, policy, spare):
    # chunked prefill (continuous batching only): a budget of a full batch's decodes and `spare` more
    budget = None if spare is None or policy == "static" else max_batch_size + max(spare, 1)
    trace = run_serving(ALL[name], requests, max_batch_size, policy, max_step_tokens=budget)
    assert trace.outputs == [alone(name, prompt, n) for _, prompt, n in requests]


@pytest.mark.parametrize("name", MODELS)
@settings(max_examples=12, deadline=None)
@given(
    prompt=st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=8),
    n_new=st.integers(1, 10),
    k=st.integers(0, 4),
    draft_kind=st.sampled_from(["layer_cut", "prompt_lookup"]),
)
def test_greedy_speculative_decoding_gives_the_models_own_tokens(name, prompt, n_new, k, draft_kind):
    model = ALL[name]
    draft = layer_cut_draft(model, 1) if draft_kind == "layer_cut" else PromptLookupDraft(max_ngram=2)
    assert speculative_generate(model, draft, prompt, n_new, k=k) == alone(name, prompt, n_new)


@pytest.mark.parametrize("name", MODELS)
def test_first_layers_shares_the_weights_and_cuts_the_blocks(name):
    model = ALL[name]
    cut = model.first_layers(2)
    assert type(cut) is type(model) and cut.config.n_layers == 2 and model.config.n_layers == 3
    layers = cut.weights.layers if isinstance(model, NumpyDecoder) else cut.layers
    full = model.weights.layers if isinstance(model, NumpyDecoder) else model.layers
    assert len(layers) == 2 and all(a is b for a, b in zip(layers, full[:2], strict=False))
    with pytest.raises(ValueError, match="n_layers"):
        model.first_layers(4)
    assert model.config.n_layers == 3  # a rejected cut leaves the model as it was


@pytest.mark.parametrize("name", MODELS)
@settings(max_examples=8, deadline=None)
@given(prompt=st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=12), chunk=st.integers(1, 5))
def test_chunked_prefill_gives_the_logits_of_one_prefill(name, prompt, chunk):
    model = ALL[name]
    cache = model.new_cache(1, 16)
    logits = prefill_in_chunks(model, prompt, cache, chunk)
    whole = np.asarray(forward_one(model, prompt, model.new_cache(1, 16)))
    np.testing.assert_allclose(logits[-1], whole[-1], rtol=1e-9, atol=1e-9)
    assert len(cache) == len(prompt)


@pytest.mark.parametrize("name", TORCH_MODELS)
def test_the_graphed_step_of_every_torch_model_equals_its_decode_step(name):
    """``compile_decode`` (the CUDA-graph step, run eagerly here) over every family alike: the
    same logits as ``decode_step``, rows at different lengths, through two key buckets."""
    model = ALL[name]
    cache, ref = model.new_cache(2, MAX_LEN), model.new_cache(2, MAX_LEN)
    for c in (cache, ref):
        model.prefill_row([1, 2, 3], c, 0)
        model.prefill_row([4, 5], c, 1)
    step = model.compile_decode(cache)
    for t in range(4):
        ids = [t, t + 1]
        torch.testing.assert_close(step(ids), model.decode_step(ids, ref), rtol=1e-9, atol=1e-9)
    assert cache.host_lengths == ref.host_lengths == [7, 6]


@pytest.mark.parametrize("cache_kind", list(KEEP_ALL))
@pytest.mark.parametrize("name", list(LOW))
def test_speculative_decoding_and_serving_in_fp32_and_bf16_take_every_cache(name, cache_kind):
    """In float32 and bf16 too, speculative decoding and serving through any cache that keeps every
    position give the tokens they give through the model's own batched cache."""
    model = LOW[name]
    make, ref = KEEP_ALL[cache_kind], KEEP_ALL["new_cache"]
    draft = layer_cut_draft(model, 1)
    want = speculative_generate(model, draft, PROMPT, N_NEW, k=3, cache=ref(model, MAX_LEN))
    assert speculative_generate(model, draft, PROMPT, N_NEW, k=3, cache=make(model, MAX_LEN)) == want
    requests = [(0, PROMPT, 4), (1, [2, 7], 5)]
    want = run_serving(model, requests, 2, new_cache=lambda m: ref(model, m)).outputs
    assert run_serving(model, requests, 2, new_cache=lambda m: make(model, m)).outputs == want
