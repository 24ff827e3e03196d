"""Bad input gets a clear error naming the argument, and a rejected call changes nothing."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_same_state, cache_state

import kvtutor


@pytest.fixture(params=["preallocated", "concat"])
def filled(request, toy_model):
    cache = toy_model.new_cache(request.param)
    toy_model.prefill([1, 2, 3], cache)
    toy_model.decode_step(4, cache)
    return toy_model, cache


BAD_PREFILL = [
    ([], ValueError, "prompt_ids|ids_T.*at least one token"),
    ([1, 32], ValueError, "ids_T.*\\[0, 32\\).*32 at index 1"),
    ([-1], ValueError, "ids_T.*-1"),
    ([[1, 2]], ValueError, "ids_T.*1-D.*\\[1, 2\\]"),
    ([1.0, 2.0], TypeError, "ids_T.*int token ids.*float64"),
    ("The cat", TypeError, "ids_T.*str"),
    ([True], TypeError, "ids_T.*bool"),
    (list(range(13)), ValueError, "ids_T.*13 tokens after 4 cached.*capacity 16"),
]


@pytest.mark.parametrize(("ids", "exc", "match"), BAD_PREFILL)
def test_bad_prefill_input_is_rejected_and_cache_unchanged(filled, ids, exc, match):
    model, cache = filled
    before = cache_state(cache)
    with pytest.raises(exc, match=match):
        model.prefill(ids, cache)
    assert_same_state(before, cache_state(cache))


BAD_TOKEN = [
    (32, ValueError, "token_id.*\\[0, 32\\).*got 32"),
    (-3, ValueError, "token_id.*got -3"),
    (1.5, TypeError, "token_id.*int.*float"),
    ([1], TypeError, "token_id.*int.*list"),
    (None, TypeError, "token_id.*NoneType"),
]


@pytest.mark.parametrize(("token", "exc", "match"), BAD_TOKEN)
def test_bad_decode_token_is_rejected_and_cache_unchanged(filled, token, exc, match):
    model, cache = filled
    before = cache_state(cache)
    with pytest.raises(exc, match=match):
        model.decode_step(token, cache)
    assert_same_state(before, cache_state(cache))


def test_decode_into_a_full_cache_is_rejected_unchanged(toy_model):
    cache = toy_model.new_cache(capacity=4)
    toy_model.prefill([1, 2, 3, 4], cache)
    before = cache_state(cache)
    with pytest.raises(ValueError, match="ids_T.*1 tokens after 4 cached.*capacity 4"):
        toy_model.decode_step(5, cache)
    assert_same_state(before, cache_state(cache))


def test_decode_needs_a_prefilled_cache(toy_model):
    with pytest.raises(ValueError, match="cache.*prefilled"):
        toy_model.decode_step(1, toy_model.new_cache())
    with pytest.raises(TypeError, match="cache.*None"):
        toy_model.decode_step(1, None)
    with pytest.raises(TypeError, match="cache.*None"):
        toy_model.prefill([1], None)


def test_cache_of_another_model_is_rejected(toy_model, small_model):
    cache = small_model.new_cache()
    with pytest.raises(ValueError, match="cache: expected .* = \\(2, 2, 4\\).*got \\(2, 3, 4\\)"):
        toy_model.prefill([1], cache)
    with pytest.raises(TypeError, match="cache.*dict"):
        toy_model.prefill([1], {})


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"prompt_ids": [], "max_new_tokens": 2}, ValueError, "prompt_ids.*at least one"),
        ({"prompt_ids": [99], "max_new_tokens": 2}, ValueError, "prompt_ids.*99"),
        ({"prompt_ids": [1, 2, 3], "max_new_tokens": 14}, ValueError, "max_new_tokens.*3 \\+ 14.*16"),
        ({"prompt_ids": [1], "max_new_tokens": -1}, ValueError, "max_new_tokens.*>= 0"),
        ({"prompt_ids": [1], "max_new_tokens": 2.0}, TypeError, "max_new_tokens.*int.*float"),
        ({"prompt_ids": [1], "max_new_tokens": 2, "stop_token": 40}, ValueError, "stop_token"),
        ({"prompt_ids": [1], "max_new_tokens": 2, "temperature": -1.0}, ValueError, "temperature"),
    ],
)
def test_bad_generate_arguments(toy_model, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        toy_model.generate(**kwargs)


def test_generate_rejects_a_non_empty_cache_unchanged(filled):
    model, cache = filled
    before = cache_state(cache)
    with pytest.raises(ValueError, match="cache: expected an empty cache, got one holding 4"):
        model.generate([1], 2, cache=cache)
    assert_same_state(before, cache_state(cache))


def test_bad_new_cache_arguments(toy_model):
    with pytest.raises(ValueError, match="kind.*'paged'"):
        toy_model.new_cache("paged")
    with pytest.raises(ValueError, match="capacity.*<= 16.*got 17"):
        toy_model.new_cache(capacity=17)
    with pytest.raises(TypeError, match="capacity.*int.*str"):
        toy_model.new_cache(capacity="8")


def test_cache_methods_check_their_arguments(filled):
    _, cache = filled
    before = cache_state(cache)
    with pytest.raises(ValueError, match="layer.*0 <= layer < 2.*got 2"):
        cache.keys(2)
    with pytest.raises(TypeError, match="layer.*int"):
        cache.values("0")
    with pytest.raises(ValueError, match="k_new_HTK.*\\[H=2, T, K=4\\].*\\[3, 1, 4\\]"):
        cache.update(0, np.zeros((3, 1, 4), np.float32), np.zeros((3, 1, 4), np.float32))
    with pytest.raises(ValueError, match="v_new_HTK.*shape of k_new_HTK"):
        cache.update(0, np.zeros((2, 1, 4), np.float32), np.zeros((2, 2, 4), np.float32))
    with pytest.raises(TypeError, match="k_new_HTK.*numpy array.*list"):
        cache.update(0, [], np.zeros((2, 1, 4), np.float32))
    with pytest.raises(ValueError, match="length.*0 <= length <= 4.*got 5"):
        cache.truncate(5)
    with pytest.raises(ValueError, match="n_tokens.*got 1"):
        cache.advance(1)  # nothing pending to commit
    assert_same_state(before, cache_state(cache))


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"d_model": 10, "n_heads": 3}, ValueError, "d_model.*multiple of n_heads=3.*10"),
        ({"vocab_size": 0}, ValueError, "vocab_size.*positive.*0"),
        ({"n_layers": 2.0}, TypeError, "n_layers.*int.*float"),
        ({"n_heads": 4, "n_kv_heads": 3}, ValueError, "n_kv_heads.*divisor of n_heads=4.*3"),
        ({"d_ff": -1}, ValueError, "d_ff"),
    ],
)
def test_bad_config(kwargs, exc, match):
    base = {"vocab_size": 10, "d_model": 12, "n_heads": 4, "n_layers": 1, "max_seq_len": 8}
    with pytest.raises(exc, match=match):
        kvtutor.ModelConfig(**(base | kwargs))


def test_tokenizer_errors():
    tok = kvtutor.load_toy_tokenizer()
    with pytest.raises(ValueError, match="text.*unknown word 'zebra'"):
        tok.encode("The zebra sat")
    with pytest.raises(TypeError, match="text.*str.*int"):
        tok.encode(3)
    with pytest.raises(ValueError, match="ids.*\\[0, 32\\).*40"):
        tok.decode([1, 40])
