"""Loading GPT-2 weights: every bad state dict is refused with an error that names the key.

Issue 12: NaN, inf, object and string arrays, integer dtypes, a bogus dtype, non-str keys, gaps
in the layer numbering and truncated checkpoints used to load (or fail with a misleading message).
A property test corrupts state dicts at random: the loader gives a correct model or a clear error.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvtutor
from kvtutor.models.gpt2_weights import check_against_hf_config, weights_from_state_dict

CFG = kvtutor.GPT2Config(vocab_size=20, d_model=8, n_heads=2, n_layers=3, max_seq_len=8)
CLEAN = kvtutor.GPT2Model.random(CFG, seed=3)
IDS = [1, 5, 7, 2]
CLEAN_LOGITS = CLEAN.logits_without_cache(IDS)
HF_CONFIG = {"model_type": "gpt2", "n_layer": 3, "n_head": 2, "n_embd": 8, "vocab_size": 20, "n_positions": 8}


def state_dict():
    return {k: v.copy() for k, v in CLEAN.to_gpt2_state_dict().items()}


def load(sd, **kwargs):
    return kvtutor.GPT2Model.from_gpt2_state_dict(sd, n_heads=2, **kwargs)


def with_value(key, value):
    sd = state_dict()
    sd[key] = value
    return sd


def poked(key, index, value):
    sd = state_dict()
    sd[key] = sd[key].copy()
    sd[key][index] = value
    return sd


def test_clean_round_trip():
    model = load(state_dict(), hf_config=HF_CONFIG)
    np.testing.assert_array_equal(model.logits_without_cache(IDS), CLEAN_LOGITS)


# ---------------------------------------------------------------- each case of "What was seen"

BAD = [
    # non-finite anywhere: generation used to return [0, 0, 0, 0, 0]
    (
        lambda: poked("transformer.h.1.mlp.c_fc.weight", (2, 3), np.nan),
        ValueError,
        r"^state_dict\['transformer.h.1.mlp.c_fc.weight'\]: expected finite weights, got nan at .*\[2, 3\]",
    ),
    (
        lambda: poked("transformer.wpe.weight", (0, 0), -np.inf),
        ValueError,
        r"^state_dict\['transformer.wpe.weight'\]: expected finite weights, got -inf",
    ),
    (
        lambda: poked("transformer.ln_f.bias", 1, np.inf),
        ValueError,
        r"^state_dict\['transformer.ln_f.bias'\]: expected finite weights, got inf at index \[1\]",
    ),
    # NaN in the tied head used to say "different matrix"
    (
        lambda: poked("lm_head.weight", (0, 0), np.nan),
        ValueError,
        r"^state_dict\['lm_head.weight'\]: expected finite weights, got nan",
    ),
    # object arrays used to become NaN; strings, integers and bools are not weights either
    (
        lambda: with_value("transformer.ln_f.weight", np.array([1.0] * 8, dtype=object)),
        TypeError,
        r"^state_dict\['transformer.ln_f.weight'\]: expected floating-point .*, got an array of dtype object",
    ),
    (
        lambda: with_value("transformer.ln_f.weight", np.array(["1.0"] * 8)),
        TypeError,
        r"^state_dict\['transformer.ln_f.weight'\]: expected floating-point .*, got an array of dtype <U3",
    ),
    (
        lambda: with_value("transformer.h.0.ln_1.bias", np.zeros(8, dtype=np.int32)),
        TypeError,
        r"^state_dict\['transformer.h.0.ln_1.bias'\]: expected floating-point .*dtype int32",
    ),
    (
        lambda: with_value("transformer.h.0.ln_1.bias", np.zeros(8, dtype=bool)),
        TypeError,
        r"^state_dict\['transformer.h.0.ln_1.bias'\]: .*dtype bool",
    ),
    (
        lambda: with_value("transformer.h.0.ln_1.bias", [0.0] * 8),
        TypeError,
        r"^state_dict\['transformer.h.0.ln_1.bias'\]: expected a numpy array or torch tensor, got list",
    ),
    # an int key used to raise AttributeError
    (lambda: {**state_dict(), 3: np.zeros(2)}, TypeError, r"^state_dict: expected str keys, got int key 3"),
    # an extra h.5.* used to be reported as a missing h.2 key
    (
        lambda: {**state_dict(), "transformer.h.5.ln_1.weight": np.ones(8, np.float32)},
        ValueError,
        r"^state_dict: unexpected key 'h.5.ln_1.weight': layers h.0 .. h.2 are numbered in order.* h.5",
    ),
    (
        lambda: {k: v for k, v in state_dict().items() if not k.startswith("transformer.h.1.")},
        ValueError,
        r"^state_dict: unexpected key 'h.2.\S+': layers h.0 .. h.0 .* or layer h.1 is missing",
    ),
    (
        lambda: {k: v for k, v in state_dict().items() if k != "transformer.h.2.attn.c_proj.bias"},
        ValueError,
        r"^state_dict: missing key 'h.2.attn.c_proj.bias' \(1 missing in all\)",
    ),
    # a 1-D wte used to blame wpe
    (
        lambda: with_value("transformer.wte.weight", np.zeros(160, np.float32)),
        ValueError,
        r"^state_dict\['wte.weight'\]: expected \[V, D\], got shape \[160\]",
    ),
    (
        lambda: with_value("transformer.wpe.weight", np.zeros((8, 9), np.float32)),
        ValueError,
        r"^state_dict\['wpe.weight'\]: expected \[M, D\] with D = wte's 8, got \[8, 9\]",
    ),
    (
        lambda: with_value("lm_head.weight", np.zeros((20, 9), np.float32)),
        ValueError,
        r"^state_dict\['lm_head.weight'\]: expected the tied wte.weight's shape \[20, 8\], got \[20, 9\]",
    ),
    (
        lambda: with_value("lm_head.weight", state_dict()["lm_head.weight"] + 1),
        ValueError,
        r"^state_dict\['lm_head.weight'\]: expected the tied token embedding .* different matrix",
    ),
    (
        lambda: {**state_dict(), "wte.weight": state_dict()["transformer.wte.weight"]},
        ValueError,
        r"^state_dict: key 'wte.weight' given twice",
    ),
]


@pytest.mark.parametrize(("make", "exc", "match"), BAD)
def test_bad_state_dicts_are_refused_by_key(make, exc, match):
    with pytest.raises(exc, match=match):
        load(make())


@pytest.mark.parametrize("dtype", [np.int32, np.int8, "bogus", bool, object, "U3"])
def test_a_non_floating_dtype_is_refused(dtype):
    """dtype=np.int32 used to truncate every weight (output [3, 3, 3, 3, 3]); "bogus" raised from NumPy."""
    with pytest.raises(TypeError, match=r"^dtype: expected a floating NumPy dtype such as np.float32, got "):
        load(state_dict(), dtype=dtype)


def test_float_dtypes_load():
    assert load(state_dict(), dtype=np.float64).weights.wte_VD.dtype == np.float64
    model = load({k: v.astype(np.float64) for k, v in state_dict().items()})
    np.testing.assert_array_equal(model.logits_without_cache(IDS), CLEAN_LOGITS)


def test_overflow_in_conversion_is_named():
    sd = poked("transformer.wpe.weight", (1, 1), 1e6)
    with pytest.raises(
        ValueError, match=r"^state_dict\['transformer.wpe.weight'\]: .*got inf .*overflows float16"
    ):
        load(sd, dtype=np.float16)


# ---------------------------------------------------------------- against config.json


def test_a_truncated_checkpoint_is_caught_by_its_config():
    truncated = {k: v for k, v in state_dict().items() if not k.startswith("transformer.h.2.")}
    assert load(truncated).config.n_layers == 2  # on its own it looks like a 2-layer model
    with pytest.raises(ValueError, match=r"^hf_config\['n_layer'\]: the config says 3, the state dict has 2"):
        load(truncated, hf_config=HF_CONFIG)


@pytest.mark.parametrize(
    ("change", "exc", "match"),
    [
        ({"n_head": 4}, ValueError, r"^hf_config\['n_head'\]: the config says 4, the state dict has 2"),
        ({"vocab_size": 50257}, ValueError, r"^hf_config\['vocab_size'\]: the config says 50257"),
        ({"n_positions": 1024}, ValueError, r"^hf_config\['n_positions'\]"),
        ({"n_inner": 64}, ValueError, r"^hf_config\['n_inner'\]: the config says 64, the state dict has 32"),
        ({"model_type": "llama"}, ValueError, r"^hf_config\['model_type'\]: expected 'gpt2', got 'llama'"),
    ],
)
def test_config_json_mismatches(change, exc, match):
    with pytest.raises(exc, match=match):
        load(state_dict(), hf_config={**HF_CONFIG, **change})


def test_hf_config_must_be_a_dict():
    with pytest.raises(TypeError, match=r"^hf_config: expected a config.json dict, got str"):
        check_against_hf_config(CFG, "config.json")


def test_a_transformers_config_dict_is_accepted():
    transformers = pytest.importorskip("transformers")
    hf = transformers.GPT2Config(n_embd=8, n_head=2, n_layer=3, n_positions=8, vocab_size=20).to_dict()
    assert load(state_dict(), hf_config=hf).config == CFG


def test_torch_tensors_are_checked_too():
    torch = pytest.importorskip("torch")
    sd = {k: torch.from_numpy(v) for k, v in state_dict().items()}
    sd["transformer.h.0.ln_2.weight"] = torch.ones(8, dtype=torch.int64)
    with pytest.raises(
        TypeError, match=r"^state_dict\['transformer.h.0.ln_2.weight'\]: .*tensor of dtype torch.int64"
    ):
        load(sd)
    sd["transformer.h.0.ln_2.weight"] = torch.full((8,), float("nan"), dtype=torch.bfloat16)
    with pytest.raises(
        ValueError, match=r"^state_dict\['transformer.h.0.ln_2.weight'\]: expected finite weights"
    ):
        load(sd)


def test_the_torch_loader_refuses_nan_as_well():
    pytest.importorskip("torch")
    with pytest.raises(ValueError, match=r"^state_dict\['lm_head.weight'\]: expected finite weights"):
        kvtutor.TorchGPT2Model.from_gpt2_state_dict(poked("lm_head.weight", (3, 3), np.nan), n_heads=2)


# ---------------------------------------------------------------- property: right model or clear error

KEYS = sorted(state_dict())


@st.composite
def corruptions(draw):
    """A clean state dict with one to three random corruptions."""
    sd = state_dict()
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(sorted(sd, key=str)))
        kind = draw(st.sampled_from(["nan", "inf", "drop", "shape", "dtype", "flatten"]))
        value = sd[key]
        if kind == "drop":
            del sd[key]
        elif kind in ("nan", "inf"):
            if value.dtype.kind != "f":
                continue
            value = value.copy()
            flat = value.reshape(-1)
            flat[draw(st.integers(0, flat.size - 1))] = np.nan if kind == "nan" else -np.inf
            sd[key] = value
        elif kind == "shape":
            axis = draw(st.integers(0, value.ndim - 1))
            sd[key] = np.concatenate([value, value.take([0], axis=axis)], axis=axis)
        elif kind == "flatten":
            sd[key] = value.reshape(-1) if value.ndim > 1 else value.reshape(1, -1)
        else:
            if value.dtype != np.float32:  # int32 then float64 would be valid weights with other values
                continue
            dtype = draw(st.sampled_from([np.int32, np.int64, np.bool_, object, np.str_, np.float64]))
            with np.errstate(invalid="ignore"):
                sd[key] = value.astype(dtype)
    return sd


def _outcome(loader, sd):
    try:
        model = loader(sd)
    except (ValueError, TypeError) as err:
        assert str(err) and "\n" not in str(err)
        assert str(err).split(":")[0] in ("state_dict", "dtype", "n_heads", "n_kv_heads", "d_model") or str(
            err
        ).startswith("state_dict[")
        return None
    return model


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(corruptions())
def test_corrupted_state_dicts_give_the_right_model_or_a_clear_error(sd):
    model = _outcome(load, sd)
    if model is not None:  # what survives is harmless: a dropped lm_head, or float64 weights
        np.testing.assert_allclose(model.logits_without_cache(IDS), CLEAN_LOGITS, rtol=1e-6, atol=1e-6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(corruptions())
def test_corrupted_state_dicts_and_the_torch_loader(sd):
    pytest.importorskip("torch")
    model = _outcome(lambda d: kvtutor.TorchGPT2Model.from_gpt2_state_dict(d, n_heads=2, device="cpu"), sd)
    if model is not None:
        logits = model.logits_without_cache([IDS])[0].double().numpy()
        np.testing.assert_allclose(logits, CLEAN_LOGITS, rtol=1e-4, atol=1e-5)


def test_weights_from_state_dict_is_the_shared_checker():
    config, weights = weights_from_state_dict(state_dict(), 2)
    assert config == CFG and len(weights.layers) == 3
