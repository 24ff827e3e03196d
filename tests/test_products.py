"""The products a CPU pass runs its rows through beyond one row (``torch_weights.rows_product``):
BLAS's GEMM on the plain weights, or oneDNN's matmul on a copy it packed once for itself
(``pack``, a ``PackedWeight`` carried by the matrix and its [out, in] view). Either gives the same
logits and tokens; the packed copy is the kernel that really runs where it is chosen; a choice is
made when the weights are packed. Also the finite check of the logits, which reads them once
(it made five passes and an int64 copy of them: a tenth of a GPT-2-small prefill)."""

from __future__ import annotations

import numpy as np
import pytest

import kvtutor

torch = pytest.importorskip("torch")

from torch.profiler import ProfilerActivity, profile  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from kvtutor.measure import timing  # noqa: E402
from kvtutor.models import torch_weights  # noqa: E402
from kvtutor.models.weight_schema import check_logits  # noqa: E402

ROWS_ENV, ONE_ENV = "KVTUTOR_ROWS_PRODUCT", "KVTUTOR_DECODE_PRODUCT"
onednn_only = pytest.mark.skipif(
    not torch_weights.onednn_available(), reason="this torch build has no oneDNN matmul"
)
GPT2 = kvtutor.GPT2Config(vocab_size=64, d_model=32, n_heads=4, n_layers=2, max_seq_len=32, n_kv_heads=2)
LLAMA = kvtutor.LlamaConfig(
    vocab_size=64, d_model=32, n_heads=4, n_kv_heads=2, n_layers=2, d_ff=48, max_seq_len=32
)
ONEDNN = {"mkldnn::_linear_pointwise"}
BLAS = {"aten::addmm", "aten::mm", "aten::addmv", "aten::mv", "aten::bmm"}


def _forget() -> None:
    """Drop every measured rate and the choices made from them."""
    for fn in (torch_weights._faster_rows_product, torch_weights.rows_rates,
               torch_weights._faster_one_row_product, torch_weights.one_row_rates):  # fmt: skip
        fn.cache_clear()


@pytest.mark.parametrize("value", ["gemm", "PACKED ", "1"])
def test_a_wrong_setting_is_refused_by_name(monkeypatch, value):
    monkeypatch.setenv(ROWS_ENV, value)
    if value.strip().lower() == "packed":
        expect = "packed" if torch_weights.onednn_available() else "blas"
        assert torch_weights.rows_product(torch.float32, 8) == expect  # case and spaces do not matter
        return
    with pytest.raises(ValueError, match=f"^{ROWS_ENV}: expected one of \\['auto', 'blas', 'packed'\\], got"):
        torch_weights.rows_product(torch.float32, 8)


@onednn_only
def test_unset_the_measured_rates_choose_per_regime_and_small_matrices_stay_plain(monkeypatch):
    monkeypatch.delenv(ROWS_ENV, raising=False)
    monkeypatch.delenv(ONE_ENV, raising=False)
    rates = torch_weights.measure_rows_products(torch.float32, n_bytes=16 << 20, rounds=1)
    assert set(rates) == {"few", "many"} and all(set(r) == {"blas", "packed"} for r in rates.values())
    assert all(v > 0 for r in rates.values() for v in r.values())
    _forget()
    fake = {"few": {"blas": 1.0, "packed": 2.0}, "many": {"blas": 2.0, "packed": 1.0}}
    monkeypatch.setattr(torch_weights, "measure_rows_products", lambda dtype: fake)
    monkeypatch.setattr(torch_weights, "measure_one_row_products", lambda dtype: {"blas": 2.0, "onednn": 1.0})
    big, small = 64 << 20, torch_weights.PACK_MIN_BYTES - 4
    assert torch_weights.rows_product(torch.float32, 2, big) == "packed"
    assert torch_weights.rows_product(torch.float32, torch_weights.FEW_ROWS, big) == "packed"
    assert torch_weights.rows_product(torch.float32, torch_weights.FEW_ROWS + 1, big) == "blas"
    assert torch_weights.rows_product(torch.float32, 2, small) == "blas"
    assert torch_weights.rows_rates(torch.float32) == fake  # what chose
    # a copy where any regime reads it; one row reads it only where oneDNN's product of one row wins
    assert torch_weights.packed_uses(torch.float32, big) == (False, True, False)
    assert torch_weights.packed_uses(torch.float32, small) is None
    for dtype in (torch.float64, torch.float16):  # oneDNN cannot multiply them: never packed
        assert torch_weights.rows_product(dtype, 8, big) == "blas"
        assert torch_weights.packed_uses(dtype, big) is None
    monkeypatch.setenv(ROWS_ENV, "packed")  # the setting packs every matrix, small ones too
    assert torch_weights.packed_uses(torch.float32, 64) == (False, True, True)
    monkeypatch.setenv(ONE_ENV, "packed")
    assert torch_weights.packed_uses(torch.float32, 64) == (True, True, True)
    monkeypatch.setenv(ROWS_ENV, "blas")
    assert torch_weights.packed_uses(torch.float32, 64) == (True, False, False)
    _forget()


@onednn_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_packed_weight_multiplies_every_shape_of_rows_as_the_plain_one(dtype):
    g = torch.Generator().manual_seed(0)
    w_OE, b_O = (torch.randn(*s, generator=g).to(dtype) for s in ((80, 96), (80,)))
    packed = torch_weights.pack(w_OE.mT.contiguous().mT)  # either layout packs the same
    assert packed.is_mkldnn and packed.shape == w_OE.shape
    tol = 1e-4 if dtype == torch.float32 else 0.5
    for shape in ((96,), (3, 96), (2, 5, 96)):
        x = torch.randn(*shape, generator=g).to(dtype)
        for bias in (b_O, None):
            want = torch.nn.functional.linear(
                x.double(), w_OE.double(), None if bias is None else bias.double()
            )
            got = torch_weights.onednn_linear(x, packed, bias)
            assert got.shape == (*shape[:-1], 80) and got.dtype == dtype
            assert (got.double() - want).abs().max() < tol


@onednn_only
def test_packed_for_follows_the_regimes_the_copy_was_made_for(monkeypatch):
    w_EO = torch.randn(16, 24)
    assert torch_weights.packed_weight(w_EO) is None
    assert torch_weights.packed_for(torch_weights.out_in_view(w_EO), torch.randn(16)) is None
    setattr(
        w_EO,
        torch_weights._PACKED,
        torch_weights.PackedWeight(torch_weights.pack(w_EO.mT), False, True, False),
    )
    w_OE = torch_weights.out_in_view(w_EO)  # the view carries the copy
    assert w_OE.shape == (24, 16) and torch_weights.packed_weight(w_OE) is torch_weights.packed_weight(w_EO)
    assert torch_weights.packed_for(w_OE, torch.randn(16)) is None  # one row: not made for it
    assert torch_weights.packed_for(w_OE, torch.randn(2, 1, 16)) is not None  # two rows
    rows = torch_weights.FEW_ROWS
    assert torch_weights.packed_for(w_OE, torch.randn(1, rows, 16)) is not None
    assert torch_weights.packed_for(w_OE, torch.randn(1, rows + 1, 16)) is None  # many: not made for it
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert torch_weights.packed_for(w_OE, torch.randn(2, 16)) is None  # the compiler picks


def _kernels(fn) -> set[str]:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return {e.key for e in prof.key_averages()} & (ONEDNN | BLAS)


@onednn_only
@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_packed_model_runs_onednn_for_every_product_and_gives_the_same_answers(monkeypatch, family, dtype):
    """With ``KVTUTOR_ROWS_PRODUCT=packed`` every matrix, the LM head too, is packed; prefill and a
    batched decode step run no BLAS product, and the logits and tokens equal the plain model's.
    Before the packed path the setting did not exist: the products were BLAS's."""
    models, answers = {}, {}
    for product in ("blas", "packed"):
        monkeypatch.setenv(ROWS_ENV, product)
        monkeypatch.setenv(ONE_ENV, "blas")
        make = kvtutor.TorchGPT2Model if family == "gpt2" else kvtutor.TorchLlamaModel
        models[product] = model = make.random(
            GPT2 if family == "gpt2" else LLAMA, seed=3, device="cpu", dtype=dtype
        )
        monkeypatch.delenv(ROWS_ENV)  # chosen when packed: a later setting changes nothing
        cache = model.new_cache(2, capacity=16)
        prompt = torch.tensor([[5, 9, 2, 7], [1, 2, 3, 4]])
        kernels = _kernels(lambda m=model, p=prompt, c=cache: m.prefill(p, c))
        kernels |= _kernels(lambda m=model, c=cache: m.decode_step(torch.tensor([11, 12]), c))
        assert kernels <= (ONEDNN if product == "packed" else BLAS), (product, kernels)
        cache.truncate(4)
        answers[product] = (model.prefill(prompt[:, :1], model.new_cache(2, 16)).float(),
                            model.decode_step(torch.tensor([11, 12]), cache).float(),
                            model.generate(prompt[:1], 6))  # fmt: skip
    packed = models["packed"]
    weights = [packed.head_VD] + [
        w for ly in packed.layers for name, w in vars(ly).items() if name.endswith("_OE")
    ]
    assert weights[1:] and all(torch_weights.packed_weight(w) is not None for w in weights)
    assert all(torch_weights.packed_weight(w) is None for w in models["blas"].layers[0].__dict__.values())
    tol = 1e-4 if dtype == torch.float32 else 0.05
    for a, b in zip(answers["blas"][:2], answers["packed"][:2], strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=tol * max(1.0, float(a.abs().max())))
    assert torch.equal(answers["blas"][2], answers["packed"][2]) or dtype == torch.bfloat16
    # the plain weights are the model's weights: the state dict and a cut model see the same
    cut = packed.first_layers(1)
    assert torch_weights.packed_weight(cut.layers[0].w_qkv_OE) is torch_weights.packed_weight(
        packed.layers[0].w_qkv_OE
    )


@onednn_only
def test_one_row_reads_the_packed_copy_where_onednn_wins_one_row(monkeypatch):
    monkeypatch.setenv(ROWS_ENV, "packed")
    for one, want in (("blas", {"aten::addmv", "aten::mv"}), ("onednn", ONEDNN), ("packed", ONEDNN)):
        monkeypatch.setenv(ONE_ENV, one)
        model = kvtutor.TorchGPT2Model.random(GPT2, seed=3, device="cpu")
        cache = model.new_cache(1, capacity=16)
        model.prefill([[5, 9, 2, 7]], cache)
        kernels = _kernels(lambda m=model, c=cache: m.decode_step([11], c))
        assert kernels and kernels <= want, (one, kernels)


# ---------------------------------------------------------------- passes over the logits


class _BigOutputs(TorchDispatchMode):
    """Records every op (views aside) that returns a tensor of at least ``numel`` elements."""

    def __init__(self, numel: int) -> None:
        super().__init__()
        self.numel, self.ops = numel, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not func.is_view and isinstance(out, torch.Tensor) and out.numel() >= self.numel:
            self.ops.append(func.overloadpacket.__name__)
        return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_finite_check_reads_the_logits_once_and_still_finds_every_bad_number(dtype):
    logits = torch.randn(8, 300).to(dtype)
    with _BigOutputs(logits.numel()) as seen:
        assert check_logits(logits) is logits
    assert seen.ops == []  # no mask of the logits' size (isfinite, ~, ...): one reduction, no copy
    big = torch.full((4, 6), torch.finfo(dtype).max / 2, dtype=dtype)
    assert check_logits(big) is big  # finite numbers whose sum overflows: still accepted
    for bad in (float("nan"), float("inf"), -float("inf")):
        broken = logits.clone()
        broken[3, 7] = bad
        with pytest.raises(ValueError, match="^logits: expected finite numbers, got 1 NaN or inf of 2400"):
            check_logits(broken)
    both = logits.clone()
    both[0, 0], both[1, 1] = float("inf"), -float("inf")  # their sum is NaN: found too
    with pytest.raises(ValueError, match="got 2 NaN or inf"):
        check_logits(both)
    assert check_logits(broken, rows=[0, 1]) is broken  # only the rows that count


def test_native_bf16_needs_the_flags_and_the_kernels(monkeypatch):
    for flags, capability, want in (
        (["avx512f", "amx_bf16"], "AVX512", True),
        (["avx512f", "avx512_bf16"], "AVX512", True),
        (["avx512f", "avx2"], "AVX512", False),  # no bf16 units
        (["avx2", "amx_bf16"], "AVX2", False),  # torch's kernels held at AVX2 (ATEN_CPU_CAPABILITY)
    ):
        monkeypatch.setattr(timing, "cpu_flags", lambda flags=flags: flags)
        monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda c=capability: c)
        assert timing.native_bf16() is (want and torch_weights.onednn_available())


@pytest.mark.parametrize("name", ["n_out", "n_in", "n_mats", "rounds"])
@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_the_compiled_product_probe_checks_its_sizes_first(name, bad):
    """A bad size is refused by name before any model is built or compiled."""
    from kvtutor.bench.cpu import run_compiled_one_row

    with pytest.raises(ValueError, match=f"^{name}: expected a positive int, got {bad!r}$"):
        run_compiled_one_row("bfloat16", **{name: bad})
