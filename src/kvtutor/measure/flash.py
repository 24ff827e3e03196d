"""Attention that streams the cache: FlashAttention's online softmax and FlashDecoding's split-KV.

Plain attention forms all T x S scores of a head at once, then their softmax, then A V: three
passes over memory. FlashAttention reads the keys and values in blocks of P positions instead and
keeps three running quantities per query row: the largest score seen so far (m), the sum of
exp(score - m) (l) and the output so far, not yet divided by l (acc). A block that raises the
maximum first rescales the old sum and output by exp(m_old - m_new), then adds its own share. The
result is the same softmax (up to rounding), with one block of scores alive at a time, and every
exponent is <= 0: scores of 1e4 do not overflow.

Decode has one query row per head: too little work to fill a GPU when the cache is long.
FlashDecoding splits the S keys into N splits, attends to each split on its own (in parallel on a
GPU) and merges the N partial outputs with their log-sum-exp. The merge is exact, and partials can
be merged in any grouping.

Letters beyond the package's key (``kvtutor.__doc__``): P counts the key positions in one block or
split (as in the paged cache), N the splits. The NumPy functions take one sequence ([H, T, K]);
the ``*_torch`` twins take a batch ([B, H, T, K]) and import torch only when called. Keys and
values may have fewer heads (Hkv) than the queries (H = G Hkv: GQA/MQA); the torch twins give each
KV head its G query heads as G T query rows, so K and V are read once and never repeated. With
``causal`` the T queries are the last T of the S positions, the book's bottom-right mask.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

import numpy as np

from ..models.gpt2 import apply_mask, attention_scores, repeat_kv
from ..validate import check_int, check_qkv, check_tensors, torch_compute_dtype, torch_device

__all__ = [
    "key_blocks", "block_mask", "online_softmax_step", "online_softmax_attention", "Partial",
    "split_bounds", "attend_split", "combine_splits", "split_kv_decode", "online_softmax_step_torch",
    "online_softmax_attention_torch", "TorchPartial", "attend_split_torch", "combine_splits_torch",
    "split_kv_decode_torch", "plain_attention_torch", "SDPA_BACKENDS", "SDPABackend", "sdpa_backend",
    "measure_decode_attention",
]  # fmt: skip


# ---------------------------------------------------------------- FlashAttention: online softmax


def key_blocks(n_keys: int, block_size: int) -> list[tuple[int, int]]:
    """S, P -> (lo, hi) of each block: keys lo .. hi-1, P at a time (the
    last block keeps what is left)."""
    starts = range(0, n_keys, block_size)
    return [(lo, min(lo + block_size, n_keys)) for lo in starts]


def block_mask(n_queries: int, n_keys: int, lo: int, hi: int) -> np.ndarray:
    """T, S, block lo .. hi-1 -> [T,P] bool: the columns lo .. hi-1 of
    causal_mask(T, S), built without the other columns."""
    offset = n_keys - n_queries
    return np.arange(lo, hi)[None, :] <= np.arange(n_queries)[:, None] + offset


def online_softmax_step(
    m_HT: np.ndarray,
    l_HT: np.ndarray,
    acc_HTK: np.ndarray,
    s_HTP: np.ndarray,
    v_HPK: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[H,T], [H,T], [H,T,K], [H,T,P], [H,P,K] -> m, l, acc: fold one block
    of scaled, masked scores into the running max, sum and output.

    Every exponent is <= 0, so nothing overflows. A row needs a visible key
    in the first block it sees (key 0 is visible to every query).

    The book shows this in "Attention that streams the cache:
    FlashAttention and FlashDecoding".
    """
    m_new_HT = np.maximum(m_HT, s_HTP.max(axis=-1))
    alpha_HT = np.exp(m_HT - m_new_HT)  # rescales what came before
    p_HTP = np.exp(s_HTP - m_new_HT[..., None])
    l_new_HT = alpha_HT * l_HT + p_HTP.sum(axis=-1)
    acc_new_HTK = alpha_HT[..., None] * acc_HTK + p_HTP @ v_HPK
    return m_new_HT, l_new_HT, acc_new_HTK


def online_softmax_attention(
    q_HTK: np.ndarray,
    k_HSK: np.ndarray,
    v_HSK: np.ndarray,
    block_size: int,
    causal: bool = True,
    trace: list[dict[str, Any]] | None = None,
) -> np.ndarray:
    """[H,T,K], [Hkv,S,K], [Hkv,S,K], P -> [H,T,K]: softmax attention, one
    block of P keys at a time; the T x S scores never exist at once.

    ``trace``, if a list, receives a dict per block: lo, hi, its scores
    s_HTP and the running m_HT, l_HT, acc_HTK after it."""
    q_HTK, k_HSK, v_HSK, group, n_keys = check_qkv(
        q_HTK, k_HSK, v_HSK, "q_HTK", causal
    )  # fmt: skip
    block_size = check_int("block_size", block_size, low=1)
    n_heads, n_queries, d_head = q_HTK.shape
    dtype = np.result_type(q_HTK, k_HSK, v_HSK)
    m_HT = np.full((n_heads, n_queries), -np.inf, dtype)
    l_HT = np.zeros((n_heads, n_queries), dtype)
    acc_HTK = np.zeros((n_heads, n_queries, d_head), dtype)
    for lo, hi in key_blocks(n_keys, block_size):
        k_HPK = repeat_kv(k_HSK[:, lo:hi], group)
        v_HPK = repeat_kv(v_HSK[:, lo:hi], group)
        s_HTP = attention_scores(q_HTK, k_HPK) / math.sqrt(d_head)
        if causal:
            mask_TP = block_mask(n_queries, n_keys, lo, hi)
            s_HTP = apply_mask(s_HTP, mask_TP)
        m_HT, l_HT, acc_HTK = online_softmax_step(
            m_HT, l_HT, acc_HTK, s_HTP, v_HPK
        )  # fmt: skip
        if trace is not None:
            trace.append({"lo": lo, "hi": hi, "s_HTP": s_HTP, "m_HT": m_HT,
                          "l_HT": l_HT, "acc_HTK": acc_HTK})  # fmt: skip
    return acc_HTK / l_HT[..., None]


# ---------------------------------------------------------------- FlashDecoding: split-KV


class Partial(NamedTuple):
    """Attention over some of the keys: the output over them (normalised
    over them alone), their largest score m and their log-sum-exp lse."""

    o_HTK: np.ndarray
    m_HT: np.ndarray
    lse_HT: np.ndarray


def split_bounds(n_keys: int, n_splits: int) -> list[tuple[int, int]]:
    """S, N -> (lo, hi) of each split: N runs of keys whose lengths differ
    by at most one (the first S % N are one longer)."""
    size, extra = divmod(n_keys, n_splits)
    sizes = [size + 1 if i < extra else size for i in range(n_splits)]
    ends = np.cumsum(sizes).tolist()
    return [(end - n, end) for n, end in zip(sizes, ends, strict=True)]


def attend_split(
    q_HTK: np.ndarray,
    k_HPK: np.ndarray,
    v_HPK: np.ndarray,
) -> Partial:
    """[H,T,K], [H,P,K], [H,P,K] -> Partial: attention over one split's P
    keys, with the split's max and log-sum-exp for the merge.

    The book shows this in "Attention that streams the cache:
    FlashAttention and FlashDecoding".
    """
    s_HTP = attention_scores(q_HTK, k_HPK) / math.sqrt(q_HTK.shape[-1])
    m_HT = s_HTP.max(axis=-1)
    p_HTP = np.exp(s_HTP - m_HT[..., None])
    l_HT = p_HTP.sum(axis=-1)
    o_HTK = (p_HTP @ v_HPK) / l_HT[..., None]
    return Partial(o_HTK, m_HT, m_HT + np.log(l_HT))


def combine_splits(partials: Sequence[Partial]) -> Partial:
    """N Partials -> one Partial over all their keys, exactly: each output
    weighs exp(lse - top), its share of the whole softmax's sum.

    The book shows this in "Attention that streams the cache:
    FlashAttention and FlashDecoding".
    """
    o_NHTK = np.stack([p.o_HTK for p in partials])
    lse_NHT = np.stack([p.lse_HT for p in partials])
    top_HT = lse_NHT.max(axis=0)
    w_NHT = np.exp(lse_NHT - top_HT)  # every exponent <= 0
    total_HT = w_NHT.sum(axis=0)
    o_HTK = (w_NHT[..., None] * o_NHTK).sum(axis=0) / total_HT[..., None]
    m_HT = np.max([p.m_HT for p in partials], axis=0)
    return Partial(o_HTK, m_HT, top_HT + np.log(total_HT))


def split_kv_decode(
    q_HK: np.ndarray,
    k_HSK: np.ndarray,
    v_HSK: np.ndarray,
    n_splits: int,
) -> np.ndarray:
    """[H,K] or [H,1,K], [Hkv,S,K], [Hkv,S,K], N -> shaped like q: one query
    per head against S keys in N splits, merged by combine_splits."""
    squeeze = np.ndim(q_HK) == 2  # [H,K] in, [H,K] out
    q_H1K, k_HSK, v_HSK, group, n_keys = check_qkv(
        q_HK, k_HSK, v_HSK, "q_HK"
    )  # fmt: skip
    n_splits = check_int("n_splits", n_splits, low=1, high=n_keys)
    partials = [
        attend_split(
            q_H1K,
            repeat_kv(k_HSK[:, lo:hi], group),
            repeat_kv(v_HSK[:, lo:hi], group),
        )
        for lo, hi in split_bounds(n_keys, n_splits)
    ]
    o_H1K = combine_splits(partials).o_HTK
    return o_H1K[:, 0] if squeeze else o_H1K


# ---------------------------------------------------------------- the torch twins, batched


def _rows(q_BHTK: Any, n_kv_heads: int) -> Any:
    """[B,H,T,K] -> [B,Hkv,G*T,K]: the G query heads that share a KV head become G*T query rows of
    that head (a view), so K and V are read once per KV head and never repeated."""
    b, h, t, d = q_BHTK.shape
    return q_BHTK.reshape(b, n_kv_heads, (h // n_kv_heads) * t, d)


def _dtypes(*tensors: Any) -> tuple[Any, Any]:
    """(the output's dtype, the dtype of the scores, running max, sum and output: at least float32,
    as in the real kernels, for bf16/fp16 inputs)."""
    import torch

    dtype = tensors[0].dtype
    for x in tensors[1:]:
        dtype = torch.promote_types(dtype, x.dtype)
    return dtype, torch.promote_types(dtype, torch.float32)


def online_softmax_step_torch(
    m_BHT: Any,
    l_BHT: Any,
    acc_BHTK: Any,
    s_BHTP: Any,
    v_BHPK: Any,
) -> tuple[Any, Any, Any]:
    """[B,H,T], [B,H,T], [B,H,T,K], [B,H,T,P], [B,H,P,K] -> m, l, acc:
    online_softmax_step in torch (floating tensors of one dtype and device)."""
    check_tensors({"m_BHT": m_BHT, "l_BHT": l_BHT, "acc_BHTK": acc_BHTK, "s_BHTP": s_BHTP, "v_BHPK": v_BHPK})
    return _online_softmax_step_torch(m_BHT, l_BHT, acc_BHTK, s_BHTP, v_BHPK)


def _online_softmax_step_torch(
    m_BHT: Any, l_BHT: Any, acc_BHTK: Any, s_BHTP: Any, v_BHPK: Any
) -> tuple[Any, Any, Any]:
    """``online_softmax_step_torch`` without its checks (for callers that checked their inputs)."""
    import torch

    m_new_BHT = torch.maximum(m_BHT, s_BHTP.amax(dim=-1))
    alpha_BHT = torch.exp(m_BHT - m_new_BHT)
    p_BHTP = torch.exp(s_BHTP - m_new_BHT[..., None])
    l_new_BHT = alpha_BHT * l_BHT + p_BHTP.sum(dim=-1)
    acc_new_BHTK = alpha_BHT[..., None] * acc_BHTK + p_BHTP @ v_BHPK
    return m_new_BHT, l_new_BHT, acc_new_BHTK


def online_softmax_attention_torch(
    q_BHTK: Any,
    k_BHSK: Any,
    v_BHSK: Any,
    block_size: int,
    causal: bool = True,
) -> Any:
    """[B,H,T,K], [B,Hkv,S,K], [B,Hkv,S,K], P -> [B,H,T,K]: the batched
    online_softmax_attention; a KV head's G query heads are its G*T rows."""
    import torch

    q_BHTK, k_BHSK, v_BHSK, group, n_keys = check_qkv(
        q_BHTK, k_BHSK, v_BHSK, "q_BHTK", causal
    )  # fmt: skip
    block_size = check_int("block_size", block_size, low=1)
    b, h, n_queries, d_head = q_BHTK.shape
    out_dtype, dtype = _dtypes(q_BHTK, k_BHSK, v_BHSK)
    device = q_BHTK.device
    q_BHTK = _rows(q_BHTK, h // group).to(dtype)
    rows = q_BHTK.shape[2]  # G*T
    # the position of each row's query: S - T + t, for each of the G heads
    pos_T = torch.arange(n_queries, device=device) + n_keys - n_queries
    pos_T = pos_T.repeat(group)
    m_BHT = q_BHTK.new_full((b, h // group, rows), -math.inf)
    l_BHT = q_BHTK.new_zeros((b, h // group, rows))
    acc_BHTK = torch.zeros_like(q_BHTK)
    for lo, hi in key_blocks(n_keys, block_size):
        k_BHPK = k_BHSK[:, :, lo:hi].to(dtype)
        v_BHPK = v_BHSK[:, :, lo:hi].to(dtype)
        s_BHTP = q_BHTK @ k_BHPK.transpose(-1, -2) / math.sqrt(d_head)
        if causal:
            keys_P = torch.arange(lo, hi, device=device)
            mask_TP = keys_P[None, :] <= pos_T[:, None]
            s_BHTP = s_BHTP.masked_fill(~mask_TP, -math.inf)
        m_BHT, l_BHT, acc_BHTK = _online_softmax_step_torch(
            m_BHT, l_BHT, acc_BHTK, s_BHTP, v_BHPK
        )  # fmt: skip
    o_BHTK = acc_BHTK / l_BHT[..., None]
    return o_BHTK.reshape(b, h, n_queries, d_head).to(out_dtype)


class TorchPartial(NamedTuple):
    """Partial, batched: torch tensors [B,H,T,K], [B,H,T], [B,H,T]."""

    o_BHTK: Any
    m_BHT: Any
    lse_BHT: Any


def attend_split_torch(
    q_BHTK: Any,
    k_BHPK: Any,
    v_BHPK: Any,
) -> TorchPartial:
    """[B,H,T,K], [B,H,P,K], [B,H,P,K] -> TorchPartial: attend_split in
    torch. K and V are read in their own dtype (bf16 stays bf16, P is
    rounded to it for P V, as in the real kernels); the scores, max, sum
    and output are kept in at least float32. One dtype and device for all
    three; H and K the same in q and k."""
    check_tensors({"q_BHTK": q_BHTK, "k_BHPK": k_BHPK, "v_BHPK": v_BHPK})
    return _attend_split_torch(q_BHTK, k_BHPK, v_BHPK)


def _attend_split_torch(q_BHTK: Any, k_BHPK: Any, v_BHPK: Any) -> TorchPartial:
    """``attend_split_torch`` without its checks (for callers that checked their inputs)."""
    import torch

    dtype = q_BHTK.dtype if q_BHTK.dtype.itemsize >= 4 else torch.float32
    s_BHTP = (q_BHTK @ k_BHPK.transpose(-1, -2)).to(dtype) / math.sqrt(q_BHTK.shape[-1])
    m_BHT = s_BHTP.amax(dim=-1)
    p_BHTP = torch.exp(s_BHTP - m_BHT[..., None])
    l_BHT = p_BHTP.sum(dim=-1)
    o_BHTK = (p_BHTP.to(v_BHPK.dtype) @ v_BHPK).to(dtype) / l_BHT[..., None]
    return TorchPartial(o_BHTK, m_BHT, m_BHT + torch.log(l_BHT))


def combine_splits_torch(partials: Sequence[TorchPartial]) -> TorchPartial:
    """N TorchPartials -> one TorchPartial over all their keys: combine_splits
    in torch (N >= 1, all of one shape, dtype and device)."""
    if isinstance(partials, (str, bytes)) or not isinstance(partials, Sequence) or not partials:
        raise ValueError(f"partials: expected a non-empty list of TorchPartial, got {partials!r:.60}")
    named = {}
    for i, p in enumerate(partials):
        if not (isinstance(p, tuple) and len(p) == 3):
            raise TypeError(f"partials[{i}]: expected a TorchPartial (o, m, lse), got {type(p).__name__}")
        named |= {f"partials[{i}].{n}": t for n, t in zip(("o_BHTK", "m_BHT", "lse_BHT"), p, strict=True)}
    check_tensors(named)
    return _combine_splits_torch(partials)


def _combine_splits_torch(partials: Sequence[TorchPartial]) -> TorchPartial:
    """``combine_splits_torch`` without its checks (for callers that checked their inputs)."""
    import torch

    o_NBHTK = torch.stack([p.o_BHTK for p in partials])
    lse_NBHT = torch.stack([p.lse_BHT for p in partials])
    top_BHT = lse_NBHT.amax(dim=0)
    w_NBHT = torch.exp(lse_NBHT - top_BHT)  # every exponent <= 0
    total_BHT = w_NBHT.sum(dim=0)
    o_BHTK = (w_NBHT[..., None] * o_NBHTK).sum(dim=0) / total_BHT[..., None]
    m_BHT = torch.stack([p.m_BHT for p in partials]).amax(dim=0)
    return TorchPartial(o_BHTK, m_BHT, top_BHT + torch.log(total_BHT))


def split_kv_decode_torch(
    q_BHK: Any,
    k_BHSK: Any,
    v_BHSK: Any,
    n_splits: int,
) -> Any:
    """[B,H,K] or [B,H,1,K], [B,Hkv,S,K], [B,Hkv,S,K], N -> shaped like q:
    the batched split_kv_decode; a KV head's G query heads are its G rows."""
    squeeze = getattr(q_BHK, "ndim", 0) == 3  # [B,H,K] in, [B,H,K] out
    q_BH1K, k_BHSK, v_BHSK, group, n_keys = check_qkv(
        q_BHK, k_BHSK, v_BHSK, "q_BHK"
    )  # fmt: skip
    n_splits = check_int("n_splits", n_splits, low=1, high=n_keys)
    out_dtype = _dtypes(q_BH1K, k_BHSK, v_BHSK)[0]  # a copy only if mixed
    b, h, _, d_head = q_BH1K.shape
    q_BHTK = _rows(q_BH1K, h // group).to(out_dtype)  # T = G rows
    partials = [
        _attend_split_torch(
            q_BHTK,
            k_BHSK[:, :, lo:hi].to(out_dtype),
            v_BHSK[:, :, lo:hi].to(out_dtype),
        )
        for lo, hi in split_bounds(n_keys, n_splits)
    ]
    o_BHTK = _combine_splits_torch(partials).o_BHTK
    o_BH1K = o_BHTK.reshape(b, h, 1, d_head).to(out_dtype)
    return o_BH1K[:, :, 0] if squeeze else o_BH1K


def plain_attention_torch(q_BHTK: Any, k_BHSK: Any, v_BHSK: Any) -> Any:
    """[B,H,T,K], [B,Hkv,S,K], [B,Hkv,S,K] -> [B,H,T,K], no mask (decode):
    scores, softmax and A V as three separate ops, each through memory (one
    dtype and device for all three)."""
    check_qkv(q_BHTK, k_BHSK, v_BHSK, "q_BHTK", same_dtype=True)
    return _plain_attention_torch(q_BHTK, k_BHSK, v_BHSK)


def _plain_attention_torch(q_BHTK: Any, k_BHSK: Any, v_BHSK: Any) -> Any:
    """``plain_attention_torch`` without its checks (for callers that checked their inputs)."""
    import torch

    b, h, n_queries, d_head = q_BHTK.shape
    rows_BHTK = _rows(q_BHTK, k_BHSK.shape[1])
    s_BHTS = rows_BHTK @ k_BHSK.transpose(-1, -2) / math.sqrt(d_head)
    a_BHTS = torch.softmax(s_BHTS, dim=-1)
    return (a_BHTS @ v_BHSK).reshape(b, h, n_queries, d_head)


# ---------------------------------------------------------------- which SDPA kernel runs, and how fast

#: The names ``sdpa_backend`` returns, and what each stands for.
SDPA_BACKENDS: dict[str, str] = {
    "flash": "FlashAttention (aten::_scaled_dot_product_flash_attention; _for_cpu on a CPU)",
    "efficient": "memory-efficient attention (aten::_scaled_dot_product_efficient_attention)",
    "cudnn": "cuDNN's fused attention (aten::_scaled_dot_product_cudnn_attention)",
    "math": "the composite: scores, softmax and A V as separate ops (..._attention_math)",
    "other": "an op not in this table (a newer backend, or a device's own)",
}


class SDPABackend(NamedTuple):
    """Which kernel ran scaled_dot_product_attention: its SDPA_BACKENDS name, the profiler's op."""

    name: str
    op: str


@contextmanager
def _quiet_stderr() -> Iterator[None]:
    """File descriptor 2 to /dev/null for a moment: some torch builds' profiler writes a timestamped
    line there at start and stop, which a notebook would show."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no descriptor 2: nothing to silence
        yield
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def _sizes(**sizes: Any) -> dict[str, int]:
    """Ints >= 1 by name (``check_int``); n_kv_heads, where given, must divide n_heads."""
    out = {name: check_int(name, value, low=1) for name, value in sizes.items()}
    if "n_kv_heads" in out and out["n_heads"] % out["n_kv_heads"]:
        raise ValueError(f"n_kv_heads: expected a divisor of n_heads = {out['n_heads']}, "
                         f"got {out['n_kv_heads']}")  # fmt: skip
    return out


def sdpa_backend(
    n_queries: int = 1,
    n_keys: int = 1024,
    n_heads: int = 8,
    n_kv_heads: int | None = None,
    d_head: int = 64,
    batch_size: int = 1,
    dtype: Any = "float32",
    device: str | None = None,
    is_causal: bool = False,
) -> SDPABackend:
    """Which kernel runs F.scaled_dot_product_attention for these shapes
    here: run it once under torch.profiler and read the aten op it chose.

    n_kv_heads defaults to n_heads (fewer: GQA), device to default_device().
    """
    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile

    n = _sizes(
        n_queries=n_queries,
        n_keys=n_keys,
        n_heads=n_heads,
        n_kv_heads=n_heads if n_kv_heads is None else n_kv_heads,
        d_head=d_head,
        batch_size=batch_size,
    )
    b, d, h_kv = n["batch_size"], n["d_head"], n["n_kv_heads"]
    dev = torch_device(device)
    like = {"dtype": torch_compute_dtype(dtype, dev), "device": dev}
    q = torch.zeros(b, n["n_heads"], n["n_queries"], d, **like)
    k = torch.zeros(b, h_kv, n["n_keys"], d, **like)  # values don't matter
    gqa = h_kv != n["n_heads"]
    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
        F.scaled_dot_product_attention(
            q, k, k, is_causal=is_causal, enable_gqa=gqa
        )  # fmt: skip
    ops = [e.name for e in prof.events()]
    ops = [op for op in ops if op.startswith("aten::_scaled_dot_product")]
    if not ops:  # the composite, decomposed where it was called
        return SDPABackend("math", "aten::scaled_dot_product_attention")
    known = ("flash", "efficient", "cudnn", "math")
    name = next((n for n in known if n in ops[0]), "other")
    return SDPABackend(name, ops[0])


def _decode_ways(q_BHK: Any, k_BHSK: Any, v_BHSK: Any, n_splits: int) -> dict[str, Callable[[], Any]]:
    """The three ways ``measure_decode_attention`` times, as calls without arguments."""
    import torch.nn.functional as F

    q_BHTK, gqa = q_BHK[:, :, None], k_BHSK.shape[1] != q_BHK.shape[1]
    return {
        "plain": lambda: _plain_attention_torch(q_BHTK, k_BHSK, v_BHSK),
        "sdpa": lambda: F.scaled_dot_product_attention(q_BHTK, k_BHSK, v_BHSK, enable_gqa=gqa),
        "split_kv": lambda: split_kv_decode_torch(q_BHK, k_BHSK, v_BHSK, n_splits),
    }


def measure_decode_attention(
    contexts: Sequence[int] = (1024, 4096, 16384, 32768),
    n_heads: int = 32,
    n_kv_heads: int = 8,
    d_head: int = 128,
    n_splits: int = 8,
    dtype: Any = "float32",
    device: str | None = None,
    min_run_time: float = 0.05,
    num_threads: int | None = None,
    rounds: int = 3,
) -> list[dict[str, Any]]:
    """One decode step's attention (batch 1, one query) per context length:
    plain_attention_torch, PyTorch's SDPA and split_kv_decode_torch, each
    timed with time_fn and set against the read bandwidth of a GEMV (up to
    128 MiB, measured before and after each round: the best of them).

    Defaults: one layer of an 8B Llama (32 heads, 8 KV heads, K = 128). The
    caches are slices of one buffer, as in a preallocated cache; short ones
    fit in the CPU's caches and may beat the ceiling. The rounds interleave
    every way and context, and each time is the median over the rounds. A
    row per context: keys, kv_bytes (K and V read), plain_s, sdpa_s,
    split_kv_s (seconds), plain, sdpa, split_kv (bytes per second / the
    ceiling), plain_ops, sdpa_ops, split_kv_ops (``timing.count_ops``),
    ceiling_bytes_per_s and sdpa_backend (its name).
    """
    import torch

    from .timing import count_ops, gemv_probe, time_fn

    if isinstance(contexts, str) or not contexts:
        raise ValueError(f"contexts: expected key counts, got {contexts!r}")
    contexts = list(_sizes(**{f"contexts[{i}]": s for i, s in enumerate(contexts)}).values())
    n = _sizes(n_heads=n_heads, n_kv_heads=n_kv_heads, d_head=d_head)
    n_splits = check_int("n_splits", n_splits, 1, min(contexts))
    rounds = check_int("rounds", rounds, low=1)
    if not min_run_time > 0:
        raise ValueError(f"min_run_time: expected > 0 s, got {min_run_time}")
    dev = torch_device(device)
    device = str(dev)
    like = {"dtype": torch_compute_dtype(dtype, dev), "device": dev}
    q_BHK = torch.randn(1, n["n_heads"], n["d_head"], **like)
    shape = (1, n["n_kv_heads"], max(contexts), n["d_head"])
    k_BHMK, v_BHMK = (torch.empty(shape, **like).uniform_(-1, 1) for _ in "kv")
    # the ceiling: a float32 GEMV matrix as large as K and V together,
    # from 4 MiB to 128 MiB (past the last-level cache of a CPU or GPU)
    side = math.isqrt(min(2 * k_BHMK.nbytes, 128 << 20) // 4) // 256 * 256
    probe = gemv_probe(max(side, 1024), device)
    timing = {"min_run_time": min_run_time, "num_threads": num_threads}
    repeats = {"warmup": 1, "min_repeats": 3}  # seconds, for a notebook
    ceilings = [probe(**timing)["bytes_per_s"]]
    backend = sdpa_backend(1, max(contexts), dtype=dtype, device=device, **n)
    ways = [_decode_ways(q_BHK, k_BHMK[:, :, :s], v_BHMK[:, :, :s], n_splits) for s in contexts]
    times: list[dict[str, list[float]]] = [{way: [] for way in fns} for fns in ways]
    for _ in range(rounds):  # a change in the machine's load hits every way
        for fns, samples in zip(ways, times, strict=True):
            for way, fn in fns.items():
                samples[way].append(time_fn(fn, device, **timing, **repeats).median_s)
        ceilings.append(probe(**timing)["bytes_per_s"])
    rows = []
    for n_keys, fns, samples in zip(contexts, ways, times, strict=True):
        row: dict[str, Any] = {"keys": n_keys, "kv_bytes": 2 * k_BHMK[:, :, :n_keys].nbytes}
        for way, fn in fns.items():
            row[f"{way}_s"] = float(np.median(samples[way]))
            row[way] = row["kv_bytes"] / row[f"{way}_s"] / max(ceilings)
            row[f"{way}_ops"] = sum(count_ops(fn).values())
        rows.append(row | {"ceiling_bytes_per_s": max(ceilings), "sdpa_backend": backend.name})
    return rows
