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

They speak the caches' one protocol (``kvtutor.caches``): ``update`` once per layer, then
``advance``; being batched, they first make a ``plan`` of where each row's new tokens go, and
``update`` and ``advance`` take it. (``kvtutor.caches.torch_bridge`` runs a NumPy cache of one
sequence, window, int8 or paged, through the same verbs.)
"""

from __future__ import annotations

import math
import mmap
from typing import Any

import numpy as np
import torch

from ..validate import check_int

__all__ = [
    "TorchKVCache",
    "TorchPreallocatedKVCache",
    "TorchConcatKVCache",
    "Plan",
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


class Plan:
    """Where one forward pass puts its T new tokens (built by a cache's ``plan`` or ``fixed_plan``,
    read by every layer's ``update`` and by the attention that follows, then passed to ``advance``)."""

    __slots__ = (
        "n_new", "start", "pos_B", "rows", "n_keys", "mask", "is_causal", "write_idx", "write_rows",
        "active_host", "active_dev", "windows",
    )  # fmt: skip

    def __init__(self, n_new: int) -> None:
        self.n_new = n_new
        self.start: int | None = None  # the common start position, when every row involved shares one
        self.pos_B: torch.Tensor | None = None  # per-row start positions (ragged rows)
        self.rows: slice = slice(None)  # the rows this pass computes
        self.n_keys = 0
        self.mask: torch.Tensor | None = None
        self.is_causal = False
        self.write_idx: torch.Tensor | None = None  # ragged writes: flat row indices into [B*Hkv*M, K]
        self.write_rows: torch.Tensor | None = None  # ragged writes: which rows (None = all)
        self.active_host: np.ndarray | None = None  # rows that advance (None = all), 0/1 on the host
        self.active_dev: torch.Tensor | None = None  # the same on the device
        # a common start in every row: per layer, the slots it writes and the keys it returns, as
        # views of the cache's buffers cut once for the whole pass (k write, v write, k read, v read)
        self.windows: tuple[tuple[torch.Tensor, ...], ...] | None = None


class TorchKVCache:
    """What both layouts share: per-row lengths, argument checks, and the read-only accessors."""

    kind = ""

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
        self.n_layers, self.n_kv_heads, self.d_head = n_layers, n_kv_heads, d_head
        self._batch_size, self._capacity = batch_size, capacity
        self.device, self.dtype = torch.device(device), dtype
        self.lengths = torch.zeros(batch_size, dtype=torch.long, device=self.device)
        self._host = np.zeros(batch_size, dtype=np.int64)

    # ------------------------------------------------------------ reading
    @property
    def batch_size(self) -> int:
        return self._batch_size

    @property
    def capacity(self) -> int:
        """M, the most positions a row can hold."""
        return self._capacity

    @property
    def host_lengths(self) -> list[int]:
        """Each row's length, from the host copy (no device synchronisation)."""
        return [int(n) for n in self._host]

    def __len__(self) -> int:
        first = int(self._host[0])
        if (self._host != first).any():
            raise ValueError(f"cache: rows have different lengths {self.host_lengths}; use host_lengths")
        return first

    def _check_layer(self, layer: Any) -> int:
        layer = check_int("layer", layer)
        if not 0 <= layer < self.n_layers:
            raise ValueError(f"layer: expected 0 <= layer < {self.n_layers}, got {layer}")
        return layer

    def check_row(self, row: Any) -> int:
        """``row`` as an int index of this batch, or a TypeError/ValueError naming ``row``."""
        row = check_int("row", row)
        if not 0 <= row < self._batch_size:
            raise ValueError(f"row: expected 0 <= row < {self._batch_size}, got {row}")
        return row

    def _layer_tensor(self, which: str, layer: int) -> torch.Tensor:
        raise NotImplementedError

    def _read(self, which: str, layer: Any, row: Any) -> torch.Tensor:
        layer = self._check_layer(layer)
        buf = self._layer_tensor(which, layer)  # (B, Hkv, >= len, K)
        if row is None:
            return buf[:, :, : len(self)]
        row = self.check_row(row)
        return buf[row, :, : int(self._host[row])]

    def keys(self, layer: int, row: int | None = None) -> torch.Tensor:
        """[B,Hkv,len,K] (rows of equal length), or [Hkv,len_row,K] for one row: a view, do not write."""
        return self._read("k", layer, row)

    def values(self, layer: int, row: int | None = None) -> torch.Tensor:
        """[B,Hkv,len,K] (rows of equal length), or [Hkv,len_row,K] for one row: a view, do not write."""
        return self._read("v", layer, row)

    @property
    def nbytes(self) -> int:
        raise NotImplementedError

    # ------------------------------------------------------------ changing lengths
    def _set_length(self, length: int, row: int | None) -> None:
        if row is None:
            self.lengths.fill_(length)
            self._host[:] = length
        else:
            self.lengths[row : row + 1].fill_(length)
            self._host[row] = length

    def truncate(self, length: int, row: int | None = None) -> None:
        """Forget every position from ``length`` on, in every row or in one (rolls back rejected drafts)."""
        length = check_int("length", length)
        if row is not None:
            row = self.check_row(row)
        shortest = int(self._host.min()) if row is None else int(self._host[row])
        if not 0 <= length <= shortest:
            where = "every row's length" if row is None else f"row {row}'s length"
            raise ValueError(f"length: expected 0 <= length <= {shortest} ({where}), got {length}")
        self._set_length(length, row)

    def reset_row(self, row: int) -> None:
        """Empty one row (its slot can take a new sequence); other rows are untouched."""
        self.truncate(0, row)

    # ------------------------------------------------------------ the forward-pass protocol
    def check_room(self, n_new: int, rows: np.ndarray, name: str) -> None:
        """Raise if a row among ``rows`` (indices) has no room for n_new more tokens."""
        worst = int(self._host[rows].max()) if rows.size else 0
        if worst + n_new > self._capacity:
            raise ValueError(
                f"{name}: {n_new} new tokens after {worst} cached ones exceed the cache capacity "
                f"{self._capacity}"
            )

    def plan(
        self, n_new: int, row: int | None = None, active: np.ndarray | None = None, name: str = "ids"
    ) -> Plan:
        """Where ``n_new`` new tokens go: in every row (``row`` None), in one row, or in the rows
        that ``active`` (bool [B], None = all) marks. Raises, naming ``name``, if a row lacks room."""
        raise NotImplementedError

    def update(
        self, layer: int, k_new_BHTK: torch.Tensor, v_new_BHTK: torch.Tensor, plan: Plan
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """[B,Hkv,T,K] x2 -> [B,Hkv,S,K] x2: write one layer's new keys and values where ``plan``
        says, return the keys and values the new queries attend to."""
        raise NotImplementedError

    def advance(self, plan: Plan | int) -> None:
        """Move the lengths on once every layer is updated: the rows ``plan`` wrote (the device copy
        and the host copy), or, given a count, every row by that many tokens (after a fixed-shape
        step, ``fixed_plan``), checked to fit."""
        if not isinstance(plan, Plan):
            n_new = check_int("n_new", plan, 0)
            if int(self._host.max()) + n_new > self._capacity:  # the hot path checks only this
                self.check_room(n_new, np.arange(self._batch_size), "n_new")
            self.lengths.add_(n_new)
            self._host += n_new
            return
        n = plan.n_new
        if plan.rows != slice(None):
            self.lengths[plan.rows].add_(n)
            self._host[plan.rows] += n
        elif plan.active_dev is not None:
            self.lengths.add_(plan.active_dev, alpha=n)
            self._host += n * plan.active_host
        else:
            self.lengths.add_(n)
            self._host += n

    def advance_host(self, n_new: int) -> None:
        """Every row's host length grows by ``n_new``: after a CUDA graph replay whose recorded
        ``advance_device`` moved the device copy."""
        if int(self._host.max()) + n_new > self._capacity:
            self.check_room(n_new, np.arange(self._batch_size), "n_new")
        self._host += n_new

    def advance_device(self, n_new: int) -> None:
        """Every row's device length grows by ``n_new``, nothing checked or synchronised: the one
        step a CUDA graph records (``torch_engine.capture_graph``), pairing ``advance_host``."""
        self.lengths.add_(n_new)

    @property
    def host_lengths_array(self) -> np.ndarray:
        """The host copy of the lengths, int64 [B], read-only (no device synchronisation)."""
        view = self._host.view()
        view.flags.writeable = False
        return view

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(layers={self.n_layers}, batch={self._batch_size}, "
            f"kv_heads={self.n_kv_heads}, capacity={self._capacity}, head_dim={self.d_head}, "
            f"lengths={self.host_lengths}, dtype={self.dtype}, device={self.device})"
        )


class TorchPreallocatedKVCache(TorchKVCache):
    """Buffers [L, B, Hkv, M, K] allocated once; each row written in place at its own length.

    ``k_LBHMK`` and ``v_LBHMK`` are the halves of one ``kv_2LBHMK`` [2, L, B, Hkv, M, K], so a decode
    step stores a layer's new key and value with one copy. On the CPU the buffer sits on 2 MiB pages
    where the OS allows. It starts zeroed (``nbytes`` counts the whole capacity from the start).

    For a fixed-shape decode step (``torch_engine.decode_fixed``): ``fixed_plan`` (its writes go
    through ``k_flat`` and ``v_flat``, per layer [B*Hkv*M, K] views of the buffers, at ``base_BH``,
    [B, Hkv], the flat index of each row and head's position 0), ``save_slots``/``restore_slots``.
    """

    kind = "preallocated"

    def __init__(self, n_layers, batch_size, n_kv_heads, capacity, d_head, device, dtype) -> None:
        super().__init__(n_layers, batch_size, n_kv_heads, capacity, d_head, device, dtype)
        shape = (2, n_layers, batch_size, n_kv_heads, capacity, d_head)
        if self.device.type == "cpu":
            kv = host_empty(math.prod(shape), dtype).view(shape)
        else:
            kv = torch.empty(shape, dtype=dtype, device=self.device)
        # zeros, not garbage: masked-out slots still meet a 0 weight, and 0 * NaN would be NaN
        self.kv_2LBHMK = kv.zero_()  # keys and values side by side: one copy writes both
        self.k_LBHMK, self.v_LBHMK = self.kv_2LBHMK.unbind(0)
        self._k = list(self.k_LBHMK.unbind(0))  # per layer (B, Hkv, M, K) views
        self._v = list(self.v_LBHMK.unbind(0))
        self.k_flat = [k.view(-1, d_head) for k in self._k]  # (B*Hkv*M, K) views
        self.v_flat = [v.view(-1, d_head) for v in self._v]
        heads = torch.arange(batch_size * n_kv_heads, device=self.device).view(batch_size, n_kv_heads)
        self.base_BH = heads * capacity  # flat index of (b, h, position 0)
        self.positions_M = torch.arange(capacity, device=self.device)

    def _layer_tensor(self, which: str, layer: int) -> torch.Tensor:
        return (self._k if which == "k" else self._v)[layer]

    @property
    def nbytes(self) -> int:
        """Bytes held, the whole capacity: preallocation reserves it up front."""
        return self.k_LBHMK.nbytes + self.v_LBHMK.nbytes

    def plan(self, n_new, row=None, active=None, name="ids"):
        plan = Plan(n_new)
        host = self._host
        if row is not None:  # one row of the batch (prefill_row)
            self.check_room(n_new, np.array([row]), name)
            start = int(host[row])
            plan.rows, plan.start = slice(row, row + 1), start
            self._uniform_mask(plan, start)
            return plan
        first = int(host[0])
        if active is None and (host == first).all():  # every row at the same position
            if first + n_new > self._capacity:
                self.check_room(n_new, np.arange(self._batch_size), name)
            plan.start = first
            self._uniform_mask(plan, first)
            k, v, end = self.k_LBHMK, self.v_LBHMK, first + n_new
            plan.windows = (
                k.narrow(3, first, n_new).unbind(0), v.narrow(3, first, n_new).unbind(0),
                k.narrow(3, 0, end).unbind(0), v.narrow(3, 0, end).unbind(0),
            )  # fmt: skip
            return plan
        writing = np.arange(self._batch_size) if active is None else np.flatnonzero(active)
        self.check_room(n_new, writing, name)
        # ragged rows: each row writes at its own length and sees only its own keys
        pos_B = self.lengths
        if int(host.max()) + n_new > self._capacity:  # an idle row is full: keep its (unused) query in range
            pos_B = pos_B.clamp(max=self._capacity - n_new)
        plan.pos_B = pos_B
        plan.n_keys = min(int(host.max()) + n_new, self._capacity)
        plan.mask = ragged_causal_mask(pos_B, n_new, plan.n_keys)
        arange_T = torch.arange(n_new, device=self.device)
        if active is None:
            idx_BHT = self.base_BH[:, :, None] + (pos_B[:, None] + arange_T)[:, None, :]
        else:
            rows = torch.as_tensor(writing, device=self.device)
            plan.write_rows = rows
            plan.active_host = active.astype(np.int64)
            plan.active_dev = torch.as_tensor(plan.active_host, device=self.device)
            idx_BHT = self.base_BH[rows][:, :, None] + (pos_B[rows][:, None] + arange_T)[:, None, :]
        plan.write_idx = idx_BHT.reshape(-1)
        return plan

    def fixed_plan(self, n_keys: int) -> Plan:
        """One decode step of every row over the first ``n_keys`` slots, every shape fixed and the
        positions read on the device from the lengths (nothing the host must know, so that a CUDA
        graph can replay it). Each row writes at its own length and sees its own keys."""
        plan = Plan(1)
        plan.pos_B = self.lengths.clamp(max=n_keys - 1)
        plan.n_keys = n_keys
        # (B, 1, 1, S): row b sees the keys up to its own position
        plan.mask = (self.positions_M[:n_keys][None, :] <= plan.pos_B[:, None])[:, None, None, :]
        plan.write_idx = (self.base_BH + plan.pos_B[:, None]).reshape(-1)
        return plan

    def save_slots(self, plan: Plan) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Copies of the keys and values in the slots ``plan`` would write, every layer."""
        idx = plan.write_idx
        return [(k[idx].clone(), v[idx].clone()) for k, v in zip(self.k_flat, self.v_flat, strict=True)]

    def restore_slots(self, plan: Plan, saved: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Put back what ``save_slots(plan)`` copied (after warm-up runs wrote those slots)."""
        for (k_saved, v_saved), k, v in zip(saved, self.k_flat, self.v_flat, strict=True):
            k.index_copy_(0, plan.write_idx, k_saved)
            v.index_copy_(0, plan.write_idx, v_saved)

    def _uniform_mask(self, plan: Plan, start: int) -> None:
        n_new = plan.n_new
        plan.n_keys = start + n_new
        if n_new > 1:
            if start == 0:
                plan.is_causal = True  # T == S: the top-left aligned causal mask is the right one
            else:
                plan.mask = causal_mask(n_new, start + n_new, self.device)

    def update(
        self,
        layer: int,
        k_new_BHTK: torch.Tensor,
        v_new_BHTK: torch.Tensor,
        plan: Plan,
    ):
        """[B,Hkv,T,K] x2 -> [B,Hkv,S,K] x2: write the new rows in place,
        return what the queries see.

        The book shows this in "Preallocated versus concat, measured".
        """
        if plan.windows is not None:  # one start for every row: views cut by plan
            k_write, v_write, k_read, v_read = plan.windows
            k_write[layer].copy_(k_new_BHTK)
            v_write[layer].copy_(v_new_BHTK)
            return k_read[layer], v_read[layer]
        k_l, v_l = self._k[layer], self._v[layer]
        if plan.write_idx is None:  # one row, from its length: slice and copy
            start, end = plan.start, plan.n_keys
            k_l, v_l = k_l[plan.rows], v_l[plan.rows]
            k_l.narrow(2, start, plan.n_new).copy_(k_new_BHTK)
            v_l.narrow(2, start, plan.n_new).copy_(v_new_BHTK)
            return k_l.narrow(2, 0, end), v_l.narrow(2, 0, end)
        if plan.write_rows is not None:
            write_rows = plan.write_rows
            k_new_BHTK, v_new_BHTK = k_new_BHTK[write_rows], v_new_BHTK[write_rows]
        # one row of the flat (B*Hkv*M, K) views per (sequence, head, new token)
        k_rows = k_new_BHTK.reshape(-1, self.d_head)
        self.k_flat[layer].index_copy_(0, plan.write_idx, k_rows)
        v_rows = v_new_BHTK.reshape(-1, self.d_head)
        self.v_flat[layer].index_copy_(0, plan.write_idx, v_rows)
        return k_l[:, :, : plan.n_keys], v_l[:, :, : plan.n_keys]


class TorchConcatKVCache(TorchKVCache):
    """Per layer, keys and values [B, Hkv, len, K] that grow by ``torch.cat``; rows share one length."""

    kind = "concat"

    def __init__(self, n_layers, batch_size, n_kv_heads, capacity, d_head, device, dtype) -> None:
        super().__init__(n_layers, batch_size, n_kv_heads, capacity, d_head, device, dtype)
        empty = torch.zeros((batch_size, n_kv_heads, 0, d_head), dtype=dtype, device=self.device)
        self._k = [empty] * n_layers
        self._v = [empty] * n_layers

    def _layer_tensor(self, which: str, layer: int) -> torch.Tensor:
        return (self._k if which == "k" else self._v)[layer]

    @property
    def nbytes(self) -> int:
        """Bytes held: only what has been written so far."""
        return sum(t[:, :, : len(self)].nbytes for t in self._k + self._v)

    def _set_length(self, length: int, row: int | None) -> None:
        if row is not None and self._batch_size > 1:
            raise ValueError("row: a concat cache keeps its rows at one length; use kind='preallocated'")
        super()._set_length(length, None)
        self._k = [k[:, :, :length].clone() for k in self._k]  # release what was cut off
        self._v = [v[:, :, :length].clone() for v in self._v]

    def plan(self, n_new, row=None, active=None, name="ids"):
        if row is not None and self._batch_size > 1:
            raise ValueError("row: a concat cache keeps its rows at one length; use kind='preallocated'")
        if active is not None and not active.all():
            raise ValueError("active: a concat cache advances every row together; use kind='preallocated'")
        self.check_room(n_new, np.arange(self._batch_size), name)
        plan = Plan(n_new)
        start = len(self)
        plan.start, plan.n_keys = start, start + n_new
        if n_new > 1:
            if start == 0:
                plan.is_causal = True
            else:
                plan.mask = causal_mask(n_new, start + n_new, self.device)
        return plan

    def update(
        self,
        layer: int,
        k_new_BHTK: torch.Tensor,
        v_new_BHTK: torch.Tensor,
        plan: Plan,
    ):
        """[B,Hkv,T,K] x2 -> [B,Hkv,S,K] x2: new tensors old ++ new (a full
        copy of the history).

        The book shows this in "Preallocated versus concat, measured".
        """
        start = plan.start
        k_past = self._k[layer][:, :, :start]
        self._k[layer] = torch.cat([k_past, k_new_BHTK], dim=2)
        v_past = self._v[layer][:, :, :start]
        self._v[layer] = torch.cat([v_past, v_new_BHTK], dim=2)
        return self._k[layer], self._v[layer]


def check_active(active: Any, cache: TorchKVCache) -> np.ndarray | None:
    """An ``active`` row mask for ``decode_step`` -> a bool array [B], or None when every row is
    active; a TypeError/ValueError naming ``active`` otherwise."""
    if active is None:
        return None
    if isinstance(active, torch.Tensor):
        active = active.detach().cpu().numpy()
    active = np.asarray(active)
    if active.dtype != bool:
        raise TypeError(f"active: expected a bool mask, got dtype {active.dtype}")
    if active.shape != (cache.batch_size,):
        raise ValueError(f"active: expected shape [{cache.batch_size}], got {list(active.shape)}")
    if not active.any():
        raise ValueError("active: expected at least one active row, got none")
    return None if active.all() else active
