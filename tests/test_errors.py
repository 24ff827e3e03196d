"""Bad input gets a clear error naming the argument, and a rejected call changes nothing."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_same_state, cache_state

import kvtutor
from kvtutor.quant_cache import QuantizedKVCache


@pytest.fixture(params=["preallocated", "concat", "int8 per_channel", "int8 per_token"])
def filled(request, toy_model):
    """The toy model and its cache holding [1, 2, 3] then 4: each float kind, and the int8 cache in
    both key modes (groups of 2 keys: 2 full)."""
    if request.param.startswith("int8"):
        key_mode = request.param.split()[1]
        cache = QuantizedKVCache.for_model(toy_model, key_mode=key_mode, group_size=2)
    else:
        cache = toy_model.new_cache(kind=request.param)
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
        (
            {"prompt_ids": [1, 2, 3], "max_new_tokens": 15},
            ValueError,
            "max_new_tokens.*3 \\+ 15.*max_seq_len 16",
        ),
        ({"prompt_ids": [1], "max_new_tokens": -1}, ValueError, "max_new_tokens.*>= 0"),
        ({"prompt_ids": [1], "max_new_tokens": 2.0}, TypeError, "max_new_tokens.*int.*float"),
        ({"prompt_ids": [1], "max_new_tokens": 2, "stop_token": 40}, ValueError, "stop_token"),
        ({"prompt_ids": [1], "max_new_tokens": 2, "temperature": -1.0}, ValueError, "temperature"),
        # issue 12: nan and "hot" used to fail inside NumPy
        (
            {"prompt_ids": [1], "max_new_tokens": 2, "temperature": float("nan")},
            ValueError,
            "^temperature: expected >= 0 and finite, got nan",
        ),
        (
            {"prompt_ids": [1], "max_new_tokens": 2, "temperature": float("inf")},
            ValueError,
            "^temperature: expected >= 0 and finite, got inf",
        ),
        (
            {"prompt_ids": [1], "max_new_tokens": 2, "temperature": "hot"},
            TypeError,
            "^temperature: expected a float, got str",
        ),
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
        toy_model.new_cache(kind="paged")
    with pytest.raises(TypeError, match=r"batch_size.*str 'concat'.*new_cache\(kind='concat'\)"):
        toy_model.new_cache("concat")  # the old positional kind: the message says what to write
    with pytest.raises(ValueError, match="batch_size.*expected 1.*TorchModel.*got 2"):
        toy_model.new_cache(2)
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


# ---------------------------------------------------------------- issue 12


@pytest.mark.parametrize("kind", [kvtutor.PreallocatedKVCache, kvtutor.ConcatKVCache])
@pytest.mark.parametrize("dtype", [np.int8, np.int64, bool, "bogus"])
def test_caches_of_integers_are_refused(kind, dtype):
    """PreallocatedKVCache(..., dtype=np.int8) used to be accepted and give wrong tokens."""
    with pytest.raises(TypeError, match=r"^dtype: expected a floating NumPy dtype such as np.float32, got "):
        kind(2, 2, 16, 4, dtype=dtype)


@pytest.mark.parametrize(
    ("args", "exc", "match"),
    [
        ((0, 2, 16, 4), ValueError, r"^n_layers: expected an int >= 1, got 0"),
        ((2, 2.0, 16, 4), TypeError, r"^n_kv_heads: expected an int, got float"),
        ((2, 2, -1, 4), ValueError, r"^capacity: expected an int >= 1, got -1"),
    ],
)
def test_cache_sizes_are_checked(args, exc, match):
    with pytest.raises(exc, match=match):
        kvtutor.PreallocatedKVCache(*args)


@pytest.mark.parametrize("kind", [kvtutor.PreallocatedKVCache, kvtutor.ConcatKVCache])
def test_a_cache_longer_than_the_model_is_refused_unchanged(toy_model, kind):
    """A 32-position cache on a 16-position model used to fail in a NumPy broadcast."""
    cache = kind(2, 2, 32, 4)
    before = cache_state(cache)
    with pytest.raises(
        ValueError, match=r"^cache: expected a capacity <= this model's max_seq_len 16, got 32"
    ):
        toy_model.prefill(list(range(20)), cache)
    with pytest.raises(ValueError, match=r"^cache: expected a capacity <= this model's max_seq_len 16"):
        toy_model.generate([1, 2], 3, cache=cache)
    assert_same_state(before, cache_state(cache))


def test_a_small_cache_is_called_by_its_capacity(toy_model):
    """'exceeds max_seq_len 8' used to be said of a cache of capacity 8 on a 16-position model."""
    cache = toy_model.new_cache(capacity=8)
    with pytest.raises(
        ValueError, match=r"^max_new_tokens: prompt of 3 \+ 7 new tokens exceeds the cache's capacity 8"
    ):
        toy_model.generate([1, 2, 3], 7, cache=cache)
    assert len(cache) == 0
    assert len(toy_model.generate([1, 2, 3], 6, cache=cache)) == 6  # 3 + 6 - 1 = 8 positions


def test_generate_accepts_exactly_the_lengths_that_fit(toy_model):
    """A prompt of M - 1 tokens and 2 new ones needs M positions: the last token is never fed back."""
    m = toy_model.config.max_seq_len
    prompt = [1 + i % 30 for i in range(m - 1)]
    new = toy_model.generate(prompt, 2)
    assert len(new) == 2
    assert new[0] == int(toy_model.logits_without_cache(prompt)[-1].argmax())
    assert new[1] == int(toy_model.logits_without_cache([*prompt, new[0]])[-1].argmax())
    assert toy_model.generate([*prompt, 3], 1) == [
        int(toy_model.logits_without_cache([*prompt, 3])[-1].argmax())
    ]
    assert toy_model.generate([*prompt, 3], 0) == []
    assert len(toy_model.generate([1], m)) == m
    with pytest.raises(
        ValueError, match=rf"^max_new_tokens: prompt of 1 \+ {m + 1} new tokens exceeds max_seq_len {m}"
    ):
        toy_model.generate([1], m + 1)


def test_sample_checks_the_temperature():
    from kvtutor.numpy_model import sample

    logits = np.array([0.0, 1.0])
    assert sample(logits, 0) == 1 and sample(logits, np.float32(0.0)) == 1
    with pytest.raises(ValueError, match=r"^temperature: expected >= 0 and finite, got nan"):
        sample(logits, float("nan"))
    with pytest.raises(TypeError, match=r"^temperature: expected a float, got str"):
        sample(logits, "hot")
    with pytest.raises(TypeError, match=r"^temperature: expected a float, got NoneType"):
        sample(logits, None)
