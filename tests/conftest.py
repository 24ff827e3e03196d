"""Shared fixtures: small random models, built in memory (nothing is downloaded)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import settings

import kvtutor

# CI runs the same examples every time (a failure there reproduces locally with CI=true);
# local runs explore new ones.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(scope="module")
def one_torch_thread():
    """Torch on one thread for a module of tiny matrices: one thread is fastest, and spinning
    threads slow everything on a busy machine. Use it with
    ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def toy_model() -> kvtutor.GPT2Model:
    return kvtutor.load_toy_model()


@pytest.fixture(scope="session")
def small_model() -> kvtutor.GPT2Model:
    cfg = kvtutor.GPT2Config(vocab_size=50, d_model=12, n_heads=3, n_layers=2, max_seq_len=24)
    return kvtutor.GPT2Model.random(cfg, seed=1)


@pytest.fixture(scope="session")
def random_hf_gpt2():
    """transformers' GPT2LMHeadModel from a small config with random weights (3 layers, 4 heads,
    d_model 24, vocab 61, 40 positions), weights scaled up so that any difference would show."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from kvtutor.models.gpt2_weights import build_hf_gpt2

    cfg = kvtutor.GPT2Config(vocab_size=61, d_model=24, n_heads=4, n_layers=3, max_seq_len=40)
    torch.manual_seed(0)
    hf = build_hf_gpt2(cfg)  # transformers' own random initialisation
    with torch.no_grad():  # larger weights than the default init
        for p in hf.parameters():
            p.add_(0.05 * torch.randn_like(p))
    hf.tie_weights()
    return hf


def cache_state(cache) -> tuple[int, list[np.ndarray]]:
    """Length and a copy of every layer's keys and values (to check that nothing changed)."""
    arrays = []
    for layer in range(cache.n_layers):
        arrays += [np.array(cache.keys(layer)), np.array(cache.values(layer))]
    if hasattr(cache, "k_LHMK"):
        arrays += [cache.k_LHMK.copy(), cache.v_LHMK.copy()]
    return len(cache), arrays


def assert_same_state(before, after) -> None:
    assert before[0] == after[0]
    assert len(before[1]) == len(after[1])
    for a, b in zip(before[1], after[1], strict=True):
        np.testing.assert_array_equal(a, b)
