"""What every NumPy model shares: the cache, the checked passes and generation (``NumpyDecoder``).

A family (``gpt2.GPT2Model``, ``llama.LlamaModel``, ``qwen3.Qwen3Model``) is its config, its
weights and three hooks, the parts where families differ: ``embed`` (GPT-2 adds a learned row per
position, Llama adds none), ``block`` (the norms, the attention with its positional rotation or
QK-norm, the feed-forward) and ``head`` (the final norm and the LM head). ``forward`` strings them
together around the cache protocol of ``kvtutor.caches.protocol``: plan, one write per layer,
commit.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import numpy as np

from ..caches.kv import ConcatKVCache, PreallocatedKVCache, check_cache, make_cache, start_position
from ..caches.protocol import KVCacheBase, Plan
from ..validate import (
    check_int,
    check_max_new_tokens,
    check_temperature,
    check_token_id,
    check_token_ids,
    seeded_rng,
)
from .steps import sample
from .tracing import capture_layers
from .weight_schema import check_logits

__all__ = ["NumpyDecoder"]


class NumpyDecoder:
    """What every NumPy model of kvtutor shares (``GPT2Model``, ``LlamaModel``, ``Qwen3Model``):
    the cache (``new_cache``, ``check_cache``), the checked passes (``forward``, ``prefill``,
    ``decode_step``, ``logits_without_cache``, ``generate``) and ``first_layers``. A family
    supplies ``config`` (with ``vocab_size``, ``n_layers``, ``n_kv_heads``, ``d_head``,
    ``max_seq_len``), ``weights`` (with ``wte_VD``, ``layers`` and ``arrays()``) and three hooks:
    ``embed(ids_T, positions_T)``, ``block(x_TD, layer_index, positions_T, cache, plan)`` and
    ``head(x_TD)``."""

    config: Any
    weights: Any
    config_class: type  # the family's config class (``GPT2Config``, ``LlamaConfig``, ...)
    weights_class: type  # and its weights container, whose ``check(config)`` is the schema
    traced: tuple[Callable[..., Any], ...]  # its block, its attention, the attention core
    trace_aliases: dict[str, str] = {}  # local names a trace keeps under another name
    core_module: Any = None  # the module whose ``attention_core`` a ``core=`` replaces

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "head" in cls.__dict__:  # every family's logits are checked finite as they come out
            head = cls.__dict__["head"]

            @functools.wraps(head)
            def checked_head(self: Any, x_TD: np.ndarray) -> np.ndarray:
                return check_logits(head(self, x_TD))

            cls.head = checked_head

    def __post_init__(self) -> None:
        """The weights checked against the config (``weights.check``: every weight present, of
        its shape, one floating NumPy dtype, finite, none beyond the config), whatever built them."""
        if not isinstance(self.config, self.config_class):
            raise TypeError(
                f"config: expected a kvtutor {self.config_class.__name__}, got {type(self.config).__name__}"
            )
        if not isinstance(self.weights, self.weights_class):
            want, got = self.weights_class.__name__, type(self.weights).__name__
            raise TypeError(f"weights: expected a kvtutor {want}, got {got}")
        for name, arr in self.weights.named().items():
            if arr is not None and not isinstance(arr, np.ndarray):
                raise TypeError(
                    f"{name}: expected a NumPy array (a NumPy model; torch tensors go to the torch "
                    f"twin), got {type(arr).__name__}"
                )
        self.weights.check(self.config)

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
        core: Callable[..., np.ndarray] | None = None,
        start: int | None = None,
    ) -> np.ndarray:
        """[T] -> [T,V]: T new tokens at positions len(cache) .. len(cache)+T-1 (``run_pass``),
        every argument checked first, and all or nothing: a pass that fails (non-finite logits
        included) leaves the cache and its pool as they were (``cache.abort``).

        Without a cache the tokens are the whole sequence (positions 0 .. T-1). ``trace``, if a
        list, receives one dict of intermediate arrays per layer (``tracing.capture_layers``);
        ``core``, if given, ``core(layer, q_HTK, k_HSK, v_HSK) -> o_HTK``, replaces GPT-2's
        attention core for this pass (the book's wrong variants; it sees no mask; not while
        another thread runs GPT-2); ``start`` numbers the tokens from another position (only to
        show what a wrong position does: the keys still go to slots len(cache) onwards).
        """
        cfg = self.config
        if cache is not None:
            self.check_cache(cache)
        ids_T = check_token_ids(ids_T, cfg.vocab_size, "ids_T")
        first = start_position(cache, len(ids_T), cfg.max_seq_len)
        if start is not None:
            first = check_int("start", start, 0, cfg.max_seq_len - len(ids_T))
        if trace is not None and not isinstance(trace, list):
            raise TypeError(f"trace: expected None or a list to fill, got {type(trace).__name__}")
        if core is not None and not callable(core):
            raise TypeError(f"core: expected None or a callable attention core, got {type(core).__name__}")
        if core is not None and self.core_module is None:
            raise TypeError("core: expected None (a replaced attention core is GPT-2's), got a callable")
        layers: list[dict] | None = None if trace is None else []
        try:
            with capture_layers(layers, self.traced[0], self.traced[1:], self.trace_aliases):
                with self.replaced_core(core):
                    logits_TV = self.run_pass(ids_T, first, cache)
        except BaseException:
            if cache is not None:
                cache.abort()  # the plan the pass opened: what it took goes back
            raise
        if trace is not None:
            trace.extend(layers)
        return logits_TV

    def run_pass(self, ids_T, start, cache):
        """[T] -> [T,V]: T new tokens at positions start .. start+T-1: plan
        where their keys go, run every block under the plan, commit it.

        The book shows this in "Decode, step by step".
        """
        plan = None if cache is None else cache.plan(len(ids_T))
        positions_T = np.arange(start, start + len(ids_T))
        x_TD = self.embed(ids_T, positions_T)
        for i in range(self.config.n_layers):
            x_TD = self.block(x_TD, i, positions_T, cache, plan)
        logits_TV = self.head(x_TD)  # NaN or inf logits stop the pass here
        if cache is not None:
            cache.advance(plan)  # only now do the lengths move
        return logits_TV

    @contextmanager
    def replaced_core(self, core: Callable[..., np.ndarray] | None) -> Iterator[None]:
        """Within: GPT-2's ``attention`` calls ``core(layer, q, k, v)`` where it calls
        ``attention_core`` (its module's name is rebound, and put back on leaving)."""
        if core is None:
            yield
            return
        module, calls, n_layers = self.core_module, itertools.count(), self.config.n_layers
        real = module.attention_core

        def swapped(q_HTK, k_HSK, v_HSK, mask_TS=None):
            return core(next(calls) % n_layers, q_HTK, k_HSK, v_HSK)

        module.attention_core = swapped
        try:
            yield
        finally:
            module.attention_core = real

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
        rng = seeded_rng(seed)
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
