"""Argument checks shared by both backends: clear errors that name the argument."""

from __future__ import annotations

import math
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
