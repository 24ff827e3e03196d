"""Every public ``TorchGPT2Model`` method in float32, bfloat16 and float16, on the CPU and (where present)
on CUDA, against the NumPy model: odd head widths, GQA, ragged batches, both ``compile_decode``
modes, the key buckets of the fixed-shape step, and the padded LM head. On a CPU whose torch has
oneDNN also "cpu-packed": every matrix packed by oneDNN and every product of one row or more read
from the packed copy (``KVTUTOR_ROWS_PRODUCT=packed``, ``KVTUTOR_DECODE_PRODUCT=packed``).

On CUDA these are the tests ``tools/gpu_check.sh`` runs; on a CPU the same code paths run eagerly
(no graphs), so a shape or stride mistake in the fast path fails here first.
"""

from __future__ import annotations

import numpy as np
import pytest

import kvtutor
from kvtutor.environment import env_flag

torch = pytest.importorskip("torch")

from kvtutor.models import cuda_graphs as engine  # noqa: E402
from kvtutor.models import torch_mirror as mirror  # noqa: E402
from kvtutor.models import torch_weights  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
#: the packed CPU path runs where oneDNN can multiply the dtype (not float16)
PACKED = ["cpu-packed"] if torch_weights.onednn_available() else []
PACKED_DTYPES = ("float32", "bfloat16")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
#: logits tolerance, relative to the largest |logit|, per dtype
RTOL = {"float32": 2e-5, "bfloat16": 3e-2, "float16": 5e-3}
CONFIGS = {  # head widths 5 and 3 (odd), vocabularies that are not multiples of 64
    "mha-k5": kvtutor.GPT2Config(vocab_size=61, d_model=15, n_heads=3, n_layers=2, max_seq_len=160),
    "gqa-k3": kvtutor.GPT2Config(
        vocab_size=50, d_model=12, n_heads=4, n_layers=2, max_seq_len=160, n_kv_heads=2
    ),
}
IDS = [5, 17, 3, 40, 0, 42, 8, 8, 21, 33, 1, 49, 7, 2, 30, 11]


def np_(t) -> np.ndarray:
    return t.detach().cpu().float().numpy()


@pytest.fixture(
    scope="module",
    params=[(d, t, c) for d in DEVICES for t in DTYPES for c in CONFIGS]
    + [(d, t, c) for d in PACKED for t in PACKED_DTYPES for c in CONFIGS],
)
def case(request):
    device, dtype_name, config_name = request.param
    numpy_model = kvtutor.GPT2Model.random(CONFIGS[config_name], seed=3)
    with pytest.MonkeyPatch.context() as mp:  # the products are chosen when the weights are packed
        if device == "cpu-packed":
            mp.setenv("KVTUTOR_ROWS_PRODUCT", "packed")
            mp.setenv("KVTUTOR_DECODE_PRODUCT", "packed")
        model = kvtutor.TorchGPT2Model.from_numpy(
            numpy_model, device=device.split("-")[0], dtype=DTYPES[dtype_name]
        )
    if device == "cpu-packed":
        assert torch_weights.packed_weight(model.layers[0].w_qkv_OE) is not None
    return numpy_model, model, dtype_name


def close(got, ref: np.ndarray, dtype_name: str) -> None:
    ref = np.asarray(ref, dtype=np.float64)
    scale = max(1.0, float(np.abs(ref).max()))
    np.testing.assert_allclose(np_(got), ref, rtol=0, atol=RTOL[dtype_name] * scale)


def greedy_up_to_precision(tokens: list[int], prompt: list[int], numpy_model, dtype_name: str) -> None:
    """Each generated token is an argmax of the exact (NumPy) logits up to the dtype's tolerance."""
    full = prompt + tokens
    ref = numpy_model.logits_without_cache(full[:-1])
    scale = max(1.0, float(np.abs(ref).max()))
    for i, tok in enumerate(tokens):
        row = ref[len(prompt) - 1 + i]
        assert row[tok] >= row.max() - 2 * RTOL[dtype_name] * scale, (i, tok, int(row.argmax()))


def test_forward_prefill_decode_and_without_cache(case):
    numpy_model, model, dt = case
    ref = numpy_model.logits_without_cache(IDS[:12])
    close(model.logits_without_cache([IDS[:12]])[0], ref, dt)
    close(model.forward([IDS[:12]])[0], ref, dt)
    for kind in ("preallocated", "concat"):
        cache = model.new_cache(1, 16, kind)
        close(model.prefill([IDS[:6]], cache)[0], ref[:6], dt)
        for i in range(6, 12):
            close(model.decode_step([IDS[i]], cache)[0], ref[i], dt)
        assert cache.host_lengths == [12]
        ref_cache = numpy_model.new_cache()
        numpy_model.prefill(IDS[:12], ref_cache)
        for layer in range(model.config.n_layers):
            close(cache.keys(layer)[0], ref_cache.keys(layer), dt)
            close(cache.values(layer)[0], ref_cache.values(layer), dt)


def test_ragged_rows_prefill_row_active_and_rollback(case):
    numpy_model, model, dt = case
    prompts = [IDS[:3], IDS[4:11]]
    cache = model.new_cache(2, 20)
    for row, p in enumerate(prompts):
        close(model.prefill_row(p, cache, row), numpy_model.logits_without_cache(p), dt)
    seqs = [list(p) for p in prompts]
    for t in range(4):
        new = [IDS[t], IDS[t + 5]]
        active = [True, t % 2 == 0]
        logits = model.decode_step(new, cache, active=np.array(active) if not all(active) else None)
        for row in range(2):
            if active[row]:
                seqs[row].append(new[row])
                close(logits[row], numpy_model.logits_without_cache(seqs[row])[-1], dt)
            else:
                assert torch.isnan(logits[row]).all()
    assert cache.host_lengths == [len(s) for s in seqs]
    cache.truncate(2, row=1)
    cache.reset_row(0)
    assert cache.host_lengths == [0, 2]


@pytest.mark.parametrize("kind", ["preallocated", "concat"])
def test_generate_is_greedy(case, kind):
    numpy_model, model, dt = case
    out = model.generate([IDS[:4], IDS[5:9]], 9, cache_kind=kind)
    assert out.shape == (2, 9) and out.dtype == torch.long
    for row, prompt in enumerate([IDS[:4], IDS[5:9]]):
        greedy_up_to_precision(out[row].tolist(), prompt, numpy_model, dt)
    if dt == "float32":
        assert out[0].tolist() == numpy_model.generate(IDS[:4], 9)
    assert model.generate([IDS[:4]], 0).shape == (1, 0)


def test_generate_fills_exactly_the_context():
    numpy_model = kvtutor.GPT2Model.random(CONFIGS["gqa-k3"], seed=3)
    model = kvtutor.TorchGPT2Model.from_numpy(numpy_model, device="cpu")
    m = model.config.max_seq_len
    prompt = (IDS * 10)[: m - 1]
    out = model.generate([prompt], 2)  # m positions: the last new token is never fed back
    assert out[0].tolist() == numpy_model.generate(prompt, 2)
    assert model.generate([(IDS * 10)[:m]], 0).shape == (1, 0)
    with pytest.raises(ValueError, match=r"^max_new_tokens: "):
        model.generate([prompt], 3)


@pytest.mark.parametrize("mode", ["cuda_graph", "compile"])
def test_compile_decode_crosses_key_buckets_with_ragged_rows(case, mode):
    numpy_model, model, dt = case
    on_cuda = model.device.type == "cuda"
    if mode == "compile" and not (on_cuda or env_flag("KVTUTOR_TEST_COMPILE")):
        pytest.skip("torch.compile on the CPU takes minutes: set KVTUTOR_TEST_COMPILE=1")
    if mode == "compile" and dt != "float32":
        pytest.skip("compile mode is checked in float32; the graph mode covers every dtype")
    prompts = [(IDS * 5)[:60], IDS[:5]]
    cache, ref_cache = model.new_cache(2, 150), model.new_cache(2, 150)
    for c in (cache, ref_cache):
        for row, p in enumerate(prompts):
            model.prefill_row(p, c, row)
    step = model.compile_decode(cache, mode=mode)
    assert cache.host_lengths == [60, 5] and cache.lengths.tolist() == [60, 5]  # building wrote nothing
    tok = torch.tensor([1, 2], device=model.device)
    ref_tok = tok.clone()
    seqs = [list(p) for p in prompts]
    for _ in range(10):  # row 0 goes from 60 to 70 keys: buckets 64, then 128
        logits = step(tok).clone()
        ref_logits = model.decode_step(ref_tok, ref_cache)
        for row in range(2):
            seqs[row].append(int(tok[row]))
            close(logits[row], numpy_model.logits_without_cache(seqs[row])[-1], dt)
        close(logits, np_(ref_logits), dt)
        tok = ref_tok = ref_logits.argmax(-1)
    assert sorted(step.buckets) == [64, 128]
    assert cache.host_lengths == ref_cache.host_lengths == cache.lengths.tolist() == [70, 15]


def test_key_buckets():
    assert engine.key_buckets(64) == [64]
    assert engine.key_buckets(150) == [64, 128, 150]
    assert engine.key_buckets(4096) == [64, 128, 256, 512, 1024, 2048, 4096]
    assert engine.key_buckets(10) == [10]
    assert [engine.bucket_for(n, 150) for n in (1, 64, 65, 128, 129, 150)] == [64, 64, 128, 128, 150, 150]


def test_padded_lm_head_gives_the_same_logits(monkeypatch):
    """The LM head padded to a multiple of 64 rows (as on CUDA): zero rows, logits sliced back."""
    numpy_model = kvtutor.GPT2Model.random(CONFIGS["mha-k5"], seed=3)
    plain = kvtutor.TorchGPT2Model.from_numpy(numpy_model, device="cpu")
    monkeypatch.setitem(torch_weights.VOCAB_MULTIPLE, "cpu", 64)
    padded = kvtutor.TorchGPT2Model.from_numpy(numpy_model, device="cpu")
    assert padded.head_VD.shape == (64, 15) and padded.wte_VD.shape == (61, 15)
    assert torch.count_nonzero(padded.head_VD[61:]) == 0
    assert padded.n_params == plain.n_params  # the padding is not a parameter
    for fn in (lambda m: m.logits_without_cache([IDS]), lambda m: m.generate([IDS[:3]], 6)):
        a, b = fn(plain), fn(padded)
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, atol=2e-5, rtol=0)
    cache, ref = padded.new_cache(2, 40), plain.new_cache(2, 40)
    for m, c in ((padded, cache), (plain, ref)):
        m.prefill([IDS[:4], IDS[4:8]], c)
    torch.testing.assert_close(padded.decode_step([1, 2], cache), plain.decode_step([1, 2], ref))
    step = padded.compile_decode(cache)
    assert step([3, 4]).shape == (2, 61)


def test_decode_survives_a_non_contiguous_attention_output(monkeypatch):
    """cuDNN may return attention as [B,H,1,K] in another memory order (the H200 crash: a ``view``
    of it failed in the old fused step); a decode step must not assume the layout."""
    numpy_model = kvtutor.GPT2Model.random(CONFIGS["mha-k5"], seed=3)
    model = kvtutor.TorchGPT2Model.from_numpy(numpy_model, device="cpu")
    real = mirror.sdpa

    def odd_layout(*args, **kwargs):
        o = real(*args, **kwargs)  # (B, H, T, K)
        return o.permute(3, 0, 1, 2).contiguous().permute(1, 2, 3, 0)  # same values, K outermost

    monkeypatch.setattr(mirror, "sdpa", odd_layout)
    for batch in (1, 2):
        cache = model.new_cache(batch, 20)
        model.prefill([IDS[:5]] * batch, cache)
        logits = model.decode_step([IDS[5]] * batch, cache)
        close(logits[0], numpy_model.logits_without_cache(IDS[:6])[-1], "float32")


def test_a_cache_longer_than_the_model():
    model = kvtutor.TorchGPT2Model.random(CONFIGS["gqa-k3"], device="cpu")
    bigger = kvtutor.TorchGPT2Model.random(
        kvtutor.GPT2Config(vocab_size=50, d_model=12, n_heads=4, n_layers=2, max_seq_len=320, n_kv_heads=2),
        device="cpu",
    )
    cache = bigger.new_cache(1, 200)
    with pytest.raises(ValueError, match=r"^cache: expected a capacity <= this model's max_seq_len 160"):
        model.prefill([IDS[:3]], cache)
    assert cache.host_lengths == [0]
