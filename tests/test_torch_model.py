"""The PyTorch model: parity with the NumPy model and with transformers' GPT-2, batched and ragged
caches, rollback, and every error path leaving the cache unchanged. CPU, small random configs;
the CUDA fast paths are tested only where a GPU is present."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest

import kvtutor
from kvtutor.environment import env_flag

torch = pytest.importorskip("torch")

from kvtutor import validate  # noqa: E402
from kvtutor.caches.torch_kv import TorchPreallocatedKVCache  # noqa: E402
from kvtutor.models import cuda_graphs as engine  # noqa: E402
from kvtutor.models import gpt2 as npm  # noqa: E402
from kvtutor.models import torch_gpt2, torch_weights  # noqa: E402
from kvtutor.models import torch_mirror as mirror  # noqa: E402
from kvtutor.models.gpt2 import causal_mask as np_causal_mask  # noqa: E402
from kvtutor.models.gpt2_weights import GPT2Weights  # noqa: E402

ATOL = 2e-5
IDS = [5, 17, 3, 40, 0, 42, 8, 8, 21, 33, 1, 49]
cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

CONFIGS = {
    "mha": kvtutor.GPT2Config(vocab_size=50, d_model=12, n_heads=3, n_layers=2, max_seq_len=24),
    "gqa": kvtutor.GPT2Config(vocab_size=50, d_model=16, n_heads=4, n_layers=2, max_seq_len=24, n_kv_heads=2),
    "mqa": kvtutor.GPT2Config(vocab_size=50, d_model=16, n_heads=4, n_layers=3, max_seq_len=24, n_kv_heads=1),
}


def _models(name: str, seed: int = 1):
    numpy_model = kvtutor.GPT2Model.random(CONFIGS[name], seed=seed)
    return numpy_model, kvtutor.TorchGPT2Model.from_numpy(numpy_model, device="cpu")


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def pair(request):
    return _models(request.param)


@pytest.fixture(scope="module")
def model():
    return _models("gqa")[1]


def np_(t) -> np.ndarray:
    return t.detach().cpu().float().numpy()


def snapshot(cache) -> tuple:
    """Lengths (device and host) and a copy of every tensor the cache holds."""
    if cache.kind == "preallocated":
        tensors = [cache.k_LBHMK.clone(), cache.v_LBHMK.clone()]
    else:
        tensors = [t.clone() for t in cache._k + cache._v]
    return cache.lengths.clone(), cache.host_lengths, tensors


def assert_unchanged(before, cache) -> None:
    after = snapshot(cache)
    assert torch.equal(before[0], after[0]) and before[1] == after[1]
    assert len(before[2]) == len(after[2])
    for a, b in zip(before[2], after[2], strict=True):
        assert torch.equal(a, b)


# ---------------------------------------------------------------- importing


def test_import_kvtutor_does_not_import_torch():
    code = (
        "import sys, kvtutor; assert 'torch' not in sys.modules, 'torch imported'; print(kvtutor.TOY_PROMPT)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    code = "import kvtutor, sys; m = kvtutor.TorchGPT2Model; assert 'torch' in sys.modules; print(m.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "TorchGPT2Model", out.stderr


# ---------------------------------------------------------------- construction


def test_defaults_on_cpu(model):
    assert model.device == torch.device("cpu") and model.dtype == torch.float32
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert validate.default_device() == expected


def test_weights_are_fused_and_stored_for_the_cpus_product_of_one_row(model, monkeypatch):
    cfg = model.config
    ly = model.layers[0]
    kv = cfg.n_kv_heads * cfg.d_head
    assert ly.w_qkv.shape == (cfg.d_model, cfg.d_model + 2 * kv)
    # BLAS's mat-vec: each [in, out] matrix contiguous along its longer side, rows of length out
    # when out >= in (qkv, fc, the square w_o), rows of length in otherwise (proj); the LM head
    # streams [D, V] rows of length V
    monkeypatch.setenv("KVTUTOR_DECODE_PRODUCT", "blas")
    blas_model = kvtutor.TorchGPT2Model.from_numpy(_models("gqa")[0], device="cpu")
    blas = blas_model.layers[0]
    assert blas.w_qkv.is_contiguous() and blas.w_fc.is_contiguous() and blas.w_o.is_contiguous()
    assert blas.w_proj.mT.is_contiguous() and not blas.w_proj.is_contiguous()
    assert blas_model.wte_VD.mT.is_contiguous()
    assert blas_model.row_major(4, 8) and not blas_model.row_major(8, 4)
    # oneDNN's matmul of one row: every matrix [out, in], as on a GPU (where it runs at all)
    monkeypatch.setenv("KVTUTOR_DECODE_PRODUCT", "onednn")
    if torch_weights.one_row_product() == "onednn":
        onednn = kvtutor.TorchGPT2Model.from_numpy(_models("gqa")[0], device="cpu")
        w = onednn.layers[0]
        assert all(m.mT.is_contiguous() for m in (w.w_qkv, w.w_o, w.w_fc, w.w_proj))
        assert onednn.wte_VD.mT.is_contiguous() and not onednn.row_major(4, 8)  # the head: [D, V]
    assert (ly.w_q.shape, ly.w_k.shape, ly.w_v.shape) == ((16, 16), (16, kv), (16, kv))
    assert ly.w_k.untyped_storage().data_ptr() == ly.w_qkv.untyped_storage().data_ptr()  # views
    assert torch.equal(ly.w_k, ly.w_qkv[:, cfg.d_model : cfg.d_model + kv])


def test_cpu_weights_share_one_buffer_and_the_cache_one_kv_buffer(model):
    storages = {t.untyped_storage().data_ptr() for t in model._weights()}
    assert len(storages) == 1  # one arena (on 2 MiB pages where the OS allows)
    cache = model.new_cache(2, 8)
    assert cache.kv_2LBHMK.shape == (
        2,
        model.config.n_layers,
        2,
        model.config.n_kv_heads,
        8,
        model.config.d_head,
    )
    assert torch.equal(cache.kv_2LBHMK[0], cache.k_LBHMK) and torch.equal(cache.kv_2LBHMK[1], cache.v_LBHMK)
    assert cache.k_LBHMK.untyped_storage().data_ptr() == cache.kv_2LBHMK.untyped_storage().data_ptr()
    assert not cache.kv_2LBHMK.any()


def test_large_logits_equal_numpy():
    cfg = kvtutor.GPT2Config(vocab_size=20000, d_model=16, n_heads=2, n_layers=1, max_seq_len=512)
    numpy_model = kvtutor.GPT2Model.random(cfg, seed=2)
    ours = kvtutor.TorchGPT2Model.from_numpy(numpy_model, device="cpu")
    ids = (np.arange(450) * 37) % cfg.vocab_size  # 450 x 20000 logits: 36 MB, the huge-page output path
    np.testing.assert_allclose(
        np_(ours.logits_without_cache([ids]))[0], numpy_model.logits_without_cache(ids), atol=ATOL
    )


def test_gelu_inplace_equals_gelu():
    x = torch.linspace(-4, 4, 101)
    ref = torch_gpt2.gelu(x)
    y = x.clone()
    assert torch_gpt2.gelu(y, inplace=True) is y
    torch.testing.assert_close(y, ref)
    np.testing.assert_allclose(ref.numpy(), kvtutor.models.gpt2.gelu(x.numpy()), atol=1e-6)


def test_random_matches_numpy_random():
    cfg = CONFIGS["mha"]
    ours = kvtutor.TorchGPT2Model.random(cfg, seed=3, device="cpu")
    ref = kvtutor.GPT2Model.random(cfg, seed=3)
    np.testing.assert_allclose(
        np_(ours.logits_without_cache([IDS]))[0], ref.logits_without_cache(IDS), atol=ATOL
    )
    assert ours.n_params == ref.n_params == cfg.n_params
    assert ours.nbytes == 4 * cfg.n_params


def test_state_dict_round_trip(pair):
    numpy_model, ours = pair
    again = kvtutor.TorchGPT2Model.from_gpt2_state_dict(
        ours.to_gpt2_state_dict(),
        n_heads=ours.config.n_heads,
        n_kv_heads=ours.config.n_kv_heads,
        device="cpu",
    )
    assert again.config == ours.config
    assert torch.equal(again.logits_without_cache([IDS]), ours.logits_without_cache([IDS]))
    sd = {k: np_(v) for k, v in ours.to_gpt2_state_dict().items()}
    for key, value in numpy_model.to_gpt2_state_dict().items():
        np.testing.assert_array_equal(sd[key], value)


def test_bf16_runs_on_cpu():
    numpy_model, _ = _models("mha")
    ours = kvtutor.TorchGPT2Model.from_numpy(numpy_model, device="cpu", dtype=torch.bfloat16)
    assert ours.dtype == torch.bfloat16 and ours.new_cache(1).k_LBHMK.dtype == torch.bfloat16
    assert kvtutor.TorchGPT2Model.from_numpy(numpy_model, device="cpu", dtype="bf16").dtype == torch.bfloat16
    logits = ours.logits_without_cache([IDS])
    assert logits.dtype == torch.bfloat16
    np.testing.assert_allclose(np_(logits)[0], numpy_model.logits_without_cache(IDS), atol=0.05)


# ---------------------------------------------------------------- parity with the NumPy model


def test_step_functions_mirror_numpy(pair):
    numpy_model, ours = pair
    cfg, rng = numpy_model.config, np.random.default_rng(0)
    x_TD = rng.standard_normal((5, cfg.d_model)).astype(np.float32)
    # project_heads is NumPy's project_qkv and split_heads in one, batched and as decode rows
    q_TD, k_TD, v_TD = npm.project_qkv(x_TD, numpy_model.weights.layers[0])
    want = [npm.split_heads(q_TD, cfg.n_heads)] + [npm.split_heads(a, cfg.n_kv_heads) for a in (k_TD, v_TD)]
    batched = mirror.project_heads(torch.from_numpy(x_TD)[None], ours.layers[0], cfg)
    row = mirror.project_heads(mirror.as_rows(torch.from_numpy(x_TD[:1])[None]), ours.layers[0], cfg)
    for got_BHTK, row_BHTK, want_HTK in zip(batched, row, want, strict=True):
        np.testing.assert_allclose(np_(got_BHTK[0]), want_HTK, atol=ATOL)
        np.testing.assert_allclose(np_(row_BHTK[0]), want_HTK[:, :1], atol=ATOL)
    x_HTK = torch.from_numpy(npm.split_heads(x_TD, cfg.n_heads))[None]
    assert torch.equal(mirror.merge_heads(x_HTK), torch.from_numpy(x_TD)[None])  # the exact inverse
    assert torch.equal(
        mirror.merge_heads(x_HTK[:, :, :1], like=x_HTK.new_empty(cfg.d_model)), x_HTK[0, :, 0].flatten()
    )
    for t, s in [(1, 1), (1, 6), (3, 3), (3, 7)]:
        assert np.array_equal(mirror.causal_mask(t, s).numpy(), np_causal_mask(t, s))
    ragged = mirror.ragged_causal_mask(torch.tensor([0, 4]), 3, 7)
    assert ragged.shape == (2, 1, 3, 7)
    assert np.array_equal(ragged[1, 0].numpy(), np_causal_mask(3, 7))
    assert np.array_equal(ragged[0, 0].numpy(), np.pad(np_causal_mask(3, 3), ((0, 0), (0, 4))))


@pytest.mark.parametrize("n_cached", [0, 3])
@pytest.mark.parametrize("group_size", [1, 2, 4])
def test_sdpa_equals_the_explicit_steps(n_cached, group_size):
    gen = torch.Generator().manual_seed(0)
    n_heads, n_new, d_head = 4, 3, 8
    q = torch.randn(2, n_heads, n_new, d_head, generator=gen)
    k = torch.randn(2, n_heads // group_size, n_cached + n_new, d_head, generator=gen)
    v = torch.randn(2, n_heads // group_size, n_cached + n_new, d_head, generator=gen)
    mask = mirror.causal_mask(n_new, n_cached + n_new)
    ref = torch.stack([  # the NumPy model's step functions, one sequence at a time
        torch.from_numpy(npm.attend(npm.attention_weights(npm.attention_scores(
            q[b].numpy(), npm.repeat_kv(k[b].numpy(), group_size)), d_head, mask.numpy()),
            npm.repeat_kv(v[b].numpy(), group_size)))
        for b in range(2)
    ])  # fmt: skip
    got = mirror.sdpa(q, k, v, mask, False, group_size)
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    if n_cached == 0:
        torch.testing.assert_close(mirror.sdpa(q, k, v, None, True, group_size), ref, atol=1e-5, rtol=1e-5)


def test_logits_without_cache_equal_numpy(pair):
    numpy_model, ours = pair
    for n in (1, 5, len(IDS)):
        got = np_(ours.logits_without_cache([IDS[:n]]))[0]
        np.testing.assert_allclose(got, numpy_model.logits_without_cache(IDS[:n]), atol=ATOL)


@pytest.mark.parametrize("kind", ["preallocated", "concat"])
def test_prefill_decode_and_chunks_equal_numpy(pair, kind):
    numpy_model, ours = pair
    ref = numpy_model.logits_without_cache(IDS)
    cache = ours.new_cache(1, kind=kind)
    np.testing.assert_allclose(np_(ours.prefill([IDS[:4]], cache))[0], ref[:4], atol=ATOL)
    for i in range(4, 7):
        np.testing.assert_allclose(np_(ours.decode_step([IDS[i]], cache))[0], ref[i], atol=ATOL)
    # several new tokens after cached ones: the causal mask offset by the cache length
    np.testing.assert_allclose(np_(ours.forward([IDS[7:11]], cache))[0], ref[7:11], atol=ATOL)
    assert len(cache) == 11 and cache.host_lengths == [11]


def test_cache_contents_equal_numpy_per_layer(pair):
    numpy_model, ours = pair
    ref_cache = numpy_model.new_cache()
    numpy_model.prefill(IDS[:6], ref_cache)
    numpy_model.forward(IDS[6:9], ref_cache)
    cache = ours.new_cache(1)
    ours.prefill([IDS[:6]], cache)
    ours.forward([IDS[6:9]], cache)
    for layer in range(ours.config.n_layers):
        np.testing.assert_allclose(np_(cache.keys(layer))[0], ref_cache.keys(layer), atol=ATOL)
        np.testing.assert_allclose(np_(cache.values(layer, row=0)), ref_cache.values(layer), atol=ATOL)


def test_generate_equals_numpy(pair):
    numpy_model, ours = pair
    for kind in ("preallocated", "concat"):
        got = ours.generate([IDS[:3]], 10, cache_kind=kind)
        assert got.dtype == torch.long and got.shape == (1, 10)
        assert got[0].tolist() == numpy_model.generate(IDS[:3], 10)
    assert ours.generate([IDS[:3]], 0).shape == (1, 0)


def test_accepts_lists_numpy_and_tensors(model):
    ref = model.logits_without_cache([IDS[:5]])
    for ids in (
        np.array([IDS[:5]], dtype=np.int32),
        torch.tensor([IDS[:5]]),
        torch.tensor([IDS[:5]], dtype=torch.int16),
    ):
        assert torch.equal(model.logits_without_cache(ids), ref)
    cache = model.new_cache(1)
    model.prefill(np.array([IDS[:4]]), cache)
    for token in ([IDS[4]], np.array([IDS[4]]), torch.tensor([IDS[4]])):
        cache.truncate(4)
        torch.testing.assert_close(model.decode_step(token, cache)[0], ref[0, 4], atol=ATOL, rtol=0)


# ---------------------------------------------------------------- parity with transformers


@pytest.fixture(scope="module")
def hf_pair(random_hf_gpt2):
    hf = random_hf_gpt2
    return hf, kvtutor.TorchGPT2Model.from_gpt2_state_dict(hf.state_dict(), n_heads=4, device="cpu")


def test_same_logits_as_transformers(hf_pair):
    hf, ours = hf_pair
    ids = torch.tensor([IDS, IDS[::-1]])
    with torch.no_grad():
        ref = hf(ids).logits
    torch.testing.assert_close(ours.logits_without_cache(ids), ref, atol=1e-4, rtol=1e-4)


def test_same_greedy_tokens_as_transformers(hf_pair):
    hf, ours = hf_pair
    prompts = torch.tensor([IDS[:4], IDS[4:8], IDS[8:12]])
    with torch.no_grad():
        out = hf.generate(
            prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=20, min_new_tokens=20,
            do_sample=False, pad_token_id=0,
        )  # fmt: skip
    assert torch.equal(ours.generate(prompts, 20), out[:, 4:])
    assert torch.equal(ours.generate(prompts, 20, cache_kind="concat"), out[:, 4:])


# ---------------------------------------------------------------- batches, ragged rows, rollback


def _alone(model, prompt, tokens):
    """Logits of decoding ``tokens`` after ``prompt`` in a batch of one."""
    cache = model.new_cache(1)
    model.prefill([prompt], cache)
    return [model.decode_step([t], cache)[0] for t in tokens]


@pytest.mark.parametrize("kind", ["preallocated", "concat"])
def test_batched_decode_equals_per_row(pair, kind):
    numpy_model, ours = pair
    prompts = [IDS[:4], IDS[4:8], IDS[8:12]]
    follow = [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    cache = ours.new_cache(3, kind=kind)
    ours.prefill(prompts, cache)
    batched = [ours.decode_step([f[i] for f in follow], cache) for i in range(3)]
    for b in range(3):
        ref = numpy_model.logits_without_cache(prompts[b] + follow[b])[4:]
        for i, alone in enumerate(_alone(ours, prompts[b], follow[b])):
            torch.testing.assert_close(batched[i][b], alone, atol=ATOL, rtol=0)
            np.testing.assert_allclose(np_(batched[i][b]), ref[i], atol=ATOL)
    ref_cache = numpy_model.new_cache()
    numpy_model.forward(prompts[2] + follow[2], ref_cache)
    for layer in range(ours.config.n_layers):  # the one-copy K/V write put each row where it belongs
        np.testing.assert_allclose(np_(cache.keys(layer))[2], ref_cache.keys(layer), atol=ATOL)
        np.testing.assert_allclose(np_(cache.values(layer))[2], ref_cache.values(layer), atol=ATOL)


def test_ragged_decode_equals_each_row_alone(pair):
    numpy_model, ours = pair
    prompts = [IDS[:2], IDS[:7], IDS[3:8]]
    follow = [[9, 10, 11, 12], [13, 14, 15, 16], [17, 18, 19, 20]]
    cache = ours.new_cache(3, 16)
    for row in (1, 0, 2):
        ours.prefill_row(prompts[row], cache, row)
    assert cache.host_lengths == [2, 7, 5] and cache.lengths.tolist() == [2, 7, 5]
    with pytest.raises(ValueError, match="^cache: rows have different lengths"):
        len(cache)
    with pytest.raises(ValueError, match="^cache: rows have different lengths"):
        cache.keys(0)
    got = [ours.decode_step([f[i] for f in follow], cache) for i in range(4)]
    for b in range(3):
        ref = numpy_model.logits_without_cache(prompts[b] + follow[b])[len(prompts[b]) :]
        for i in range(4):
            np.testing.assert_allclose(np_(got[i][b]), ref[i], atol=ATOL)
    # ragged forward with several new tokens per row
    more = ours.forward([[1, 2], [3, 4], [5, 6]], cache)
    for b, pair_ in enumerate([[1, 2], [3, 4], [5, 6]]):
        ref = numpy_model.logits_without_cache(prompts[b] + follow[b] + pair_)[-2:]
        np.testing.assert_allclose(np_(more[b]), ref, atol=ATOL)
    assert cache.host_lengths == [8, 13, 11]


def test_prefill_row_leaves_other_rows_untouched(model):
    cache = model.new_cache(3, 16)
    model.prefill([IDS[:5], IDS[5:10], IDS[2:7]], cache)
    model.decode_step([1, 2, 3], cache)
    before = snapshot(cache)
    cache.reset_row(1)
    assert cache.host_lengths == [6, 0, 6] and cache.lengths.tolist() == [6, 0, 6]
    logits = model.prefill_row(IDS[:9], cache, 1)
    assert logits.shape == (9, model.config.vocab_size)
    for b in (0, 2):
        assert torch.equal(cache.k_LBHMK[:, b], before[2][0][:, b])
        assert torch.equal(cache.v_LBHMK[:, b], before[2][1][:, b])
    assert cache.host_lengths == [6, 9, 6]
    fresh = model.new_cache(1, 16)
    torch.testing.assert_close(logits, model.prefill([IDS[:9]], fresh)[0], atol=ATOL, rtol=0)
    for layer in range(model.config.n_layers):
        torch.testing.assert_close(cache.keys(layer, row=1), fresh.keys(layer)[0], atol=ATOL, rtol=0)


def test_inactive_rows_are_not_advanced(model):
    cache = model.new_cache(3, 12)
    model.prefill_row(IDS[:3], cache, 0)
    model.prefill_row(IDS[:12], cache, 2)  # a full row
    before = snapshot(cache)
    logits = model.decode_step([7, 0, 0], cache, active=[True, False, False])
    assert cache.host_lengths == [4, 0, 12] and cache.lengths.tolist() == [4, 0, 12]
    assert torch.isnan(logits[1:]).all() and not torch.isnan(logits[0]).any()
    for b in (1, 2):
        assert torch.equal(cache.k_LBHMK[:, b], before[2][0][:, b])
    torch.testing.assert_close(logits[0], _alone(model, IDS[:3], [7])[0], atol=ATOL, rtol=0)


@pytest.mark.parametrize("kind", ["preallocated", "concat"])
def test_truncate_then_decode_equals_fresh(model, kind):
    cache = model.new_cache(2, kind=kind)
    model.prefill([IDS[:5], IDS[5:10]], cache)
    for t in (1, 2, 3):  # rejected drafts
        model.decode_step([t, t], cache)
    cache.truncate(5)
    assert len(cache) == 5
    got = [model.decode_step([t, t + 1], cache) for t in (30, 31)]
    fresh = model.new_cache(2, kind=kind)
    model.prefill([IDS[:5], IDS[5:10]], fresh)
    ref = [model.decode_step([t, t + 1], fresh) for t in (30, 31)]
    for a, b in zip(got, ref, strict=True):
        torch.testing.assert_close(a, b, atol=ATOL, rtol=0)


def test_truncate_one_row(model):
    cache = model.new_cache(2)
    model.prefill([IDS[:6], IDS[6:12]], cache)
    cache.truncate(3, row=0)
    assert cache.host_lengths == [3, 6]
    logits = model.decode_step([40, 41], cache)
    torch.testing.assert_close(logits[0], _alone(model, IDS[:3], [40])[0], atol=ATOL, rtol=0)
    torch.testing.assert_close(logits[1], _alone(model, IDS[6:12], [41])[0], atol=ATOL, rtol=0)


def test_preallocated_equals_concat(pair):
    _, ours = pair
    caches = [ours.new_cache(2, kind=k) for k in ("preallocated", "concat")]
    outs = [[ours.prefill([IDS[:4], IDS[4:8]], c)] for c in caches]
    for t in range(5):
        for out, c in zip(outs, caches, strict=True):
            out.append(ours.decode_step([t, t + 10], c))
    for a, b in zip(*outs, strict=True):
        torch.testing.assert_close(a, b, atol=ATOL, rtol=0)
    for layer in range(ours.config.n_layers):
        torch.testing.assert_close(caches[0].keys(layer), caches[1].keys(layer), atol=ATOL, rtol=0)


def test_cache_sizes(model):
    cfg = model.config
    prealloc = model.new_cache(3, 10)
    assert prealloc.k_LBHMK.shape == (cfg.n_layers, 3, cfg.n_kv_heads, 10, cfg.d_head)
    assert prealloc.batch_size == 3 and prealloc.capacity == 10 and prealloc.kind == "preallocated"
    assert isinstance(prealloc, TorchPreallocatedKVCache)
    assert prealloc.nbytes == 2 * cfg.n_layers * 3 * cfg.n_kv_heads * 10 * cfg.d_head * 4
    assert model.new_cache(1).capacity == cfg.max_seq_len
    concat = model.new_cache(3, 10, kind="concat")
    assert concat.nbytes == 0
    model.prefill([IDS[:4]] * 3, concat)
    assert concat.nbytes == 2 * cfg.n_layers * 3 * cfg.n_kv_heads * 4 * cfg.d_head * 4
    assert concat.capacity == 10 and concat.kind == "concat"


def test_check_cache_names_the_kind_it_wants(model):
    cache = model.new_cache(capacity=8)
    assert cache.batch_size == 1 and model.check_cache(cache) is cache
    assert model.check_cache(cache, kind="preallocated") is cache
    concat = model.new_cache(2, 8, kind="concat")
    with pytest.raises(
        ValueError,
        match=r"^cache: expected a kind='preallocated' cache, got a TorchConcatKVCache \(kind='concat'\)",
    ):
        model.check_cache(concat, kind="preallocated")


def test_the_fixed_shape_step_equals_the_step_functions(pair):
    """The fixed-shape step (what CUDA graphs replay) against a checked decode step through the
    step functions, on the same prefilled caches: the same logits, the same keys and values
    written, over the tightest key bucket and over the whole cache."""
    _, ours = pair
    mirror_c, fixed_c = (ours.new_cache(2, 20) for _ in range(2))
    for c in (mirror_c, fixed_c):
        ours.prefill([IDS[:5], IDS[5:10]], c)
    with torch.inference_mode():
        for t in range(3):
            ids_B = torch.tensor([t, t + 7])
            ref = ours.decode_step(ids_B, mirror_c)
            for n_keys in (fixed_c.host_lengths[0] + 1, 20):  # the tightest stretch, the whole cache
                got, plan = engine.decode_fixed(ours, ids_B, fixed_c, n_keys)
                torch.testing.assert_close(got, ref, atol=ATOL, rtol=0)
            fixed_c.advance(plan)  # the fixed step leaves the commit to its caller
    assert mirror_c.host_lengths == fixed_c.host_lengths == [8, 8]
    assert mirror_c.lengths.tolist() == fixed_c.lengths.tolist() == [8, 8]
    for layer in range(ours.config.n_layers):
        torch.testing.assert_close(fixed_c.keys(layer), mirror_c.keys(layer), atol=ATOL, rtol=0)
        torch.testing.assert_close(fixed_c.values(layer), mirror_c.values(layer), atol=ATOL, rtol=0)


def test_first_layers_is_a_layer_cut_model_sharing_the_weights(pair):
    numpy_model, ours = pair
    cut = ours.first_layers(1)
    assert cut.config.n_layers == 1 and ours.config.n_layers == numpy_model.config.n_layers
    assert cut.layers[0].w_qkv is ours.layers[0].w_qkv and cut.wte_VD is ours.wte_VD
    w = numpy_model.weights
    ref = kvtutor.GPT2Model(
        dataclasses.replace(numpy_model.config, n_layers=1),
        GPT2Weights(w.wte_VD, w.wpe_MD, w.layers[:1], w.lnf_g, w.lnf_b),
    )
    np.testing.assert_allclose(
        np_(cut.logits_without_cache([IDS]))[0], ref.logits_without_cache(IDS), atol=ATOL
    )
    cache = cut.new_cache(1)
    assert cache.n_layers == 1
    cut.prefill([IDS[:5]], cache)
    np.testing.assert_allclose(
        np_(cut.decode_step([IDS[5]], cache))[0], ref.logits_without_cache(IDS[:6])[-1], atol=ATOL
    )  # the fused step reads the cut model's layers only
    assert cut.generate([IDS[:3]], 5)[0].tolist() == ref.generate(IDS[:3], 5)
    with pytest.raises(ValueError, match=r"^n_layers: expected 1 <= n_layers <= "):
        ours.first_layers(0)


def test_compiled_decode_on_cpu_equals_decode_step(model):
    caches = [model.new_cache(2, 12) for _ in range(2)]
    for c in caches:
        model.prefill_row(IDS[:3], c, 0)
        model.prefill_row(IDS[:6], c, 1)
    step = model.compile_decode(caches[0], mode="cuda_graph")  # no graphs on the CPU: runs eagerly
    for t in (4, 5, 6):
        got = step(torch.tensor([t, t + 1])).clone()
        torch.testing.assert_close(got, model.decode_step([t, t + 1], caches[1]), atol=ATOL, rtol=0)
    assert caches[0].host_lengths == caches[1].host_lengths == [6, 9]
    assert caches[0].lengths.tolist() == [6, 9]
    before = snapshot(caches[0])
    with pytest.raises(ValueError, match="^ids_B: expected token ids in"):
        step([1, 99])
    with pytest.raises(ValueError, match="^ids_B: expected the cache's batch size 2"):
        step([1])
    assert_unchanged(before, caches[0])
    for _ in range(3):
        step([1, 1])
    before = snapshot(caches[0])
    with pytest.raises(ValueError, match="^ids_B: row 1 is full"):
        step([1, 1])
    assert_unchanged(before, caches[0])
    caches[0].reset_row(0)
    before = snapshot(caches[0])
    with pytest.raises(ValueError, match="^cache: expected prefilled rows, row 0 is empty"):
        step([1, 1])
    assert_unchanged(before, caches[0])


@pytest.mark.skipif(
    not env_flag("KVTUTOR_TEST_COMPILE"),
    reason="torch.compile on the CPU takes minutes: set KVTUTOR_TEST_COMPILE=1",
)
def test_compiled_decode_with_torch_compile_on_cpu(model):
    caches = [model.new_cache(2, 12) for _ in range(2)]
    for c in caches:
        model.prefill_row(IDS[:3], c, 0)
        model.prefill_row(IDS[:6], c, 1)
    step = model.compile_decode(caches[0], mode="compile")
    for t in (4, 5, 6):
        got = step([t, t + 1]).clone()
        torch.testing.assert_close(got, model.decode_step([t, t + 1], caches[1]), atol=ATOL, rtol=0)
    assert caches[0].host_lengths == caches[1].host_lengths == caches[0].lengths.tolist() == [6, 9]


def test_a_compiled_step_is_traced_once_per_bucket(model, monkeypatch):
    """``compile_decode(mode="compile")`` traces its step once per key bucket: the fixed plan's
    bookkeeping (the cache's epoch and lengths, which move at every step) is never traced, so no
    step's guards fail on it (they did: every step compiled again, up to torch's limit of 8).
    Traced with Dynamo's counting backend, which compiles nothing, so the test is quick."""
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()
    compile_ = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: compile_(fn, backend=counter, **kw))
    torch._dynamo.reset()
    caches = [model.new_cache(2, 12) for _ in range(2)]
    for c in caches:
        model.prefill_row(IDS[:3], c, 0)
        model.prefill_row(IDS[:6], c, 1)
    step = model.compile_decode(caches[0], mode="compile")
    torch.testing.assert_close(step([4, 5]).clone(), model.decode_step([4, 5], caches[1]), atol=ATOL, rtol=0)
    frames = counter.frame_count
    assert frames > 0  # the step was traced
    for t in (5, 6):
        got = step([t, t + 1]).clone()
        torch.testing.assert_close(got, model.decode_step([t, t + 1], caches[1]), atol=ATOL, rtol=0)
    assert counter.frame_count == frames  # the same bucket: nothing traced again
    torch._dynamo.reset()


# ---------------------------------------------------------------- errors leave the cache unchanged


def _filled(model, kind="preallocated"):
    cache = model.new_cache(2, 10, kind=kind)
    model.prefill([IDS[:4], IDS[4:8]], cache)
    return cache


BAD_FORWARD = [
    ([[1, 2], [3, 99]], ValueError, r"^ids_BT: expected token ids in \[0, 50\), got 99 at index \(1, 1\)"),
    ([[1, -1], [3, 4]], ValueError, r"^ids_BT: expected token ids in \[0, 50\), got -1"),
    ([1, 2], ValueError, r"^ids_BT: expected shape \[B, T\], got shape \[2\]"),
    ([[[1]], [[2]]], ValueError, r"^ids_BT: expected shape \[B, T\]"),
    ([[], []], ValueError, r"^ids_BT: expected at least one token"),
    ([[1.0], [2.0]], TypeError, r"^ids_BT: expected int token ids, got dtype float64"),
    ([[True], [False]], TypeError, r"^ids_BT: expected int token ids, got dtype bool"),
    (torch.tensor([[1.0], [2.0]]), TypeError, r"^ids_BT: expected int token ids, got dtype torch.float32"),
    (torch.tensor([[1], [50]]), ValueError, r"^ids_BT: expected token ids in \[0, 50\), got 50"),
    ("ab", TypeError, r"^ids_BT: expected int token ids"),
    ([[1, 2], [3]], ValueError, r"^ids_BT: expected a rectangular"),
    ([[1, 2, 3]], ValueError, r"^ids_BT: expected the cache's batch size 2, got 1 rows"),
    ([[1] * 7] * 2, ValueError, r"^ids_BT: 7 new tokens after 4 cached ones exceed the cache capacity 10"),
]


@pytest.mark.parametrize("kind", ["preallocated", "concat"])
@pytest.mark.parametrize(("ids", "error", "match"), BAD_FORWARD)
def test_bad_forward_leaves_cache_unchanged(model, kind, ids, error, match):
    cache = _filled(model, kind)
    before = snapshot(cache)
    with pytest.raises(error, match=match):
        model.forward(ids, cache)
    assert_unchanged(before, cache)


BAD_DECODE = [
    (dict(ids_B=[1, 50]), ValueError, r"^ids_B: expected token ids in \[0, 50\), got 50 at index \(1,\)"),
    (dict(ids_B=[[1], [2]]), ValueError, r"^ids_B: expected shape \[B\], got shape \[2, 1\]"),
    (dict(ids_B=[]), ValueError, r"^ids_B: expected at least one token"),
    (dict(ids_B=[1.5, 2.0]), TypeError, r"^ids_B: expected int token ids, got dtype float64"),
    (dict(ids_B=[1, 2, 3]), ValueError, r"^ids_B: expected the cache's batch size 2, got 3 rows"),
    (dict(ids_B=[1, 2], active=[1, 0]), TypeError, r"^active: expected a bool mask"),
    (dict(ids_B=[1, 2], active=[True]), ValueError, r"^active: expected shape \[2\], got \[1\]"),
    (dict(ids_B=[1, 2], active=[False, False]), ValueError, r"^active: expected at least one active row"),
]


@pytest.mark.parametrize(("kwargs", "error", "match"), BAD_DECODE)
def test_bad_decode_leaves_cache_unchanged(model, kwargs, error, match):
    cache = _filled(model)
    before = snapshot(cache)
    with pytest.raises(error, match=match):
        model.decode_step(cache=cache, **kwargs)
    assert_unchanged(before, cache)


def test_decode_errors_that_depend_on_the_cache(model):
    cache = model.new_cache(2, 5)
    before = snapshot(cache)
    with pytest.raises(ValueError, match="^cache: expected prefilled rows for decode_step, row 0 is empty"):
        model.decode_step([1, 2], cache)
    assert_unchanged(before, cache)
    model.prefill_row(IDS[:5], cache, 1)
    before = snapshot(cache)
    with pytest.raises(
        ValueError, match="^ids_B: 1 new tokens after 5 cached ones exceed the cache capacity 5"
    ):
        model.decode_step([1, 2], cache, active=np.array([False, True]))
    assert_unchanged(before, cache)
    with pytest.raises(TypeError, match="^cache: expected a cache from TorchGPT2Model.new_cache"):
        model.decode_step([1, 2], None)
    with pytest.raises(TypeError, match=r"^cache: expected a KV cache \(model.new_cache\(\), or a cache of"):
        model.decode_step([1], {"k": [], "v": []})
    numpy_twin = _models("gqa")[0].new_cache()  # a NumPy cache, of this very shape
    with pytest.raises(
        TypeError, match=r"^cache: this PreallocatedKVCache holds NumPy arrays, and a TorchGPT2"
    ):
        model.decode_step([1], numpy_twin)
    other = _models("mha")[1].new_cache(2)
    with pytest.raises(ValueError, match=r"^cache: expected \(layers, kv heads, head dim\) = "):
        model.decode_step([1, 2], other)
    half = kvtutor.TorchGPT2Model.from_numpy(_models("gqa")[0], device="cpu", dtype=torch.bfloat16)
    with pytest.raises(
        ValueError, match=r"^cache: this TorchPreallocatedKVCache holds torch.bfloat16 on cpu, the"
    ):
        model.decode_step([1], half.new_cache())


def test_bad_prefill_row_leaves_cache_unchanged(model):
    cache = _filled(model)
    cache.reset_row(0)
    before = snapshot(cache)
    cases = [
        (
            dict(ids_T=IDS[:3], row=1),
            ValueError,
            r"^row: expected an empty row \(reset_row it first\), row 1 holds 4",
        ),
        (dict(ids_T=IDS[:3], row=2), ValueError, r"^row: expected 0 <= row < 2, got 2"),
        (dict(ids_T=IDS[:3], row=0.0), TypeError, r"^row: expected an int"),
        (dict(ids_T=[IDS[:3]], row=0), ValueError, r"^ids_T: expected shape \[T\], got shape \[1, 3\]"),
        (dict(ids_T=[60], row=0), ValueError, r"^ids_T: expected token ids in \[0, 50\)"),
        (dict(ids_T=[1] * 11, row=0), ValueError, r"^ids_T: 11 new tokens after 0 cached ones exceed"),
    ]
    for kwargs, error, match in cases:
        with pytest.raises(error, match=match):
            model.prefill_row(cache=cache, **kwargs)
        assert_unchanged(before, cache)


def test_bad_cache_operations_leave_cache_unchanged(model):
    cache = _filled(model)
    cache.truncate(2, row=1)
    before = snapshot(cache)
    cases = [
        (
            lambda: cache.truncate(3),
            ValueError,
            r"^length: expected 0 <= length <= 2 \(every row's length\), got 3",
        ),
        (
            lambda: cache.truncate(5, row=0),
            ValueError,
            r"^length: expected 0 <= length <= 4 \(row 0's length\)",
        ),
        (lambda: cache.truncate(-1), ValueError, r"^length: expected 0 <= length"),
        (lambda: cache.truncate(1.0), TypeError, r"^length: expected an int"),
        (lambda: cache.reset_row(-1), ValueError, r"^row: expected 0 <= row < 2, got -1"),
        (lambda: cache.keys(2), ValueError, r"^layer: expected 0 <= layer < 2, got 2"),
        (lambda: cache.values(0, row=True), TypeError, r"^row: expected an int"),
        (lambda: model.compile_decode(cache, mode="jit"), ValueError, r"^mode: expected one of"),
    ]
    for call, error, match in cases:
        with pytest.raises(error, match=match):
            call()
        assert_unchanged(before, cache)
    concat = _filled(model, "concat")
    before = snapshot(concat)
    for call in (
        lambda: concat.reset_row(0),
        lambda: concat.truncate(1, row=1),
        lambda: model.prefill_row(IDS[:2], concat, 0),
        lambda: model.decode_step([1, 2], concat, active=[True, False]),
        lambda: model.compile_decode(concat),
    ):
        with pytest.raises(ValueError, match="^(row|active|cache): .*(concat|preallocated)"):
            call()
        assert_unchanged(before, concat)


def test_bad_constructor_and_cache_arguments(model):
    cases = [
        (lambda: model.new_cache(0), ValueError, r"^batch_size: expected an int >= 1, got 0"),
        (
            lambda: model.new_cache("concat"),
            TypeError,
            r"^batch_size: expected an int, got str 'concat' \(the kind is a keyword argument",
        ),
        (lambda: model.new_cache(1.0), TypeError, r"^batch_size: expected an int"),
        (
            lambda: model.new_cache(1, 25),
            ValueError,
            r"^capacity: expected 1 <= capacity <= 24, got 25",
        ),
        (
            lambda: model.new_cache(1, kind="paged"),
            ValueError,
            r"^kind: expected one of \['concat', 'preallocated'\]",
        ),
        (lambda: model.generate([IDS[:3]], 30), ValueError, r"^max_new_tokens: prompt of 3 \+ 30 new tokens"),
        (lambda: model.generate([IDS[:3]], 2.0), TypeError, r"^max_new_tokens: expected an int"),
        (lambda: model.generate(IDS[:3], 2), ValueError, r"^ids_BT: expected shape \[B, T\]"),
        (lambda: model.generate([IDS[:3]], 2, cache_kind="x"), ValueError, r"^cache_kind: expected one of"),
        (
            lambda: model.logits_without_cache([[1] * 25]),
            ValueError,
            r"^ids_BT: 25 tokens exceed max_seq_len 24",
        ),
        (lambda: model.prefill([[1]], None), TypeError, r"^cache: expected a cache"),
        (lambda: kvtutor.TorchGPT2Model.random("cfg"), TypeError, r"^config: expected a kvtutor.GPT2Config"),
        (
            lambda: kvtutor.TorchGPT2Model.from_numpy(model),
            TypeError,
            r"^numpy_model: expected a kvtutor.GPT2Model",
        ),
        (
            lambda: kvtutor.TorchGPT2Model.random(CONFIGS["mha"], dtype=torch.int32),
            TypeError,
            r"^dtype: expected a floating",
        ),
        (
            lambda: kvtutor.TorchGPT2Model.random(CONFIGS["mha"], dtype="int8"),
            TypeError,
            r"^dtype: expected a floating",
        ),
        (
            lambda: kvtutor.TorchGPT2Model.random(CONFIGS["mha"], dtype="fp9"),
            ValueError,
            r"^dtype: expected one of",
        ),
        (
            lambda: kvtutor.TorchGPT2Model.random(CONFIGS["mha"], device="gpu"),
            ValueError,
            r"^device: expected",
        ),
    ]
    if not torch.cuda.is_available():
        cases.append(
            (
                lambda: kvtutor.TorchGPT2Model.random(CONFIGS["mha"], device="cuda"),
                ValueError,
                r"^device: .*not available",
            )
        )
    for call, error, match in cases:
        with pytest.raises(error, match=match):
            call()


# ---------------------------------------------------------------- CUDA only


@pytest.fixture(scope="module")
def cuda_pair():
    numpy_model = kvtutor.GPT2Model.random(CONFIGS["gqa"], seed=4)
    return numpy_model, kvtutor.TorchGPT2Model.from_numpy(numpy_model, device="cuda", dtype=torch.float32)


@cuda_only
def test_cuda_defaults_to_bf16():
    model = kvtutor.TorchGPT2Model.random(CONFIGS["mha"])
    assert model.device.type == "cuda" and model.dtype == torch.bfloat16
    assert model.generate([IDS[:3]], 4).device.type == "cuda"


@cuda_only
def test_cuda_matches_numpy(cuda_pair):
    numpy_model, ours = cuda_pair
    ref = numpy_model.logits_without_cache(IDS)
    cache = ours.new_cache(1)
    np.testing.assert_allclose(np_(ours.prefill([IDS[:5]], cache))[0], ref[:5], atol=1e-4)
    for i in range(5, 8):
        np.testing.assert_allclose(np_(ours.decode_step([IDS[i]], cache))[0], ref[i], atol=1e-4)
    assert ours.generate([IDS[:3]], 10)[0].tolist() == numpy_model.generate(IDS[:3], 10)


@cuda_only
@pytest.mark.parametrize("mode", ["cuda_graph", "compile"])
def test_cuda_fast_decode_gives_the_same_tokens(cuda_pair, mode):
    _, ours = cuda_pair
    prompts = [IDS[:3], IDS[3:8]]
    cache = ours.new_cache(2, 20)
    for row, p in enumerate(prompts):
        ours.prefill_row(p, cache, row)
    ref_cache = ours.new_cache(2, 20)
    for row, p in enumerate(prompts):
        ours.prefill_row(p, ref_cache, row)
    step = ours.compile_decode(cache, mode=mode)
    assert cache.host_lengths == [3, 5] and cache.lengths.tolist() == [3, 5]  # capture changed nothing
    tok, ref_tok = torch.tensor([1, 2], device="cuda"), torch.tensor([1, 2], device="cuda")
    for _ in range(8):
        tok = step(tok, check=False).argmax(-1)
        ref_tok = ours.decode_step(ref_tok, ref_cache).argmax(-1)
        assert torch.equal(tok, ref_tok)
    assert cache.host_lengths == ref_cache.host_lengths == cache.lengths.tolist()
    for layer in range(ours.config.n_layers):
        for row in range(2):
            torch.testing.assert_close(
                cache.keys(layer, row), ref_cache.keys(layer, row), atol=1e-5, rtol=1e-5
            )


@cuda_only
def test_cuda_graph_bf16_close_to_decode_step():
    model = kvtutor.TorchGPT2Model.random(CONFIGS["mha"], seed=5)
    caches = [model.new_cache(1, 16) for _ in range(2)]
    for c in caches:
        model.prefill(torch.tensor([IDS[:4]], device="cuda"), c)
    step = model.compile_decode(caches[0])
    for t in IDS[4:10]:
        got = step(torch.tensor([t], device="cuda"), check=False).float()
        ref = model.decode_step([t], caches[1]).float()
        torch.testing.assert_close(got, ref, atol=0.05, rtol=0.05)  # bf16, different attention kernels
    assert caches[0].host_lengths == caches[1].host_lengths == [10]


def test_repr_fits_the_text_width_and_names_config_device_and_dtype():
    cfg = kvtutor.GPT2Config(vocab_size=50257, d_model=24, n_heads=12, n_layers=1, max_seq_len=1024)
    lines = repr(kvtutor.TorchGPT2Model.random(cfg, device="cpu")).splitlines()
    assert len(lines) > 1 and max(map(len, lines)) <= kvtutor.text.TEXT_WIDTH
    assert (
        " ".join(line.strip() for line in lines)
        == f"TorchGPT2Model({cfg!r}, device=cpu, dtype=torch.float32)"
    )


def test_a_fixed_plan_is_checked_on_the_host_and_commits_only_what_was_written():
    """``fixed_plan`` refuses a bucket that a row's next token would fall outside of (the old
    ``decode_fixed`` with too few keys overwrote a cached slot); a count is no plan; a fixed plan
    is committed once per write, and never past the capacity."""
    model = kvtutor.TorchGPT2Model.random(CONFIGS["mha"], device="cpu")
    cache = model.new_cache(2, 4)
    model.prefill([[1, 2, 3], [4, 5, 6]], cache)
    before = snapshot(cache)
    for n_keys, match in (
        (3, r"^n_keys: expected more than the longest row's 3 cached tokens"),
        (0, r"^n_keys: expected 1 <= n_keys <= 4, got 0"),
        (5, r"^n_keys: expected 1 <="),
    ):
        with pytest.raises(ValueError, match=match):
            engine.decode_fixed(model, torch.tensor([1, 2]), cache, n_keys)
        assert_unchanged(before, cache)
    with pytest.raises(TypeError, match=r"^plan: expected a Plan from this cache's plan\(\), got int"):
        cache.advance(1)
    _, plan = engine.decode_fixed(model, torch.tensor([1, 2]), cache, 4)
    cache.advance(plan)
    assert cache.host_lengths == [4, 4] and cache.lengths.tolist() == [4, 4]
    with pytest.raises(ValueError, match=r"^plan: layers \[0, 1\] were not written under this plan"):
        cache.advance(plan)  # a second commit with no replay in between
    full = r"^plan: 1 new tokens after 4 cached ones exceed the cache capacity 4"
    with pytest.raises(ValueError, match=full):
        plan.replayed()  # as if the graph ran again: the rows are full now, refused before
    plan.written = [True] * cache.n_layers  # a replay that ran anyway: the commit refuses it too
    with pytest.raises(ValueError, match=full):
        cache.advance(plan)
    assert cache.host_lengths == [4, 4] and cache.lengths.tolist() == [4, 4]


def test_a_fixed_plan_writes_where_the_ragged_plan_would():
    """``fixed_plan`` (the CUDA-graph step's) and ``plan`` agree on the slots a decode step writes."""
    model = kvtutor.TorchGPT2Model.random(CONFIGS["mha"], device="cpu")
    cache = model.new_cache(2, 8)
    model.prefill_row([1, 2, 3], cache, 0)
    model.prefill_row([4, 5], cache, 1)
    fixed, ragged = cache.fixed_plan(8), cache.plan(1)
    assert torch.equal(fixed.write_idx, ragged.write_idx)
    assert torch.equal(fixed.mask[..., :4], ragged.mask)
    saved = cache.save_slots(fixed)
    cache.k_flat[0].index_fill_(0, fixed.write_idx, 7.0)
    cache.restore_slots(saved)
    assert torch.equal(cache.k_flat[0][fixed.write_idx], saved.rows[0][0])
    other = model.new_cache(2, 8)
    with pytest.raises(
        ValueError, match=r"^saved: expected slots saved from this cache, got another cache's"
    ):
        other.restore_slots(saved)  # refused before any layer is written
    with pytest.raises(TypeError, match=r"^saved: expected what save_slots\(\) returned, got list"):
        cache.restore_slots([])
