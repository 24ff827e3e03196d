"""Serving, chunked prefill, speculative decoding, windows, prefix caching and int8 caches take
every model of kvtutor: GPT-2 and the Llama-style model, in NumPy and in torch. Each gives every
request exactly the tokens that the model's own greedy decoding gives it alone (an int8 cache:
within its rounding, and a torch model exactly its NumPy twin's).

The torch twins run in float64: a batched and a single-row matmul may round differently, and in
float64 that never flips an argmax.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvtutor
from kvtutor.models.gpt2 import NumpyDecoder
from kvtutor.models.llama import LlamaConfig, LlamaModel
from kvtutor.serving.backends import check_model
from kvtutor.serving.loop import run_serving
from kvtutor.serving.speculative import PromptLookupDraft, layer_cut_draft, speculative_generate

torch = pytest.importorskip("torch")
from kvtutor.models.torch_gpt2 import TorchDecoder  # noqa: E402
from kvtutor.models.torch_llama import TorchLlamaModel  # noqa: E402

VOCAB, MAX_LEN = 24, 24
GPT2 = kvtutor.GPT2Config(
    vocab_size=VOCAB, d_model=16, n_heads=4, n_layers=3, max_seq_len=MAX_LEN, n_kv_heads=2
)
LLAMA = LlamaConfig(
    vocab_size=VOCAB, d_model=16, n_heads=4, n_kv_heads=2, n_layers=3, max_seq_len=MAX_LEN, d_ff=24
)
MODELS = ["gpt2-numpy", "gpt2-torch", "llama-numpy", "llama-torch"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _numpy_twins() -> dict[str, NumpyDecoder]:
    gpt2 = kvtutor.GPT2Model.random(GPT2, seed=3, dtype=np.float64)
    for arr in gpt2.weights.arrays():  # varied, non-repetitive greedy continuations
        if arr.ndim == 2:
            arr *= 20.0
    return {"gpt2": gpt2, "llama": LlamaModel.random(LLAMA, seed=3, dtype=np.float64, std=0.5)}


NUMPY = _numpy_twins()
ALL = {
    "gpt2-numpy": NUMPY["gpt2"],
    "gpt2-torch": kvtutor.TorchGPT2Model.from_numpy(NUMPY["gpt2"], device="cpu", dtype=torch.float64),
    "llama-numpy": NUMPY["llama"],
    "llama-torch": TorchLlamaModel.from_numpy(NUMPY["llama"], device="cpu", dtype=torch.float64),
}


def alone(name: str, prompt: list[int], n: int) -> list[int]:
    """The NumPy twin's greedy tokens for one request: the reference every model must meet."""
    return NUMPY[name.split("-")[0]].generate(prompt, n)


def test_every_model_is_one_of_the_two_bases():
    for name, model in ALL.items():
        base = TorchDecoder if name.endswith("torch") else NumpyDecoder
        assert isinstance(model, base) and check_model(model, "model") is model.config
    # the shared methods are inherited, not copied onto each class
    for base, classes in ((NumpyDecoder, (kvtutor.GPT2Model, LlamaModel)),
                          (TorchDecoder, (kvtutor.TorchGPT2Model, TorchLlamaModel))):  # fmt: skip
        for method in ("new_cache", "check_cache", "prefill", "logits_without_cache"):
            assert all(method not in vars(cls) for cls in classes), method
            assert method in vars(base)
    assert "first_layers" in vars(NumpyDecoder) and "first_layers" in vars(TorchDecoder)
    assert "first_layers" not in vars(kvtutor.GPT2Model) and "first_layers" not in vars(LlamaModel)
    for method in ("first_layers", "decode_step", "generate", "compile_decode", "_run"):
        assert method in vars(TorchDecoder), method
        assert all(method not in vars(cls) for cls in (kvtutor.TorchGPT2Model, TorchLlamaModel)), method
    for cls in (kvtutor.TorchGPT2Model, TorchLlamaModel):  # what each family supplies: its own pass
        assert "run_pass" in vars(cls)


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
@settings(max_examples=15, deadline=None)
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
@settings(max_examples=15, deadline=None)
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


# ---------------------------------------------------------------- the caches beyond the two layouts

from kvtutor.caches.paged import PagedKVPool  # noqa: E402
from kvtutor.caches.prefix import PrefixCachingPool  # noqa: E402
from kvtutor.caches.quant import QuantizedKVCache  # noqa: E402
from kvtutor.caches.window import SlidingWindowKVCache  # noqa: E402
from kvtutor.serving.backends import forward_one, prefill_in_chunks  # noqa: E402

TORCH_MODELS = ["gpt2-torch", "llama-torch"]


def _as_numpy(x):
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


@pytest.mark.parametrize("name", MODELS)
@settings(max_examples=10, deadline=None)
@given(prompt=st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=12), chunk=st.integers(1, 5))
def test_chunked_prefill_gives_the_logits_of_one_prefill(name, prompt, chunk):
    model = ALL[name]
    cache = model.new_cache(1, 16)
    logits = _as_numpy(prefill_in_chunks(model, prompt, cache, chunk))
    whole = _as_numpy(model.logits_without_cache(prompt if name.endswith("numpy") else [prompt]))
    np.testing.assert_allclose(logits[-1], whole.reshape(-1, VOCAB)[-1], rtol=1e-9, atol=1e-9)
    assert len(cache) == len(prompt) if name.endswith("numpy") else cache.host_lengths == [len(prompt)]


def greedy(model, prompt: list[int], n_new: int, cache) -> list[int]:
    """``n_new`` greedy tokens of any model through ``cache`` (one prefill, then one token a pass)."""
    tokens = [int(np.argmax(forward_one(model, prompt, cache)[-1]))]
    while len(tokens) < n_new:
        tokens.append(int(np.argmax(forward_one(model, [tokens[-1]], cache)[-1])))
    return tokens


@pytest.mark.parametrize("name", MODELS)
@settings(max_examples=10, deadline=None)
@given(prompt=st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=8), n_new=st.integers(1, 8))
def test_a_window_that_holds_everything_and_a_prefix_cache_give_the_tokens_alone(name, prompt, n_new):
    """A window as long as the sequence evicts nothing; a prefix-cached sequence, filled by one
    request and reused by a second, computes only what it misses: both give the model's tokens,
    in NumPy and in torch (a torch model runs the NumPy cache as a batch of one)."""
    model = ALL[name]
    window = SlidingWindowKVCache.for_model(model, window=len(prompt) + n_new, capacity=MAX_LEN)
    assert greedy(model, prompt, n_new, window) == alone(name, prompt, n_new)
    pool = PrefixCachingPool.for_model(model, n_blocks=16, block_size=2)
    for second in (False, True):  # the second request finds the first one's blocks
        seq = pool.new_sequence(token_ids=prompt)
        assert len(seq) == (len(prompt) - 1) // 2 * 2 * second  # its full blocks, all but the last token's
        tokens = [int(np.argmax(_as_numpy(seq.prefill(model, prompt))[-1]))]
        while len(tokens) < n_new:
            tokens.append(int(np.argmax(forward_one(model, [tokens[-1]], seq)[-1])))
        assert tokens == alone(name, prompt, n_new)
        seq.free()


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("n_sink", [0, 1])
def test_a_torch_model_evicts_as_its_numpy_twin(family, n_sink):
    """A window shorter than the sequence (it evicts): the torch model's logits equal its NumPy
    twin's through the same window, step by step, so the band mask reaches the torch attention;
    and they differ from the full cache's, so the eviction is real."""
    models = ALL[f"{family}-numpy"], ALL[f"{family}-torch"]
    prompt, n_new = [3, 1, 4, 1, 5, 9, 2], 8
    caches = [SlidingWindowKVCache.for_model(m, window=4, n_sink=n_sink) for m in models]
    full = models[1].new_cache(1, MAX_LEN)
    logits = [forward_one(m, prompt, c) for m, c in zip(models, caches, strict=True)]
    full_logits = forward_one(models[1], prompt, full)
    moved = 0.0
    for _ in range(n_new):
        np.testing.assert_allclose(logits[1], logits[0], rtol=1e-9, atol=1e-9)
        moved = max(moved, float(np.abs(logits[1][-1] - full_logits[-1]).max()))
        token = [int(np.argmax(logits[0][-1]))]
        logits = [forward_one(m, token, c) for m, c in zip(models, caches, strict=True)]
        full_logits = forward_one(models[1], token, full)
    assert len(caches[1]) == len(prompt) + n_new and caches[1].positions().size == 4
    assert moved > 1e-3  # the window changed what the model saw


@pytest.mark.parametrize("name", MODELS)
def test_an_int8_cache_stays_within_its_rounding_of_the_full_cache(name):
    """int8 keys and values (per-channel keys, per-token values) move every logit by less than a
    bound set by the quantisation step, for every model; a torch model's int8 logits are its NumPy
    twin's."""
    model, prompt = ALL[name], [3, 1, 4, 1, 5, 9, 2, 6]
    full, int8 = model.new_cache(1, MAX_LEN), QuantizedKVCache.for_model(model)
    for cache in (full, int8):
        forward_one(model, prompt, cache)
    a, b = forward_one(model, [5], full), forward_one(model, [5], int8)
    spread = float(np.abs(a).max())
    assert 0 < float(np.abs(a - b).max()) < 0.05 * spread
    twin = ALL[name.replace("torch", "numpy")]
    twin_int8 = QuantizedKVCache.for_model(twin)
    forward_one(twin, prompt, twin_int8)
    np.testing.assert_allclose(b, forward_one(twin, [5], twin_int8), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", TORCH_MODELS)
def test_a_torch_model_runs_a_numpy_cache_as_a_batch_of_one(name):
    """The bridge (``torch_bridge.SequenceCache``): a pass that fails half way (the paged pool runs
    out of blocks) leaves the NumPy cache as it was; the one-sequence cache refuses a row or an
    active mask beyond its one row; a torch model in bf16 is refused by name; the fixed-shape step
    refuses it."""
    model = ALL[name]
    pool = PagedKVPool.for_model(model, n_blocks=2, block_size=2)
    seq = pool.new_sequence()
    forward_one(model, [1, 2, 3], seq)
    keys = seq.keys(0).copy()
    with pytest.raises(ValueError, match="^cache: out of blocks"):
        forward_one(model, [4, 5], seq)
    assert len(seq) == 3 and pool.allocator.n_free == 0 and np.array_equal(seq.keys(0), keys)
    checked = model.check_cache(seq)
    assert checked.kind == "sequence" and checked.batch_size == 1 and checked.host_lengths == [3]
    torch.testing.assert_close(checked.keys(0, row=0), torch.from_numpy(keys))
    with pytest.raises(ValueError, match=r"^row: expected 0 <= row < 1, got 1"):
        model.forward_row([4], seq, 1)
    with pytest.raises(ValueError, match="^active: expected at least one active row"):
        model.decode_step([4], seq, active=[False])
    with pytest.raises(ValueError, match="^cache: expected a kind='preallocated' cache, got kind='sequence'"):
        model.compile_decode(seq)
    half = type(model).from_numpy(NUMPY[name.split("-")[0]], device="cpu", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"^model: expected a torch model in float32 or float64"):
        QuantizedKVCache.for_model(half)
    assert len(seq) == 3  # nothing refused changed the sequence


@pytest.mark.parametrize("name", TORCH_MODELS)
def test_the_graphed_step_of_either_torch_model_equals_its_decode_step(name):
    """``compile_decode`` (the CUDA-graph step, run eagerly here) over GPT-2 and Llama alike: the
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
