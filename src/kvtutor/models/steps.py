"""The steps every NumPy family shares: projections, heads, masks, softmax, attention and sampling.

GPT-2 (``kvtutor.models.gpt2``), Llama and Qwen3 (``kvtutor.models.llama``, ``qwen3``) differ in
where positions enter, in their norms and their feed-forward; the attention in the middle and the
head at the end are these functions, whose first docstring line carries their shapes (the
dimension key is in ``kvtutor.__doc__``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..validate import (
    check_int,
    check_logits_row,
    check_rng,
    check_temperature,
    checked_by,
    greedy,
)

__all__ = [
    "linear",
    "split_heads",
    "repeat_kv",
    "attention_scores",
    "causal_mask",
    "apply_mask",
    "softmax",
    "attention_weights",
    "attend",
    "merge_heads",
    "attention_core",
    "lm_head",
    "sample",
    "check_sample",
    "greedy",
]


def linear(x_TE: np.ndarray, w_EO: np.ndarray, b_O: np.ndarray) -> np.ndarray:
    """[T,E], [E,F], [F] -> [T,F]: with T > 1 a GEMM, with T = 1 a GEMV.

    The book shows this in "Prefill, step by step".
    """
    return x_TE @ w_EO + b_O


def split_heads(x_TD: np.ndarray, n_heads: int) -> np.ndarray:
    """[T, H*K] -> [H,T,K]

    The book shows this in "Prefill, step by step".
    """
    n_tokens, width = x_TD.shape
    x_THK = x_TD.reshape(n_tokens, n_heads, width // n_heads)
    return x_THK.transpose(1, 0, 2)  # (H, T, K)


def repeat_kv(k_HSK: np.ndarray, group_size: int) -> np.ndarray:
    """[Hkv,S,K] -> [Hkv*group_size,S,K]: each KV head serves group_size
    query heads (GQA/MQA).

    The book shows this in "Sharing keys and values: MHA, GQA and MQA".
    """
    return k_HSK if group_size == 1 else np.repeat(k_HSK, group_size, axis=0)


def attention_scores(q_HTK: np.ndarray, k_HSK: np.ndarray) -> np.ndarray:
    """[H,T,K], [H,S,K] -> [H,T,S]: the raw dot products q_t . k_s
    (not yet scaled).

    The book shows this in "Prefill, step by step".
    """
    return q_HTK @ k_HSK.transpose(0, 2, 1)


def causal_mask(n_queries: int, n_keys: int) -> np.ndarray:
    """T, S -> [T,S] bool: True where query t may see key s.

    The T queries are the last T of the S positions, so query t sits at
    position S - T + t and sees keys 0 .. S - T + t. Prefill (T = S) gives
    the lower triangle; decode (T = 1) a full row.

    The book shows this in "Prefill, step by step" and "The questions
    everyone asks".
    """
    offset = n_keys - n_queries
    return np.arange(n_keys)[None, :] <= np.arange(n_queries)[:, None] + offset


def apply_mask(scores_HTS: np.ndarray, mask_TS: np.ndarray) -> np.ndarray:
    """[H,T,S], [T,S] -> [H,T,S]: -inf wherever the mask forbids looking.

    The book shows this in "Prefill, step by step".
    """
    return np.where(mask_TS, scores_HTS, -np.inf)


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """[..., S] -> [..., S]: rows that sum to 1 (max subtracted for
    stability).

    The book shows this in "Prefill, step by step".
    """
    shifted = x - x.max(axis=axis, keepdims=True)
    e = np.exp(shifted)
    return e / e.sum(axis=axis, keepdims=True)


def attention_weights(
    scores_HTS: np.ndarray,
    d_head: int,
    mask_TS: np.ndarray | None,
) -> np.ndarray:
    """[H,T,S], K, [T,S] or None -> [H,T,S]: mask, divide by sqrt(K),
    softmax over keys.

    The book shows this in "Prefill, step by step".
    """
    if mask_TS is not None:
        scores_HTS = apply_mask(scores_HTS, mask_TS)
    return softmax(scores_HTS / math.sqrt(d_head))


def attend(a_HTS: np.ndarray, v_HSK: np.ndarray) -> np.ndarray:
    """[H,T,S], [H,S,K] -> [H,T,K]: each output row is a weighted mix of
    value rows.

    The book shows this in "Prefill, step by step".
    """
    return a_HTS @ v_HSK


def merge_heads(o_HTK: np.ndarray) -> np.ndarray:
    """[H,T,K] -> [T, H*K]

    The book shows this in "Prefill, step by step".
    """
    n_heads, n_tokens, d_head = o_HTK.shape
    o_THK = o_HTK.transpose(1, 0, 2)
    return o_THK.reshape(n_tokens, n_heads * d_head)  # (T, H*K)


def attention_core(
    q_HTK: np.ndarray,
    k_HSK: np.ndarray,
    v_HSK: np.ndarray,
    mask_TS: np.ndarray | None = None,
) -> np.ndarray:
    """[H,T,K], [Hkv,S,K], [Hkv,S,K] -> [H,T,K]: each of the T new queries
    attends to the keys the mask ([T,S] bool) lets it see.

    Scores, mask, softmax, weighted sum of values; each of the Hkv key/value
    heads serves H/Hkv query heads. Every family shares it. The mask is the
    cache's answer (a window's band); None is the plain causal mask (the T
    queries are the last T of the S keys), and one query row (decode) needs
    no mask at all: it may see every key.

    The book shows this in "Sharing keys and values: MHA, GQA and MQA" and
    "Smaller caches: windows, sinks and int8".
    """
    n_heads, n_new, d_head = q_HTK.shape
    group_size, n_keys = n_heads // k_HSK.shape[0], k_HSK.shape[1]
    k_HSK = np.ascontiguousarray(k_HSK)  # one layout whatever the cache:
    v_HSK = np.ascontiguousarray(v_HSK)  # the same sums, bit for bit
    scores_HTS = attention_scores(q_HTK, repeat_kv(k_HSK, group_size))
    if mask_TS is None and n_new > 1:
        mask_TS = causal_mask(n_new, n_keys)
    a_HTS = attention_weights(scores_HTS, d_head, mask_TS)
    return attend(a_HTS, repeat_kv(v_HSK, group_size))


def lm_head(x_TD: np.ndarray, wte_VD: np.ndarray) -> np.ndarray:
    """[T,D], [V,D] -> [T,V]: logits, using the token embedding as the
    output matrix (tied).

    The book shows this in "Prefill, step by step".
    """
    return x_TD @ wte_VD.T


def sample(
    logits_V: np.ndarray,
    temperature: float = 0.0,
    rng: np.random.Generator | None = None,
    top_k: int | None = None,
) -> int:
    """[V] -> token id: argmax when temperature is 0, else a draw from
    softmax(logits / temperature), over the top_k largest logits if given.

    The book shows this in "Prefill, step by step".
    """
    if temperature == 0:
        return int(np.argmax(logits_V))
    logits_V = np.asarray(logits_V, dtype=np.float64) / temperature
    if top_k is not None:
        kth = np.sort(logits_V)[-top_k]
        logits_V = np.where(logits_V < kth, -np.inf, logits_V)
    p_V = softmax(logits_V)
    rng = np.random.default_rng() if rng is None else rng
    return int(rng.choice(len(p_V), p=p_V))


def check_sample(logits_V: Any, temperature: Any, rng: Any, top_k: Any) -> None:
    """``sample``'s arguments, each refused by name before anything is drawn:
    one row [V] of finite real logits (a batch is not flattened), a finite
    temperature >= 0 at which logits / temperature stays finite, a NumPy
    Generator or None, and top_k None or an int (never a bool) in 1 .. V."""
    logits_V = check_logits_row(logits_V)
    temperature = check_temperature(temperature)
    check_rng(rng)
    n_vocab = int(logits_V.shape[0])
    if top_k is not None:
        check_int("top_k", top_k, 1, n_vocab)
    if temperature > 0:
        largest = float(np.abs(np.asarray(logits_V, dtype=np.float64)).max())
        if not math.isfinite(largest / temperature):
            raise ValueError(
                f"temperature: expected one at which logits / temperature stays "
                f"finite (the largest |logit| is {largest:.4g}), got {temperature!r}"
            )


sample = checked_by(check_sample)(sample)
