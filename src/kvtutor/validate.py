"""Argument checks shared by both backends: clear errors that name the argument."""

from __future__ import annotations

import functools
import inspect
import math
import sys
from collections.abc import Callable, Sequence
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


def check_no_bool_ids(ids: Any, name: str) -> None:
    """A TypeError naming ``name`` if a list or tuple of token ids (nested too) holds a bool:
    ``np.asarray([True, 2])`` is ``[1, 2]``, so the array's dtype no longer shows it."""
    stack = [ids]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, (bool, np.bool_)):
            raise TypeError(f"{name}: expected int token ids, got dtype bool (an entry {item!r})")


def check_token_ids(ids: Any, vocab_size: int, name: str = "ids") -> np.ndarray:
    """A 1-D sequence of token ids -> int64 array [T], T >= 1."""
    if isinstance(ids, (str, bytes)):
        raise TypeError(f"{name}: expected a sequence of int token ids, got {type(ids).__name__}")
    if hasattr(ids, "detach"):  # a torch tensor
        ids = ids.detach().cpu().numpy()
    check_no_bool_ids(ids, name)
    try:
        arr = np.asarray(ids)
    except ValueError:  # nested rows of different lengths: NumPy's own message names no argument
        lengths = [len(row) if hasattr(row, "__len__") else "an int" for row in ids]
        raise ValueError(
            f"{name}: expected a 1-D sequence of token ids, got nested rows of lengths {lengths}"
        ) from None
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


def check_step(chunks: Any, contexts: Any) -> tuple[list[tuple[int, int]], list[int]]:
    """One serving step's prompt chunks and decode contexts, as ``serving.disagg.StepModel.step_s``
    takes them: (n_new >= 1, start >= 0) pairs, and context lengths >= 1; each a TypeError or
    ValueError naming it."""
    for name, value in (("chunks", chunks), ("contexts", contexts)):
        if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
            raise TypeError(f"{name}: expected a sequence, got {type(value).__name__}")
    pairs = [c if not isinstance(c, (str, bytes)) and hasattr(c, "__len__") and len(c) == 2 else None
             for c in chunks]  # fmt: skip
    if None in pairs:
        raise TypeError(f"chunks: expected (n_new, start) pairs, got {list(chunks)[pairs.index(None)]!r}")
    checked = [(check_int("chunks: n_new", n, 1), check_int("chunks: start", at, 0)) for n, at in pairs]
    return checked, [check_int("contexts: context", c, 1) for c in contexts]


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
    if not 0 <= temperature <= sys.float_info.max:  # not math.isfinite: it overflows on a huge int
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
    if dtype is None or isinstance(dtype, bool):  # np.dtype(None) is float64: never a silent default
        key = None
    elif isinstance(dtype, str):
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


# ---------------------------------------------------------------- numbers that scale a model


def check_scale(name: str, value: Any) -> float:
    """A finite number > 0 (a standard deviation, an epsilon) as a float, or a TypeError/ValueError
    naming ``name``: nan or inf leaves a model whose logits are all NaN, 0 one that ignores its input."""
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        value = value.item()  # a 0-d numpy array or torch tensor
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name}: expected a float, got {type(value).__name__} {value!r}")
    try:
        number = float(value)
    except OverflowError:  # an int beyond float's range
        bits = int(value).bit_length()
        raise ValueError(f"{name}: expected a finite number > 0, got an int of {bits} bits") from None
    if not (number > 0 and math.isfinite(number)):
        raise ValueError(f"{name}: expected a finite number > 0, got {value!r}")
    return number


#: The largest size or count the memory calculator takes (seq_len, batch, a config's sizes): their
#: products, in bytes, then stay well inside float's range.
MAX_COUNT = 2**40


def check_at_most(name: str, value: Any, most: int, unit: str = "") -> Any:
    """``value`` (a number already checked) if it is <= ``most``, else a ValueError naming ``name``;
    a huge int is shown by its order of magnitude."""
    if value > most:
        huge = isinstance(value, int) and value > 10**18
        shown = f"about 10**{int(value.bit_length() * math.log10(2))}" if huge else f"{value:,}"
        raise ValueError(f"{name}: expected at most {most:,}{unit}, got {shown}")
    return value


def check_seed(seed: Any, name: str = "seed") -> int:
    """A random seed: an int 0 <= seed < 2**64, what NumPy's and torch's generators both take."""
    return check_int(name, seed, 0, 2**64 - 1)


# ---------------------------------------------------------------- torch: devices and compute dtypes

#: The dtypes the torch models and kernels compute in (their matmuls run in these; not on MPS: float64).
COMPUTE_DTYPES = ("float32", "float64", "float16", "bfloat16")


def _present_devices() -> list[str]:
    import torch

    present = ["cpu"]
    if torch.cuda.is_available():
        present += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if torch.backends.mps.is_available():
        present.append("mps")
    return present


def torch_device(device: Any = None, name: str = "device") -> Any:
    """A device present on this machine -> its ``torch.device`` (None: ``default_device()``): the CPU,
    a CUDA GPU (``"cuda"`` or ``"cuda:N"`` for a visible N) or Apple's ``"mps"``; anything else is a
    ValueError naming ``name``, the devices present and what came (imports torch)."""
    import torch

    try:
        dev = torch.device(default_device() if device is None else device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"{name}: expected a torch device such as 'cpu' or 'cuda', got {device!r}") from err
    present = ", ".join(_present_devices())
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"{name}: expected an available device, got {dev} but CUDA is not available (present: {present})"
        )
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ValueError(f"{name}: expected an available device, got {dev} (present: {present})")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(
            f"{name}: expected an available device, got {dev} but MPS is not available (present: {present})"
        )
    if dev.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"{name}: expected 'cpu', 'cuda' or 'mps' (present: {present}), got {dev}")
    return dev


def torch_compute_dtype(dtype: Any, device: Any, name: str = "dtype") -> Any:
    """A dtype name, alias or torch dtype that the matmuls run in on ``device`` (a ``torch.device``)
    -> the ``torch.dtype``: one of ``COMPUTE_DTYPES`` (float64 not on MPS). Not floating point: a
    TypeError; floating but not computable (float8): a ValueError listing the choices (imports torch)."""
    import torch

    if isinstance(dtype, str):
        dtype = torch_dtype(dtype, name)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(
            f"{name}: expected a floating torch.dtype such as torch.float32 (or its name), got {dtype!r}"
        )
    choices = [d for d in COMPUTE_DTYPES if not (device.type == "mps" and d == "float64")]
    if str(dtype).removeprefix("torch.") not in choices:
        raise ValueError(
            f"{name}: expected one of {', '.join(choices)} (the dtypes matmuls run in on {device.type}), "
            f"got {dtype}"
        )
    return dtype


# ---------------------------------------------------------------- attention inputs


def check_tensors(named: dict[str, Any]) -> dict[str, int]:
    """Torch tensors by name, their dimensions the letters after the name's last ``_`` (``m_BHT``:
    B, H, T): each a floating tensor with those dimensions, each >= 1, one size per letter across
    them all, one dtype and one device -> {letter: size}; else a TypeError/ValueError naming the
    tensor, what was expected and what came (imports torch)."""
    import torch

    sizes: dict[str, tuple[int, str]] = {}
    first: tuple[str, Any] | None = None
    for name, x in named.items():
        dims = name.rsplit("_", 1)[-1]
        if not (isinstance(x, torch.Tensor) and x.is_floating_point()):
            what = f"dtype {x.dtype}" if isinstance(x, torch.Tensor) else type(x).__name__
            raise TypeError(f"{name}: expected a floating torch tensor, got {what}")
        if x.ndim != len(dims) or min(x.shape, default=0) < 1:
            raise ValueError(f"{name}: expected {len(dims)} dimensions [{', '.join(dims)}], each >= 1, "
                             f"got shape {list(x.shape)}")  # fmt: skip
        if first is None:
            first = (name, x)
        elif (x.dtype, x.device) != (first[1].dtype, first[1].device):
            raise ValueError(f"{name}: expected {first[0]}'s dtype and device ({first[1].dtype}, "
                             f"{first[1].device}), got ({x.dtype}, {x.device})")  # fmt: skip
        for letter, size in zip(dims, x.shape, strict=True):
            want, whose = sizes.setdefault(letter, (size, name))
            if size != want:
                raise ValueError(f"{name}: expected {letter} = {want} ({whose}'s), got shape {list(x.shape)}")
    return {letter: size for letter, (size, _) in sizes.items()}


def check_qkv(
    q: Any, k: Any, v: Any, q_name: str, causal: bool = False, same_dtype: bool = False
) -> tuple[Any, Any, Any, int, int]:
    """Check q, k, v -> (q, k, v, H // Hkv, S), or a TypeError/ValueError naming the argument, what
    was expected and what came. A q_name that starts with "q_B" wants torch tensors [B, H, T, K],
    [B, Hkv, S, K] twice on one device, else NumPy array-likes [H, T, K], [Hkv, S, K]; a decode query
    (q_name "q_HK"/"q_BHK", [.., H, K] or [.., H, 1, K]) comes back as [.., H, 1, K]. ``same_dtype``
    (torch only): the three must share one dtype, for a kernel that does not promote."""
    batched, decode = q_name.startswith("q_B"), q_name in ("q_HK", "q_BHK")
    k_name, v_name = ("k_BHSK", "v_BHSK") if batched else ("k_HSK", "v_HSK")
    if batched:
        import torch

    for x, name in zip((q, k, v), (q_name, k_name, v_name), strict=True):
        if batched and not (isinstance(x, torch.Tensor) and x.is_floating_point()):
            what = f"dtype {x.dtype}" if isinstance(x, torch.Tensor) else type(x).__name__
            raise TypeError(f"{name}: expected a floating torch tensor, got {what}")
        if not batched and not np.issubdtype(np.asarray(x).dtype, np.floating):
            raise TypeError(f"{name}: expected a floating array (float32 or float64), got dtype "
                            f"{np.asarray(x).dtype}")  # fmt: skip
        if batched and x.device != q.device:
            raise ValueError(f"{name}: expected {q_name}'s device {q.device}, got {x.device}")
        if batched and same_dtype and x.dtype != q.dtype:
            raise ValueError(f"{name}: expected {q_name}'s dtype {q.dtype}, got {x.dtype}")
    if not batched:
        q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    ndim = 4 if batched else 3
    if decode and q.ndim == ndim - 1:
        q = q[..., None, :]
    elif decode and (q.ndim != ndim or q.shape[-2] != 1):
        want = "[B, H, K] or [B, H, 1, K]" if batched else "[H, K] or [H, 1, K]"
        raise ValueError(f"{q_name}: expected one query per head, {want}, got shape {list(q.shape)}")
    for x, name in zip((q, k, v), (q_name, k_name, v_name), strict=True):
        if x.ndim != ndim:
            raise ValueError(f"{name}: expected {ndim} dimensions [{', '.join(name[2:])}], got shape "
                             f"{list(x.shape)}")  # fmt: skip
    (*_, h, t, d), (*_, h_kv, s, d_k) = q.shape, k.shape
    if tuple(v.shape) != tuple(k.shape):
        raise ValueError(f"{v_name}: expected the shape of {k_name}, {list(k.shape)}, got {list(v.shape)}")
    if batched and k.shape[0] != q.shape[0]:
        raise ValueError(f"{k_name}: expected batch size {q.shape[0]} ({q_name}'s), got {k.shape[0]}")
    if t < 1 or d < 1:
        raise ValueError(f"{q_name}: expected at least one query and K >= 1, got shape {list(q.shape)}")
    if d_k != d:
        raise ValueError(f"{k_name}: expected head dimension K = {d} ({q_name}'s), got {d_k}")
    if s < 1:
        raise ValueError(f"{k_name}: expected at least one key, got S = 0")
    if h_kv < 1 or h % h_kv:
        raise ValueError(f"{k_name}: expected a number of KV heads that divides H = {h} ({q_name}'s "
                         f"heads), got {h_kv}")  # fmt: skip
    if causal and t > s:
        raise ValueError(f"{q_name}: expected at most S = {s} queries under the causal mask (query t "
                         f"sits at position S - T + t), got T = {t}")  # fmt: skip
    return q, k, v, h // h_kv, s


# ---------------------------------------------------------------- names, numbers and checked entry points


def check_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    """``value`` if it is one of ``choices``, exactly (a name's case counts), else a ValueError
    (a TypeError for what is not a string) naming ``name`` and listing the choices."""
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected one of {list(choices)}, got {type(value).__name__} {value!r}")
    if value not in choices:
        raise ValueError(f"{name}: expected one of {list(choices)}, got {value!r}")
    return value


def check_real(name: str, value: Any, low: float | None = None, high: float | None = None) -> float:
    """A finite number (an int, a float or a NumPy scalar, never a bool) with ``low <= value <=
    high`` where those are given, as a float; else a TypeError/ValueError naming ``name``."""
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        value = value.item()  # a 0-d numpy array or torch tensor
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name}: expected a number, got {type(value).__name__} {value!r}")
    bounds = ([f">= {low}"] if low is not None else []) + ([f"<= {high}"] if high is not None else [])
    want = " ".join(["a finite number", " and ".join(bounds)]).strip()
    try:
        number = float(value)
    except OverflowError:  # an int beyond float's range
        raise ValueError(f"{name}: expected {want}, got an int of {int(value).bit_length()} bits") from None
    if (
        not math.isfinite(number)
        or (low is not None and number < low)
        or (high is not None and number > high)
    ):
        raise ValueError(f"{name}: expected {want}, got {value!r}")
    return number


def checked_by(check: Callable[..., None]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator: the function it makes calls ``check`` with the arguments by name (defaults
    filled in) and only then the function itself. For a function the book displays, whose body
    is the mechanism: its checks live beside it, and ``inspect.getsource`` still finds the
    function's own source (``__wrapped__``)."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def entry(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            check(**bound.arguments)
            return fn(*args, **kwargs)

        return entry

    return wrap


# ---------------------------------------------------------------- random numbers and choosing a token


def seeded_rng(seed: Any, name: str = "seed") -> np.random.Generator:
    """A NumPy generator seeded by ``check_seed(seed)`` (None: fresh entropy from the system), for
    every function that takes ``seed: int | None``; a bad seed is refused by ``name``."""
    return np.random.default_rng(None if seed is None else check_seed(seed, name))


def check_rng(rng: Any, name: str = "rng") -> None:
    """A TypeError naming ``name`` unless ``rng`` is a ``numpy.random.Generator`` or None (a seed
    is not a generator: ``np.random.default_rng(seed)`` makes one)."""
    if rng is not None and not isinstance(rng, np.random.Generator):
        raise TypeError(
            f"{name}: expected a numpy.random.Generator (np.random.default_rng(seed)) or None, "
            f"got {type(rng).__name__} {rng!r}"
        )


def _is_torch_tensor(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "is_floating_point")


#: What a model's non-finite logits mean (``check_logits``'s default note).
MODEL_LOGITS_NOTE = "the weights or the inputs overflow this model's dtype (the cache was not changed)"


def check_logits(logits: Any, rows: Any = None, name: str = "logits", note: str = MODEL_LOGITS_NOTE) -> Any:
    """``logits`` (a NumPy array or torch tensor, the vocabulary last) if every number is finite,
    else a ValueError naming ``name``: a token chosen by argmax or by sampling from a NaN is
    token 0 or garbage, never an error. ``rows``: only these rows of the first axis count (a torch
    batch's active rows). Both bases run it on every pass before committing the cache, so a pass
    that fails it changes no cache; ``greedy`` and ``steps.sample`` run it before choosing.
    ``note`` says what a non-finite number means to the caller."""
    part = logits if rows is None else logits[rows]
    if _is_torch_tensor(part):
        import torch

        # one pass, no temporaries: a sum is finite only if every number is (a NaN or an inf
        # survives any sum); only a sum that is not (or that overflowed) counts them
        total = part.sum()
        bad = 0 if bool(torch.isfinite(total)) else int((~torch.isfinite(part)).sum())
    else:
        bad = int(part.size - np.isfinite(part).sum())
    if bad:
        raise ValueError(
            f"{name}: expected finite numbers, got {bad} NaN or inf of {int(np.prod(part.shape))}: {note}"
        )
    return logits


def check_logits_row(logits_V: Any, name: str = "logits_V") -> Any:
    """One row of logits [V] (a NumPy array, a torch tensor or a list of numbers) of finite real
    numbers, V >= 1 -> as an array or tensor; else a TypeError/ValueError naming ``name``: a batch
    [B, V] is refused, not flattened."""
    x = logits_V if _is_torch_tensor(logits_V) or isinstance(logits_V, np.ndarray) else None
    if x is None:
        try:
            x = np.asarray(logits_V)
        except ValueError:  # ragged nested lists
            raise ValueError(f"{name}: expected one row of logits [V], got ragged rows") from None
    if _is_torch_tensor(x):
        real = str(x.dtype) != "torch.bool" and not x.is_complex()
    else:
        real = x.dtype != bool and (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer))
    if not real:
        raise TypeError(f"{name}: expected real numbers (logits), got dtype {x.dtype}")
    if x.ndim != 1 or x.shape[0] == 0:
        raise ValueError(f"{name}: expected one row of logits [V] with V >= 1, got shape {list(x.shape)}")
    return check_logits(x, name=name, note="no token is chosen from a NaN or inf")


def greedy(logits_V: Any) -> int:
    """[V] -> the id of the largest logit (the first of a tie): the one greedy choice of a token
    outside the models' own decode loops (serving, speculative decoding, the caches' measurements,
    the widgets), after ``check_logits_row``: never from a NaN or inf, never from a flattened batch."""
    return int(check_logits_row(logits_V).argmax())


def check_prompts(
    prompts: Any, vocab_size: int, max_len: int | None = None, name: str = "prompts"
) -> list[np.ndarray]:
    """A list of prompts, each a 1-D sequence of token ids (their lengths may differ), or a 2-D
    array of them -> a list of int64 arrays; else a TypeError/ValueError naming ``name`` (or
    ``name[i]``, the prompt at fault): not a list, empty, one flat prompt where a list of them
    belongs, or a prompt of more than ``max_len`` tokens (the model's ``max_seq_len``)."""
    if isinstance(prompts, np.ndarray):
        prompts = list(prompts) if prompts.ndim == 2 else prompts.tolist()
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence):
        raise TypeError(f"{name}: expected a list of token-id lists, got {type(prompts).__name__}")
    if not prompts:
        raise ValueError(f"{name}: expected at least one prompt, got none")
    if all(isinstance(p, (int, np.integer)) for p in prompts):
        raise ValueError(
            f"{name}: expected a list of token-id lists, got one flat list of {len(prompts)} ids "
            "(for one prompt, pass [prompt])"
        )
    checked = [check_token_ids(p, vocab_size, f"{name}[{i}]") for i, p in enumerate(prompts)]
    for i, prompt in enumerate(checked):
        if max_len is not None and len(prompt) > max_len:
            raise ValueError(f"{name}[{i}]: expected at most {max_len} tokens, got {len(prompt)}")
    return checked
