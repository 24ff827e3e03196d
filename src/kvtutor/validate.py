"""Argument checks shared by both backends: clear errors that name the argument."""

from __future__ import annotations

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


def check_max_new_tokens(max_new_tokens: Any, prompt_len: int, capacity: int) -> int:
    """The number of tokens to generate must be an int that fits after the prompt."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)):
        raise TypeError(f"max_new_tokens: expected an int, got {type(max_new_tokens).__name__}")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens: expected >= 0, got {max_new_tokens}")
    if prompt_len + max_new_tokens > capacity:
        raise ValueError(
            f"max_new_tokens: prompt of {prompt_len} + {max_new_tokens} new tokens exceeds "
            f"max_seq_len {capacity}"
        )
    return int(max_new_tokens)
