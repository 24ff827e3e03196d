"""Choosing a token (issue 43, class 4): ``sample``'s arguments are refused by name, no token is ever
chosen from a non-finite logit, every greedy choice outside the models goes through ``greedy``, and
every seed is checked by ``validate.check_seed``. A refused call changes nothing."""

from __future__ import annotations

import ast
import copy
from pathlib import Path

import numpy as np
import pytest

import kvtutor
from kvtutor.book import demos, display
from kvtutor.caches.quant import random_prompts
from kvtutor.models.steps import greedy, sample
from kvtutor.serving import disagg
from kvtutor.serving.speculative import speculative_generate, token_probs
from kvtutor.validate import check_logits_row, seeded_rng

LOGITS_V = np.array([0.0, 3.0, 1.0, 3.0])

BAD_SAMPLE = [
    ({"top_k": True}, TypeError, r"^top_k: expected an int, got bool True"),
    ({"top_k": 2.5}, TypeError, r"^top_k: expected an int, got float 2\.5"),
    ({"top_k": 0}, ValueError, r"^top_k: expected 1 <= top_k <= 4, got 0"),
    ({"top_k": 5}, ValueError, r"^top_k: expected 1 <= top_k <= 4, got 5"),
    ({"top_k": "2"}, TypeError, r"^top_k: expected an int, got str"),
    ({"rng": 3}, TypeError, r"^rng: expected a numpy.random.Generator .* got int 3"),
    ({"rng": np.random.RandomState(0)}, TypeError, r"^rng: expected a numpy.random.Generator"),
    ({"temperature": True}, TypeError, r"^temperature: expected a float, got bool"),
    ({"temperature": -1.0}, ValueError, r"^temperature: expected >= 0"),
    ({"temperature": 1e-320}, ValueError, r"^temperature: .*logits / temperature stays finite.* got 1e-320"),
    ({"logits_V": LOGITS_V[None]}, ValueError, r"^logits_V: expected one row of logits \[V\].*\[1, 4\]"),
    ({"logits_V": np.zeros((2, 3))}, ValueError, r"^logits_V: expected one row .* got shape \[2, 3\]"),
    ({"logits_V": np.zeros(0)}, ValueError, r"^logits_V: expected one row .* V >= 1, got shape \[0\]"),
    ({"logits_V": [[1.0, 2.0], [3.0]]}, ValueError, r"^logits_V: expected one row .*, got ragged"),
    ({"logits_V": np.array([True, False])}, TypeError, r"^logits_V: expected real numbers.*bool"),
    ({"logits_V": np.array(["a", "b"])}, TypeError, r"^logits_V: expected real numbers"),
    ({"logits_V": np.array([0.0, np.nan, 1.0])}, ValueError, r"^logits_V: expected finite numbers, got 1"),
    ({"logits_V": np.array([0.0, np.inf])}, ValueError, r"^logits_V: expected finite.* 1 NaN or inf"),
]


@pytest.mark.parametrize(
    ("change", "exc", "match", "temperature"),
    [(*bad, t) for bad in BAD_SAMPLE for t in (0.0, 1.0) if t or "temperature" not in bad[0]],
)
def test_sample_refuses_by_name_and_changes_nothing(change, exc, match, temperature):
    """Greedy or not, every argument is checked (a bad top_k or rng is an error even where it
    would not be used), before the generator draws: its state and the logits are as they were."""
    rng = np.random.default_rng(5)
    kwargs = {"logits_V": LOGITS_V.copy(), "temperature": temperature, "rng": rng, **change}
    logits_before = copy.deepcopy(kwargs["logits_V"])
    state = copy.deepcopy(rng.bit_generator.state)
    with pytest.raises(exc, match=match):
        sample(**kwargs)
    assert rng.bit_generator.state == state
    assert repr(kwargs["logits_V"]) == repr(logits_before)


def test_sample_still_samples():
    assert sample(LOGITS_V) == 1  # the first of a tie, as np.argmax
    assert sample(list(LOGITS_V)) == 1
    assert sample(LOGITS_V, 5.0, np.random.default_rng(0), top_k=1) in (1, 3)
    assert sample(LOGITS_V, 1.0, np.random.default_rng(0), top_k=np.int64(2)) in (1, 3)
    draws = {sample(LOGITS_V, 1.0, np.random.default_rng(s)) for s in range(200)}
    assert draws == {0, 1, 2, 3}
    assert sample(np.array([1, 5, 2]), 0.5, np.random.default_rng(0)) in (0, 1, 2)  # int logits


def test_sample_is_displayed_as_the_mechanism_alone():
    """The prefill page shows ``sample``: its checks run in ``check_sample``, outside the body."""
    from kvtutor.book.display import source
    from kvtutor.models import steps

    shown = source(sample)
    assert "def sample(" in shown and "raise" not in shown and "check_" not in shown
    assert sample.__wrapped__ is not sample and steps.check_sample.__doc__


def test_greedy_refuses_what_argmax_would_silently_take():
    assert greedy(np.array([0.0, 2.0, 2.0])) == 1
    assert greedy([0, 3, 1]) == 1
    for bad, match in [
        (np.array([np.nan, 0.0]), "finite"),  # np.argmax would say 0
        (np.array([0.0, -np.inf, np.inf]), "finite"),
        (np.zeros((2, 3)), r"one row .* \[2, 3\]"),  # np.argmax would say a flattened index
        (np.float64(1.0), r"one row .* \[\]"),
    ]:
        with pytest.raises(ValueError, match=f"^logits_V: .*{match}"):
            greedy(bad)


def test_greedy_takes_torch_rows():
    torch = pytest.importorskip("torch")
    assert greedy(torch.tensor([0.0, 1.0, 5.0, 5.0])) == 2
    with pytest.raises(ValueError, match="^logits_V: expected finite"):
        greedy(torch.tensor([0.0, float("nan")]))
    with pytest.raises(TypeError, match="^logits_V: expected real numbers.*bool"):
        check_logits_row(torch.tensor([True]))


def test_speculative_probabilities_refuse_non_finite_logits():
    logits_TV = np.array([[0.0, 1.0], [np.nan, 0.0]])
    for temperature in (0.0, 1.0):
        with pytest.raises(ValueError, match="finite"):
            token_probs(logits_TV, temperature)
    np.testing.assert_array_equal(token_probs(np.array([[0.0, 2.0, 2.0]]), 0.0), [[0.0, 1.0, 0.0]])


#: Modules outside the models that may call argmax on something other than logits: an index found
#: in a boolean mask (prefix.py) and the top of a probability row (speculative.py's ``_draw``).
ARGMAX_ALLOWED = {"caches/prefix.py": 1, "serving/speculative.py": 1}


def test_every_greedy_choice_outside_the_models_goes_through_greedy():
    """No ``argmax`` of logits outside ``kvtutor.models`` (whose heads check their logits) and
    ``validate.greedy``: a new one would choose a token from a NaN without an error."""
    package = Path(kvtutor.__file__).parent
    found: dict[str, int] = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel.startswith("models/") or rel == "validate.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            func = node.func if isinstance(node, ast.Call) else None
            name = getattr(func, "attr", None) or getattr(func, "id", None)
            if name == "argmax":
                found[rel] = found.get(rel, 0) + 1
    assert found == ARGMAX_ALLOWED


# ---------------------------------------------------------------- seeds


def _generate(model, seed):
    cache = model.new_cache()
    try:
        model.generate([1, 2], 2, temperature=1.0, seed=seed, cache=cache)
    finally:
        assert len(cache) == 0  # refused before the prefill


SEEDED = {
    "generate": _generate,
    "generate_without_cache": lambda m, s: demos.generate_without_cache(m, [1, 2], 2, 1.0, seed=s),
    "pseudo_code_generate": lambda m, s: demos.pseudo_code_generate(m, [1, 2], 0, 1.0, seed=s),
    "QCache.scramble": lambda m, s: demos.QCache.for_model(m).scramble(s),
    "GPT2Model.random": lambda m, s: kvtutor.GPT2Model.random(m.config, seed=s),
    "random_prompts": lambda m, s: random_prompts(32, 2, 3, seed=s),
    "make_trace": lambda m, s: disagg.make_trace(seed=s),
    "speculative_generate": lambda m, s: speculative_generate(m, m.first_layers(1), [1, 2], 2, seed=s),
    "seeded_rng": lambda m, s: seeded_rng(s),
}


@pytest.mark.parametrize(
    ("seed", "exc", "match"),
    [
        (-1, ValueError, r"^seed: expected 0 <= seed <= 18446744073709551615, got -1$"),
        (2**64, ValueError, r"^seed: expected 0 <= seed <= 18446744073709551615, got 18446744073709551616$"),
        (1.5, TypeError, r"^seed: expected an int, got float 1\.5$"),
        (True, TypeError, r"^seed: expected an int, got bool True$"),
        ("0", TypeError, r"^seed: expected an int, got str '0'$"),
    ],
)
@pytest.mark.parametrize("entry", list(SEEDED))
def test_every_seed_is_checked_by_name(toy_model, entry, seed, exc, match):
    with pytest.raises(exc, match=match):
        SEEDED[entry](toy_model, seed)


def test_torch_seeds_are_checked_by_name():
    pytest.importorskip("torch")
    from kvtutor.bench.common import random_ids
    from kvtutor.models.torch_gpt2 import TorchGPT2Model

    model = TorchGPT2Model.random(kvtutor.TOY_CONFIG, device="cpu")
    for seed in (-1, 1.5, True):
        with pytest.raises((TypeError, ValueError), match="^seed: expected"):
            random_ids(model, 1, 2, seed=seed)
        with pytest.raises((TypeError, ValueError), match="^seed: expected"):
            TorchGPT2Model.random(kvtutor.TOY_CONFIG, seed=seed, device="cpu")


def test_setup_notebook_refuses_a_bad_seed_before_seeding_anything():
    state = np.random.get_state()[1].copy()
    for seed in (-1, 1.5, 2**32):
        with pytest.raises((TypeError, ValueError), match="^seed: expected"):
            display.setup_notebook(seed)
    np.testing.assert_array_equal(np.random.get_state()[1], state)


def test_a_seed_still_seeds(toy_model):
    a = toy_model.generate([1, 2], 4, temperature=1.0, seed=7)
    assert a == toy_model.generate([1, 2], 4, temperature=1.0, seed=np.int64(7))
    assert seeded_rng(None).random() != seeded_rng(None).random()
