"""The arrays a cache policy works on, NumPy arrays or torch tensors, through one namespace.

A sliding window, an int8 cache and a paged pool decide *where* each position lives with small
integer arrays on the host (NumPy), whatever the model; only the keys and values themselves live
in the model's arrays: NumPy arrays for a NumPy model, tensors on the model's device (in its dtype)
for a torch model. Every policy is written once against the array API standard (``xp``:
``array_api_compat.numpy`` or ``array_api_compat.torch``, as SciPy and scikit-learn do), so that it
reads as NumPy and runs natively on either: ``xp.zeros(shape, dtype=..., device=...)``,
``xp.concat``, ``xp.astype``. ``ArraysOf`` gives a cache or a pool its ``backend``, ``dtype``,
``device`` and ``xp``; the int8 rounding (``quantize_int8``) is one function for both. Nothing here
imports torch unless a torch dtype is given.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import array_api_compat
import array_api_compat.numpy as numpy_xp
import numpy as np

from ..validate import check_float_dtype, torch_device

__all__ = [
    "QMAX",
    "quantize_int8",
    "dequantize_int8",
    "broadcast_copy",
    "is_torch_dtype",
    "itemsize",
    "namespace",
    "ArraysOf",
]

#: The largest int8 magnitude used: symmetric, so -128 is never stored.
QMAX = 127


def quantize_int8(x: Any, axis: int, scale_dtype: Any = None) -> tuple[Any, Any]:
    """x -> q (int8, x's shape), scale (x's shape with ``axis`` of size 1): symmetric int8 over
    ``axis``, for a NumPy array or a tensor on any device. scale = max|x| / 127 along ``axis`` (in
    ``scale_dtype``, default float32), q = round(x / scale), half to even, clipped to [-127, 127];
    a slice of zeros gets scale 0 and q 0. ``dequantize_int8(q, scale)`` is within scale / 2 of
    x. The arithmetic runs in float64 (float32 on Apple's MPS, which has no float64)."""
    x = x if hasattr(x, "shape") else np.asarray(x)
    xp = array_api_compat.array_namespace(x)
    wide = xp.float32 if str(array_api_compat.device(x)).startswith("mps") else xp.float64
    x64 = xp.astype(x, wide)
    scale_dtype = xp.float32 if scale_dtype is None else scale_dtype
    scale = xp.astype(xp.max(xp.abs(x64), axis=axis, keepdims=True) / QMAX, scale_dtype)
    step = xp.astype(scale, wide)
    safe = xp.where(step > 0, step, xp.ones_like(step))  # a zero slice: q = round(0 / 1) = 0
    q = xp.astype(xp.clip(xp.round(x64 / safe), -QMAX, QMAX), xp.int8)
    return q, scale


def dequantize_int8(q: Any, scale: Any, dtype: Any = np.float32) -> Any:
    """int8 q, a scale that broadcasts against it -> q * scale, in ``dtype``."""
    xp = array_api_compat.array_namespace(q, scale)
    return xp.astype(xp.astype(q, scale.dtype) * scale, dtype, copy=False)


def broadcast_copy(x: Any, shape: tuple[int, ...]) -> Any:
    """A new array (writable, its own memory) of ``x`` broadcast to ``shape``."""
    xp = array_api_compat.array_namespace(x)
    return xp.asarray(xp.broadcast_to(x, shape), copy=True)


def is_torch_dtype(dtype: Any) -> bool:
    """Is ``dtype`` a ``torch.dtype`` (checked without importing torch)?"""
    return type(dtype).__module__ == "torch" and type(dtype).__name__ == "dtype"


def itemsize(dtype: Any) -> int:
    """Bytes per element of a NumPy or torch ``dtype``."""
    return int(dtype.itemsize) if is_torch_dtype(dtype) else np.dtype(dtype).itemsize


def namespace(backend: str) -> ModuleType:
    """``array_api_compat.numpy`` for "numpy", ``array_api_compat.torch`` for "torch"."""
    if backend == "torch":
        import array_api_compat.torch as torch_xp

        return torch_xp
    return numpy_xp


class ArraysOf:
    """What a cache or a pool keeps its arrays in: ``backend`` ("numpy" or "torch"), ``dtype`` (a
    floating dtype of that backend), ``device`` (a ``torch.device``, or "cpu" for NumPy),
    ``scale_dtype`` (an int8 cache's scales: float32, float64 for a float64 cache), and ``xp``, the
    backend's array API namespace (a property: a cache's deep copy shares it)."""

    backend: str
    dtype: Any
    device: Any
    scale_dtype: Any

    def _init_arrays(self, dtype: Any, device: Any = None) -> None:
        """Set the four from ``dtype`` (a torch dtype -> tensors on ``device``, default the CPU;
        anything else -> NumPy arrays, a floating dtype, or a TypeError/ValueError naming
        ``dtype``); ``device`` is for torch only."""
        if is_torch_dtype(dtype):
            if not dtype.is_floating_point:
                raise ValueError(f"dtype: expected a floating-point dtype, got {dtype}")
            import torch

            self.backend, self.dtype = "torch", dtype
            self.device = torch_device("cpu" if device is None else device)  # present, or by name
            self.scale_dtype = torch.float64 if dtype == torch.float64 else torch.float32
            return
        if device is not None and str(device) != "cpu":
            raise ValueError(
                f"device: a NumPy cache lives on the host, expected None or 'cpu', got {device!r}"
            )
        self.backend, self.dtype, self.device = "numpy", check_float_dtype(dtype), "cpu"
        self.scale_dtype = np.promote_types(self.dtype, np.float32)

    @property
    def xp(self) -> ModuleType:
        """The array API namespace of this cache's arrays."""
        return namespace(self.backend)

    def zeros(self, shape: tuple[int, ...], dtype: Any = None) -> Any:
        """``xp.zeros`` of ``shape`` in ``dtype`` (default the cache's), on the cache's device."""
        return self.xp.zeros(shape, dtype=self.dtype if dtype is None else dtype, device=self.device)
