"""The PyTorch Llama-style model: parity with the NumPy ``LlamaModel`` (float64 and float32) and with
transformers' ``LlamaForCausalLM`` (small random configs, no downloads), rotated keys in the cache,
ragged batches with RoPE per row, cached == uncached over random configs (MHA, GQA, MQA), bf16, and
every error path leaving the cache unchanged. CPU; the CUDA tests run only where a GPU is present."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from test_llama import HF_CONFIGS, IDS, llama_and_tokens, make_hf  # noqa: E402
from test_torch_model import assert_unchanged, snapshot  # noqa: E402

import kvtutor  # noqa: E402
from kvtutor.caches.torch_kv import TorchKVCache  # noqa: E402
from kvtutor.models import llama  # noqa: E402
from kvtutor.models import torch_llama as tl  # noqa: E402
from kvtutor.models.gpt2 import split_heads as np_split_heads  # noqa: E402
from kvtutor.models.llama import LlamaConfig, LlamaModel  # noqa: E402
from kvtutor.models.torch_llama import TorchLlamaModel  # noqa: E402

TOKENS = [
    3,
    1,
    4,
    1,
    5,
    9,
    2,
    6,
    5,
    3,
    5,
    8,
]  # for the small models' vocabulary of 30 (IDS: transformers' 61)
cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

# max |diff| seen on this CPU (AMD EPYC) when these were written, and the bounds asserted
F64 = dict(atol=1e-11, rtol=0)  # vs NumPy float64: 4e-15
F32 = dict(atol=2e-5, rtol=0)  # vs NumPy float32: 4e-6 (logits of size ~3)
HF32 = dict(atol=1e-4, rtol=1e-4)  # vs transformers float32: 1.2e-6
HF64 = dict(atol=1e-5, rtol=0)  # vs transformers float64: 6e-7 (transformers turns RoPE in float32)
BF16 = 0.15  # bf16 vs float32 references: ~0.04 (logits of size ~2.5)


def np_(t) -> np.ndarray:
    return t.detach().cpu().double().numpy()


def small(dtype=torch.float32, np_dtype=np.float32, **kwargs) -> tuple[LlamaModel, TorchLlamaModel]:
    """A 2-layer GQA model (4 query heads on 2 KV heads, fast-turning RoPE), NumPy and torch."""
    cfg = LlamaConfig(vocab_size=30, d_model=16, n_heads=4, n_layers=2, max_seq_len=16, d_ff=24,
                      n_kv_heads=2, rope_theta=100.0, **kwargs)  # fmt: skip
    numpy_model = LlamaModel.random(cfg, seed=3, dtype=np_dtype, std=0.4)
    return numpy_model, TorchLlamaModel.from_numpy(numpy_model, device="cpu", dtype=dtype)


@pytest.fixture(scope="module")
def pair64():
    return small(torch.float64, np.float64)


@pytest.fixture(scope="module")
def model():
    return small()[1]


# ---------------------------------------------------------------- parity with the NumPy twin


@pytest.mark.parametrize(("dtype", "np_dtype", "tol"), [(torch.float64, np.float64, F64),
                                                        (torch.float32, np.float32, F32)])  # fmt: skip
@pytest.mark.parametrize("kind", ["preallocated", "concat"])
def test_logits_and_cache_equal_numpy(dtype, np_dtype, tol, kind):
    numpy_model, ours = small(dtype, np_dtype)
    ids = TOKENS
    ref = numpy_model.logits_without_cache(ids)
    np.testing.assert_allclose(np_(ours.logits_without_cache([ids]))[0], ref, **tol)
    cache, ref_cache = ours.new_cache(1, kind=kind), numpy_model.new_cache()
    got = [np_(ours.prefill([ids[:4]], cache))[0]]
    got += [np_(ours.decode_step([t], cache)) for t in ids[4:8]]
    got += [np_(ours.forward([ids[8:]], cache))[0]]  # T > 1 after cached ones: shifted mask, RoPE rows
    np.testing.assert_allclose(np.concatenate(got), ref, **tol)
    numpy_model.prefill(ids, ref_cache)
    for layer in range(ours.config.n_layers):  # the rotated keys, as the NumPy twin stores them
        np.testing.assert_allclose(np_(cache.keys(layer))[0], ref_cache.keys(layer), **tol)
        np.testing.assert_allclose(np_(cache.values(layer, row=0)), ref_cache.values(layer), **tol)
    assert ours.generate([ids[:3]], 10, cache_kind=kind)[0].tolist() == numpy_model.generate(ids[:3], 10)


def test_steps_equal_numpy_steps():
    rng = np.random.default_rng(0)
    x_BHTK = rng.standard_normal((2, 3, 5, 6))
    pos_B = torch.tensor([0, 7])
    cos_MK, sin_MK = tl.rope_tables(range(16), 6, 10.0, torch.float64)
    cos_BTK, sin_BTK = tl.rope_at(cos_MK, sin_MK, pos_B, 5)  # ragged: each row from its own position
    got = np_(tl.apply_rope(torch.from_numpy(x_BHTK), cos_BTK, sin_BTK))
    for b, start in enumerate(pos_B.tolist()):
        np.testing.assert_allclose(got[b], llama.apply_rope(x_BHTK[b], range(start, start + 5), 10.0), **F64)
    one_cos, one_sin = tl.rope_at(cos_MK, sin_MK, 7, 5)  # one start for every row: a slice
    assert (
        one_cos.shape == (1, 5, 6)
        and torch.equal(one_cos[0], cos_BTK[1])
        and torch.equal(one_sin[0], sin_BTK[1])
    )
    x_HTK = torch.from_numpy(x_BHTK[0])
    assert torch.equal(tl.rotate_half(x_HTK[None])[0], torch.from_numpy(llama.rotate_half(x_BHTK[0])))
    g_D = rng.standard_normal(6)
    np.testing.assert_allclose(
        np_(tl.rms_norm(x_HTK, torch.from_numpy(g_D), 1e-5)), llama.rms_norm(x_BHTK[0], g_D, 1e-5), **F64
    )
    half = tl.rms_norm(x_HTK.to(torch.bfloat16), torch.ones(6, dtype=torch.bfloat16))
    assert half.dtype == torch.bfloat16  # the mean square taken in float32, the result in bf16
    numpy_model, ours = small(torch.float64, np.float64)
    x_BTD = rng.standard_normal((1, 3, 16))
    np.testing.assert_allclose(
        np_(tl.swiglu(torch.from_numpy(x_BTD), ours.layers[0]))[0],
        llama.swiglu(x_BTD[0], numpy_model.weights.layers[0]),
        **F64,
    )


def test_construction_keeps_the_numpy_models_weights(pair64):
    numpy_model, ours = pair64
    assert ours.n_params == numpy_model.n_params == ours.config.n_params
    assert ours.nbytes == 8 * ours.config.n_params and not ours.tied
    w, ly = numpy_model.weights, ours.layers[0]
    np.testing.assert_array_equal(np_(ly.w_q), w.layers[0].w_q)
    np.testing.assert_array_equal(np_(ly.w_up), w.layers[0].w_up)
    # laid out as GPT-2's (``torch_weights.row_major``: along the longer side on a CPU), every
    # weight in the one arena, the projections views of the fused matrices
    for mat in (ly.w_qkv, ly.w_o, ly.w_gate_up, ly.w_down):
        assert (mat if ours.row_major(*mat.shape) else mat.mT).is_contiguous()
    assert ours.row_major(*ly.w_qkv.shape) and not ours.row_major(*ly.w_down.shape)
    arena = {t.untyped_storage().data_ptr() for _, t in ours._named_weights()}
    assert len(arena) == 1 and ly.w_k.untyped_storage().data_ptr() in arena
    assert not ly.b_qkv.any() and not ly.b_down.any()  # Llama has no biases: zeros for the mirror's linear
    assert not np.shares_memory(np_(ours.wte_VD), w.wte_VD)  # a copy: nothing shared with the NumPy model
    sd = {k: v.numpy() for k, v in ours.to_state_dict().items()}  # arrays: read in float64 as they are
    again = TorchLlamaModel.from_state_dict(sd, ours.config, "cpu", torch.float64)
    assert torch.equal(again.logits_without_cache([TOKENS[:9]]), ours.logits_without_cache([TOKENS[:9]]))
    drawn = TorchLlamaModel.random(ours.config, seed=3, device="cpu", dtype=torch.float64, std=0.4)
    assert torch.equal(drawn.logits_without_cache([TOKENS[:9]]), ours.logits_without_cache([TOKENS[:9]]))
    text = repr(ours)
    assert text.startswith("TorchLlamaModel(LlamaConfig(") and "dtype=torch.float64" in text
    assert all(len(line) <= 78 for line in text.splitlines())


def test_state_dict_round_trip_in_float32(model):
    again = TorchLlamaModel.from_state_dict(model.to_state_dict(), model.config, "cpu")
    assert torch.equal(again.logits_without_cache([TOKENS]), model.logits_without_cache([TOKENS]))


def test_tied_head_is_the_embedding():
    numpy_model, ours = small(tie_word_embeddings=True)
    assert ours.tied and ours.head_VD is ours.wte_VD
    assert ours.n_params == numpy_model.n_params
    sd = ours.to_state_dict()
    assert sd["lm_head.weight"] is sd["model.embed_tokens.weight"]


# ---------------------------------------------------------------- parity with transformers


@pytest.fixture(scope="module", params=sorted(HF_CONFIGS))
def hf_pair(request):
    hf = make_hf(**HF_CONFIGS[request.param])
    return hf, TorchLlamaModel.from_state_dict(hf.state_dict(), hf.config.to_dict(), device="cpu")


def hf_run(hf, ids_BT):
    """transformers' logits [B,T,V] and its cache for a batch of equal-length rows."""
    with torch.no_grad():
        out = hf(torch.as_tensor(ids_BT), use_cache=True)
    return out.logits, out["cache"] if "cache" in out else out["past_key_values"]


def test_same_logits_and_rotated_keys_as_transformers(hf_pair):
    hf, ours = hf_pair
    ids = torch.tensor([IDS, IDS[::-1]])
    ref, past = hf_run(hf, ids)
    torch.testing.assert_close(ours.logits_without_cache(ids), ref, **HF32)
    cache = ours.new_cache(2)
    got = [ours.prefill(ids[:, :4], cache)] + [
        ours.decode_step(ids[:, i], cache)[:, None] for i in range(4, 11)
    ]
    torch.testing.assert_close(torch.cat(got, dim=1), ref, **HF32)
    for layer in range(ours.config.n_layers):  # [B, Hkv, S, K] each: keys after RoPE, values
        torch.testing.assert_close(cache.keys(layer), past.layers[layer].keys, **HF32)
        torch.testing.assert_close(cache.values(layer), past.layers[layer].values, **HF32)


def test_same_logits_as_transformers_in_float64(hf_pair):
    hf64 = copy.deepcopy(hf_pair[0]).double()
    ours = TorchLlamaModel.from_state_dict(hf64.state_dict(), hf64.config.to_dict(), "cpu", torch.float64)
    ref, _ = hf_run(hf64, [IDS])
    torch.testing.assert_close(ours.logits_without_cache([IDS]), ref, **HF64)


def test_same_greedy_tokens_as_transformers(hf_pair):
    hf, ours = hf_pair
    prompts = torch.tensor([IDS[:4], IDS[4:8], IDS[7:11]])
    with torch.no_grad():
        out = hf.generate(
            prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=16, min_new_tokens=16,
            do_sample=False, pad_token_id=0,
        )  # fmt: skip
    assert torch.equal(ours.generate(prompts, 16), out[:, 4:])
    assert torch.equal(ours.generate(prompts, 16, cache_kind="concat"), out[:, 4:])


def test_ragged_rows_match_transformers_row_by_row(hf_pair):
    """Rows prefilled to different lengths, then decoded together: each row's tokens are turned for
    its own positions, so each row's logits are transformers' for that sequence alone."""
    hf, ours = hf_pair
    seqs = [IDS[:2] + [7, 8, 9], IDS[:7] + [1, 2, 3], IDS[3:8] + [4, 5, 6]]  # prompts of 2, 7, 5, then 3 each
    cache = ours.new_cache(3, 12)
    for row in (1, 0, 2):
        ours.prefill_row(seqs[row][: len(seqs[row]) - 3], cache, row)
    got = [ours.decode_step([s[-3 + i] for s in seqs], cache) for i in range(3)]
    assert cache.host_lengths == [5, 10, 8]
    for b, seq in enumerate(seqs):
        ref, past = hf_run(hf, [seq])
        torch.testing.assert_close(torch.stack([g[b] for g in got]), ref[0, -3:], **HF32)
        for layer in range(ours.config.n_layers):
            torch.testing.assert_close(cache.keys(layer, row=b), past.layers[layer].keys[0], **HF32)


def test_bf16_runs_within_tolerance(hf_pair):
    hf, ours = hf_pair
    sd, cfg = hf.state_dict(), hf.config.to_dict()
    half = TorchLlamaModel.from_state_dict(sd, cfg, device="cpu", dtype="bf16")
    assert half.dtype == torch.bfloat16 and half.cos_MK.dtype == torch.bfloat16
    cache = half.new_cache(2)
    assert cache.k_LBHMK.dtype == torch.bfloat16
    ids = torch.tensor([IDS, IDS[::-1]])
    ref, _ = hf_run(hf, ids)
    got = torch.cat([half.prefill(ids[:, :5], cache)] + [half.decode_step(ids[:, i], cache)[:, None]
                                                         for i in range(5, 11)], dim=1)  # fmt: skip
    assert got.dtype == torch.bfloat16
    assert (got.double() - ref.double()).abs().max() < BF16
    assert (half.logits_without_cache(ids).double() - ref.double()).abs().max() < BF16
    assert half.generate(ids[:, :3], 5).shape == (2, 5)


# ---------------------------------------------------------------- properties over random configs


@st.composite
def torch_llama_and_tokens(draw):
    """``test_llama``'s random configs (MHA, GQA, MQA; tied or not; RoPE bases 10 to 10000), the
    model in float64, a sequence and a split into a prompt and chunks fed through the cache."""
    numpy_model, ids, n_prompt = draw(llama_and_tokens())
    numpy_model = LlamaModel.from_state_dict(  # float32 weights, computed in float64
        numpy_model.to_state_dict(), numpy_model.config, np.float64
    )
    ours = TorchLlamaModel.from_numpy(numpy_model, device="cpu", dtype=torch.float64)
    chunks, i = [], n_prompt
    while i < len(ids):
        n = draw(st.integers(1, len(ids) - i))
        chunks.append(ids[i : i + n])
        i += n
    return ours, numpy_model, ids, n_prompt, chunks


@settings(max_examples=20, deadline=None)
@given(torch_llama_and_tokens(), st.sampled_from(["preallocated", "concat"]))
def test_cached_equals_uncached_at_every_position(case, kind):
    ours, numpy_model, ids, n_prompt, chunks = case
    cache = ours.new_cache(2, kind=kind)  # two rows: the sequence and its reverse
    rows = [ids, ids[::-1]]
    got = [ours.prefill([r[:n_prompt] for r in rows], cache)]
    i = n_prompt
    for chunk in chunks:
        n = len(chunk)
        step = [r[i : i + n] for r in rows]
        got.append(
            ours.decode_step([s[0] for s in step], cache)[:, None] if n == 1 else ours.forward(step, cache)
        )
        i += n
    want = ours.logits_without_cache(rows)
    torch.testing.assert_close(torch.cat(got, dim=1), want, **F64)
    whole = ours.new_cache(2)
    ours.prefill(rows, whole)
    for layer in range(ours.config.n_layers):  # the same rotated keys, however the tokens came in
        torch.testing.assert_close(cache.keys(layer), whole.keys(layer), **F64)
        torch.testing.assert_close(cache.values(layer), whole.values(layer), **F64)
    n_new = ours.config.max_seq_len - n_prompt + 1  # greedy tokens up to the last position: the NumPy twin's
    assert ours.generate([ids[:n_prompt]], n_new)[0].tolist() == numpy_model.generate(ids[:n_prompt], n_new)
    np.testing.assert_allclose(np_(want[0]), numpy_model.logits_without_cache(ids), **F64)


@settings(max_examples=10, deadline=None)
@given(torch_llama_and_tokens())
def test_preallocated_equals_concat(case):
    ours, _, ids, n_prompt, _ = case
    caches = [ours.new_cache(1, kind=k) for k in ("preallocated", "concat")]
    outs = [
        [ours.prefill([ids[:n_prompt]], c)] + [ours.decode_step([t], c) for t in ids[n_prompt:]]
        for c in caches
    ]
    for a, b in zip(*outs, strict=True):
        torch.testing.assert_close(a, b, **F64)
    for layer in range(ours.config.n_layers):
        torch.testing.assert_close(caches[0].keys(layer), caches[1].keys(layer), **F64)
        torch.testing.assert_close(caches[0].values(layer), caches[1].values(layer), **F64)


@st.composite
def ragged_batch(draw):
    """A model, 2 to 4 prompts of different lengths and the same number of tokens to decode after each."""
    ours = draw(torch_llama_and_tokens())[0]
    cfg = ours.config
    n_rows = draw(st.integers(2, 4))
    n_decode = draw(st.integers(1, max(1, cfg.max_seq_len // 3)))
    token = st.integers(0, cfg.vocab_size - 1)
    most = max(1, cfg.max_seq_len - n_decode)
    prompts = [draw(st.lists(token, min_size=1, max_size=most)) for _ in range(n_rows)]
    follow = [draw(st.lists(token, min_size=n_decode, max_size=n_decode)) for _ in range(n_rows)]
    return ours, prompts, follow


@settings(max_examples=12, deadline=None)
@given(ragged_batch(), st.randoms(use_true_random=False))
def test_ragged_batch_equals_each_row_alone(case, rnd):
    ours, prompts, follow = case
    cache = ours.new_cache(len(prompts))
    order = list(range(len(prompts)))
    rnd.shuffle(order)
    for row in order:  # rows filled one at a time, in any order
        ours.prefill_row(prompts[row], cache, row)
    got = [ours.decode_step([f[i] for f in follow], cache) for i in range(len(follow[0]))]
    for b, (prompt, tokens) in enumerate(zip(prompts, follow, strict=True)):
        alone = ours.new_cache(1)
        ours.prefill([prompt], alone)
        for i, t in enumerate(tokens):
            torch.testing.assert_close(got[i][b], ours.decode_step([t], alone)[0], **F64)
        for layer in range(ours.config.n_layers):
            torch.testing.assert_close(cache.keys(layer, row=b), alone.keys(layer)[0], **F64)
            torch.testing.assert_close(cache.values(layer, row=b), alone.values(layer)[0], **F64)


def test_every_stored_key_is_turned_for_its_rows_position(pair64):
    """Layer 0's key for a token depends only on the token (RMSNorm of its embedding, W_K): the key
    stored at row b, slot s is that raw key turned for position s, in every row of a ragged batch."""
    numpy_model, ours = pair64
    cfg, w = ours.config, numpy_model.weights
    seqs = [[5, 9, 2], [7, 1, 1, 4, 6, 3, 8], [2, 2, 2, 2, 2]]
    cache = ours.new_cache(3)
    for row, seq in enumerate(seqs):
        ours.prefill_row(seq[:-2], cache, row)
    for i in (2, 1):
        ours.decode_step([s[-i] for s in seqs], cache)
    for b, seq in enumerate(seqs):
        x_TD = llama.rms_norm(w.wte_VD[seq], w.layers[0].attn_norm_D, cfg.rms_norm_eps)
        raw_HTK = np_split_heads(x_TD @ w.layers[0].w_k, cfg.n_kv_heads)
        want_HTK = llama.apply_rope(raw_HTK, np.arange(len(seq)), cfg.rope_theta)
        np.testing.assert_allclose(np_(cache.keys(0, row=b)), want_HTK, **F64)
        assert np.abs(np_(cache.keys(0, row=b))[:, 1:] - raw_HTK[:, 1:]).max() > 1e-3  # turned, not raw


def test_inactive_rows_and_prefill_row_leave_other_rows_untouched(model):
    cache = model.new_cache(3, 12)
    model.prefill_row(TOKENS[:3], cache, 0)
    model.prefill_row([1] * 12, cache, 2)  # a full row
    before = snapshot(cache)
    logits = model.decode_step([7, 0, 0], cache, active=[True, False, False])
    assert cache.host_lengths == [4, 0, 12] and cache.lengths.tolist() == [4, 0, 12]
    assert torch.isnan(logits[1:]).all() and not torch.isnan(logits[0]).any()
    for b in (1, 2):
        assert torch.equal(cache.k_LBHMK[:, b], before[2][0][:, b])
    alone = model.new_cache(1)
    model.prefill([TOKENS[:3]], alone)
    torch.testing.assert_close(logits[0], model.decode_step([7], alone)[0], **F32)


# ---------------------------------------------------------------- errors: named, and the cache unchanged


def _filled(model, kind="preallocated"):
    cache = model.new_cache(2, 10, kind=kind)
    model.prefill([[5, 17, 3, 6], [0, 22, 8, 8]], cache)
    return cache


BAD_CALLS = [
    (
        lambda m, c: m.forward([[1, 2], [3, 30]], c),
        ValueError,
        r"^ids_BT: expected token ids in \[0, 30\), got 30",
    ),
    (lambda m, c: m.forward([1, 2], c), ValueError, r"^ids_BT: expected shape \[B, T\], got shape \[2\]"),
    (
        lambda m, c: m.prefill([[1.0], [2.0]], c),
        TypeError,
        r"^ids_BT: expected int token ids, got dtype float64",
    ),
    (
        lambda m, c: m.prefill([[1, 2, 3]], c),
        ValueError,
        r"^ids_BT: expected the cache's batch size 2, got 1",
    ),
    (
        lambda m, c: m.forward([[1] * 7] * 2, c),
        ValueError,
        r"^ids_BT: 7 new tokens after 4 cached ones exceed",
    ),
    (lambda m, c: m.decode_step([1, -1], c), ValueError, r"^ids_B: expected token ids in \[0, 30\), got -1"),
    (
        lambda m, c: m.decode_step([[1], [2]], c),
        ValueError,
        r"^ids_B: expected shape \[B\], got shape \[2, 1\]",
    ),
    (
        lambda m, c: m.decode_step([1, 2, 3], c),
        ValueError,
        r"^ids_B: expected the cache's batch size 2, got 3",
    ),
    (lambda m, c: m.decode_step([1, 2], c, active=[1, 0]), TypeError, r"^active: expected a bool mask"),
    (lambda m, c: m.decode_step([1, 2], c, active=[True]), ValueError, r"^active: expected shape \[2\]"),
    (
        lambda m, c: m.decode_step([1, 2], c, active=[False] * 2),
        ValueError,
        r"^active: expected at least one",
    ),
    (lambda m, c: m.prefill_row([1], c, 2), ValueError, r"^row: expected 0 <= row < 2, got 2"),
]
PREALLOCATED_ONLY = [  # a concat cache refuses these first: its rows share one length
    (lambda m, c: m.prefill_row([1], c, 1), ValueError, r"^row: expected an empty row .*row 1 holds 4"),
    (lambda m, c: m.prefill_row([[1]], c, 0), ValueError, r"^ids_T: expected shape \[T\]"),
]
CONCAT_REFUSES = [
    (lambda m, c: m.prefill_row([1], c, 0), ValueError, r"^row: a concat cache keeps its rows at one length"),
    (lambda m, c: m.decode_step([1, 2], c, active=[True, False]), ValueError, r"^active: a concat cache"),
]
BAD_CASES = [("preallocated", *case) for case in BAD_CALLS + PREALLOCATED_ONLY]
BAD_CASES += [("concat", *case) for case in BAD_CALLS + CONCAT_REFUSES]


@pytest.mark.parametrize(("kind", "call", "error", "match"), BAD_CASES)
def test_bad_calls_are_refused_and_the_cache_unchanged(model, kind, call, error, match):
    cache = _filled(model, kind)
    before = snapshot(cache)
    with pytest.raises(error, match=match):
        call(model, cache)
    assert_unchanged(before, cache)


def test_bad_caches_are_refused_and_left_unchanged(model):
    with pytest.raises(
        TypeError, match=r"^cache: expected a cache from TorchLlamaModel.new_cache\(\), got None"
    ):
        model.decode_step([1], None)
    with pytest.raises(TypeError, match=r"^cache: expected a cache .*got None"):
        model.prefill([[1]], None)
    with pytest.raises(TypeError, match=r"^cache: expected a KV cache .*for_model\(model\)\), got list"):
        model.forward([[1]], [small()[0].new_cache()])
    other = small(torch.float64, np.float64)[1].new_cache(2)  # another dtype
    other_before = snapshot(other)
    with pytest.raises(ValueError, match=r"^cache: this TorchPreallocatedKVCache holds torch.float64 on cpu"):
        model.decode_step([1, 2], other)
    assert_unchanged(other_before, other)
    empty = model.new_cache(2, 5)
    model.prefill_row([1, 2, 3, 4, 5], empty, 1)
    before = snapshot(empty)
    with pytest.raises(ValueError, match="^cache: expected prefilled rows for decode_step, row 0 is empty"):
        model.decode_step([1, 2], empty)
    with pytest.raises(
        ValueError, match="^ids_B: 1 new tokens after 5 cached ones exceed the cache capacity 5"
    ):
        model.decode_step([1, 2], empty, active=[False, True])
    assert_unchanged(before, empty)
    assert isinstance(empty, TorchKVCache) and model.check_cache(empty, kind="preallocated") is empty


def test_bad_arguments_name_themselves(model):
    cases = [
        (lambda: model.new_cache(0), ValueError, r"^batch_size: expected an int >= 1, got 0"),
        (lambda: model.new_cache(1, 17), ValueError, r"^capacity: expected 1 <= capacity <= 16, got 17"),
        (lambda: model.new_cache(1, kind="paged"), ValueError, r"^kind: expected one of"),
        (
            lambda: model.generate([TOKENS[:3]], 15),
            ValueError,
            r"^max_new_tokens: prompt of 3 \+ 15 new tokens",
        ),
        (lambda: model.generate([TOKENS[:3]], 2.0), TypeError, r"^max_new_tokens: expected an int"),
        (
            lambda: model.generate([TOKENS[:3]], 2, cache_kind="x"),
            ValueError,
            r"^cache_kind: expected one of",
        ),
        (
            lambda: model.logits_without_cache([[1] * 17]),
            ValueError,
            r"^ids_BT: 17 tokens exceed max_seq_len 16",
        ),
        (lambda: TorchLlamaModel.random("cfg"), TypeError, r"^config: expected a LlamaConfig"),
        (
            lambda: TorchLlamaModel.from_numpy(model),
            TypeError,
            r"^numpy_model: expected a kvtutor.LlamaModel",
        ),
        (
            lambda: TorchLlamaModel.random(model.config, dtype=torch.int32),
            TypeError,
            r"^dtype: expected a floating",
        ),
        (lambda: TorchLlamaModel.random(model.config, dtype="fp9"), ValueError, r"^dtype: expected one of"),
        (lambda: TorchLlamaModel.random(model.config, device="gpu"), ValueError, r"^device: expected"),
    ]
    for call, error, match in cases:
        with pytest.raises(error, match=match):
            call()
    assert model.generate([TOKENS[:3]], 0).shape == (1, 0)


def _bad_state_dicts(sd: dict) -> list:
    bad_norm = sd["model.norm.weight"].copy()
    bad_norm[3] = np.nan
    return [
        {k: v for k, v in sd.items() if k != "model.layers.1.mlp.up_proj.weight"},
        {k: v for k, v in sd.items() if k != "lm_head.weight"},
        sd | {"model.layers.0.self_attn.q_proj.bias": np.zeros(16, np.float32)},
        sd | {"model.layers.2.input_layernorm.weight": np.ones(16, np.float32)},
        sd | {"model.layers.1.self_attn.k_proj.weight": np.zeros((16, 16), np.float32)},
        sd | {"model.norm.weight": bad_norm},
        sd | {"model.norm.weight": np.ones(16, np.int64)},
        sd | {"model.norm.weight": torch.ones(16, dtype=torch.int32)},
        sd | {"norm.weight": sd["model.norm.weight"]},
        sd | {3: sd["model.norm.weight"]},
        [],
    ]


def test_bad_state_dicts_and_configs_are_refused_as_the_numpy_model_refuses_them():
    numpy_model, _ = small()
    sd, cfg = numpy_model.to_state_dict(), numpy_model.config
    hf_cfg = {"model_type": "llama", "vocab_size": 30, "hidden_size": 16, "intermediate_size": 24,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": 16, "rope_theta": 100.0}  # fmt: skip
    loads = [(bad, cfg) for bad in _bad_state_dicts(sd)] + [
        (sd, hf_cfg | {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}),  # RoPE scaling: refused
        (sd, hf_cfg | {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}}),
        (sd, hf_cfg | {"attention_bias": True}),
        (sd, kvtutor.TOY_CONFIG),
    ]
    for state_dict, config in loads:
        with pytest.raises((TypeError, ValueError)) as numpy_error:
            LlamaModel.from_state_dict(state_dict, config)
        with pytest.raises(numpy_error.type) as torch_error:
            TorchLlamaModel.from_state_dict(state_dict, config, device="cpu")
        message = str(torch_error.value)
        assert message == str(numpy_error.value) and message.startswith(("state_dict", "config"))
    ok = TorchLlamaModel.from_state_dict(sd, hf_cfg, device="cpu")  # the same weights, read from config.json
    np.testing.assert_allclose(
        np_(ok.logits_without_cache([TOKENS[:6]]))[0], numpy_model.logits_without_cache(TOKENS[:6]), **F32
    )


# ---------------------------------------------------------------- CUDA only


@cuda_only
def test_cuda_matches_numpy_and_defaults_to_bf16():
    numpy_model, _ = small()
    ours = TorchLlamaModel.from_numpy(numpy_model, device="cuda", dtype=torch.float32)
    ids = [3, 1, 4, 1, 5, 9, 2, 6]
    ref = numpy_model.logits_without_cache(ids)
    cache = ours.new_cache(1)
    got = [np_(ours.prefill([ids[:4]], cache))[0]] + [np_(ours.decode_step([t], cache)) for t in ids[4:]]
    np.testing.assert_allclose(np.concatenate(got), ref, atol=1e-4)
    assert ours.generate([ids[:3]], 10)[0].tolist() == numpy_model.generate(ids[:3], 10)
    half = TorchLlamaModel.from_numpy(numpy_model)
    assert half.device.type == "cuda" and half.dtype == torch.bfloat16
    assert np.abs(np_(half.logits_without_cache([ids]))[0] - ref).max() < 2 * BF16
