"""The fast decode engine of ``TorchModel``: one new token per row, the arithmetic of
``kvtutor.models.torch_mirror``'s ``block`` laid out for speed.

Two fast steps, because the recorded measurements say the two devices need different things:

- ``decode_fast``, eager and fused (each residual add rides on its matrix product, K and V go
  into the cache with one copy, one row on the CPU is a BLAS mat-vec). On a CPU a step is a few
  dozen operations that each start cold after a large product: fewer operations is what pays.
  ``TorchModel.decode_step`` takes it whenever every row sits at one position.
- ``decode_fixed``, every shape fixed and the positions read from the device copy of the
  lengths, over a *key bucket* of the cache (``key_buckets``, ``bucket_for``). On CUDA an eager
  step is bound by launching its kernels: ``compile_decode`` captures one such step per bucket in
  a CUDA graph (``capture_graph``) and replays it, one launch instead of hundreds. On a CPU
  ``compile_decode`` runs the same step eagerly.

``compile_decode``'s steps attend over a fixed stretch of the cache, the smallest of
``key_buckets(capacity)`` (64, 128, 256, ... keys) that holds the longest row, with a mask built on
the device from the lengths: every shape is fixed within a bucket, nothing needs the host, and a
step never reads more than about twice the keys it needs. Rows may sit at different lengths; there
is no ``active`` mask. ``mode="compile"`` first compiles the step with ``torch.compile`` (fused
inductor kernels, once per bucket), then captures that the same way. (We capture ourselves rather
than use ``mode="reduce-overhead"``: its graphs copy every input that is not an ``nn.Parameter``
into static buffers at each replay, and our weights and cache are plain tensors.) On the CPU
``"compile"`` needs a C++ compiler. Nothing global is changed; building a step writes nothing.

Both are checked against the mirror functions (``tests/test_torch_model.py``,
``tests/test_torch_dtypes.py``). Also here: ``DecodeWeights`` (each layer's matrices as
``decode_fast`` reads them), ``WeightArena`` (every CPU weight in one buffer on 2 MiB pages), and
the argument checks the steps share with ``TorchModel`` (``token_ids``, ``check_batch``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import numpy as np
import torch
import torch.nn.functional as F

from ..caches.torch_kv import TorchKVCache, TorchPreallocatedKVCache, host_empty
from .torch_mirror import TorchLayerWeights, block, embed, gelu, layer_norm, sdpa


class DecodingModel(Protocol):
    """What the steps below read of a model (``TorchModel`` has it all): the engine depends on
    this interface, not on the class that owns the weights, so the two modules form no circle."""

    config: Any
    device: torch.device
    wte_VD: torch.Tensor
    wpe_MD: torch.Tensor
    lnf_g: torch.Tensor
    lnf_b: torch.Tensor
    head_VD: torch.Tensor | None
    layers: list[TorchLayerWeights]
    decode_weights: list[DecodeWeights]

    def lm_head(self, x_BTD: torch.Tensor) -> torch.Tensor: ...
    def check_cache(self, cache: Any, kind: str | None = None) -> Any: ...
    def decode_step(self, ids_B: Any, cache: Any, active: Any = None) -> torch.Tensor: ...


__all__ = [
    "key_buckets",
    "bucket_for",
    "decode_fast",
    "decode_fixed",
    "compile_decode",
    "bucket_step",
    "step_ids",
    "capture_graph",
    "DecodeWeights",
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


class DecodeWeights(NamedTuple):
    """One layer's weights as ``decode_fast`` reads them: each matrix both as its
    contiguous [out, in] tensor ("OE", for mat-vec products) and as the [in, out] view ("EO", x @ W)."""

    ln1_g: torch.Tensor
    ln1_b: torch.Tensor
    qkv_OE: torch.Tensor
    qkv_EO: torch.Tensor
    b_qkv: torch.Tensor
    o_OE: torch.Tensor
    o_EO: torch.Tensor
    b_o: torch.Tensor
    ln2_g: torch.Tensor
    ln2_b: torch.Tensor
    fc_OE: torch.Tensor
    fc_EO: torch.Tensor
    b_fc: torch.Tensor
    proj_OE: torch.Tensor
    proj_EO: torch.Tensor
    b_proj: torch.Tensor

    @classmethod
    def of(cls, ly: TorchLayerWeights) -> DecodeWeights:
        """The views of one layer's weights (nothing is copied)."""
        return cls(
            ly.ln1_g, ly.ln1_b, ly.w_qkv.mT, ly.w_qkv, ly.b_qkv, ly.w_o.mT, ly.w_o, ly.b_o,
            ly.ln2_g, ly.ln2_b, ly.w_fc.mT, ly.w_fc, ly.b_fc, ly.w_proj.mT, ly.w_proj, ly.b_proj,
        )  # fmt: skip


_ALIGN = 64  # bytes: each weight starts on a cache line


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


class WeightArena:
    """Tensors carved one after another out of one host buffer (``host_empty``: on 2 MiB pages where
    the OS allows), each on its own cache line: every CPU weight of a ``TorchModel`` lives in one."""

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


# ---------------------------------------------------------------- the fused eager step


def decode_fast(model: DecodingModel, ids_B: torch.Tensor, cache: TorchKVCache) -> torch.Tensor:
    """[B] -> [B,V]: one decode step of ``model`` with every row at the same position, the CPU's
    fast path (and ``generate``'s without graphs). No checks: callers validate.

    The arithmetic of ``block`` with T = 1, in fewer tensor operations: each residual add rides
    on its matrix product (``addmm(x, h, W)`` is x + h W), K and V go into the cache with one
    copy, and one row on the CPU uses BLAS's mat-vec product. It matters more than it looks: right
    after a large matrix product has streamed through the caches, every small operation starts
    cold, at tens of microseconds each.
    """
    cfg = model.config
    n_batch, start = ids_B.shape[0], int(cache.host_lengths_array[0])
    n_heads, n_kv, d_head, eps = cfg.n_heads, cfg.n_kv_heads, cfg.d_head, cfg.layer_norm_eps
    q_width, group, width = n_heads * d_head, cfg.group_size, (cfg.d_model,)
    vector = n_batch == 1 and not ids_B.is_cuda  # x is [D], products are mat-vec
    write = cache.decode_writer(start)
    x = F.embedding(ids_B, model.wte_VD).add_(model.wpe_MD[start])  # (B, D)
    if vector:
        x = x.view(-1)
    for i, w in enumerate(model.decode_weights):
        h = torch.layer_norm(x, width, w.ln1_g, w.ln1_b, eps)
        qkv = torch.addmv(w.b_qkv, w.qkv_OE, h) if vector else torch.addmm(w.b_qkv, h, w.qkv_EO)
        q_BHTK = qkv[..., :q_width].view(n_batch, n_heads, 1, d_head)
        if vector:
            kv_new_2BHK = qkv[q_width:].view(2, 1, n_kv, d_head)
        else:
            kv_new_2BHK = qkv[:, q_width:].view(n_batch, 2, n_kv, d_head).transpose(0, 1)
        k_BHSK, v_BHSK = write(i, kv_new_2BHK)
        # (B, H*K) = merged heads; reshape, not view: cuDNN may return [B,H,1,K] in another order
        o = sdpa(q_BHTK, k_BHSK, v_BHSK, None, False, group).reshape(x.shape)
        x = (torch.addmv(x, w.o_OE, o) if vector else torch.addmm(x, o, w.o_EO)).add_(w.b_o)
        h = torch.layer_norm(x, width, w.ln2_g, w.ln2_b, eps)
        f = gelu(torch.addmv(w.b_fc, w.fc_OE, h) if vector else torch.addmm(w.b_fc, h, w.fc_EO), inplace=True)
        x = (torch.addmv(x, w.proj_OE, f) if vector else torch.addmm(x, f, w.proj_EO)).add_(w.b_proj)
    x = torch.layer_norm(x, width, model.lnf_g, model.lnf_b, eps)
    if vector:
        logits = torch.mv(model.wte_VD, x)
    else:
        logits = F.linear(x, model.head_VD)[:, : cfg.vocab_size]
    cache.advance(1)
    return logits.view(n_batch, -1)


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
    plan = cache.fixed_plan(n_keys)
    x_BTD = embed(ids_B[:, None], model.wte_VD, model.wpe_MD, plan.pos_B)
    for i, layer in enumerate(model.layers):
        x_BTD = block(x_BTD, layer, model.config, cache, i, plan)
    eps = model.config.layer_norm_eps
    x_BTD = layer_norm(x_BTD, model.lnf_g, model.lnf_b, eps)
    return model.lm_head(x_BTD)[:, 0]


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
