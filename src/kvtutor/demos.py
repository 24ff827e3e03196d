"""Deliberately wrong variants, and the baselines they are measured against (chapters 5 to 7).

Each wrong variant differs from ``kvtutor.numpy_model`` in exactly one place, so a chapter can run
it beside the real model and show where the numbers part ways:

- ``top_left_causal_mask``, ``forward_top_left_mask``: a causal mask aligned to the top-left corner,
  which is right only when the queries are the whole sequence (the ``is_causal=True`` pitfall of
  ``torch.nn.functional.scaled_dot_product_attention`` when T != S, see ``attention_sdpa``);
- ``decode_step_whole_buffer``: a decode step that reads every row of the preallocated buffer
  instead of the filled ones, and so attends to the empty (zero) rows;
- ``QCache``, ``forward_storing_queries``, ``forward_reading_cached_queries``: a cache of query
  rows, which the model never needs: reading it only recomputes outputs that are thrown away.

The right ones sit beside them: ``forward_offset_mask`` (the mask aligned to the last position),
``generate_without_cache`` (every step recomputes the whole sequence),
``worked_example_generate`` (the ``generate`` pseudo-code of the worked example, one of the book's
two source documents, written with the package's step functions) and caches that count the bytes
they write. The figures of chapters 5 to 7 are at the end.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .cache import ConcatKVCache, KVCache, PreallocatedKVCache, make_cache
from .config import ModelConfig
from .gpt2_weights import LayerWeights
from .numpy_model import (
    NumpyModel,
    apply_mask,
    attend,
    attention_scores,
    attention_weights,
    causal_mask,
    embed,
    ffn,
    layer_norm,
    linear,
    lm_head,
    merge_heads,
    project_qkv,
    repeat_kv,
    sample,
    softmax,
    split_heads,
)
from .validate import check_max_new_tokens, check_token_id, check_token_ids

__all__ = [
    "top_left_causal_mask",
    "masked_attention",
    "attention_offset_mask",
    "attention_top_left_mask",
    "attention_sdpa",
    "forward_offset_mask",
    "forward_top_left_mask",
    "decode_step_whole_buffer",
    "QCache",
    "forward_storing_queries",
    "forward_reading_cached_queries",
    "generate_without_cache",
    "post_attention",
    "worked_example_generate",
    "CountingConcatKVCache",
    "CountingPreallocatedKVCache",
    "counting_cache",
    "plot_cumulative_flops",
    "plot_bytes_written",
    "plot_masks",
    "plot_intensity",
]

# An attention core: (layer index, q [H,T,K], k [Hkv,S,K], v [Hkv,S,K]) -> o [H,T,K].
_Core = Callable[[int, np.ndarray, np.ndarray, np.ndarray], np.ndarray]


# ---------------------------------------------------------------- masks and attention cores


def top_left_causal_mask(n_queries: int, n_keys: int) -> np.ndarray:
    """T, S -> [T,S] bool: WRONG when T < S: query t sees keys 0..t, as if it sat at position t.

    This is ``np.tril(np.ones((T, S)))``, the mask ``is_causal=True`` builds. It equals
    ``causal_mask`` only when T = S (prefill); with a cache the new queries sit at the end.
    """
    return np.arange(n_keys)[None, :] <= np.arange(n_queries)[:, None]


def masked_attention(
    q_HTK: np.ndarray, k_HSK: np.ndarray, v_HSK: np.ndarray, mask_TS: np.ndarray | None
) -> np.ndarray:
    """[H,T,K], [Hkv,S,K], [Hkv,S,K], [T,S] or None -> [H,T,K]: softmax(q k^T / sqrt(K), masked) v."""
    group_size = q_HTK.shape[0] // k_HSK.shape[0]
    scores_HTS = attention_scores(q_HTK, repeat_kv(k_HSK, group_size))
    a_HTS = attention_weights(scores_HTS, q_HTK.shape[2], mask_TS)
    return attend(a_HTS, repeat_kv(v_HSK, group_size))


def attention_offset_mask(q_HTK: np.ndarray, k_HSK: np.ndarray, v_HSK: np.ndarray) -> np.ndarray:
    """[H,T,K], [Hkv,S,K], [Hkv,S,K] -> [H,T,K]: right: the mask aligned so query t sits at S-T+t."""
    return masked_attention(q_HTK, k_HSK, v_HSK, causal_mask(q_HTK.shape[1], k_HSK.shape[1]))


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
    """
    import torch
    import torch.nn.functional as F

    if is_causal and mask_TS is not None:
        raise ValueError(
            "is_causal: expected False when mask_TS is given, got True"
        )  # fmt: skip
    group_size = q_HTK.shape[0] // k_HSK.shape[0]
    q = torch.from_numpy(np.ascontiguousarray(q_HTK))
    k = torch.from_numpy(np.ascontiguousarray(repeat_kv(k_HSK, group_size)))
    v = torch.from_numpy(np.ascontiguousarray(repeat_kv(v_HSK, group_size)))
    mask = None
    if mask_TS is not None:
        mask = torch.from_numpy(np.asarray(mask_TS, dtype=bool))
    with torch.no_grad():
        o = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=is_causal
        )  # fmt: skip
    return o.numpy()


# ---------------------------------------------------------------- a forward pass with a swappable core


def _check_cache(model: NumpyModel, cache: Any, kind: type | None = None) -> None:
    model.check_cache(cache)
    if kind is not None and not isinstance(cache, kind):
        raise TypeError(f"cache: expected a {kind.__name__}, got {type(cache).__name__}")


def _forward(model: NumpyModel, ids_T: Any, cache: KVCache | None, core: _Core) -> np.ndarray:
    """[T] -> [T,V]: ``NumpyModel.forward`` with the attention core (scores, mask, softmax, A V)
    replaced by ``core``; everything else (projections, cache writes, FFN) is the model's own."""
    cfg, w = model.config, model.weights
    start = 0
    if cache is not None:
        _check_cache(model, cache)
        start = len(cache)
    ids_T = check_token_ids(ids_T, cfg.vocab_size, "ids_T")
    room = cache.capacity if cache is not None else cfg.max_seq_len
    if start + len(ids_T) > room:
        raise ValueError(f"ids_T: {len(ids_T)} tokens after {start} cached ones exceed the capacity {room}")
    x_TD = embed(ids_T, w.wte_VD, w.wpe_MD, start)
    for i, layer in enumerate(w.layers):
        h_TD = layer_norm(x_TD, layer.ln1_g, layer.ln1_b, cfg.layer_norm_eps)
        q_TD, k_TD, v_TD = project_qkv(h_TD, layer)
        q_HTK = split_heads(q_TD, cfg.n_heads)
        k_new_HTK = split_heads(k_TD, cfg.n_kv_heads)
        v_new_HTK = split_heads(v_TD, cfg.n_kv_heads)
        if cache is None:
            k_HSK, v_HSK = k_new_HTK, v_new_HTK
        else:
            k_HSK, v_HSK = cache.update(i, k_new_HTK, v_new_HTK)
        o_HTK = core(i, q_HTK, k_HSK, v_HSK)
        x_TD = post_attention(x_TD, o_HTK, layer, cfg)
    if cache is not None:
        cache.advance(len(ids_T))
    return lm_head(layer_norm(x_TD, w.lnf_g, w.lnf_b, cfg.layer_norm_eps), w.wte_VD)


def post_attention(
    x_TD: np.ndarray,
    o_HTK: np.ndarray,
    layer: LayerWeights,
    config: ModelConfig,
) -> np.ndarray:
    """[T,D], [H,T,K] -> [T,D]: merge heads, W_O, residual; then LayerNorm,
    FFN, residual.
    """
    x_TD = x_TD + linear(merge_heads(o_HTK), layer.w_o, layer.b_o)
    h_TD = layer_norm(x_TD, layer.ln2_g, layer.ln2_b, config.layer_norm_eps)
    return x_TD + ffn(h_TD, layer)


def forward_offset_mask(model: NumpyModel, ids_T: Any, cache: KVCache | None = None) -> np.ndarray:
    """[T] -> [T,V]: right: the model's forward, with the offset mask applied even when T = 1."""
    return _forward(model, ids_T, cache, lambda i, q, k, v: attention_offset_mask(q, k, v))


def forward_top_left_mask(model: NumpyModel, ids_T: Any, cache: KVCache | None = None) -> np.ndarray:
    """[T] -> [T,V]: WRONG after a non-empty cache: the model's forward with a top-left mask."""
    return _forward(model, ids_T, cache, lambda i, q, k, v: attention_top_left_mask(q, k, v))


def decode_step_whole_buffer(
    model: NumpyModel,
    token_id: Any,
    cache: PreallocatedKVCache,
) -> np.ndarray:
    """one token id -> [V]: WRONG: attends over all M rows of the buffer, not
    the len(cache) + 1 filled.

    The new rows are written where they belong and the length grows by one, as
    in ``decode_step``; the zero rows beyond them take part of every softmax,
    so the output is wrong unless the buffer happens to be full (and from
    layer 1 on, the rows written inherit the error).
    """
    _check_cache(model, cache, PreallocatedKVCache)
    token_id = check_token_id(token_id, model.config.vocab_size, "token_id")
    if len(cache) == 0:
        raise ValueError(
            "cache: expected a prefilled cache for decode_step_whole_buffer, "
            "got an empty one"
        )  # fmt: skip

    def core(
        i: int,
        q_H1K: np.ndarray,
        k_HSK: np.ndarray,
        v_HSK: np.ndarray,
    ) -> np.ndarray:
        # [H, M, K]: every row of the buffer, filled or not
        return masked_attention(q_H1K, cache.k_LHMK[i], cache.v_LHMK[i], None)

    return _forward(model, [token_id], cache, core)[0]


# ---------------------------------------------------------------- the cache nobody needs: queries


class QCache:
    """Per layer, the query rows [H, len, K] of every token processed: a cache nobody needs.

    ``reads`` counts calls to ``queries``, so a chapter can show how often the rows are used.
    """

    def __init__(self, n_layers: int, n_heads: int, d_head: int, dtype: Any = np.float32) -> None:
        self.n_layers, self.n_heads, self.d_head = n_layers, n_heads, d_head
        self._q = [np.zeros((n_heads, 0, d_head), dtype=dtype) for _ in range(n_layers)]
        self.reads = 0

    @classmethod
    def for_model(cls, model: NumpyModel) -> QCache:
        """An empty query cache shaped for ``model``."""
        cfg = model.config
        return cls(cfg.n_layers, cfg.n_heads, cfg.d_head, model.weights.wte_VD.dtype)

    def __len__(self) -> int:
        return min(q.shape[1] for q in self._q)

    def append(self, layer: int, q_new_HTK: np.ndarray) -> None:
        """[H,T,K] -> None: store T more query rows for one layer."""
        if not 0 <= layer < self.n_layers:
            raise ValueError(f"layer: expected 0 <= layer < {self.n_layers}, got {layer}")
        want = (self.n_heads, self.d_head)
        if q_new_HTK.ndim != 3 or (q_new_HTK.shape[0], q_new_HTK.shape[2]) != want:
            got = list(q_new_HTK.shape)
            raise ValueError(f"q_new_HTK: expected shape [H={self.n_heads}, T, K={self.d_head}], got {got}")
        self._q[layer] = np.concatenate([self._q[layer], q_new_HTK.astype(self._q[layer].dtype)], axis=1)

    def queries(self, layer: int) -> np.ndarray:
        """[H, len, K]: every stored query row of one layer (counted in ``reads``)."""
        self.reads += 1
        return self._q[layer]

    def scramble(self, seed: int = 0) -> None:
        """Overwrite every stored row with random numbers (to show that nothing depends on them)."""
        rng = np.random.default_rng(seed)
        self._q = [rng.standard_normal(q.shape).astype(q.dtype) for q in self._q]

    @property
    def nbytes(self) -> int:
        return sum(q.nbytes for q in self._q)


def forward_storing_queries(model: NumpyModel, ids_T: Any, cache: KVCache, q_cache: QCache) -> np.ndarray:
    """[T] -> [T,V]: the model's forward, also appending each layer's new query rows to ``q_cache``.

    Attention uses only the new rows, as the model does, so ``q_cache.reads`` never moves.
    """
    _check_cache(model, cache)

    def core(i: int, q_HTK: np.ndarray, k_HSK: np.ndarray, v_HSK: np.ndarray) -> np.ndarray:
        q_cache.append(i, q_HTK)
        return attention_offset_mask(q_HTK, k_HSK, v_HSK)

    return _forward(model, ids_T, cache, core)


def forward_reading_cached_queries(
    model: NumpyModel, ids_T: Any, cache: KVCache, q_cache: QCache
) -> np.ndarray:
    """[T] -> [T,V]: attention for ALL S stored queries (old and new), then
    only the last T rows kept.

    The S - T older rows are recomputed and thrown away: no result depends on
    them, which ``QCache.scramble`` makes visible (the logits do not change).
    """
    _check_cache(model, cache)
    if len(q_cache) != len(cache):
        raise ValueError(
            f"q_cache: expected {len(cache)} stored rows, "
            f"as many as the KV cache, got {len(q_cache)}"
        )  # fmt: skip

    def core(
        i: int,
        q_HTK: np.ndarray,
        k_HSK: np.ndarray,
        v_HSK: np.ndarray,
    ) -> np.ndarray:
        q_cache.append(i, q_HTK)
        q_all_HSK = q_cache.queries(i)
        n_keys = k_HSK.shape[1]
        mask_SS = causal_mask(n_keys, n_keys)
        o_HSK = masked_attention(q_all_HSK, k_HSK, v_HSK, mask_SS)
        # keep the rows of the new queries
        return o_HSK[:, n_keys - q_HTK.shape[1] :]

    return _forward(model, ids_T, cache, core)


# ---------------------------------------------------------------- baselines: no cache, the worked example


def generate_without_cache(
    model: NumpyModel,
    prompt_ids: Any,
    max_new_tokens: int,
    temperature: float = 0.0,
    seed: int | None = None,
) -> list[int]:
    """prompt [T] -> the new ids: every step runs the WHOLE sequence again
    (no cache at all).
    """
    cfg = model.config
    prompt = check_token_ids(prompt_ids, cfg.vocab_size, "prompt_ids")
    ids = [int(i) for i in prompt]
    limit = cfg.max_seq_len
    check_max_new_tokens(max_new_tokens, len(ids), limit, "max_seq_len")
    rng = np.random.default_rng(seed)
    new: list[int] = []
    for _ in range(max_new_tokens):
        logits_V = model.logits_without_cache(ids)[-1]
        token = sample(logits_V, temperature, rng)
        new.append(token)
        ids.append(token)
    return new


def worked_example_generate(
    model: NumpyModel,
    prompt_ids: Any,
    max_new: int = 100,
    temperature: float = 0.0,
    seed: int | None = None,
) -> list[int]:
    """prompt [T] -> the new ids [max_new]: the worked example's
    ``generate``, line by line.

    One prefill over the prompt that keeps each layer's (K, V), then
    ``max_new`` decode steps that concatenate one row onto them. Same tokens
    as ``NumpyModel.generate``.
    """
    cfg, w = model.config, model.weights
    prompt_ids = check_token_ids(prompt_ids, cfg.vocab_size, "prompt_ids")
    limit = cfg.max_seq_len
    check_max_new_tokens(max_new, len(prompt_ids), limit, "max_seq_len")
    if max_new == 0:
        return []
    rng = np.random.default_rng(seed)
    g, eps, sqrt_d_h = cfg.group_size, cfg.layer_norm_eps, math.sqrt(cfg.d_head)

    def lm_head_last(x_TD: np.ndarray) -> np.ndarray:
        h_1D = layer_norm(x_TD[-1:], w.lnf_g, w.lnf_b, eps)
        return lm_head(h_1D, w.wte_VD)[0]

    # prefill: the whole prompt at once
    x_TD = embed(prompt_ids, w.wte_VD, w.wpe_MD)
    kv_cache = []
    for layer in w.layers:
        h_TD = layer_norm(x_TD, layer.ln1_g, layer.ln1_b, eps)
        q_TD, k_TD, v_TD = project_qkv(h_TD, layer)
        q_HTK = split_heads(q_TD, cfg.n_heads)
        k_HTK = split_heads(k_TD, cfg.n_kv_heads)
        v_HTK = split_heads(v_TD, cfg.n_kv_heads)
        scores_HTT = attention_scores(q_HTK, repeat_kv(k_HTK, g)) / sqrt_d_h
        scores_HTT = apply_mask(scores_HTT, causal_mask(len(x_TD), len(x_TD)))
        a_HTT = softmax(scores_HTT)
        o_HTK = attend(a_HTT, repeat_kv(v_HTK, g))
        kv_cache.append((k_HTK, v_HTK))
        x_TD = post_attention(x_TD, o_HTK, layer, cfg)
    next_token = sample(lm_head_last(x_TD), temperature, rng)
    new = [next_token]

    # decode: one token per step, its K/V row concatenated onto each
    # layer's cache
    for step in range(1, max_new):
        position = len(prompt_ids) + step - 1
        x_1D = embed([next_token], w.wte_VD, w.wpe_MD, start=position)
        for i, layer in enumerate(w.layers):
            h_1D = layer_norm(x_1D, layer.ln1_g, layer.ln1_b, eps)
            q_1D, k_1D, v_1D = project_qkv(h_1D, layer)
            q_H1K = split_heads(q_1D, cfg.n_heads)
            k_H1K = split_heads(k_1D, cfg.n_kv_heads)
            v_H1K = split_heads(v_1D, cfg.n_kv_heads)
            k_full_HSK = np.concatenate([kv_cache[i][0], k_H1K], axis=1)
            v_full_HSK = np.concatenate([kv_cache[i][1], v_H1K], axis=1)
            kv_cache[i] = (k_full_HSK, v_full_HSK)
            k_rep_HSK = repeat_kv(k_full_HSK, g)
            scores_H1S = attention_scores(q_H1K, k_rep_HSK) / sqrt_d_h
            a_H1S = softmax(scores_H1S)
            o_H1K = attend(a_H1S, repeat_kv(v_full_HSK, g))
            x_1D = post_attention(x_1D, o_H1K, layer, cfg)
        next_token = sample(lm_head_last(x_1D), temperature, rng)
        new.append(next_token)
    return new


# ---------------------------------------------------------------- caches that count the bytes they write


class CountingConcatKVCache(ConcatKVCache):
    """A ``ConcatKVCache`` that adds up ``bytes_written``: each update copies old rows and new."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bytes_written = 0

    def update(self, layer, k_new_HTK, v_new_HTK):
        """[H,T,K], [H,T,K] -> [H,S,K], [H,S,K]; counts the S rows of the two new arrays."""
        k_HSK, v_HSK = super().update(layer, k_new_HTK, v_new_HTK)
        self.bytes_written += k_HSK.nbytes + v_HSK.nbytes
        return k_HSK, v_HSK


class CountingPreallocatedKVCache(PreallocatedKVCache):
    """A ``PreallocatedKVCache`` that adds up ``bytes_written``: each update writes only new rows."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bytes_written = 0

    def update(self, layer, k_new_HTK, v_new_HTK):
        """[H,T,K], [H,T,K] -> [H,S,K], [H,S,K]; counts the T new rows of keys and values."""
        k_HSK, v_HSK = super().update(layer, k_new_HTK, v_new_HTK)
        self.bytes_written += 2 * k_new_HTK.size * self.k_LHMK.itemsize
        return k_HSK, v_HSK


def counting_cache(model: NumpyModel, kind: str = "preallocated", capacity: int | None = None) -> KVCache:
    """An empty cache like ``model.new_cache(capacity=capacity, kind=kind)`` that also counts
    ``bytes_written``."""
    kinds = {"preallocated": CountingPreallocatedKVCache, "concat": CountingConcatKVCache}
    cfg = model.config
    return make_cache(
        kinds, kind, 1, capacity, cfg.n_layers, cfg.n_kv_heads, cfg.d_head, cfg.max_seq_len,
        model.weights.wte_VD.dtype,
    )  # fmt: skip


# ---------------------------------------------------------------- figures of chapters 5 to 7


def _pyplot():
    import matplotlib.pyplot as plt

    return plt


def _check_1d(name: str, arr: Any, n: int | None = None) -> np.ndarray:
    arr = np.asarray(arr, dtype=float)
    if arr.ndim != 1 or (n is not None and len(arr) != n):
        want = "a 1-D array" if n is None else f"a 1-D array of {n} values"
        raise ValueError(f"{name}: expected {want}, got shape {list(arr.shape)}")
    return arr


def plot_cumulative_flops(context_N: Any, cached_N: Any, uncached_N: Any, title: str = "") -> Any:
    """[N] context lengths, [N] FLOPs per token with / without a cache -> Figure with two panels.

    Left: the GFLOPs spent on each generated token; right: their running total. Both on a log
    scale, so the cached line (hundreds of times lower) stays visible.
    """
    context_N = _check_1d("context_N", context_N)
    cached_N = _check_1d("cached_N", cached_N, len(context_N))
    uncached_N = _check_1d("uncached_N", uncached_N, len(context_N))
    from .figures import DECODE_COLOR, PROMPT_COLOR

    plt = _pyplot()
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(9.0, 3.6))
    for ax, with_, without, what in (
        (ax0, cached_N, uncached_N, "GFLOP for this token"),
        (ax1, np.cumsum(cached_N), np.cumsum(uncached_N), "GFLOP so far (cumulative)"),
    ):
        ax.semilogy(
            context_N, without / 1e9, color=DECODE_COLOR, lw=2, label="no cache: recompute everything"
        )
        ax.semilogy(context_N, with_ / 1e9, color=PROMPT_COLOR, lw=2, label="KV cache: one token per step")
        ax.set_xlabel("sequence length when the token is produced")
        ax.set_ylabel(what + " (log scale)")
        ax.grid(alpha=0.3, which="both")
    ax0.legend(fontsize=8, loc="upper left")
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def plot_bytes_written(context_N: Any, concat_N: Any, preallocated_N: Any) -> Any:
    """[N] cache lengths, [N] cumulative bytes written by each cache layout -> Figure."""
    context_N = _check_1d("context_N", context_N)
    concat_N = _check_1d("concat_N", concat_N, len(context_N))
    preallocated_N = _check_1d("preallocated_N", preallocated_N, len(context_N))
    from .figures import DECODE_COLOR, PROMPT_COLOR

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.plot(context_N, concat_N / 1024, "o-", color=DECODE_COLOR, ms=3, label="concat: copies the history")
    ax.plot(
        context_N, preallocated_N / 1024, "o-", color=PROMPT_COLOR, ms=3, label="preallocated: new rows only"
    )
    ax.set_xlabel("cache length (tokens)")
    ax.set_ylabel("KiB written to the cache so far")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def plot_masks(n_queries: int, n_keys: int, key_labels: Any | None = None) -> Any:
    """T, S (T new queries after S - T cached keys) -> Figure: the top-left mask beside the right one.

    Green cells may be attended, grey ones are masked; rows are labelled with the query's position.
    """
    for name, value in (("n_queries", n_queries), ("n_keys", n_keys)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name}: expected a positive int, got {value!r}")
    if n_queries > n_keys:
        raise ValueError(f"n_queries: expected at most n_keys={n_keys}, got {n_queries}")
    keys = [str(i) for i in range(n_keys)] if key_labels is None else [str(s) for s in key_labels]
    if len(keys) != n_keys:
        raise ValueError(f"key_labels: expected {n_keys} labels, got {len(keys)}")
    if key_labels is not None:
        keys = [f"{i}\n{s}" for i, s in enumerate(keys)]
    from matplotlib.colors import ListedColormap

    from .figures import PAGE_WIDTH

    plt = _pyplot()
    cmap = ListedColormap(["#d9d9d9", "#54a24b"])
    offset = n_keys - n_queries
    rows = [f"query at {offset + t}" for t in range(n_queries)]
    # one panel above the other, each as wide as the page allows: labels at their own size
    cell = min(0.6, (PAGE_WIDTH - 1.4) / n_keys)
    panel_h = cell * n_queries + 1.1
    fig, axes = plt.subplots(2, 1, figsize=(cell * n_keys + 1.4, 2 * panel_h))
    panels = (
        (top_left_causal_mask(n_queries, n_keys), "top-left aligned (is_causal=True): WRONG"),
        (causal_mask(n_queries, n_keys), "aligned to the last position: right"),
    )
    for ax, (mask_TS, name) in zip(axes, panels, strict=True):
        ax.imshow(mask_TS.astype(int), cmap=cmap, vmin=0, vmax=1, aspect="equal")
        for (r, c), ok in np.ndenumerate(mask_TS):
            ax.text(c, r, "see" if ok else "-", ha="center", va="center", fontsize=9)
        ax.axvline(offset - 0.5, color="black", lw=1.5, ls="--")
        ax.set_xticks(range(n_keys), keys, fontsize=9)
        ax.set_yticks(range(n_queries), rows, fontsize=9)
        ax.set_title(name, fontsize=10)
        ax.tick_params(length=0)
    axes[-1].set_xlabel("key position (left of the dashed line: from the cache)", fontsize=9)
    fig.tight_layout()
    return fig


def plot_intensity(rows_N: Any, curves: dict[str, Any], title: str = "") -> Any:
    """[N] query rows per weight read, {label: [N] FLOPs per byte} -> Figure (log-log), one line each."""
    rows_N = _check_1d("rows_N", rows_N)
    if not curves:
        raise ValueError("curves: expected at least one curve, got none")
    checked = {label: _check_1d(f"curves[{label!r}]", y, len(rows_N)) for label, y in curves.items()}
    from .figures import DECODE_COLOR, PROMPT_COLOR

    plt = _pyplot()
    colors = [PROMPT_COLOR, DECODE_COLOR, "#e45756", "#54a24b", "#b279a2"]
    markers = "so^dv"
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for i, (label, y_N) in enumerate(checked.items()):
        ax.loglog(rows_N, y_N, "-", marker=markers[i % 5], color=colors[i % 5], ms=4, label=label)
    ax.set_xlabel("query rows that share one read of the weights")
    ax.set_ylabel("FLOPs per byte moved")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="upper left")
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig
