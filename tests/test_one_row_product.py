"""The product a CPU decode step runs its one row through: BLAS's mat-vec or oneDNN's matmul of
one row, on the plain weights or on a copy oneDNN packed for itself, whichever streams fastest on
this CPU (``torch_weights.one_row_product``). Each gives the same logits and tokens; each is the
kernel that really runs; the layout follows the choice."""

from __future__ import annotations

import numpy as np
import pytest

import kvtutor
from kvtutor.environment import env_flag

torch = pytest.importorskip("torch")

from torch.profiler import ProfilerActivity, profile  # noqa: E402

from kvtutor.models import torch_mirror, torch_weights  # noqa: E402

ENV = "KVTUTOR_DECODE_PRODUCT"
onednn_only = pytest.mark.skipif(
    not torch_weights.onednn_available(), reason="this torch build has no oneDNN matmul of one row"
)
PRODUCTS = ["blas", pytest.param("onednn", marks=onednn_only), pytest.param("packed", marks=onednn_only)]
CONFIG = kvtutor.GPT2Config(vocab_size=64, d_model=32, n_heads=4, n_layers=2, max_seq_len=32, n_kv_heads=2)
LLAMA = kvtutor.LlamaConfig(
    vocab_size=64, d_model=32, n_heads=4, n_kv_heads=2, n_layers=2, d_ff=48, max_seq_len=32
)


@pytest.mark.parametrize("value", ["cublas", "BLAS ", "1"])
def test_a_wrong_setting_is_refused_by_name(monkeypatch, value):
    monkeypatch.setenv(ENV, value)
    if value.strip().lower() == "blas":
        assert torch_weights.one_row_product() == "blas"  # case and spaces do not matter
        return
    with pytest.raises(
        ValueError, match=f"^{ENV}: expected one of \\['auto', 'blas', 'onednn', 'packed'\\], got"
    ):
        torch_weights.one_row_product()


@pytest.mark.parametrize("product", PRODUCTS)
def test_the_setting_decides_and_dtypes_onednn_cannot_multiply_take_blas(monkeypatch, product):
    monkeypatch.setenv(ENV, product)
    assert torch_weights.one_row_product(torch.float32) == product
    assert torch_weights.one_row_product(torch.bfloat16) == product
    assert torch_weights.one_row_product(torch.float64) == "blas"
    assert torch_weights.one_row_product(torch.float16) == "blas"


def test_unset_it_is_the_faster_one_as_measured(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    rates = torch_weights.measure_one_row_products(torch.float32, n_bytes=16 << 20, rounds=2)
    assert set(rates) == ({"blas", "onednn", "packed"} if torch_weights.onednn_available() else {"blas"})
    assert all(r > 0 for r in rates.values())
    _forget()
    monkeypatch.setattr(torch_weights, "measure_one_row_products", lambda dtype: {"blas": 2.0, "onednn": 1.0})
    assert torch_weights.one_row_product(torch.float32) == "blas"
    assert torch_weights.one_row_rates(torch.float32) == {"blas": 2.0, "onednn": 1.0}  # what chose
    _forget()
    monkeypatch.setattr(torch_weights, "measure_one_row_products", lambda dtype: {"blas": 1.0, "onednn": 2.0})
    expect = "onednn" if torch_weights.onednn_available() else "blas"
    assert torch_weights.one_row_product(torch.float32) == expect
    # a small matrix takes BLAS's whatever was measured (oneDNN's call costs more than it saves),
    # unless the setting names oneDNN for every matrix
    small, large = torch_weights.ONEDNN_MIN_BYTES - 4, torch_weights.ONEDNN_MIN_BYTES
    assert torch_weights.one_row_product(torch.float32, small) == "blas"
    assert torch_weights.one_row_product(torch.float32, large) == expect
    assert torch_weights.row_major(torch.device("cpu"), 512, 2047) and not torch_weights.row_major(
        torch.device("cpu"), 2047, 512
    )  # small: along the longer side
    assert torch_weights.row_major(torch.device("cpu"), 1024, 1024) == (expect == "blas")
    # a matrix stored the other way round (an LM head laid out for prefill) needs 16 times the bytes
    rows_1m, rows_4m, rows_64m = (torch.empty(n, 1024) for n in (256, 1024, 16384))
    assert not torch_weights.one_row_onednn(rows_1m)
    assert torch_weights.one_row_onednn(rows_4m) == (expect == "onednn")
    assert not torch_weights.one_row_onednn(rows_4m.T.contiguous().T)
    assert torch_weights.one_row_onednn(rows_64m.T.contiguous().T) == (expect == "onednn")
    monkeypatch.setenv(ENV, "onednn")
    assert torch_weights.one_row_product(torch.float32, small) == expect
    assert torch_weights.one_row_onednn(rows_1m.T.contiguous().T) == (expect == "onednn")
    _forget()  # the next caller measures for itself


def _forget() -> None:
    """Drop the measured rates and the choices made from them."""
    torch_weights._faster_one_row_product.cache_clear()
    torch_weights.one_row_rates.cache_clear()
    torch_weights._faster_rows_product.cache_clear()
    torch_weights.rows_rates.cache_clear()


@pytest.mark.parametrize("product", PRODUCTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_one_row_equals_the_batched_product(monkeypatch, product, dtype):
    monkeypatch.setenv(ENV, product)
    g = torch.Generator().manual_seed(0)
    x_E, w_OE, b_O = (torch.randn(*s, generator=g).to(dtype) for s in ((96,), (80, 96), (80,)))
    for w in (w_OE, w_OE.mT.contiguous().mT):  # [out, in] stored either way
        want = torch.nn.functional.linear(x_E[None].double(), w.double(), b_O.double())[0]
        tol = 1e-4 if dtype == torch.float32 else 0.5
        for bias in (b_O, None):
            got = torch_mirror.linear(x_E, w, bias)
            assert got.shape == (80,) and got.dtype == dtype
            assert (got.double() - (want if bias is not None else want - b_O.double())).abs().max() < tol


def _kernels(model, cache, ids_B) -> set[str]:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        model.decode_step(ids_B, cache)
    return {e.key for e in prof.key_averages()}


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_each_product_is_the_kernel_that_runs_and_both_give_the_same_answer(monkeypatch, family):
    products = ["blas"] + (["onednn", "packed"] if torch_weights.onednn_available() else [])
    steps, tokens = {}, {}
    for product in products:
        monkeypatch.setenv(ENV, product)
        if family == "gpt2":
            model = kvtutor.TorchGPT2Model.random(CONFIG, seed=3, device="cpu")
            ours = {"aten::addmv", "aten::mv"} if product == "blas" else {"mkldnn::_linear_pointwise"}
        else:
            model = kvtutor.TorchLlamaModel.random(LLAMA, seed=3, device="cpu")
            ours = {"aten::addmv"} if product == "blas" else {"mkldnn::_linear_pointwise"}
        assert model.row_major(32, 96) == (product == "blas")
        packed = torch_weights.packed_weight(model.layers[0].w_qkv_OE)
        assert (packed is not None) == (product == "packed")  # a copy only where it is chosen
        cache = model.new_cache(1, capacity=16)
        prompt = torch.tensor([[5, 9, 2, 7]])
        prefill_BTV = model.logits_without_cache(torch.tensor([[5, 9, 2, 7, 11]]))
        model.prefill(prompt, cache)
        kernels = _kernels(model, cache, torch.tensor([11]))
        assert ours <= kernels, f"{product}: {sorted(k for k in kernels if 'mv' in k or 'linear' in k)}"
        other = {"mkldnn::_linear_pointwise"} if product == "blas" else {"aten::addmv", "aten::mv"}
        assert not other & kernels
        cache.truncate(4)
        steps[product] = model.decode_step(torch.tensor([11]), cache)
        assert (steps[product] - prefill_BTV[:, -1]).abs().max() < 1e-4  # the step equals prefill
        tokens[product] = model.generate(prompt, 8)
    assert all(torch.equal(tokens["blas"], t) for t in tokens.values())
    for step in steps.values():
        np.testing.assert_allclose(step.numpy(), steps["blas"].numpy(), atol=1e-4)


def test_under_torch_compile_the_compiler_picks(monkeypatch):
    """Inductor lowers oneDNN's op only for frozen weights, so a compiled step takes the plain ops."""
    monkeypatch.setenv(ENV, "onednn")
    w = torch.empty(16384, 1024)
    assert torch_weights.one_row_onednn(w) == torch_weights.onednn_available()
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert not torch_weights.one_row_onednn(w)


@pytest.mark.skipif(
    not env_flag("KVTUTOR_TEST_COMPILE"),
    reason="torch.compile on the CPU takes minutes: set KVTUTOR_TEST_COMPILE=1",
)
@pytest.mark.parametrize("product", PRODUCTS)
def test_a_compiled_one_row_step_equals_the_eager_one(monkeypatch, product):
    monkeypatch.setenv(ENV, product)
    model = kvtutor.TorchGPT2Model.random(CONFIG, seed=1, device="cpu")
    compiled, eager = model.new_cache(1, 12), model.new_cache(1, 12)
    for c in (compiled, eager):
        model.prefill([[1, 2, 3]], c)
    step = model.compile_decode(compiled, mode="compile")
    for t in (4, 5, 6):
        torch.testing.assert_close(step([t]).clone(), model.decode_step([t], eager), atol=1e-5, rtol=0)
