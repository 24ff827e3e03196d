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

import torch

from ..caches.protocol import Plan
from ..caches.torch_kv import TorchKVCache, TorchPreallocatedKVCache
from .torch_mirror import check_batch, token_ids


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
    "warm_up",
    "capture_graph",
    "DecodingModel",
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


# ---------------------------------------------------------------- the fixed-shape step and its CUDA graphs


def decode_fixed(
    model: DecodingModel,
    ids_B: torch.Tensor,
    cache: TorchPreallocatedKVCache,
    n_keys: int,
) -> tuple[torch.Tensor, Plan]:
    """[B] -> [B,V] and the fixed plan to commit: a decode step over the
    first ``n_keys`` slots of every row, every shape fixed and the positions
    read from the device copy of the lengths (nothing the host must know: a
    CUDA graph can replay it). ``fixed_plan`` refuses a row whose next token
    would fall outside the ``n_keys`` slots.

    The book shows this in "Decode on a GPU".
    """
    plan = cache.fixed_plan(n_keys)
    return model.run_pass(ids_B[:, None], cache, plan)[:, 0], plan


Step = Callable[[torch.Tensor], tuple[torch.Tensor, Plan]]


def bucket_step(model: DecodingModel, cache: TorchPreallocatedKVCache, n_keys: int, mode: str) -> Step:
    """One decode step over the first ``n_keys`` slots (``decode_fixed``), compiled first when
    ``mode`` is ``"compile"``, and on CUDA captured in a CUDA graph (``capture_graph``)."""

    def fixed(ids_B: torch.Tensor) -> tuple[torch.Tensor, Plan]:
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
    graph replay on a GPU), then commits its plan. The logits tensor is
    reused by the next call.

    The book shows this in "Decode on a GPU".
    """
    model.check_cache(cache, kind="preallocated")
    modes = ("cuda_graph", "compile")
    if mode not in modes:
        raise ValueError(f"mode: expected one of {list(modes)}, got {mode!r}")
    steps: dict[int, Step] = {}

    def step(ids_B: Any, check: bool = True) -> torch.Tensor:
        """[B] -> [B,V]: one decode step of every row of the bound cache."""
        ids_B = step_ids(model, cache, ids_B, check)
        longest = int(cache.host_lengths_array.max())
        n_keys = bucket_for(longest + 1, cache.capacity)
        if n_keys not in steps:
            steps[n_keys] = bucket_step(model, cache, n_keys, mode)
        with torch.inference_mode():
            logits_BV, plan = steps[n_keys](ids_B)
            cache.advance(plan)
        return logits_BV

    step.buckets = steps  # the buckets built so far (for inspection, tests)
    return step


def warm_up(fixed: Step, cache: TorchPreallocatedKVCache, n_keys: int, ids_B: torch.Tensor) -> None:
    """Run ``fixed`` three times on a side stream, as a capture needs (and a compilation), then
    put back the key and value slots those runs wrote at each row's next position."""
    saved = cache.save_slots(cache.fixed_plan(n_keys))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fixed(ids_B)
    torch.cuda.current_stream().wait_stream(stream)
    cache.restore_slots(saved)


def capture_graph(
    model: DecodingModel,
    cache: TorchPreallocatedKVCache,
    fixed: Step,
    n_keys: int,
) -> Step:
    """Record ``fixed`` (one decode step over ``n_keys`` slots) in a CUDA
    graph; return its replay, which checks the bucket still holds every row,
    replays, and hands back the logits and the fixed plan to commit.

    The book shows this in "Decode on a GPU".
    """
    static_ids = torch.zeros(
        cache.batch_size, dtype=torch.long, device=model.device
    )  # fmt: skip
    with torch.inference_mode(), torch.cuda.device(model.device):
        warm_up(fixed, cache, n_keys, static_ids)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_logits, plan = fixed(static_ids)
        plan.written = [False] * cache.n_layers  # recorded, not run
        torch.cuda.synchronize()

    def replay(ids_B: torch.Tensor) -> tuple[torch.Tensor, Plan]:
        cache.check_fixed(n_keys)
        static_ids.copy_(ids_B, non_blocking=True)
        graph.replay()
        plan.replayed()  # every layer written again
        return static_logits, plan

    # keep the graph (and its memory pool) alive with the callable
    replay.graph = graph
    return replay
