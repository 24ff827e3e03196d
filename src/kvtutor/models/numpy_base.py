"""What every NumPy model shares: the cache, the checked passes and generation (``NumpyDecoder``).

A family (``gpt2.GPT2Model``, ``llama.LlamaModel``, ``qwen3.Qwen3Model``) is its config, its
weights and three hooks, the parts where families differ: ``embed`` (GPT-2 adds a learned row per
position, Llama adds none), ``block`` (the norms, the attention with its positional rotation or
QK-norm, the feed-forward) and ``head`` (the final norm and the LM head). ``forward`` strings them
together around the cache protocol of ``kvtutor.caches.protocol``: plan, one write per layer,
commit.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from ..caches.kv import ConcatKVCache, PreallocatedKVCache, check_cache, make_cache, start_position
from ..caches.protocol import KVCacheBase, Plan
from ..validate import check_int, check_max_new_tokens, check_temperature, check_token_id, check_token_ids
from .steps import AttentionCore, sample

__all__ = ["NumpyDecoder"]


class NumpyDecoder:
    """What every NumPy model of kvtutor shares (``GPT2Model``, ``LlamaModel``, ``Qwen3Model``):
    the cache (``new_cache``, ``check_cache``), the checked passes (``forward``, ``prefill``,
    ``decode_step``, ``logits_without_cache``, ``generate``) and ``first_layers``. A family
    supplies ``config`` (with ``vocab_size``, ``n_layers``, ``n_kv_heads``, ``d_head``,
    ``max_seq_len``), ``weights`` (with ``wte_VD``, ``layers`` and ``arrays()``) and three hooks:
    ``embed(ids_T, positions_T)``, ``block(x_TD, layer_index, positions_T, cache, plan, trace,
    core)`` and ``head(x_TD)``."""

    config: Any
    weights: Any

    def embed(self, ids_T: np.ndarray, positions_T: np.ndarray) -> np.ndarray:
        """[T], [T] -> [T,D]: the family's input rows for tokens at ``positions_T``."""
        raise NotImplementedError

    def block(
        self,
        x_TD: np.ndarray,
        layer_index: int,
        positions_T: np.ndarray,
        cache: KVCacheBase | None,
        plan: Plan | None,
        trace: dict[str, np.ndarray] | None = None,
        core: AttentionCore | None = None,
    ) -> np.ndarray:
        """[T,D] -> [T,D]: one block, its keys and values stored under ``plan``."""
        raise NotImplementedError

    def head(self, x_TD: np.ndarray) -> np.ndarray:
        """[T,D] -> [T,V]: the final norm and the LM head."""
        raise NotImplementedError

    # ------------------------------------------------------------ forward passes
    def forward(
        self,
        ids_T: Any,
        cache: KVCacheBase | None = None,
        trace: list[dict] | None = None,
        core: AttentionCore | None = None,
        start: int | None = None,
    ) -> np.ndarray:
        """[T] -> [T,V]: run T new tokens at positions len(cache) .. len(cache)+T-1:
        plan the cache, run every block under the plan, commit it.

        Without a cache the tokens are the whole sequence (positions 0 .. T-1).
        ``trace``, if a list, receives one dict of intermediate arrays per layer;
        ``core``, if given, replaces the attention core of every layer; ``start``
        numbers the tokens from another position (only to show what a wrong
        position does: the keys still go to slots len(cache) onwards).

        The book shows this in "Decode, step by step".
        """
        cfg = self.config
        if cache is not None:
            self.check_cache(cache)
        ids_T = check_token_ids(ids_T, cfg.vocab_size, "ids_T")
        first = start_position(cache, len(ids_T), cfg.max_seq_len)
        if start is not None:
            first = check_int("start", start, 0, cfg.max_seq_len - len(ids_T))
        plan = None if cache is None else cache.plan(len(ids_T), name="ids_T")
        positions_T = np.arange(first, first + len(ids_T))
        x_TD = self.embed(ids_T, positions_T)
        for i in range(cfg.n_layers):
            layer_trace = {"x_in_TD": x_TD} if trace is not None else None
            x_TD = self.block(x_TD, i, positions_T, cache, plan, layer_trace, core)
            if trace is not None:
                trace.append(layer_trace)
        if cache is not None:
            cache.advance(plan)
        return self.head(x_TD)

    def decode_step(
        self,
        token_id: Any,
        cache: KVCacheBase,
        trace: list[dict] | None = None,
        position: int | None = None,
    ) -> np.ndarray:
        """one token id -> [V]: its q/k/v only; k/v written at position
        len(cache). ``position`` other than len(cache) is the off-by-one
        demonstration, never needed.

        The book shows this in "Decode, step by step".
        """
        if cache is None:
            raise TypeError("cache: expected a KV cache from new_cache(), got None")
        token_id = check_token_id(token_id, self.config.vocab_size, "token_id")
        if len(cache) == 0:
            msg = "expected a prefilled cache for decode_step, got an empty one"
            raise ValueError(f"cache: {msg}")
        if position is not None:
            last = self.config.max_seq_len - 1
            position = check_int("position", position, 0, last)
        return self.forward([token_id], cache, trace, start=position)[0]

    def new_cache(
        self, batch_size: int = 1, capacity: int | None = None, kind: str = "preallocated"
    ) -> KVCacheBase:
        """An empty cache for one sequence of up to ``capacity`` positions (default max_seq_len):
        ``"preallocated"`` ([H, M, K] buffers) or ``"concat"`` (grows). The same signature and kind
        names as ``TorchGPT2Model.new_cache``; a NumPy model runs one sequence, so ``batch_size`` is 1."""
        cfg = self.config
        kinds = {"preallocated": PreallocatedKVCache, "concat": ConcatKVCache}
        return make_cache(
            kinds, kind, batch_size, capacity, cfg.n_layers, cfg.n_kv_heads, cfg.d_head,
            cfg.max_seq_len, self.weights.wte_VD.dtype,
        )  # fmt: skip

    def check_cache(self, cache: Any) -> KVCacheBase:
        """``cache`` if it is a NumPy cache of this model's shape, else a TypeError/ValueError
        naming ``cache`` (a torch cache, another model's, one that numbers too many positions)."""
        return check_cache(cache, self, "numpy")

    def prefill(self, prompt_ids: Any, cache: KVCacheBase, trace: list[dict] | None = None) -> np.ndarray:
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
        cache: KVCacheBase | None = None,
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
