"""The NumPy reference model: GPT-2, one small function per step of the walkthrough.

Every function carries its shapes in the first line of its docstring; the dimension key is in
``kvtutor.__doc__``. ``GPT2Model`` strings the steps together into ``prefill`` (all prompt
tokens at once) and ``decode_step`` (one token against the cache).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..caches.kv import (
    ConcatKVCache,
    KVCache,
    PreallocatedKVCache,
    cache_mask,
    check_cache,
    make_cache,
    start_position,
)
from ..validate import check_int, check_max_new_tokens, check_temperature, check_token_id, check_token_ids
from .config import GPT2Config
from .gpt2_weights import GPT2Weights, LayerWeights, random_weights, weights_from_state_dict

__all__ = [
    "embed",
    "layer_norm",
    "linear",
    "project_qkv",
    "split_heads",
    "repeat_kv",
    "attention_scores",
    "causal_mask",
    "apply_mask",
    "softmax",
    "attention_weights",
    "attend",
    "attention_core",
    "AttentionCore",
    "merge_heads",
    "gelu",
    "ffn",
    "attention",
    "block",
    "lm_head",
    "sample",
    "NumpyDecoder",
    "GPT2Model",
]


# ---------------------------------------------------------------- the steps, in walkthrough order


def embed(
    ids_T: np.ndarray,
    wte_VD: np.ndarray,
    wpe_MD: np.ndarray,
    start: int = 0,
) -> np.ndarray:
    """[T], [V,D], [M,D] -> [T,D]: token embedding plus the embedding of
    positions start .. start+T-1.

    The book shows this in "Prefill, step by step".
    """
    ids_T = np.asarray(ids_T)
    return wte_VD[ids_T] + wpe_MD[start : start + len(ids_T)]


def layer_norm(
    x_TD: np.ndarray,
    g_D: np.ndarray,
    b_D: np.ndarray,
    eps: float = 1e-5,
) -> np.ndarray:
    """[T,D], [D], [D] -> [T,D]

    The book shows this in "Prefill, step by step".
    """
    mean_T1 = x_TD.mean(axis=-1, keepdims=True)
    var_T1 = x_TD.var(axis=-1, keepdims=True)
    return (x_TD - mean_T1) / np.sqrt(var_T1 + eps) * g_D + b_D


def linear(x_TE: np.ndarray, w_EO: np.ndarray, b_O: np.ndarray) -> np.ndarray:
    """[T,E], [E,F], [F] -> [T,F]: with T > 1 a GEMM, with T = 1 a GEMV.

    The book shows this in "Prefill, step by step".
    """
    return x_TE @ w_EO + b_O


def project_qkv(
    x_TD: np.ndarray,
    layer: LayerWeights,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[T,D] -> q [T,H*K], k [T,Hkv*K], v [T,Hkv*K]:
    X @ W_Q, X @ W_K, X @ W_V (plus biases).

    The book shows this in "Prefill, step by step".
    """
    return (
        linear(x_TD, layer.w_q, layer.b_q),
        linear(x_TD, layer.w_k, layer.b_k),
        linear(x_TD, layer.w_v, layer.b_v),
    )


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


def gelu(x: np.ndarray) -> np.ndarray:
    """[...] -> [...]: GELU, tanh approximation (GPT-2's 'gelu_new')."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def ffn(x_TD: np.ndarray, layer: LayerWeights) -> np.ndarray:
    """[T,D] -> [T,D]: W_fc [D,F], GELU, W_proj [F,D].

    The book shows this in "Prefill, step by step".
    """
    h_TF = gelu(linear(x_TD, layer.w_fc, layer.b_fc))
    return linear(h_TF, layer.w_proj, layer.b_proj)


def attention_core(
    q_HTK: np.ndarray,
    k_HSK: np.ndarray,
    v_HSK: np.ndarray,
    trace: dict[str, np.ndarray] | None = None,
    cache: KVCache | None = None,
) -> np.ndarray:
    """[H,T,K], [Hkv,S,K], [Hkv,S,K] -> [H,T,K]: each of the T new queries
    attends to the keys up to its own position (the last T of the S).

    Scores, causal mask, softmax, weighted sum of values; each of the Hkv
    key/value heads serves H/Hkv query heads. GPT-2 and Llama share it.
    A cache with a ``mask`` method (a sliding window) chooses the mask.

    The book shows this in "Sharing keys and values: MHA, GQA and MQA",
    "Prefill, step by step" and "Smaller caches: windows, sinks and int8".
    """
    n_heads, n_new, d_head = q_HTK.shape
    group_size, n_keys = n_heads // k_HSK.shape[0], k_HSK.shape[1]
    scores_HTS = attention_scores(q_HTK, repeat_kv(k_HSK, group_size))
    # the cache's own mask (a window's band), if it has one; else causal,
    # and one query row (decode) needs no mask: it may see every key
    mask_TS = cache_mask(cache, n_new, n_keys)
    if mask_TS is None and n_new > 1:
        mask_TS = causal_mask(n_new, n_keys)
    a_HTS = attention_weights(scores_HTS, d_head, mask_TS)
    if trace is not None:
        trace.update(scores_HTS=scores_HTS, a_HTS=a_HTS)
    return attend(a_HTS, repeat_kv(v_HSK, group_size))


#: A replacement for ``attention_core`` (the book's wrong variants):
#: (layer index, q [H,T,K], k [Hkv,S,K], v [Hkv,S,K]) -> o [H,T,K].
#: It is handed no cache, so it never sees a cache's own mask (a window's).
AttentionCore = Callable[[int, np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def store_kv(
    cache: KVCache | None, layer_index: int, k_new_HTK: np.ndarray, v_new_HTK: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """[Hkv,T,K] x2 -> [Hkv,S,K] x2: the keys and values the new queries attend to: the new rows
    alone without a cache (S = T), else the cache's after it stored them (S = len(cache) + T),
    in one memory layout for every cache kind (the same summation path)."""
    if cache is None:
        return k_new_HTK, v_new_HTK
    k_HSK, v_HSK = cache.update(layer_index, k_new_HTK, v_new_HTK)
    return np.ascontiguousarray(k_HSK), np.ascontiguousarray(v_HSK)


def record(trace: dict[str, np.ndarray] | None, **arrays: np.ndarray) -> None:
    """Copies of ``arrays`` into ``trace``, if one is kept (the book prints them)."""
    if trace is not None:
        trace.update({name: np.array(a) for name, a in arrays.items()})


def attention(
    x_TD: np.ndarray,
    layer: LayerWeights,
    config: GPT2Config,
    cache: KVCache | None = None,
    layer_index: int = 0,
    trace: dict[str, np.ndarray] | None = None,
    core: AttentionCore | None = None,
) -> np.ndarray:
    """[T,D] -> [T,D]: multi-head causal self-attention of T new tokens,
    their K/V rows stored in the cache (if any) after the cached ones.
    ``core``, if given, replaces ``attention_core``.

    The book shows this in "Prefill, step by step".
    """
    q_TD, k_TD, v_TD = project_qkv(x_TD, layer)
    q_HTK = split_heads(q_TD, config.n_heads)
    k_new_HTK = split_heads(k_TD, config.n_kv_heads)
    v_new_HTK = split_heads(v_TD, config.n_kv_heads)
    k_HSK, v_HSK = store_kv(cache, layer_index, k_new_HTK, v_new_HTK)
    record(trace, q_HTK=q_HTK, k_HSK=k_HSK, v_HSK=v_HSK)
    if core is None:
        o_HTK = attention_core(q_HTK, k_HSK, v_HSK, trace, cache)
    else:  # a variant of the core (the book's wrong ones)
        o_HTK = core(layer_index, q_HTK, k_HSK, v_HSK)
    out_TD = linear(merge_heads(o_HTK), layer.w_o, layer.b_o)
    record(trace, o_HTK=o_HTK, attn_out_TD=out_TD)
    return out_TD


def block(
    x_TD: np.ndarray,
    layer: LayerWeights,
    config: GPT2Config,
    cache: KVCache | None = None,
    layer_index: int = 0,
    trace: dict[str, np.ndarray] | None = None,
    core: AttentionCore | None = None,
) -> np.ndarray:
    """[T,D] -> [T,D]: x + attention(LN(x)), then x + FFN(LN(x))
    (pre-LayerNorm, as GPT-2).

    The book shows this in "Prefill, step by step".
    """
    eps = config.layer_norm_eps
    h_TD = layer_norm(x_TD, layer.ln1_g, layer.ln1_b, eps)
    x_TD = x_TD + attention(
        h_TD, layer, config, cache, layer_index, trace, core
    )  # fmt: skip
    x_TD = x_TD + ffn(layer_norm(x_TD, layer.ln2_g, layer.ln2_b, eps), layer)
    if trace is not None:
        trace["x_out_TD"] = x_TD
    return x_TD


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
    softmax(logits / temperature).

    The book shows this in "Prefill, step by step".
    """
    temperature = check_temperature(temperature)
    if temperature == 0:
        return int(np.argmax(logits_V))
    logits_V = np.asarray(logits_V, dtype=np.float64) / temperature
    if top_k is not None:
        if not 1 <= top_k <= len(logits_V):
            raise ValueError(
                f"top_k: expected 1 <= top_k <= {len(logits_V)}, got {top_k}",
            )
        kth = np.sort(logits_V)[-top_k]
        logits_V = np.where(logits_V < kth, -np.inf, logits_V)
    p_V = softmax(logits_V)
    rng = np.random.default_rng() if rng is None else rng
    return int(rng.choice(len(p_V), p=p_V))


# ---------------------------------------------------------------- the model


class NumpyDecoder:
    """What every NumPy model of kvtutor shares (GPT-2's ``GPT2Model``, ``llama.LlamaModel``): the
    cache (``new_cache``, ``check_cache``) and the passes built on ``forward`` and ``decode_step``
    (``prefill``, ``logits_without_cache``, ``generate``). A model supplies ``config`` (with
    ``vocab_size``, ``n_layers``, ``n_kv_heads``, ``d_head``, ``max_seq_len``), ``weights`` (with
    ``wte_VD`` and ``arrays()``), ``forward`` and ``decode_step``: embedding, blocks and head."""

    config: Any
    weights: Any

    def new_cache(
        self, batch_size: int = 1, capacity: int | None = None, kind: str = "preallocated"
    ) -> KVCache:
        """An empty cache for one sequence of up to ``capacity`` positions (default max_seq_len):
        ``"preallocated"`` ([H, M, K] buffers) or ``"concat"`` (grows). The same signature and kind
        names as ``TorchGPT2Model.new_cache``; a NumPy model runs one sequence, so ``batch_size`` is 1."""
        cfg = self.config
        kinds = {"preallocated": PreallocatedKVCache, "concat": ConcatKVCache}
        return make_cache(
            kinds, kind, batch_size, capacity, cfg.n_layers, cfg.n_kv_heads, cfg.d_head,
            cfg.max_seq_len, self.weights.wte_VD.dtype,
        )  # fmt: skip

    def check_cache(self, cache: Any) -> None:
        """A TypeError/ValueError unless ``cache`` is a cache of this model's shape."""
        cfg = self.config
        check_cache(cache, cfg.n_layers, cfg.n_kv_heads, cfg.d_head, cfg.max_seq_len)

    def prefill(self, prompt_ids: Any, cache: KVCache, trace: list[dict] | None = None) -> np.ndarray:
        """[T] -> [T,V]: the whole prompt in one pass; fills the cache with T keys and values."""
        if cache is None:
            raise TypeError("cache: expected a KV cache from new_cache(), got None")
        return self.forward(prompt_ids, cache, trace)

    def logits_without_cache(self, token_ids: Any) -> np.ndarray:
        """[T] -> [T,V]: every position recomputed from scratch, no cache involved."""
        return self.forward(token_ids, None)

    def generate(
        self,
        prompt_ids: Any,
        max_new_tokens: int,
        temperature: float = 0.0,
        seed: int | None = None,
        cache: KVCache | None = None,
        stop_token: int | None = None,
    ) -> list[int]:
        """prompt [T] -> the NEW token ids: one prefill, then one decode step
        per token.

        Greedy unless ``temperature > 0``. Stops early after emitting
        ``stop_token``.
        """
        cfg = self.config
        prompt = check_token_ids(prompt_ids, cfg.vocab_size, "prompt_ids")
        limit = "max_seq_len" if cache is None else "the cache's capacity"
        if cache is None:
            cache = self.new_cache()
        else:
            self.check_cache(cache)
            if len(cache) != 0:
                raise ValueError(
                    f"cache: expected an empty cache, got one holding {len(cache)}",
                )
        check_max_new_tokens(max_new_tokens, len(prompt), cache.capacity, limit)
        if stop_token is not None:
            check_token_id(stop_token, cfg.vocab_size, "stop_token")
        temperature = check_temperature(temperature)
        rng = np.random.default_rng(seed)
        new: list[int] = []
        if max_new_tokens == 0:
            return new
        logits_V = self.prefill(prompt, cache)[-1]
        while True:
            token = sample(logits_V, temperature, rng)
            new.append(token)
            if len(new) == max_new_tokens or token == stop_token:
                return new
            logits_V = self.decode_step(token, cache)

    def first_layers(self, n_layers: int) -> Any:
        """A model of this model's first ``n_layers`` blocks, then its final norm and LM head: a
        layer-cut draft for speculative decoding. It shares every weight array, nothing is copied."""
        n_layers = check_int("n_layers", n_layers, 1, self.config.n_layers)
        weights = replace(self.weights, layers=list(self.weights.layers[:n_layers]))
        return type(self)(replace(self.config, n_layers=n_layers), weights)

    @property
    def n_params(self) -> int:
        return sum(a.size for a in self.weights.arrays())


@dataclass
class GPT2Model(NumpyDecoder):
    """GPT-2 in NumPy, float32 by default: the model the book walks through."""

    config: GPT2Config
    weights: GPT2Weights

    # ------------------------------------------------------------ construction
    @classmethod
    def random(cls, config: GPT2Config, seed: int = 0, dtype=np.float32) -> GPT2Model:
        """Random weights drawn as GPT-2 initialises them (normal, std 0.02)."""
        return cls(config, random_weights(config, seed, dtype))

    @classmethod
    def from_gpt2_state_dict(
        cls,
        state_dict: Mapping[str, Any],
        n_heads: int,
        n_kv_heads: int | None = None,
        dtype=np.float32,
        hf_config: Mapping[str, Any] | None = None,
    ) -> GPT2Model:
        """A Hugging Face GPT-2 ``state_dict`` (numpy arrays or torch tensors, with or without the
        ``transformer.`` prefix) -> model; sizes are read off the shapes. Bad weights (non-finite,
        not floating point, gaps in the layers, ...) are refused; with ``hf_config`` (config.json
        as a dict) the sizes must also match the config's, so a truncated checkpoint is caught."""
        config, weights = weights_from_state_dict(state_dict, n_heads, n_kv_heads, dtype, hf_config)
        return cls(config, weights)

    def to_gpt2_state_dict(self) -> dict[str, np.ndarray]:
        """The weights in Hugging Face GPT-2 naming, ``transformer.`` prefix included."""
        return self.weights.to_state_dict()

    # ------------------------------------------------------------ forward passes
    def forward(
        self,
        ids_T: Any,
        cache: KVCache | None = None,
        trace: list[dict] | None = None,
        core: AttentionCore | None = None,
    ) -> np.ndarray:
        """[T] -> [T,V]: run T new tokens at positions len(cache) .. len(cache)+T-1.

        Without a cache the tokens are the whole sequence (positions 0 .. T-1).
        ``trace``, if a list, receives one dict of intermediate arrays per layer.
        ``core``, if given, replaces the attention core of every layer.

        The book shows this in "Decode, step by step".
        """
        cfg = self.config
        if cache is not None:
            self.check_cache(cache)
        ids_T = check_token_ids(ids_T, cfg.vocab_size, "ids_T")
        start = start_position(cache, len(ids_T), cfg.max_seq_len)
        w = self.weights
        x_TD = embed(ids_T, w.wte_VD, w.wpe_MD, start)
        for i, layer in enumerate(w.layers):
            layer_trace = {"x_in_TD": x_TD} if trace is not None else None
            x_TD = block(x_TD, layer, cfg, cache, i, layer_trace, core)
            if trace is not None:
                trace.append(layer_trace)
        x_TD = layer_norm(x_TD, w.lnf_g, w.lnf_b, cfg.layer_norm_eps)
        if cache is not None:
            cache.advance(len(ids_T))
        return lm_head(x_TD, w.wte_VD)

    def decode_step(
        self,
        token_id: Any,
        cache: KVCache,
        trace: list[dict] | None = None,
    ) -> np.ndarray:
        """one token id -> [V]: its q/k/v only; k/v written at position
        len(cache).

        The book shows this in "Decode, step by step".
        """
        if cache is None:
            raise TypeError("cache: expected a KV cache from new_cache(), got None")
        token_id = check_token_id(token_id, self.config.vocab_size, "token_id")
        if len(cache) == 0:
            raise ValueError(
                "cache: expected a prefilled cache for decode_step, "
                "got an empty one"
            )  # fmt: skip
        return self.forward([token_id], cache, trace)[0]
