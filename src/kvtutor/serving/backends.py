"""The NumPy and the torch models side by side: the few places where serving code must tell them apart.

Both models make caches the same way (``new_cache(batch_size=1, capacity=None,
kind="preallocated")``), check them the same way (``check_cache(cache)``) and roll them back the
same way (``cache.truncate(length)``). What remains different is the batch: a ``GPT2Model`` runs
one sequence per cache, token ids [T] -> NumPy logits [T,V]; a ``TorchGPT2Model`` runs a batch in one
cache with a length per row, [B,T] -> tensor logits [B,T,V] on its device. The code for that
difference lives here, once, for ``kvtutor.serving.loop`` (the batch slots of continuous batching) and
``kvtutor.serving.speculative`` (one sequence at a time), with the one-sequence chunked prefill that both
models share (``prefill_in_chunks``). None of it imports torch unless a TorchGPT2Model is given.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..caches.protocol import KVCacheBase
from ..models.numpy_base import NumpyDecoder
from ..validate import check_int, check_token_ids, greedy

__all__ = [
    "is_torch_model",
    "check_model",
    "forward_one",
    "prefill_in_chunks",
    "check_one_sequence",
    "check_empty_cache",
    "forward_row",
    "LoopedSlots",
    "BatchedSlots",
    "batch_slots",
]


def is_torch_model(model: Any) -> bool:
    """Is ``model`` a torch model (a ``TorchDecoder``: ``TorchGPT2Model``, ``TorchLlamaModel``)? Never
    imports torch: unless ``kvtutor.models.torch_gpt2`` has been imported, no torch model can exist."""
    cls = getattr(sys.modules.get("kvtutor.models.torch_gpt2"), "TorchDecoder", None)
    return cls is not None and isinstance(model, cls)


def check_model(model: Any, name: str) -> Any:
    """``model.config`` if ``model`` is a kvtutor model of either family and either backend
    (``GPT2Model``, ``LlamaModel``, ``TorchGPT2Model``, ``TorchLlamaModel``), else a TypeError
    naming ``name``."""
    if not isinstance(model, NumpyDecoder) and not is_torch_model(model):
        raise TypeError(
            f"{name}: expected a kvtutor model, got {type(model).__name__} "
            "(models: GPT2Model, LlamaModel, TorchGPT2Model, TorchLlamaModel)"
        )
    return model.config


# ---------------------------------------------------------------- one sequence (speculative decoding)


def forward_one(model: Any, ids: Sequence[int], cache: Any) -> np.ndarray:
    """[T] -> [T,V] float64 NumPy: T new tokens of one sequence at positions len(cache) ..
    len(cache)+T-1, on a ``GPT2Model`` or on a ``TorchGPT2Model`` with a cache of batch size 1.

    A ``TorchGPT2Model`` takes a batch [1,T] and returns a tensor [1,T,V] on its device; speculative
    decoding compares probabilities in float64 on the host, so its row 0 comes back as NumPy.
    """
    if not is_torch_model(model):
        return model.forward(np.asarray(ids, dtype=np.int64), cache).astype(np.float64)
    return model.forward([list(ids)], cache)[0].double().cpu().numpy()


def prefill_in_chunks(
    model: Any,
    prompt_ids: Any,
    cache: Any,
    chunk_size: int,
) -> np.ndarray:
    """[T] -> [C,V] float64: the prompt chunk_size tokens at a time, the
    logits of the last chunk (C tokens, C <= chunk_size).

    Each chunk runs at positions len(cache) .. len(cache)+C-1 against
    every key already cached: its C queries are the last C of S keys,
    which is the bottom-right causal mask. The cache ends as a whole
    prefill leaves it. Any cache of ``model`` for one sequence: NumPy
    (preallocated, concat, window, int8, paged) or torch of batch size 1.

    The book shows this in "Continuous batching".
    """
    prompt, chunk_size = _check_chunked(model, prompt_ids, cache, chunk_size)
    held = len(cache)
    try:
        for start in range(0, len(prompt), chunk_size):
            chunk = [int(t) for t in prompt[start : start + chunk_size]]
            logits_CV = forward_one(model, chunk, cache)
    except BaseException:  # a paged pool out of blocks: drop what was run
        cache.truncate(held)
        raise
    return logits_CV


def _check_chunked(model: Any, prompt_ids: Any, cache: Any, chunk_size: Any) -> tuple[np.ndarray, int]:
    """``prefill_in_chunks``'s checks, all before any chunk is written."""
    cfg = check_model(model, "model")
    check_one_sequence(model, cache)
    prompt = check_token_ids(prompt_ids, cfg.vocab_size, "prompt_ids")
    chunk_size = check_int("chunk_size", chunk_size, 1)
    if len(cache) + len(prompt) > cache.capacity:
        raise ValueError(
            f"prompt_ids: {len(prompt)} tokens after {len(cache)} cached ones "
            f"exceed the capacity {cache.capacity}"
        )
    return prompt, chunk_size


def check_one_sequence(model: Any, cache: Any, name: str = "cache") -> None:
    """A TypeError/ValueError naming ``name`` unless ``cache`` is a cache of ``model`` for one
    sequence: any NumPy cache (a torch model runs it as a batch of one), or a torch cache of batch
    size 1."""
    checked = model.check_cache(cache)  # a torch model returns the cache it will run
    if is_torch_model(model) and checked.batch_size != 1:
        raise ValueError(f"{name}: expected a cache of batch size 1, got {checked.batch_size}")


def check_empty_cache(model: Any, cache: Any, name: str = "cache") -> None:
    """A TypeError/ValueError naming ``name`` unless ``cache`` is an empty cache of ``model`` for one
    sequence (``check_one_sequence``)."""
    check_one_sequence(model, cache, name)
    if len(cache) != 0:
        raise ValueError(f"{name}: expected an empty cache, got one holding {len(cache)}")


# ---------------------------------------------------------------- batch slots (continuous batching)


class LoopedSlots:
    """Batch slots of one cache each, a cache of one sequence: a NumPy model's (which runs one
    sequence per cache), or any cache of one sequence of either backend that ``new_cache(capacity)``
    makes (a window, int8, paged or prefix-cached sequence: ``for_model(model, ...)``). A
    "batched" decode step is a loop over the slots: the same tokens, no speed-up."""

    def __init__(self, model: Any, n_slots: int, capacity: int, new_cache: Any = None) -> None:
        self.model = model
        make = (lambda m: model.new_cache(capacity=m)) if new_cache is None else new_cache
        self.caches: list[KVCacheBase] = [make(capacity) for _ in range(n_slots)]
        first_slot: dict[int, int] = {}
        for slot, cache in enumerate(self.caches):  # one slot's tokens must never land in another's
            if first_slot.setdefault(id(cache), slot) != slot:
                raise ValueError(
                    f"new_cache: expected a new cache for each of the {n_slots} slots, got the same "
                    f"cache object for slots {first_slot[id(cache)]} and {slot} (make one per call)"
                )
        for cache in self.caches:  # before any request is run: a cache of this model, one sequence
            check_one_sequence(model, cache, "new_cache")
            if cache.capacity < capacity:
                raise ValueError(
                    f"new_cache: expected caches of at least {capacity} positions, got {cache.capacity}"
                )

    def prefill(self, slot: int, ids: list[int], start: int = 0) -> int:
        """Prompt tokens [C] into a slot at positions start .. start+C-1 (start 0: the slot is
        emptied first) -> the greedy token after them (the first token, after the last chunk)."""
        cache = self.caches[slot]
        if start == 0:
            cache.truncate(0)
        else:
            check_length(len(cache), start)
        return greedy(forward_one(self.model, ids, cache)[-1])

    def decode(self, slots: list[int], tokens: list[int]) -> list[int]:
        """One new token for each listed slot -> the next (greedy) token of each."""
        return [
            greedy(forward_one(self.model, [tok], self.caches[slot])[-1])
            for slot, tok in zip(slots, tokens, strict=True)
        ]


class BatchedSlots:
    """Batch slots for a ``TorchGPT2Model``: one cache [L, B, Hkv, M, K] with a length per row, and one
    batched decode step for the listed rows (the other rows are marked inactive)."""

    def __init__(self, model: Any, n_slots: int, capacity: int) -> None:
        self.model = model
        self.n_slots = n_slots
        self.cache = model.new_cache(n_slots, capacity=capacity)

    def prefill(self, slot: int, ids: list[int], start: int = 0) -> int:
        """Prompt tokens [C] into a row at positions start .. start+C-1 (start 0: the row is
        emptied first) -> the greedy token after them (the first token, after the last chunk)."""
        if start == 0:
            self.cache.reset_row(slot)
            return greedy(self.model.prefill_row(ids, self.cache, slot)[-1])
        check_length(self.cache.host_lengths[slot], start)
        return greedy(forward_row(self.model, ids, self.cache, slot)[-1])

    def decode(self, slots: list[int], tokens: list[int]) -> list[int]:
        """One new token for each listed row, all in one step -> the next (greedy) token of each."""
        ids_B = np.zeros(self.n_slots, dtype=np.int64)
        ids_B[slots] = tokens
        active_B = np.zeros(self.n_slots, dtype=bool)
        active_B[slots] = True
        logits_BV = self.model.decode_step(ids_B, self.cache, active=active_B)
        return [greedy(logits_BV[s]) for s in slots]


def check_length(held: int, start: int) -> None:
    """A ValueError unless a slot holding ``held`` positions continues at ``start``: a chunk goes
    right after the one before it."""
    if held != start:
        raise ValueError(
            f"start: expected the slot's length {held} (a chunk continues the last), got {start}"
        )


def forward_row(model: Any, ids_T: Any, cache: Any, row: int) -> Any:
    """[T] -> [T,V] tensor: ``model.forward_row`` (T new tokens continuing one row of a torch
    model's batched cache), after checking that ``model`` is a torch model."""
    if not is_torch_model(model):
        raise TypeError(f"model: expected a TorchGPT2Model, got {type(model).__name__}")
    return model.forward_row(ids_T, cache, row)


def batch_slots(model: Any, n_slots: int, capacity: int, new_cache: Any = None) -> LoopedSlots | BatchedSlots:
    """``n_slots`` request slots of up to ``capacity`` positions each, as ``run_serving`` uses them:
    ``prefill(slot, ids, start=0) -> token`` (a whole prompt, or a chunk at ``start``) and
    ``decode(slots, tokens) -> tokens``, greedy. A NumPy model gets ``LoopedSlots`` (one cache per
    slot), a torch model ``BatchedSlots`` (one batched cache); with ``new_cache`` (capacity -> a
    cache of one sequence of the model, e.g. ``lambda m: SlidingWindowKVCache.for_model(model, 8,
    capacity=m)``) every model gets ``LoopedSlots`` of those caches."""
    if new_cache is not None:
        if not callable(new_cache):
            raise TypeError(f"new_cache: expected a function of the capacity, got {type(new_cache).__name__}")
        return LoopedSlots(model, n_slots, capacity, new_cache)
    if is_torch_model(model):
        return BatchedSlots(model, n_slots, capacity)
    return LoopedSlots(model, n_slots, capacity)
