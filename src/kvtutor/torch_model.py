"""The PyTorch model: the same GPT-2 as ``numpy_model``, batched [B, T], written for timing.

Every step keeps the NumPy name and argument order, with a batch dimension in front (``x_BTD``
instead of ``x_TD``, heads in the second place: ``q_BHTK``). What differs is how the work is laid
out for speed: Q, K and V come from one fused matrix (one matmul; ``w_q``, ``w_k``, ``w_v`` stay
as views of it), every weight is stored transposed, ``[out, in]`` and contiguous, the layout
``F.linear`` reads fastest, attention goes through ``F.scaled_dot_product_attention``, and the
cache is written in place (``kvtutor.torch_cache``).

Masks: a single query row (decode) needs none; a prompt on an empty cache (T = S) uses
``is_causal=True``; T > 1 new tokens after cached ones need the causal mask shifted by the cache
length, which we build explicitly (``is_causal`` with T != S aligns the triangle top-left, which
would hide keys the queries may see). Rows at different lengths get one mask per row.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from .config import ModelConfig
from .text import TEXT_WIDTH, wrap_call
from .gpt2_weights import (
    GPT2Weights,
    LayerWeights,
    gpt2_state_dict,
    random_weights,
    weights_from_state_dict,
)
from .torch_cache import (
    ConcatKVCache,
    StaticKVCache,
    TorchKVCache,
    _host_empty,
    _Plan,
    causal_mask,
    ragged_causal_mask,
)
from .validate import check_max_new_tokens, check_temperature

__all__ = [
    "embed",
    "layer_norm",
    "linear",
    "project_qkv",
    "split_heads",
    "repeat_kv",
    "attention_scores",
    "causal_mask",
    "ragged_causal_mask",
    "apply_mask",
    "softmax",
    "attention_weights",
    "attend",
    "sdpa",
    "merge_heads",
    "gelu",
    "ffn",
    "attention",
    "block",
    "lm_head",
    "sample",
    "TorchLayerWeights",
    "TorchModel",
    "default_device",
]

_BIG_OUTPUT = 32 << 20  # bytes: above this glibc maps fresh pages for every allocation
_SDPA_GQA = tuple(int(p) for p in torch.__version__.split(".")[:2]) >= (2, 5)  # enable_gqa= exists
_MIN_BUCKET = 64  # the shortest stretch of cache a fixed-shape decode step attends over
_VOCAB_MULTIPLE = {"cuda": 64}  # LM head rows padded to a multiple of this, per device type


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


# ---------------------------------------------------------------- the steps, batched mirrors of numpy_model


def embed(
    ids_BT: torch.Tensor, wte_VD: torch.Tensor, wpe_MD: torch.Tensor, start: int | torch.Tensor = 0
) -> torch.Tensor:
    """[B,T], [V,D], [M,D], int or [B] -> [B,T,D]: token plus position embedding, row b from start_b on."""
    n_new = ids_BT.shape[1]
    if isinstance(start, int):
        pos_TD = wpe_MD[start : start + n_new]  # every row at the same positions: a slice, no gather
        return F.embedding(ids_BT, wte_VD) + pos_TD
    pos_BT = start[:, None] + torch.arange(n_new, device=start.device)
    return F.embedding(ids_BT, wte_VD) + F.embedding(pos_BT, wpe_MD)


def layer_norm(x_BTD: torch.Tensor, g_D: torch.Tensor, b_D: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """[B,T,D], [D], [D] -> [B,T,D]"""
    return torch.layer_norm(x_BTD, g_D.shape, g_D, b_D, eps)


def linear(x_BTE: torch.Tensor, w_EF: torch.Tensor, b_F: torch.Tensor) -> torch.Tensor:
    """[B,T,E], [E,F], [F] -> [B,T,F]: x @ W + b; a GEMM when B*T > 1, a GEMV when B*T = 1.

    ``w_EF`` is a transposed view of a contiguous [F,E] tensor, so ``w_EF.mT`` is that tensor and
    ``F.linear`` multiplies without copying. One row on the CPU goes to ``addmv``, BLAS's own
    matrix-vector product, which streams the matrix faster than a GEMM of one row.
    """
    if x_BTE.numel() == x_BTE.shape[-1] and not x_BTE.is_cuda:
        return torch.addmv(b_F, w_EF.mT, x_BTE.reshape(-1)).view(x_BTE.shape[0], x_BTE.shape[1], -1)
    return F.linear(x_BTE, w_EF.mT, b_F)


def project_qkv(
    x_BTD: torch.Tensor, layer: TorchLayerWeights
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """[B,T,D] -> q [B,T,H*K], k [B,T,Hkv*K], v [B,T,Hkv*K]: one matmul with [W_Q | W_K | W_V], then split."""
    qkv_BTE = linear(x_BTD, layer.w_qkv, layer.b_qkv)
    q_width, kv_width = layer.w_q.shape[1], layer.w_k.shape[1]
    return (
        qkv_BTE.narrow(-1, 0, q_width),
        qkv_BTE.narrow(-1, q_width, kv_width),
        qkv_BTE.narrow(-1, q_width + kv_width, kv_width),
    )


def split_heads(x_BTD: torch.Tensor, n_heads: int) -> torch.Tensor:
    """[B, T, H*K] -> [B,H,T,K] (a view)"""
    n_batch, n_new, width = x_BTD.shape
    return x_BTD.view(n_batch, n_new, n_heads, width // n_heads).transpose(1, 2)  # (B, H, T, K)


def repeat_kv(k_BHSK: torch.Tensor, group_size: int) -> torch.Tensor:
    """[B,Hkv,S,K] -> [B,Hkv*group_size,S,K]: each KV head serves group_size query heads (GQA/MQA)."""
    return k_BHSK if group_size == 1 else k_BHSK.repeat_interleave(group_size, dim=1)


def attention_scores(q_BHTK: torch.Tensor, k_BHSK: torch.Tensor) -> torch.Tensor:
    """[B,H,T,K], [B,H,S,K] -> [B,H,T,S]: the raw dot products q_t . k_s (not yet scaled)."""
    return q_BHTK @ k_BHSK.mT


def apply_mask(scores_BHTS: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B,H,T,S], [T,S] or [B,1,T,S] bool -> [B,H,T,S]: -inf wherever the mask forbids looking."""
    return scores_BHTS.masked_fill(~mask, float("-inf"))


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """[..., S] -> [..., S]: rows that sum to 1."""
    return torch.softmax(x, dim=dim)


def attention_weights(scores_BHTS: torch.Tensor, d_head: int, mask: torch.Tensor | None) -> torch.Tensor:
    """[B,H,T,S], K, mask or None -> [B,H,T,S]: mask, divide by sqrt(K), softmax over keys."""
    if mask is not None:
        scores_BHTS = apply_mask(scores_BHTS, mask)
    return softmax(scores_BHTS / math.sqrt(d_head))


def attend(a_BHTS: torch.Tensor, v_BHSK: torch.Tensor) -> torch.Tensor:
    """[B,H,T,S], [B,H,S,K] -> [B,H,T,K]: each output row is a weighted mix of value rows."""
    return a_BHTS @ v_BHSK


def sdpa(
    q_BHTK: torch.Tensor,
    k_BHSK: torch.Tensor,
    v_BHSK: torch.Tensor,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
    group_size: int = 1,
) -> torch.Tensor:
    """[B,H,T,K], [B,Hkv,S,K], [B,Hkv,S,K] -> [B,H,T,K]: scores, mask, softmax and attend in one fused kernel.

    Equals ``attend(attention_weights(attention_scores(q, repeat_kv(k)), K, mask), repeat_kv(v))``.
    """
    if group_size == 1:
        return F.scaled_dot_product_attention(q_BHTK, k_BHSK, v_BHSK, attn_mask=mask, is_causal=is_causal)
    if not _SDPA_GQA:
        k_BHSK, v_BHSK = repeat_kv(k_BHSK, group_size), repeat_kv(v_BHSK, group_size)
        return F.scaled_dot_product_attention(q_BHTK, k_BHSK, v_BHSK, attn_mask=mask, is_causal=is_causal)
    return F.scaled_dot_product_attention(
        q_BHTK, k_BHSK, v_BHSK, attn_mask=mask, is_causal=is_causal, enable_gqa=True
    )


def merge_heads(o_BHTK: torch.Tensor) -> torch.Tensor:
    """[B,H,T,K] -> [B, T, H*K]"""
    n_batch, n_heads, n_new, d_head = o_BHTK.shape
    return o_BHTK.transpose(1, 2).reshape(n_batch, n_new, n_heads * d_head)  # (B, T, H*K)


def gelu(x: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    """[...] -> [...]: GELU, tanh approximation (GPT-2's 'gelu_new'); ``inplace`` overwrites x."""
    if inplace:
        return torch._C._nn.gelu_(x, approximate="tanh")
    return F.gelu(x, approximate="tanh")


def ffn(x_BTD: torch.Tensor, layer: TorchLayerWeights) -> torch.Tensor:
    """[B,T,D] -> [B,T,D]: W_fc [D,F], GELU, W_proj [F,D]."""
    h_BTF = linear(x_BTD, layer.w_fc, layer.b_fc)
    return linear(gelu(h_BTF, inplace=True), layer.w_proj, layer.b_proj)  # h is ours: no new [B,T,F]


def attention(
    x_BTD: torch.Tensor,
    layer: TorchLayerWeights,
    config: ModelConfig,
    cache: TorchKVCache | None = None,
    layer_index: int = 0,
    plan: _Plan | None = None,
) -> torch.Tensor:
    """[B,T,D] -> [B,T,D]: multi-head causal self-attention of T new tokens per row.

    With a cache, ``plan`` (from the cache) says where each row's new keys and values go and which
    keys each query may see; the queries attend to the S keys the cache returns. Without one,
    S = T (full recompute, plain causal mask).
    """
    q_BTD, k_BTE, v_BTE = project_qkv(x_BTD, layer)
    q_BHTK = split_heads(q_BTD, config.n_heads)
    k_new_BHTK = split_heads(k_BTE, config.n_kv_heads)
    v_new_BHTK = split_heads(v_BTE, config.n_kv_heads)
    if cache is None:
        k_BHSK, v_BHSK, mask, is_causal = k_new_BHTK, v_new_BHTK, None, x_BTD.shape[1] > 1
    else:
        k_BHSK, v_BHSK = cache._store(layer_index, k_new_BHTK, v_new_BHTK, plan)
        mask, is_causal = plan.mask, plan.is_causal
    o_BHTK = sdpa(q_BHTK, k_BHSK, v_BHSK, mask, is_causal, config.group_size)
    return linear(merge_heads(o_BHTK), layer.w_o, layer.b_o)


def block(
    x_BTD: torch.Tensor,
    layer: TorchLayerWeights,
    config: ModelConfig,
    cache: TorchKVCache | None = None,
    layer_index: int = 0,
    plan: _Plan | None = None,
) -> torch.Tensor:
    """[B,T,D] -> [B,T,D]: x + attention(LN(x)), then x + FFN(LN(x)) (pre-LayerNorm, as GPT-2)."""
    eps = config.layer_norm_eps
    h_BTD = layer_norm(x_BTD, layer.ln1_g, layer.ln1_b, eps)
    x_BTD = attention(h_BTD, layer, config, cache, layer_index, plan).add_(
        x_BTD
    )  # a fresh tensor: add in place
    return ffn(layer_norm(x_BTD, layer.ln2_g, layer.ln2_b, eps), layer).add_(x_BTD)


def lm_head(x_BTD: torch.Tensor, wte_VD: torch.Tensor) -> torch.Tensor:
    """[B,T,D], [V,D] -> [B,T,V]: logits, the token embedding used as the output matrix (tied)."""
    if x_BTD.is_cuda:
        return F.linear(x_BTD, wte_VD)
    n_batch, n_new = x_BTD.shape[:2]
    if n_batch * n_new == 1:  # one row: BLAS's matrix-vector product
        return torch.mv(wte_VD, x_BTD.reshape(-1)).view(1, 1, -1)
    n_bytes = n_batch * n_new * wte_VD.shape[0] * wte_VD.element_size()
    if n_bytes < _BIG_OUTPUT:
        return F.linear(x_BTD, wte_VD)
    # a large output (prefill logits): fresh memory would fault in 4 KiB at a time; use 2 MiB pages
    out_BTV = _host_empty(n_bytes // wte_VD.element_size(), wte_VD.dtype).view(n_batch, n_new, -1)
    return torch.matmul(x_BTD, wte_VD.mT, out=out_BTV)


def sample(
    logits_BV: torch.Tensor, temperature: float = 0.0, generator: torch.Generator | None = None
) -> torch.Tensor:
    """[B,V] -> [B] token ids: argmax at temperature 0, else a draw from softmax(logits / temperature)."""
    temperature = check_temperature(temperature)
    if temperature == 0:
        return logits_BV.argmax(dim=-1)
    p_BV = torch.softmax(logits_BV.float() / temperature, dim=-1)
    return torch.multinomial(p_BV, 1, generator=generator)[:, 0]


# ---------------------------------------------------------------- weights


@dataclass
class TorchLayerWeights:
    """One block, named as ``gpt2_weights.LayerWeights``. Matrices are [in, out] views of contiguous
    [out, in] tensors; ``w_q``, ``w_k``, ``w_v`` (and their biases) are column slices of ``w_qkv``."""

    ln1_g: torch.Tensor
    ln1_b: torch.Tensor
    w_qkv: torch.Tensor
    b_qkv: torch.Tensor
    w_q: torch.Tensor
    b_q: torch.Tensor
    w_k: torch.Tensor
    b_k: torch.Tensor
    w_v: torch.Tensor
    b_v: torch.Tensor
    w_o: torch.Tensor
    b_o: torch.Tensor
    ln2_g: torch.Tensor
    ln2_b: torch.Tensor
    w_fc: torch.Tensor
    b_fc: torch.Tensor
    w_proj: torch.Tensor
    b_proj: torch.Tensor


class _DecodeWeights(NamedTuple):
    """One layer's weights as ``TorchModel._decode_fast`` reads them: each matrix both as its
    contiguous [out, in] tensor ("FE", for mat-vec products) and as the [in, out] view ("EF", x @ W)."""

    ln1_g: torch.Tensor
    ln1_b: torch.Tensor
    qkv_FE: torch.Tensor
    qkv_EF: torch.Tensor
    b_qkv: torch.Tensor
    o_FE: torch.Tensor
    o_EF: torch.Tensor
    b_o: torch.Tensor
    ln2_g: torch.Tensor
    ln2_b: torch.Tensor
    fc_FE: torch.Tensor
    fc_EF: torch.Tensor
    b_fc: torch.Tensor
    proj_FE: torch.Tensor
    proj_EF: torch.Tensor
    b_proj: torch.Tensor

    @classmethod
    def of(cls, ly: TorchLayerWeights) -> _DecodeWeights:
        return cls(
            ly.ln1_g, ly.ln1_b, ly.w_qkv.mT, ly.w_qkv, ly.b_qkv, ly.w_o.mT, ly.w_o, ly.b_o,
            ly.ln2_g, ly.ln2_b, ly.w_fc.mT, ly.w_fc, ly.b_fc, ly.w_proj.mT, ly.w_proj, ly.b_proj,
        )  # fmt: skip


def default_device() -> torch.device:
    """CUDA when present, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _resolve(device: Any, dtype: Any) -> tuple[torch.device, torch.dtype]:
    try:
        device = default_device() if device is None else torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device: expected a torch device such as 'cpu' or 'cuda', got {device!r}") from err
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device: expected an available device, got {device} but CUDA is not available")
    if dtype is None:
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype: expected a floating torch.dtype such as torch.float32, got {dtype!r}")
    return device, dtype


def _int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__} {value!r}")
    return int(value)


def _ids(ids: Any, rank: int, vocab_size: int, name: str, device: torch.device) -> torch.Tensor:
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


_ALIGN = 64  # bytes: each weight starts on a cache line


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


class _Arena:
    """Tensors carved one after another out of one host buffer."""

    def __init__(self, numel: int, dtype: torch.dtype) -> None:
        self.buffer, self.used = _host_empty(numel, dtype), 0
        self.align = max(1, _ALIGN // _itemsize(dtype))  # elements per cache line

    def take(self, src: torch.Tensor) -> torch.Tensor:
        """A copy of ``src`` (converted to the arena's dtype), placed at the next aligned offset."""
        numel = src.numel()
        out = self.buffer[self.used : self.used + numel].view(src.shape)
        self.used += -(-numel // self.align) * self.align
        return out.copy_(src)


# ---------------------------------------------------------------- the model


class TorchModel:
    """GPT-2 in PyTorch, batched, for timing: CUDA (bf16) when present, else the CPU (float32).

    Build it with ``random``, ``from_numpy`` or ``from_gpt2_state_dict``; ``.config``, ``.device``,
    ``.dtype``, ``.layers`` (``TorchLayerWeights``), ``.wte_VD``, ``.wpe_MD``, ``.head_VD`` (the LM
    head as multiplied: ``wte_VD`` with zero rows added on CUDA up to a multiple of 64). Every forward pass
    runs under ``torch.inference_mode()``. Token ids may be lists, NumPy arrays or tensors.

    On the CPU all weights live in one buffer on 2 MiB pages where the OS allows (fewer TLB misses
    while decode streams them). A decode step with every row at one position (``generate``,
    ``decode_step`` without ragged rows) takes ``_decode_fast``; everything else goes through the
    step functions of this module, which mirror ``numpy_model``.
    """

    def __init__(
        self, config: ModelConfig, weights: GPT2Weights, device: Any = None, dtype: torch.dtype | None = None
    ) -> None:
        self.config = config
        self.device, self.dtype = _resolve(device, dtype)

        n_vocab, width = weights.wte_VD.shape
        n_pad = -n_vocab % _VOCAB_MULTIPLE.get(self.device.type, 1)  # LM head rows added (zeros)
        arena = None
        if self.device.type == "cpu":  # one buffer for every weight, on 2 MiB pages where the OS allows
            n_tensors = 4 + len(weights.layers) * len(fields(LayerWeights))
            arena = _Arena(config.n_params + n_pad * width + n_tensors * _ALIGN, self.dtype)

        def vec(a: Any) -> torch.Tensor:  # a NumPy array or a tensor (any device) -> a contiguous copy
            src = a if isinstance(a, torch.Tensor) else torch.from_numpy(np.asarray(a))
            if arena is None:
                return torch.empty(src.shape, dtype=self.dtype, device=self.device).copy_(src)
            return arena.take(src)

        def mat(w_EF: Any) -> torch.Tensor:  # an [E, F] tensor or view, stored as _row_major says
            w_EF = w_EF if isinstance(w_EF, torch.Tensor) else torch.from_numpy(np.asarray(w_EF))
            return vec(w_EF) if self._row_major(*w_EF.shape) else vec(w_EF.mT).mT

        def cat(parts: list[Any], axis: int) -> Any:
            if isinstance(parts[0], torch.Tensor):
                return torch.cat(parts, axis)
            return np.concatenate(parts, axis)

        wte_VD = weights.wte_VD
        if n_pad:  # LM head rows padded with zeros so GEMM tiles fit (50257 -> 50304); logits sliced back
            self.head_VD = vec(np.zeros((n_vocab + n_pad, width), np.float32))
            self.wte_VD = self.head_VD[:n_vocab].copy_(torch.as_tensor(wte_VD))
        else:
            # the LM head reads wte as a [D, V] matrix: stored that way when _row_major says so
            self.wte_VD = mat(wte_VD.T).mT if self._row_major(width, n_vocab) else vec(wte_VD)
            self.head_VD = self.wte_VD
        self.wpe_MD = vec(weights.wpe_MD)
        self.lnf_g, self.lnf_b = vec(weights.lnf_g), vec(weights.lnf_b)
        self.layers: list[TorchLayerWeights] = []
        q_width, kv_width = config.d_model, config.n_kv_heads * config.d_head
        split = {"w_q", "b_q", "w_k", "b_k", "w_v", "b_v"}  # become views of the fused w_qkv / b_qkv
        for ly in weights.layers:
            w_qkv = mat(cat([ly.w_q, ly.w_k, ly.w_v], 1))
            b_qkv = vec(cat([ly.b_q, ly.b_k, ly.b_v], 0))
            w_q, w_k, w_v = w_qkv.split([q_width, kv_width, kv_width], dim=1)
            b_q, b_k, b_v = b_qkv.split([q_width, kv_width, kv_width])
            rest = {
                f.name: (mat if f.name.startswith("w_") else vec)(getattr(ly, f.name))
                for f in fields(ly)
                if f.name not in split
            }
            self.layers.append(
                TorchLayerWeights(
                    w_qkv=w_qkv, b_qkv=b_qkv, w_q=w_q, b_q=b_q, w_k=w_k, b_k=b_k, w_v=w_v, b_v=b_v, **rest
                )
            )

        self._fast = [_DecodeWeights.of(ly) for ly in self.layers]
        # generate's graphed decode: ((batch, capacity), cache, step), kept for the next call
        self._kept_decode: tuple[tuple[int, int], StaticKVCache, Callable[..., Any]] | None = None

    def _row_major(self, n_in: int, n_out: int) -> bool:
        """Store an [in, out] matrix as it is ([in, out] contiguous, rows of
        length out)? Else it is stored transposed ([out, in] contiguous) and
        used through an [in, out] view.

        On a GPU: always transposed, the layout ``F.linear`` (cuBLAS) reads
        natively. On a CPU, decode streams each matrix through BLAS's
        matrix-vector product, whose speed depends on how long each contiguous
        row is (on an AMD EPYC: about 8 GB/s at 1 KiB rows, 24 GB/s at 64 KiB),
        so each matrix is laid out along its longer side.
        """
        return self.device.type == "cpu" and n_out >= n_in

    # ------------------------------------------------------------ construction
    @classmethod
    def random(
        cls, config: ModelConfig, seed: int = 0, device: Any = None, dtype: torch.dtype | None = None
    ) -> TorchModel:
        """Random weights, the same draw as ``NumpyModel.random(config, seed)``."""
        if not isinstance(config, ModelConfig):
            raise TypeError(f"config: expected a kvtutor.ModelConfig, got {type(config).__name__}")
        return cls(config, random_weights(config, seed), device, dtype)

    @classmethod
    def random_on_device(
        cls, config: ModelConfig, seed: int = 0, device: Any = None, dtype: torch.dtype | None = None
    ) -> TorchModel:
        """Random weights drawn by torch on ``device`` (the same distributions as ``random``, not the
        same numbers): for shapes too large to draw in NumPy on the host (a 6.7B model in seconds)."""
        if not isinstance(config, ModelConfig):
            raise TypeError(f"config: expected a kvtutor.ModelConfig, got {type(config).__name__}")
        device, dtype = _resolve(device, dtype)
        gen = torch.Generator(device=device).manual_seed(_int("seed", seed))
        d, kv = config.d_model, config.n_kv_heads * config.d_head

        def draw(*shape: int, scale: float = 0.02, base: float = 0.0) -> torch.Tensor:
            t = torch.empty(shape, dtype=dtype, device=device).normal_(generator=gen)
            return t.mul_(scale).add_(base)

        def ln() -> tuple[torch.Tensor, torch.Tensor]:
            return draw(d, scale=0.1, base=1.0), draw(d, scale=0.1)

        layers = []
        for _ in range(config.n_layers):
            w_q, w_k, w_v = draw(d, d + 2 * kv).split([d, kv, kv], dim=1)
            b_q, b_k, b_v = draw(d + 2 * kv, scale=0.01).split([d, kv, kv])
            layers.append(LayerWeights(
                *ln(), w_q, b_q, w_k, b_k, w_v, b_v, draw(d, d), draw(d, scale=0.01), *ln(),
                draw(d, config.d_ff), draw(config.d_ff, scale=0.01), draw(config.d_ff, d),
                draw(d, scale=0.01),
            ))  # fmt: skip
        weights = GPT2Weights(draw(config.vocab_size, d), draw(config.max_seq_len, d), layers, *ln())
        return cls(config, weights, device, dtype)

    @classmethod
    def from_numpy(cls, numpy_model: Any, device: Any = None, dtype: torch.dtype | None = None) -> TorchModel:
        """The weights of a ``NumpyModel``, copied to ``device`` in ``dtype``."""
        config, weights = getattr(numpy_model, "config", None), getattr(numpy_model, "weights", None)
        if not isinstance(config, ModelConfig) or not isinstance(weights, GPT2Weights):
            raise TypeError(f"numpy_model: expected a kvtutor.NumpyModel, got {type(numpy_model).__name__}")
        return cls(config, weights, device, dtype)

    @classmethod
    def from_gpt2_state_dict(
        cls,
        state_dict: Mapping[str, Any],
        n_heads: int,
        n_kv_heads: int | None = None,
        device: Any = None,
        dtype: torch.dtype | None = None,
        hf_config: Mapping[str, Any] | None = None,
    ) -> TorchModel:
        """A Hugging Face GPT-2 ``state_dict`` (tensors or arrays, ``transformer.`` prefix or not) -> model.

        Weights are checked as they load (finite, floating, every key, shapes); with ``hf_config`` (a
        ``config.json`` dict) the layers, heads and vocabulary are checked against it too."""
        device, dtype = _resolve(device, dtype)  # fail before converting a large state dict
        config, weights = weights_from_state_dict(state_dict, n_heads, n_kv_heads, hf_config=hf_config)
        return cls(config, weights, device, dtype)

    def to_gpt2_state_dict(self) -> dict[str, torch.Tensor]:
        """The weights in Hugging Face ``GPT2LMHeadModel`` naming (Conv1D [in, out] layout, c_attn fused)."""
        sd = gpt2_state_dict(self, lambda ly: (ly.w_qkv, ly.b_qkv))
        return {k: v.contiguous().clone() for k, v in sd.items()}

    def _weights(self) -> list[torch.Tensor]:
        out = [self.wte_VD, self.wpe_MD, self.lnf_g, self.lnf_b]
        skip = {"w_q", "b_q", "w_k", "b_k", "w_v", "b_v"}  # views of w_qkv / b_qkv
        for ly in self.layers:
            out += [getattr(ly, f.name) for f in fields(ly) if f.name not in skip]
        return out

    @property
    def n_params(self) -> int:
        """Parameters, the tied embedding / LM head counted once."""
        return sum(t.numel() for t in self._weights())

    @property
    def nbytes(self) -> int:
        """Bytes of the weights as stored (the tied embedding counted once)."""
        return sum(t.numel() * t.element_size() for t in self._weights())

    def __repr__(self) -> str:
        config = self.config.wrapped(TEXT_WIDTH - len("TorchModel("))  # nested: indented that much
        return wrap_call("TorchModel", [config, f"device={self.device}", f"dtype={self.dtype}"])

    # ------------------------------------------------------------ caches
    def new_cache(
        self, batch_size: int, max_seq_len: int | None = None, kind: str = "static"
    ) -> TorchKVCache:
        """An empty cache for ``batch_size`` rows of up to ``max_seq_len`` positions each.

        ``"static"``: buffers [L, B, Hkv, M, K] written in place, rows at their own lengths;
        ``"concat"``: tensors that grow by ``torch.cat`` each step, rows at one length.
        """
        cfg = self.config
        batch_size = _int("batch_size", batch_size)
        if batch_size < 1:
            raise ValueError(f"batch_size: expected >= 1, got {batch_size}")
        capacity = cfg.max_seq_len if max_seq_len is None else _int("max_seq_len", max_seq_len)
        if not 1 <= capacity <= cfg.max_seq_len:
            raise ValueError(f"max_seq_len: expected 1 <= max_seq_len <= {cfg.max_seq_len}, got {capacity}")
        kinds = {"static": StaticKVCache, "concat": ConcatKVCache}
        if kind not in kinds:
            raise ValueError(f"kind: expected one of {sorted(kinds)}, got {kind!r}")
        return kinds[kind](
            cfg.n_layers, batch_size, cfg.n_kv_heads, capacity, cfg.d_head, self.device, self.dtype
        )

    def _check_cache(self, cache: Any, static: bool = False) -> TorchKVCache:
        if not isinstance(cache, TorchKVCache):
            raise TypeError(
                f"cache: expected a cache from TorchModel.new_cache(), got {type(cache).__name__}"
            )
        cfg = self.config
        got = (cache.n_layers, cache.n_kv_heads, cache.d_head, cache.dtype, cache.device)
        want = (cfg.n_layers, cfg.n_kv_heads, cfg.d_head, self.dtype, self.device)
        if got != want:
            raise ValueError(
                f"cache: expected (layers, kv heads, head dim, dtype, device) = {want} for this model, "
                f"got {got}"
            )
        if cache.capacity > cfg.max_seq_len:
            raise ValueError(
                f"cache: expected a capacity <= this model's max_seq_len {cfg.max_seq_len}, "
                f"got {cache.capacity}"
            )
        if static and not isinstance(cache, StaticKVCache):
            raise ValueError(f"cache: expected a kind='static' cache, got kind={cache.kind!r}")
        return cache

    def _check_batch(self, ids: torch.Tensor, cache: TorchKVCache, name: str) -> None:
        if ids.shape[0] != cache.batch_size:
            raise ValueError(
                f"{name}: expected the cache's batch size {cache.batch_size}, got {ids.shape[0]} rows"
            )

    # ------------------------------------------------------------ forward passes
    def _lm_head(self, x_BTD: torch.Tensor) -> torch.Tensor:
        """[B,T,D] -> [B,T,V]: ``lm_head`` over ``head_VD`` (padded on CUDA), sliced to the vocabulary."""
        logits_BTV = lm_head(x_BTD, self.head_VD)
        n_vocab = self.config.vocab_size
        return logits_BTV if logits_BTV.shape[-1] == n_vocab else logits_BTV[..., :n_vocab]

    def _run(
        self, ids_BT: torch.Tensor, cache: TorchKVCache | None, plan: _Plan | None, last_only: bool = False
    ) -> torch.Tensor:
        """Embed, the blocks, ln_f, LM head; commits the cache. No checks: callers validate first."""
        cfg = self.config
        if plan is None:
            start: int | torch.Tensor = 0
        else:
            start = plan.start if plan.pos_B is None else plan.pos_B
        x_BTD = embed(ids_BT, self.wte_VD, self.wpe_MD, start)
        for i, layer in enumerate(self.layers):
            x_BTD = block(x_BTD, layer, cfg, cache, i, plan)
        if last_only:
            x_BTD = x_BTD[:, -1:]
        logits_BTV = self._lm_head(layer_norm(x_BTD, self.lnf_g, self.lnf_b, cfg.layer_norm_eps))
        if cache is not None:
            cache._commit(plan)
        return logits_BTV

    def _decode_fast(self, ids_B: torch.Tensor, cache: TorchKVCache) -> torch.Tensor:
        """[B] -> [B,V]: one decode step with every row at the same position. No checks: callers validate.

        The arithmetic of ``block`` with T = 1, in fewer tensor operations: each residual add rides
        on its matrix product (``addmm(x, h, W)`` is x + h W), K and V go into the cache with one
        copy, and one row on the CPU uses BLAS's mat-vec product. It matters more than it looks: right
        after a large matrix product has streamed through the caches, every small operation starts
        cold, at tens of microseconds each.
        """
        cfg = self.config
        n_batch, start = ids_B.shape[0], int(cache._host[0])
        n_heads, n_kv, d_head, eps = cfg.n_heads, cfg.n_kv_heads, cfg.d_head, cfg.layer_norm_eps
        q_width, group, width = n_heads * d_head, cfg.group_size, (cfg.d_model,)
        vector = n_batch == 1 and not ids_B.is_cuda  # x is [D], products are mat-vec
        write = cache._decode_writer(start)
        x = F.embedding(ids_B, self.wte_VD).add_(self.wpe_MD[start])  # (B, D)
        if vector:
            x = x.view(-1)
        for i, w in enumerate(self._fast):
            h = torch.layer_norm(x, width, w.ln1_g, w.ln1_b, eps)
            qkv = torch.addmv(w.b_qkv, w.qkv_FE, h) if vector else torch.addmm(w.b_qkv, h, w.qkv_EF)
            q_BHTK = qkv[..., :q_width].view(n_batch, n_heads, 1, d_head)
            if vector:
                kv_new_2BHK = qkv[q_width:].view(2, 1, n_kv, d_head)
            else:
                kv_new_2BHK = qkv[:, q_width:].view(n_batch, 2, n_kv, d_head).transpose(0, 1)
            k_BHSK, v_BHSK = write(i, kv_new_2BHK)
            # (B, H*K) = merged heads; reshape, not view: cuDNN may return [B,H,1,K] in another order
            o = sdpa(q_BHTK, k_BHSK, v_BHSK, None, False, group).reshape(x.shape)
            x = (torch.addmv(x, w.o_FE, o) if vector else torch.addmm(x, o, w.o_EF)).add_(w.b_o)
            h = torch.layer_norm(x, width, w.ln2_g, w.ln2_b, eps)
            f = gelu(
                torch.addmv(w.b_fc, w.fc_FE, h) if vector else torch.addmm(w.b_fc, h, w.fc_EF), inplace=True
            )
            x = (torch.addmv(x, w.proj_FE, f) if vector else torch.addmm(x, f, w.proj_EF)).add_(w.b_proj)
        x = torch.layer_norm(x, width, self.lnf_g, self.lnf_b, eps)
        if vector:
            logits = torch.mv(self.wte_VD, x)
        else:
            logits = F.linear(x, self.head_VD)[:, : cfg.vocab_size]
        cache._advance_all(1)
        return logits.view(n_batch, -1)

    @torch.inference_mode()
    def forward(self, ids_BT: Any, cache: TorchKVCache | None = None) -> torch.Tensor:
        """[B,T] -> [B,T,V]: T new tokens per row, at positions len .. len+T-1 of each row of the cache.

        Without a cache the tokens are whole sequences (positions 0 .. T-1). With a static cache the
        rows may be at different lengths; a concat cache keeps them at one length.
        """
        if cache is not None:
            self._check_cache(cache)
        ids_BT = _ids(ids_BT, 2, self.config.vocab_size, "ids_BT", self.device)
        n_new = ids_BT.shape[1]
        if cache is None:
            if n_new > self.config.max_seq_len:
                raise ValueError(f"ids_BT: {n_new} tokens exceed max_seq_len {self.config.max_seq_len}")
            return self._run(ids_BT, None, None)
        self._check_batch(ids_BT, cache, "ids_BT")
        return self._run(ids_BT, cache, cache._plan(n_new, name="ids_BT"))

    def prefill(self, ids_BT: Any, cache: TorchKVCache) -> torch.Tensor:
        """[B,T] -> [B,T,V]: whole prompts in one pass; writes T keys and values per row and layer."""
        if cache is None:
            raise TypeError("cache: expected a cache from TorchModel.new_cache(), got None")
        return self.forward(ids_BT, cache)

    @torch.inference_mode()
    def prefill_row(self, ids_T: Any, cache: TorchKVCache, row: int) -> torch.Tensor:
        """[T] -> [T,V]: prefill one row of a batched cache (an empty row); the other rows are untouched."""
        self._check_cache(cache)
        row = cache._check_row(row)
        if cache.kind == "concat" and cache.batch_size > 1:
            raise ValueError("row: a concat cache keeps its rows at one length; use kind='static'")
        ids_1T = _ids(ids_T, 1, self.config.vocab_size, "ids_T", self.device)[None]
        held = cache.host_lengths[row]
        if held:
            raise ValueError(
                f"row: expected an empty row (reset_row it first), row {row} holds {held} tokens"
            )
        plan = cache._plan(ids_1T.shape[1], row=row, name="ids_T")
        return self._run(ids_1T, cache, plan)[0]

    @torch.inference_mode()
    def decode_step(self, ids_B: Any, cache: TorchKVCache, active: Any = None) -> torch.Tensor:
        """[B] -> [B,V]: one new token per row, each at its own row's length (rows may differ).

        ``active`` (bool [B], default all): rows marked False are not advanced and their cache is not
        written; their logits rows are NaN. Every active row must already hold a token (prefill first).
        """
        if cache is None:
            raise TypeError("cache: expected a cache from TorchModel.new_cache(), got None")
        self._check_cache(cache)
        ids_B1 = _ids(ids_B, 1, self.config.vocab_size, "ids_B", self.device)[:, None]
        self._check_batch(ids_B1, cache, "ids_B")
        active_B = self._check_active(active, cache)
        lengths = np.array(cache.host_lengths)
        empty = np.flatnonzero((lengths == 0) & (True if active_B is None else active_B))
        if empty.size:
            raise ValueError(
                f"cache: expected prefilled rows for decode_step, row {int(empty[0])} is empty "
                "(prefill it, or mark it inactive)"
            )
        if active_B is None and (lengths == lengths[0]).all():  # every row at one position
            cache._check_room(1, np.arange(cache.batch_size), "ids_B")
            return self._decode_fast(ids_B1[:, 0], cache)
        plan = cache._plan(1, active=active_B, name="ids_B")
        logits_BV = self._run(ids_B1, cache, plan)[:, 0]
        if plan.active_dev is not None:
            logits_BV.masked_fill_(plan.active_dev[:, None] == 0, float("nan"))
        return logits_BV

    @staticmethod
    def _check_active(active: Any, cache: TorchKVCache) -> np.ndarray | None:
        if active is None:
            return None
        if isinstance(active, torch.Tensor):
            active = active.detach().cpu().numpy()
        active = np.asarray(active)
        if active.dtype != bool:
            raise TypeError(f"active: expected a bool mask, got dtype {active.dtype}")
        if active.shape != (cache.batch_size,):
            raise ValueError(f"active: expected shape [{cache.batch_size}], got {list(active.shape)}")
        if not active.any():
            raise ValueError("active: expected at least one active row, got none")
        return None if active.all() else active

    @torch.inference_mode()
    def logits_without_cache(self, ids_BT: Any) -> torch.Tensor:
        """[B,T] -> [B,T,V]: every position recomputed from scratch, no cache involved."""
        return self.forward(ids_BT, None)

    @torch.inference_mode()
    def generate(
        self, ids_BT: Any, max_new_tokens: int, cache_kind: str = "static", graphs: bool | None = None
    ) -> torch.Tensor:
        """prompts [B,T] -> new token ids [B,N], greedy: one prefill, then one batched decode step a token.

        ``graphs`` (default: on CUDA with the static cache) runs the decode steps through
        ``compile_decode``: CUDA graph replays on a GPU, the same fixed-shape step eagerly on a CPU.
        The cache and its graphs are kept for the next call of the same batch size and capacity
        bucket, so only the first call pays for the capture (as a compiled model pays once).
        ``graphs=False`` runs every step eagerly (``_decode_fast``).
        """
        ids_BT = _ids(ids_BT, 2, self.config.vocab_size, "ids_BT", self.device)
        n_batch, n_prompt = ids_BT.shape
        n_new = check_max_new_tokens(max_new_tokens, n_prompt, self.config.max_seq_len, "max_seq_len")
        if cache_kind not in ("static", "concat"):
            raise ValueError(f"cache_kind: expected one of ['concat', 'static'], got {cache_kind!r}")
        if graphs is None:
            graphs = self.device.type == "cuda" and cache_kind == "static"
        elif not isinstance(graphs, bool):
            raise TypeError(f"graphs: expected a bool or None, got {type(graphs).__name__}")
        elif graphs and cache_kind != "static":
            raise ValueError("graphs: the fixed-shape step needs cache_kind='static', got 'concat'")
        out_NB = torch.empty(n_new, n_batch, dtype=torch.long, device=self.device)
        if n_new == 0:
            return out_NB.T
        n_positions = n_prompt + n_new - 1  # the last new token is never fed back
        if graphs:
            cache, step = self._graphed_decode(n_batch, n_positions)
        else:
            cache = self.new_cache(n_batch, n_positions, cache_kind)
            step = None
        logits_B1V = self._run(ids_BT, cache, cache._plan(n_prompt), last_only=True)
        torch.argmax(logits_B1V[:, 0], dim=-1, out=out_NB[0])
        for i in range(1, n_new):
            ids_B = out_NB[i - 1]
            logits_BV = self._decode_fast(ids_B, cache) if step is None else step(ids_B, False)
            torch.argmax(logits_BV, dim=-1, out=out_NB[i])
        return out_NB.T.contiguous()

    def _graphed_decode(self, n_batch: int, n_positions: int) -> tuple[StaticKVCache, Callable[..., Any]]:
        """An empty static cache of at least ``n_positions`` slots and its ``compile_decode`` step,
        reused while the batch size and capacity bucket stay the same (one kept at a time)."""
        capacity = bucket_for(n_positions, self.config.max_seq_len)
        kept = self._kept_decode
        if kept is None or kept[0] != (n_batch, capacity):
            self._kept_decode = None  # free the old cache and graphs first
            cache = self.new_cache(n_batch, capacity, "static")
            self._kept_decode = ((n_batch, capacity), cache, self.compile_decode(cache))
        _, cache, step = self._kept_decode
        cache.truncate(0)
        return cache, step

    # ------------------------------------------------------------ the fast decode path
    def _decode_fixed(
        self,
        ids_B: torch.Tensor,
        cache: StaticKVCache,
        n_keys: int,
    ) -> torch.Tensor:
        """[B] -> [B,V]: a decode step over the first ``n_keys`` slots of every
        row, every shape fixed and the positions read from the device copy of
        the lengths (nothing the host must know: a CUDA graph can replay it).
        Every row must be shorter than ``n_keys``. Does not advance the lengths.
        """
        plan = _Plan(1)
        plan.pos_B = cache.lengths.clamp(max=n_keys - 1)
        plan.n_keys = n_keys
        keys_S = cache._positions_M[:n_keys]
        # (B, 1, 1, S): row b sees the keys up to its own position
        plan.mask = (keys_S[None, :] <= plan.pos_B[:, None])[:, None, None, :]
        plan.write_idx = (cache._base_BH + plan.pos_B[:, None]).reshape(-1)
        x_BTD = embed(ids_B[:, None], self.wte_VD, self.wpe_MD, plan.pos_B)
        for i, layer in enumerate(self.layers):
            x_BTD = block(x_BTD, layer, self.config, cache, i, plan)
        eps = self.config.layer_norm_eps
        x_BTD = layer_norm(x_BTD, self.lnf_g, self.lnf_b, eps)
        return self._lm_head(x_BTD)[:, 0]

    def compile_decode(
        self,
        cache: StaticKVCache,
        mode: str = "cuda_graph",
    ) -> Callable[..., torch.Tensor]:
        """cache -> step(ids_B, check=True) -> logits [B,V]: a faster
        ``decode_step`` bound to this cache.

        Each call advances every row of ``cache`` by one token (rows may sit at
        different lengths; there is no ``active`` mask). Attention runs over a
        fixed stretch of the cache, the smallest of ``key_buckets(capacity)``
        (64, 128, 256, ... keys) that holds the longest row, with a mask built
        on the device from ``cache.lengths``: every shape is fixed within a
        bucket, nothing needs the host, and a step never reads more than about
        twice the keys it needs.

        On CUDA, ``mode="cuda_graph"`` captures one such step (plus the length
        update) per bucket in a CUDA graph, the first time a bucket is reached,
        and each call replays it: one launch instead of hundreds.
        ``mode="compile"`` first compiles the step with ``torch.compile`` (fused
        inductor kernels, once per bucket), then captures that the same way.
        (We capture ourselves rather than use ``mode="reduce-overhead"``: its
        graphs copy every input that is not an ``nn.Parameter`` into static
        buffers at each replay, and our weights and cache are plain tensors.)
        On the CPU there are no graphs: ``"cuda_graph"`` runs the step eagerly
        and ``"compile"`` runs it through ``torch.compile`` (which needs a C++
        compiler). Nothing global is changed. Building a step writes nothing.

        The returned logits tensor is reused by the next call: clone it to keep
        it. ``check=False`` skips the token-id range check, which on CUDA waits
        for the device.
        """
        self._check_cache(cache, static=True)
        modes = ("cuda_graph", "compile")
        if mode not in modes:
            raise ValueError(f"mode: expected one of {list(modes)}, got {mode!r}")
        if not hasattr(cache, "_positions_M"):
            cache._positions_M = torch.arange(cache.capacity, device=cache.device)
        on_cuda = self.device.type == "cuda"
        # bucket -> its step (on CUDA, the replay of its graph)
        steps: dict[int, Callable[[torch.Tensor], torch.Tensor]] = {}
        model = self

        def for_bucket(n_keys: int) -> Callable[[torch.Tensor], torch.Tensor]:
            if n_keys not in steps:

                def fixed(ids_B: torch.Tensor) -> torch.Tensor:
                    return model._decode_fixed(ids_B, cache, n_keys)

                if mode == "compile":
                    fixed = torch.compile(fixed, dynamic=False)
                if on_cuda:
                    fixed = model._capture(cache, fixed, n_keys)
                steps[n_keys] = fixed
            return steps[n_keys]

        def step(ids_B: Any, check: bool = True) -> torch.Tensor:
            """[B] -> [B,V]: one decode step of every row of the bound cache."""
            vocab, device = model.config.vocab_size, model.device
            if check:
                ids_B = _ids(ids_B, 1, vocab, "ids_B", device)
            elif not isinstance(ids_B, torch.Tensor):
                ids_B = torch.as_tensor(ids_B, dtype=torch.long, device=device)
            model._check_batch(ids_B[:, None], cache, "ids_B")
            lengths = cache._host
            if lengths.min() == 0:
                raise ValueError(
                    f"cache: expected prefilled rows, row "
                    f"{int(lengths.argmin())} is empty (prefill it first)"
                )  # fmt: skip
            if lengths.max() >= cache.capacity:
                raise ValueError(
                    f"ids_B: row {int(lengths.argmax())} is full "
                    f"(capacity {cache.capacity}); reset or truncate it"
                )  # fmt: skip
            fn = for_bucket(bucket_for(int(lengths.max()) + 1, cache.capacity))
            with torch.inference_mode():
                logits_BV = fn(ids_B)
                if not on_cuda:  # a captured graph advances them itself
                    cache.lengths.add_(1)
            cache._host += 1
            return logits_BV

        step.buckets = steps  # the buckets built so far (for inspection, tests)
        return step

    def _capture(
        self,
        cache: StaticKVCache,
        fixed: Callable[[torch.Tensor], torch.Tensor],
        n_keys: int,
    ) -> Callable[[torch.Tensor], torch.Tensor]:
        """Record ``fixed`` (one decode step over ``n_keys`` slots) plus the
        length update in a CUDA graph; return its replay.
        """
        static_ids = torch.zeros(
            cache.batch_size,
            dtype=torch.long,
            device=self.device,
        )
        with torch.inference_mode(), torch.cuda.device(self.device):
            # warm-up runs (and compilation) write K/V at each row's next
            # slot: save those slots, restore
            pos_B = cache.lengths.clamp(max=n_keys - 1)
            idx = (cache._base_BH + pos_B[:, None]).reshape(-1)
            saved = [
                (k[idx].clone(), v[idx].clone())
                for k, v in zip(cache._k_flat, cache._v_flat, strict=True)
            ]  # fmt: skip
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(3):
                    fixed(static_ids)
            torch.cuda.current_stream().wait_stream(stream)
            for (k_saved, v_saved), k, v in zip(
                saved, cache._k_flat, cache._v_flat, strict=True
            ):  # fmt: skip
                k.index_copy_(0, idx, k_saved)
                v.index_copy_(0, idx, v_saved)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_logits = fixed(static_ids)
                cache.lengths.add_(1)  # recorded, not run: runs at each replay
            torch.cuda.synchronize()

        def replay(ids_B: torch.Tensor) -> torch.Tensor:
            static_ids.copy_(ids_B, non_blocking=True)
            graph.replay()
            return static_logits

        # keep the graph (and its memory pool) alive with the callable
        replay.graph = graph
        return replay
