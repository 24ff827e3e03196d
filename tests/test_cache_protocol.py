"""The cache protocol checks itself, for every cache class in both backends.

Random sequences of protocol calls (``protocol_ops``), valid and invalid, run on every cache kind:
each invalid call raises ValueError or TypeError naming the argument and leaves the cache exactly
as it was; each valid sequence gives what the reference (the committed rows, kept in float64)
gives. A cache whose policy keeps every position it was given (a window at least as long as the
sequence, a banded cache of that window, the paged and prefix-cached sequences) must equal it
exactly; the int8 cache within half a quantisation step. Windows that evict are compared with the
banded cache in ``test_window_cache.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from protocol_ops import Driver, operations

from kvtutor.caches.kv import ConcatKVCache, PreallocatedKVCache
from kvtutor.caches.paged import PagedKVPool
from kvtutor.caches.prefix import PrefixCachingPool
from kvtutor.caches.protocol import KVCacheBase
from kvtutor.caches.quant import QuantizedKVCache
from kvtutor.caches.window import BandedKVCache, SlidingWindowKVCache

torch = pytest.importorskip("torch")
from kvtutor.caches.torch_kv import TorchConcatKVCache, TorchPreallocatedKVCache  # noqa: E402

L, H, K = 2, 2, 3  # layers, KV heads, head width


def one_sequence_kinds(dtype, device=None):
    """name -> (factory of capacity, exact?) for every cache of one sequence in this backend."""
    d = {"dtype": dtype, "device": device}

    def paged(capacity, pool_class=PagedKVPool):
        return pool_class(L, H, K, 2 * capacity, 2, max_seq_len=capacity, **d).new_sequence()

    return {
        "preallocated": (lambda m: PreallocatedKVCache(L, H, m, K, **d), True),
        "concat": (lambda m: ConcatKVCache(L, H, m, K, **d), True),
        "window": (lambda m: SlidingWindowKVCache(L, H, m, K, window=m, **d), True),
        "window+sink": (
            lambda m: SlidingWindowKVCache(L, H, m, K, window=m, n_sink=min(1, m - 1), **d),
            True,
        ),
        "banded": (lambda m: BandedKVCache(L, H, m, K, window=m, **d), True),
        "int8 per_channel": (lambda m: QuantizedKVCache(L, H, m, K, group_size=2, **d), False),
        "int8 per_token": (lambda m: QuantizedKVCache(L, H, m, K, key_mode="per_token", **d), False),
        "paged": (paged, True),
        "prefix-cached": (lambda m: paged(m, PrefixCachingPool), True),
    }


CACHES = {f"numpy {k}": v for k, v in one_sequence_kinds(np.float32).items()}
CACHES |= {f"torch {k}": v for k, v in one_sequence_kinds(torch.float64, "cpu").items()}
CACHES["torch batched preallocated"] = (
    lambda m: TorchPreallocatedKVCache(L, 1, H, m, K, "cpu", torch.float64), True
)  # fmt: skip
CACHES["torch batched concat"] = (lambda m: TorchConcatKVCache(L, 1, H, m, K, "cpu", torch.float64), True)


def every_cache_class() -> set[type]:
    """Every concrete cache class of the package (so that a new one cannot miss this test)."""
    found, todo = set(), [KVCacheBase]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            todo.append(sub)
            if sub.__module__.startswith("kvtutor.caches") and "update" in vars(sub):
                found.add(sub)
    return found


def test_every_cache_class_is_driven():
    covered = {type(make(4)) for make, _ in CACHES.values()}
    assert every_cache_class() <= covered, every_cache_class() - covered
    assert {c.backend for c in (make(4) for make, _ in CACHES.values())} == {"numpy", "torch"}


@pytest.mark.parametrize("name", list(CACHES))
@settings(max_examples=40, deadline=None)
@given(data=st.data(), capacity=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_every_protocol_call_is_checked_and_every_valid_one_equals_the_reference(name, data, capacity, seed):
    make, exact = CACHES[name]
    driver = Driver(make(capacity), make(capacity), seed, exact)
    for kind, number, fault in data.draw(operations(L, capacity)):
        driver.run(kind, number, fault)


@pytest.mark.parametrize("name", list(CACHES))
def test_the_driver_catches_a_cache_that_skips_a_check(name, monkeypatch):
    """The property above bites: with the shape check switched off, the bad call goes through
    (it raises something else, or nothing) and the driver reports it."""
    make, exact = CACHES[name]
    driver = Driver(make(4), make(4), 0, exact)
    driver.run("plan", 1, None)
    monkeypatch.setattr(KVCacheBase, "check_update", lambda self, layer, k, v, plan: (layer, k, v))
    with pytest.raises(AssertionError):
        driver.run("update", 0, "k_heads")
