"""Bad input gets a clear error naming the argument, and a rejected call changes nothing."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_same_state, cache_state

import kvtutor
from kvtutor.caches.quant import QuantizedKVCache


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
    with pytest.raises(ValueError, match="batch_size.*expected 1.*TorchGPT2Model.*got 2"):
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
    plan = cache.plan(1)
    with pytest.raises(ValueError, match=r"k_new.*\[H=2, T=1, K=4\].*\[3, 1, 4\]"):
        cache.update(0, np.zeros((3, 1, 4), np.float32), np.zeros((3, 1, 4), np.float32), plan)
    with pytest.raises(ValueError, match=r"v_new.*\[H=2, T=1, K=4\].*\[2, 2, 4\]"):
        cache.update(0, np.zeros((2, 1, 4), np.float32), np.zeros((2, 2, 4), np.float32), plan)
    with pytest.raises(TypeError, match="k_new.*numpy array.*list"):
        cache.update(0, [], np.zeros((2, 1, 4), np.float32), plan)
    with pytest.raises(ValueError, match="length.*0 <= length <= 4.*got 5"):
        cache.truncate(5)
    with pytest.raises(ValueError, match=r"plan: layers \[0, 1\] were not written"):
        cache.advance(plan)  # nothing written to commit
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
        kvtutor.GPT2Config(**(base | kwargs))


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
    from kvtutor.models.gpt2 import sample

    logits = np.array([0.0, 1.0])
    assert sample(logits, 0) == 1 and sample(logits, np.float32(0.0)) == 1
    with pytest.raises(ValueError, match=r"^temperature: expected >= 0 and finite, got nan"):
        sample(logits, float("nan"))
    with pytest.raises(TypeError, match=r"^temperature: expected a float, got str"):
        sample(logits, "hot")
    with pytest.raises(TypeError, match=r"^temperature: expected a float, got NoneType"):
        sample(logits, None)


# ---------------------------------------------------------------- models that could only give NaN


LLAMA_CFG = kvtutor.LlamaConfig(vocab_size=32, d_model=16, n_heads=2, n_layers=1, max_seq_len=16, d_ff=32)
GPT2_CFG = kvtutor.GPT2Config(vocab_size=32, d_model=8, n_heads=2, n_layers=1, max_seq_len=16)

BAD_STD = [
    (float("nan"), ValueError, r"^std: expected a finite number > 0, got nan"),
    (float("inf"), ValueError, r"^std: expected a finite number > 0, got inf"),
    (-float("inf"), ValueError, r"^std: expected a finite number > 0, got -inf"),
    (0.0, ValueError, r"^std: expected a finite number > 0, got 0.0"),
    (-0.02, ValueError, r"^std: expected a finite number > 0, got -0.02"),
    (10**400, ValueError, r"^std: expected a finite number > 0, got an int of 1329 bits"),
    (1e40, ValueError, r"^std: expected draws that fit float32, got std=1e\+40, which puts inf in "),
    ("0.02", TypeError, r"^std: expected a float, got str '0.02'"),
    (None, TypeError, r"^std: expected a float, got NoneType"),
]


@pytest.mark.parametrize(("std", "exc", "match"), BAD_STD)
def test_a_scale_that_leaves_a_useless_model_is_refused(std, exc, match):
    """LlamaModel.random(cfg, std=nan) used to build an all-NaN model whose generate gave 0, 0, ..."""
    with pytest.raises(exc, match=match):
        kvtutor.LlamaModel.random(LLAMA_CFG, std=std)
    torch = pytest.importorskip("torch")
    with pytest.raises(exc, match=match):
        kvtutor.TorchLlamaModel.random(LLAMA_CFG, std=std, device="cpu", dtype=torch.float32)


def test_draws_past_the_dtypes_range_and_non_finite_epsilons_are_refused():
    with pytest.raises(
        ValueError, match=r"^std: expected draws that fit float16, got std=100000.0, which puts"
    ):
        kvtutor.LlamaModel.random(LLAMA_CFG, dtype=np.float16, std=1e5)
    assert kvtutor.LlamaModel.random(LLAMA_CFG, dtype=np.float16, std=0.02).n_params == LLAMA_CFG.n_params
    for eps, exc, match in [
        (
            float("inf"),
            ValueError,
            r"^layer_norm_eps: expected a finite number > 0, got inf",
        ),  # every LN: its bias
        (float("nan"), ValueError, r"^layer_norm_eps: expected a finite number > 0, got nan"),
        (0, ValueError, r"^layer_norm_eps: expected a finite number > 0, got 0"),
        ("1e-5", TypeError, r"^layer_norm_eps: expected a float, got str"),
    ]:
        with pytest.raises(exc, match=match):
            kvtutor.GPT2Config(
                vocab_size=32, d_model=8, n_heads=2, n_layers=1, max_seq_len=16, layer_norm_eps=eps
            )
    with pytest.raises(ValueError, match=r"^rms_norm_eps: expected a finite number > 0, got inf"):
        kvtutor.LlamaConfig(vocab_size=32, d_model=16, n_heads=2, n_layers=1, max_seq_len=16, d_ff=32,
                            rms_norm_eps=float("inf"))  # fmt: skip
    with pytest.raises(TypeError, match=r"^dtype: expected a floating NumPy dtype such as np.float32"):
        kvtutor.GPT2Model.random(GPT2_CFG, dtype=np.int8)  # used to give integer (mostly zero) weights


@pytest.mark.parametrize(("seed", "exc", "match"), [
    (-1, ValueError, r"^seed: expected 0 <= seed <= 18446744073709551615, got -1"),
    (2**64, ValueError, r"^seed: expected 0 <= seed <= 18446744073709551615, got 18446744073709551616"),
    (1.5, TypeError, r"^seed: expected an int, got float 1.5"),
    (True, TypeError, r"^seed: expected an int, got bool True"),
])  # fmt: skip
def test_a_bad_seed_is_named_in_every_constructor(seed, exc, match):
    """random(seed=-1) used to say only 'expected non-negative integer' (NumPy's words)."""
    for build in (lambda: kvtutor.GPT2Model.random(GPT2_CFG, seed=seed),
                  lambda: kvtutor.LlamaModel.random(LLAMA_CFG, seed=seed)):  # fmt: skip
        with pytest.raises(exc, match=match):
            build()
    pytest.importorskip("torch")
    for build in (
        lambda: kvtutor.TorchGPT2Model.random(GPT2_CFG, seed=seed, device="cpu"),
        lambda: kvtutor.TorchGPT2Model.random_on_device(GPT2_CFG, seed=seed, device="cpu"),
        lambda: kvtutor.TorchLlamaModel.random(LLAMA_CFG, seed=seed, device="cpu"),
    ):
        with pytest.raises(exc, match=match):
            build()


def test_non_finite_weights_are_refused_naming_the_tensor():
    """The loaders refuse nan/inf by key; a torch model refuses a weight that is not finite in its own
    dtype (a nan given, or 1e5 turned to inf by float16), naming the tensor; the source is untouched."""
    gpt2 = kvtutor.GPT2Model.random(GPT2_CFG, seed=1)
    sd = {k: v.copy() for k, v in gpt2.to_gpt2_state_dict().items()}
    sd["transformer.h.0.mlp.c_fc.weight"][1, 2] = np.nan
    with pytest.raises(
        ValueError, match=r"^state_dict\['transformer.h.0.mlp.c_fc.weight'\]: expected finite"
    ):
        kvtutor.GPT2Model.from_gpt2_state_dict(sd, n_heads=2)
    llama = kvtutor.LlamaModel.random(LLAMA_CFG, seed=1)
    lsd = {k: v.copy() for k, v in llama.to_state_dict().items()}
    lsd["model.layers.0.mlp.up_proj.weight"][0, 0] = np.inf
    with pytest.raises(
        ValueError, match=r"^state_dict\['model.layers.0.mlp.up_proj.weight'\]: expected finite"
    ):
        kvtutor.LlamaModel.from_state_dict(lsd, LLAMA_CFG)
    torch = pytest.importorskip("torch")
    big = {k: v.copy() for k, v in gpt2.to_gpt2_state_dict().items()}
    big["transformer.h.0.mlp.c_fc.weight"][1, 2] = 1e5  # finite in float32, inf in float16
    kept = {k: v.copy() for k, v in big.items()}
    with pytest.raises(
        ValueError, match=r"^layers\[0\].w_fc: expected finite weights in torch.float16, got inf"
    ):
        kvtutor.TorchGPT2Model.from_gpt2_state_dict(big, n_heads=2, device="cpu", dtype=torch.float16)
    assert all(np.array_equal(big[k], kept[k]) for k in kept)
    assert kvtutor.TorchGPT2Model.from_gpt2_state_dict(big, n_heads=2, device="cpu").dtype == torch.float32
    gpt2.weights.layers[0].w_o[0, 3] = np.nan  # a model built by hand (GPT2Model(config, weights))
    with pytest.raises(ValueError, match=r"^layers\[0\].w_o: expected finite weights in float32, got nan"):
        kvtutor.TorchGPT2Model.from_numpy(gpt2, device="cpu")
    assert np.isnan(gpt2.weights.layers[0].w_o[0, 3])
    lbig = {k: v.copy() for k, v in llama.to_state_dict().items()}
    lbig["model.norm.weight"][0] = 1e5
    with pytest.raises(ValueError, match=r"^norm_D: expected finite weights in torch.float16, got inf"):
        kvtutor.TorchLlamaModel.from_state_dict(lbig, LLAMA_CFG, device="cpu", dtype="fp16")
    llama.weights.layers[0].w_q[0, 0] = np.nan
    with pytest.raises(ValueError, match=r"^layers\[0\].w_q: expected finite weights in float32, got nan"):
        kvtutor.TorchLlamaModel.from_numpy(llama, device="cpu", dtype=torch.float32)


# ---------------------------------------------------------------- devices and dtypes, up front


def test_torch_models_check_dtype_and_device_before_building():
    """float8 used to be accepted and fail in generate; mps on Linux or cuda without CUDA at first use.
    One check (validate.torch_device, validate.torch_compute_dtype) serves both families and the
    flash kernels, and names the choices."""
    torch = pytest.importorskip("torch")
    llama = kvtutor.LlamaModel.random(LLAMA_CFG, seed=1)
    gpt2 = kvtutor.GPT2Model.random(GPT2_CFG, seed=1)
    builders = {
        "TorchGPT2Model.random": lambda **kw: kvtutor.TorchGPT2Model.random(GPT2_CFG, **kw),
        "TorchGPT2Model.random_on_device": lambda **kw: kvtutor.TorchGPT2Model.random_on_device(
            GPT2_CFG, **kw
        ),
        "TorchGPT2Model.from_numpy": lambda **kw: kvtutor.TorchGPT2Model.from_numpy(gpt2, **kw),
        "TorchGPT2Model.from_gpt2_state_dict": lambda **kw: kvtutor.TorchGPT2Model.from_gpt2_state_dict(
            gpt2.to_gpt2_state_dict(), 2, **kw),
        "TorchLlamaModel.random": lambda **kw: kvtutor.TorchLlamaModel.random(LLAMA_CFG, **kw),
        "TorchLlamaModel.from_numpy": lambda **kw: kvtutor.TorchLlamaModel.from_numpy(llama, **kw),
        "TorchLlamaModel.from_state_dict": lambda **kw: kvtutor.TorchLlamaModel.from_state_dict(
            llama.to_state_dict(), LLAMA_CFG, **kw),
    }  # fmt: skip
    choices = r"expected one of float32, float64, float16, bfloat16 \(the dtypes matmuls run in on cpu\)"
    bad = [
        ({"dtype": torch.float8_e4m3fn}, ValueError, rf"^dtype: {choices}, got torch.float8_e4m3fn"),
        ({"dtype": "fp8"}, ValueError, rf"^dtype: {choices}, got torch.float8_e4m3fn"),
        ({"dtype": torch.float8_e5m2}, ValueError, rf"^dtype: {choices}, got torch.float8_e5m2"),
        ({"dtype": torch.int32}, TypeError, r"^dtype: expected a floating torch.dtype"),
        ({"device": "meta"}, ValueError, r"^device: expected 'cpu', 'cuda' or 'mps' \(present: cpu"),
        (
            {"device": "tpu"},
            ValueError,
            r"^device: expected a torch device such as 'cpu' or 'cuda', got 'tpu'",
        ),
    ]
    if not torch.backends.mps.is_available():
        bad.append(({"device": "mps"}, ValueError, r"^device: expected an available device, got mps but MPS"))
    if not torch.cuda.is_available():
        bad.append(({"device": "cuda"}, ValueError, r"^device: .*CUDA is not available \(present: cpu\)"))
    else:
        n = torch.cuda.device_count()
        bad.append(
            ({"device": f"cuda:{n}"}, ValueError, rf"^device: expected an available device, got cuda:{n}")
        )
    for name, build in builders.items():
        for kwargs, exc, match in bad:
            with pytest.raises(exc, match=match):
                build(**{"device": "cpu", **kwargs})
        assert build(device="cpu", dtype=torch.float16).dtype == torch.float16, name


# ---------------------------------------------------------------- flash: checked up front


def test_flash_kernels_check_shapes_and_dtypes_up_front():
    """A key head size unlike the query's, an integer dtype or mixed dtypes used to surface as a
    RuntimeError from inside torch; sdpa_backend(device="cuda") without CUDA as an AssertionError."""
    torch = pytest.importorskip("torch")
    from kvtutor.measure import flash

    q, k, v = torch.randn(1, 4, 2, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    k6, kh = torch.randn(1, 2, 5, 6), torch.randn(1, 4, 5, 6)
    inputs = [t.clone() for t in (q, k, v)]
    m, l, acc = torch.zeros(1, 4, 2), torch.ones(1, 4, 2), torch.zeros(1, 4, 2, 8)
    part = flash.attend_split_torch(q, *[torch.randn(1, 4, 5, 8)] * 2)
    half = flash.attend_split_torch(q[:, :2], *[torch.randn(1, 2, 5, 8)] * 2)
    cases = [
        (lambda: flash.plain_attention_torch(q, k6, k6), ValueError,
         r"^k_BHSK: expected head dimension K = 8 \(q_BHTK's\), got 6"),
        (lambda: flash.plain_attention_torch(q.int(), k.int(), v.int()), TypeError,
         r"^q_BHTK: expected a floating torch tensor, got dtype torch.int32"),
        (lambda: flash.plain_attention_torch(q, k.bfloat16(), v.bfloat16()), ValueError,
         r"^k_BHSK: expected q_BHTK's dtype torch.float32, got torch.bfloat16"),
        (lambda: flash.attend_split_torch(q, kh, kh), ValueError, r"^k_BHPK: expected K = 8 \(q_BHTK's\)"),
        (lambda: flash.attend_split_torch(q, k, v), ValueError, r"^k_BHPK: expected H = 4 \(q_BHTK's\)"),
        (lambda: flash.attend_split_torch(q, k.double(), v), ValueError, r"^k_BHPK: expected q_BHTK's dtype"),
        (lambda: flash.online_softmax_step_torch(m, l, acc, torch.randn(1, 4, 2, 5), torch.randn(1, 4, 5, 6)),
         ValueError, r"^v_BHPK: expected K = 8 \(acc_BHTK's\)"),
        (lambda: flash.online_softmax_step_torch(m.int(), l, acc, torch.randn(1, 4, 2, 5), v), TypeError,
         r"^m_BHT: expected a floating torch tensor, got dtype torch.int32"),
        (lambda: flash.online_softmax_step_torch(m, l, acc, torch.randn(1, 4, 2, 0), v[:, :, :0]), ValueError,
         r"^s_BHTP: expected 4 dimensions \[B, H, T, P\], each >= 1, got shape \[1, 4, 2, 0\]"),
        (lambda: flash.combine_splits_torch([]), ValueError, r"^partials: expected a non-empty list"),
        (lambda: flash.combine_splits_torch([part, half]), ValueError,
         r"^partials\[1\].o_BHTK: expected H = 4 \(partials\[0\].o_BHTK's\)"),
        (lambda: flash.combine_splits_torch([part, "x"]), TypeError,
         r"^partials\[1\]: expected a TorchPartial"),
        (lambda: flash.sdpa_backend(dtype="int8", device="cpu"), TypeError, r"^dtype: expected a floating"),
        (lambda: flash.sdpa_backend(dtype="fp8", device="cpu"), ValueError,
         r"^dtype: expected one of float32"),
        (lambda: flash.sdpa_backend(device="meta"), ValueError, r"^device: expected 'cpu', 'cuda' or 'mps'"),
        (lambda: flash.measure_decode_attention((8,), dtype="int8", device="cpu"), TypeError, r"^dtype:"),
    ]  # fmt: skip
    if not torch.cuda.is_available():
        cases += [
            (lambda: flash.sdpa_backend(device="cuda"), ValueError, r"^device: .* CUDA is not available"),
            (lambda: flash.measure_decode_attention((8,), device="cuda"), ValueError, r"^device: .*CUDA"),
        ]
    for call, exc, match in cases:
        with pytest.raises(exc, match=match):
            call()
    for a, b in zip(inputs, (q, k, v), strict=True):
        assert torch.equal(a, b)  # nothing written into the inputs
    assert flash.combine_splits_torch([part, part]).o_BHTK.shape == (1, 4, 2, 8)
    assert flash.plain_attention_torch(q, k, v).shape == (1, 4, 2, 8)


# ---------------------------------------------------------------- the memory calculator: no raw errors


BIG = str(10**400)


@pytest.mark.parametrize(("argv", "message"), [
    (["--memory-gib", "1e300"], "--memory-gib: expected at most 1,073,741,824 GiB (1 EiB), got 1e+300"),
    (["--memory-gib", "1073741825"], "--memory-gib: expected at most 1,073,741,824 GiB (1 EiB), "
                                     "got 1,073,741,825.0"),
    (["--memory-gib", "inf"], "--memory-gib: expected a finite number of GiB > 0, got inf"),
    (["--seq-len", BIG], "--seq-len: expected at most 1,099,511,627,776, got about 10**400"),
    (["--batch", BIG], "--batch: expected at most 1,099,511,627,776, got about 10**400"),
    (["--batch", str(2**40 + 1)], "--batch: expected at most 1,099,511,627,776, got 1,099,511,627,777"),
])  # fmt: skip
def test_absurd_sizes_get_one_line_and_exit_2(capsys, argv, message):
    """--memory-gib 1e300 used to end in a traceback (OverflowError), so did a huge --seq-len or --batch."""
    from kvtutor.measure import memory

    assert memory.main(["llama-3-8b", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"kv-memory: error: {message}\n"


def test_kv_memory_refuses_absurd_budgets_and_counts():
    from kvtutor.measure.memory import kv_memory
    from kvtutor.models.hf_config import load_model_spec

    spec = load_model_spec("llama-3-8b")
    for kwargs, match in [
        ({"memory_gib": 1e300}, r"^memory_gib: expected at most 1,073,741,824 GiB \(1 EiB\), got 1e\+300$"),
        ({"memory_gib": 10**400}, r"^memory_gib: expected at most .* got about 10\*\*400$"),
        ({"memory_gib": float("nan")}, r"^memory_gib: expected a finite number of GiB > 0, got nan$"),
        ({"seq_len": 2**40 + 1}, r"^seq_len: expected at most 1,099,511,627,776, got 1,099,511,627,777$"),
        ({"batch": 10**400}, r"^batch: expected at most 1,099,511,627,776, got about 10\*\*400$"),
    ]:
        with pytest.raises(ValueError, match=match):
            kv_memory(spec, **{"seq_len": 1024, **kwargs})
    at_the_bounds = kv_memory(spec, 2**40, 2**40, memory_gib=2**30)  # the bounds themselves are accepted
    assert at_the_bounds.max_batch == 7 and not at_the_bounds.fits
    assert "largest batch that fits: 7" in kvtutor.measure.memory.format_report(at_the_bounds)


def _config_file(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


LLAMA_JSON = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
              "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 64}  # fmt: skip


def test_every_bad_config_file_gets_one_line_naming_the_file(tmp_path, capsys):
    """JSON nested 100000 deep used to raise RecursionError; an int of 5000 digits a ValueError that
    named no file; a size of 10**400 an OverflowError in the report; an unhashable layer_types entry
    a TypeError; a size the spec refuses named no file."""
    import json

    from kvtutor.measure import memory
    from kvtutor.models.hf_config import read_hf_config

    nested = [1]
    for _ in range(600):
        nested = [nested]
    files = {
        "deep.json": ("[" * 100_000 + "]" * 100_000, "nests its JSON too deep to read"),
        "digits.json": ('{"vocab_size": ' + "1" * 5000 + "}", "could not be read as JSON (Exceeds the limit"),
        "huge.json": (json.dumps({**LLAMA_JSON, "num_hidden_layers": 10**400}),
                      "config['num_hidden_layers'] in {path}: expected at most 1,099,511,627,776, "
                      "got about 10**400"),
        "types.json": (json.dumps({**LLAMA_JSON, "sliding_window": 4, "layer_types": [[1], [2]]}),
                       "config['layer_types'] in {path}: expected 'sliding_attention' or 'full_attention'"),
        "nested.json": (json.dumps({**LLAMA_JSON, "sliding_window": nested}), "characters)"),
        "experts.json": (json.dumps({**LLAMA_JSON, "model_type": "mixtral", "num_local_experts": 2,
                                     "num_experts_per_tok": 4}),
                         "config['num_experts_per_tok'] in {path}: expected <= num_local_experts=2, got 4"),
    }  # fmt: skip
    for name, (text, message) in files.items():
        path = _config_file(tmp_path, name, text)
        message = message.format(path=path)
        with pytest.raises(ValueError) as info:
            read_hf_config(path)
        assert message in str(info.value) and path in str(info.value), str(info.value)
        assert len(str(info.value)) < 400 and "\n" not in str(info.value)
        assert memory.main([path]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and message in err and "Traceback" not in err


def test_an_int_too_large_for_a_float_is_refused_not_overflowed(toy_model):
    """math.isfinite(10**400) raises OverflowError: the checkers compare instead."""
    with pytest.raises(ValueError, match=r"^temperature: expected >= 0 and finite, got 1000"):
        toy_model.generate([1], 2, temperature=10**400)
    with pytest.raises(ValueError, match=r"^config\['rope_theta'\]: expected a finite number > 0, got 1000"):
        kvtutor.LlamaConfig.from_hf({**LLAMA_JSON, "rope_theta": 10**400})
    with pytest.raises(
        ValueError, match=r"^rope_theta: expected a finite number > 0, got an int of 1329 bits"
    ):
        kvtutor.LlamaConfig(vocab_size=32, d_model=16, n_heads=2, n_layers=1, max_seq_len=16, d_ff=32,
                            rope_theta=10**400)  # fmt: skip
