"""The cost model against hand counts, against the real caches' byte sizes, and its own algebra."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvtutor
from kvtutor.measure import costs
from kvtutor.models.config import TOY_CONFIG

# TOY_CONFIG: V=32, D=8, H=2, K=4, L=2, M=16, F=32. Per layer: W_Q, W_K, W_V are [8, 8] (192
# weights), W_O [8, 8] (64), W_fc [8, 32] and W_proj [32, 8] (512): 768 matrix weights; biases
# 24 + 8 + 32 + 8 = 72 and two LayerNorms 32, so 872 parameters per layer.
TOY_LAYER_PARAMS = 768 + 72 + 32


def test_layer_weight_count_by_hand():
    assert costs.layer_weight_count(TOY_CONFIG) == TOY_LAYER_PARAMS


def test_prefill_by_hand():
    c = costs.prefill_cost(TOY_CONFIG, 3)  # T = S = 3, fp32
    assert c.matmul_flops == 2 * (2 * 3 * 768)  # 2 layers x 2 FLOPs x 3 rows x 768 weights
    assert c.attention_flops == 2 * (2 * 2 * 2 * 3 * 3 * 4)  # layers x (QK^T + AV) x 2 H T S K
    assert c.lm_head_flops == 2 * 3 * 8 * 32  # every position's logits
    assert c.weight_bytes == (2 * TOY_LAYER_PARAMS + 2 * 8) * 4  # blocks + ln_f
    assert c.lm_head_bytes == 32 * 8 * 4
    assert c.kv_write_bytes == 2 * 2 * 2 * 4 * 3 * 4  # K and V, L, H, K, T tokens, 4 bytes
    assert c.kv_read_bytes == c.kv_write_bytes  # prefill reads exactly what it wrote
    assert c.flops == 9216 + 576 + 1536
    assert c.bytes == 7040 + 1024 + 384 + 384
    assert c.intensity == pytest.approx(11328 / 8832)


def test_decode_by_hand():
    c = costs.decode_cost(TOY_CONFIG, 4)  # one token attending to S = 4 keys
    assert c.matmul_flops == 2 * (2 * 1 * 768)
    assert c.attention_flops == 2 * (2 * 2 * 2 * 1 * 4 * 4)
    assert c.lm_head_flops == 2 * 8 * 32
    assert c.kv_read_bytes == 2 * 2 * 2 * 4 * 4 * 4  # all 4 positions' K and V
    assert c.kv_write_bytes == 2 * 2 * 2 * 4 * 1 * 4  # the new one
    assert (
        c.all_weight_bytes == costs.prefill_cost(TOY_CONFIG, 3).all_weight_bytes
    )  # same weights, fewer FLOPs
    assert c.intensity < costs.prefill_cost(TOY_CONFIG, 3).intensity


def test_kv_bytes_formula_by_hand():
    # 2 x layers x kv_heads x d_head x tokens x batch x bytes
    assert costs.kv_cache_bytes(TOY_CONFIG, 16, 1, "float32") == 2 * 2 * 2 * 4 * 16 * 1 * 4
    assert costs.kv_cache_bytes(TOY_CONFIG, 5, 3, "bf16") == 2 * 2 * 2 * 4 * 5 * 3 * 2
    gpt2 = kvtutor.GPT2Config(vocab_size=50257, d_model=768, n_heads=12, n_layers=12, max_seq_len=1024)
    assert costs.kv_cache_bytes(gpt2, 1) == 2 * 12 * 768 * 4  # 72 KiB per token in fp32
    assert costs.kv_cache_bytes(gpt2, 1024, 1, 2) == 36 * 2**20


@pytest.mark.parametrize("n_kv_heads", [0, 2, 1])
def test_kv_bytes_equal_numpy_cache_nbytes(n_kv_heads):
    cfg = kvtutor.GPT2Config(
        vocab_size=40, d_model=16, n_heads=4, n_layers=3, max_seq_len=12, n_kv_heads=n_kv_heads
    )
    model = kvtutor.GPT2Model.random(cfg, seed=0)
    pre = model.new_cache(kind="preallocated")
    assert pre.nbytes == costs.kv_cache_bytes(cfg, cfg.max_seq_len, 1, pre.k_LHMK.dtype)
    assert pre.nbytes == costs.kv_cache_bytes(cfg, cfg.max_seq_len, 1, np.float32)
    concat = model.new_cache(kind="concat")
    model.prefill([1, 2, 3, 4, 5], concat)
    model.decode_step(6, concat)
    assert concat.nbytes == costs.kv_cache_bytes(cfg, 6)
    # the cost model's K/V write of those passes is the same number of bytes
    written = costs.prefill_cost(cfg, 5).kv_write_bytes + costs.decode_cost(cfg, 6).kv_write_bytes
    assert written == concat.nbytes


def test_kv_bytes_equal_torch_cache_tensor_bytes():
    torch = pytest.importorskip("torch")
    try:
        from kvtutor.models.torch_gpt2 import TorchGPT2Model
    except ImportError:
        pytest.skip("kvtutor.models.torch_gpt2 is not available")
    cfg = kvtutor.GPT2Config(vocab_size=40, d_model=16, n_heads=4, n_layers=3, max_seq_len=12, n_kv_heads=2)
    model = TorchGPT2Model.random(cfg, seed=0, device="cpu", dtype=torch.float32)
    prealloc = model.new_cache(3, capacity=10)
    buffers = prealloc.k_LBHMK.numel() * prealloc.k_LBHMK.element_size() * 2  # keys and values
    assert buffers == prealloc.nbytes == costs.kv_cache_bytes(cfg, 10, 3, torch.float32)
    concat = model.new_cache(3, capacity=10, kind="concat")
    model.prefill(torch.ones(3, 4, dtype=torch.long), concat)
    model.decode_step(torch.ones(3, dtype=torch.long), concat)
    held = sum(concat.keys(i).nbytes + concat.values(i).nbytes for i in range(cfg.n_layers))
    assert held == concat.nbytes == costs.kv_cache_bytes(cfg, 5, 3, torch.float32)
    half = TorchGPT2Model.random(cfg, seed=0, device="cpu", dtype=torch.bfloat16).new_cache(2)
    assert half.nbytes == costs.kv_cache_bytes(cfg, cfg.max_seq_len, 2, "bf16")


def test_decode_weight_bytes_equal_numpy_weights():
    cfg = kvtutor.GPT2Config(vocab_size=50, d_model=12, n_heads=3, n_layers=2, max_seq_len=24, n_kv_heads=1)
    model = kvtutor.GPT2Model.random(cfg, seed=1)
    all_bytes = sum(a.nbytes for a in model.weights.arrays())
    assert costs.decode_weight_bytes(cfg, np.float32) == all_bytes - model.weights.wpe_MD.nbytes
    assert costs.decode_weight_bytes(cfg, 4) == (cfg.n_params - cfg.max_seq_len * cfg.d_model) * 4
    assert costs.decode_cost(cfg, 3).all_weight_bytes == costs.decode_weight_bytes(cfg)


def test_attention_flops_match_the_numpy_models_shapes():
    """2 H T S K for Q K^T and again for A V, read off the arrays the NumPy model really builds."""
    cfg = kvtutor.GPT2Config(vocab_size=30, d_model=12, n_heads=3, n_layers=2, max_seq_len=20, n_kv_heads=1)
    model = kvtutor.GPT2Model.random(cfg, seed=2)
    cache = model.new_cache()
    for ids in ([1, 2, 3, 4, 5], [6], [7, 8]):
        trace: list[dict] = []
        n_past = len(cache)
        model.forward(ids, cache, trace)
        counted = 0
        for layer in trace:
            h, t, k = layer["q_HTK"].shape
            s = layer["scores_HTS"].shape[-1]
            assert layer["a_HTS"].shape == (h, t, s)
            counted += 2 * h * t * s * k + 2 * h * t * s * k
        assert counted == costs.forward_cost(cfg, len(ids), n_past).attention_flops


def test_matmul_flops_match_the_numpy_models_weights():
    cfg = kvtutor.GPT2Config(vocab_size=30, d_model=12, n_heads=3, n_layers=2, max_seq_len=20, n_kv_heads=1)
    model = kvtutor.GPT2Model.random(cfg, seed=2)
    matrices = sum(
        w.size for ly in model.weights.layers for w in (ly.w_q, ly.w_k, ly.w_v, ly.w_o, ly.w_fc, ly.w_proj)
    )
    assert costs.prefill_cost(cfg, 7, batch_size=2).matmul_flops == 2 * 2 * 7 * matrices
    assert costs.prefill_cost(cfg, 7).lm_head_flops == 2 * 7 * model.weights.wte_VD.size


def test_gqa_shrinks_kv_not_attention_flops():
    mha = kvtutor.GPT2Config(vocab_size=64, d_model=64, n_heads=8, n_layers=2, max_seq_len=64)
    gqa = kvtutor.GPT2Config(vocab_size=64, d_model=64, n_heads=8, n_layers=2, max_seq_len=64, n_kv_heads=2)
    a, b = costs.decode_cost(mha, 40), costs.decode_cost(gqa, 40)
    assert b.kv_read_bytes * 4 == a.kv_read_bytes
    assert b.attention_flops == a.attention_flops
    assert b.matmul_flops < a.matmul_flops  # smaller W_K and W_V


def test_cost_algebra():
    p, d = costs.prefill_cost(TOY_CONFIG, 3), costs.decode_cost(TOY_CONFIG, 4)
    s = p + d
    assert s.flops == p.flops + d.flops and s.bytes == p.bytes + d.bytes
    assert 3 * d == d * 3 == costs.Cost() + d + d + d
    assert (3 * d).kv_read_bytes == 3 * d.kv_read_bytes
    assert costs.Cost().intensity == math.inf
    assert set(d.as_dict()) >= {"flops", "bytes", "intensity", "kv_read_bytes", "lm_head_flops"}


@settings(max_examples=40, deadline=None)
@given(
    d_head=st.integers(1, 8),
    n_heads=st.sampled_from([1, 2, 4]),
    kv_div=st.sampled_from([1, 2, 4]),
    n_layers=st.integers(1, 3),
    t=st.integers(1, 9),
    past=st.integers(0, 9),
    b=st.integers(1, 4),
)
def test_forward_cost_properties(d_head, n_heads, kv_div, n_layers, t, past, b):
    n_kv = max(1, n_heads // kv_div)
    cfg = kvtutor.GPT2Config(
        vocab_size=17,
        d_model=d_head * n_heads,
        n_heads=n_heads,
        n_layers=n_layers,
        max_seq_len=32,
        n_kv_heads=n_kv,
    )
    one = costs.forward_cost(cfg, t, past, 1)
    many = costs.forward_cost(cfg, t, past, b)
    # FLOPs and K/V traffic scale with the batch; weights are read once whatever the batch
    assert many.flops == b * one.flops
    assert many.kv_read_bytes == b * one.kv_read_bytes
    assert many.all_weight_bytes == one.all_weight_bytes
    # the blocks are L copies of one layer
    layer = costs.layer_cost(cfg, t, past, 1)
    assert one.matmul_flops == n_layers * layer.matmul_flops
    # K/V written = the cache bytes of t tokens; read = the cache bytes of all past + t
    assert one.kv_write_bytes == costs.kv_cache_bytes(cfg, t)
    assert one.kv_read_bytes == costs.kv_cache_bytes(cfg, past + t)


def test_ridge_batch_is_where_intensity_meets_the_balance():
    gpt2 = kvtutor.GPT2Config(vocab_size=50257, d_model=768, n_heads=12, n_layers=12, max_seq_len=1024)
    peak, bw = 200e9, 20e9  # balance 10 FLOPs per byte
    ridge = costs.ridge_batch(gpt2, 64, peak, bw)
    assert 1 < ridge < 1000
    b = costs.compute_bound_batch(gpt2, 64, peak, bw)
    assert b == math.ceil(ridge)
    assert costs.decode_cost(gpt2, 64, b).intensity >= costs.machine_balance(peak, bw)
    assert costs.decode_cost(gpt2, 64, b - 1).intensity < costs.machine_balance(peak, bw)
    # at the ridge the two roofline times are equal
    c = costs.decode_cost(gpt2, 64, b)
    assert costs.roofline_time(c, peak, bw) == pytest.approx(c.flops / peak)
    c1 = costs.decode_cost(gpt2, 64, 1)
    assert costs.roofline_time(c1, peak, bw) == pytest.approx(c1.bytes / bw)


def test_long_contexts_never_turn_compute_bound():
    """Each sequence's K/V reads grow with the batch too: with enough context the balance is never reached."""
    cfg = kvtutor.GPT2Config(vocab_size=50257, d_model=2048, n_heads=16, n_layers=24, max_seq_len=4096)
    assert costs.ridge_batch(cfg, 4096, 700e12, 4e12, "bf16") == math.inf
    assert costs.compute_bound_batch(cfg, 4096, 700e12, 4e12, "bf16") is None
    assert costs.compute_bound_batch(cfg, 16, 700e12, 4e12, "bf16") is not None


def test_attainable_flops_is_the_roofline():
    assert costs.attainable_flops(1.0, 100.0, 10.0) == 10.0
    assert costs.attainable_flops(50.0, 100.0, 10.0) == 100.0
    assert costs.machine_balance(100.0, 10.0) == 10.0


def test_generation_cached_is_linear_uncached_quadratic():
    cfg = kvtutor.GPT2Config(vocab_size=64, d_model=32, n_heads=4, n_layers=2, max_seq_len=80)
    cached = [c.flops for c in costs.generation_costs(cfg, 4, 40, cached=True)]
    uncached = [c.flops for c in costs.generation_costs(cfg, 4, 40, cached=False)]
    assert len(cached) == len(uncached) == 40
    assert cached[0] == uncached[0]  # the first token is the prompt's pass either way
    # per token: cached grows by a constant (attention over one more key): second differences 0
    assert np.all(np.diff(cached[1:], 2) == 0) and np.all(np.diff(cached[1:]) > 0)
    # uncached grows faster and faster (attention is quadratic in the length): second differences > 0
    assert np.all(np.diff(uncached, 2) > 0)
    assert sum(uncached) > 10 * sum(cached)
    assert costs.generation_costs(cfg, 4, 0) == []


ERRORS = [
    (lambda: costs.prefill_cost("gpt2", 3), TypeError, "config:"),
    (lambda: costs.prefill_cost(TOY_CONFIG, 0), ValueError, "n_new:"),
    (lambda: costs.prefill_cost(TOY_CONFIG, 2.0), TypeError, "n_new:"),
    (lambda: costs.prefill_cost(TOY_CONFIG, True), TypeError, "n_new:"),
    (lambda: costs.decode_cost(TOY_CONFIG, 0), ValueError, "context_len:"),
    (lambda: costs.decode_cost(TOY_CONFIG, 4, batch_size=0), ValueError, "batch_size:"),
    (lambda: costs.layer_cost(TOY_CONFIG, 2, 3, cached=False), ValueError, "n_past:"),
    (lambda: costs.kv_cache_bytes(TOY_CONFIG, -1), ValueError, "n_tokens:"),
    (lambda: costs.kv_cache_bytes(TOY_CONFIG, 4, 1, "int3"), ValueError, "dtype:"),
    (lambda: costs.kv_cache_bytes(TOY_CONFIG, 4, 1, 0), ValueError, "dtype:"),
    (lambda: costs.bytes_per_element(True), TypeError, "dtype:"),
    (lambda: costs.machine_balance(0, 1.0), ValueError, "peak_flops:"),
    (lambda: costs.machine_balance(1.0, "fast"), TypeError, "bandwidth:"),
    (lambda: costs.attainable_flops(-1.0, 1.0, 1.0), ValueError, "intensity:"),
    (lambda: costs.roofline_time(3, 1.0, 1.0), TypeError, "cost:"),
    (lambda: costs.generation_costs(TOY_CONFIG, 10, 8), ValueError, "n_new:"),
    (lambda: costs.Cost() * -1, ValueError, "n:"),
]


@pytest.mark.parametrize("call, exc, prefix", ERRORS)
def test_errors_name_the_argument(call, exc, prefix):
    with pytest.raises(exc) as info:
        call()
    assert str(info.value).startswith(prefix)


def test_bytes_per_element_accepts_dtypes():
    assert costs.bytes_per_element(np.float32) == 4
    assert costs.bytes_per_element(np.dtype("float16")) == 2
    assert costs.bytes_per_element("bf16") == costs.bytes_per_element("bfloat16") == 2
    torch = pytest.importorskip("torch")
    assert costs.bytes_per_element(torch.bfloat16) == 2
    assert costs.bytes_per_element(torch.float32) == 4


def test_prefill_last_logits_only():
    full = costs.prefill_cost(TOY_CONFIG, 3)
    last = costs.prefill_cost(TOY_CONFIG, 3, all_logits=False)
    assert full.lm_head_flops == 3 * last.lm_head_flops == 2 * 3 * 8 * 32
    assert full.matmul_flops == last.matmul_flops and full.bytes == last.bytes
    assert last == costs.generation_costs(TOY_CONFIG, 3, 1)[0]  # what generate's prefill costs
    with pytest.raises(TypeError, match="all_logits"):
        costs.prefill_cost(TOY_CONFIG, 3, all_logits=1)


def test_products_ridge_batch_and_attention_intensity():
    # B rows through a bf16 weight: 2B FLOPs per 2 bytes, so B = balance
    assert costs.products_ridge_batch(300.0, 1.0, "bf16") == pytest.approx(300.0)
    assert costs.products_ridge_batch(300.0, 1.0, "fp32") == pytest.approx(600.0)
    # attention: 4 H S K FLOPs per 2 Hkv S K x bytes, whatever B and S
    assert costs.attention_intensity(TOY_CONFIG, "bf16") == 1.0
    assert costs.attention_intensity(TOY_CONFIG, "fp32") == 0.5
    for s in (4, 16):
        c = costs.layer_cost(TOY_CONFIG, 1, s - 1, batch_size=3, dtype="bf16")
        assert c.attention_flops / c.kv_read_bytes == 1.0
    gqa = kvtutor.GPT2Config(vocab_size=32, d_model=8, n_heads=4, n_layers=1, max_seq_len=8, n_kv_heads=1)
    assert costs.attention_intensity(gqa, "bf16") == 4.0


def test_datasheet_ridges():
    h100, h200 = costs.DATASHEETS["H100 SXM"], costs.DATASHEETS["H200 SXM"]
    assert h100["bf16_flops"] / h100["bandwidth"] == pytest.approx(295, abs=1)
    assert h200["bf16_flops"] / h200["bandwidth"] == pytest.approx(206, abs=1)


@pytest.mark.parametrize("bad", [None, True])
def test_no_dtype_is_not_float64(bad):
    """``np.dtype(None)`` is float64: a dtype of None (or a bool) is refused by name, not counted
    at 8 bytes an element."""
    from kvtutor.validate import dtype_info

    with pytest.raises((ValueError, TypeError), match="^dtype: expected"):
        costs.bytes_per_element(bad)
    with pytest.raises(ValueError, match="^dtype: expected one of"):
        dtype_info(bad)


def test_a_step_model_checks_its_step_as_step_cost_does():
    """``StepModel.step_s`` (the simulator's cached path) refuses what ``step_cost`` refuses:
    a context of 0, -5, 1.5, True or "5", chunks that are not (n_new, start) pairs of ints; a
    list pair reads as a tuple."""
    from kvtutor.serving.disagg import StepModel

    sm = StepModel(config=TOY_CONFIG, peak_flops=1e12, bandwidth=1e11, dtype="float32")
    cases = ((0, ValueError), (-5, ValueError), (1.5, TypeError), (True, TypeError), ("5", TypeError))
    for bad, exc in cases:
        with pytest.raises(exc, match="^contexts: context: expected an int"):
            sm.step_s((), (bad,))
    for bad in (None, 5, "ab"):
        with pytest.raises(TypeError, match="^contexts: expected a sequence"):
            sm.step_s((), bad)
    with pytest.raises(TypeError, match="^chunks: expected \\(n_new, start\\) pairs"):
        sm.step_s(((5,),), ())
    with pytest.raises(ValueError, match="^chunks: n_new: expected an int >= 1"):
        sm.step_s(((0, 0),), ())
    assert sm.step_s(([5, 0],), (3,)) == sm.step_s(((5, 0),), (3,)) > 0
