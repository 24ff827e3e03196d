"""KV caches for the PyTorch model: batched, with a length per row.

``TorchPreallocatedKVCache`` is what serving engines do: two buffers ``k_LBHMK`` and ``v_LBHMK`` of
shape [L, B, Hkv, M, K] (the two halves of one ``kv_2LBHMK``), allocated once and written in place.
Each row b of the batch has its own length ``lengths[b]``, so rows can sit at different
positions (continuous batching) and be rolled back (speculative decoding) or freed
(``reset_row``) one at a time. ``TorchConcatKVCache`` is the pseudo-code version: every step
concatenates the new keys onto the old ones with ``torch.cat``, so every step copies the whole
history; its rows always share one length. (The NumPy model's caches are ``kvtutor.caches.kv``'s.)

The lengths live twice: ``lengths``, a LongTensor [B] on the model's device that the kernels read
(a CUDA graph reads it at replay), and a host copy (``host_lengths``, ``host_lengths_array``) that
Python checks read without waiting for the device. Both change only through the cache's own
methods, in place.

They speak the caches' one protocol (``kvtutor.caches.protocol``, whose base checks every call):
``plan`` (where each row's new tokens go: every row, one row, or the rows an ``active`` mask marks),
``update`` once per layer, ``advance``. The window, int8 and paged policies run on torch tensors
too, as caches of one sequence (``kvtutor.caches.kv.OneSequenceCache``).
"""

from __future__ import annotations

import math
import mmap
from typing import Any

import numpy as np
import torch

from ..validate import check_int, torch_device
from .protocol import KVCacheBase, Plan, check_cache_args

__all__ = [
    "TorchKVCache",
    "TorchPreallocatedKVCache",
    "TorchConcatKVCache",
    "SavedSlots",
    "host_empty",
    "causal_mask",
    "ragged_causal_mask",
]


_HUGE_PAGE = 2 << 20


def host_empty(numel: int, dtype: torch.dtype) -> torch.Tensor:
    """[numel] of ``dtype`` on the CPU, uninitialised, 2 MiB aligned and advised onto transparent huge
    pages where the OS allows (its own storage, offset 0, like ``torch.empty``).

    Decode streams every weight (and the cache) once per token: with 4 KiB pages that is a TLB miss
    every 4 KiB, with 2 MiB pages one every 2 MiB. Anonymous private memory from ``mmap``: nothing
    global changes.
    """
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    try:
        buf = mmap.mmap(-1, nbytes + _HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except (AttributeError, OSError, ValueError):  # not a POSIX system
        return torch.empty(numel, dtype=dtype)
    try:
        buf.madvise(mmap.MADV_HUGEPAGE)
    except (AttributeError, OSError, ValueError):  # no transparent huge pages: ordinary pages
        pass
    skip = (-torch.frombuffer(buf, dtype=torch.uint8, count=1).data_ptr()) % _HUGE_PAGE
    return torch.frombuffer(buf, dtype=dtype, count=numel, offset=skip)  # the tensor keeps the mapping alive


def causal_mask(n_queries: int, n_keys: int, device: Any = None) -> torch.Tensor:
    """T, S -> [T,S] bool: True where query t (at position S - T + t) may see key s."""
    offset = n_keys - n_queries
    q_T1 = torch.arange(n_queries, device=device)[:, None] + offset
    return torch.arange(n_keys, device=device)[None, :] <= q_T1


def ragged_causal_mask(start_B: torch.Tensor, n_queries: int, n_keys: int) -> torch.Tensor:
    """[B], T, S -> [B,1,T,S] bool: row b's query t sits at start_b + t and sees keys 0 .. start_b + t.

    Keys a row has not written (beyond its own length) are hidden, whatever the buffer holds there.
    """
    pos_BT = start_B[:, None] + torch.arange(n_queries, device=start_B.device)
    keys_S = torch.arange(n_keys, device=start_B.device)
    return (keys_S[None, None, :] <= pos_BT[:, :, None])[:, None]  # (B, 1, T, S)


class TorchKVCache(KVCacheBase):
    """What both batched layouts share: lengths on the device beside the host copy, and the
    protocol of ``kvtutor.caches.protocol`` (its checks are ``KVCacheBase``'s)."""

    backend = "torch"
    batched = True

    def __init__(
        self,
        n_layers: int,
        batch_size: int,
        n_kv_heads: int,
        capacity: int,
        d_head: int,
        device: torch.device,
        dtype: torch.dtype,
    ) -> None:
        self.n_layers, self.n_kv_heads, self._capacity, self.d_head = check_cache_args(
            n_layers, n_kv_heads, capacity, d_head
        )
        self.batch_size = check_int("batch_size", batch_size, 1)
        self.device, self.dtype = torch_device(device), dtype  # present here, or refused by name
        self.lengths = torch.zeros(self.batch_size, dtype=torch.long, device=self.device)
        self._init_lengths()

    def _layer_tensor(self, which: str, layer: int) -> torch.Tensor:
        raise NotImplementedError

    def _read(self, which: str, layer: int, row: int | None) -> torch.Tensor:
        buf = self._layer_tensor(which, layer)  # (B, Hkv, >= len, K)
        if row is None:
            return buf[:, :, : int(self._host[0])]
        return buf[row, :, : int(self._host[row])]

    # ------------------------------------------------------------ the device copy of the lengths
    def _advance_device(self, plan: Plan) -> None:
        n = plan.n_new
        if plan.n_batch == 1 and self.batch_size > 1:  # one row (prefill_row, forward_row)
            row = int(plan.rows[0])
            self.lengths[row : row + 1].add_(n)
        elif plan.active_dev is not None:
            self.lengths.add_(plan.active_dev, alpha=n)
        else:
            self.lengths.add_(n)

    def _set_device_lengths(self, length: int, row: int | None) -> None:
        if row is None:
            self.lengths.fill_(length)
        else:
            self.lengths[row : row + 1].fill_(length)


class TorchPreallocatedKVCache(TorchKVCache):
    """Buffers [L, B, Hkv, M, K] allocated once; each row written in place at its own length.

    ``k_LBHMK`` and ``v_LBHMK`` are the halves of one ``kv_2LBHMK`` [2, L, B, Hkv, M, K], so a decode
    step stores a layer's new key and value with one copy. On the CPU the buffer sits on 2 MiB pages
    where the OS allows. It starts zeroed (``nbytes`` counts the whole capacity from the start).

    Three write paths, chosen at plan time: every row at one start (views of the buffers cut once
    for the pass, ``Plan.views``), one row (a slice), ragged rows (one flat index per row, head and
    token into ``k_flat`` / ``v_flat``, per layer [B*Hkv*M, K] views, from ``base_BH``, [B, Hkv],
    the flat index of each row and head's position 0). ``fixed_plan`` is the ragged path with
    every shape fixed, for CUDA graphs (``kvtutor.models.cuda_graphs``), with ``save_slots`` /
    ``restore_slots`` around the warm-up runs.
    """

    kind = "preallocated"

    def __init__(self, n_layers, batch_size, n_kv_heads, capacity, d_head, device, dtype) -> None:
        super().__init__(n_layers, batch_size, n_kv_heads, capacity, d_head, device, dtype)
        shape = (2, self.n_layers, self.batch_size, self.n_kv_heads, self._capacity, self.d_head)
        if self.device.type == "cpu":
            kv = host_empty(math.prod(shape), dtype).view(shape)
        else:
            kv = torch.empty(shape, dtype=dtype, device=self.device)
        # zeros, not garbage: masked-out slots still meet a 0 weight, and 0 * NaN would be NaN
        self.kv_2LBHMK = kv.zero_()  # keys and values side by side: one copy writes both
        self.k_LBHMK, self.v_LBHMK = self.kv_2LBHMK.unbind(0)
        self._k = list(self.k_LBHMK.unbind(0))  # per layer (B, Hkv, M, K) views
        self._v = list(self.v_LBHMK.unbind(0))
        self.k_flat = [k.view(-1, self.d_head) for k in self._k]  # (B*Hkv*M, K) views
        self.v_flat = [v.view(-1, self.d_head) for v in self._v]
        heads = torch.arange(self.batch_size * self.n_kv_heads, device=self.device)
        self.base_BH = heads.view(self.batch_size, self.n_kv_heads) * self._capacity  # flat (b, h, 0)
        self.positions_M = torch.arange(self._capacity, device=self.device)

    def _layer_tensor(self, which: str, layer: int) -> torch.Tensor:
        return (self._k if which == "k" else self._v)[layer]

    @property
    def nbytes(self) -> int:
        """Bytes held, the whole capacity: preallocation reserves it up front."""
        return self.k_LBHMK.nbytes + self.v_LBHMK.nbytes

    def _layout(self, plan: Plan, row: int | None) -> None:
        host, n_new = self._host, plan.n_new
        if row is not None:  # one row of the batch (prefill_row, forward_row): a slice
            plan.start = int(host[row])
            self._uniform_mask(plan)
            return
        first = int(host[0])
        if plan.active_host is None and (host == first).all():  # every row at one position
            plan.start = first
            self._uniform_mask(plan)
            k, v, end = self.k_LBHMK, self.v_LBHMK, first + n_new
            plan.views = (
                k.narrow(3, first, n_new).unbind(0), v.narrow(3, first, n_new).unbind(0),
                k.narrow(3, 0, end).unbind(0), v.narrow(3, 0, end).unbind(0),
            )  # fmt: skip
            return
        # ragged rows: each row writes at its own length and sees only its own keys
        pos_B = self.lengths
        if int(host.max()) + n_new > self._capacity:  # an idle row is full: keep its (unused) query in range
            pos_B = pos_B.clamp(max=self._capacity - n_new)
        plan.pos_B = pos_B
        plan.n_keys = min(int(host.max()) + n_new, self._capacity)
        plan.mask = ragged_causal_mask(pos_B, n_new, plan.n_keys)
        arange_T = torch.arange(n_new, device=self.device)
        if plan.active_host is None:
            idx_BHT = self.base_BH[:, :, None] + (pos_B[:, None] + arange_T)[:, None, :]
        else:
            rows = torch.as_tensor(plan.rows, device=self.device)
            plan.write_rows = rows
            plan.active_dev = torch.as_tensor(plan.active_host, device=self.device)
            idx_BHT = self.base_BH[rows][:, :, None] + (pos_B[rows][:, None] + arange_T)[:, None, :]
        plan.write_idx = idx_BHT.reshape(-1)

    def _uniform_mask(self, plan: Plan) -> None:
        start, n_new = plan.start, plan.n_new
        plan.n_keys = start + n_new
        if n_new > 1:
            if start == 0:
                plan.is_causal = True  # T == S: the top-left aligned causal mask is the right one
            else:
                plan.mask = causal_mask(n_new, start + n_new, self.device)

    @torch.compiler.disable
    def fixed_plan(self, n_keys: int) -> Plan:
        """One decode step of every row over the first ``n_keys`` slots, every shape fixed and the
        positions read on the device from the lengths (nothing the host must know, so that a CUDA
        graph can replay it). Each row writes at its own length and sees its own keys. Checked on
        the host: 1 <= n_keys <= capacity, and every row shorter than ``n_keys`` (its new token
        must land inside the keys attended). Host bookkeeping, never traced by ``torch.compile``:
        a compiled step would guard on the cache's counters (its epoch, its lengths) and compile
        again at every step."""
        n_keys = check_int("n_keys", n_keys, 1, self._capacity)
        self.check_fixed(n_keys)
        plan = Plan(self, 1, np.arange(self.batch_size), self.batch_size)
        plan.fixed = True
        plan.pos_B = self.lengths
        plan.n_keys = n_keys
        # (B, 1, 1, S): row b sees the keys up to its own position
        plan.mask = (self.positions_M[:n_keys][None, :] <= plan.pos_B[:, None])[:, None, None, :]
        plan.write_idx = (self.base_BH + plan.pos_B[:, None]).reshape(-1)
        return plan

    def check_fixed_room(self, plan: Plan) -> None:
        """Room for a fixed plan's token in every row, and inside its ``n_keys`` slots."""
        super().check_fixed_room(plan)
        self.check_fixed(plan.n_keys)

    def check_fixed(self, n_keys: int) -> None:
        """A ValueError naming ``n_keys`` unless every row's next token falls inside the first
        ``n_keys`` slots (before each replay of a fixed plan: host lengths only, no sync)."""
        longest = int(self._host.max())
        if longest + 1 > n_keys:
            raise ValueError(
                f"n_keys: expected more than the longest row's {longest} cached tokens (its new "
                f"token goes to slot {longest}), got {n_keys}"
            )

    def save_slots(self, plan: Plan) -> SavedSlots:
        """Copies of the keys and values in the slots ``plan`` writes, every layer."""
        plan = self.check_plan(plan)
        if plan.write_idx is None:
            raise ValueError("plan: expected a ragged or fixed plan (its slots are listed), got a sliced one")
        idx = plan.write_idx
        layers = zip(self.k_flat, self.v_flat, strict=True)
        return SavedSlots(self, idx, [(k[idx].clone(), v[idx].clone()) for k, v in layers])

    def restore_slots(self, saved: SavedSlots) -> None:
        """Put back what ``save_slots`` copied (after warm-up runs wrote those slots): every layer or,
        on a wrong argument, none."""
        if not isinstance(saved, SavedSlots):
            raise TypeError(f"saved: expected what save_slots() returned, got {type(saved).__name__}")
        if saved.cache is not self:
            raise ValueError("saved: expected slots saved from this cache, got another cache's")
        for (k_saved, v_saved), k, v in zip(saved.rows, self.k_flat, self.v_flat, strict=True):
            k.index_copy_(0, saved.idx, k_saved)
            v.index_copy_(0, saved.idx, v_saved)

    def update(self, layer, k_BHTK, v_BHTK, plan):
        """[B,Hkv,T,K] x2 -> [B,Hkv,S,K] x2 and the mask: write the new
        rows in place, return what the queries see.

        The book shows this in "Preallocated versus concat, measured".
        """
        if plan.views is not None:  # one start for every row: views cut by plan
            k_write, v_write, k_read, v_read = plan.views
            k_write[layer].copy_(k_BHTK)
            v_write[layer].copy_(v_BHTK)
            return k_read[layer], v_read[layer], plan.mask
        k_l, v_l = self._k[layer], self._v[layer]
        if plan.write_idx is None:  # one row, from its length: slice and copy
            row, start, end = int(plan.rows[0]), plan.start, plan.n_keys
            k_l, v_l = k_l[row : row + 1], v_l[row : row + 1]
            k_l.narrow(2, start, plan.n_new).copy_(k_BHTK)
            v_l.narrow(2, start, plan.n_new).copy_(v_BHTK)
            return k_l.narrow(2, 0, end), v_l.narrow(2, 0, end), plan.mask
        if plan.write_rows is not None:
            k_BHTK, v_BHTK = k_BHTK[plan.write_rows], v_BHTK[plan.write_rows]
        # one row of the flat (B*Hkv*M, K) views per (sequence, head, new token)
        idx, d_head = plan.write_idx, self.d_head
        self.k_flat[layer].index_copy_(0, idx, k_BHTK.reshape(-1, d_head))
        self.v_flat[layer].index_copy_(0, idx, v_BHTK.reshape(-1, d_head))
        return k_l[:, :, : plan.n_keys], v_l[:, :, : plan.n_keys], plan.mask


class SavedSlots:
    """What ``TorchPreallocatedKVCache.save_slots`` copied: the cache, the flat slot indices and,
    per layer, the keys and values found there."""

    def __init__(self, cache: TorchPreallocatedKVCache, idx: torch.Tensor, rows: list) -> None:
        self.cache, self.idx, self.rows = cache, idx, rows


class TorchConcatKVCache(TorchKVCache):
    """Per layer, keys and values [B, Hkv, len, K] that grow by ``torch.cat``; rows share one length."""

    kind = "concat"

    def __init__(self, n_layers, batch_size, n_kv_heads, capacity, d_head, device, dtype) -> None:
        super().__init__(n_layers, batch_size, n_kv_heads, capacity, d_head, device, dtype)
        shape = (self.batch_size, self.n_kv_heads, 0, self.d_head)
        empty = torch.zeros(shape, dtype=dtype, device=self.device)
        self._k = [empty] * self.n_layers
        self._v = [empty] * self.n_layers

    def _layer_tensor(self, which: str, layer: int) -> torch.Tensor:
        return (self._k if which == "k" else self._v)[layer]

    @property
    def nbytes(self) -> int:
        """Bytes held: only what has been written so far."""
        return sum(t[:, :, : len(self)].nbytes for t in self._k + self._v)

    def _layout(self, plan: Plan, row: int | None) -> None:
        if self.batch_size > 1 and (row is not None or plan.active_host is not None):
            what = "row" if row is not None else "active"
            raise ValueError(f"{what}: a concat cache keeps its rows at one length; use kind='preallocated'")
        start = len(self)
        plan.start, plan.n_keys = start, start + plan.n_new
        if plan.n_new > 1:
            if start == 0:
                plan.is_causal = True
            else:
                plan.mask = causal_mask(plan.n_new, start + plan.n_new, self.device)

    def _check_truncate(self, length: int, row: int | None) -> None:
        if row is not None and self.batch_size > 1:
            raise ValueError("row: a concat cache keeps its rows at one length; use kind='preallocated'")

    def _truncate(self, length: int, row: int | None) -> None:
        self._k = [k[:, :, :length].clone() for k in self._k]  # release what was cut off
        self._v = [v[:, :, :length].clone() for v in self._v]

    def update(self, layer, k_BHTK, v_BHTK, plan):
        """[B,Hkv,T,K] x2 -> [B,Hkv,S,K] x2 and the mask: new tensors old ++
        new (a full copy of the history).

        The book shows this in "Preallocated versus concat, measured".
        """
        start = plan.start
        self._k[layer] = torch.cat([self._k[layer][:, :, :start], k_BHTK], dim=2)
        self._v[layer] = torch.cat([self._v[layer][:, :, :start], v_BHTK], dim=2)
        return self._k[layer], self._v[layer], plan.mask
