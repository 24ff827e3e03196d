"""KV caches for the NumPy model: one interface, two layouts.

``PreallocatedKVCache`` is what real engines do: one buffer per layer of shape [H, M, K] for keys
and one for values, written in place at the current position, with an explicit length counter.
``ConcatKVCache`` is the pseudo-code version: each step concatenates the new row onto the old
arrays, so every step copies the whole history.

Both speak the caches' one protocol (``kvtutor.caches``): ``update(layer, k_new_HTK, v_new_HTK)``
per layer, returning the [H, S, K] keys and values to attend to, then ``advance(T)``.

A cache may also say which of the keys it returns each new query may see, by a method
``mask(n_new) -> [T, S] bool array or None`` (optional: the protocol below does not require it).
For the ``n_new`` = T queries at positions ``len(cache) .. len(cache) + T - 1`` and the S keys that
``update`` returns for them, True where query t may see key s; None means the plain causal mask
(the T queries are the last T of the S keys, and each sees every key up to its own position).
A sliding-window cache (``kvtutor.caches.window``) returns only the keys its window keeps and masks
within them. ``gpt2.attention_core`` asks through ``cache_mask``, which checks the answer.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..validate import check_float_dtype, check_int

__all__ = [
    "KVCache",
    "CacheBase",
    "PreallocatedKVCache",
    "ConcatKVCache",
    "CACHE_KINDS",
    "make_cache",
    "check_cache",
    "model_cache_shape",
    "cache_mask",
    "start_position",
]


@runtime_checkable
class KVCache(Protocol):
    n_layers: int
    n_kv_heads: int
    d_head: int

    def __len__(self) -> int: ...
    @property
    def capacity(self) -> int: ...
    def keys(self, layer: int) -> np.ndarray: ...
    def values(self, layer: int) -> np.ndarray: ...
    def update(
        self, layer: int, k_new_HTK: np.ndarray, v_new_HTK: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]: ...
    def advance(self, n_tokens: int) -> None: ...
    def truncate(self, length: int) -> None: ...
    @property
    def nbytes(self) -> int: ...


def check_cache_args(n_layers: int, n_kv_heads: int, capacity: int, d_head: int, dtype: Any) -> np.dtype:
    """Sizes of a cache: positive ints; ``dtype`` a floating NumPy dtype (an integer cache would
    round every key and value). Returns the dtype."""
    for name, value in (
        ("n_layers", n_layers), ("n_kv_heads", n_kv_heads), ("capacity", capacity), ("d_head", d_head)
    ):  # fmt: skip
        check_int(name, value, 1)
    return check_float_dtype(dtype)


class CacheBase:
    """Argument checks shared by both layouts."""

    n_layers: int
    n_kv_heads: int
    d_head: int
    _length: int

    def __len__(self) -> int:
        return self._length

    @property
    def capacity(self) -> int:
        raise NotImplementedError

    def _check_layer(self, layer: int) -> None:
        check_int("layer", layer)
        if not 0 <= layer < self.n_layers:
            raise ValueError(f"layer: expected 0 <= layer < {self.n_layers}, got {layer}")

    def _check_new(self, layer: int, k_new_HTK: np.ndarray, v_new_HTK: np.ndarray) -> int:
        self._check_layer(layer)
        for name, arr in (("k_new_HTK", k_new_HTK), ("v_new_HTK", v_new_HTK)):
            if not isinstance(arr, np.ndarray):
                raise TypeError(f"{name}: expected a numpy array, got {type(arr).__name__}")
            if arr.ndim != 3 or arr.shape[0] != self.n_kv_heads or arr.shape[2] != self.d_head:
                raise ValueError(
                    f"{name}: expected shape [H={self.n_kv_heads}, T, K={self.d_head}], got {list(arr.shape)}"
                )
        if k_new_HTK.shape != v_new_HTK.shape:
            raise ValueError(
                f"v_new_HTK: expected the shape of k_new_HTK {list(k_new_HTK.shape)}, "
                f"got {list(v_new_HTK.shape)}"
            )
        n_new = k_new_HTK.shape[1]
        if self._length + n_new > self.capacity:
            raise ValueError(
                f"k_new_HTK: {n_new} new tokens do not fit: cache holds {self._length} "
                f"of capacity {self.capacity}"
            )
        return n_new

    def advance(self, n_tokens: int) -> None:
        """Commit the rows that ``update`` wrote for every layer: the length grows by n_tokens."""
        pending = min(self._pending)
        n_tokens = check_int("n_tokens", n_tokens)
        if n_tokens != pending or max(self._pending) != pending:
            raise ValueError(
                f"n_tokens: expected the {pending} rows written to every layer by update(), got {n_tokens}"
            )
        self._length += n_tokens
        self._pending = [0] * self.n_layers


class PreallocatedKVCache(CacheBase):
    """Per layer, keys and values in buffers of shape [H, M, K], filled up to ``len(self)``."""

    def __init__(self, n_layers: int, n_kv_heads: int, capacity: int, d_head: int, dtype=np.float32) -> None:
        dtype = check_cache_args(n_layers, n_kv_heads, capacity, d_head, dtype)
        n_layers, n_kv_heads, capacity, d_head = int(n_layers), int(n_kv_heads), int(capacity), int(d_head)
        self.n_layers, self.n_kv_heads, self.d_head = n_layers, n_kv_heads, d_head
        self.k_LHMK = np.zeros((n_layers, n_kv_heads, capacity, d_head), dtype=dtype)
        self.v_LHMK = np.zeros((n_layers, n_kv_heads, capacity, d_head), dtype=dtype)
        self._length = 0
        self._pending = [0] * n_layers

    @property
    def capacity(self) -> int:
        return self.k_LHMK.shape[2]

    def keys(self, layer: int) -> np.ndarray:
        """[H, len, K], a read-only view of the filled part of this layer's key buffer."""
        self._check_layer(layer)
        view = self.k_LHMK[layer, :, : self._length]
        view.flags.writeable = False
        return view

    def values(self, layer: int) -> np.ndarray:
        """[H, len, K], a read-only view of the filled part of this layer's value buffer."""
        self._check_layer(layer)
        view = self.v_LHMK[layer, :, : self._length]
        view.flags.writeable = False
        return view

    def update(self, layer, k_new_HTK, v_new_HTK):
        """[H,T,K], [H,T,K] -> [H,S,K], [H,S,K]: write at len .. len+T-1, in
        place.

        The book shows this in "Decode, step by step".
        """
        n_new = self._check_new(layer, k_new_HTK, v_new_HTK)
        self._pending[layer] = n_new
        end = self._length + n_new
        self.k_LHMK[layer, :, self._length : end] = k_new_HTK
        self.v_LHMK[layer, :, self._length : end] = v_new_HTK
        return self.k_LHMK[layer, :, :end], self.v_LHMK[layer, :, :end]

    def truncate(self, length: int) -> None:
        """Forget every position from ``length`` on (rolls back rejected draft tokens)."""
        self._length = check_int("length", length, 0, self._length)
        self._pending = [0] * self.n_layers

    @property
    def nbytes(self) -> int:
        """Bytes held, the whole capacity: preallocation reserves it up front."""
        return self.k_LHMK.nbytes + self.v_LHMK.nbytes


class ConcatKVCache(CacheBase):
    """Per layer, keys and values as arrays [H, len, K] that grow by concatenation."""

    def __init__(self, n_layers: int, n_kv_heads: int, capacity: int, d_head: int, dtype=np.float32) -> None:
        dtype = check_cache_args(n_layers, n_kv_heads, capacity, d_head, dtype)
        n_layers, n_kv_heads, capacity, d_head = int(n_layers), int(n_kv_heads), int(capacity), int(d_head)
        self.n_layers, self.n_kv_heads, self.d_head = n_layers, n_kv_heads, d_head
        self._capacity = capacity
        empty = np.zeros((n_kv_heads, 0, d_head), dtype=dtype)
        self._k = [empty] * n_layers
        self._v = [empty] * n_layers
        self._length = 0
        self._pending = [0] * n_layers

    @property
    def capacity(self) -> int:
        return self._capacity

    def keys(self, layer: int) -> np.ndarray:
        self._check_layer(layer)
        return self._k[layer][:, : self._length]

    def values(self, layer: int) -> np.ndarray:
        self._check_layer(layer)
        return self._v[layer][:, : self._length]

    def update(self, layer, k_new_HTK, v_new_HTK):
        """[H,T,K], [H,T,K] -> [H,S,K], [H,S,K]: a new array = old ++ new
        (a full copy).

        The book shows this in "Decode, step by step".
        """
        self._pending[layer] = self._check_new(layer, k_new_HTK, v_new_HTK)
        k = self._k[layer][:, : self._length]
        v = self._v[layer][:, : self._length]
        self._k[layer] = np.concatenate([k, k_new_HTK.astype(k.dtype)], axis=1)
        self._v[layer] = np.concatenate([v, v_new_HTK.astype(v.dtype)], axis=1)
        return self._k[layer], self._v[layer]

    def truncate(self, length: int) -> None:
        self._length = check_int("length", length, 0, self._length)
        self._pending = [0] * self.n_layers
        self._k = [k[:, : self._length] for k in self._k]
        self._v = [v[:, : self._length] for v in self._v]

    @property
    def nbytes(self) -> int:
        """Bytes held: only what has been written so far."""
        return sum(k[:, : self._length].nbytes for k in self._k) * 2


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
    time, so ``batch_size`` must be 1: a batch is one cache per sequence, or a ``TorchGPT2Model``."""
    if isinstance(batch_size, str):
        raise TypeError(
            f"batch_size: expected an int, got str {batch_size!r} (the kind is a keyword argument: "
            f"new_cache(kind={batch_size!r}))"
        )
    check_int("batch_size", batch_size, 1)
    if batch_size != 1:
        raise ValueError(
            f"batch_size: expected 1 (a NumPy model runs one sequence; make one cache per sequence "
            f"or use a TorchGPT2Model for a batch), got {batch_size}"
        )
    capacity = max_seq_len if capacity is None else check_int("capacity", capacity, 1, max_seq_len)
    if kind not in kinds:
        raise ValueError(f"kind: expected one of {sorted(kinds)}, got {kind!r}")
    return kinds[kind](n_layers, n_kv_heads, capacity, d_head, dtype)


def check_cache(cache: Any, n_layers: int, n_kv_heads: int, d_head: int, max_seq_len: int) -> None:
    """A TypeError unless ``cache`` is a NumPy KV cache; a ValueError unless it has this model's
    layers, KV heads and head width and fits in ``max_seq_len`` positions."""
    if not isinstance(cache, KVCache):
        raise TypeError(f"cache: expected a KV cache from new_cache(), got {type(cache).__name__}")
    if hasattr(cache, "plan"):  # a torch cache plans its passes
        raise TypeError(f"cache: expected a NumPy model's KV cache, got a torch one, {type(cache).__name__}")
    got = (cache.n_layers, cache.n_kv_heads, cache.d_head)
    want = (n_layers, n_kv_heads, d_head)
    if got != want:
        raise ValueError(f"cache: expected (layers, kv heads, head dim) = {want} for this model, got {got}")
    if cache.capacity > max_seq_len:  # positions past max_seq_len have no embedding
        raise ValueError(
            f"cache: expected a capacity <= this model's max_seq_len {max_seq_len}, "
            f"got {cache.capacity} (make caches with model.new_cache() or "
            "PagedKVPool.for_model(model, ...))"
        )


def model_cache_shape(model: Any, capacity: Any = None) -> tuple[int, int, int, int, np.dtype]:
    """(layers, KV heads, capacity, head width, float dtype) of a cache for one sequence of
    ``model``, any kvtutor model: a NumPy model's weights' dtype, or a torch model's dtype as
    NumPy holds it (float32 or float64; a torch model in bf16 or fp16 is a ValueError: these
    caches keep host arrays, and rounding every key to another dtype would change the answer).
    ``capacity`` defaults to ``max_seq_len``. Anything else is a TypeError naming ``model``."""
    cfg = getattr(model, "config", None)
    weights = getattr(model, "weights", None)
    torch_dtype = getattr(model, "dtype", None) if weights is None else None
    if cfg is None or (weights is None and torch_dtype is None):
        raise TypeError(
            f"model: expected a kvtutor model (GPT2Model, LlamaModel, TorchGPT2Model, TorchLlamaModel), "
            f"got {type(model).__name__}"
        )
    if weights is not None:
        dtype = weights.wte_VD.dtype
    else:
        name = str(torch_dtype).removeprefix("torch.")
        if name not in ("float32", "float64"):
            raise ValueError(
                f"model: expected a torch model in float32 or float64 for a NumPy cache, got {torch_dtype}"
            )
        dtype = np.dtype(name)
    capacity = cfg.max_seq_len if capacity is None else check_int("capacity", capacity, 1, cfg.max_seq_len)
    return cfg.n_layers, cfg.n_kv_heads, capacity, cfg.d_head, dtype


def cache_mask(cache: Any, n_new: int, n_keys: int) -> np.ndarray | None:
    """[T,S] bool or None: the mask ``cache`` chooses for ``n_new`` queries against the ``n_keys``
    keys its ``update`` returned (see the module docstring), or None where there is no cache, the
    cache has no ``mask`` method, or it answers None (the plain causal mask). A mask that is not a
    bool array of shape [n_new, n_keys] is a ValueError naming the cache's class."""
    mask = getattr(cache, "mask", None) if cache is not None else None
    if mask is None:
        return None
    mask_TS = mask(n_new)
    if mask_TS is None:
        return None
    is_array = isinstance(mask_TS, np.ndarray)
    if not is_array or mask_TS.dtype != np.bool_ or mask_TS.shape != (n_new, n_keys):
        got = f"{mask_TS.dtype} {list(mask_TS.shape)}" if is_array else type(mask_TS).__name__
        raise ValueError(
            f"cache.mask: expected a bool array of shape [{n_new}, {n_keys}] from "
            f"{type(cache).__name__}.mask({n_new}), got {got}"
        )
    return mask_TS


def start_position(cache: Any, n_new: int, max_seq_len: int, name: str = "ids_T") -> int:
    """Where ``n_new`` new tokens start: ``len(cache)`` (0 without a cache), after checking that they
    fit in the cache's capacity (``max_seq_len`` without one), or a ValueError naming ``name``."""
    start = 0 if cache is None else len(cache)
    room = max_seq_len if cache is None else cache.capacity
    if start + n_new > room:
        raise ValueError(f"{name}: {n_new} tokens after {start} cached ones exceed the capacity {room}")
    return start
