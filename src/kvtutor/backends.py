"""NumpyModel and TorchModel side by side: the few places where serving code must tell them apart.

Both models make caches the same way (``new_cache(batch_size=1, capacity=None,
kind="preallocated")``), check them the same way (``check_cache(cache)``) and roll them back the
same way (``cache.truncate(length)``). What remains different is the batch: a ``NumpyModel`` runs
one sequence per cache, token ids [T] -> NumPy logits [T,V]; a ``TorchModel`` runs a batch in one
cache with a length per row, [B,T] -> tensor logits [B,T,V] on its device. The code for that
difference lives here, once, for ``kvtutor.serving`` (the batch slots of continuous batching) and
``kvtutor.speculative`` (one sequence at a time). None of it imports torch.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from .cache import KVCache
from .config import ModelConfig
from .numpy_model import NumpyModel

__all__ = [
    "is_torch_model",
    "check_model",
    "forward_one",
    "check_empty_cache",
    "LoopedSlots",
    "BatchedSlots",
    "batch_slots",
]


def is_torch_model(model: Any) -> bool:
    """Is ``model`` a ``TorchModel``? Never imports torch: unless ``kvtutor.torch_model`` has been
    imported, no TorchModel can exist."""
    cls = getattr(sys.modules.get("kvtutor.torch_model"), "TorchModel", None)
    return cls is not None and isinstance(model, cls)


def check_model(model: Any, name: str) -> ModelConfig:
    """``model.config`` if ``model`` is a NumpyModel or a TorchModel, else a TypeError naming ``name``."""
    if not isinstance(model, NumpyModel) and not is_torch_model(model):
        raise TypeError(f"{name}: expected a NumpyModel or a TorchModel, got {type(model).__name__}")
    return model.config


# ---------------------------------------------------------------- one sequence (speculative decoding)


def forward_one(model: Any, ids: Sequence[int], cache: Any) -> np.ndarray:
    """[T] -> [T,V] float64 NumPy: T new tokens of one sequence at positions len(cache) ..
    len(cache)+T-1, on a ``NumpyModel`` or on a ``TorchModel`` with a cache of batch size 1.

    A ``TorchModel`` takes a batch [1,T] and returns a tensor [1,T,V] on its device; speculative
    decoding compares probabilities in float64 on the host, so its row 0 comes back as NumPy.
    """
    if not is_torch_model(model):
        return model.forward(np.asarray(ids, dtype=np.int64), cache).astype(np.float64)
    return model.forward([list(ids)], cache)[0].double().cpu().numpy()


def check_empty_cache(model: Any, cache: Any, name: str = "cache") -> None:
    """A TypeError/ValueError naming ``name`` unless ``cache`` is an empty cache of ``model`` for one
    sequence (a NumPy cache always holds one; a torch cache must have batch size 1)."""
    model.check_cache(cache)
    if is_torch_model(model) and cache.batch_size != 1:
        raise ValueError(f"{name}: expected a cache of batch size 1, got {cache.batch_size}")
    if len(cache) != 0:
        raise ValueError(f"{name}: expected an empty cache, got one holding {len(cache)}")


# ---------------------------------------------------------------- batch slots (continuous batching)


class LoopedSlots:
    """Batch slots for a ``NumpyModel``, which runs one sequence per cache: one cache per slot, and a
    "batched" decode step is a loop over the slots (the same tokens, no speed-up)."""

    def __init__(self, model: NumpyModel, n_slots: int, capacity: int) -> None:
        self.model = model
        self.caches: list[KVCache] = [model.new_cache(capacity=capacity) for _ in range(n_slots)]

    def prefill(self, slot: int, prompt: list[int]) -> int:
        """Prompt [T] into a slot, emptied first -> its first (greedy) token."""
        self.caches[slot].truncate(0)
        return int(np.argmax(self.model.prefill(prompt, self.caches[slot])[-1]))

    def decode(self, slots: list[int], tokens: list[int]) -> list[int]:
        """One new token for each listed slot -> the next (greedy) token of each."""
        return [
            int(np.argmax(self.model.decode_step(tok, self.caches[slot])))
            for slot, tok in zip(slots, tokens, strict=True)
        ]


class BatchedSlots:
    """Batch slots for a ``TorchModel``: one cache [L, B, Hkv, M, K] with a length per row, and one
    batched decode step for the listed rows (the other rows are marked inactive)."""

    def __init__(self, model: Any, n_slots: int, capacity: int) -> None:
        self.model = model
        self.n_slots = n_slots
        self.cache = model.new_cache(n_slots, capacity=capacity)

    def prefill(self, slot: int, prompt: list[int]) -> int:
        """Prompt [T] into a row, emptied first -> its first (greedy) token."""
        self.cache.reset_row(slot)
        return int(self.model.prefill_row(prompt, self.cache, slot)[-1].argmax())

    def decode(self, slots: list[int], tokens: list[int]) -> list[int]:
        """One new token for each listed row, all in one step -> the next (greedy) token of each."""
        ids_B = np.zeros(self.n_slots, dtype=np.int64)
        ids_B[slots] = tokens
        active_B = np.zeros(self.n_slots, dtype=bool)
        active_B[slots] = True
        next_B = self.model.decode_step(ids_B, self.cache, active=active_B).argmax(dim=-1).cpu()
        return [int(next_B[s]) for s in slots]


def batch_slots(model: Any, n_slots: int, capacity: int) -> LoopedSlots | BatchedSlots:
    """``n_slots`` request slots of up to ``capacity`` positions each, as ``run_serving`` uses them:
    ``prefill(slot, prompt) -> token`` and ``decode(slots, tokens) -> tokens``, greedy. A
    ``NumpyModel`` gets ``LoopedSlots`` (one cache per slot), a ``TorchModel`` ``BatchedSlots``."""
    if is_torch_model(model):
        return BatchedSlots(model, n_slots, capacity)
    return LoopedSlots(model, n_slots, capacity)
