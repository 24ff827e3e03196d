"""Deliberately wrong variants of the model, each one change to it (the book's Pitfalls page).

Every variant runs the real ``GPT2Model.forward`` with its attention core replaced through the
``core`` hook (``kvtutor.models.gpt2.attention``): projections, cache writes, FFN and LM head are
the model's own, so a chapter can run a variant beside the model and show where the numbers part
ways. The right counterparts are in ``kvtutor.book.demos``.

- ``top_left_causal_mask``, ``attention_top_left_mask``, ``forward_top_left_mask``: a causal mask
  aligned to the top-left corner, which is right only when the queries are the whole sequence (the
  ``is_causal=True`` pitfall of ``torch.nn.functional.scaled_dot_product_attention`` when T != S,
  see ``attention_sdpa``);
- ``decode_step_whole_buffer``: a decode step that reads every row of the preallocated buffer
  instead of the filled ones, and so attends to the empty (zero) rows;
- ``forward_storing_queries``, ``forward_reading_cached_queries``: a cache of query rows
  (``demos.QCache``), which the model never needs: reading it only recomputes outputs that are
  thrown away.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..caches.kv import PreallocatedKVCache
from ..caches.protocol import KVCacheBase
from ..models.gpt2 import GPT2Model, causal_mask, repeat_kv
from ..validate import check_token_id
from .demos import QCache, attention_offset_mask, masked_attention

__all__ = [
    "top_left_causal_mask",
    "attention_top_left_mask",
    "attention_sdpa",
    "forward_top_left_mask",
    "decode_step_whole_buffer",
    "forward_storing_queries",
    "forward_reading_cached_queries",
]


# ---------------------------------------------------------------- the top-left mask


def top_left_causal_mask(n_queries: int, n_keys: int) -> np.ndarray:
    """T, S -> [T,S] bool: WRONG when T < S: query t sees keys 0..t, as if it sat at position t.

    This is ``np.tril(np.ones((T, S)))``, the mask ``is_causal=True`` builds. It equals
    ``causal_mask`` only when T = S (prefill); with a cache the new queries sit at the end.
    """
    return np.arange(n_keys)[None, :] <= np.arange(n_queries)[:, None]


def attention_top_left_mask(q_HTK: np.ndarray, k_HSK: np.ndarray, v_HSK: np.ndarray) -> np.ndarray:
    """[H,T,K], [Hkv,S,K], [Hkv,S,K] -> [H,T,K]: WRONG when T < S: the top-left aligned mask."""
    return masked_attention(q_HTK, k_HSK, v_HSK, top_left_causal_mask(q_HTK.shape[1], k_HSK.shape[1]))


def attention_sdpa(
    q_HTK: np.ndarray,
    k_HSK: np.ndarray,
    v_HSK: np.ndarray,
    is_causal: bool = False,
    mask_TS: np.ndarray | None = None,
) -> np.ndarray:
    """[H,T,K], [Hkv,S,K], [Hkv,S,K] -> [H,T,K]: torch's
    ``scaled_dot_product_attention``.

    ``is_causal=True`` builds a top-left aligned mask, so with a cache (T < S)
    it is WRONG; passing ``mask_TS=causal_mask(T, S)`` (True = may attend) is
    right. Needs torch.

    The book shows this in "Pitfalls: getting the cache wrong".
    """
    import torch
    import torch.nn.functional as F

    _check_one_mask(is_causal, mask_TS)
    group_size = q_HTK.shape[0] // k_HSK.shape[0]
    q = torch.from_numpy(np.ascontiguousarray(q_HTK))
    k = torch.from_numpy(np.ascontiguousarray(repeat_kv(k_HSK, group_size)))
    v = torch.from_numpy(np.ascontiguousarray(repeat_kv(v_HSK, group_size)))
    mask = None
    if mask_TS is not None:
        mask = torch.from_numpy(np.asarray(mask_TS, dtype=bool))
    with torch.no_grad():
        o = F.scaled_dot_product_attention(q, k, v, mask, is_causal=is_causal)
    return o.numpy()


def _check_one_mask(is_causal: bool, mask_TS: Any) -> None:
    if is_causal and mask_TS is not None:
        raise ValueError("is_causal: expected False when mask_TS is given, got True")


def forward_top_left_mask(model: GPT2Model, ids_T: Any, cache: KVCacheBase | None = None) -> np.ndarray:
    """[T] -> [T,V]: WRONG after a non-empty cache: the model's forward with a top-left mask."""
    return model.forward(ids_T, cache, core=lambda i, q, k, v: attention_top_left_mask(q, k, v))


# ---------------------------------------------------------------- reading the whole buffer


def _check_cache(model: GPT2Model, cache: Any, kind: type | None = None) -> None:
    model.check_cache(cache)
    if kind is not None and not isinstance(cache, kind):
        raise TypeError(f"cache: expected a {kind.__name__}, got {type(cache).__name__}")


def decode_step_whole_buffer(
    model: GPT2Model,
    token_id: Any,
    cache: PreallocatedKVCache,
) -> np.ndarray:
    """one token id -> [V]: WRONG: attends over all M rows of the buffer, not
    the len(cache) + 1 filled.

    The new rows are written where they belong and the length grows by one, as
    in ``decode_step``; the zero rows beyond them take part of every softmax,
    so the output is wrong unless the buffer happens to be full (and from
    layer 1 on, the rows written inherit the error).

    The book shows this in "Pitfalls: getting the cache wrong".
    """
    token_id = _check_whole_buffer_step(model, token_id, cache)

    def core(i: int, q_H1K: np.ndarray, k_HSK: np.ndarray, v_HSK: np.ndarray):
        # [H, M, K]: every row of the buffer, filled or not
        return masked_attention(q_H1K, cache.k_LHMK[i], cache.v_LHMK[i], None)

    return model.forward([token_id], cache, core=core)[0]


def _check_whole_buffer_step(model: GPT2Model, token_id: Any, cache: Any) -> int:
    """The checks of ``decode_step_whole_buffer``: a prefilled preallocated cache, a valid id."""
    _check_cache(model, cache, PreallocatedKVCache)
    token_id = check_token_id(token_id, model.config.vocab_size, "token_id")
    if len(cache) == 0:
        raise ValueError("cache: expected a prefilled cache for decode_step_whole_buffer, got an empty one")
    return token_id


# ---------------------------------------------------------------- the cache nobody needs: queries


def forward_storing_queries(model: GPT2Model, ids_T: Any, cache: KVCacheBase, q_cache: QCache) -> np.ndarray:
    """[T] -> [T,V]: the model's forward, also appending each layer's new query rows to ``q_cache``.

    Attention uses only the new rows, as the model does, so ``q_cache.reads`` never moves.
    """
    _check_cache(model, cache)

    def core(i: int, q_HTK: np.ndarray, k_HSK: np.ndarray, v_HSK: np.ndarray) -> np.ndarray:
        q_cache.append(i, q_HTK)
        return attention_offset_mask(q_HTK, k_HSK, v_HSK)

    return model.forward(ids_T, cache, core=core)


def forward_reading_cached_queries(
    model: GPT2Model, ids_T: Any, cache: KVCacheBase, q_cache: QCache
) -> np.ndarray:
    """[T] -> [T,V]: attention for ALL S stored queries (old and new), then
    only the last T rows kept.

    The S - T older rows are recomputed and thrown away: no result depends on
    them, which ``QCache.scramble`` makes visible (the logits do not change).

    The book shows this in "Pitfalls: getting the cache wrong".
    """
    _check_query_cache(model, cache, q_cache)

    def core(i: int, q_HTK: np.ndarray, k_HSK: np.ndarray, v_HSK: np.ndarray):
        q_cache.append(i, q_HTK)
        q_all_HSK = q_cache.queries(i)
        n_keys = k_HSK.shape[1]
        mask_SS = causal_mask(n_keys, n_keys)
        o_HSK = masked_attention(q_all_HSK, k_HSK, v_HSK, mask_SS)
        # keep the rows of the new queries
        return o_HSK[:, n_keys - q_HTK.shape[1] :]

    return model.forward(ids_T, cache, core=core)


def _check_query_cache(model: GPT2Model, cache: Any, q_cache: QCache) -> None:
    """The checks of ``forward_reading_cached_queries``: one stored query row per cached token."""
    _check_cache(model, cache)
    if len(q_cache) != len(cache):
        raise ValueError(
            f"q_cache: expected {len(cache)} stored rows, as many as the KV cache, got {len(q_cache)}"
        )
