"""The one protocol every KV cache speaks, NumPy and torch alike, and its checks, written once.

A forward pass of T new tokens through any cache is three verbs:

1. ``plan = cache.plan(T, row=None, active=None, name="ids")``: where the T new tokens of each row
   go (every row, one ``row``, or the rows ``active`` marks). It checks the room and writes
   nothing; the plan belongs to this cache, and it is the one that may be written and committed
   now (an earlier open plan goes stale).
2. Per layer, ``k_S, v_S, mask = cache.update(layer, k_new, v_new, plan)``: store the layer's new
   keys and values and return what attention reads: the S keys and values the new queries see and
   the mask saying which query sees which key (None: the plain causal mask, the T queries being
   the last T of the S keys). A cache may return fewer keys than it holds (a sliding window).
3. ``cache.advance(plan)``: commit. Only now do the lengths move, so a pass that fails half way
   changes nothing a reader of the cache can see.

Besides: ``len(cache)`` (rows of equal length), ``host_lengths``, ``capacity``, ``keys(layer)`` /
``values(layer)`` (what is committed), ``truncate(length, row=None)``, ``reset_row(row)`` and
``nbytes``. Arrays are the model's: a NumPy model's [Hkv, T, K], a torch model's [B, Hkv, T, K].

**A small state machine, enforced here and only here** (``KVCacheBase``). A cache has at most
one *open* plan: ``plan`` opens one, and the plan opened before it goes stale (its writes beyond
the committed positions are undone: ``abort``); ``advance`` commits the open plan, and a commit,
a ``truncate``, a ``reset_row`` or an ``abort`` leaves none open. A plan that is not the cache's
open one (stale, committed, another cache's, not a ``Plan``) is refused by ``update`` and
``advance``, naming ``plan``. Every class's ``update`` runs inside ``protocol_update``, so it
writes only its mechanism: before it, the layer, the arrays' kind, rank, widths, batch, token
count, dtype and device, and a layer not yet written under the plan; after it, the layer marked
written and the answer checked (``answer``: a NumPy mask of the right shape).
``advance`` wants every layer written once. A model's pass that fails half way calls ``abort``,
so a paged sequence gives back the blocks and copies it took: a failed call changes nothing a
reader of the cache, or of its pool, can see. A rejected call raises ValueError or TypeError
naming the argument and changes nothing. A cache holds one model's keys: ``check_writer`` (called
by every model's ``check_cache``) binds it, or its pool, to the model that writes it, and refuses
another while it holds keys. ``copy.copy`` is refused (it would share buffers and lengths);
``copy.deepcopy`` gives an independent cache. Every check reads host metadata (shapes, dtypes,
the host copy of the lengths): none waits for a GPU, so the fast paths keep them all.

A *fixed* plan (the CUDA graph's step: ``TorchPreallocatedKVCache.fixed_plan``) is the one kind
that stays open across commits, outside the one-open-plan rule: its first pass writes every
layer (the graph's capture, or one eager step) and after its first commit only ``replayed()``
(each replay of the graph, which recomputes its mask and slots from the device's lengths) may
write it again; an eager ``update`` is refused. Its room, and that every row's next token falls
inside its ``n_keys``, are checked on the host before each replay and each commit.

Each cache class supplies its layout: ``_layout(plan)`` (plan-time fields: masks, write indices),
``update`` (the mechanism alone), ``_commit(plan)`` (what enters the cache at commit: a window's
ring, an int8 group), ``_check_truncate`` / ``_truncate(length, row)``, ``_abort(plan)`` and
``_read``. Nothing outside a cache reads its buffers or lengths directly.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from ..validate import check_int

__all__ = ["Plan", "KVCacheBase", "check_cache_args", "check_mask"]


class Plan:
    """Where one forward pass puts its T new tokens, made by a cache's ``plan`` (or
    ``fixed_plan``), read by every layer's ``update`` and the attention after it, and committed by
    ``advance``. ``start`` is the common start position when every row it writes shares one."""

    __slots__ = (
        "cache", "epoch", "n_new", "rows", "n_batch", "start", "n_keys", "mask", "is_causal",
        "written", "closed", "fixed", "n_commits", "pos_B", "write_idx", "write_rows", "active_host",
        "active_dev", "views", "staged", "undo",
    )  # fmt: skip

    def __init__(self, cache: KVCacheBase, n_new: int, rows: np.ndarray, n_batch: int) -> None:
        self.cache, self.epoch = cache, cache.epoch
        self.n_new = n_new
        self.rows = rows  # host int64: the rows this pass writes and commits
        self.n_batch = n_batch  # rows of the arrays update takes (1 for a one-row plan)
        self.start: int | None = None
        self.n_keys = 0  # S, the keys update returns
        self.mask: Any = None  # None: causal, the T queries the last T of the S keys
        self.is_causal = False  # torch: T == S from position 0 (SDPA's own causal mask)
        self.written = [False] * cache.n_layers
        self.closed = False
        self.fixed = False
        self.n_commits = 0  # a fixed plan: how often it was committed (graph replays after the first)
        self.pos_B: Any = None  # torch: per-row start positions on the device (ragged rows)
        self.write_idx: Any = None  # torch: flat slot indices of a ragged write
        self.write_rows: Any = None  # torch: the rows of a partial (active) write
        self.active_host: np.ndarray | None = None
        self.active_dev: Any = None
        self.views: Any = None  # torch: per-layer write and read views cut once for the pass
        self.staged: list[Any] = [None] * cache.n_layers  # what _commit stores (windows, int8)
        self.undo: Any = None  # what _abort puts back if the plan is abandoned (a paged block table)

    def replayed(self) -> None:
        """A replay of the CUDA graph that recorded this fixed plan wrote every layer again (its
        mask and write slots recomputed on the device from the lengths); the cache checks first that
        every row's next token still falls inside the plan's ``n_keys``."""
        if not self.fixed:
            raise ValueError("plan: only a fixed plan (fixed_plan) is written by a graph replay")
        self.cache.check_fixed_room(self)
        self.written = [True] * len(self.written)

    def __repr__(self) -> str:
        state = "closed" if self.closed else ("fixed" if self.fixed else "open")
        return (
            f"Plan({type(self.cache).__name__}, n_new={self.n_new}, rows={self.rows.tolist()}, "
            f"n_keys={self.n_keys}, {state})"
        )


def check_cache_args(n_layers: Any, n_kv_heads: Any, capacity: Any, d_head: Any) -> tuple[int, ...]:
    """The sizes of a cache as positive ints, or a TypeError/ValueError naming the argument."""
    return tuple(
        check_int(name, value, 1)
        for name, value in (
            ("n_layers", n_layers), ("n_kv_heads", n_kv_heads), ("capacity", capacity), ("d_head", d_head)
        )
    )  # fmt: skip


def check_mask(mask_TS: Any, n_new: int, n_keys: int, cache: Any) -> Any:
    """``mask_TS`` if it is None or a bool NumPy array [n_new, n_keys] (what a NumPy cache's
    ``update`` may answer), else a ValueError naming the cache's class: a cache written outside
    this package that answers a wrong mask is caught before attention uses it."""
    if mask_TS is None:
        return None
    is_array = isinstance(mask_TS, np.ndarray)
    if not is_array or mask_TS.dtype != np.bool_ or mask_TS.shape != (n_new, n_keys):
        got = f"{mask_TS.dtype} {list(mask_TS.shape)}" if is_array else type(mask_TS).__name__
        raise ValueError(
            f"cache.update: expected a mask of None or a bool array of shape [{n_new}, {n_keys}] "
            f"from {type(cache).__name__}.update, got {got}"
        )
    return mask_TS


def protocol_update(update: Callable[..., Any]) -> Callable[..., Any]:
    """A cache class's ``update`` inside the protocol's checks: before it, ``check_update`` (an
    open plan of this cache, a layer not yet written, new rows of this cache's kind, shape, dtype
    and device; a rejected call changes nothing); after it, the layer marked written and the
    answer checked and shaped (``answer``). ``KVCacheBase`` applies it to every subclass that
    defines ``update``, so each cache writes only its mechanism and no cache can skip a check. A
    subclass's ``update`` that calls its parent's is checked once, around the outer call."""

    @functools.wraps(update)
    def checked(self: KVCacheBase, layer: Any, k_new: Any, v_new: Any, plan: Any) -> Any:
        if self._updating:  # inside another checked update of this cache: the parent's body
            return update(self, layer, k_new, v_new, plan)
        layer, k_new, v_new = self.check_update(layer, k_new, v_new, plan)
        self._updating = True
        try:
            k_S, v_S, mask = update(self, layer, k_new, v_new, plan)
        finally:
            self._updating = False
        self.mark_written(layer, plan)
        return self.answer(k_S, v_S, mask, plan)

    return checked


class KVCacheBase:
    """The protocol's verbs and checks, shared by every cache (see the module docstring).

    A subclass sets ``n_layers``, ``n_kv_heads``, ``d_head``, ``batch_size``, ``capacity``,
    ``backend`` ("numpy" or "torch"), ``dtype``, ``device`` and ``batched`` (do the arrays carry a
    batch axis: a torch model's [B, Hkv, T, K], or a NumPy model's [Hkv, T, K]), then calls
    ``_init_lengths``. One-sequence caches have ``batch_size`` 1.
    """

    kind = ""
    _updating = False  # inside a checked update (protocol_update)
    n_layers: int
    n_kv_heads: int
    d_head: int
    batch_size: int
    backend: str
    batched: bool
    dtype: Any
    device: Any
    _capacity: int

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "update" in cls.__dict__:
            cls.update = protocol_update(cls.__dict__["update"])  # type: ignore[method-assign]

    def _init_lengths(self) -> None:
        self._host = np.zeros(self.batch_size, dtype=np.int64)  # committed lengths, on the host
        self.epoch = 0  # moves at every plan and every change of the committed state
        self._open: Plan | None = None  # the one plan that may be written and committed now
        self.writer_ref: Any = None  # a weak reference to the model whose keys this cache holds

    # ------------------------------------------------------------ copies and owners
    def __copy__(self) -> Any:
        raise TypeError(
            f"copy: a shallow copy of a {type(self).__name__} would share its buffers and lengths "
            "with the original; use copy.deepcopy(cache) for an independent cache (a paged "
            "sequence: pool.fork(seq) shares its blocks, copy-on-write)"
        )

    def holds_keys(self) -> bool:
        """Does this cache hold any committed keys (a paged sequence: does its pool)?"""
        return bool(self._host.any())

    def writer_slot(self) -> Any:
        """The object whose ``writer_ref`` names the model this cache's keys belong to: the cache
        itself (a paged sequence: its pool, shared by every sequence of it)."""
        return self

    def check_writer(self, model: Any) -> None:
        """Bind this cache (or its pool) to ``model``, the model whose keys it holds, or a
        ValueError naming ``cache`` if it holds keys another model wrote: keys are what one model's
        weights made of its tokens, and another model of the same shape would read them without a
        sign. An empty cache (or pool) passes to the next model that fills it. Every model's
        ``check_cache`` calls it, so every pass of every model is checked."""
        slot = self.writer_slot()
        owner = None if slot.writer_ref is None else slot.writer_ref()
        if owner is model:
            return
        if self.holds_keys():
            who = "a model that no longer exists" if owner is None else f"another {type(owner).__name__}"
            raise ValueError(
                f"cache: expected a cache holding this model's keys and values (or none), got one "
                f"whose keys {who} wrote; a cache, or a pool of blocks, serves the one model that "
                "filled it: make one per model, or empty it first (truncate(0), free the sequences)"
            )
        slot.writer_ref = weakref.ref(model)

    # ------------------------------------------------------------ reading
    @property
    def capacity(self) -> int:
        """M, the most positions a row can number."""
        return self._capacity

    @property
    def host_lengths(self) -> list[int]:
        """Each row's committed length (the host copy: no device synchronisation)."""
        return [int(n) for n in self._host]

    @property
    def host_lengths_array(self) -> np.ndarray:
        """The committed lengths, int64 [B], read-only."""
        view = self._host.view()
        view.flags.writeable = False
        return view

    def __len__(self) -> int:
        first = int(self._host[0])
        if (self._host != first).any():
            raise ValueError(f"cache: rows have different lengths {self.host_lengths}; use host_lengths")
        return first

    def check_layer(self, layer: Any) -> int:
        """``layer`` as an int index of this cache's layers, or a TypeError/ValueError naming it."""
        layer = check_int("layer", layer)
        if not 0 <= layer < self.n_layers:
            raise ValueError(f"layer: expected 0 <= layer < {self.n_layers}, got {layer}")
        return layer

    def check_row(self, row: Any) -> int:
        """``row`` as an int index of this cache's rows, or a TypeError/ValueError naming ``row``."""
        row = check_int("row", row)
        if not 0 <= row < self.batch_size:
            raise ValueError(f"row: expected 0 <= row < {self.batch_size}, got {row}")
        return row

    def keys(self, layer: int, row: int | None = None) -> Any:
        """The committed keys of one layer: [Hkv, len, K] for one sequence (or one ``row``),
        [B, Hkv, len, K] for a batch of equal lengths. Read-only: do not write into it."""
        return self._read("k", self.check_layer(layer), self._read_row(row))

    def values(self, layer: int, row: int | None = None) -> Any:
        """The committed values of one layer, shaped as ``keys``."""
        return self._read("v", self.check_layer(layer), self._read_row(row))

    def _read_row(self, row: Any) -> int | None:
        if row is None:
            if self.batched and self.batch_size > 1:
                len(self)  # rows of different lengths: a ValueError naming host_lengths
            return None
        return self.check_row(row)

    def _read(self, which: str, layer: int, row: int | None) -> Any:
        raise NotImplementedError

    @property
    def nbytes(self) -> int:
        raise NotImplementedError

    # ------------------------------------------------------------ 1. plan
    def plan(self, n_new: int, row: int | None = None, active: Any = None, name: str = "ids") -> Plan:
        """Where ``n_new`` new tokens go: in every row (``row`` and ``active`` None), in one
        ``row``, or in the rows that ``active`` (bool [B]) marks. Raises, naming ``name``, if a row
        lacks room; changes nothing."""
        n_new = check_int("n_new", n_new, 1)
        if row is not None and active is not None:
            raise ValueError("row: expected row or active, not both")
        if row is not None:
            rows, n_batch = np.array([self.check_row(row)]), 1
        else:
            mask = self.check_active(active)
            rows = np.arange(self.batch_size) if mask is None else np.flatnonzero(mask)
            n_batch = self.batch_size
        self.check_room(n_new, rows, name)
        plan = Plan(self, n_new, rows, n_batch)
        if active is not None and rows.size < self.batch_size:
            plan.active_host = np.zeros(self.batch_size, dtype=np.int64)
            plan.active_host[rows] = 1
        self._layout(plan, row)
        self._close_open()  # one open plan at a time: the earlier one goes stale, its writes undone
        self.epoch += 1
        plan.epoch, self._open = self.epoch, plan
        return plan

    def _close_open(self) -> None:
        """The open plan, if any, goes stale; what its updates did outside the committed state
        (blocks a paged sequence took, copies for copy-on-write) is undone (``_abort``)."""
        plan, self._open = self._open, None
        if plan is not None:
            plan.epoch = -1
            if any(plan.written):
                self._abort(plan)

    def abort(self, plan: Any = None) -> None:
        """Abandon ``plan`` (default: the open plan) uncommitted, as a pass that failed half way
        must: it goes stale, and what its updates did outside the committed state is undone, so
        the cache, and its pool, are as they were before the plan. A plan already stale or
        committed: nothing to do."""
        if plan is None:
            plan = self._open
        if isinstance(plan, Plan) and plan is self._open:
            self._close_open()
            self.epoch += 1

    def _abort(self, plan: Plan) -> None:
        """Undo what ``update`` did under ``plan`` beyond the positions it writes (nothing, except
        where it takes shared resources: a paged sequence's blocks)."""

    def check_active(self, active: Any) -> np.ndarray | None:
        """An ``active`` row mask -> bool [B], or None when every row is active; a TypeError or
        ValueError naming ``active`` otherwise."""
        if active is None:
            return None
        if hasattr(active, "detach"):  # a tensor
            active = active.detach().cpu().numpy()
        active = np.asarray(active)
        if active.dtype != bool:
            raise TypeError(f"active: expected a bool mask, got dtype {active.dtype}")
        if active.shape != (self.batch_size,):
            raise ValueError(f"active: expected shape [{self.batch_size}], got {list(active.shape)}")
        if not active.any():
            raise ValueError("active: expected at least one active row, got none")
        return None if active.all() else active

    def check_room(self, n_new: int, rows: np.ndarray, name: str) -> None:
        """A ValueError naming ``name`` if a row among ``rows`` has no room for ``n_new`` more."""
        worst = int(self._host[rows].max()) if rows.size else 0
        if worst + n_new > self._capacity:
            raise ValueError(
                f"{name}: {n_new} new tokens after {worst} cached ones exceed the cache capacity "
                f"{self._capacity}"
            )

    def _layout(self, plan: Plan, row: int | None) -> None:
        """Plan-time fields of this layout (masks, write positions); may raise, changing nothing."""
        plan.start = int(self._host[plan.rows[0]])
        plan.n_keys = plan.start + plan.n_new

    # ------------------------------------------------------------ 2. update
    def check_plan(self, plan: Any) -> Plan:
        """``plan`` if it is an open plan of this cache made since its last change, else a
        TypeError/ValueError naming ``plan``."""
        if not isinstance(plan, Plan):
            raise TypeError(f"plan: expected a Plan from this cache's plan(), got {type(plan).__name__}")
        if plan.cache is not self:
            raise ValueError(
                f"plan: expected a plan of this {type(self).__name__}, got one made by another "
                f"{type(plan.cache).__name__}"
            )
        if plan.closed:
            raise ValueError("plan: expected an open plan, got one already committed by advance()")
        if not plan.fixed and plan.epoch != self.epoch:  # a fixed plan's epoch is never read: a
            # compiled step would specialize on it and recompile at every step
            raise ValueError(
                "plan: expected the cache's newest plan, got a stale one (a newer plan, a commit, a "
                "truncate, a reset or an abort came after it: make a new plan)"
            )
        return plan

    def check_update(self, layer: Any, k_new: Any, v_new: Any, plan: Any) -> tuple[int, Any, Any]:
        """Every precondition of ``update``: an open plan of this cache, a layer not yet written
        under it, and new keys and values of this cache's kind, shape, dtype and device.
        Returns (layer, k_new, v_new)."""
        plan = self.check_plan(plan)
        layer = self.check_layer(layer)
        if plan.fixed and plan.n_commits:
            raise ValueError(
                "plan: expected a fixed plan not yet committed, got one committed already: after its "
                "first pass a fixed plan is written only by replays of the CUDA graph that recorded "
                "it (replayed()); an eager step needs a new fixed_plan, whose mask and slots follow "
                "the lengths now"
            )
        if plan.written[layer]:
            raise ValueError(f"layer: layer {layer} was already written under this plan")
        batch = (plan.n_batch,) if self.batched else ()
        want = (*batch, self.n_kv_heads, plan.n_new, self.d_head)
        dims = ("B=", "H=", "T=", "K=")[-len(want) :]
        for name, arr in (("k_new", k_new), ("v_new", v_new)):
            self._check_array(name, arr)
            if tuple(arr.shape) != want:
                shown = ", ".join(f"{d}{n}" for d, n in zip(dims, want, strict=True))
                raise ValueError(f"{name}: expected shape [{shown}], got {list(arr.shape)}")
        if self.backend == "numpy":  # any floating dtype, stored in the cache's
            k_new, v_new = np.asarray(k_new, self.dtype), np.asarray(v_new, self.dtype)
        return layer, k_new, v_new

    def answer(self, k_S: Any, v_S: Any, mask: Any, plan: Plan) -> tuple[Any, Any, Any]:
        """What ``update`` returns, from what a cache's own ``update`` gave, as it gave it (a view
        of a preallocated buffer stays a view), after checking a NumPy mask: None or bool [T, S]
        (``check_mask``: a cache written outside this package that answers a wrong one is caught
        before attention reads it)."""
        if self.backend == "numpy":
            check_mask(mask, plan.n_new, k_S.shape[-2], self)
        return k_S, v_S, mask

    def _check_array(self, name: str, arr: Any) -> None:
        """``arr`` is an array of this cache's backend, floating, in its dtype and on its device."""
        if self.backend == "numpy":
            if not isinstance(arr, np.ndarray):
                raise TypeError(f"{name}: expected a numpy array, got {type(arr).__name__}")
            if not np.issubdtype(arr.dtype, np.floating):
                raise TypeError(f"{name}: expected floating-point numbers, got dtype {arr.dtype}")
            return
        if type(arr).__name__ != "Tensor" or not hasattr(arr, "is_floating_point"):
            raise TypeError(f"{name}: expected a torch tensor, got {type(arr).__name__}")
        if arr.dtype != self.dtype or arr.device != self.device:
            raise ValueError(
                f"{name}: expected {self.dtype} on {self.device}, got {arr.dtype} on {arr.device}"
            )

    def update(self, layer: int, k_new: Any, v_new: Any, plan: Plan) -> tuple[Any, Any, Any]:
        """Store one layer's new keys and values where ``plan`` says; return the keys and values
        the new queries attend to and the mask (see the module docstring)."""
        raise NotImplementedError

    def mark_written(self, layer: int, plan: Plan) -> None:
        """Record that ``layer`` was written under ``plan`` (each ``update`` ends with it)."""
        plan.written[layer] = True

    # ------------------------------------------------------------ 3. advance
    def advance(self, plan: Plan) -> None:
        """Commit ``plan``: every row it wrote grows by its ``n_new`` tokens. Every layer must have
        been written under it; afterwards it is closed (a fixed plan waits for its next replay)."""
        plan = self.check_plan(plan)
        missing = [i for i, done in enumerate(plan.written) if not done]
        if missing:
            raise ValueError(
                f"plan: layers {missing} were not written under this plan; update every layer "
                "before advance()"
            )
        if plan.fixed:
            self.check_fixed_room(plan)  # its room, again, at each replay
        self._commit(plan)
        self._host[plan.rows] += plan.n_new
        self._advance_device(plan)
        if plan.fixed:
            plan.written = [False] * self.n_layers
            plan.n_commits += 1
        else:
            plan.closed = True
            self._open = None
        self.epoch += 1

    def check_fixed_room(self, plan: Plan) -> None:
        """Before a fixed plan is replayed or committed: room for its token in every row (and,
        where a cache bounds the keys a fixed plan attends, inside them)."""
        self.check_room(plan.n_new, plan.rows, "plan")

    def _commit(self, plan: Plan) -> None:
        """What enters the cache at commit (nothing, where ``update`` wrote in place)."""

    def _advance_device(self, plan: Plan) -> None:
        """The device copy of the lengths follows the host's (torch caches keep one)."""

    # ------------------------------------------------------------ rolling back
    def truncate(self, length: int, row: int | None = None) -> None:
        """Forget every position from ``length`` on, in every row or in one (speculative decoding
        rolls back rejected guesses); a cache that cannot (a window that evicted them) raises and
        changes nothing. Any open plan goes stale."""
        length = check_int("length", length)
        if row is not None:
            row = self.check_row(row)
        shortest = int(self._host.min()) if row is None else int(self._host[row])
        if not 0 <= length <= shortest:
            where = "every row's length" if row is None else f"row {row}'s length"
            raise ValueError(f"length: expected 0 <= length <= {shortest} ({where}), got {length}")
        self._check_truncate(length, row)  # a cache that cannot: raises, nothing changed
        self._close_open()
        self._truncate(length, row)
        if row is None:
            self._host[:] = length
        else:
            self._host[row] = length
        self._set_device_lengths(length, row)
        self.epoch += 1

    def reset_row(self, row: int) -> None:
        """Empty one row (its slot can take a new sequence); other rows are untouched."""
        self.truncate(0, self.check_row(row))

    def _check_truncate(self, length: int, row: int | None) -> None:
        """A ValueError naming the argument if this cache cannot truncate to ``length`` (a window
        that evicted what it would keep); checked before anything changes."""

    def _truncate(self, length: int, row: int | None) -> None:
        """Drop the data past ``length`` (nothing, where lengths alone say what is held); called
        once ``_check_truncate`` passed, never raises."""

    def _set_device_lengths(self, length: int, row: int | None) -> None:
        """The device copy of the lengths follows a truncate (torch caches keep one)."""

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(layers={self.n_layers}, batch={self.batch_size}, "
            f"kv_heads={self.n_kv_heads}, capacity={self._capacity}, head_dim={self.d_head}, "
            f"lengths={self.host_lengths}, dtype={self.dtype}, device={self.device})"
        )
