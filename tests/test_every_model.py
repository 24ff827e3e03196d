"""Serving, chunked prefill and speculative decoding take every model of kvtutor: GPT-2 and the
Llama-style model, in NumPy and in torch. Each gives every request exactly the tokens that the
model's own greedy decoding gives it alone.

The torch twins run in float64: a batched and a single-row matmul may round differently, and in
float64 that never flips an argmax.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvtutor
from kvtutor.models.llama import LlamaConfig, LlamaModel
from kvtutor.models.numpy_model import NumpyDecoder
from kvtutor.serving.backends import check_model
from kvtutor.serving.loop import run_serving
from kvtutor.serving.speculative import PromptLookupDraft, layer_cut_draft, speculative_generate

torch = pytest.importorskip("torch")
from kvtutor.models.torch_llama import TorchLlamaModel  # noqa: E402
from kvtutor.models.torch_model import TorchDecoder  # noqa: E402

VOCAB, MAX_LEN = 24, 24
GPT2 = kvtutor.ModelConfig(
    vocab_size=VOCAB, d_model=16, n_heads=4, n_layers=3, max_seq_len=MAX_LEN, n_kv_heads=2
)
LLAMA = LlamaConfig(
    vocab_size=VOCAB, d_model=16, n_heads=4, n_kv_heads=2, n_layers=3, max_seq_len=MAX_LEN, d_ff=24
)
MODELS = ["gpt2-numpy", "gpt2-torch", "llama-numpy", "llama-torch"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _numpy_twins() -> dict[str, NumpyDecoder]:
    gpt2 = kvtutor.NumpyModel.random(GPT2, seed=3, dtype=np.float64)
    for arr in gpt2.weights.arrays():  # varied, non-repetitive greedy continuations
        if arr.ndim == 2:
            arr *= 20.0
    return {"gpt2": gpt2, "llama": LlamaModel.random(LLAMA, seed=3, dtype=np.float64, std=0.5)}


NUMPY = _numpy_twins()
ALL = {
    "gpt2-numpy": NUMPY["gpt2"],
    "gpt2-torch": kvtutor.TorchModel.from_numpy(NUMPY["gpt2"], device="cpu", dtype=torch.float64),
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
    for base, classes in ((NumpyDecoder, (kvtutor.NumpyModel, LlamaModel)),
                          (TorchDecoder, (kvtutor.TorchModel, TorchLlamaModel))):  # fmt: skip
        for method in ("new_cache", "check_cache", "prefill", "logits_without_cache"):
            assert all(method not in vars(cls) for cls in classes), method
            assert method in vars(base)
    assert "first_layers" in vars(NumpyDecoder) and "first_layers" in vars(TorchDecoder)
    assert "first_layers" not in vars(kvtutor.NumpyModel) and "first_layers" not in vars(LlamaModel)
    assert "first_layers" not in vars(TorchLlamaModel)  # TorchModel's also cuts its fused weights
    assert "decode_step" not in vars(TorchLlamaModel)  # TorchModel's adds the fused fast path


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
from kvtutor.serving.backends import prefill_in_chunks  # noqa: E402

NUMPY_MODELS = ["gpt2-numpy", "llama-numpy"]
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


@pytest.mark.parametrize("name", NUMPY_MODELS)
@settings(max_examples=10, deadline=None)
@given(prompt=st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=8), n_new=st.integers(1, 8))
def test_a_window_that_holds_everything_and_a_prefix_cache_give_the_tokens_alone(name, prompt, n_new):
    """A window as long as the sequence evicts nothing; a prefix-cached sequence, filled by one
    request and reused by a second, computes only what it misses: both give the model's tokens."""
    model = ALL[name]
    window = SlidingWindowKVCache.for_model(model, window=len(prompt) + n_new, capacity=MAX_LEN)
    assert model.generate(prompt, n_new, cache=window) == alone(name, prompt, n_new)
    pool = PrefixCachingPool.for_model(model, n_blocks=16, block_size=2)
    for _ in range(2):  # the second request finds the first one's blocks
        seq = pool.new_sequence(token_ids=prompt)
        tokens = [int(np.argmax(seq.prefill(model, prompt)[-1]))]
        while len(tokens) < n_new:
            tokens.append(int(np.argmax(model.decode_step(tokens[-1], seq))))
        assert tokens == alone(name, prompt, n_new)
        seq.free()


@pytest.mark.parametrize("name", NUMPY_MODELS)
def test_an_int8_cache_stays_within_its_rounding_of_the_full_cache(name):
    """int8 keys and values (per-channel keys, per-token values) move every logit by less than a
    bound set by the quantisation step, for both NumPy models."""
    model, prompt = ALL[name], [3, 1, 4, 1, 5, 9, 2, 6]
    full, int8 = model.new_cache(), QuantizedKVCache.for_model(model)
    for cache in (full, int8):
        model.prefill(prompt, cache)
    a, b = model.decode_step(5, full), model.decode_step(5, int8)
    spread = float(np.abs(a).max())
    assert 0 < float(np.abs(a - b).max()) < 0.05 * spread


@pytest.mark.parametrize("name", TORCH_MODELS)
@pytest.mark.parametrize(
    "make",
    [
        lambda m: SlidingWindowKVCache.for_model(m, window=4),
        lambda m: QuantizedKVCache.for_model(m),
        lambda m: PagedKVPool.for_model(m, n_blocks=4, block_size=2),
    ],
    ids=["window", "int8", "paged"],
)
def test_the_numpy_only_caches_refuse_a_torch_model_by_name(name, make):
    with pytest.raises(TypeError, match=r"^model: expected a NumpyModel or LlamaModel, got Torch"):
        make(ALL[name])
