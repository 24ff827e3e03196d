"""The few array operations a cache policy needs, for NumPy arrays and for torch tensors.

A sliding window, an int8 cache and a paged pool decide *where* each position lives with small
integer arrays on the host (NumPy), whatever the model; only the keys and values themselves live
in the model's arrays: NumPy arrays for a NumPy model, tensors on the model's device (in its dtype)
for a torch model. Slicing and integer-array indexing read the same in both; the rest (allocation,
concatenation, casts, the rounding of int8) is here, once per backend, so that each policy is
written once and runs natively on either (``ops_for``). Nothing here imports torch unless a torch
dtype is given.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..validate import check_float_dtype, torch_device

__all__ = ["QMAX", "quantize_int8", "dequantize_int8", "NumpyOps", "TorchOps", "ops_for", "is_torch_dtype"]

#: The largest int8 magnitude used: symmetric, so -128 is never stored.
QMAX = 127


def quantize_int8(x: np.ndarray, axis: int, scale_dtype: Any = np.float32) -> tuple[np.ndarray, np.ndarray]:
    """x -> q (int8, x's shape), scale (x's shape with ``axis`` of size 1): symmetric int8 over
    ``axis``. scale = max|x| / 127 along ``axis``, q = round(x / scale) clipped to [-127, 127]; a
    slice of zeros gets scale 0 and q 0. ``dequantize_int8(q, scale)`` is within scale / 2 of x."""
    x64 = np.asarray(x, dtype=np.float64)
    scale = (np.max(np.abs(x64), axis=axis, keepdims=True) / QMAX).astype(scale_dtype)
    step = scale.astype(np.float64)
    safe = np.where(step > 0, step, 1.0)  # a zero slice: q = round(0 / 1) = 0
    q = np.clip(np.rint(x64 / safe), -QMAX, QMAX).astype(np.int8)
    return q, scale


def dequantize_int8(q: np.ndarray, scale: np.ndarray, dtype: Any = np.float32) -> np.ndarray:
    """int8 q, a scale that broadcasts against it -> q * scale, in ``dtype``."""
    return (q.astype(scale.dtype) * scale).astype(dtype, copy=False)


def is_torch_dtype(dtype: Any) -> bool:
    """Is ``dtype`` a ``torch.dtype`` (checked without importing torch)?"""
    return type(dtype).__module__ == "torch" and type(dtype).__name__ == "dtype"


class NumpyOps:
    """Host arrays in a floating NumPy dtype."""

    def __deepcopy__(self, memo: dict) -> Any:
        return self  # no state but the dtype and device: a deep copy of a cache shares it

    backend = "numpy"
    device = "cpu"

    def __init__(self, dtype: Any) -> None:
        self.dtype = check_float_dtype(dtype)
        self.scale_dtype = np.promote_types(self.dtype, np.float32)

    def zeros(self, shape: tuple[int, ...], dtype: Any = None) -> np.ndarray:
        return np.zeros(shape, dtype=self.dtype if dtype is None else dtype)

    def cat(self, arrays: list[np.ndarray], axis: int) -> np.ndarray:
        return np.concatenate(arrays, axis=axis)

    def stack(self, arrays: list[np.ndarray], axis: int = 0) -> np.ndarray:
        return np.stack(arrays, axis=axis)

    def cast(self, x: np.ndarray, dtype: Any = None) -> np.ndarray:
        """A copy of ``x`` in ``dtype`` (default the cache's): the caller may reuse its array."""
        return np.array(x, dtype=self.dtype if dtype is None else dtype)

    def mask(self, mask: np.ndarray) -> np.ndarray:
        return mask

    def is_finite(self, x: np.ndarray) -> bool:
        return bool(np.isfinite(x).all())

    def permute(self, x: np.ndarray, *order: int) -> np.ndarray:
        return x.transpose(*order)

    def expand(self, x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        """A copy of ``x`` broadcast to ``shape``."""
        return np.broadcast_to(x, shape).copy()

    def repeat(self, x: np.ndarray, n: int, axis: int) -> np.ndarray:
        return np.repeat(x, n, axis=axis)

    def amax(self, x: np.ndarray, axis: int) -> np.ndarray:
        return x.max(axis=axis)

    def itemsize(self, dtype: Any) -> int:
        return np.dtype(dtype).itemsize

    def quantize(self, x: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
        """``quantize_int8`` with this cache's scale dtype."""
        return quantize_int8(x, axis, self.scale_dtype)

    def dequantize(self, q: np.ndarray, scale: np.ndarray) -> np.ndarray:
        return dequantize_int8(q, scale, self.dtype)


class TorchOps:
    """Tensors in a floating torch dtype on one device."""

    def __deepcopy__(self, memo: dict) -> Any:
        return self  # no state but the dtype and device: a deep copy of a cache shares it

    backend = "torch"

    def __init__(self, dtype: Any, device: Any) -> None:
        import torch

        if not dtype.is_floating_point:
            raise ValueError(f"dtype: expected a floating-point dtype, got {dtype}")
        self.torch, self.dtype, self.device = torch, dtype, torch_device(device)  # present, or by name
        self.scale_dtype = torch.float64 if dtype == torch.float64 else torch.float32
        self.wide = torch.float64 if self.device.type != "mps" else torch.float32

    def zeros(self, shape: tuple[int, ...], dtype: Any = None) -> Any:
        return self.torch.zeros(shape, dtype=self.dtype if dtype is None else dtype, device=self.device)

    def cat(self, arrays: list[Any], axis: int) -> Any:
        return self.torch.cat(arrays, dim=axis)

    def stack(self, arrays: list[Any], axis: int = 0) -> Any:
        return self.torch.stack(arrays, dim=axis)

    def cast(self, x: Any, dtype: Any = None) -> Any:
        return x.to(dtype=self.dtype if dtype is None else dtype, copy=True)

    def mask(self, mask: np.ndarray) -> Any:
        return self.torch.from_numpy(np.ascontiguousarray(mask)).to(self.device)

    def is_finite(self, x: Any) -> bool:
        return bool(self.torch.isfinite(x).all())

    def permute(self, x: Any, *order: int) -> Any:
        return x.permute(*order)

    def expand(self, x: Any, shape: tuple[int, ...]) -> Any:
        return x.expand(shape).clone()

    def repeat(self, x: Any, n: int, axis: int) -> Any:
        return x.repeat_interleave(n, dim=axis)

    def amax(self, x: Any, axis: int) -> Any:
        return x.amax(dim=axis)

    def itemsize(self, dtype: Any) -> int:
        return self.torch.empty((), dtype=dtype).element_size()

    def quantize(self, x: Any, axis: int) -> tuple[Any, Any]:
        """``quantize_int8`` on the device: the same rounding (half to even), in float64 where the
        device has it."""
        x64 = x.to(self.wide)
        scale = (x64.abs().amax(dim=axis, keepdim=True) / QMAX).to(self.scale_dtype)
        step = scale.to(self.wide)
        safe = self.torch.where(step > 0, step, self.torch.ones_like(step))
        return self.torch.round(x64 / safe).clamp(-QMAX, QMAX).to(self.torch.int8), scale

    def dequantize(self, q: Any, scale: Any) -> Any:
        return (q.to(scale.dtype) * scale).to(self.dtype)


def ops_for(dtype: Any, device: Any = None) -> NumpyOps | TorchOps:
    """The operations of the backend that ``dtype`` names: a torch dtype -> tensors on ``device``
    (default the CPU), anything else -> NumPy arrays (a floating dtype, or a TypeError/ValueError
    naming ``dtype``). ``device`` is for torch only."""
    if is_torch_dtype(dtype):
        return TorchOps(dtype, "cpu" if device is None else device)
    if device is not None and str(device) != "cpu":
        raise ValueError(f"device: a NumPy cache lives on the host, expected None or 'cpu', got {device!r}")
    return NumpyOps(dtype)
