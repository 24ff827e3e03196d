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
