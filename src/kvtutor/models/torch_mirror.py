"""The steps every torch family shares, batched [B, T]: the twins of ``kvtutor.models.steps``.

Every step keeps the NumPy name and argument order, with a batch dimension in front (``x_BTD``
instead of ``x_TD``, heads in the second place: ``q_BHTK``). What differs is how the work is laid
out for speed: Q, K and V come from one fused matrix (one matmul; ``w_q``, ``w_k``, ``w_v`` stay
as views of it), every weight is stored for ``F.linear`` or BLAS to read fast
(``torch_weights.row_major``), attention goes through ``F.scaled_dot_product_attention``, and the
cache is written in place (``kvtutor.caches.torch_kv``). The family's own steps are in
``torch_gpt2`` and ``torch_llama``; the checks every pass makes of its token ids are at the end.

Masks: a single query row (decode) needs none; a prompt on an empty cache (T = S) uses
``is_causal=True``; T > 1 new tokens after cached ones need the causal mask shifted by the cache
length, which we build explicitly (``is_causal`` with T != S aligns the triangle top-left, which
would hide keys the queries may see). Rows at different lengths get one mask per row
(``causal_mask`` and ``ragged_causal_mask`` live with the caches that build them).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..caches.protocol import Plan
from ..caches.torch_kv import causal_mask, host_empty, ragged_causal_mask
from ..validate import check_no_bool_ids, torch_compute_dtype, torch_device
from .torch_weights import one_row_onednn, onednn_linear, out_in_view, packed_for

__all__ = [
    "as_rows",
    "linear",
    "project_heads",
    "repeat_kv",
    "attention_scores",
    "causal_mask",
    "ragged_causal_mask",
    "sdpa",
    "merge_heads",
    "attention_core",
    "lm_head",
    "OutInViews",
    "resolve_device_dtype",
    "check_finite_weights",
    "token_ids",
    "check_batch",
]

_BIG_OUTPUT = 32 << 20  # bytes: above this glibc maps fresh pages for every allocation
_SDPA_GQA = tuple(int(p) for p in torch.__version__.split(".")[:2]) >= (2, 5)  # enable_gqa= exists


def as_rows(x_BTD: torch.Tensor) -> torch.Tensor:
    """[B,T,D] -> the rows of a decode step on the CPU (T = 1): [B,D], or the vector [D] for one
    sequence (B = 1); else x unchanged.

    Every step below takes either the batched [B,T,...] layout or these rows, as a CPU decode step
    runs (``run_pass``). A vector lets each matrix product be BLAS's matrix-vector product
    (``linear``), and rows spare the reshapes that a [B,1,D] tensor costs at every step: on a CPU
    a step is a few dozen small operations that each start cold after a large product, so fewer
    operations is what pays.
    """
    n_batch, n_new, _ = x_BTD.shape
    if n_new != 1 or x_BTD.is_cuda:
        return x_BTD
    return x_BTD.view(-1) if n_batch == 1 else x_BTD.view(n_batch, -1)


def linear(x_BTE: torch.Tensor, w_OE: torch.Tensor, b_O: torch.Tensor | None) -> torch.Tensor:
    """[B,T,E], [B,E] or [E], [O,E], [O] -> [B,T,O], [B,O] or [O]: x @ W + b for W = w_OE.T; a GEMM
    for a batch; for one row given as a vector (``as_rows``), the product of one row that streams
    fastest on this CPU: BLAS's matrix-vector product (``addmv``) or oneDNN's matmul of one row
    (``torch_weights.one_row_product``, measured once; small matrices take BLAS's:
    ``one_row_onednn``); where the matrix has a packed copy and this CPU's product for these
    rows is oneDNN's, that copy (``torch_weights.packed_for``: bf16 on matrix units, a few rows).

    ``w_OE`` is the [out, in] layout that ``F.linear`` and BLAS read, the layer's ``*_OE`` view of
    its [E, O] matrix (``TorchLayerWeights``): made once, so no step pays for a transposed view.
    """
    packed = packed_for(w_OE, x_BTE)
    if packed is not None:
        return onednn_linear(x_BTE, packed, b_O)
    if x_BTE.dim() != 1:
        return F.linear(x_BTE, w_OE, b_O)
    if one_row_onednn(w_OE):
        return onednn_linear(x_BTE, w_OE, b_O)
    return torch.mv(w_OE, x_BTE) if b_O is None else torch.addmv(b_O, w_OE, x_BTE)


def project_heads(
    x_BTD: torch.Tensor, layer: Any, config: Any
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """[B,T,D], [B,D] or [D] -> q [B,H,T,K], k and v [B,Hkv,T,K]: one matmul with [W_Q | W_K | W_V]
    (``layer.w_qkv``, ``b_qkv``), then the heads split off as views (NumPy's ``project_qkv`` and
    ``split_heads`` in one: GPT-2 and Llama share it)."""
    qkv = linear(x_BTD, layer.w_qkv_OE, layer.b_qkv)
    if qkv.dim() < 3:  # decode rows (T = 1): (B, H + 2 Hkv, 1, K) directly
        heads_BNTK = qkv.view(qkv.shape[0] if qkv.dim() == 2 else 1, -1, 1, config.d_head)
    else:
        heads_BNTK = qkv.unflatten(-1, (-1, config.d_head)).transpose(1, 2)  # (B, H + 2 Hkv, T, K)
    return heads_BNTK.split_with_sizes([config.n_heads, config.n_kv_heads, config.n_kv_heads], dim=1)


def repeat_kv(k_BHSK: torch.Tensor, group_size: int) -> torch.Tensor:
    """[B,Hkv,S,K] -> [B,Hkv*group_size,S,K]: each KV head serves group_size query heads (GQA/MQA)."""
    return k_BHSK if group_size == 1 else k_BHSK.repeat_interleave(group_size, dim=1)


def attention_scores(q_BHTK: torch.Tensor, k_BHSK: torch.Tensor) -> torch.Tensor:
    """[B,H,T,K], [B,H,S,K] -> [B,H,T,S]: the raw dot products q_t . k_s (not yet scaled)."""
    return q_BHTK @ k_BHSK.mT


def sdpa(
    q_BHTK: torch.Tensor,
    k_BHSK: torch.Tensor,
    v_BHSK: torch.Tensor,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
    group_size: int = 1,
) -> torch.Tensor:
    """[B,H,T,K], [B,Hkv,S,K], [B,Hkv,S,K] -> [B,H,T,K]: scores, mask, softmax and attend in one fused kernel.

    Equals NumPy's ``attend(attention_weights(attention_scores(q, repeat_kv(k)), K, mask), repeat_kv(v))``
    (``gpt2``'s step functions; ``tests/test_torch_gpt2.py`` checks it).
    """
    if group_size == 1:
        return F.scaled_dot_product_attention(q_BHTK, k_BHSK, v_BHSK, attn_mask=mask, is_causal=is_causal)
    if not _SDPA_GQA:
        k_BHSK, v_BHSK = repeat_kv(k_BHSK, group_size), repeat_kv(v_BHSK, group_size)
        return F.scaled_dot_product_attention(q_BHTK, k_BHSK, v_BHSK, attn_mask=mask, is_causal=is_causal)
    return F.scaled_dot_product_attention(
        q_BHTK, k_BHSK, v_BHSK, attn_mask=mask, is_causal=is_causal, enable_gqa=True
    )


def merge_heads(o_BHTK: torch.Tensor, like: torch.Tensor | None = None) -> torch.Tensor:
    """[B,H,T,K] -> [B, T, H*K], or for decode rows the rows of ``like`` ([B, H*K] or [H*K]:
    ``as_rows``)."""
    if like is not None and like.dim() < 3:  # reshape, not view: cuDNN may return [B,H,1,K] in another order
        return o_BHTK.reshape(*like.shape[:-1], -1)
    return o_BHTK.transpose(1, 2).flatten(2)  # (B, T, H*K): a copy unless T == 1


def attention_core(
    q_BHTK: torch.Tensor,
    k_new_BHTK: torch.Tensor,
    v_new_BHTK: torch.Tensor,
    group_size: int,
    cache: Any = None,
    layer_index: int = 0,
    plan: Plan | None = None,
) -> torch.Tensor:
    """[B,H,T,K], new [B,Hkv,T,K] keys and values -> [B,H,T,K]: store the new keys and values where
    ``plan`` says (with a cache) and attend to every key the cache's mask lets each query see;
    without a cache, to the T new ones under the plain causal mask. Every family shares it
    (``steps.attention_core``'s twin, with the cache write folded in)."""
    n_new = q_BHTK.shape[2]
    if cache is None:
        return sdpa(q_BHTK, k_new_BHTK, v_new_BHTK, None, n_new > 1, group_size)
    k_BHSK, v_BHSK, mask = cache.update(layer_index, k_new_BHTK, v_new_BHTK, plan)
    is_causal, n_keys = plan.is_causal, k_BHSK.shape[2]
    if mask is None and not is_causal and n_new > 1:  # causal, the T queries the last T of S keys
        if n_keys == n_new:
            is_causal = True
        else:
            mask = causal_mask(n_new, n_keys, q_BHTK.device)
    return sdpa(q_BHTK, k_BHSK, v_BHSK, mask, is_causal, group_size)


def lm_head(x_BTD: torch.Tensor, wte_VD: torch.Tensor) -> torch.Tensor:
    """[B,T,D], [V,D] -> [B,T,V]: logits, the token embedding used as the output matrix (tied)."""
    if x_BTD.dim() == 1:  # one row (``as_rows``): the product of one row, as every layer's
        return linear(x_BTD, wte_VD, None).view(1, 1, -1)
    if x_BTD.dim() == 2:  # decode rows (``as_rows``)
        return linear(x_BTD, wte_VD, None).unsqueeze(1)
    if x_BTD.is_cuda or packed_for(wte_VD, x_BTD) is not None:
        return linear(x_BTD, wte_VD, None)
    n_batch, n_new = x_BTD.shape[:2]
    n_bytes = n_batch * n_new * wte_VD.shape[0] * wte_VD.element_size()
    if n_bytes < _BIG_OUTPUT:
        return F.linear(x_BTD, wte_VD)
    # a large output (prefill logits): fresh memory would fault in 4 KiB at a time; use 2 MiB pages
    out_BTV = host_empty(n_bytes // wte_VD.element_size(), wte_VD.dtype).view(n_batch, n_new, -1)
    return torch.matmul(x_BTD, wte_VD.mT, out=out_BTV)


# ---------------------------------------------------------------- weights


class OutInViews:
    """``layer.w_x_OE``: the [out, in] view of the layer's [in, out] matrix ``w_x``, the layout
    ``linear`` hands to BLAS; made on first use and kept on the layer (an attribute, not a field:
    it is no weight of its own). Both torch models' layer weights have it."""

    def __getattr__(self, name: str) -> Any:  # only names the layer does not have yet
        if not name.endswith("_OE") or name.startswith("_"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        view = out_in_view(getattr(self, name.removesuffix("_OE")))  # with its packed copy
        setattr(self, name, view)
        return view


# ---------------------------------------------------------------- device and dtype of a torch model


def resolve_device_dtype(device: Any, dtype: Any) -> tuple[torch.device, torch.dtype]:
    """A device present here (default: CUDA when present) and a dtype the matmuls run in there
    (default: bf16 on CUDA, else float32; a torch dtype or a name such as ``"bf16"``), or an error
    naming the argument and the choices: ``validate.torch_device`` and ``validate.torch_compute_dtype``,
    the one check every torch model runs before it builds anything."""
    device = torch_device(device)
    if dtype is None:
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    return device, torch_compute_dtype(dtype, device)


def check_finite_weights(named: list[tuple[str, torch.Tensor]]) -> None:
    """Every weight finite in the dtype it is stored in, or a ValueError naming the first tensor that
    is not: a nan or inf in the weights given, or a number too large for the dtype (1e5 in float16)."""
    if not named:
        return
    finite = torch.stack([torch.isfinite(t).all() for _, t in named]).tolist()  # one sync
    for (name, t), ok in zip(named, finite, strict=True):
        if not ok:
            bad = ~torch.isfinite(t)
            where = [int(i) for i in torch.nonzero(bad)[0]]
            raise ValueError(
                f"{name}: expected finite weights in {t.dtype}, got {t[tuple(where)].item()} at index "
                f"{where} ({int(bad.sum())} non-finite in all): a nan or inf in the weights given, or a "
                f"number beyond the largest {t.dtype}, {torch.finfo(t.dtype).max:.4g}"
            )


# ---------------------------------------------------------------- checks the passes share


def token_ids(ids: Any, rank: int, vocab_size: int, name: str, device: torch.device) -> torch.Tensor:
    """Token ids (list, numpy or tensor) -> LongTensor on ``device``, or an error naming ``name``."""
    dims = {1: "[B]" if name.endswith("_B") else "[T]", 2: "[B, T]"}[rank]
    if isinstance(ids, (str, bytes)):
        raise TypeError(f"{name}: expected int token ids of shape {dims}, got {type(ids).__name__}")
    if not isinstance(ids, torch.Tensor):
        check_no_bool_ids(ids, name)
        try:
            ids = np.asarray(ids)
        except ValueError as err:  # ragged nested lists
            lengths = [len(row) if hasattr(row, "__len__") else "an int" for row in ids]
            got = f"rows of lengths {lengths}" if len(set(map(str, lengths))) > 1 else "rows nested deeper"
            raise ValueError(
                f"{name}: expected a rectangular {dims} array of token ids (rows of one length), got {got}"
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


def check_batch(ids: torch.Tensor, cache: Any, name: str) -> None:
    """A ValueError naming ``name`` unless ``ids`` [B, ...] has one row per row of ``cache``."""
    if ids.shape[0] != cache.batch_size:
        raise ValueError(
            f"{name}: expected the cache's batch size {cache.batch_size}, got {ids.shape[0]} rows"
        )
