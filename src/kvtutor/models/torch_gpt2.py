"""GPT-2 in PyTorch, batched [B, T]: the same model as ``kvtutor.models.gpt2``, written for timing.

What GPT-2 has of its own, as torch steps (``embed`` with learned positions, ``layer_norm``,
``gelu``, ``ffn``, ``attention``, ``block``: each the batched twin of ``gpt2``'s function of the
same name), its layer weights (``TorchLayerWeights``) and ``TorchGPT2Model``, which packs them
(``torch_weights.WeightPacker``: one arena on the CPU, each matrix along its longer side, the LM
head padded on CUDA) and supplies the hooks of ``TorchDecoder``'s one pass. Everything else, the
caches, the checked passes, ``generate`` and the CUDA-graph step, is ``TorchDecoder``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F

from ..caches.protocol import Plan
from ..text import TEXT_WIDTH, wrap_call
from ..validate import check_seed
from .config import GPT2Config
from .gpt2 import GPT2Model
from .gpt2_weights import GPT2Weights, LayerWeights, gpt2_state_dict, random_weights, weights_from_state_dict
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
    "embed",
    "layer_norm",
    "gelu",
    "ffn",
    "attention",
    "block",
    "TorchLayerWeights",
    "TorchGPT2Model",
]

_GELU_INPLACE = torch.ops.aten.gelu_.default  # GELU written into its input (no new tensor)


# ---------------------------------------------------------------- GPT-2's own steps


def embed(
    ids_BT: torch.Tensor, wte_VD: torch.Tensor, wpe_MD: torch.Tensor, start: int | torch.Tensor = 0
) -> torch.Tensor:
    """[B,T], [V,D], [M,D], int or [B] -> [B,T,D]: token plus position embedding, row b from start_b on."""
    n_new = ids_BT.shape[1]
    if isinstance(start, int):
        pos_TD = wpe_MD[start : start + n_new]  # every row at the same positions: a slice, no gather
        return F.embedding(ids_BT, wte_VD).add_(pos_TD)  # a fresh tensor: add in place
    pos_BT = start[:, None] + torch.arange(n_new, device=start.device)
    return F.embedding(ids_BT, wte_VD) + F.embedding(pos_BT, wpe_MD)


def layer_norm(x_BTD: torch.Tensor, g_D: torch.Tensor, b_D: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """[B,T,D], [D], [D] -> [B,T,D]"""
    return torch.layer_norm(x_BTD, g_D.shape, g_D, b_D, eps)


def gelu(x: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    """[...] -> [...]: GELU, tanh approximation (GPT-2's 'gelu_new'); ``inplace`` overwrites x."""
    if inplace:
        return _GELU_INPLACE(x, approximate="tanh")
    return F.gelu(x, approximate="tanh")


def ffn(x_BTD: torch.Tensor, layer: TorchLayerWeights) -> torch.Tensor:
    """[B,T,D] -> [B,T,D]: W_fc [D,F], GELU, W_proj [F,D]."""
    h_BTF = linear(x_BTD, layer.w_fc_OE, layer.b_fc)
    return linear(gelu(h_BTF, inplace=True), layer.w_proj_OE, layer.b_proj)  # h is ours: no new [B,T,F]


def attention(
    x_BTD: torch.Tensor,
    layer: TorchLayerWeights,
    config: GPT2Config,
    cache: Any = None,
    layer_index: int = 0,
    plan: Plan | None = None,
) -> torch.Tensor:
    """[B,T,D] -> [B,T,D]: multi-head causal self-attention of T new tokens per row.

    With a cache, ``plan`` (from the cache) says where each row's new keys and values go and which
    keys each query may see; the queries attend to the S keys the cache returns. Without one,
    S = T (full recompute, plain causal mask).
    """
    q_BHTK, k_new_BHTK, v_new_BHTK = project_heads(x_BTD, layer, config)
    o_BHTK = attention_core(q_BHTK, k_new_BHTK, v_new_BHTK, config.group_size, cache, layer_index, plan)
    return linear(merge_heads(o_BHTK, x_BTD), layer.w_o_OE, layer.b_o)


def block(
    x_BTD: torch.Tensor,
    layer: TorchLayerWeights,
    config: GPT2Config,
    cache: Any = None,
    layer_index: int = 0,
    plan: Plan | None = None,
) -> torch.Tensor:
    """[B,T,D] -> [B,T,D]: x + attention(LN(x)), then x + FFN(LN(x)) (pre-LayerNorm, as GPT-2)."""
    eps = config.layer_norm_eps
    h_BTD = layer_norm(x_BTD, layer.ln1_g, layer.ln1_b, eps)
    x_BTD = attention(h_BTD, layer, config, cache, layer_index, plan).add_(x_BTD)  # fresh: add in place
    return ffn(layer_norm(x_BTD, layer.ln2_g, layer.ln2_b, eps), layer).add_(x_BTD)


@dataclass
class TorchLayerWeights(OutInViews):
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


# ---------------------------------------------------------------- the model


class TorchGPT2Model(TorchDecoder):
    """GPT-2 in PyTorch, batched, for timing: CUDA (bf16) when present, else the CPU (float32).

    Build it with ``random``, ``from_numpy`` or ``from_gpt2_state_dict``; ``.config``, ``.device``,
    ``.dtype``, ``.layers`` (``TorchLayerWeights``), ``.wte_VD``, ``.wpe_MD``, ``.head_VD`` (the LM
    head as multiplied: ``wte_VD`` with zero rows added on CUDA up to a multiple of 64). Every
    forward pass runs under ``torch.inference_mode()``. Token ids may be lists, NumPy arrays or
    tensors.
    """

    numpy_class = GPT2Model  # the NumPy twin: its config and weights (and their one schema)

    def __init__(
        self, config: GPT2Config, weights: GPT2Weights, device: Any = None, dtype: torch.dtype | None = None
    ) -> None:
        self.accept(config, weights, device, dtype)
        n_pad = WeightPacker.padded_rows(config.vocab_size, self.device)
        n_tensors = 4 + len(weights.layers) * len(fields(LayerWeights))
        pack = WeightPacker(self.device, self.dtype, config.n_params + n_pad * config.d_model, n_tensors)
        self.wte_VD, self.head_VD = pack.embedding(weights.wte_VD)
        self.wpe_MD = pack.vec(weights.wpe_MD)
        self.lnf_g, self.lnf_b = pack.vec(weights.lnf_g), pack.vec(weights.lnf_b)
        self.layers: list[TorchLayerWeights] = []
        q_width, kv_width = config.d_model, config.n_kv_heads * config.d_head
        split = {"w_q", "b_q", "w_k", "b_k", "w_v", "b_v"}  # become views of the fused w_qkv / b_qkv
        for ly in weights.layers:
            w_qkv = pack.mat(ly.w_q, ly.w_k, ly.w_v)
            b_qkv = pack.vec(torch.cat([torch.as_tensor(b) for b in (ly.b_q, ly.b_k, ly.b_v)]))
            w_q, w_k, w_v = w_qkv.split([q_width, kv_width, kv_width], dim=1)
            b_q, b_k, b_v = b_qkv.split([q_width, kv_width, kv_width])
            rest = {
                f.name: (pack.mat if f.name.startswith("w_") else pack.vec)(getattr(ly, f.name))
                for f in fields(ly)
                if f.name not in split
            }
            self.layers.append(
                TorchLayerWeights(
                    w_qkv=w_qkv, b_qkv=b_qkv, w_q=w_q, b_q=b_q, w_k=w_k, b_k=b_k, w_v=w_v, b_v=b_v, **rest
                )
            )
        check_finite_weights(self._named_weights())  # a nan given, or a number past the dtype's range

    # ------------------------------------------------------------ construction
    @classmethod
    def random(
        cls, config: GPT2Config, seed: int = 0, device: Any = None, dtype: torch.dtype | None = None
    ) -> TorchGPT2Model:
        """Random weights, the same draw as ``GPT2Model.random(config, seed)``."""
        if not isinstance(config, GPT2Config):
            raise TypeError(f"config: expected a kvtutor.GPT2Config, got {type(config).__name__}")
        device, dtype = resolve_device_dtype(device, dtype)  # fail before drawing
        return cls(config, random_weights(config, seed), device, dtype)

    @classmethod
    def random_on_device(
        cls, config: GPT2Config, seed: int = 0, device: Any = None, dtype: torch.dtype | None = None
    ) -> TorchGPT2Model:
        """Random weights drawn by torch on ``device`` (the same distributions as ``random``, not the
        same numbers): for shapes too large to draw in NumPy on the host (a 6.7B model in seconds)."""
        if not isinstance(config, GPT2Config):
            raise TypeError(f"config: expected a kvtutor.GPT2Config, got {type(config).__name__}")
        device, dtype = resolve_device_dtype(device, dtype)
        gen = torch.Generator(device=device).manual_seed(check_seed(seed))
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
    def from_numpy(
        cls, numpy_model: Any, device: Any = None, dtype: torch.dtype | None = None
    ) -> TorchGPT2Model:
        """The weights of a ``GPT2Model``, copied to ``device`` in ``dtype``."""
        config, weights = getattr(numpy_model, "config", None), getattr(numpy_model, "weights", None)
        if not isinstance(config, GPT2Config) or not isinstance(weights, GPT2Weights):
            raise TypeError(f"numpy_model: expected a kvtutor.GPT2Model, got {type(numpy_model).__name__}")
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
    ) -> TorchGPT2Model:
        """A Hugging Face GPT-2 ``state_dict`` (tensors or arrays, ``transformer.`` prefix or not) -> model.

        Weights are checked as they load (finite, floating, every key, shapes); with ``hf_config`` (a
        ``config.json`` dict) the layers, heads and vocabulary are checked against it too."""
        device, dtype = resolve_device_dtype(device, dtype)  # fail before converting a large state dict
        config, weights = weights_from_state_dict(state_dict, n_heads, n_kv_heads, hf_config=hf_config)
        return cls(config, weights, device, dtype)

    def to_gpt2_state_dict(self) -> dict[str, torch.Tensor]:
        """The weights in Hugging Face ``GPT2LMHeadModel`` naming (Conv1D [in, out] layout, c_attn fused)."""
        sd = gpt2_state_dict(self, lambda ly: (ly.w_qkv, ly.b_qkv))
        return {k: v.contiguous().clone() for k, v in sd.items()}

    def _named_weights(self) -> list[tuple[str, torch.Tensor]]:
        out = [("wte_VD", self.wte_VD), ("wpe_MD", self.wpe_MD), ("lnf_g", self.lnf_g), ("lnf_b", self.lnf_b)]
        skip = {"w_q", "b_q", "w_k", "b_k", "w_v", "b_v"}  # views of w_qkv / b_qkv
        for i, ly in enumerate(self.layers):
            out += [(f"layers[{i}].{f.name}", getattr(ly, f.name)) for f in fields(ly) if f.name not in skip]
        return out

    def __repr__(self) -> str:
        config = self.config.wrapped(TEXT_WIDTH - len("TorchGPT2Model("))  # nested: indented that much
        return wrap_call("TorchGPT2Model", [config, f"device={self.device}", f"dtype={self.dtype}"])

    # ------------------------------------------------------------ the hooks of one pass
    def embed(self, ids_BT: torch.Tensor, where: int | torch.Tensor) -> torch.Tensor:
        """[B,T] -> [B,T,D]: token rows plus the learned rows of positions ``where`` onwards."""
        return embed(ids_BT, self.wte_VD, self.wpe_MD, where)

    def block(self, x_BTD, layer, index, where, cache, plan):
        """[B,T,D] -> [B,T,D]: ``block`` (positions entered at the input)."""
        return block(x_BTD, layer, self.config, cache, index, plan)

    def final_norm(self, x_BTD: torch.Tensor) -> torch.Tensor:
        """[B,T,D] -> [B,T,D]: ln_f."""
        return layer_norm(x_BTD, self.lnf_g, self.lnf_b, self.config.layer_norm_eps)
