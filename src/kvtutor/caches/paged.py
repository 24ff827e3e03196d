"""A paged KV cache (the PagedAttention idea) for the NumPy model.

Memory is one pool of fixed-size blocks, each holding ``block_size`` token positions of keys and
values for every layer and KV head. A sequence owns no buffer of its own, only a *block table*:
the list of pool blocks that hold its positions 0..P-1, P..2P-1, and so on. A free list hands out
blocks as sequences grow and takes them back when they finish, so a sequence holds at most one
partly filled block, instead of a buffer reserved for the longest sequence it might become.

Blocks carry reference counts. ``fork`` gives a second sequence the same block table (a shared
prompt is stored once); the first write into a shared block copies it (copy-on-write).

``PagedKVCache`` (one sequence) follows the cache protocol of ``kvtutor.caches.protocol``, so every
model runs on it unchanged; the pool holds NumPy arrays for a NumPy model and tensors on the device
for a torch model (``PagedKVPool.for_model``). Two letters join the dimension key
here: N blocks in the pool and P token positions per block, e.g. the pool's keys ``k_LNHPK``.

``kvtutor.serving.paged_trace`` replays a trace of requests through these blocks, or through contiguous
buffers, and records memory reserved and used. ``kvtutor.caches.prefix`` builds automatic prefix
caching on these classes: full blocks named by a hash of their tokens, kept after their sequences
finish and found again by later prompts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from array_api_compat import array_namespace

from ..validate import check_int
from .backend import ArraysOf, itemsize
from .kv import OneSequenceCache, model_cache_shape
from .protocol import Plan

__all__ = [
    "BlockAllocator",
    "PagedKVPool",
    "PagedKVCache",
    "BlockUsage",
    "block_fill",
    "block_owners",
]


class BlockAllocator:
    """The bookkeeping of a block pool: a free list and a reference count per
    block (no data). The free list is kept highest block first, so that
    ``allocate`` hands out block 0 first."""

    def __init__(self, n_blocks: int) -> None:
        self.n_blocks = check_int("n_blocks", n_blocks, 1)
        # highest block first, so that pop() hands out block 0 first
        self.free_list: list[int] = list(range(self.n_blocks - 1, -1, -1))
        self.refcount = [0] * self.n_blocks

    def __copy__(self) -> Any:
        raise TypeError(
            f"copy: a shallow copy of a {type(self).__name__} would share its free list and counts "
            "with the original; copy.deepcopy copies it whole"
        )

    @property
    def n_free(self) -> int:
        return len(self.free_list)

    @property
    def n_used(self) -> int:
        return self.n_blocks - len(self.free_list)

    def allocate(self) -> int:
        """Take a block off the free list (reference count 1).

        The book shows this in "A paged KV cache".
        """
        if not self.free_list:
            raise ValueError(
                "allocate: expected a free block, "
                f"got none of {self.n_blocks} free"
            )  # fmt: skip
        block = self.free_list.pop()
        self.refcount[block] = 1
        return block

    def retain(self, block: int) -> None:
        """One more owner of an allocated block (a forked sequence shares
        it).

        The book shows this in "A paged KV cache".
        """
        self._check_allocated(block)
        self.refcount[block] += 1

    def release(self, block: int) -> None:
        """One owner less; the block goes back on the free list when nobody
        holds it.

        The book shows this in "A paged KV cache".
        """
        self._check_allocated(block)
        self.refcount[block] -= 1
        if self.refcount[block] == 0:
            self.free_list.append(block)

    def _check_allocated(self, block: int) -> None:
        check_int("block", block, 0, self.n_blocks - 1)
        if self.refcount[block] == 0:
            raise ValueError(
                "block: expected an allocated block, "
                f"got free block {block}"
            )  # fmt: skip


def block_fill(tables: Any, block_size: int) -> dict[int, int]:
    """For the (block table, length) of each sequence of one pool: how many of each block's
    positions hold data, the most any holder has written (a shared block counts once)."""
    filled: dict[int, int] = {}
    for table, length in tables:
        for j, block in enumerate(table):
            filled[block] = max(filled.get(block, 0), min(block_size, max(0, length - j * block_size)))
    return filled


def block_owners(seqs: Any) -> tuple[dict[int, int], dict[int, int]]:
    """For sequences of one pool: the index (in ``seqs``) of the first that holds each block, and
    how many of each block's positions hold data (``block_fill``)."""
    seqs, owner = list(seqs), {}
    for i, seq in enumerate(seqs):
        for block in seq.block_table:
            owner.setdefault(block, i)
    size = seqs[0].block_size if seqs else 1
    return owner, block_fill(((seq.block_table, len(seq)) for seq in seqs), size)


@dataclass(frozen=True)
class BlockUsage:
    """Pool accounting. ``bytes_reserved`` counts every block in use, ``bytes_used`` only the token
    positions that hold data (a shared block counts once)."""

    n_blocks: int
    blocks_used: int
    blocks_free: int
    blocks_shared: int
    tokens_stored: int
    block_bytes: int
    token_bytes: int

    @property
    def bytes_reserved(self) -> int:
        return self.blocks_used * self.block_bytes

    @property
    def bytes_used(self) -> int:
        return self.tokens_stored * self.token_bytes

    @property
    def bytes_wasted(self) -> int:
        return self.bytes_reserved - self.bytes_used


class PagedKVPool(ArraysOf):
    """Physical KV memory: keys and values of N blocks x P positions, [L, N, H, P, K] each."""

    def __init__(
        self,
        n_layers: int,
        n_kv_heads: int,
        d_head: int,
        n_blocks: int,
        block_size: int,
        dtype: Any = np.float32,
        max_seq_len: int | None = None,
        device: Any = None,
    ) -> None:
        for name, value in (("n_layers", n_layers), ("n_kv_heads", n_kv_heads), ("d_head", d_head)):
            check_int(name, value, 1)
        self.block_size = check_int("block_size", block_size, 1)
        self._init_arrays(dtype, device)
        self.allocator = BlockAllocator(n_blocks)
        self.n_layers, self.n_kv_heads, self.d_head = int(n_layers), int(n_kv_heads), int(d_head)
        shape = (self.n_layers, self.allocator.n_blocks, self.n_kv_heads, self.block_size, self.d_head)
        self.k_LNHPK, self.v_LNHPK = self.zeros(shape), self.zeros(shape)
        full = self.allocator.n_blocks * self.block_size
        self.max_seq_len = full if max_seq_len is None else check_int("max_seq_len", max_seq_len, 1)
        self.sequences: list[PagedKVCache] = []
        self.writer_ref: Any = None  # the model whose keys the blocks hold (KVCacheBase.check_writer)

    def __copy__(self) -> Any:
        raise TypeError(
            f"copy: a shallow copy of a {type(self).__name__} would share its blocks and sequences "
            "with the original; copy.deepcopy(pool) copies it whole, pool.fork(seq) shares a sequence"
        )

    def holds_keys(self) -> bool:
        """Does a sequence of this pool hold committed keys?"""
        return any(seq.length for seq in self.sequences)

    @classmethod
    def for_model(cls, model: Any, n_blocks: int, block_size: int) -> PagedKVPool:
        """A pool shaped for ``model`` (any kvtutor model: ``kv.model_cache_shape``): its layers, KV
        heads, head dim, dtype, device and context. Anything else is a TypeError naming ``model``."""
        n_layers, n_kv_heads, max_seq_len, d_head, dtype, device = model_cache_shape(model)
        return cls(n_layers, n_kv_heads, d_head, n_blocks, block_size, dtype, max_seq_len, device)

    @property
    def n_blocks(self) -> int:
        return self.allocator.n_blocks

    @property
    def block_bytes(self) -> int:
        """Bytes of one block: K and V for P positions in every layer and KV head."""
        return 2 * self.n_layers * self.n_kv_heads * self.block_size * self.d_head * itemsize(self.dtype)

    @property
    def token_bytes(self) -> int:
        return self.block_bytes // self.block_size

    @property
    def nbytes(self) -> int:
        """Bytes of the whole pool (allocated up front, handed out block by block)."""
        return int(self.k_LNHPK.nbytes + self.v_LNHPK.nbytes)

    def new_sequence(self, capacity: int | None = None) -> PagedKVCache:
        """An empty sequence: no blocks yet; it takes them as it grows, up to ``capacity`` tokens."""
        capacity = (
            self.max_seq_len if capacity is None else check_int("capacity", capacity, 1, self.max_seq_len)
        )
        seq = PagedKVCache(self, capacity)
        self.sequences.append(seq)
        return seq

    def fork(self, seq: PagedKVCache) -> PagedKVCache:
        """A new sequence that shares every block of ``seq`` (prefix sharing, copy-on-write)."""
        self._check_live(seq, "seq")
        child = type(seq)(self, seq.capacity)  # a subclass's sequences fork into their own kind
        child.block_table = seq.block_table[: seq.n_blocks_needed(len(seq))]
        for block in child.block_table:
            self.allocator.retain(block)
        child.start_at(len(seq))
        self.sequences.append(child)
        return child

    def usage(self) -> BlockUsage:
        """Blocks in use, shared blocks, and the token positions that actually hold data."""
        _, filled = block_owners(self.sequences)
        shared = sum(1 for r in self.allocator.refcount if r > 1)
        return BlockUsage(
            n_blocks=self.n_blocks, blocks_used=self.allocator.n_used, blocks_free=self.allocator.n_free,
            blocks_shared=shared, tokens_stored=sum(filled.values()), block_bytes=self.block_bytes,
            token_bytes=self.token_bytes,
        )  # fmt: skip

    def _check_live(self, seq: Any, name: str) -> None:
        if not isinstance(seq, PagedKVCache) or seq.pool is not self:
            raise TypeError(f"{name}: expected a sequence of this pool, got {type(seq).__name__}")
        if not seq.live:
            raise ValueError(f"{name}: expected a live sequence, got one that was freed")

    def _copy_block(self, src: int, dst: int) -> None:
        self.k_LNHPK[:, dst] = self.k_LNHPK[:, src]
        self.v_LNHPK[:, dst] = self.v_LNHPK[:, src]

    def same_rows(self, a: int, b: int, n_rows: int) -> bool:
        """Do blocks ``a`` and ``b`` hold the same keys and values in their first ``n_rows``
        positions, bit for bit, in every layer and head?"""
        xp, rows = self.xp, slice(0, n_rows)
        return all(
            bool(xp.all(arr[:, a, :, rows] == arr[:, b, :, rows])) for arr in (self.k_LNHPK, self.v_LNHPK)
        )


class PagedKVCache(OneSequenceCache):
    """One sequence's view of a ``PagedKVPool``: a block table and a length.

    ``keys(layer)`` gathers the sequence's blocks into [H, len, K]; a GPU kernel reads the blocks
    where they lie instead, but the numbers, and so the attention, are the same.
    """

    kind = "paged"

    def __init__(self, pool: PagedKVPool, capacity: int) -> None:
        self.pool = pool
        self.n_layers, self.n_kv_heads, self.d_head = pool.n_layers, pool.n_kv_heads, pool.d_head
        self._capacity = capacity
        self._init_arrays(pool.dtype, pool.device)  # the pool's
        self.batched = self.backend == "torch"
        self._init_lengths()
        self.block_table: list[int] = []
        self.live = True  # False once free() has given the blocks back

    def start_at(self, length: int) -> None:
        """Start an empty sequence whose blocks already hold ``length`` positions (a fork, or
        prefix-cache hits)."""
        if len(self) != 0:
            raise ValueError(f"length: expected an empty sequence to start, got one holding {len(self)}")
        self._host[0] = check_int("length", length, 0, len(self.block_table) * self.block_size)
        self.epoch += 1

    @property
    def block_size(self) -> int:
        return self.pool.block_size

    def holds_keys(self) -> bool:
        """Does the pool hold committed keys (of any of its sequences): one model writes a pool."""
        return self.pool.holds_keys()

    def writer_slot(self) -> Any:
        """The pool: its blocks, shared between its sequences, hold one model's keys."""
        return self.pool

    def n_blocks_needed(self, n_tokens: int) -> int:
        return math.ceil(n_tokens / self.pool.block_size)

    # ------------------------------------------------------------ reading
    def gather(self, buf_LNHPK: Any, layer: int, length: int) -> Any:
        """[H, length, K]: this sequence's blocks of one layer, in table order.

        The book shows this in "A paged KV cache".
        """
        xp = array_namespace(buf_LNHPK)  # NumPy, or torch for a torch model
        blocks = self.block_table[: self.n_blocks_needed(length)]
        x_NHPK = buf_LNHPK[layer, blocks]
        x_HNPK = xp.permute_dims(x_NHPK, (1, 0, 2, 3))  # (H, n, P, K)
        n_positions = len(blocks) * self.pool.block_size
        x_HSK = xp.reshape(x_HNPK, (self.n_kv_heads, n_positions, self.d_head))
        return x_HSK[:, :length]

    def read(self, which: str, layer: int) -> Any:
        """[H, len, K], gathered from the blocks (a copy)."""
        return self.gather(self.pool.k_LNHPK if which == "k" else self.pool.v_LNHPK, layer, self.length)

    # ------------------------------------------------------------ writing
    def _layout(self, plan: Plan, row: int | None) -> None:
        """A live sequence, and the free blocks this pass will take (counted, not taken)."""
        if not self.live:
            raise ValueError("cache: expected a live sequence, got one that was freed")
        super()._layout(plan, row)
        shared, missing = self.blocks_to_take(plan.n_new)
        self._check_free(plan.n_new, missing + len(shared))

    def blocks_to_take(self, n_new: int) -> tuple[list[int], int]:
        """For positions len .. len+n_new-1: the entries of the block table whose block others
        hold too (each must be copied before the write), and how many blocks are missing."""
        alloc = self.pool.allocator
        first = self.length // self.block_size
        need = self.n_blocks_needed(self.length + n_new)
        end = min(need, len(self.block_table))
        shared = [j for j in range(first, end) if alloc.refcount[self.block_table[j]] > 1]
        return shared, max(0, need - len(self.block_table))

    def prepare(self, n_new: int) -> None:
        """Make the blocks for positions len .. len+n_new-1 exist and be this
        sequence's alone.

        Counts first and raises before changing anything when the free list is
        too short.

        The book shows this in "A paged KV cache".
        """
        alloc = self.pool.allocator
        shared, missing = self.blocks_to_take(n_new)
        self._check_free(n_new, missing + len(shared))
        # copy-on-write: this sequence gets its own copy of each shared block
        for j in shared:
            old, new = self.block_table[j], alloc.allocate()
            self.pool._copy_block(old, new)
            alloc.release(old)
            self.block_table[j] = new
        self.block_table += [alloc.allocate() for _ in range(missing)]

    def _check_free(self, n_new: int, n_wanted: int) -> None:
        """A ValueError unless the pool has n_wanted free blocks for n_new tokens."""
        alloc = self.pool.allocator
        if n_wanted > alloc.n_free:
            raise ValueError(
                f"cache: out of blocks: {n_new} new tokens need {n_wanted} free blocks, the pool has "
                f"{alloc.n_free} of {alloc.n_blocks} (free finished sequences, or make a bigger pool)"
            )

    def update(self, layer, k_HTK, v_HTK, plan):
        """[H,T,K] x2 -> [H,S,K] x2 and the mask: write into the blocks at
        len .. len+T-1, then gather every key and value up to there.

        The book shows this in "A paged KV cache".
        """
        if plan.undo is None:  # what abort puts back
            plan.undo = list(self.block_table)
        self.prepare(plan.n_new)  # layer 0 takes the blocks, the others find them
        pos, done, size = plan.start, 0, self.block_size
        while done < plan.n_new:
            block, offset = self.block_table[pos // size], pos % size
            rows = min(size - offset, plan.n_new - done)
            dst, src = slice(offset, offset + rows), slice(done, done + rows)
            self.pool.k_LNHPK[layer, block, :, dst] = k_HTK[:, src]
            self.pool.v_LNHPK[layer, block, :, dst] = v_HTK[:, src]
            pos, done = pos + rows, done + rows
        end = plan.start + plan.n_new
        k_HSK = self.gather(self.pool.k_LNHPK, layer, end)
        v_HSK = self.gather(self.pool.v_LNHPK, layer, end)
        return k_HSK, v_HSK, plan.mask

    def _abort(self, plan: Plan) -> None:
        """An abandoned plan's blocks go back: those it added to the table, and the private
        copies it made of shared blocks (copy-on-write), whose originals come back if another
        sequence still holds them and they still hold this sequence's rows as the copy does (their
        last other holder may have rewritten them since, after a truncate, or freed them to a new
        sequence); else the copy, this sequence's keys, stays."""
        alloc, before = self.pool.allocator, plan.undo
        if before is None:
            return
        for j, block in enumerate(self.block_table):
            if j >= len(before):
                alloc.release(block)
            elif block != before[j] and alloc.refcount[before[j]] > 0:
                held = min(self.block_size, max(0, self.length - j * self.block_size))
                if self.pool.same_rows(before[j], block, held):
                    alloc.retain(before[j])
                    alloc.release(block)
                    self.block_table[j] = before[j]
        del self.block_table[len(before) :]

    def _truncate(self, length: int, row: int | None) -> None:
        """Blocks no longer needed go back to the pool."""
        keep = self.n_blocks_needed(length)
        for block in self.block_table[keep:]:
            self.pool.allocator.release(block)
        del self.block_table[keep:]

    def fork(self) -> PagedKVCache:
        """A second sequence sharing this one's blocks (see ``PagedKVPool.fork``)."""
        return self.pool.fork(self)

    def free(self) -> None:
        """Give every block back; the sequence is finished and may not be used again."""
        self.pool._check_live(self, "cache")
        self.truncate(0)
        self.live = False
        self.pool.sequences = [s for s in self.pool.sequences if s is not self]

    @property
    def nbytes(self) -> int:
        """Bytes of the blocks in this sequence's table (shared blocks included)."""
        return len(self.block_table) * self.pool.block_bytes
