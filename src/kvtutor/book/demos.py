"""The right teaching variants of chapters 5 to 7: the baselines that the deliberately wrong ones
(``kvtutor.book.wrong``) are measured against.

- ``masked_attention``, ``attention_offset_mask``, ``forward_offset_mask``: attention with an
  explicit mask; the model's forward with the mask aligned to the last position applied even when
  T = 1 (through the ``core`` hook of ``GPT2Model.forward``);
- ``QCache``: a cache of query rows, which the model never needs (``wrong.forward_storing_queries``
  and ``wrong.forward_reading_cached_queries`` fill and read it);
- ``generate_without_cache``: every step recomputes the whole sequence;
- ``pseudo_code_generate``: the usual few lines of ``generate`` pseudo-code, one of the
  book's two source documents, written with the package's step functions (``post_attention`` is
  the rest of its block after attention);
- ``CountingConcatKVCache``, ``CountingPreallocatedKVCache``, ``counting_cache``: caches that count
  the bytes they write.

Their figures are in ``kvtutor.plots.demos``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..caches.kv import ConcatKVCache, PreallocatedKVCache, make_cache
from ..caches.protocol import KVCacheBase
from ..models.config import GPT2Config
from ..models.gpt2 import (
    GPT2Model,
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
from ..models.gpt2_weights import LayerWeights
from ..validate import (
    MAX_COUNT,
    check_at_most,
    check_float_dtype,
    check_int,
    check_max_new_tokens,
    check_seed,
    check_token_ids,
    seeded_rng,
)

__all__ = [
    "masked_attention",
    "attention_offset_mask",
    "forward_offset_mask",
    "QCache",
    "generate_without_cache",
    "post_attention",
    "pseudo_code_generate",
    "CountingConcatKVCache",
    "CountingPreallocatedKVCache",
    "counting_cache",
]


# ---------------------------------------------------------------- attention with an explicit mask


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


def forward_offset_mask(model: GPT2Model, ids_T: Any, cache: KVCacheBase | None = None) -> np.ndarray:
    """[T] -> [T,V]: right: the model's forward, with the offset mask applied even when T = 1."""
    return model.forward(ids_T, cache, core=lambda i, q, k, v: attention_offset_mask(q, k, v))


# ---------------------------------------------------------------- the cache nobody needs: queries

#: The most layers a ``QCache`` takes (one array each): far more than any published model has.
MAX_LAYERS = 2**16


class QCache:
    """Per layer, the query rows [H, len, K] of every token processed: a cache nobody needs.

    ``reads`` counts calls to ``queries``, so a chapter can show how often the rows are used.
    """

    def __init__(self, n_layers: int, n_heads: int, d_head: int, dtype: Any = np.float32) -> None:
        # sizes checked before anything is allocated: one array per layer, H * K numbers per row
        n_layers = check_int("n_layers", n_layers, 1, MAX_LAYERS)
        n_heads, d_head = check_int("n_heads", n_heads, 1), check_int("d_head", d_head, 1)
        check_at_most("n_heads * d_head", n_heads * d_head, MAX_COUNT, " numbers per query row")
        dtype = check_float_dtype(dtype)
        self.n_layers, self.n_heads, self.d_head = n_layers, n_heads, d_head
        self._q = [np.zeros((n_heads, 0, d_head), dtype=dtype) for _ in range(n_layers)]
        self.reads = 0

    @classmethod
    def for_model(cls, model: GPT2Model) -> QCache:
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
        rng = np.random.default_rng(check_seed(seed))
        self._q = [rng.standard_normal(q.shape).astype(q.dtype) for q in self._q]

    @property
    def nbytes(self) -> int:
        return sum(q.nbytes for q in self._q)


# ---------------------------------------------------------------- baselines: no cache, the pseudo-code


def generate_without_cache(
    model: GPT2Model,
    prompt_ids: Any,
    max_new_tokens: int,
    temperature: float = 0.0,
    seed: int | None = None,
) -> list[int]:
    """prompt [T] -> the new ids: every step runs the WHOLE sequence again
    (no cache at all).

    The book shows this in "Same answer, less work".
    """
    cfg = model.config
    prompt = check_token_ids(prompt_ids, cfg.vocab_size, "prompt_ids")
    ids = [int(i) for i in prompt]
    limit = cfg.max_seq_len
    check_max_new_tokens(max_new_tokens, len(ids), limit, "max_seq_len")
    rng = seeded_rng(seed)
    new: list[int] = []
    for _ in range(max_new_tokens):
        logits_V = model.logits_without_cache(ids)[-1]
        token = sample(logits_V, temperature, rng)
        new.append(token)
        ids.append(token)
    return new


def post_attention(
    x_TD: np.ndarray,
    o_HTK: np.ndarray,
    layer: LayerWeights,
    config: GPT2Config,
) -> np.ndarray:
    """[T,D], [H,T,K] -> [T,D]: merge heads, W_O, residual; then LayerNorm,
    FFN, residual.
    """
    x_TD = x_TD + linear(merge_heads(o_HTK), layer.w_o, layer.b_o)
    h_TD = layer_norm(x_TD, layer.ln2_g, layer.ln2_b, config.layer_norm_eps)
    return x_TD + ffn(h_TD, layer)


def pseudo_code_generate(
    model: GPT2Model,
    prompt_ids: Any,
    max_new: int = 100,
    temperature: float = 0.0,
    seed: int | None = None,
) -> list[int]:
    """prompt [T] -> the new ids [max_new]: the usual ``generate``
    pseudo-code, line by line.

    One prefill over the prompt that keeps each layer's (K, V), then
    ``max_new`` decode steps that concatenate one row onto them. Same tokens
    as ``GPT2Model.generate``.
    """
    cfg, w = model.config, model.weights
    prompt_ids = check_token_ids(prompt_ids, cfg.vocab_size, "prompt_ids")
    limit = cfg.max_seq_len
    check_max_new_tokens(max_new, len(prompt_ids), limit, "max_seq_len")
    rng = seeded_rng(seed)
    if max_new == 0:
        return []
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

    def update(self, layer, k_HTK, v_HTK, plan):
        """[H,T,K] x2 -> [H,S,K] x2 and the mask; counts the S rows of the two new arrays."""
        k_HSK, v_HSK, mask_TS = super().update(layer, k_HTK, v_HTK, plan)
        self.bytes_written += k_HSK.nbytes + v_HSK.nbytes
        return k_HSK, v_HSK, mask_TS


class CountingPreallocatedKVCache(PreallocatedKVCache):
    """A ``PreallocatedKVCache`` that adds up ``bytes_written``: each update writes only new rows."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bytes_written = 0

    def update(self, layer, k_HTK, v_HTK, plan):
        """[H,T,K] x2 -> [H,S,K] x2 and the mask; counts the T new rows of keys and values."""
        k_HSK, v_HSK, mask_TS = super().update(layer, k_HTK, v_HTK, plan)
        self.bytes_written += 2 * k_HTK.size * self.k_LHMK.itemsize
        return k_HSK, v_HSK, mask_TS


def counting_cache(model: GPT2Model, kind: str = "preallocated", capacity: int | None = None) -> KVCacheBase:
    """An empty cache like ``model.new_cache(capacity=capacity, kind=kind)`` that also counts
    ``bytes_written``."""
    kinds = {"preallocated": CountingPreallocatedKVCache, "concat": CountingConcatKVCache}
    cfg = model.config
    return make_cache(
        kinds, kind, 1, capacity, cfg.n_layers, cfg.n_kv_heads, cfg.d_head, cfg.max_seq_len,
        model.weights.wte_VD.dtype,
    )  # fmt: skip
