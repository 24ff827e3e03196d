"""How every torch model stores its weights: one packer for every family.

A decode step streams every matrix from memory once per token, so where and how a weight lies is
part of the speed. ``WeightPacker`` copies a family's NumPy (or torch) weights to the model's
device and dtype, and decides three things the same way for GPT-2, Llama and Qwen3:

- **one arena on the CPU**: every tensor carved out of one buffer on 2 MiB pages where the OS
  allows (``WeightArena``; fewer TLB misses while decode streams them), each on its own cache line;
- **the layout of each matrix**: an [in, out] matrix is stored as it is or transposed, whichever
  the device's product reads best (``row_major``), and always used through an [in, out] view; on a
  CPU that product is the one a decode step runs its one row through, BLAS's mat-vec or oneDNN's
  matmul of one row, whichever streams faster on this CPU (``one_row_product``, measured once);
- **the LM head**: on a CPU stored as [D, V] (prefill's largest matmul reads it fastest so); on
  CUDA its rows padded with zeros to a multiple of 64 (GEMM tiles fit; the logits are sliced back
  to the vocabulary); the embedding a view of the same rows when the family ties them.
"""

from __future__ import annotations

import functools
import statistics
import time
from typing import Any

import numpy as np
import torch

from ..caches.torch_kv import host_empty
from ..environment import env_choice

__all__ = [
    "VOCAB_MULTIPLE",
    "ONE_ROW_PRODUCTS",
    "ONEDNN_MIN_BYTES",
    "one_row_product",
    "one_row_onednn",
    "onednn_linear",
    "onednn_available",
    "measure_one_row_products",
    "one_row_rates",
    "row_major",
    "WeightArena",
    "WeightPacker",
]

#: LM head rows are padded to a multiple of this, per device type
VOCAB_MULTIPLE = {"cuda": 64}

_ALIGN = 64  # bytes: each weight starts on a cache line


#: The products a CPU decode step can run its one row through: BLAS's matrix-vector product
#: (``torch.addmv``) and oneDNN's matmul of one row (``torch.ops.mkldnn._linear_pointwise``).
ONE_ROW_PRODUCTS = ("blas", "onednn")
#: Below this many bytes a matrix takes BLAS's mat-vec whichever product streams faster: oneDNN's
#: call costs about 15 us more (on the AMD EPYC, equal at 2.3 MB, 14 against 21 us at 1 MB).
ONEDNN_MIN_BYTES = 4 << 20
_ONEDNN_DTYPES = (torch.float32, torch.bfloat16)
_ENV = "KVTUTOR_DECODE_PRODUCT"


def one_row_product(dtype: torch.dtype = torch.float32, n_bytes: int | None = None) -> str:
    """The product a CPU decode step runs one row through a matrix of ``n_bytes`` (None: a
    large one) in ``dtype``: "blas" or "onednn". Unset (or ``auto``), the faster of the two on
    this CPU, measured once per process and dtype (``one_row_rates``), for matrices
    of ``ONEDNN_MIN_BYTES`` and more; ``KVTUTOR_DECODE_PRODUCT=blas`` or ``onednn`` decides for
    every matrix. Weights oneDNN cannot multiply (float64, float16) and torch builds without
    oneDNN always take BLAS's."""
    env = env_choice(_ENV, ("auto", *ONE_ROW_PRODUCTS), "auto")
    if dtype not in _ONEDNN_DTYPES or not onednn_available():
        return "blas"
    if env in ONE_ROW_PRODUCTS:
        return env
    small = n_bytes is not None and n_bytes < ONEDNN_MIN_BYTES
    return "blas" if small else _faster_one_row_product(dtype)


def one_row_onednn(w_OE: torch.Tensor) -> bool:
    """Does one row through ``w_OE`` ([out, in], a tensor or a view) take oneDNN's matmul? Where
    ``one_row_product`` picks oneDNN for the matrix's bytes, and only then: as [out, in] rows (the
    layout oneDNN reads best) from ``ONEDNN_MIN_BYTES`` on, stored the other way (an LM head laid
    out for prefill) from 16 times that (on the AMD EPYC BLAS's mat-vec read an 8 MiB one faster,
    22 against 18 GB/s; a 150 MiB one slower, 22 against 30). Under ``torch.compile``, never: the
    compiler picks its own kernels."""
    if torch.compiler.is_compiling():  # Inductor lowers the op for frozen weights only: its own pick
        return False
    n_bytes = w_OE.numel() * w_OE.element_size()
    if not w_OE.is_contiguous():
        n_bytes //= 16
    return one_row_product(w_OE.dtype, n_bytes) == "onednn"


def onednn_linear(x_E: torch.Tensor, w_OE: torch.Tensor, b_O: torch.Tensor | None) -> torch.Tensor:
    """[E], [O,E], [O] or None -> [O]: oneDNN's matmul of one row, the op Inductor emits for a
    linear on a CPU (it has no public name: ``torch.ops.mkldnn._linear_pointwise``)."""
    return torch.ops.mkldnn._linear_pointwise(x_E, w_OE, b_O, "none", [], "")


@functools.cache
def onednn_available() -> bool:
    """Can this torch multiply one row with oneDNN (``onednn_linear``)?"""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        w, x = torch.ones(4, 4), torch.ones(4)
        return bool(torch.allclose(onednn_linear(x, w, None), w @ x))
    except (AttributeError, RuntimeError):  # an older torch, or a build whose oneDNN lacks the op
        return False


@functools.cache
def one_row_rates(dtype: torch.dtype = torch.float32) -> dict[str, float]:
    """The rates ``one_row_product`` chose by: ``measure_one_row_products``, once per process and
    dtype. Read-only: every later choice reads the same dict."""
    return measure_one_row_products(dtype)


@functools.cache
def _faster_one_row_product(dtype: torch.dtype) -> str:  # per call of every one-row product
    rates = one_row_rates(dtype)
    return max(rates, key=rates.__getitem__)


def measure_one_row_products(
    dtype: torch.dtype = torch.float32, n_bytes: int = 96 << 20, rounds: int = 5
) -> dict[str, float]:
    """Bytes/s of one row through each product on torch's threads, over [4096, 1024] matrices of
    ``n_bytes`` in all (more than a last-level cache holds, as a decode step's weights are), each
    in the layout ``row_major`` gives it: {"blas": ..., "onednn": ...}, the median of ``rounds``
    alternating rounds (``{"blas": ...}`` alone where oneDNN cannot run)."""
    n_out, n_in = 4096, 1024
    itemsize = torch.empty((), dtype=dtype).element_size()
    n_mats = max(1, n_bytes // (n_out * n_in * itemsize))
    x_E = torch.full((n_in,), 0.5, dtype=dtype)
    bias_O = torch.zeros(n_out, dtype=dtype)
    longer_side = [torch.full((n_in, n_out), 0.5, dtype=dtype).mT for _ in range(n_mats)]  # BLAS's
    candidates = {"blas": lambda: [torch.addmv(bias_O, w, x_E) for w in longer_side]}
    if dtype in _ONEDNN_DTYPES and onednn_available():
        out_in = [w.contiguous() for w in longer_side]  # [out, in], as on a GPU
        candidates["onednn"] = lambda: [onednn_linear(x_E, w, bias_O) for w in out_in]
    seconds: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(rounds + 1):  # the first round warms up
        for name, fn in candidates.items():
            start = time.perf_counter()
            fn()
            seconds[name].append(time.perf_counter() - start)
    size = n_mats * n_out * n_in * itemsize
    return {name: size / statistics.median(s[1:]) for name, s in seconds.items()}


def row_major(
    device: torch.device,
    n_in: int,
    n_out: int,
    dtype: torch.dtype = torch.float32,
) -> bool:
    """Store an [in, out] matrix as it is ([in, out] contiguous, rows of
    length out)? Else it is stored transposed ([out, in] contiguous) and
    used through an [in, out] view.

    On a GPU: always transposed, the layout ``F.linear`` (cuBLAS) reads
    natively. On a CPU a decode step streams each matrix through a product
    of one row (``one_row_product``). BLAS's matrix-vector product is faster
    the longer each contiguous row is (on an AMD EPYC: about 8 GB/s at 1 KiB
    rows, 24 GB/s at 64 KiB), so for it each matrix lies along its longer
    side; oneDNN's reads [out, in], as a GPU does.

    The book shows this in "Rooflines: measuring compute-bound and
    memory-bound".
    """
    if device.type != "cpu" or n_out < n_in:
        return False
    n_bytes = n_in * n_out * _itemsize(dtype)
    return one_row_product(dtype, n_bytes) == "blas"


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


class WeightArena:
    """Tensors carved one after another out of one host buffer (``host_empty``: on 2 MiB pages where
    the OS allows), each on its own cache line."""

    def __init__(self, numel: int, dtype: torch.dtype, n_tensors: int = 0) -> None:
        """Room for ``numel`` elements in ``n_tensors`` tensors, each padded to its cache line."""
        self.buffer, self.used = host_empty(numel + n_tensors * _ALIGN, dtype), 0
        self.align = max(1, _ALIGN // _itemsize(dtype))  # elements per cache line

    def take(self, src: torch.Tensor) -> torch.Tensor:
        """A copy of ``src`` (converted to the arena's dtype), placed at the next aligned offset."""
        numel = src.numel()
        if self.used + numel > self.buffer.numel():
            raise ValueError(f"src: {numel} more elements do not fit the arena ({self.used} used)")
        out = self.buffer[self.used : self.used + numel].view(src.shape)
        self.used += -(-numel // self.align) * self.align
        return out.copy_(src)


def _tensor(a: Any) -> torch.Tensor:
    """A NumPy array or a tensor (any device) as a tensor, without a copy where it can."""
    return a if isinstance(a, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(a))


class WeightPacker:
    """Copies of a family's weights on ``device`` in ``dtype``: on the CPU in one arena sized for
    ``numel`` elements in at most ``n_tensors`` tensors (count generously: unused room costs a cache
    line a tensor); elsewhere one allocation each."""

    def __init__(self, device: torch.device, dtype: torch.dtype, numel: int, n_tensors: int) -> None:
        self.device, self.dtype = device, dtype
        self.arena = WeightArena(numel, dtype, n_tensors) if device.type == "cpu" else None

    def vec(self, a: Any) -> torch.Tensor:
        """A contiguous copy of ``a`` (a norm's gain, a bias, an embedding)."""
        src = _tensor(a)
        if self.arena is None:
            return torch.empty(src.shape, dtype=self.dtype, device=self.device).copy_(src)
        return self.arena.take(src)

    def mat(self, *parts_EO: Any, as_is: bool | None = None) -> torch.Tensor:
        """[E, O] matrices side by side -> one [E, sum O] matrix, stored as it is when ``as_is``
        (by default: as ``row_major`` says), else transposed, and returned as an [E, sum O] view
        (fused projections: ``w_qkv``, ``w_gate_up``)."""
        tensors = [_tensor(p) for p in parts_EO]
        w_EO = tensors[0] if len(tensors) == 1 else torch.cat(tensors, dim=1)
        if row_major(self.device, *w_EO.shape, self.dtype) if as_is is None else as_is:
            return self.vec(w_EO)
        return self.vec(w_EO.mT).mT

    def embedding(self, wte_VD: Any, head_VD: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The token embedding [V, D] and the LM head as multiplied [V + pad, D]: one tensor when
        ``head_VD`` is None (tied), the embedding then a view of its first V rows; rows of zeros
        added on CUDA up to a multiple of 64."""
        n_vocab, width = wte_VD.shape
        n_pad = -n_vocab % VOCAB_MULTIPLE.get(self.device.type, 1)

        def head_rows(w_VD: Any) -> torch.Tensor:  # the LM head reads w as a [D, V] matrix
            if n_pad:
                padded = self.vec(torch.zeros(n_vocab + n_pad, width))
                padded[:n_vocab].copy_(_tensor(w_VD))
                return padded
            # on a CPU as [D, V] whichever product decode runs: prefill's largest matmul reads it
            # fastest so (on the AMD EPYC: 153 against 114 GFLOP/s), oneDNN's one row no slower
            return self.mat(_tensor(w_VD).T, as_is=self.device.type == "cpu").mT

        if head_VD is None:
            head = head_rows(wte_VD)
            return (head[:n_vocab] if n_pad else head), head
        return self.vec(wte_VD), head_rows(head_VD)

    @staticmethod
    def padded_rows(n_vocab: int, device: torch.device) -> int:
        """How many zero rows the LM head gets on ``device``."""
        return -n_vocab % VOCAB_MULTIPLE.get(device.type, 1)
