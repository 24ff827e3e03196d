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
the layers carry zero biases, views of one zero vector: the same numbers, the mirror's code.
No fused or graphed decode here: every pass runs the step functions below.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..caches.torch_kv import Plan, TorchKVCache
from ..text import TEXT_WIDTH, fields_call, wrap_call
from . import llama
from .llama import LlamaConfig, LlamaModel, LlamaWeights
from .torch_gpt2 import TorchDecoder
from .torch_mirror import (
    OutInViews,
    as_rows,
    attention_core,
    check_finite_weights,
    linear,
    lm_head,
    merge_heads,
    project_heads,
    resolve_device_dtype,
)

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
    cache: TorchKVCache | None = None,
    layer_index: int = 0,
    plan: Plan | None = None,
) -> torch.Tensor:
    """[B,T,D], RoPE's cos and sin [B,T,K] -> [B,T,D]: causal self-attention of T new tokens per
    row, queries and keys turned by RoPE.

    The keys are turned *before* they are stored: the cache holds rotated keys, which never need
    turning again. With a cache, ``plan`` says where each row's new keys go (slots len_b onwards),
    so cos and sin must be those same positions' (``rope_at`` with the plan's start).
    """
    q_BHTK, k_BHTK, v_new_BHTK = project_heads(x_BTD, layer, config)
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
    cache: TorchKVCache | None = None,
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
    """One block, named as ``llama.LlamaLayerWeights``. Matrices are [in, out] views of contiguous
    [out, in] tensors (Hugging Face's layout); ``w_q``, ``w_k``, ``w_v`` are column slices of
    ``w_qkv`` and ``w_gate``, ``w_up`` of ``w_gate_up``. The biases are zeros (Llama has none),
    there so that ``torch_mirror.linear`` and ``project_heads`` serve as they are."""

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


_STORED = ("attn_norm_D", "w_qkv", "w_o", "mlp_norm_D", "w_gate_up", "w_down")  # the rest are views


def _numpy_dtype(dtype: torch.dtype) -> type:
    """The NumPy dtype to read weights in before they become ``dtype``: float64 stays float64;
    everything else goes through float32 (which holds bf16 and float16 exactly)."""
    return np.float64 if dtype == torch.float64 else np.float32


# ---------------------------------------------------------------- the model


class TorchLlamaModel(TorchDecoder):
    """A Llama-style decoder in PyTorch, batched: CUDA (bf16) when present, else the CPU (float32).

    Build it with ``random``, ``from_numpy`` (a ``LlamaModel``) or ``from_llama_state_dict``;
    ``.config`` (a ``LlamaConfig``), ``.device``, ``.dtype``, ``.layers``
    (``TorchLlamaLayerWeights``), ``.wte_VD``, ``.norm_D``, ``.head_VD`` (the very tensor
    ``wte_VD`` when the config ties them), ``.cos_MK`` and ``.sin_MK`` (RoPE's tables for every
    position up to ``max_seq_len``), ``.bias_zeros`` (the zeros every layer's biases view).
    Every forward pass runs under ``torch.inference_mode()``. Token ids may be lists, NumPy
    arrays or tensors. The cache, the checked passes and the weight counts are ``TorchDecoder``'s
    (the named weights count a tied embedding once, the zero biases not at all); ``_run`` turns
    each row's keys for its own positions.
    """

    def __init__(
        self, config: LlamaConfig, weights: LlamaWeights, device: Any = None, dtype: torch.dtype | None = None
    ) -> None:
        if not isinstance(config, LlamaConfig):
            raise TypeError(f"config: expected a kvtutor.LlamaConfig, got {type(config).__name__}")
        if not isinstance(weights, LlamaWeights):
            raise TypeError(
                f"weights: expected a kvtutor.models.llama.LlamaWeights, got {type(weights).__name__}"
            )
        self.config = config
        self.device, self.dtype = resolve_device_dtype(device, dtype)

        def vec(a: np.ndarray) -> torch.Tensor:  # always a copy: nothing shared with the NumPy model
            return torch.tensor(np.ascontiguousarray(a), dtype=self.dtype, device=self.device)

        def mat(*parts_EO: np.ndarray) -> torch.Tensor:  # [E, O] blocks side by side -> an [E, sum O] view
            return vec(np.concatenate([np.asarray(p).T for p in parts_EO], axis=0)).mT

        cfg = config
        q_width, kv_width = cfg.n_heads * cfg.d_head, cfg.n_kv_heads * cfg.d_head
        widest = max(q_width + 2 * kv_width, 2 * cfg.d_ff, cfg.d_model)
        self.bias_zeros = torch.zeros(widest, dtype=self.dtype, device=self.device)  # every layer's biases
        self.wte_VD = vec(weights.wte_VD)
        self.head_VD = self.wte_VD if weights.head_VD is weights.wte_VD else vec(weights.head_VD)
        self.norm_D = vec(weights.norm_D)
        self.layers: list[TorchLlamaLayerWeights] = []
        for ly in weights.layers:
            w_qkv, w_gate_up = mat(ly.w_q, ly.w_k, ly.w_v), mat(ly.w_gate, ly.w_up)
            w_q, w_k, w_v = w_qkv.split([q_width, kv_width, kv_width], dim=1)
            w_gate, w_up = w_gate_up.split([cfg.d_ff, cfg.d_ff], dim=1)
            self.layers.append(TorchLlamaLayerWeights(
                attn_norm_D=vec(ly.attn_norm_D), w_qkv=w_qkv, b_qkv=self.bias_zeros[: q_width + 2 * kv_width],
                w_q=w_q, w_k=w_k, w_v=w_v, w_o=mat(ly.w_o), b_o=self.bias_zeros[: cfg.d_model],
                mlp_norm_D=vec(ly.mlp_norm_D), w_gate_up=w_gate_up, b_gate_up=self.bias_zeros[: 2 * cfg.d_ff],
                w_gate=w_gate, w_up=w_up, w_down=mat(ly.w_down), b_down=self.bias_zeros[: cfg.d_model],
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
    ) -> TorchLlamaModel:
        """Random weights, the same draw as ``LlamaModel.random(config, seed, std=std)`` (drawn in
        float64 and rounded to float32, or kept in float64 when ``dtype`` is float64)."""
        device, dtype = resolve_device_dtype(device, dtype)
        numpy_model = LlamaModel.random(config, seed, _numpy_dtype(dtype), std)
        return cls(numpy_model.config, numpy_model.weights, device, dtype)

    @classmethod
    def from_numpy(
        cls, llama_model: Any, device: Any = None, dtype: torch.dtype | None = None
    ) -> TorchLlamaModel:
        """The weights of a ``LlamaModel``, copied to ``device`` in ``dtype``."""
        if not isinstance(llama_model, LlamaModel):
            raise TypeError(f"llama_model: expected a kvtutor.LlamaModel, got {type(llama_model).__name__}")
        return cls(llama_model.config, llama_model.weights, device, dtype)

    @classmethod
    def from_llama_state_dict(
        cls,
        state_dict: Mapping[str, Any],
        config: Mapping[str, Any] | LlamaConfig,
        device: Any = None,
        dtype: torch.dtype | None = None,
    ) -> TorchLlamaModel:
        """A Hugging Face Llama ``state_dict`` (tensors or arrays, ``model.`` prefix or not) and its
        ``config.json`` as a dict (or a ``LlamaConfig``) -> model.

        Read and checked by ``LlamaModel.from_llama_state_dict`` (refused, naming the key: missing,
        unexpected or misshapen weights, non-finite numbers, a tied config whose head differs, and
        every config that ``LlamaConfig.from_hf`` refuses), then copied to ``device`` in ``dtype``.
        """
        device, dtype = resolve_device_dtype(device, dtype)  # fail before converting a large state dict
        numpy_model = LlamaModel.from_llama_state_dict(state_dict, config, _numpy_dtype(dtype))
        return cls(numpy_model.config, numpy_model.weights, device, dtype)

    def to_llama_state_dict(self) -> dict[str, torch.Tensor]:
        """The weights in Hugging Face ``LlamaForCausalLM`` naming (``model.`` prefix, [out, in])."""
        sd = {"model.embed_tokens.weight": self.wte_VD.clone()}
        for i, ly in enumerate(self.layers):
            pre = f"model.layers.{i}."
            named = {
                "input_layernorm": ly.attn_norm_D, "self_attn.q_proj": ly.w_q.mT,
                "self_attn.k_proj": ly.w_k.mT, "self_attn.v_proj": ly.w_v.mT, "self_attn.o_proj": ly.w_o.mT,
                "post_attention_layernorm": ly.mlp_norm_D, "mlp.gate_proj": ly.w_gate.mT,
                "mlp.up_proj": ly.w_up.mT, "mlp.down_proj": ly.w_down.mT,
            }  # fmt: skip
            sd |= {f"{pre}{name}.weight": w.contiguous().clone() for name, w in named.items()}
        sd["model.norm.weight"] = self.norm_D.clone()
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"] if self.tied else self.head_VD.clone()
        return sd

    @property
    def tied(self) -> bool:
        """Is the LM head the token embedding itself?"""
        return self.head_VD is self.wte_VD

    def _named_weights(self) -> list[tuple[str, torch.Tensor]]:
        out = [("wte_VD", self.wte_VD), ("norm_D", self.norm_D)]
        out += [] if self.tied else [("head_VD", self.head_VD)]
        for i, ly in enumerate(self.layers):
            out += [(f"layers[{i}].{name}", getattr(ly, name)) for name in _STORED]
        return out

    def __repr__(self) -> str:
        name = type(self).__name__
        config = fields_call(self.config, TEXT_WIDTH - len(name) - 1)  # nested: indented that much
        return wrap_call(name, [config, f"device={self.device}", f"dtype={self.dtype}"])

    # ------------------------------------------------------------ forward passes
    def run_pass(
        self, ids_BT: torch.Tensor, cache: TorchKVCache | None, plan: Plan | None, last_only: bool = False
    ) -> torch.Tensor:
        """Embed, the blocks, the final RMSNorm, LM head (``TorchDecoder.run_pass``)."""
        cfg = self.config
        if plan is None:
            start: int | torch.Tensor = 0
        else:
            start = plan.start if plan.pos_B is None else plan.pos_B
        cos_BTK, sin_BTK = rope_at(self.cos_MK, self.sin_MK, start, ids_BT.shape[1])
        x_BTD = as_rows(embed_tokens(ids_BT, self.wte_VD))  # a CPU decode step: rows
        for i, layer in enumerate(self.layers):
            x_BTD = block(x_BTD, layer, cfg, cos_BTK, sin_BTK, cache, i, plan)
        if last_only and x_BTD.dim() == 3:
            x_BTD = x_BTD[:, -1:]
        return lm_head(rms_norm(x_BTD, self.norm_D, cfg.rms_norm_eps), self.head_VD)
