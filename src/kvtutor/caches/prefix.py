"""Automatic prefix caching on the paged KV cache (vLLM's automatic prefix caching).

``fork`` shares a prompt between sequences that the caller knows to be related. Prefix caching
finds the sharing by itself: every *full* block of a sequence is named by a hash of its parent
block's hash and its own token ids, so a block's hash stands for all the tokens from position 0 to
its end. The hash table maps each hash to the pool block that holds those keys and values. A new
sequence looks up the hash chain of its prompt, maps the longest run of cached blocks into its
block table (reference count + 1) and starts at their end: only the rest of the prompt is
prefilled.

A block whose reference count falls to 0 keeps its hash and its data: it is *cached*, free to be
reused by the next request with the same prefix and free to be taken for new data under memory
pressure, least recently used first (``PrefixCachingAllocator``). A partly filled block has no
hash, so it is never shared through the cache, and a block held by a sequence, the one it is
writing included, is never evicted.

A named block never changes under its name. Every write goes through
``PrefixCachedSequence.prepare``: a block that others hold is copied first (copy-on-write), and a
named block that the writer holds alone loses its name before the write (a sequence rolled back
into one, by ``truncate`` or after a ``fork``, may hold it alone by then). ``register`` refuses to
give a named block a second name.

``model.prefill(ids, seq)`` runs ``ids`` from position ``len(seq)`` on: a sequence that starts on
cached blocks takes ``prompt[len(seq):]``. The model never shows the cache the token ids, so a
whole prompt passed there by mistake cannot be told from a valid call; ``seq.prefill(model,
prompt)`` takes the whole prompt, checks it against the ids the sequence holds and skips them.

``PrefixCachingPool`` and ``PrefixCachedSequence`` follow ``kvtutor.caches.paged``'s classes, so the NumPy
models run on them unchanged. ``kvtutor.serving.paged_trace.simulate_trace(..., prefix_caching=True)``
replays request traces with it.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..validate import check_int
from .paged import BlockAllocator, PagedKVCache, PagedKVPool

__all__ = [
    "ROOT_HASH",
    "block_hash",
    "block_hashes",
    "PrefixCachingAllocator",
    "PrefixCachingPool",
    "PrefixCachedSequence",
]

#: the parent hash of a sequence's first block
ROOT_HASH = "root"


def _token_list(token_ids: Any, name: str = "token_ids") -> list[int]:
    """A 1-D sequence of token ids (ints >= 0, possibly empty) -> a list of ints, or a
    TypeError/ValueError naming ``name``."""
    if isinstance(token_ids, (str, bytes)) or not isinstance(token_ids, (Sequence, np.ndarray)):
        raise TypeError(f"{name}: expected a sequence of int token ids, got {type(token_ids).__name__}")
    arr = np.asarray(token_ids)
    if arr.size == 0:
        return []
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D sequence of token ids, got shape {list(arr.shape)}")
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name}: expected int token ids, got dtype {arr.dtype}")
    if (arr < 0).any():
        first = int(np.argmax(arr < 0))
        raise ValueError(f"{name}: expected token ids >= 0, got {int(arr[first])} at index {first}")
    return [int(t) for t in arr]


def block_hash(parent: str, token_ids: Sequence[int]) -> str:
    """The name of one full block: a hash of its parent block's name and
    its own token ids (SHA-256, the first 16 hex digits).

    The parent's name stands for every token before the block, so equal
    names mean equal tokens from position 0 to the block's end, and so
    equal keys and values.

    The book shows this in "A paged KV cache".
    """
    ids = ",".join(str(int(t)) for t in token_ids)
    return hashlib.sha256(f"{parent}|{ids}".encode()).hexdigest()[:16]


def block_hashes(token_ids: Any, block_size: int) -> list[str]:
    """The hash chain of the full blocks of ``token_ids`` (a partly filled
    last block has no name).

    The book shows this in "A paged KV cache".
    """
    ids = _token_list(token_ids)
    p = check_int("block_size", block_size, 1)
    chain, parent = [], ROOT_HASH
    for start in range(0, len(ids) - p + 1, p):
        parent = block_hash(parent, ids[start : start + p])
        chain.append(parent)
    return chain


class PrefixCachingAllocator(BlockAllocator):
    """A block allocator that keeps freed blocks' contents: a hash table, and the cached blocks
    that nobody holds, in least-recently-used order."""

    def __init__(self, n_blocks: int) -> None:
        super().__init__(n_blocks)
        self.block_of: dict[str, int] = {}  # hash -> the block holding it
        self.hash_of: dict[int, str] = {}  # block -> its hash
        # cached blocks with reference count 0, least recently used first
        self.evictable: OrderedDict[int, None] = OrderedDict()
        self.evictions = 0

    @property
    def n_free(self) -> int:
        """Blocks that ``allocate`` can hand out: on the free list, or cached and held by nobody."""
        return len(self.free_list) + len(self.evictable)

    @property
    def n_used(self) -> int:
        """Blocks held by at least one sequence."""
        return self.n_blocks - self.n_free

    @property
    def n_cached(self) -> int:
        """Blocks with a hash, held or not."""
        return len(self.hash_of)

    def allocate(self) -> int:
        """A block from the free list if it has one; otherwise evict the
        least recently used cached block (its hash is forgotten).

        The book shows this in "A paged KV cache".
        """
        if self.free_list or not self.evictable:
            return super().allocate()
        block, _ = self.evictable.popitem(last=False)
        del self.block_of[self.hash_of.pop(block)]
        self.evictions += 1
        self.refcount[block] = 1
        return block

    def release(self, block: int) -> None:
        """One owner less; at 0 a block with a hash stays cached (most
        recently used end), one without goes back on the free list.

        The book shows this in "A paged KV cache".
        """
        self._check_allocated(block)
        self.refcount[block] -= 1
        if self.refcount[block] == 0:
            if block in self.hash_of:
                self.evictable[block] = None
            else:
                self.free_list.append(block)

    def match(self, hashes: Sequence[str]) -> list[int]:
        """The blocks of the longest run of ``hashes``, from the first, found in the table (a pure
        look-up: nothing changes)."""
        blocks = []
        for h in hashes:
            if h not in self.block_of:
                break
            blocks.append(self.block_of[h])
        return blocks

    def take(self, blocks: Sequence[int]) -> None:
        """Hold cached blocks (a hit): reference count + 1, and out of the evictable set."""
        for block in blocks:
            check_int("block", block, 0, self.n_blocks - 1)
            if block not in self.hash_of:
                raise ValueError(f"blocks: expected cached blocks, got block {block}, which has no hash")
        for block in blocks:
            if self.refcount[block] == 0:
                del self.evictable[block]
            self.refcount[block] += 1

    def blocks_consumed(self, hashes: Sequence[str], n_blocks: int) -> int:
        """How many of the ``n_free`` blocks a sequence of ``n_blocks`` blocks whose first ones may
        be cached under ``hashes`` would take: new blocks, plus cached hits that nobody holds."""
        hits = self.match(hashes)
        return n_blocks - len(hits) + sum(1 for b in hits if self.refcount[b] == 0)

    def register(self, block: int, h: str) -> bool:
        """Name a held, full block by its hash, so that later sequences find it. False (and nothing
        changes) if another block holds that hash; True if the block has this name already.

        A block keeps its name only while it holds the same keys and values (a write drops the name
        first, see ``PrefixCachedSequence.prepare``), so a block that has another name is a
        ValueError: it would stand for two different prefixes."""
        self._check_allocated(block)
        if block in self.hash_of:
            if self.hash_of[block] != h:
                raise ValueError(
                    f"block: expected a block without a name, got block {block}, named "
                    f"{self.hash_of[block]} (forget() its name before writing into it)"
                )
            return True
        if h in self.block_of:
            return False
        self.block_of[h] = block
        self.hash_of[block] = h
        return True

    def forget(self, block: int) -> None:
        """Drop a held block's hash: its contents are about to change."""
        self._check_allocated(block)
        h = self.hash_of.pop(block, None)
        if h is not None:
            del self.block_of[h]


class PrefixCachingPool(PagedKVPool):
    """A ``PagedKVPool`` whose blocks are found again by their contents: ``new_sequence`` starts a
    sequence on the cached blocks of its prompt. Counts ``query_tokens`` (prompt tokens looked up)
    and ``hit_tokens`` (found in the cache)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.allocator: PrefixCachingAllocator = PrefixCachingAllocator(self.allocator.n_blocks)
        self.query_tokens = 0
        self.hit_tokens = 0

    def new_sequence(self, capacity=None, token_ids=()):
        """A sequence for ``token_ids``, its first blocks taken from the
        cache: len(seq) tokens are cached; prefill token_ids[len(seq):].

        The look-up stops one token short of the end: the last prompt
        token must be run to give the logits of the first new token.

        The book shows this in "A paged KV cache".
        """
        capacity, ids = self._check_prompt(capacity, token_ids)
        hashes = block_hashes(ids[:-1], self.block_size)
        hits = self.allocator.match(hashes)
        self.allocator.take(hits)
        seq = PrefixCachedSequence(self, capacity)
        seq.token_ids = ids
        seq.block_table = hits
        seq.block_hashes = hashes[: len(hits)]
        seq.n_cached_tokens = len(hits) * self.block_size
        seq.start_at(seq.n_cached_tokens)
        self.query_tokens += len(ids)
        self.hit_tokens += seq.n_cached_tokens
        self.sequences.append(seq)
        return seq

    def _check_prompt(self, capacity: Any, token_ids: Any) -> tuple[int, list[int]]:
        """new_sequence's capacity (None: max_seq_len) and token ids as a list, or a
        TypeError/ValueError naming the one that is wrong."""
        if capacity is None:
            capacity = self.max_seq_len
        capacity = check_int("capacity", capacity, 1, self.max_seq_len)
        ids = _token_list(token_ids)
        if len(ids) > capacity:
            raise ValueError(f"token_ids: expected at most capacity={capacity} tokens, got {len(ids)}")
        return capacity, ids

    def fork(self, seq: PagedKVCache) -> PagedKVCache:
        """A new sequence sharing every block of ``seq``, its token ids and block names too."""
        child = super().fork(seq)
        if isinstance(seq, PrefixCachedSequence) and isinstance(child, PrefixCachedSequence):
            child.token_ids = list(seq.token_ids)
            child.block_hashes = list(seq.block_hashes)
        return child

    def holds_keys(self) -> bool:
        """Does a sequence hold committed keys, or the cache a named block (held or not)?"""
        return super().holds_keys() or self.allocator.n_cached > 0

    @property
    def hit_rate(self) -> float:
        """Prompt tokens found in the cache, as a fraction of those looked up."""
        return self.hit_tokens / self.query_tokens if self.query_tokens else 0.0


class PrefixCachedSequence(PagedKVCache):
    """A ``PagedKVCache`` that knows the token id of each position it holds (``token_ids``, the
    prompt given to ``new_sequence`` plus any ``extend_tokens``), and names its full blocks in the
    pool's hash table when they are committed. ``prefill(model, prompt)`` takes the whole prompt
    and runs only the part that the sequence does not hold yet."""

    def __init__(self, pool: PagedKVPool, capacity: int) -> None:
        if not isinstance(pool, PrefixCachingPool):
            raise TypeError(f"pool: expected a PrefixCachingPool, got {type(pool).__name__}")
        super().__init__(pool, capacity)
        self.token_ids: list[int] = []  # the token at each position, as far as known
        self.block_hashes: list[str] = []  # the names of the first full blocks, in table order
        self.n_cached_tokens = 0  # positions that came from the cache when it started

    def extend_tokens(self, token_ids: Any) -> None:
        """Declare the ids of the next positions (a generated token, before ``decode_step`` writes
        it), so that full blocks of them are cached too."""
        ids = _token_list(token_ids)
        if len(self.token_ids) < len(self):
            raise ValueError(
                f"token_ids: expected the ids of the positions from {len(self.token_ids)} on, but "
                f"positions up to {len(self) - 1} were written without ids (ids come before the writes)"
            )
        if len(self.token_ids) + len(ids) > self.capacity:
            raise ValueError(
                f"token_ids: {len(ids)} more ids after {len(self.token_ids)} exceed the capacity "
                f"{self.capacity}"
            )
        self.token_ids += ids

    def prepare(self, n_new: int) -> None:
        """Make the blocks for positions len .. len+n_new-1 exist and be this sequence's alone
        (``PagedKVCache.prepare`` copies those that others hold), then drop the name of any of them
        that still has one: the writes that follow change it, and a named block never changes
        under its name. Raises before changing anything when the pool is short of blocks."""
        super().prepare(n_new)
        if n_new == 0:
            return
        first, need = len(self) // self.block_size, self.n_blocks_needed(len(self) + n_new)
        for block in self.block_table[first:need]:
            self.pool.allocator.forget(block)

    def prefill(self, model: Any, prompt_ids: Any) -> np.ndarray:
        """[n] -> [n - len(self), V]: prefill a whole prompt, skipping the positions this sequence
        holds already (its cache hits): only ``prompt_ids[len(self):]`` is run, by
        ``model.prefill`` (a torch model: ``model.forward_row``, this sequence its row 0), and
        their logits come back.

        ``model.prefill(prompt, seq)`` with the whole prompt would write the cached prefix a second
        time, after it, and name blocks after tokens they do not hold; the cache cannot refuse it,
        since it never sees the ids (the rest of the prompt plus as many tokens without ids looks
        the same). This method sees them: the prompt must start with the ids of the positions
        held, agree with the ids declared (``token_ids``), and add at least one (the last one's
        logits give the next token); ids past the declared ones are declared. A prompt given in
        growing prefixes is a chunked prefill. A rejected call changes nothing.
        """
        run_row = getattr(model, "forward_row", None)  # a torch model: this sequence is row 0 of a batch
        if not callable(getattr(model, "prefill", None)):
            raise TypeError(f"model: expected a kvtutor model, got {type(model).__name__}")
        ids = _token_list(prompt_ids, "prompt_ids")
        held, declared = len(self), list(self.token_ids)
        if len(declared) < held:
            raise ValueError(
                f"prompt_ids: cannot be checked: positions {len(declared)} to {held - 1} of this "
                "sequence were written without ids"
            )
        if len(ids) <= held:
            raise ValueError(
                f"prompt_ids: expected more than the {held} ids this sequence holds, got {len(ids)}"
            )
        if len(ids) > self.capacity:
            raise ValueError(f"prompt_ids: expected at most capacity={self.capacity} ids, got {len(ids)}")
        for i, (want, got) in enumerate(zip(declared, ids, strict=False)):
            if want != got:
                kind = "holds" if i < held else "was given"
                raise ValueError(
                    f"prompt_ids: expected {want} at index {i} (the id this sequence {kind} there), got {got}"
                )
        self.token_ids += ids[len(declared) :]
        try:
            return model.prefill(ids[held:], self) if run_row is None else run_row(ids[held:], self, 0)
        except BaseException:
            self.token_ids = declared
            raise

    def advance(self, plan: Any) -> None:
        """Commit the rows written by ``update``; name every block that is now full."""
        super().advance(plan)
        self.name_full_blocks()

    def name_full_blocks(self) -> None:
        """Hash each committed full block whose token ids are known and enter it in the table."""
        p = self.block_size
        n_full = min(len(self), len(self.token_ids)) // p
        for j in range(len(self.block_hashes), n_full):
            parent = self.block_hashes[-1] if self.block_hashes else ROOT_HASH
            h = block_hash(parent, self.token_ids[j * p : (j + 1) * p])
            self.block_hashes.append(h)
            self.pool.allocator.register(self.block_table[j], h)

    def _truncate(self, length: int, row: int | None) -> None:
        """Forget positions (and their token ids) from ``length`` on. The blocks no longer needed go
        back last block first, so that the cache evicts a prefix's tail before its head; a named
        block that becomes partly filled loses its name unless others hold it (then it keeps it
        until a write: ``prepare`` copies it if others still hold it, or drops the name if this
        sequence is its last holder)."""
        alloc = self.pool.allocator
        keep = self.n_blocks_needed(length)
        partial = length % self.block_size
        if partial and keep - 1 < len(self.block_hashes):
            block = self.block_table[keep - 1]
            if alloc.refcount[block] == 1:
                alloc.forget(block)
        del self.block_hashes[length // self.block_size :]
        del self.token_ids[length:]
        for block in reversed(self.block_table[keep:]):
            alloc.release(block)
        del self.block_table[keep:]
