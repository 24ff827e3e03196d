"""The PyTorch model: the same GPT-2 as ``gpt2``, batched [B, T], written for timing.

``TorchDecoder`` is what every torch model shares: the checked passes (``forward``, ``prefill``,
``prefill_row``, ``decode_step``, ``logits_without_cache``, ``generate``), the caches, and the one
fast decode path of each device (on a CPU the model's own step functions; on CUDA the same pass
over a fixed plan, replayed from CUDA graphs: ``compile_decode`` in ``kvtutor.models.torch_engine``).
``TorchGPT2Model`` builds GPT-2's weights (fused, laid out for the device; on the CPU in one arena on
2 MiB pages) and supplies its pass (``run_pass``): the batched mirrors of ``gpt2``'s step
functions, in ``kvtutor.models.torch_mirror``. The caches are in ``kvtutor.caches.torch_kv``; a
NumPy cache of one sequence (window, int8, paged, prefix-cached) runs as a batch of one through
``kvtutor.caches.torch_bridge``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import fields, replace
from typing import Any

import numpy as np
import torch

from ..caches.kv import CACHE_KINDS, CacheBase
from ..caches.torch_bridge import SequenceCache
from ..caches.torch_kv import Plan, TorchConcatKVCache, TorchKVCache, TorchPreallocatedKVCache, check_active
from ..text import TEXT_WIDTH, wrap_call
from ..validate import check_int, check_max_new_tokens, check_seed
from .config import GPT2Config
from .gpt2_weights import GPT2Weights, LayerWeights, gpt2_state_dict, random_weights, weights_from_state_dict
from .torch_engine import WeightArena, bucket_for, check_batch, compile_decode, token_ids
from .torch_mirror import (
    TorchLayerWeights,
    as_rows,
    block,
    check_finite_weights,
    embed,
    layer_norm,
    lm_head,
    resolve_device_dtype,
)

__all__ = ["TorchDecoder", "TorchGPT2Model"]

_VOCAB_MULTIPLE = {"cuda": 64}  # LM head rows padded to a multiple of this, per device type
_CACHE_CLASSES = {"preallocated": TorchPreallocatedKVCache, "concat": TorchConcatKVCache}
assert tuple(_CACHE_CLASSES) == CACHE_KINDS  # the same kind names as the NumPy model's


class TorchDecoder:
    """What every torch model of kvtutor shares (GPT-2's ``TorchGPT2Model``, ``TorchLlamaModel``): the
    cache (``new_cache``, ``check_cache``), the checked passes (``forward``, ``prefill``,
    ``forward_row``, ``prefill_row``, ``decode_step``, ``logits_without_cache``, ``generate``), the
    fast decode path (``compile_decode``) and the weight counts. A model supplies ``config``,
    ``device``, ``dtype``, ``layers``, ``_named_weights`` and ``run_pass``: embedding, blocks and
    head of one unchecked pass."""

    config: Any
    device: torch.device
    dtype: torch.dtype
    layers: list[Any]
    # generate's graphed decode: ((batch, capacity), cache, step), kept for the next call
    _kept_decode: tuple[tuple[int, int], TorchPreallocatedKVCache, Callable[..., Any]] | None = None

    def _named_weights(self) -> list[tuple[str, torch.Tensor]]:
        raise NotImplementedError

    def run_pass(
        self, ids_BT: torch.Tensor, cache: TorchKVCache | None, plan: Plan | None, last_only: bool = False
    ) -> torch.Tensor:
        """[B,T] -> [B,T,V] ([B,1,V] with ``last_only``): embedding, blocks, final norm and head of
        one pass, unchecked (callers validate). Each layer writes the cache where ``plan`` says; the
        lengths do not move (``_run`` advances them; a CUDA graph records that itself)."""
        raise NotImplementedError

    def _run(
        self, ids_BT: torch.Tensor, cache: TorchKVCache | None, plan: Plan | None, last_only: bool = False
    ) -> torch.Tensor:
        """``run_pass``, then the cache advanced by the plan."""
        logits = self.run_pass(ids_BT, cache, plan, last_only)
        if cache is not None:
            cache.advance(plan)
        return logits

    def first_layers(self, n_layers: int) -> Any:
        """A model of this model's first ``n_layers`` blocks, then its final norm and LM head: a
        layer-cut draft for speculative decoding. It shares every weight tensor, nothing is copied."""
        n_layers = check_int("n_layers", n_layers, 1, self.config.n_layers)
        cut = copy.copy(self)
        cut.config = replace(self.config, n_layers=n_layers)
        cut.layers = self.layers[:n_layers]
        cut._kept_decode = None  # its own graphed decode, for its own caches
        return cut

    def _weights(self) -> list[torch.Tensor]:
        return [t for _, t in self._named_weights()]

    @property
    def n_params(self) -> int:
        """Parameters, the tied embedding / LM head counted once."""
        return sum(t.numel() for t in self._weights())

    @property
    def nbytes(self) -> int:
        """Bytes of the weights as stored (the tied embedding counted once)."""
        return sum(t.numel() * t.element_size() for t in self._weights())

    # ------------------------------------------------------------ caches
    def new_cache(
        self, batch_size: int = 1, capacity: int | None = None, kind: str = "preallocated"
    ) -> TorchKVCache:
        """An empty cache for ``batch_size`` rows of up to ``capacity`` positions each (default: the
        model's ``max_seq_len``).

        ``"preallocated"``: buffers [L, B, Hkv, M, K] written in place, rows at their own lengths;
        ``"concat"``: tensors that grow by ``torch.cat`` each step, rows at one length.
        """
        cfg = self.config
        if isinstance(batch_size, str):
            raise TypeError(
                f"batch_size: expected an int, got str {batch_size!r} (the kind is a keyword argument: "
                f"new_cache(kind={batch_size!r}))"
            )
        batch_size = check_int("batch_size", batch_size, 1)
        most = cfg.max_seq_len
        capacity = most if capacity is None else check_int("capacity", capacity, 1, most)
        if kind not in _CACHE_CLASSES:
            raise ValueError(f"kind: expected one of {sorted(_CACHE_CLASSES)}, got {kind!r}")
        return _CACHE_CLASSES[kind](
            cfg.n_layers, batch_size, cfg.n_kv_heads, capacity, cfg.d_head, self.device, self.dtype
        )

    def check_cache(self, cache: Any, kind: str | None = None) -> TorchKVCache:
        """``cache``, if it is a cache from ``new_cache`` that fits this model (layers, KV heads, head
        width, dtype, device, at most ``max_seq_len`` positions) and, given ``kind``, of that kind;
        else a TypeError or ValueError naming ``cache``. A NumPy cache of one sequence (window, int8,
        paged, prefix-cached: ``kvtutor.caches``) comes back as a batch of one around it
        (``torch_bridge.SequenceCache``, kind ``"sequence"``)."""
        if isinstance(cache, CacheBase):
            cache = SequenceCache(cache, self.device, self.dtype)
        if not isinstance(cache, TorchKVCache):
            raise TypeError(
                f"cache: expected a cache from {type(self).__name__}.new_cache() or a NumPy cache of "
                f"one sequence, got {type(cache).__name__}"
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
        if kind is not None and cache.kind != kind:
            raise ValueError(f"cache: expected a kind={kind!r} cache, got kind={cache.kind!r}")
        return cache

    # ------------------------------------------------------------ checked passes
    @torch.inference_mode()
    def forward(self, ids_BT: Any, cache: TorchKVCache | None = None) -> torch.Tensor:
        """[B,T] -> [B,T,V]: T new tokens per row, at positions len .. len+T-1 of each row of the cache.

        Without a cache the tokens are whole sequences (positions 0 .. T-1). With a preallocated cache
        the rows may be at different lengths; a concat cache keeps them at one length.
        """
        if cache is not None:
            cache = self.check_cache(cache)
        ids_BT = token_ids(ids_BT, 2, self.config.vocab_size, "ids_BT", self.device)
        n_new = ids_BT.shape[1]
        if cache is None:
            if n_new > self.config.max_seq_len:
                raise ValueError(f"ids_BT: {n_new} tokens exceed max_seq_len {self.config.max_seq_len}")
            return self._run(ids_BT, None, None)
        check_batch(ids_BT, cache, "ids_BT")
        return self._run(ids_BT, cache, cache.plan(n_new, name="ids_BT"))

    def prefill(self, ids_BT: Any, cache: TorchKVCache) -> torch.Tensor:
        """[B,T] -> [B,T,V]: whole prompts in one pass; writes T keys and values per row and layer."""
        if cache is None:
            raise TypeError(f"cache: expected a cache from {type(self).__name__}.new_cache(), got None")
        return self.forward(ids_BT, cache)

    @torch.inference_mode()
    def forward_row(self, ids_T: Any, cache: TorchKVCache, row: int) -> torch.Tensor:
        """[T] -> [T,V]: T new tokens of one row of a batched cache, at positions len(row) ..
        len(row)+T-1 (a prompt chunk continuing its row); the other rows are untouched."""
        cache = self.check_cache(cache)
        row = cache.check_row(row)
        if cache.kind == "concat" and cache.batch_size > 1:
            raise ValueError("row: a concat cache keeps its rows at one length; use kind='preallocated'")
        ids_1T = token_ids(ids_T, 1, self.config.vocab_size, "ids_T", self.device)[None]
        plan = cache.plan(ids_1T.shape[1], row=row, name="ids_T")  # raises if the row lacks room
        return self._run(ids_1T, cache, plan)[0]

    def prefill_row(self, ids_T: Any, cache: TorchKVCache, row: int) -> torch.Tensor:
        """[T] -> [T,V]: prefill one row of a batched cache (an empty row); the other rows are untouched."""
        cache = self.check_cache(cache)
        row = cache.check_row(row)
        if cache.kind == "concat" and cache.batch_size > 1:
            raise ValueError("row: a concat cache keeps its rows at one length; use kind='preallocated'")
        ids_T = token_ids(ids_T, 1, self.config.vocab_size, "ids_T", self.device)
        held = cache.host_lengths[row]
        if held:
            raise ValueError(
                f"row: expected an empty row (reset_row it first), row {row} holds {held} tokens"
            )
        return self.forward_row(ids_T, cache, row)

    @torch.inference_mode()
    def decode_step(self, ids_B: Any, cache: TorchKVCache, active: Any = None) -> torch.Tensor:
        """[B] -> [B,V]: one new token per row, each at its own row's length (rows may differ).

        ``active`` (bool [B], default all): rows marked False are not advanced and their cache is not
        written; their logits rows are NaN. Every active row must already hold a token (prefill first).
        The step is the model's own pass (``run_pass``) with T = 1: on a CPU a single row's products
        are BLAS mat-vecs (``torch_mirror.linear``); ``compile_decode`` is the fixed-shape step that
        CUDA graphs replay.
        """
        if cache is None:
            raise TypeError(f"cache: expected a cache from {type(self).__name__}.new_cache(), got None")
        cache = self.check_cache(cache)
        ids_B1 = token_ids(ids_B, 1, self.config.vocab_size, "ids_B", self.device)[:, None]
        check_batch(ids_B1, cache, "ids_B")
        active_B = check_active(active, cache)
        lengths = cache.host_lengths_array  # read-only, no device sync
        empty = np.flatnonzero((lengths == 0) & (True if active_B is None else active_B))
        if empty.size:
            raise ValueError(
                f"cache: expected prefilled rows for decode_step, row {int(empty[0])} is empty "
                "(prefill it, or mark it inactive)"
            )
        plan = cache.plan(1, active=active_B, name="ids_B")
        logits_BV = self._run(ids_B1, cache, plan)[:, 0]
        if plan.active_dev is not None:
            logits_BV.masked_fill_(plan.active_dev[:, None] == 0, float("nan"))
        return logits_BV

    @torch.inference_mode()
    def generate(
        self, ids_BT: Any, max_new_tokens: int, cache_kind: str = "preallocated", graphs: bool | None = None
    ) -> torch.Tensor:
        """prompts [B,T] -> new token ids [B,N], greedy: one prefill, then one batched decode step a token.

        The steps take the model's fast path on this device (``_decode_steps``): ``graphs``
        (default: on CUDA with the preallocated cache) runs them through ``compile_decode``:
        CUDA graph replays on a GPU, the same fixed-shape step eagerly on a CPU; the cache and its
        graphs are kept for the next call of the same batch size and capacity bucket, so only the first
        call pays for the capture. ``graphs=False`` runs every step eagerly.
        """
        ids_BT = token_ids(ids_BT, 2, self.config.vocab_size, "ids_BT", self.device)
        n_batch, n_prompt = ids_BT.shape
        n_new = check_max_new_tokens(max_new_tokens, n_prompt, self.config.max_seq_len, "max_seq_len")
        if cache_kind not in _CACHE_CLASSES:
            raise ValueError(f"cache_kind: expected one of {sorted(_CACHE_CLASSES)}, got {cache_kind!r}")
        out_NB = torch.empty(n_new, n_batch, dtype=torch.long, device=self.device)
        if n_new == 0:
            return out_NB.T
        n_positions = n_prompt + n_new - 1  # the last new token is never fed back
        cache, step = self._decode_steps(n_batch, n_positions, cache_kind, graphs)
        logits_B1V = self._run(ids_BT, cache, cache.plan(n_prompt), last_only=True)
        torch.argmax(logits_B1V[:, 0], dim=-1, out=out_NB[0])
        for i in range(1, n_new):
            torch.argmax(step(out_NB[i - 1]), dim=-1, out=out_NB[i])
        return out_NB.T.contiguous()

    def _decode_steps(
        self, n_batch: int, n_positions: int, cache_kind: str, graphs: bool | None
    ) -> tuple[TorchKVCache, Callable[[torch.Tensor], torch.Tensor]]:
        """``generate``'s cache and its one step a token, the fast path of this device: the graphed
        fixed-shape step (``graphs``, the default on CUDA with the preallocated cache), else the
        model's pass itself (``run_pass``, T = 1)."""
        if graphs is None:
            graphs = self.device.type == "cuda" and cache_kind == "preallocated"
        elif not isinstance(graphs, bool):
            raise TypeError(f"graphs: expected a bool or None, got {type(graphs).__name__}")
        elif graphs and cache_kind != "preallocated":
            raise ValueError("graphs: the fixed-shape step needs cache_kind='preallocated', got 'concat'")
        if graphs:
            cache, graphed = self._graphed_decode(n_batch, n_positions)
            return cache, lambda ids_B: graphed(ids_B, False)
        cache = self.new_cache(n_batch, n_positions, cache_kind)
        return cache, lambda ids_B: self._run(ids_B[:, None], cache, cache.plan(1))[:, 0]

    def _graphed_decode(
        self, n_batch: int, n_positions: int
    ) -> tuple[TorchPreallocatedKVCache, Callable[..., Any]]:
        """An empty preallocated cache of at least ``n_positions`` slots and its ``compile_decode`` step,
        reused while the batch size and capacity bucket stay the same (one kept at a time)."""
        capacity = bucket_for(n_positions, self.config.max_seq_len)
        kept = self._kept_decode
        if kept is None or kept[0] != (n_batch, capacity):
            self._kept_decode = None  # free the old cache and graphs first
            cache = self.new_cache(n_batch, capacity, "preallocated")
            self._kept_decode = ((n_batch, capacity), cache, self.compile_decode(cache))
        _, cache, step = self._kept_decode
        cache.truncate(0)
        return cache, step

    def compile_decode(
        self,
        cache: TorchPreallocatedKVCache,
        mode: str = "cuda_graph",
    ) -> Callable[..., torch.Tensor]:
        """cache -> step(ids_B, check=True) -> logits [B,V]: a faster
        ``decode_step`` bound to this (preallocated) cache, every row advancing
        by one token a call: fixed-shape steps over key buckets, replayed from
        CUDA graphs on a GPU (``mode="cuda_graph"``, or ``"compile"`` to
        ``torch.compile`` them first), run eagerly on a CPU. The whole story:
        ``torch_engine.compile_decode``.
        """
        return compile_decode(self, cache, mode)

    def logits_without_cache(self, ids_BT: Any) -> torch.Tensor:
        """[B,T] -> [B,T,V]: every position recomputed from scratch, no cache involved."""
        return self.forward(ids_BT, None)


class TorchGPT2Model(TorchDecoder):
    """GPT-2 in PyTorch, batched, for timing: CUDA (bf16) when present, else the CPU (float32).

    Build it with ``random``, ``from_numpy`` or ``from_gpt2_state_dict``; ``.config``, ``.device``,
    ``.dtype``, ``.layers`` (``TorchLayerWeights``), ``.wte_VD``, ``.wpe_MD``, ``.head_VD`` (the LM
    head as multiplied: ``wte_VD`` with zero rows added on CUDA up to a multiple of 64). Every forward pass
    runs under ``torch.inference_mode()``. Token ids may be lists, NumPy arrays or tensors.

    On the CPU all weights live in one buffer on 2 MiB pages where the OS allows (fewer TLB misses
    while decode streams them). Every pass, decode steps included, goes through the step functions
    of ``torch_mirror``, which mirror ``gpt2``.
    """

    def __init__(
        self, config: GPT2Config, weights: GPT2Weights, device: Any = None, dtype: torch.dtype | None = None
    ) -> None:
        self.config = config
        self.device, self.dtype = resolve_device_dtype(device, dtype)

        n_vocab, width = weights.wte_VD.shape
        n_pad = -n_vocab % _VOCAB_MULTIPLE.get(self.device.type, 1)  # LM head rows added (zeros)
        arena = None
        if self.device.type == "cpu":  # one buffer for every weight, on 2 MiB pages where the OS allows
            n_tensors = 4 + len(weights.layers) * len(fields(LayerWeights))
            arena = WeightArena(config.n_params + n_pad * width, self.dtype, n_tensors)

        def vec(a: Any) -> torch.Tensor:  # a NumPy array or a tensor (any device) -> a contiguous copy
            src = a if isinstance(a, torch.Tensor) else torch.from_numpy(np.asarray(a))
            if arena is None:
                return torch.empty(src.shape, dtype=self.dtype, device=self.device).copy_(src)
            return arena.take(src)

        def mat(w_EO: Any) -> torch.Tensor:  # an [E, O] tensor or view, stored as row_major says
            w_EO = w_EO if isinstance(w_EO, torch.Tensor) else torch.from_numpy(np.asarray(w_EO))
            return vec(w_EO) if self.row_major(*w_EO.shape) else vec(w_EO.mT).mT

        def cat(parts: list[Any], axis: int) -> Any:
            if isinstance(parts[0], torch.Tensor):
                return torch.cat(parts, axis)
            return np.concatenate(parts, axis)

        wte_VD = weights.wte_VD
        if n_pad:  # LM head rows padded with zeros so GEMM tiles fit (50257 -> 50304); logits sliced back
            self.head_VD = vec(np.zeros((n_vocab + n_pad, width), np.float32))
            self.wte_VD = self.head_VD[:n_vocab].copy_(torch.as_tensor(wte_VD))
        else:
            # the LM head reads wte as a [D, V] matrix: stored that way when row_major says so
            self.wte_VD = mat(wte_VD.T).mT if self.row_major(width, n_vocab) else vec(wte_VD)
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

        check_finite_weights(self._named_weights())  # a nan given, or a number past the dtype's range

    def row_major(self, n_in: int, n_out: int) -> bool:
        """Store an [in, out] matrix as it is ([in, out] contiguous, rows of
        length out)? Else it is stored transposed ([out, in] contiguous) and
        used through an [in, out] view.

        On a GPU: always transposed, the layout ``F.linear`` (cuBLAS) reads
        natively. On a CPU, decode streams each matrix through BLAS's
        matrix-vector product, whose speed depends on how long each contiguous
        row is (on an AMD EPYC: about 8 GB/s at 1 KiB rows, 24 GB/s at 64 KiB),
        so each matrix is laid out along its longer side.

        The book shows this in "Rooflines: measuring compute-bound and
        memory-bound".
        """
        return self.device.type == "cpu" and n_out >= n_in

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

    # ------------------------------------------------------------ forward passes
    def lm_head(self, x_BTD: torch.Tensor) -> torch.Tensor:
        """[B,T,D] -> [B,T,V]: ``torch_mirror.lm_head`` over ``head_VD`` (padded on CUDA), sliced to
        the vocabulary."""
        logits_BTV = lm_head(x_BTD, self.head_VD)
        n_vocab = self.config.vocab_size
        return logits_BTV if logits_BTV.shape[-1] == n_vocab else logits_BTV[..., :n_vocab]

    def run_pass(
        self, ids_BT: torch.Tensor, cache: TorchKVCache | None, plan: Plan | None, last_only: bool = False
    ) -> torch.Tensor:
        """Embed, the blocks, ln_f, LM head (``TorchDecoder.run_pass``)."""
        cfg = self.config
        if plan is None:
            start: int | torch.Tensor = 0
        else:
            start = plan.start if plan.pos_B is None else plan.pos_B
        x_BTD = as_rows(embed(ids_BT, self.wte_VD, self.wpe_MD, start))  # a CPU decode step: rows
        for i, layer in enumerate(self.layers):
            x_BTD = block(x_BTD, layer, cfg, cache, i, plan)
        if last_only and x_BTD.dim() == 3:
            x_BTD = x_BTD[:, -1:]
        return self.lm_head(layer_norm(x_BTD, self.lnf_g, self.lnf_b, cfg.layer_norm_eps))
