"""How every torch model stores its weights: one packer for every family.

A decode step streams every matrix from memory once per token, so where and how a weight lies is
part of the speed. ``WeightPacker`` copies a family's NumPy (or torch) weights to the model's
device and dtype, and decides four things the same way for GPT-2, Llama and Qwen3:

- **one arena on the CPU**: every tensor carved out of one buffer on 2 MiB pages where the OS
  allows (``WeightArena``; fewer TLB misses while decode streams them), each on its own cache line;
- **the layout of each matrix**: an [in, out] matrix is stored as it is or transposed, whichever
  the device's product reads best (``row_major``), and always used through an [in, out] view; on a
  CPU that product is the one a decode step runs its one row through, BLAS's mat-vec or oneDNN's
  matmul of one row, whichever streams faster on this CPU (``one_row_product``, measured once);
- **the LM head**: on a CPU stored as [D, V] (prefill's largest matmul reads it fastest so); on
  CUDA its rows padded with zeros to a multiple of 64 (GEMM tiles fit; the logits are sliced back
  to the vocabulary); the embedding a view of the same rows when the family ties them;
- **a packed copy** on a CPU, where oneDNN's matmul of a matrix it reordered once for itself (the
  packing Inductor does for frozen weights) runs rows faster than the plain weights' product
  (``rows_product`` for few rows and for many, ``one_row_product`` for one; each measured once
  per dtype: bf16 on a CPU with matrix units, a batched decode step): the matrix then carries a
  ``PackedWeight`` that says which row counts read it (``packed_for``), and the plain copy stays
  for everything else (the other products, the embedding, the state dict). It costs the matrix's
  bytes a second time.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..caches.torch_kv import host_empty
from ..environment import env_choice

__all__ = [
    "VOCAB_MULTIPLE",
    "ONE_ROW_PRODUCTS",
    "ONEDNN_MIN_BYTES",
    "ROWS_PRODUCTS",
    "FEW_ROWS",
    "PACK_MIN_BYTES",
    "one_row_product",
    "one_row_onednn",
    "onednn_linear",
    "onednn_available",
    "measure_one_row_products",
    "one_row_rates",
    "rows_product",
    "rows_rates",
    "shape_rates",
    "measure_rows_products",
    "fastest_rounds",
    "PackedWeight",
    "packed_uses",
    "pack",
    "packed_weight",
    "packed_for",
    "out_in_view",
    "row_major",
    "WeightArena",
    "WeightPacker",
]

#: LM head rows are padded to a multiple of this, per device type
VOCAB_MULTIPLE = {"cuda": 64}

_ALIGN = 64  # bytes: each weight starts on a cache line


#: The products a CPU decode step can run its one row through: BLAS's matrix-vector product
#: (``torch.addmv``), oneDNN's matmul of one row (``torch.ops.mkldnn._linear_pointwise``) on the
#: plain weights, and the same on the copy oneDNN packed for itself (``pack``).
ONE_ROW_PRODUCTS = ("blas", "onednn", "packed")
#: Below this many bytes a float32 matrix takes BLAS's mat-vec whichever product streams faster:
#: oneDNN's call costs about 15 us more (on the AMD EPYC, equal at 2.3 MB, 14 against 21 us at
#: 1 MB). Not bf16's: its mat-vec is torch's own kernel, not BLAS's, and on a matrix laid along its
#: longer side for it, it crawled (1.5 GB/s for a 2 MiB matrix on the Intel Xeon, where oneDNN's
#: one row read 11).
ONEDNN_MIN_BYTES = 4 << 20
_ONEDNN_DTYPES = (torch.float32, torch.bfloat16)
_ENV = "KVTUTOR_DECODE_PRODUCT"


def one_row_product(dtype: torch.dtype = torch.float32, n_bytes: int | None = None) -> str:
    """The product a CPU decode step runs one row through a matrix of ``n_bytes`` (None: a
    large one) in ``dtype``: "blas", "onednn" or "packed". Unset (or ``auto``), the fastest on
    this CPU, measured once per process and dtype (``one_row_rates``), for float32 matrices of
    ``ONEDNN_MIN_BYTES`` and more and bf16 ones of any size; ``KVTUTOR_DECODE_PRODUCT=blas``,
    ``onednn`` or ``packed`` decides for every matrix. Weights oneDNN cannot multiply (float64,
    float16) and torch builds without oneDNN always take BLAS's."""
    forced = _forced(_ENV, ONE_ROW_PRODUCTS, dtype)
    if forced:
        return forced
    small = n_bytes is not None and n_bytes < ONEDNN_MIN_BYTES and dtype == torch.float32
    return "blas" if small else _faster_one_row_product(dtype)


def _forced(env: str, choices: tuple[str, ...], dtype: torch.dtype) -> str | None:
    """The product the setting ``env`` names (checked against ``choices``), or "blas" where oneDNN
    cannot multiply ``dtype``; None where the measured choice decides."""
    value = env_choice(env, ("auto", *choices), "auto")  # anything else refused by name
    if dtype not in _ONEDNN_DTYPES or not onednn_available():
        return "blas"
    return value if value in choices else None


def one_row_onednn(w_OE: torch.Tensor) -> bool:
    """Does one row through ``w_OE`` ([out, in], a tensor or a view) take oneDNN's matmul (on its
    packed copy where it has one: ``packed_for``)? Where ``one_row_product`` picks oneDNN's (plain
    or packed) for the matrix's bytes, and only then: as [out, in] rows (the
    layout oneDNN reads best) from ``ONEDNN_MIN_BYTES`` on, stored the other way (an LM head laid
    out for prefill) from 16 times that (on the AMD EPYC BLAS's mat-vec read an 8 MiB one faster,
    22 against 18 GB/s; a 150 MiB one slower, 22 against 30). Under ``torch.compile``, never: the
    compiler picks its own kernels."""
    if torch.compiler.is_compiling():  # Inductor lowers the op for frozen weights only: its own pick
        return False
    n_bytes = w_OE.numel() * w_OE.element_size()
    if not w_OE.is_contiguous():
        n_bytes //= 16
    return one_row_product(w_OE.dtype, n_bytes) != "blas"


def onednn_linear(x_E: torch.Tensor, w_OE: torch.Tensor, b_O: torch.Tensor | None) -> torch.Tensor:
    """[E], [O,E], [O] or None -> [O] (or [..., E] -> [..., O] for rows): oneDNN's matmul, the op
    Inductor emits for a linear on a CPU (it has no public name:
    ``torch.ops.mkldnn._linear_pointwise``); ``w_OE`` plain or packed (``pack``)."""
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
    in the layout ``row_major`` gives it: {"blas": ..., "onednn": ..., "packed": ...}, each its
    fastest of ``rounds`` alternating rounds (``fastest_rounds``; ``{"blas": ...}`` alone where oneDNN
    cannot run)."""
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
        packed = [pack(w) for w in out_in]
        candidates["packed"] = lambda: [onednn_linear(x_E, w, bias_O) for w in packed]
    size = n_mats * n_out * n_in * itemsize
    return {name: size / s for name, s in fastest_rounds(candidates, rounds).items()}


# ---------------------------------------------------------------- two or more rows: BLAS or packed

#: The products a CPU pass runs two or more rows through: BLAS's GEMM on the plain weights
#: (``F.linear``), or oneDNN's matmul on a copy of each matrix that oneDNN reordered once for
#: itself (``pack``: ``torch.ops.mkldnn._reorder_linear_weight``, what Inductor does to frozen
#: weights; on a CPU with matrix units the only way its bf16 tiles run).
ROWS_PRODUCTS = ("blas", "packed")
#: Up to this many rows a product is "few" (a batched decode step: it streams the weights), above
#: it "many" (a prefill: it computes); each has its own measured choice.
FEW_ROWS = 32
#: Matrices under this many bytes are never packed unless ``KVTUTOR_ROWS_PRODUCT=packed`` says so:
#: oneDNN's call costs microseconds more than the bytes of a small matrix take to stream.
PACK_MIN_BYTES = 1 << 20
_ROWS_ENV = "KVTUTOR_ROWS_PRODUCT"
_PACKED = "_kvtutor_packed"  # the attribute of a weight (or its [out, in] view): its PackedWeight


def rows_product(
    dtype: torch.dtype = torch.float32,
    n_rows: int = FEW_ROWS,
    n_bytes: int | None = None,
    shape: tuple[int, int, bool, bool] | None = None,
) -> str:
    """The product a CPU pass runs ``n_rows`` (>= 2) rows through a matrix of ``n_bytes`` (None: a
    large one) in ``dtype``: "blas" or "packed". Unset (or ``auto``), the faster of the two on this
    CPU for that many rows, measured once per process: for a few (up to ``FEW_ROWS``: streaming
    the weights) on one shape per dtype (``rows_rates``); for many (computing) on the matrix's own
    ``shape`` where it is given ((in, out, stored as it is, with a bias): ``shape_rates``, as an
    autotuner times each GEMM; the LM head's odd width suits one library less than a layer's), else
    on the one shape. Matrices under ``PACK_MIN_BYTES`` take BLAS's; ``KVTUTOR_ROWS_PRODUCT=blas``
    or ``packed`` decides for every matrix. Weights oneDNN cannot multiply (float64, float16) and
    torch builds without oneDNN always take BLAS's."""
    forced = _forced(_ROWS_ENV, ROWS_PRODUCTS, dtype)
    if forced:
        return forced
    if n_bytes is not None and n_bytes < PACK_MIN_BYTES:
        return "blas"
    if n_rows > FEW_ROWS and shape is not None:
        rates = shape_rates(dtype, *shape)
        return max(rates, key=rates.__getitem__)
    return _faster_rows_product(dtype, n_rows <= FEW_ROWS)


@functools.cache
def _faster_rows_product(dtype: torch.dtype, few: bool) -> str:  # per call of every product of rows
    rates = rows_rates(dtype)["few" if few else "many"]
    return max(rates, key=rates.__getitem__)


@functools.cache
def rows_rates(dtype: torch.dtype = torch.float32) -> dict[str, dict[str, float]]:
    """The rates ``rows_product`` chose by: ``measure_rows_products``, once per process and dtype.
    Read-only: every later choice reads the same dict."""
    return measure_rows_products(dtype)


@functools.cache
def shape_rates(dtype: torch.dtype, n_in: int, n_out: int, as_is: bool, bias: bool) -> dict[str, float]:
    """FLOP/s of many rows (256) through an [n_in, n_out] matrix in ``dtype``, stored as it is (else
    transposed), with a bias or not, as BLAS's GEMM and as oneDNN's on a packed copy: the rates
    ``rows_product`` chose by for such a matrix, measured once per process (``fastest_rounds``)."""
    g = torch.Generator().manual_seed(0)
    w_EO = (torch.rand(n_in, n_out, generator=g) - 0.5).to(dtype)
    w_OE = w_EO.mT if as_is else w_EO.mT.contiguous()
    x_RE = torch.rand(256, n_in, generator=g).to(dtype)
    b_O = torch.zeros(n_out, dtype=dtype) if bias else None
    packed = pack(w_OE)
    candidates = {
        "blas": lambda: F.linear(x_RE, w_OE, b_O),
        "packed": lambda: onednn_linear(x_RE, packed, b_O),
    }
    flops = 2 * 256 * n_in * n_out
    return {name: flops / s for name, s in fastest_rounds(candidates, 3).items()}


def measure_rows_products(
    dtype: torch.dtype = torch.float32, n_bytes: int = 48 << 20, rounds: int = 5
) -> dict[str, dict[str, float]]:
    """Each product of rows on torch's threads, through [4096, 1024] matrices: ``{"few": {"blas":
    bytes/s, "packed": bytes/s}, "many": {"blas": FLOP/s, "packed": FLOP/s}}``, few = 8 rows
    through ``n_bytes`` of matrices (more than a last-level cache holds), many = 256 rows through
    four; each its fastest of ``rounds`` alternating rounds. Where oneDNN cannot run, "blas" alone."""
    n_out, n_in = 4096, 1024
    itemsize = _itemsize(dtype)
    n_mats = max(4, n_bytes // (n_out * n_in * itemsize))
    g = torch.Generator().manual_seed(0)
    w_OE = [(torch.rand(n_out, n_in, generator=g) - 0.5).to(dtype) for _ in range(n_mats)]
    bias_O = torch.zeros(n_out, dtype=dtype)
    can_pack = dtype in _ONEDNN_DTYPES and onednn_available()
    packed = [pack(w) for w in w_OE] if can_pack else []
    out: dict[str, dict[str, float]] = {}
    for regime, n_rows, mats in (("few", 8, n_mats), ("many", 256, 4)):
        x_RE = torch.rand(n_rows, n_in, generator=g).to(dtype)
        candidates = {"blas": lambda x=x_RE, m=mats: [F.linear(x, w, bias_O) for w in w_OE[:m]]}
        if can_pack:
            candidates["packed"] = lambda x=x_RE, m=mats: [onednn_linear(x, w, bias_O) for w in packed[:m]]
        seconds = fastest_rounds(candidates, rounds)
        work = mats * n_out * n_in * (itemsize if regime == "few" else 2 * n_rows)  # bytes or FLOPs
        out[regime] = {name: work / s for name, s in seconds.items()}
    return out


def fastest_rounds(candidates: dict[str, Any], rounds: int) -> dict[str, float]:
    """Seconds of each candidate: its fastest of ``rounds`` alternating rounds, after one warm-up
    round. The fastest, not the median: what other work on the machine does only ever adds time,
    and a choice made once should not follow it."""
    seconds: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(rounds + 1):
        for name, fn in candidates.items():
            start = time.perf_counter()
            fn()
            seconds[name].append(time.perf_counter() - start)
    return {name: min(s[1:]) for name, s in seconds.items()}


@dataclass(frozen=True)
class PackedWeight:
    """A matrix's copy that oneDNN packed for itself (``pack``), and which row counts read it: one
    row, a few (up to ``FEW_ROWS``), many. Decided once, when the weights are packed (as their
    layout is), from this CPU's measured choices (``packed_uses``)."""

    tensor: torch.Tensor
    one_row: bool
    few_rows: bool
    many_rows: bool


def packed_uses(
    dtype: torch.dtype, n_bytes: int, shape: tuple[int, int, bool, bool] | None = None
) -> tuple[bool, bool, bool] | None:
    """Which products of a CPU matrix of ``n_bytes`` in ``dtype`` (of ``shape``, as
    ``rows_product`` takes it) read a packed copy (one row, few rows, many rows), or None where it
    gets none: it gets one where ``one_row_product`` or ``rows_product`` (for few rows or for many)
    picks "packed". One row then reads it where ``one_row_product`` picks either of oneDNN's (the
    packed copy reads no slower than the plain)."""
    few, many = (rows_product(dtype, n, n_bytes, shape) == "packed" for n in (2, FEW_ROWS + 1))
    one = one_row_product(dtype, n_bytes)
    if not (few or many or one == "packed"):
        return None
    return one != "blas", few, many


def pack(w_OE: torch.Tensor) -> torch.Tensor:
    """[O,E] (any strides) -> oneDNN's copy of it, reordered once into the layout its matmul reads
    (an opaque ``torch._mkldnn`` tensor; ``onednn_linear`` multiplies it)."""
    return torch.ops.mkldnn._reorder_linear_weight(w_OE.contiguous(), FEW_ROWS)


def packed_weight(w_OE: torch.Tensor) -> PackedWeight | None:
    """The ``PackedWeight`` that ``w_OE`` (a weight, or its [O,E] view) carries, or None."""
    return getattr(w_OE, _PACKED, None)


def packed_for(w_OE: torch.Tensor, x: torch.Tensor) -> torch.Tensor | None:
    """The packed copy of ``w_OE`` if it has one (``packed_weight``) and it serves as many rows as
    ``x`` holds (one row for a vector); else None: the plain weights' product. Under
    ``torch.compile``, None: the compiler picks its own kernels."""
    packed = getattr(w_OE, _PACKED, None)
    if packed is None or torch.compiler.is_compiling():
        return None
    n_rows = 1 if x.dim() == 1 else x.numel() // x.shape[-1]
    use = packed.one_row if n_rows == 1 else packed.few_rows if n_rows <= FEW_ROWS else packed.many_rows
    return packed.tensor if use else None


def out_in_view(w_EO: torch.Tensor) -> torch.Tensor:
    """[E,O] -> its [O,E] view (``.mT``), carrying the packed copy along where it has one."""
    view = w_EO.mT
    packed = getattr(w_EO, _PACKED, None)
    if packed is not None:
        setattr(view, _PACKED, packed)
    return view


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

    def mat(self, *parts_EO: Any, as_is: bool | None = None, bias: bool = True) -> torch.Tensor:
        """[E, O] matrices side by side -> one [E, sum O] matrix, stored as it is when ``as_is``
        (by default: as ``row_major`` says), else transposed, and returned as an [E, sum O] view
        (fused projections: ``w_qkv``, ``w_gate_up``). On a CPU where ``packed_uses`` says so (for
        a product with a bias, or without), with a ``PackedWeight`` that its [O, E] view
        (``out_in_view``) carries to every product."""
        tensors = [_tensor(p) for p in parts_EO]
        w_EO = tensors[0] if len(tensors) == 1 else torch.cat(tensors, dim=1)
        as_is = row_major(self.device, *w_EO.shape, self.dtype) if as_is is None else as_is
        stored_EO = self.vec(w_EO) if as_is else self.vec(w_EO.mT).mT
        uses = None
        if self.device.type == "cpu":
            n_bytes, shape = stored_EO.numel() * _itemsize(self.dtype), (*w_EO.shape, as_is, bias)
            uses = packed_uses(self.dtype, n_bytes, shape)
        if uses is not None:
            setattr(stored_EO, _PACKED, PackedWeight(pack(stored_EO.mT), *uses))
        return stored_EO

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
            return out_in_view(self.mat(_tensor(w_VD).T, as_is=self.device.type == "cpu", bias=False))

        if head_VD is None:
            head = head_rows(wte_VD)
            return (head[:n_vocab] if n_pad else head), head
        return self.vec(wte_VD), head_rows(head_VD)

    @staticmethod
    def padded_rows(n_vocab: int, device: torch.device) -> int:
        """How many zero rows the LM head gets on ``device``."""
        return -n_vocab % VOCAB_MULTIPLE.get(device.type, 1)
