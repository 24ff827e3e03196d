"""Argument checks shared by both backends: clear errors that name the argument."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np


def check_token_id(token_id: Any, vocab_size: int, name: str = "token_id") -> int:
    """A single token id -> int, or a TypeError/ValueError naming ``name``."""
    if hasattr(token_id, "item") and getattr(token_id, "ndim", None) == 0:
        token_id = token_id.item()  # a 0-d numpy array or torch tensor
    if isinstance(token_id, bool) or not isinstance(token_id, (int, np.integer)):
        raise TypeError(f"{name}: expected an int token id, got {type(token_id).__name__} {token_id!r}")
    if not 0 <= token_id < vocab_size:
        raise ValueError(f"{name}: expected a token id in [0, {vocab_size}), got {int(token_id)}")
    return int(token_id)


def check_token_ids(ids: Any, vocab_size: int, name: str = "ids") -> np.ndarray:
    """A 1-D sequence of token ids -> int64 array [T], T >= 1."""
    if isinstance(ids, (str, bytes)):
        raise TypeError(f"{name}: expected a sequence of int token ids, got {type(ids).__name__}")
    if hasattr(ids, "detach"):  # a torch tensor
        ids = ids.detach().cpu().numpy()
    arr = np.asarray(ids)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D sequence of token ids, got shape {list(arr.shape)}")
    if arr.size == 0:
        raise ValueError(f"{name}: expected at least one token, got an empty sequence")
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name}: expected int token ids, got dtype {arr.dtype}")
    bad = (arr < 0) | (arr >= vocab_size)
    if bad.any():
        first = int(np.argmax(bad))
        raise ValueError(
            f"{name}: expected token ids in [0, {vocab_size}), got {int(arr[first])} at index {first}"
        )
    return arr.astype(np.int64)


def positions_needed(prompt_len: int, max_new_tokens: int) -> int:
    """Cache positions a generation uses: the prompt and every new token but the last, which is
    returned without being fed back (0 new tokens: the prompt is not even run)."""
    return prompt_len + max_new_tokens - 1 if max_new_tokens else 0


def check_max_new_tokens(
    max_new_tokens: Any, prompt_len: int, capacity: int, capacity_name: str = "the capacity"
) -> int:
    """The number of tokens to generate must be an int >= 0 whose positions fit in ``capacity``.

    Generating N tokens after a prompt of P runs P + N - 1 positions through the model (the last
    new token is never fed back), so P + N - 1 <= capacity is accepted, and N = 0 always is.
    ``capacity_name`` says whose limit it is in the message ("the capacity", "max_seq_len", ...).
    """
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)):
        raise TypeError(f"max_new_tokens: expected an int, got {type(max_new_tokens).__name__}")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens: expected >= 0, got {max_new_tokens}")
    needed = positions_needed(prompt_len, int(max_new_tokens))
    if needed > capacity:
        raise ValueError(
            f"max_new_tokens: prompt of {prompt_len} + {max_new_tokens} new tokens exceeds "
            f"{capacity_name} {capacity}: it needs {needed} positions (the last new token is not fed back)"
        )
    return int(max_new_tokens)


def check_temperature(temperature: Any) -> float:
    """A sampling temperature: a finite float >= 0 (0 = greedy), or a TypeError/ValueError."""
    if hasattr(temperature, "item") and getattr(temperature, "ndim", None) == 0:
        temperature = temperature.item()
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float, np.integer, np.floating)):
        raise TypeError(f"temperature: expected a float, got {type(temperature).__name__}")
    if not (temperature >= 0 and math.isfinite(temperature)):
        raise ValueError(f"temperature: expected >= 0 and finite, got {temperature}")
    return float(temperature)


def check_float_dtype(dtype: Any, name: str = "dtype") -> np.dtype:
    """A NumPy floating dtype (float16, float32, float64), or a TypeError naming ``name``."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or not np.issubdtype(dt, np.floating):
        raise TypeError(f"{name}: expected a floating NumPy dtype such as np.float32, got {dtype!r}")
    return dt


def check_int(name: str, value: Any, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an int (numpy ints too, never a bool) within ``low <= value <= high`` where those
    are given, or a TypeError/ValueError that names ``name``, the bounds and what came."""
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0 and not isinstance(value, np.generic):
        value = value.item()  # a 0-d torch tensor or numpy array
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__} {value!r}")
    value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        if high is None:
            want = f"an int >= {low}"
        elif low is None:
            want = f"an int <= {high}"
        else:
            want = f"{low} <= {name} <= {high}"
        raise ValueError(f"{name}: expected {want}, got {value}")
    return value


# ---------------------------------------------------------------- one registry of number formats


@dataclass(frozen=True)
class DType:
    """A number format: its canonical name, its width in bits, the names it also answers to, and
    the ``torch`` attribute that holds it (None where PyTorch has none, as for int4)."""

    name: str
    bits: int
    aliases: tuple[str, ...] = ()
    torch_name: str | None = None

    @property
    def nbytes(self) -> float:
        """Bytes per number (0.5 for int4)."""
        return self.bits / 8


#: Every number format the package knows, by canonical name.
DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("float64", 64, ("fp64", "double"), "float64"),
        DType("float32", 32, ("fp32", "float"), "float32"),
        DType("float16", 16, ("fp16", "half"), "float16"),
        DType("bfloat16", 16, ("bf16",), "bfloat16"),
        DType("float8_e4m3fn", 8, ("fp8", "float8", "e4m3"), "float8_e4m3fn"),
        DType("float8_e5m2", 8, ("e5m2",), "float8_e5m2"),
        DType("int8", 8, (), "int8"),
        DType("int4", 4, (), None),
    )
}
_BY_NAME = {alias: d for d in DTYPES.values() for alias in (d.name, *d.aliases)}


def dtype_info(dtype: Any, name: str = "dtype") -> DType:
    """A dtype name or alias (``"bf16"``, ``"float32"``, any case), a NumPy dtype or a torch dtype
    -> its ``DType``; anything else is a ValueError naming ``name`` and the known names."""
    if isinstance(dtype, str):
        key = dtype.lower()
    elif type(dtype).__module__ == "torch":  # torch.float32 and friends: "torch.float32"
        key = str(dtype).removeprefix("torch.")
    else:
        try:
            key = np.dtype(dtype).name
        except TypeError:
            key = None
    if key not in _BY_NAME:
        raise ValueError(f"{name}: expected one of {sorted(_BY_NAME)} or a dtype, got {dtype!r}")
    return _BY_NAME[key]


def torch_dtype(dtype: Any, name: str = "dtype") -> Any:
    """A dtype name, alias or torch dtype -> the ``torch.dtype`` (imports torch)."""
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    info = dtype_info(dtype, name)
    if info.torch_name is None:
        raise ValueError(f"{name}: {info.name} has no torch dtype")
    return getattr(torch, info.torch_name)


def default_device() -> str:
    """``"cuda"`` when a CUDA device is visible, else ``"cpu"`` (imports torch)."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
