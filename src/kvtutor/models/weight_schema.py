"""Weights checked against their config, once, for every family and backend.

A family's weights container (``GPT2Weights``, ``LlamaWeights``) names its arrays (``named()``:
``"wte_VD"``, ``"layers[0].w_q"``, ... with ``None`` for an optional weight it lacks) and derives
from a config the arrays it must hold and their shapes (``schema(config)``). ``check_weights``
compares the two: every weight present, none left over (a config of 2 layers with weights of 4 is
refused, not cut short), each of its shape, floating point, one dtype for all, every number
finite, and the config's norm epsilon greater than 0 in that dtype (1e-50 is 0 in float32, and a
norm of a zero row then divides 0 by 0). Every model's constructor runs it, the NumPy models'
(``NumpyDecoder.__post_init__``) and the torch models' (``TorchDecoder.accept``), so no path
builds a model from weights its config does not describe. NumPy arrays and torch tensors alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["check_weights", "check_logits", "array_dtype_name"]


def _is_tensor(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "is_floating_point")


def array_dtype_name(x: Any) -> str:
    """The dtype of a NumPy array or torch tensor, as a name: ``"float32"``, ``"bfloat16"``."""
    return str(x.dtype).removeprefix("torch.")


def _is_floating(x: Any) -> bool:
    return x.is_floating_point() if _is_tensor(x) else np.issubdtype(x.dtype, np.floating)


def _not_finite(x: Any) -> str:
    """'' if every number of ``x`` is finite, else the first that is not, where, and how many."""
    if _is_tensor(x):
        import torch

        bad = ~torch.isfinite(x)
        if not bool(bad.any()):
            return ""
        where = [int(i) for i in torch.nonzero(bad)[0]]
        return f"{x[tuple(where)].item()} at index {where} ({int(bad.sum())} non-finite in all)"
    bad = ~np.isfinite(x)
    if not bad.any():
        return ""
    where = [int(i) for i in np.argwhere(bad)[0]]
    return f"{x[tuple(where)]} at index {where} ({int(bad.sum())} non-finite in all)"


def _eps_dtype(x: Any) -> Any:
    """The NumPy dtype a norm's epsilon is added in: the array's own (a NumPy model), float32 at
    least for a torch tensor (the torch norms take the mean square in float32 or wider)."""
    if _is_tensor(x):
        return np.float64 if array_dtype_name(x) == "float64" else np.float32
    return x.dtype


def check_weights(weights: Any, config: Any, schema: Mapping[str, tuple[int, ...]], eps_name: str) -> None:
    """``weights.named()`` against ``schema`` (name -> shape, derived from ``config``), or a
    TypeError/ValueError naming the weight, what the config expects and what came: missing,
    unexpected, misshapen, not floating, of another dtype than the first, not finite; and
    ``config.<eps_name>`` > 0 in the weights' dtype."""
    named = weights.named()
    family = type(config).__name__
    missing = [name for name in schema if named.get(name) is None]
    if missing:
        raise ValueError(
            f"weights: expected every weight {family} {_sizes(config)} describes, missing "
            f"{', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''} ({len(missing)} in all)"
        )
    extra = [name for name, arr in named.items() if arr is not None and name not in schema]
    if extra:
        raise ValueError(
            f"weights: expected only the weights {family} {_sizes(config)} describes, got "
            f"{', '.join(extra[:4])}{' ...' if len(extra) > 4 else ''} besides ({len(extra)} in all)"
        )
    first_name, first = None, None
    for name, shape in schema.items():
        arr = named[name]
        if not (isinstance(arr, np.ndarray) or _is_tensor(arr)):
            raise TypeError(f"{name}: expected a NumPy array or torch tensor, got {type(arr).__name__}")
        if not _is_floating(arr):
            raise TypeError(f"{name}: expected floating-point weights, got dtype {array_dtype_name(arr)}")
        if tuple(arr.shape) != tuple(shape):
            raise ValueError(f"{name}: expected shape {list(shape)} (from the config), got {list(arr.shape)}")
        if first is None:
            first_name, first = name, arr
        elif array_dtype_name(arr) != array_dtype_name(first):
            raise ValueError(
                f"{name}: expected {first_name}'s dtype {array_dtype_name(first)}, got "
                f"{array_dtype_name(arr)}"
            )
        bad = _not_finite(arr)
        if bad:
            dtype = "torch." + array_dtype_name(arr) if _is_tensor(arr) else array_dtype_name(arr)
            raise ValueError(f"{name}: expected finite weights in {dtype}, got {bad}")
    eps = getattr(config, eps_name)
    dtype = _eps_dtype(first)
    if not np.asarray(eps, dtype=dtype) > 0:
        raise ValueError(
            f"{eps_name}: expected a number > 0 in the weights' dtype {np.dtype(dtype).name}, got "
            f"{eps!r}, which rounds to 0 there (a norm of a zero row would divide 0 by 0)"
        )


def _sizes(config: Any) -> str:
    return f"(n_layers={config.n_layers}, d_model={config.d_model})"


def check_logits(logits: Any, rows: Any = None) -> Any:
    """``logits`` (a NumPy array or torch tensor, the vocabulary last) if every number is finite,
    else a ValueError naming ``logits``: a token chosen by argmax or by sampling from a NaN is
    token 0 or garbage, never an error. ``rows``: only these rows of the first axis count (a torch
    batch's active rows). Both bases run it on every pass before committing the cache, so a pass
    that fails it changes no cache."""
    part = logits if rows is None else logits[rows]
    if _is_tensor(part):
        import torch

        # one pass, no temporaries: a sum is finite only if every number is (a NaN or an inf
        # survives any sum); only a sum that is not (or that overflowed) counts them
        total = part.sum()
        bad = 0 if bool(torch.isfinite(total)) else int((~torch.isfinite(part)).sum())
    else:
        bad = int(part.size - np.isfinite(part).sum())
    if bad:
        raise ValueError(
            f"logits: expected finite numbers, got {bad} NaN or inf of {int(np.prod(part.shape))}: "
            "the weights or the inputs overflow this model's dtype (the cache was not changed)"
        )
    return logits
