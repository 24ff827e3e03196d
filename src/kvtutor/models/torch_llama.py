"""The PyTorch Llama-style model: the same decoder as ``kvtutor.models.llama``, batched [B, T].

``TorchLlamaModel`` is to ``LlamaModel`` what ``TorchGPT2Model`` is to ``GPT2Model``: the same steps,
a batch dimension in front, on the torch caches of ``kvtutor.caches.torch_kv`` (preallocated or
concat, a length per row) through their public protocol (``plan``, ``update``, ``advance``). Where a
step is the same as GPT-2's it is ``kvtutor.models.torch_mirror``'s (``as_rows``, ``linear``,
``project_heads``, ``sdpa``, ``merge_heads``, ``lm_head``); this module holds only what differs:
no position embedding, RMSNorm, RoPE, SwiGLU, and the block that joins them.

RoPE enters per row. Row b's T new tokens sit at positions len_b .. len_b+T-1 of that row, so
their queries and keys are turned by the angles of those positions, and the keys are stored
turned (the cache holds rotated keys, as in the NumPy twin). The cos and sin of every position
0 .. M-1 are computed once, in float64 by ``llama.rope_tables``, and a pass reads the rows it
needs: a slice when every row starts at one position, a gather when rows are ragged.

Llama's projections have no biases. ``torch_mirror.linear`` takes one (``addmv`` needs it), so
the layers carry zero biases, views of one zero vector: the same numbers, the mirror's code. The
weights are packed as GPT-2's are (``torch_weights.WeightPacker``), and the cache, the passes,
``generate`` and the CUDA-graph step are ``TorchDecoder``'s. QK-norm (Qwen3) is one optional step
of ``attention``: the layer's ``q_norm_K`` and ``k_norm_K``, None for Llama.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..caches.protocol import Plan
from ..text import TEXT_WIDTH, fields_call, wrap_call
from . import llama
from .llama import LlamaConfig, LlamaModel, LlamaWeights
from .torch_base import TorchDecoder
from .torch_mirror import (
    OutInViews,
    attention_core,
    check_finite_weights,
    linear,
    merge_heads,
    project_heads,
    resolve_device_dtype,
)
from .torch_weights import WeightPacker

__all__ = [
    "embed_tokens",
    "rms_norm",
    "rope_tables",
    "rope_at",
    "rotate_half",
    "apply_rope",
    "swiglu",
    "attention",
    "block",
    "TorchLlamaLayerWeights",
    "TorchLlamaModel",
]


# ---------------------------------------------------------------- the steps that differ from GPT-2's


def embed_tokens(ids_BT: torch.Tensor, wte_VD: torch.Tensor) -> torch.Tensor:
    """[B,T], [V,D] -> [B,T,D]: the token's row only; no position is added (RoPE brings it later)."""
    return F.embedding(ids_BT, wte_VD)


def rms_norm(x_BTD: torch.Tensor, g_D: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """[B,T,D], [D] -> [B,T,D]: divide each row by its root mean square, then scale.

    The mean square is taken in float32 at least (as transformers does for bf16 and float16), the
    gain applied in the model's dtype.
    """
    x = x_BTD.to(torch.promote_types(x_BTD.dtype, torch.float32))
    x = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)
    return g_D * x.to(x_BTD.dtype)


def rope_tables(
    positions_T: Any,
    d_head: int,
    theta: float = 10000.0,
    dtype: torch.dtype = torch.float32,
    device: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """[T] -> cos [T,K], sin [T,K]: ``llama.rope_tables`` (angles in float64), then cast to
    ``dtype`` on ``device``. Each pair's angle is written twice, at j and at j + K/2."""
    cos_TK, sin_TK = llama.rope_tables(np.asarray(positions_T), d_head, theta, np.float64)
    return (
        torch.tensor(cos_TK, dtype=dtype, device=device),
        torch.tensor(sin_TK, dtype=dtype, device=device),
    )


def rope_at(
    cos_MK: torch.Tensor, sin_MK: torch.Tensor, start: int | torch.Tensor, n_new: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """[M,K] x2, int or [B], T -> cos, sin [1,T,K] or [B,T,K]: the table rows of positions
    start .. start+T-1, one start for every row (a slice) or one per row (a gather)."""
    if isinstance(start, int):
        return cos_MK[None, start : start + n_new], sin_MK[None, start : start + n_new]
    pos_BT = start[:, None] + torch.arange(n_new, device=start.device)
    return F.embedding(pos_BT, cos_MK), F.embedding(pos_BT, sin_MK)


def rotate_half(x_BHTK: torch.Tensor) -> torch.Tensor:
    """[B,H,T,K] -> [B,H,T,K]: (x1, x2) -> (-x2, x1) for the two halves: each pair turned by 90 degrees."""
    half = x_BHTK.shape[-1] // 2
    return torch.cat([-x_BHTK[..., half:], x_BHTK[..., :half]], dim=-1)


def apply_rope(x_BHTK: torch.Tensor, cos_BTK: torch.Tensor, sin_BTK: torch.Tensor) -> torch.Tensor:
    """[B,H,T,K], [B,T,K] x2 -> [B,H,T,K]: turn each pair (j, j + K/2) of row b's token t by the
    angle whose cos and sin are cos_BTK[b, t], sin_BTK[b, t] (B may be 1: every row alike)."""
    cos_B1TK, sin_B1TK = cos_BTK[:, None], sin_BTK[:, None]  # (B, 1, T, K): one angle for every head
    return x_BHTK * cos_B1TK + rotate_half(x_BHTK) * sin_B1TK


def swiglu(x_BTD: torch.Tensor, layer: TorchLlamaLayerWeights) -> torch.Tensor:
    """[B,T,D] -> [B,T,D]: (SiLU(x W_gate) * x W_up) W_down, gate and up from one matmul."""
    h_BT2F = linear(x_BTD, layer.w_gate_up_OE, layer.b_gate_up)
    gate_BTF, up_BTF = h_BT2F.chunk(2, dim=-1)
    return linear(F.silu(gate_BTF) * up_BTF, layer.w_down_OE, layer.b_down)


def attention(
    x_BTD: torch.Tensor,
    layer: TorchLlamaLayerWeights,
    config: LlamaConfig,
    cos_BTK: torch.Tensor,
    sin_BTK: torch.Tensor,
    cache: Any = None,
    layer_index: int = 0,
    plan: Plan | None = None,
) -> torch.Tensor:
    """[B,T,D], RoPE's cos and sin [B,T,K] -> [B,T,D]: causal self-attention of T new tokens per
    row, queries and keys turned by RoPE (after QK-norm, where the layer has its gains).

    The keys are turned *before* they are stored: the cache holds rotated keys, which never need
    turning again. With a cache, ``plan`` says where each row's new keys go (slots len_b onwards),
    so cos and sin must be those same positions' (``rope_at`` with the plan's start).
    """
    q_BHTK, k_BHTK, v_new_BHTK = project_heads(x_BTD, layer, config)
    if layer.q_norm_K is not None:  # QK-norm (Qwen3): each head's q and k scaled to unit RMS
        q_BHTK = rms_norm(q_BHTK, layer.q_norm_K, config.rms_norm_eps)
        k_BHTK = rms_norm(k_BHTK, layer.k_norm_K, config.rms_norm_eps)
    q_BHTK = apply_rope(q_BHTK, cos_BTK, sin_BTK)
    k_rot_BHTK = apply_rope(k_BHTK, cos_BTK, sin_BTK)
    o_BHTK = attention_core(q_BHTK, k_rot_BHTK, v_new_BHTK, config.group_size, cache, layer_index, plan)
    return linear(merge_heads(o_BHTK, x_BTD), layer.w_o_OE, layer.b_o)


def block(
    x_BTD: torch.Tensor,
    layer: TorchLlamaLayerWeights,
    config: LlamaConfig,
    cos_BTK: torch.Tensor,
    sin_BTK: torch.Tensor,
    cache: Any = None,
    layer_index: int = 0,
    plan: Plan | None = None,
) -> torch.Tensor:
    """[B,T,D] -> [B,T,D]: x + attention(RMSNorm(x)), then x + SwiGLU(RMSNorm(x))."""
    eps = config.rms_norm_eps
    h_BTD = rms_norm(x_BTD, layer.attn_norm_D, eps)
    attn_BTD = attention(h_BTD, layer, config, cos_BTK, sin_BTK, cache, layer_index, plan)
    x_BTD = attn_BTD.add_(x_BTD)  # a fresh tensor: add in place
    return swiglu(rms_norm(x_BTD, layer.mlp_norm_D, eps), layer).add_(x_BTD)


# ---------------------------------------------------------------- weights


@dataclass
class TorchLlamaLayerWeights(OutInViews):
    """One block, named as ``llama.LlamaLayerWeights``. Matrices are [in, out] views, stored as
    ``torch_weights.row_major`` says; ``w_q``, ``w_k``, ``w_v`` are column slices of ``w_qkv`` and
    ``w_gate``, ``w_up`` of ``w_gate_up``. The biases are zeros (Llama has none), there so that
    ``torch_mirror.linear`` and ``project_heads`` serve as they are; ``q_norm_K`` and ``k_norm_K``
    are QK-norm's gains (Qwen3), else None."""

    attn_norm_D: torch.Tensor
    w_qkv: torch.Tensor
    b_qkv: torch.Tensor
    w_q: torch.Tensor
    w_k: torch.Tensor
    w_v: torch.Tensor
    w_o: torch.Tensor
    b_o: torch.Tensor
    mlp_norm_D: torch.Tensor
    w_gate_up: torch.Tensor
    b_gate_up: torch.Tensor
    w_gate: torch.Tensor
    w_up: torch.Tensor
    w_down: torch.Tensor
    b_down: torch.Tensor
    q_norm_K: torch.Tensor | None = None
    k_norm_K: torch.Tensor | None = None


_STORED = ("attn_norm_D", "w_qkv", "w_o", "mlp_norm_D", "w_gate_up", "w_down")  # the rest are views
_QK_NORM = ("q_norm_K", "k_norm_K")


def _numpy_dtype(dtype: torch.dtype) -> type:
    """The NumPy dtype to read weights in before they become ``dtype``: float64 stays float64;
    everything else goes through float32 (which holds bf16 and float16 exactly)."""
    return np.float64 if dtype == torch.float64 else np.float32


# ---------------------------------------------------------------- the model


class TorchLlamaModel(TorchDecoder):
    """A Llama-style decoder in PyTorch, batched: CUDA (bf16) when present, else the CPU (float32).

    Build it with ``random``, ``from_numpy`` (a ``LlamaModel``) or ``from_state_dict``;
    ``.config`` (a ``LlamaConfig``), ``.device``, ``.dtype``, ``.layers``
    (``TorchLlamaLayerWeights``), ``.wte_VD``, ``.norm_D``, ``.head_VD`` (the very tensor
    ``wte_VD`` when the config ties them), ``.cos_MK`` and ``.sin_MK`` (RoPE's tables for every
    position up to ``max_seq_len``), ``.bias_zeros`` (the zeros every layer's biases view).
    Every forward pass runs under ``torch.inference_mode()``. Token ids may be lists, NumPy
    arrays or tensors. The cache, the checked passes and the weight counts are ``TorchDecoder``'s
    (the named weights count a tied embedding once, the zero biases not at all); ``_run`` turns
    each row's keys for its own positions.
    """

    numpy_class = LlamaModel  # the NumPy twin: its config, weights and state-dict reader

    def __init__(
        self, config: LlamaConfig, weights: LlamaWeights, device: Any = None, dtype: torch.dtype | None = None
    ) -> None:
        self.accept(config, weights, device, dtype)
        cfg = config
        q_width, kv_width = cfg.n_heads * cfg.d_head, cfg.n_kv_heads * cfg.d_head
        widest = max(q_width + 2 * kv_width, 2 * cfg.d_ff, cfg.d_model)
        n_pad = WeightPacker.padded_rows(cfg.vocab_size, self.device)
        numel = sum(a.size for a in weights.arrays()) + n_pad * cfg.d_model + widest  # + the zero biases
        pack = WeightPacker(self.device, self.dtype, numel, 4 + 9 * len(weights.layers))
        self.bias_zeros = pack.vec(torch.zeros(widest))  # every layer's biases are views of it
        tied = weights.head_VD is weights.wte_VD
        self.wte_VD, self.head_VD = pack.embedding(weights.wte_VD, None if tied else weights.head_VD)
        self.norm_D = pack.vec(weights.norm_D)
        self.layers: list[TorchLlamaLayerWeights] = []
        for ly in weights.layers:
            w_qkv, w_gate_up = pack.mat(ly.w_q, ly.w_k, ly.w_v), pack.mat(ly.w_gate, ly.w_up)
            w_q, w_k, w_v = w_qkv.split([q_width, kv_width, kv_width], dim=1)
            w_gate, w_up = w_gate_up.split([cfg.d_ff, cfg.d_ff], dim=1)
            qk = {n: pack.vec(getattr(ly, n)) for n in _QK_NORM if getattr(ly, n) is not None}
            zeros = self.bias_zeros
            self.layers.append(TorchLlamaLayerWeights(
                attn_norm_D=pack.vec(ly.attn_norm_D), w_qkv=w_qkv, b_qkv=zeros[: q_width + 2 * kv_width],
                w_q=w_q, w_k=w_k, w_v=w_v, w_o=pack.mat(ly.w_o), b_o=zeros[: cfg.d_model],
                mlp_norm_D=pack.vec(ly.mlp_norm_D), w_gate_up=w_gate_up, b_gate_up=zeros[: 2 * cfg.d_ff],
                w_gate=w_gate, w_up=w_up, w_down=pack.mat(ly.w_down), b_down=zeros[: cfg.d_model], **qk,
            ))  # fmt: skip
        check_finite_weights(self._named_weights())  # a nan given, or a number past the dtype's range
        self.cos_MK, self.sin_MK = rope_tables(
            range(cfg.max_seq_len), cfg.d_head, cfg.rope_theta, self.dtype, self.device
        )

    # ------------------------------------------------------------ construction
    @classmethod
    def random(
        cls,
        config: LlamaConfig,
        seed: int = 0,
        device: Any = None,
        dtype: torch.dtype | None = None,
        std: float = 0.02,
    ) -> Any:
        """Random weights, the same draw as the NumPy twin's ``random(config, seed, std=std)`` (drawn
        in float64 and rounded to float32, or kept in float64 when ``dtype`` is float64)."""
        device, dtype = resolve_device_dtype(device, dtype)
        twin = cls.numpy_class.random(config, seed, _numpy_dtype(dtype), std)
        return cls(twin.config, twin.weights, device, dtype)

    @classmethod
    def from_numpy(cls, numpy_model: Any, device: Any = None, dtype: torch.dtype | None = None) -> Any:
        """The weights of the NumPy twin (a ``LlamaModel``; a ``Qwen3Model`` for ``TorchQwen3Model``),
        copied to ``device`` in ``dtype``."""
        if not isinstance(numpy_model, cls.numpy_class):
            raise TypeError(
                f"numpy_model: expected a kvtutor.{cls.numpy_class.__name__}, "
                f"got {type(numpy_model).__name__}"
            )
        return cls(numpy_model.config, numpy_model.weights, device, dtype)

    @classmethod
    def from_state_dict(
        cls,
        state_dict: Mapping[str, Any],
        config: Mapping[str, Any] | LlamaConfig,
        device: Any = None,
        dtype: torch.dtype | None = None,
    ) -> Any:
        """A Hugging Face ``state_dict`` of this family (tensors or arrays, ``model.`` prefix or not)
        and its ``config.json`` as a dict (or a config) -> model.

        Read and checked by the NumPy twin's ``from_state_dict`` (refused, naming the key: missing,
        unexpected or misshapen weights, non-finite numbers, a tied config whose head differs, and
        every config that ``from_hf`` refuses), then copied to ``device`` in ``dtype``.
        """
        device, dtype = resolve_device_dtype(device, dtype)  # fail before converting a large state dict
        twin = cls.numpy_class.from_state_dict(state_dict, config, _numpy_dtype(dtype))
        return cls(twin.config, twin.weights, device, dtype)

    def to_state_dict(self) -> dict[str, torch.Tensor]:
        """The weights in Hugging Face naming (``model.`` prefix, Linear weights [out, in])."""
        sd = {"model.embed_tokens.weight": self.wte_VD.clone()}
        for i, ly in enumerate(self.layers):
            pre = f"model.layers.{i}."
            named = {
                "input_layernorm": ly.attn_norm_D, "self_attn.q_proj": ly.w_q.mT,
                "self_attn.k_proj": ly.w_k.mT, "self_attn.v_proj": ly.w_v.mT, "self_attn.o_proj": ly.w_o.mT,
                "post_attention_layernorm": ly.mlp_norm_D, "mlp.gate_proj": ly.w_gate.mT,
                "mlp.up_proj": ly.w_up.mT, "mlp.down_proj": ly.w_down.mT,
            }  # fmt: skip
            if ly.q_norm_K is not None:
                named |= {"self_attn.q_norm": ly.q_norm_K, "self_attn.k_norm": ly.k_norm_K}
            sd |= {f"{pre}{name}.weight": w.contiguous().clone() for name, w in named.items()}
        sd["model.norm.weight"] = self.norm_D.clone()
        n_vocab = self.config.vocab_size
        head = sd["model.embed_tokens.weight"] if self.tied else self.head_VD[:n_vocab].clone()
        sd["lm_head.weight"] = head
        return sd

    @property
    def tied(self) -> bool:
        """Is the LM head the token embedding itself (the same rows)?"""
        return self.wte_VD.data_ptr() == self.head_VD.data_ptr()

    def _named_weights(self) -> list[tuple[str, torch.Tensor]]:
        out = [("wte_VD", self.wte_VD), ("norm_D", self.norm_D)]
        out += [] if self.tied else [("head_VD", self.head_VD)]
        for i, ly in enumerate(self.layers):
            names = _STORED + (_QK_NORM if ly.q_norm_K is not None else ())
            out += [(f"layers[{i}].{name}", getattr(ly, name)) for name in names]
        return out

    def __repr__(self) -> str:
        name = type(self).__name__
        config = fields_call(self.config, TEXT_WIDTH - len(name) - 1)  # nested: indented that much
        return wrap_call(name, [config, f"device={self.device}", f"dtype={self.dtype}"])

    # ------------------------------------------------------------ the hooks of one pass
    def positions(self, start: int | torch.Tensor, n_new: int) -> tuple[torch.Tensor, torch.Tensor]:
        """RoPE's cos and sin rows of positions start .. start+T-1 (``rope_at``): one table read a
        pass, shared by every block."""
        return rope_at(self.cos_MK, self.sin_MK, start, n_new)

    def embed(self, ids_BT: torch.Tensor, where: Any) -> torch.Tensor:
        """[B,T] -> [B,T,D]: token rows alone (positions enter each block through RoPE)."""
        return embed_tokens(ids_BT, self.wte_VD)

    def block(self, x_BTD, layer, index, where, cache, plan):
        """[B,T,D] -> [B,T,D]: ``block``, q and k turned by RoPE's rows ``where``."""
        cos_BTK, sin_BTK = where
        return block(x_BTD, layer, self.config, cos_BTK, sin_BTK, cache, index, plan)

    def final_norm(self, x_BTD: torch.Tensor) -> torch.Tensor:
        """[B,T,D] -> [B,T,D]: the final RMSNorm."""
        return rms_norm(x_BTD, self.norm_D, self.config.rms_norm_eps)
