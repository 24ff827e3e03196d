"""A NumPy cache of one sequence, seen through the torch protocol: how a torch model uses the
window, int8, paged and prefix-cached caches.

Those caches keep NumPy arrays on the host and answer the NumPy verbs (``update``, ``mask``,
``advance``, ``truncate``). Given one, a torch model (``TorchDecoder.check_cache``) wraps it in a
``SequenceCache``, a batch of one: each layer's new keys and values go to the host, the cache's
answer comes back as tensors on the model's device, and the mask is the cache's own (a window's
band) or else the causal one. Every decision stays the cache's, so a torch model gets exactly the
cache behaviour the NumPy models get, tested the same way (``tests/test_every_model.py``). The
copies make it a path for checking and teaching, not a fast one: the fast caches are
``torch_kv``'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..validate import check_int
from .kv import CacheBase, cache_mask
from .torch_kv import Plan, TorchKVCache, causal_mask

__all__ = ["SequenceCache"]

_HOST_DTYPES = (torch.float32, torch.float64)  # what NumPy holds as it is; others go through float32


class SequenceCache(TorchKVCache):
    """``inner``, a NumPy cache of one sequence (``kvtutor.caches``), as a torch cache of batch size
    1 on ``device`` in ``dtype``. Its length is always ``len(inner)``; nothing is stored twice."""

    kind = "sequence"

    def __init__(self, inner: CacheBase, device: Any, dtype: torch.dtype) -> None:
        if not isinstance(inner, CacheBase):
            raise TypeError(f"inner: expected a NumPy cache of kvtutor.caches, got {type(inner).__name__}")
        super().__init__(inner.n_layers, 1, inner.n_kv_heads, inner.capacity, inner.d_head, device, dtype)
        self.inner = inner
        self._sync()

    def _sync(self) -> None:
        """The host and device lengths follow the inner cache's."""
        self._host[0] = len(self.inner)
        self.lengths.fill_(len(self.inner))

    # ------------------------------------------------------------ reading
    def _read(self, which: str, layer: Any, row: Any) -> torch.Tensor:
        layer = self._check_layer(layer)
        arr_HSK = (self.inner.keys if which == "k" else self.inner.values)(layer)
        if row is None:
            return self._to_device(arr_HSK)[None]
        self.check_row(row)
        return self._to_device(arr_HSK)

    @property
    def nbytes(self) -> int:
        """The inner cache's bytes (``inner.nbytes``)."""
        return self.inner.nbytes

    def _to_device(self, arr: np.ndarray) -> torch.Tensor:
        return torch.tensor(arr, dtype=self.dtype, device=self.device)  # a copy: the cache keeps its own

    def _to_host(self, t_BHTK: torch.Tensor) -> np.ndarray:
        t_HTK = t_BHTK[0].detach()
        if t_HTK.dtype not in _HOST_DTYPES:  # bf16 and fp16 have no NumPy twin
            t_HTK = t_HTK.float()
        return t_HTK.cpu().numpy()

    # ------------------------------------------------------------ the forward-pass protocol
    def plan(self, n_new, row=None, active=None, name="ids"):
        """Where ``n_new`` tokens go: after the inner cache's length. ``row`` may only be 0 and
        ``active`` only None (one sequence); the mask is set by the first ``update``, which learns
        how many keys the cache returns."""
        if row is not None:
            self.check_row(row)
        if active is not None:
            raise ValueError("active: a cache of one sequence has no inactive rows; expected None")
        n_new = check_int("n_new", n_new, 1)
        self.check_room(n_new, np.zeros(1, dtype=np.int64), name)
        plan = Plan(n_new)
        plan.start = len(self.inner)
        return plan

    def update(self, layer, k_new_BHTK, v_new_BHTK, plan):
        """[1,Hkv,T,K] x2 -> [1,Hkv,S,K] x2: the inner cache's ``update`` of the same rows, and on the
        first layer the plan's mask: the cache's ``mask`` (a window's band), else the causal one
        aligned to the last T keys."""
        k_HSK, v_HSK = self.inner.update(layer, self._to_host(k_new_BHTK), self._to_host(v_new_BHTK))
        if plan.n_keys == 0:
            n_new, n_keys = plan.n_new, k_HSK.shape[1]
            mask_TS = cache_mask(self.inner, n_new, n_keys)
            if mask_TS is not None:
                plan.mask = torch.from_numpy(np.ascontiguousarray(mask_TS)).to(self.device)
            elif n_new > 1:
                plan.mask = causal_mask(n_new, n_keys, self.device)
            plan.n_keys = n_keys
        return self._to_device(k_HSK)[None], self._to_device(v_HSK)[None]

    def advance(self, plan: Plan | int) -> None:
        """The inner cache's ``advance`` of the plan's tokens (or of a count)."""
        n_new = plan.n_new if isinstance(plan, Plan) else check_int("n_new", plan, 0)
        self.inner.advance(n_new)
        self._sync()

    def truncate(self, length: int, row: int | None = None) -> None:
        """The inner cache's ``truncate`` (``row`` may only be 0)."""
        if row is not None:
            self.check_row(row)
        self.inner.truncate(length)
        self._sync()

    def __repr__(self) -> str:
        return f"SequenceCache({self.inner!r}, device={self.device}, dtype={self.dtype})"
