"""Smaller caches by eviction, for the NumPy models: a sliding window in a ring buffer, and
attention sinks.

**The window.** With a window of W tokens (Mistral; the local layers of Gemma 2 and 3) the query at
position p sees only the keys at positions p - W + 1 .. p, itself included: the causal mask cut to a
band. No query looks further back, so a cache needs only the last W positions of each layer.
``SlidingWindowKVCache`` keeps them in a ring buffer of W slots per layer (position s in slot
s mod W, where it overwrites position s - W), so its memory stays W positions per layer however
long the sequence grows. ``len(cache)`` still counts every position, because the model takes a new
token's position from it; ``keys(layer)`` returns the positions kept, oldest first.

**Attention sinks** (StreamingLLM, Xiao et al. 2024). With ``n_sink`` > 0 the cache keeps the first
``n_sink`` positions for good, and the last W - n_sink in the ring: the query at p sees positions
0 .. n_sink - 1 and p - (W - n_sink) + 1 .. p, again W keys in W slots. Trained models send much
of their attention to the first tokens whatever those say; a window that evicts them changes every
later softmax, and keeping them repairs most of that.

**What update returns.** For T new tokens at positions p0 .. p0 + T - 1, ``update`` returns the kept
keys that some new query may see (the sinks, then positions p0 - (W - n_sink) + 1 .. p0 - 1),
followed by the T new keys, and the mask that says which of them each new query sees
(``window_mask``), so a prefill chunk longer than the window gets its band; a decode step's one
query sees every key returned, so its mask is None. The new rows enter the ring only at
``advance``: until then the committed positions stay as they were (the protocol of
``kvtutor.caches.protocol``), and of a chunk longer
than the ring only its last W - n_sink rows are kept.

**Positions.** The model numbers every token by its place in the whole sequence, p = len(cache), and
eviction renumbers nothing. In GPT-2 that number picks the learned row wpe[p] added at the input,
so a sequence still ends at ``max_seq_len`` (a cache's ``capacity`` is at most that): the window
saves memory, not positions. The Llama twin caches keys after RoPE: a kept key keeps the rotation of
its own position s and the query at p gets the rotation of p, so their score depends on p - s exactly
as in the full cache. Both models on this cache therefore compute the full model under the banded
mask, no more and no less; ``BandedKVCache`` (a full cache with that mask) is the reference the tests
compare it with. StreamingLLM proper numbers positions *within the cache* instead: the kept keys get
positions 0 .. W - 1 in their order and the new query the next one, so no query-key distance ever
exceeds the window, a range the trained model knows. That needs keys stored before rotation and
rotated for their place in the cache at every step (each recent key moves down one place per step);
a cache of rotated keys would have to turn every kept key at every step, and the model it computes
is then no longer the full model under any mask. This module keeps the original positions, which is
what a cache of rotated keys does honestly.

``measure_eviction`` runs a model with a full cache and with windowed ones side by side and reports
what eviction changes: greedy tokens, logits, and the KL divergence of the next-token distribution.

One letter joins the dimension key here: W, the slots of the ring (``k_LHWK``); B counts sequences
(prompts) and N new tokens in the arrays of ``EvictionReport``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from array_api_compat import array_namespace

from ..validate import check_int, check_max_new_tokens, check_prompts, greedy
from .kv import OneSequenceCache, PreallocatedKVCache, check_numpy_model, model_cache_shape
from .protocol import Plan

__all__ = [
    "window_mask",
    "kept_positions",
    "check_window",
    "SlidingWindowKVCache",
    "BandedKVCache",
    "EvictionReport",
    "measure_eviction",
]


def window_mask(
    query_positions_T: Any,
    key_positions_S: Any,
    window: int,
    n_sink: int = 0,
) -> np.ndarray:
    """[T], [S] -> [T,S] bool: True where the query at position p may see the
    key at position s: s <= p, and s < n_sink (a sink) or s > p - (W - n_sink)
    (one of the last W - n_sink positions, p itself included).

    The book shows this in "Smaller caches: windows, sinks and int8".
    """
    p_T1 = np.asarray(query_positions_T)[:, None]
    s_1S = np.asarray(key_positions_S)[None, :]
    recent = s_1S > p_T1 - (window - n_sink)
    return (s_1S <= p_T1) & ((s_1S < n_sink) | recent)


def kept_positions(length: int, window: int, n_sink: int = 0) -> np.ndarray:
    """[min(length, W)] int: the positions a window cache of ``length`` positions keeps, in order:
    the first ``n_sink``, then the last ``window - n_sink``."""
    sinks = np.arange(min(length, n_sink))
    return np.concatenate([sinks, np.arange(max(n_sink, length - (window - n_sink)), length)])


def check_window(window: Any, n_sink: Any, capacity: int) -> tuple[int, int]:
    """(window, n_sink) as ints with 1 <= window <= capacity and 0 <= n_sink < window (at least one
    slot must hold the newest token), or a TypeError/ValueError naming the argument."""
    window = check_int("window", window, 1, capacity)
    return window, check_int("n_sink", n_sink, 0, window - 1)


class SlidingWindowKVCache(OneSequenceCache):
    """A KV cache that keeps a window of the last ``window`` positions per layer in a ring buffer,
    the first ``n_sink`` of them being attention sinks kept for good (see the module docstring).

    Per layer, keys and values in buffers ``k_LHWK`` and ``v_LHWK`` of shape [H, W, K]: slots
    0 .. n_sink - 1 hold the sinks, and position s >= n_sink lives in slot
    n_sink + (s - n_sink) mod (W - n_sink). ``capacity`` is how many positions the cache can number
    (at most the model's ``max_seq_len``), not how many it holds. NumPy arrays for a NumPy model,
    tensors on the device for a torch model (``for_model``).

    Until the next ``advance``, the cache also keeps the rows the last one pushed out of the ring
    (one position per layer for a decode step, up to k + 1 for a speculative round, and a chunk's
    rows that never entered the ring), so that ``truncate`` can roll that advance back, as
    speculative decoding does with rejected guesses; ``nbytes`` counts the ring alone.
    """

    kind = "window"

    def __init__(
        self,
        n_layers: int,
        n_kv_heads: int,
        capacity: int,
        d_head: int,
        window: int,
        n_sink: int = 0,
        dtype: Any = np.float32,
        device: Any = None,
    ) -> None:
        self._init_sequence(n_layers, n_kv_heads, capacity, d_head, dtype, device)
        self.window, self.n_sink = check_window(window, n_sink, self._capacity)
        shape = (self.n_layers, self.n_kv_heads, self.window, self.d_head)
        self.k_LHWK, self.v_LHWK = self.zeros(shape), self.zeros(shape)
        # the rows the last advance pushed out of the ring: positions [N], keys and values [L,H,N,K]
        self._undo = (np.zeros(0, np.int64), self.k_LHWK[:, :, :0], self.v_LHWK[:, :, :0])

    @classmethod
    def for_model(
        cls, model: Any, window: int, n_sink: int = 0, capacity: int | None = None
    ) -> SlidingWindowKVCache:
        """An empty window cache for one sequence of ``model`` (any kvtutor model, in its backend,
        dtype and device), numbering up to ``capacity`` positions (default max_seq_len)."""
        n_layers, n_kv_heads, capacity, d_head, dtype, device = model_cache_shape(model, capacity)
        return cls(n_layers, n_kv_heads, capacity, d_head, window, n_sink, dtype, device)

    # ------------------------------------------------------------ where positions live
    def slots(self, positions: Any) -> np.ndarray:
        """[N] positions -> [N] slots of the ring where they are (or would be) stored."""
        pos = np.asarray(positions, dtype=np.int64)
        ring = self.window - self.n_sink
        return np.where(pos < self.n_sink, pos, self.n_sink + (pos - self.n_sink) % ring)

    def positions(self) -> np.ndarray:
        """[min(len, W)] int: the positions the cache holds, oldest first (what ``keys`` returns)."""
        return kept_positions(self.length, self.window, self.n_sink)

    def attended_positions(self, n_new: int) -> np.ndarray:
        """[S] int: the positions of the keys ``update`` returns for ``n_new`` new tokens: the kept
        ones that one of them may see, then the new ones."""
        start, ring = self.length, self.window - self.n_sink
        sinks = np.arange(min(start, self.n_sink))
        recent = np.arange(max(self.n_sink, start - ring + 1), start)
        return np.concatenate([sinks, recent, np.arange(start, start + n_new)])

    # ------------------------------------------------------------ reading
    def read(self, which: str, layer: int) -> Any:
        """[H, min(len, W), K]: the keys or values held, oldest position first (a new array)."""
        buf = self.k_LHWK if which == "k" else self.v_LHWK
        return buf[layer][:, self.slots(self.positions())]

    def _layout(self, plan: Plan, row: int | None) -> None:
        """The plan's keys are the kept ones some new query may see, then the new ones; its mask
        is the window's band over them (``window_mask``). One query sees every key returned to it
        (mask None)."""
        super()._layout(plan, row)
        attended_S = self.attended_positions(plan.n_new)
        plan.n_keys = attended_S.size
        if plan.n_new > 1:
            positions_T = np.arange(plan.start, plan.start + plan.n_new)
            plan.mask = window_mask(positions_T, attended_S, self.window, self.n_sink)

    # ------------------------------------------------------------ writing
    def update(self, layer, k_HTK, v_HTK, plan):
        """[H,T,K] x2 -> [H,S,K] x2 and the mask: the kept keys and values
        some new query may see, then the new ones (S = min(len, W - 1) + T),
        under the window's band; the new rows enter the ring at ``advance``.

        The book shows this in "Smaller caches: windows, sinks and int8".
        """
        xp = array_namespace(k_HTK)  # NumPy, or torch for a torch model
        slots_S = self.slots(self.attended_positions(plan.n_new)[: -plan.n_new])
        k_HTK = xp.asarray(k_HTK, copy=True)  # the caller may reuse its arrays
        v_HTK = xp.asarray(v_HTK, copy=True)
        plan.staged[layer] = (k_HTK, v_HTK)  # they enter the ring at advance
        k_HSK = xp.concat([self.k_LHWK[layer][:, slots_S], k_HTK], axis=1)
        v_HSK = xp.concat([self.v_LHWK[layer][:, slots_S], v_HTK], axis=1)
        return k_HSK, v_HSK, plan.mask

    def _commit(self, plan: Plan) -> None:
        """The new rows that the window keeps overwrite the oldest slots of the ring; what leaves
        it is kept until the next commit, so that ``truncate`` can undo this one."""
        start, n_new, ring = self.length, plan.n_new, self.window - self.n_sink
        new_N = np.arange(start, start + n_new)
        # the new sinks, and the last W - n_sink positions (a long chunk's earlier rows are dropped)
        keep_N = (new_N < self.n_sink) | (new_N >= start + n_new - ring)
        kept, dropped = np.flatnonzero(keep_N), np.flatnonzero(~keep_N)
        slots_N = self.slots(new_N[kept])
        held_after = kept_positions(start + n_new, self.window, self.n_sink)
        evicted_E = np.setdiff1d(self.positions(), held_after)  # old positions whose slots the new take
        out_E = self.slots(evicted_E)
        k_LHNK = self.xp.concat(
            [self.k_LHWK[:, :, out_E], self.xp.stack([k[:, dropped] for k, _ in plan.staged])], axis=2
        )
        v_LHNK = self.xp.concat(
            [self.v_LHWK[:, :, out_E], self.xp.stack([v[:, dropped] for _, v in plan.staged])], axis=2
        )
        self._undo = (np.concatenate([evicted_E, new_N[dropped]]), k_LHNK, v_LHNK)
        for layer, (k_HTK, v_HTK) in enumerate(plan.staged):
            self.k_LHWK[layer][:, slots_N] = k_HTK[:, kept]
            self.v_LHWK[layer][:, slots_N] = v_HTK[:, kept]

    def _lost(self, length: int) -> np.ndarray:
        """The positions a cache of ``length`` keeps that the ring no longer holds."""
        need = kept_positions(length, self.window, self.n_sink)
        return np.setdiff1d(need, self.positions())

    def _check_truncate(self, length: int, row: int | None) -> None:
        """A ring buffer cannot bring back what it has evicted, so ``length`` must be the current
        length, at most ``n_sink``, anything while nothing has been evicted yet (len <= W), or any
        length back to where the last ``advance`` started: it keeps the rows it pushed out until
        the next one, so that a speculative round's rejected guesses can be rolled back. Otherwise
        a ValueError and no change."""
        lost = self._lost(length)
        if lost.size and not np.isin(lost, self._undo[0]).all():
            short = f"a length <= {self.n_sink} (the sinks)" if self.n_sink else "0"
            raise ValueError(
                f"length: a cache of length {length} keeps positions {int(lost[0])}..{int(lost[-1])}, "
                f"which this window has evicted; expected {self.length} (no change), {short}, "
                f"or any length before the window first evicts; got {length}"
            )

    def _truncate(self, length: int, row: int | None) -> None:
        """Bring back what the last advance pushed out of the ring, where ``length`` keeps it."""
        lost, (undo_N, k_LHNK, v_LHNK) = self._lost(length), self._undo
        if lost.size:  # bring back what the last advance pushed out
            row_of = {int(p): i for i, p in enumerate(undo_N)}
            rows_N = np.array([row_of[int(p)] for p in lost])
            self.k_LHWK[:, :, self.slots(lost)] = k_LHNK[:, :, rows_N]
            self.v_LHWK[:, :, self.slots(lost)] = v_LHNK[:, :, rows_N]
        keep = np.flatnonzero(undo_N < length)  # rows of positions truncated away are stale
        self._undo = (undo_N[keep], k_LHNK[:, :, keep], v_LHNK[:, :, keep])

    # ------------------------------------------------------------ memory
    @property
    def nbytes(self) -> int:
        """Bytes of the positions held: grows with the length up to W positions, then stays flat."""
        per_position = int(self.k_LHWK.nbytes) // self.window
        return 2 * per_position * min(self.length, self.window)

    @property
    def reserved_nbytes(self) -> int:
        """Bytes allocated: the two rings, W positions per layer, from the start."""
        return int(self.k_LHWK.nbytes + self.v_LHWK.nbytes)


class BandedKVCache(PreallocatedKVCache):
    """A full preallocated cache (every position kept) whose mask is a window's band with
    ``n_sink`` sinks: the model computes with it exactly what it computes with a
    ``SlidingWindowKVCache`` of the same window, at a full cache's memory. The reference."""

    kind = "banded"

    def __init__(
        self,
        n_layers: int,
        n_kv_heads: int,
        capacity: int,
        d_head: int,
        window: int,
        n_sink: int = 0,
        dtype: Any = np.float32,
        device: Any = None,
    ) -> None:
        super().__init__(n_layers, n_kv_heads, capacity, d_head, dtype, device)
        self.window, self.n_sink = check_window(window, n_sink, self._capacity)

    @classmethod
    def for_model(
        cls, model: Any, window: int, n_sink: int = 0, capacity: int | None = None
    ) -> BandedKVCache:
        """An empty banded cache for one sequence of ``model``, as ``SlidingWindowKVCache.for_model``."""
        n_layers, n_kv_heads, capacity, d_head, dtype, device = model_cache_shape(model, capacity)
        return cls(n_layers, n_kv_heads, capacity, d_head, window, n_sink, dtype, device)

    def _layout(self, plan: Plan, row: int | None) -> None:
        """The band over every key, S = len + T (decode included: its row is cut too)."""
        super()._layout(plan, row)
        end = plan.start + plan.n_new
        plan.mask = window_mask(np.arange(plan.start, end), np.arange(end), self.window, self.n_sink)


# ---------------------------------------------------------------- what eviction changes


@dataclass(frozen=True, eq=False)
class EvictionReport:
    """A windowed cache against the full cache over the same greedy text (``measure_eviction``).

    Per prompt b and new token n: ``agree_BN``, whether the windowed cache's argmax is the full
    cache's; ``abs_diff_BN``, the mean over the vocabulary of |full logit - windowed logit|;
    ``kl_BN``, KL(full || windowed) of the next-token distributions, in nats.
    """

    window: int
    n_sink: int
    agree_BN: np.ndarray = field(repr=False)
    abs_diff_BN: np.ndarray = field(repr=False)
    kl_BN: np.ndarray = field(repr=False)

    @property
    def n_tokens(self) -> int:
        """New tokens compared, over every prompt."""
        return int(self.agree_BN.size)

    @property
    def agreement(self) -> float:
        """The fraction of new tokens on which the windowed cache's argmax is the full cache's."""
        return float(self.agree_BN.mean())

    @property
    def mean_abs_logit_diff(self) -> float:
        """|full logit - windowed logit|, averaged over the vocabulary and every new token."""
        return float(self.abs_diff_BN.mean())

    @property
    def mean_kl(self) -> float:
        """KL(full || windowed) in nats, averaged over every new token."""
        return float(self.kl_BN.mean())


def _log_softmax(logits_V: np.ndarray) -> np.ndarray:
    x = np.asarray(logits_V, dtype=np.float64)
    x = x - x.max()
    return x - np.log(np.exp(x).sum())


def measure_eviction(
    model: Any,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    window: int,
    n_sinks: Sequence[int] = (0, 4),
) -> tuple[EvictionReport, ...]:
    """One ``EvictionReport`` per entry of ``n_sinks``: a ``SlidingWindowKVCache`` of ``window``
    positions with that many sinks (the same memory for every entry) against a full cache.

    For each prompt every cache is prefilled, then fed the *full* cache's greedy tokens one at a
    time (teacher forcing), and at each of the ``max_new_tokens`` positions the next-token logits
    are compared. Up to the first disagreement this is the windowed cache's own greedy text; after
    it, the comparison stays on the same text. Logits and KL are taken in float64.
    """
    cfg = check_numpy_model(model)  # every argument by its own name, before any work
    prompts = check_prompts(prompts, cfg.vocab_size, cfg.max_seq_len)
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, 1)
    for prompt in prompts:
        check_max_new_tokens(max_new_tokens, len(prompt), cfg.max_seq_len, "max_seq_len")
    if isinstance(n_sinks, np.ndarray):
        n_sinks = n_sinks.tolist()
    if isinstance(n_sinks, (str, bytes)) or not isinstance(n_sinks, Sequence) or not n_sinks:
        raise TypeError(f"n_sinks: expected a non-empty list of ints, got {n_sinks!r}")
    window = check_int("window", window, 1, cfg.max_seq_len)
    checked = [(window, check_int(f"n_sinks[{i}]", n, 0, window - 1)) for i, n in enumerate(n_sinks)]
    shape = (len(prompts), max_new_tokens)
    agree = [np.zeros(shape, dtype=bool) for _ in checked]
    diff = [np.zeros(shape) for _ in checked]
    kl = [np.zeros(shape) for _ in checked]
    for b, prompt in enumerate(prompts):
        capacity = len(prompt) + max_new_tokens - 1
        full = model.new_cache(capacity=capacity)
        windowed = [SlidingWindowKVCache.for_model(model, w, n, max(w, capacity)) for w, n in checked]
        full_V = model.prefill(prompt, full)[-1]
        win_V = [model.prefill(prompt, c)[-1] for c in windowed]
        for i in range(max_new_tokens):
            token = greedy(full_V)
            log_p_V = _log_softmax(full_V)
            for j, logits_V in enumerate(win_V):
                agree[j][b, i] = token == greedy(logits_V)
                diff[j][b, i] = np.mean(np.abs(full_V.astype(np.float64) - logits_V))
                kl[j][b, i] = np.sum(np.exp(log_p_V) * (log_p_V - _log_softmax(logits_V)))
            if i + 1 < max_new_tokens:
                full_V = model.decode_step(token, full)
                win_V = [model.decode_step(token, c) for c in windowed]
    return tuple(EvictionReport(w, n, agree[j], diff[j], kl[j]) for j, (w, n) in enumerate(checked))
