"""The fast decode step of the torch models on CUDA, and the checks the passes share.

On a CPU a decode step is the model's own pass with T = 1 (``TorchDecoder.decode_step``): one
row's products are BLAS mat-vecs (``torch_mirror.linear``), and nothing else is needed. On CUDA
an eager step is bound by launching its kernels, hundreds of them, each a few microseconds of
work: ``compile_decode`` captures one step in a CUDA graph (``capture_graph``) and replays it,
one launch instead of hundreds. The step it captures (``decode_fixed``) is the same pass of the
same model, over a plan whose every shape is fixed and whose positions are read on the device
from the lengths (``TorchPreallocatedKVCache.fixed_plan``), so nothing needs the host.

``compile_decode``'s steps attend over a fixed stretch of the cache, the smallest of
``key_buckets(capacity)`` (64, 128, 256, ... keys) that holds the longest row, with a mask built on
the device from the lengths: every shape is fixed within a bucket, and a step never reads more
than about twice the keys it needs. Rows may sit at different lengths; there is no ``active``
mask. ``mode="compile"`` first compiles the step with ``torch.compile`` (fused inductor kernels,
once per bucket), then captures that the same way. (We capture ourselves rather than use
``mode="reduce-overhead"``: its graphs copy every input that is not an ``nn.Parameter`` into
static buffers at each replay, and our weights and cache are plain tensors.) On the CPU
``compile_decode`` runs the same fixed-shape step eagerly (``"compile"`` needs a C++ compiler).
Nothing global is changed; building a step writes nothing.

Both models use it, GPT-2 and Llama: it reads only what ``DecodingModel`` names. Checked against
the step functions in ``tests/test_torch_gpt2.py`` and ``tests/test_torch_dtypes.py``. Also here:
``WeightArena`` (every CPU weight of a ``TorchGPT2Model`` in one buffer on 2 MiB pages) and the
argument checks the passes share (``token_ids``, ``check_batch``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import torch

from ..caches.torch_kv import Plan, TorchKVCache, TorchPreallocatedKVCache, host_empty


class DecodingModel(Protocol):
    """What the steps below read of a model (every ``TorchDecoder`` has it): the engine depends on
    this interface, not on the classes that own the weights, so the modules form no circle."""

    config: Any
    device: torch.device

    def run_pass(
        self, ids_BT: torch.Tensor, cache: Any, plan: Plan | None, last_only: bool = False
    ) -> torch.Tensor: ...
    def check_cache(self, cache: Any, kind: str | None = None) -> Any: ...


__all__ = [
    "key_buckets",
    "bucket_for",
    "decode_fixed",
    "compile_decode",
    "bucket_step",
    "step_ids",
    "capture_graph",
    "DecodingModel",
    "WeightArena",
    "token_ids",
    "check_batch",
]

_MIN_BUCKET = 64  # the shortest stretch of cache a fixed-shape decode step attends over


def key_buckets(capacity: int) -> list[int]:
    """M -> the key counts a fixed-shape decode step is built for: 64, 128, 256, ... below M, then M.

    A step at cache length n attends over the smallest bucket > n, so it reads at most twice the
    keys it needs (never the whole capacity), with a handful of fixed shapes (one CUDA graph each).
    """
    out, n = [], _MIN_BUCKET
    while n < capacity:
        out.append(n)
        n *= 2
    return [*out, capacity]


def bucket_for(n_keys: int, capacity: int) -> int:
    """The smallest of ``key_buckets(capacity)`` that holds ``n_keys`` keys."""
    return next(b for b in key_buckets(capacity) if b >= n_keys)


# ---------------------------------------------------------------- checks


def token_ids(ids: Any, rank: int, vocab_size: int, name: str, device: torch.device) -> torch.Tensor:
    """Token ids (list, numpy or tensor) -> LongTensor on ``device``, or an error naming ``name``."""
    dims = {1: "[B]" if name.endswith("_B") else "[T]", 2: "[B, T]"}[rank]
    if isinstance(ids, (str, bytes)):
        raise TypeError(f"{name}: expected int token ids of shape {dims}, got {type(ids).__name__}")
    if not isinstance(ids, torch.Tensor):
        try:
            ids = np.asarray(ids)
        except ValueError as err:  # ragged nested lists
            raise ValueError(
                f"{name}: expected a rectangular {dims} array of token ids, got ragged rows"
            ) from err
    shape = list(ids.shape)
    if len(shape) != rank:
        raise ValueError(f"{name}: expected shape {dims}, got shape {shape}")
    if 0 in shape:
        raise ValueError(f"{name}: expected at least one token, got shape {shape}")
    if isinstance(ids, torch.Tensor):
        if ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex():
            raise TypeError(f"{name}: expected int token ids, got dtype {ids.dtype}")
        bad = (ids < 0) | (ids >= vocab_size)
        if bool(bad.any()):  # on CUDA this waits for the device
            where = tuple(int(i) for i in bad.nonzero()[0])
            raise ValueError(
                f"{name}: expected token ids in [0, {vocab_size}), got {int(ids[where])} at index {where}"
            )
        return ids.to(device=device, dtype=torch.long)
    if ids.dtype == bool or not np.issubdtype(ids.dtype, np.integer):
        raise TypeError(f"{name}: expected int token ids, got dtype {ids.dtype}")
    bad = (ids < 0) | (ids >= vocab_size)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"{name}: expected token ids in [0, {vocab_size}), got {int(ids[where])} at index {where}"
        )
    return torch.from_numpy(ids.astype(np.int64)).to(device)


def check_batch(ids: torch.Tensor, cache: TorchKVCache, name: str) -> None:
    """A ValueError naming ``name`` unless ``ids`` [B, ...] has one row per row of ``cache``."""
    if ids.shape[0] != cache.batch_size:
        raise ValueError(
            f"{name}: expected the cache's batch size {cache.batch_size}, got {ids.shape[0]} rows"
        )


# ---------------------------------------------------------------- weights


_ALIGN = 64  # bytes: each weight starts on a cache line


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


class WeightArena:
    """Tensors carved one after another out of one host buffer (``host_empty``: on 2 MiB pages where
    the OS allows), each on its own cache line: every CPU weight of a ``TorchGPT2Model`` lives in one."""

    def __init__(self, numel: int, dtype: torch.dtype, n_tensors: int = 0) -> None:
        """Room for ``numel`` elements in ``n_tensors`` tensors, each padded to its cache line."""
        self.buffer, self.used = host_empty(numel + n_tensors * _ALIGN, dtype), 0
        self.align = max(1, _ALIGN // _itemsize(dtype))  # elements per cache line

    def take(self, src: torch.Tensor) -> torch.Tensor:
        """A copy of ``src`` (converted to the arena's dtype), placed at the next aligned offset."""
        numel = src.numel()
        out = self.buffer[self.used : self.used + numel].view(src.shape)
        self.used += -(-numel // self.align) * self.align
        return out.copy_(src)


# ---------------------------------------------------------------- the fixed-shape step and its CUDA graphs


def decode_fixed(
    model: DecodingModel,
    ids_B: torch.Tensor,
    cache: TorchPreallocatedKVCache,
    n_keys: int,
) -> torch.Tensor:
    """[B] -> [B,V]: a decode step over the first ``n_keys`` slots of every
    row, every shape fixed and the positions read from the device copy of
    the lengths (nothing the host must know: a CUDA graph can replay it).
    Every row must be shorter than ``n_keys``. Does not advance the lengths.

    The book shows this in "Decode on a GPU".
    """
    return model.run_pass(ids_B[:, None], cache, cache.fixed_plan(n_keys))[:, 0]


def bucket_step(
    model: DecodingModel, cache: TorchPreallocatedKVCache, n_keys: int, mode: str
) -> Callable[[torch.Tensor], torch.Tensor]:
    """One decode step over the first ``n_keys`` slots (``decode_fixed``), compiled first when
    ``mode`` is ``"compile"``, and on CUDA captured in a CUDA graph (``capture_graph``)."""

    def fixed(ids_B: torch.Tensor) -> torch.Tensor:
        return decode_fixed(model, ids_B, cache, n_keys)

    if mode == "compile":
        fixed = torch.compile(fixed, dynamic=False)
    if model.device.type == "cuda":
        fixed = capture_graph(model, cache, fixed, n_keys)
    return fixed


def step_ids(model: DecodingModel, cache: TorchKVCache, ids_B: Any, check: bool) -> torch.Tensor:
    """``ids_B`` as a device tensor [B] for one step of every row of ``cache``, checked: the
    token ids' range (unless ``check`` is False: on CUDA it waits for the device), the batch,
    and that every row is prefilled and has room for one more token."""
    vocab, device = model.config.vocab_size, model.device
    if check:
        ids_B = token_ids(ids_B, 1, vocab, "ids_B", device)
    elif not isinstance(ids_B, torch.Tensor):
        ids_B = torch.as_tensor(ids_B, dtype=torch.long, device=device)
    check_batch(ids_B[:, None], cache, "ids_B")
    lengths = cache.host_lengths_array
    if lengths.min() == 0:
        raise ValueError(
            f"cache: expected prefilled rows, row {int(lengths.argmin())} is empty (prefill it first)"
        )
    if lengths.max() >= cache.capacity:
        raise ValueError(
            f"ids_B: row {int(lengths.argmax())} is full (capacity {cache.capacity}); reset or truncate it"
        )
    return ids_B


def compile_decode(
    model: DecodingModel,
    cache: TorchPreallocatedKVCache,
    mode: str = "cuda_graph",
) -> Callable[..., torch.Tensor]:
    """model, cache -> step(ids_B, check=True) -> logits [B,V]: a faster
    ``model.decode_step`` bound to this cache, every row one token a call.

    A call runs the step of the smallest key bucket that holds the longest
    row (``bucket_step``, built the first time the bucket is reached: a CUDA
    graph replay on a GPU). The logits tensor is reused by the next call.

    The book shows this in "Decode on a GPU".
    """
    model.check_cache(cache, kind="preallocated")
    modes = ("cuda_graph", "compile")
    if mode not in modes:
        raise ValueError(f"mode: expected one of {list(modes)}, got {mode!r}")
    steps: dict[int, Callable[[torch.Tensor], torch.Tensor]] = {}

    def step(ids_B: Any, check: bool = True) -> torch.Tensor:
        """[B] -> [B,V]: one decode step of every row of the bound cache."""
        ids_B = step_ids(model, cache, ids_B, check)
        longest = int(cache.host_lengths_array.max())
        n_keys = bucket_for(longest + 1, cache.capacity)
        if n_keys not in steps:
            steps[n_keys] = bucket_step(model, cache, n_keys, mode)
        with torch.inference_mode():
            logits_BV = steps[n_keys](ids_B)
            if model.device.type == "cuda":  # the graph moved the device copy
                cache.advance_host(1)
            else:
                cache.advance(1)
        return logits_BV

    step.buckets = steps  # the buckets built so far (for inspection, tests)
    return step


def capture_graph(
    model: DecodingModel,
    cache: TorchPreallocatedKVCache,
    fixed: Callable[[torch.Tensor], torch.Tensor],
    n_keys: int,
) -> Callable[[torch.Tensor], torch.Tensor]:
    """Record ``fixed`` (one decode step over ``n_keys`` slots) plus the
    length update in a CUDA graph; return its replay.

    The book shows this in "Decode on a GPU".
    """
    static_ids = torch.zeros(
        cache.batch_size,
        dtype=torch.long,
        device=model.device,
    )
    with torch.inference_mode(), torch.cuda.device(model.device):
        # warm-up runs (and compilation) write K/V at each row's next
        # slot: save those slots, restore
        plan = cache.fixed_plan(n_keys)
        saved = cache.save_slots(plan)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                fixed(static_ids)
        torch.cuda.current_stream().wait_stream(stream)
        cache.restore_slots(plan, saved)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_logits = fixed(static_ids)
            cache.advance_device(1)  # recorded, not run: runs at each replay
        torch.cuda.synchronize()

    def replay(ids_B: torch.Tensor) -> torch.Tensor:
        static_ids.copy_(ids_B, non_blocking=True)
        graph.replay()
        return static_logits

    # keep the graph (and its memory pool) alive with the callable
    replay.graph = graph
    return replay
