"""KV caches of one sequence: the two layouts every chapter uses, and the base of every policy.

``PreallocatedKVCache`` is what real engines do: one buffer per layer of shape [H, M, K] for keys
and one for values, written in place at the current position, with an explicit length counter.
``ConcatKVCache`` is the pseudo-code version: each step concatenates the new rows onto the old
arrays, so every step copies the whole history.

Both speak the protocol of ``kvtutor.caches.protocol``: ``plan = cache.plan(T)``, then per layer
``k_HSK, v_HSK, mask_TS = cache.update(layer, k_new_HTK, v_new_HTK, plan)``, then
``cache.advance(plan)``. They hold one sequence in the model's own arrays (``OneSequenceCache``):
NumPy arrays for a NumPy model, tensors on the device for a torch model (a batch of one, arrays
[1, H, T, K]); ``for_model(model)`` picks the backend. The window, int8 and paged caches are built
the same way.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from array_api_compat import array_namespace

from ..validate import check_int
from .backend import ArraysOf, is_torch_dtype
from .protocol import KVCacheBase, Plan, check_cache_args, check_mask

__all__ = [
    "OneSequenceCache",
    "PreallocatedKVCache",
    "ConcatKVCache",
    "CACHE_KINDS",
    "make_cache",
    "check_cache",
    "model_cache_shape",
    "start_position",
]


class OneSequenceCache(ArraysOf, KVCacheBase):
    """A cache of one sequence in either backend (``backend.ArraysOf``): its
    ``update`` takes and returns [H, T, K] arrays for a NumPy model and [1, H, T, K] tensors for a
    torch model, its masks [T, S] or [1, 1, T, S]. Subclasses write the mechanism on [H, T, K]:
    ``check_update`` strips the batch axis, ``answer`` puts it back."""

    batch_size = 1

    def _init_sequence(
        self, n_layers: Any, n_kv_heads: Any, capacity: Any, d_head: Any, dtype: Any, device: Any
    ) -> None:
        self.n_layers, self.n_kv_heads, self._capacity, self.d_head = check_cache_args(
            n_layers, n_kv_heads, capacity, d_head
        )
        self._init_arrays(dtype, device)
        self.batched = self.backend == "torch"  # a torch model's arrays carry the batch axis
        self._init_lengths()

    @property
    def length(self) -> int:
        """The committed length of the sequence."""
        return int(self._host[0])

    def check_update(self, layer: Any, k_new: Any, v_new: Any, plan: Any) -> tuple[int, Any, Any]:
        """``KVCacheBase.check_update``, then the new rows as [H, T, K] (a torch batch of one
        loses its batch axis)."""
        layer, k_new, v_new = super().check_update(layer, k_new, v_new, plan)
        return (layer, k_new[0], v_new[0]) if self.batched else (layer, k_new, v_new)

    def answer(self, k_HSK: Any, v_HSK: Any, mask_TS: np.ndarray | None, plan: Plan) -> Any:
        """What ``update`` returns (``KVCacheBase.answer``), with the batch axis of a torch model:
        keys and values [1, H, S, K], the mask [1, 1, T, S] on the device (None: causal)."""
        if not self.batched:
            return super().answer(k_HSK, v_HSK, mask_TS, plan)
        check_mask(mask_TS, plan.n_new, k_HSK.shape[-2], self)
        mask = None if mask_TS is None else self.xp.asarray(mask_TS, device=self.device)[None, None]
        return k_HSK[None], v_HSK[None], mask

    def _read(self, which: str, layer: int, row: int | None) -> Any:
        arr_HSK = self.read(which, layer)
        if self.backend == "numpy":
            arr_HSK = arr_HSK.view()
            arr_HSK.flags.writeable = False  # what is committed changes only through the protocol
        return arr_HSK[None] if self.batched and row is None else arr_HSK

    def read(self, which: str, layer: int) -> Any:
        """[H, len, K]: the committed keys ("k") or values ("v") of one layer."""
        raise NotImplementedError


class PreallocatedKVCache(OneSequenceCache):
    """Per layer, keys and values in buffers of shape [H, M, K], filled up to ``len(self)``."""

    kind = "preallocated"

    def __init__(
        self, n_layers: int, n_kv_heads: int, capacity: int, d_head: int, dtype: Any = np.float32,
        device: Any = None,
    ) -> None:  # fmt: skip
        self._init_sequence(n_layers, n_kv_heads, capacity, d_head, dtype, device)
        shape = (self.n_layers, self.n_kv_heads, self._capacity, self.d_head)
        self.k_LHMK, self.v_LHMK = self.zeros(shape), self.zeros(shape)

    @classmethod
    def for_model(cls, model: Any, capacity: int | None = None) -> Any:
        """An empty cache for one sequence of ``model`` (any kvtutor model, in its backend)."""
        n_layers, n_kv_heads, capacity, d_head, dtype, device = model_cache_shape(model, capacity)
        return cls(n_layers, n_kv_heads, capacity, d_head, dtype, device)

    def read(self, which: str, layer: int) -> Any:
        buf = self.k_LHMK if which == "k" else self.v_LHMK
        return buf[layer, :, : self.length]

    def update(self, layer, k_HTK, v_HTK, plan):
        """[H,T,K] x2 -> [H,S,K] x2 and the mask: write at len .. len+T-1 in
        place, return every key and value up to there (mask None: causal).

        The book shows this in "Decode, step by step".
        """
        start, end = plan.start, plan.start + plan.n_new
        self.k_LHMK[layer, :, start:end] = k_HTK
        self.v_LHMK[layer, :, start:end] = v_HTK
        k_HSK = self.k_LHMK[layer, :, :end]  # a view of the buffer, no copy
        v_HSK = self.v_LHMK[layer, :, :end]
        return k_HSK, v_HSK, plan.mask

    @property
    def nbytes(self) -> int:
        """Bytes held, the whole capacity: preallocation reserves it up front."""
        return int(self.k_LHMK.nbytes + self.v_LHMK.nbytes)


class ConcatKVCache(OneSequenceCache):
    """Per layer, keys and values as arrays [H, len, K] that grow by concatenation."""

    kind = "concat"

    def __init__(
        self, n_layers: int, n_kv_heads: int, capacity: int, d_head: int, dtype: Any = np.float32,
        device: Any = None,
    ) -> None:  # fmt: skip
        self._init_sequence(n_layers, n_kv_heads, capacity, d_head, dtype, device)
        empty = self.zeros((self.n_kv_heads, 0, self.d_head))
        self.keys_held = [empty] * self.n_layers
        self.values_held = [empty] * self.n_layers

    @classmethod
    def for_model(cls, model: Any, capacity: int | None = None) -> Any:
        """An empty cache for one sequence of ``model`` (any kvtutor model, in its backend)."""
        n_layers, n_kv_heads, capacity, d_head, dtype, device = model_cache_shape(model, capacity)
        return cls(n_layers, n_kv_heads, capacity, d_head, dtype, device)

    def read(self, which: str, layer: int) -> Any:
        return (self.keys_held if which == "k" else self.values_held)[layer][:, : self.length]

    def update(self, layer, k_HTK, v_HTK, plan):
        """[H,T,K] x2 -> [H,S,K] x2 and the mask: a new array = old ++ new
        (a full copy of the history).

        The book shows this in "Decode, step by step".
        """
        xp = array_namespace(k_HTK)  # NumPy, or torch for a torch model
        k_old_HSK = self.keys_held[layer][:, : plan.start]
        v_old_HSK = self.values_held[layer][:, : plan.start]
        k_HSK = xp.concat([k_old_HSK, k_HTK], axis=1)  # a new array
        v_HSK = xp.concat([v_old_HSK, v_HTK], axis=1)
        self.keys_held[layer], self.values_held[layer] = k_HSK, v_HSK
        return k_HSK, v_HSK, plan.mask

    def _truncate(self, length: int, row: int | None) -> None:
        self.keys_held = [k[:, :length] for k in self.keys_held]  # what was cut off is released
        self.values_held = [v[:, :length] for v in self.values_held]

    @property
    def nbytes(self) -> int:
        """Bytes held: only what has been written so far."""
        return sum(int(k[:, : self.length].nbytes) for k in self.keys_held) * 2


#: The kinds of cache ``new_cache(kind=...)`` makes, the same names for the NumPy and torch models.
CACHE_KINDS = ("preallocated", "concat")


def make_cache(
    kinds: dict[str, type],
    kind: str,
    batch_size: Any,
    capacity: Any,
    n_layers: int,
    n_kv_heads: int,
    d_head: int,
    max_seq_len: int,
    dtype: Any,
) -> Any:
    """``kinds[kind]`` for one sequence of up to ``capacity`` positions (``None``: ``max_seq_len``),
    after checking every argument: the body of ``new_cache`` for the NumPy models (and of the
    book's counting caches, which pass their own ``kinds``). A NumPy model runs one sequence at a
    time, so ``batch_size`` must be 1: a batch is one cache per sequence, or a torch model."""
    if isinstance(batch_size, str):
        raise TypeError(
            f"batch_size: expected an int, got str {batch_size!r} (the kind is a keyword argument: "
            f"new_cache(kind={batch_size!r}))"
        )
    check_int("batch_size", batch_size, 1)
    if batch_size != 1:
        raise ValueError(
            f"batch_size: expected 1 (a NumPy model runs one sequence; make one cache per sequence "
            f"or use a torch model, TorchGPT2Model or TorchLlamaModel, for a batch), got {batch_size}"
        )
    capacity = max_seq_len if capacity is None else check_int("capacity", capacity, 1, max_seq_len)
    if kind not in kinds:
        raise ValueError(f"kind: expected one of {sorted(kinds)}, got {kind!r}")
    return kinds[kind](n_layers, n_kv_heads, capacity, d_head, dtype)


def check_cache(cache: Any, model: Any, backend: str) -> KVCacheBase:
    """``cache`` if it is a cache (``KVCacheBase``) of ``model``'s layers, KV heads and head width,
    in ``backend`` ("numpy" or "torch") and, for torch, the model's dtype and device, numbering at
    most ``max_seq_len`` positions, and holding no keys another model wrote (``check_writer``: the
    cache is then bound to ``model``); else a TypeError or ValueError naming ``cache``."""
    name = type(cache).__name__
    if not isinstance(cache, KVCacheBase):
        raise TypeError(
            f"cache: expected a KV cache (model.new_cache(), or a cache of kvtutor.caches made "
            f"with for_model(model)), got {name}"
        )
    cfg = model.config
    if cache.backend != backend:
        holds = "NumPy arrays" if cache.backend == "numpy" else "torch tensors"
        raise TypeError(
            f"cache: this {name} holds {holds}, and a {type(model).__name__} runs on "
            f"{'torch tensors' if backend == 'torch' else 'NumPy arrays'}: make it with "
            f"{name}.for_model(model, ...) or model.new_cache()"
        )
    got = (cache.n_layers, cache.n_kv_heads, cache.d_head)
    want = (cfg.n_layers, cfg.n_kv_heads, cfg.d_head)
    if got != want:
        raise ValueError(f"cache: expected (layers, kv heads, head dim) = {want} for this model, got {got}")
    if backend == "torch" and (cache.dtype, cache.device) != (model.dtype, model.device):
        raise ValueError(
            f"cache: this {name} holds {cache.dtype} on {cache.device}, the model computes in "
            f"{model.dtype} on {model.device}: make it with {name}.for_model(model, ...)"
        )
    if cache.capacity > cfg.max_seq_len:  # positions past max_seq_len have no embedding
        raise ValueError(
            f"cache: expected a capacity <= this model's max_seq_len {cfg.max_seq_len}, "
            f"got {cache.capacity} (make caches with model.new_cache() or for_model(model))"
        )
    cache.check_writer(model)  # keys another model wrote are refused
    return cache


def model_cache_shape(model: Any, capacity: Any = None) -> tuple[int, int, int, int, Any, Any]:
    """(layers, KV heads, capacity, head width, dtype, device) of a cache for one sequence of
    ``model``, any kvtutor model: a NumPy model's weights' dtype (device None), or a torch model's
    dtype and device. ``capacity`` defaults to ``max_seq_len``. Anything else is a TypeError
    naming ``model``."""
    cfg, weights = getattr(model, "config", None), getattr(model, "weights", None)
    torch_dtype = getattr(model, "dtype", None)
    if cfg is None or (weights is None and not is_torch_dtype(torch_dtype)):
        raise TypeError(
            f"model: expected a kvtutor model (GPT2Model, LlamaModel, Qwen3Model or a torch twin), "
            f"got {type(model).__name__}"
        )
    if weights is not None:
        dtype, device = weights.wte_VD.dtype, None
    else:
        dtype, device = torch_dtype, model.device
    capacity = cfg.max_seq_len if capacity is None else check_int("capacity", capacity, 1, cfg.max_seq_len)
    return cfg.n_layers, cfg.n_kv_heads, capacity, cfg.d_head, dtype, device


def check_numpy_model(model: Any) -> Any:
    """``model.config`` if ``model`` is a NumPy model (``GPT2Model``, ``LlamaModel``, ``Qwen3Model``),
    for code that reads its logits as NumPy rows [T, V]; else a TypeError naming ``model``."""
    dtype = model_cache_shape(model)[4]
    if is_torch_dtype(dtype):
        raise TypeError(
            f"model: expected a NumPy model (GPT2Model, LlamaModel or Qwen3Model), got {type(model).__name__}"
        )
    return model.config


def start_position(cache: Any, n_new: int, max_seq_len: int, name: str = "ids_T") -> int:
    """Where ``n_new`` new tokens start: ``len(cache)`` (0 without a cache), after checking that they
    fit in the cache's capacity (``max_seq_len`` without one), or a ValueError naming ``name``."""
    start = 0 if cache is None else len(cache)
    room = max_seq_len if cache is None else cache.capacity
    if start + n_new > room:
        raise ValueError(f"{name}: {n_new} tokens after {start} cached ones exceed the capacity {room}")
    return start
