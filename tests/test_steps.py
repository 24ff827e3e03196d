"""One test per step function of the walkthrough: shapes and the property each step promises."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvtutor.models.gpt2 import (
    apply_mask,
    attend,
    attention_core,
    attention_scores,
    attention_weights,
    causal_mask,
    embed,
    ffn,
    gelu,
    layer_norm,
    linear,
    lm_head,
    merge_heads,
    project_qkv,
    repeat_kv,
    sample,
    softmax,
    split_heads,
)
from kvtutor.models.tracing import capture_layers

rng = np.random.default_rng(0)


def test_embed_adds_token_and_position_rows():
    wte_VD, wpe_MD = rng.standard_normal((10, 8)), rng.standard_normal((6, 8))
    x_TD = embed(np.array([3, 1, 4]), wte_VD, wpe_MD, start=2)
    assert x_TD.shape == (3, 8)
    np.testing.assert_array_equal(x_TD[1], wte_VD[1] + wpe_MD[3])


def test_layer_norm_normalises_each_row():
    x_TD = rng.standard_normal((4, 16)) * 5 + 3
    y_TD = layer_norm(x_TD, np.ones(16), np.zeros(16))
    np.testing.assert_allclose(y_TD.mean(axis=-1), 0, atol=1e-12)
    np.testing.assert_allclose(y_TD.std(axis=-1), 1, atol=1e-4)


def test_linear_is_x_times_w_plus_b_for_gemm_and_gemv():
    w_EO, b_O = rng.standard_normal((8, 5)), rng.standard_normal(5)
    x_TE = rng.standard_normal((3, 8))
    assert linear(x_TE, w_EO, b_O).shape == (3, 5)
    np.testing.assert_allclose(linear(x_TE[2:], w_EO, b_O)[0], x_TE[2] @ w_EO + b_O)


def test_project_qkv_shapes(toy_model):
    q, k, v = project_qkv(np.ones((3, 8), np.float32), toy_model.weights.layers[0])
    assert q.shape == k.shape == v.shape == (3, 8)


def test_split_and_merge_heads_round_trip():
    x_TD = np.arange(24.0).reshape(3, 8)
    x_HTK = split_heads(x_TD, 2)
    assert x_HTK.shape == (2, 3, 4)
    np.testing.assert_array_equal(x_HTK[1, 2], x_TD[2, 4:])  # head 1 = columns 4..7
    np.testing.assert_array_equal(merge_heads(x_HTK), x_TD)


def test_repeat_kv_shares_each_kv_head_with_its_group():
    k_HSK = rng.standard_normal((2, 5, 4))
    r = repeat_kv(k_HSK, 3)
    assert r.shape == (6, 5, 4)
    np.testing.assert_array_equal(r[0], r[2])
    np.testing.assert_array_equal(r[3], k_HSK[1])
    assert repeat_kv(k_HSK, 1) is k_HSK


def test_attention_scores_are_dot_products():
    q_HTK, k_HSK = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 5, 4))
    s_HTS = attention_scores(q_HTK, k_HSK)
    assert s_HTS.shape == (2, 3, 5)
    assert math.isclose(s_HTS[1, 2, 4], float(q_HTK[1, 2] @ k_HSK[1, 4]))


def test_causal_mask_prefill_is_lower_triangle():
    np.testing.assert_array_equal(causal_mask(3, 3), np.tril(np.ones((3, 3), bool)))


def test_causal_mask_decode_row_sees_everything():
    assert causal_mask(1, 7).all()


def test_causal_mask_chunk_is_offset_by_cached_length():
    mask = causal_mask(2, 5)  # 3 cached keys, 2 new queries at positions 3 and 4
    np.testing.assert_array_equal(mask, [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])


def test_apply_mask_puts_minus_inf_where_forbidden():
    s = apply_mask(np.zeros((1, 3, 3)), causal_mask(3, 3))
    assert np.isneginf(s[0, 0, 1]) and s[0, 1, 0] == 0


def test_softmax_rows_sum_to_one_and_masked_entries_are_zero():
    scores_HTS = rng.standard_normal((2, 4, 4)) * 10
    a_HTS = attention_weights(scores_HTS, d_head=4, mask_TS=causal_mask(4, 4))
    np.testing.assert_allclose(a_HTS.sum(axis=-1), 1.0)
    assert (a_HTS[:, ~causal_mask(4, 4)] == 0).all()
    assert (a_HTS >= 0).all()


def test_attention_weights_divide_by_sqrt_head_dim():
    s = rng.standard_normal((1, 1, 6))
    np.testing.assert_allclose(attention_weights(s, 9, None), softmax(s / 3))


def test_softmax_is_stable_for_large_inputs():
    p = softmax(np.array([1000.0, 1000.0]))
    np.testing.assert_allclose(p, [0.5, 0.5])


def test_attend_mixes_value_rows():
    a_HTS = np.array([[[1.0, 0.0], [0.25, 0.75]]])
    v_HSK = np.array([[[1.0, 2.0], [3.0, 4.0]]])
    np.testing.assert_allclose(attend(a_HTS, v_HSK), [[[1.0, 2.0], [2.5, 3.5]]])


@pytest.mark.parametrize(("n_heads", "n_kv_heads"), [(4, 4), (4, 2), (4, 1)])
@pytest.mark.parametrize(("n_new", "n_keys"), [(5, 5), (1, 5), (3, 7)])
def test_attention_core_is_causal_softmax_attention_per_query_head(n_heads, n_kv_heads, n_new, n_keys):
    """Query t (at position S - T + t) mixes the value rows 0 .. S - T + t of its KV head."""
    q_HTK = rng.standard_normal((n_heads, n_new, 4))
    k_HSK, v_HSK = rng.standard_normal((2, n_kv_heads, n_keys, 4))
    layers: list = []

    def block(x_TD):  # a block for the trace to open its record on
        return attention_core(q_HTK, k_HSK, v_HSK)

    with capture_layers(layers, block, (attention_core,)):
        o_HTK = block(np.zeros(1))
    (trace,) = layers  # what the core computed, read off it as it returned
    assert o_HTK.shape == (n_heads, n_new, 4)
    group = n_heads // n_kv_heads
    for h in range(n_heads):
        for t in range(n_new):
            seen = n_keys - n_new + t + 1
            k_SK, v_SK = k_HSK[h // group, :seen], v_HSK[h // group, :seen]
            w_S = softmax(k_SK @ q_HTK[h, t] / 2.0)
            np.testing.assert_allclose(o_HTK[h, t], w_S @ v_SK, rtol=1e-10)
            np.testing.assert_allclose(trace["a_HTS"][h, t, :seen], w_S, rtol=1e-10)
            assert (trace["a_HTS"][h, t, seen:] == 0).all()
    assert trace["scores_HTS"].shape == (n_heads, n_new, n_keys)


def test_gelu_is_the_tanh_approximation():
    x = np.array([-3.0, -1.0, 0.0, 0.5, 2.0])
    expected = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    np.testing.assert_allclose(gelu(x), expected)
    assert gelu(np.array(0.0)) == 0


def test_ffn_and_lm_head_shapes(toy_model):
    x_TD = np.ones((3, 8), np.float32)
    assert ffn(x_TD, toy_model.weights.layers[1]).shape == (3, 8)
    assert lm_head(x_TD, toy_model.weights.wte_VD).shape == (3, 32)


def test_sample_greedy_and_seeded():
    logits_V = np.array([0.0, 3.0, 1.0])
    assert sample(logits_V) == 1
    draws = [sample(logits_V, 1.0, np.random.default_rng(s)) for s in range(200)]
    assert set(draws) == {0, 1, 2} and max(set(draws), key=draws.count) == 1
    assert sample(logits_V, 5.0, np.random.default_rng(0), top_k=1) == 1
    assert sample(logits_V, 1.0, np.random.default_rng(3)) == sample(logits_V, 1.0, np.random.default_rng(3))


@pytest.mark.parametrize(
    ("kwargs", "match"), [({"temperature": -1.0}, "temperature"), ({"top_k": 9}, "top_k")]
)
def test_sample_rejects_bad_arguments(kwargs, match):
    kwargs.setdefault("temperature", 1.0)
    with pytest.raises(ValueError, match=match):
        sample(np.zeros(3), rng=np.random.default_rng(0), **kwargs)
