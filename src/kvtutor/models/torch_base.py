"""What every torch model shares: the cache, the checked passes, the one pass and its fast path.

``TorchDecoder`` owns everything a torch family does not make its own: caches (``new_cache``,
``check_cache``: any cache of ``kvtutor.caches`` made for the model, batched or of one sequence),
the checked passes, the pass itself (``run_pass``: the family's hooks strung together), greedy
``generate`` and the one fast decode path per device (on a CPU the pass with T = 1; on CUDA the
same pass over a fixed plan, replayed from CUDA graphs: ``kvtutor.models.cuda_graphs``). A family
(``torch_gpt2``, ``torch_llama``, ``torch_qwen3``) supplies its hooks and packs its weights with
``torch_weights.WeightPacker``."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from ..caches.kv import CACHE_KINDS, check_cache
from ..caches.protocol import KVCacheBase, Plan
from ..caches.torch_kv import TorchConcatKVCache, TorchKVCache, TorchPreallocatedKVCache
from ..validate import check_int, check_max_new_tokens
from .cuda_graphs import bucket_for, compile_decode
from .torch_mirror import as_rows, check_batch, lm_head, resolve_device_dtype, token_ids
from .torch_weights import row_major
from .weight_schema import check_logits

__all__ = ["TorchDecoder"]

_CACHE_CLASSES = {"preallocated": TorchPreallocatedKVCache, "concat": TorchConcatKVCache}
assert tuple(_CACHE_CLASSES) == CACHE_KINDS  # the same kind names as the NumPy model's


class TorchDecoder:
    """What every torch model of kvtutor shares (``TorchGPT2Model``, ``TorchLlamaModel``,
    ``TorchQwen3Model``): the cache (``new_cache``, ``check_cache``), the checked passes
    (``forward``, ``prefill``, ``forward_row``, ``prefill_row``, ``decode_step``,
    ``logits_without_cache``, ``generate``), the one pass they all run (``run_pass``), the fast
    decode path (``compile_decode``), the weight layout (``row_major``) and the weight counts.

    A family supplies ``config``, ``device``, ``dtype``, ``layers``, ``head_VD`` (the LM head as
    multiplied, padded rows and all), ``_named_weights`` and four hooks of one pass:
    ``positions(start, n_new)`` (what its embedding and blocks need to place the tokens: the start
    itself, or RoPE's rows), ``embed(ids_BT, where)``, ``block(x_BTD, layer, index, where, cache,
    plan)`` and ``final_norm(x_BTD)``. Its weights are packed by ``torch_weights.WeightPacker``."""

    config: Any
    device: torch.device
    dtype: torch.dtype
    layers: list[Any]
    head_VD: torch.Tensor
    # generate's graphed decode: ((batch, capacity), cache, step), kept for the next call
    _kept_decode: tuple[tuple[int, int], TorchPreallocatedKVCache, Callable[..., Any]] | None = None

    numpy_class: type  # the NumPy twin: its config class and weights container are this family's

    def _named_weights(self) -> list[tuple[str, torch.Tensor]]:
        raise NotImplementedError

    def accept(self, config: Any, weights: Any, device: Any, dtype: Any) -> None:
        """The first step of every family's constructor: ``config`` and ``weights`` of the NumPy
        twin's classes, the weights checked against the config by the twin's one schema
        (``weights.check``: every weight present, of its shape, one floating dtype, finite, none
        beyond the config; NumPy arrays or torch tensors), a device present here and a dtype the
        matmuls run in there. Then ``config``, ``device`` and ``dtype`` are set."""
        twin = self.numpy_class
        if not isinstance(config, twin.config_class):
            raise TypeError(
                f"config: expected a kvtutor {twin.config_class.__name__}, got {type(config).__name__}"
            )
        if not isinstance(weights, twin.weights_class):
            raise TypeError(
                f"weights: expected a kvtutor {twin.weights_class.__name__}, got {type(weights).__name__}"
            )
        self.device, self.dtype = resolve_device_dtype(device, dtype)
        weights.check(config)
        self.config = config

    # ------------------------------------------------------------ the family's hooks
    def positions(self, start: int | torch.Tensor, n_new: int) -> Any:
        """Where the pass's tokens sit, as the family's embedding and blocks read it."""
        return start

    def embed(self, ids_BT: torch.Tensor, where: Any) -> torch.Tensor:
        """[B,T] -> [B,T,D]: the family's input rows."""
        raise NotImplementedError

    def block(
        self, x_BTD: torch.Tensor, layer: Any, index: int, where: Any, cache: Any, plan: Plan | None
    ) -> torch.Tensor:
        """[B,T,D] -> [B,T,D]: one block, its keys and values stored under ``plan``."""
        raise NotImplementedError

    def final_norm(self, x_BTD: torch.Tensor) -> torch.Tensor:
        """[B,T,D] -> [B,T,D]: the norm before the LM head."""
        raise NotImplementedError

    # ------------------------------------------------------------ one pass
    def run_pass(
        self, ids_BT: torch.Tensor, cache: Any, plan: Plan | None, last_only: bool = False
    ) -> torch.Tensor:
        """[B,T] -> [B,T,V] ([B,1,V] with ``last_only``): the family's embedding, blocks, final
        norm and LM head over one pass, unchecked (callers validate). Each layer writes the cache
        where ``plan`` says; the lengths do not move (``_run`` commits the plan). A CPU decode step
        runs its residual stream as rows (``torch_mirror.as_rows``)."""
        start = 0 if plan is None else (plan.start if plan.pos_B is None else plan.pos_B)
        where = self.positions(start, ids_BT.shape[1])
        x_BTD = as_rows(self.embed(ids_BT, where))
        for i, layer in enumerate(self.layers):
            x_BTD = self.block(x_BTD, layer, i, where, cache, plan)
        if last_only and x_BTD.dim() == 3:
            x_BTD = x_BTD[:, -1:]
        return self.lm_head(self.final_norm(x_BTD))

    def lm_head(self, x_BTD: torch.Tensor) -> torch.Tensor:
        """[B,T,D] -> [B,T,V]: ``torch_mirror.lm_head`` over ``head_VD`` (padded on CUDA), sliced to
        the vocabulary."""
        logits_BTV = lm_head(x_BTD, self.head_VD)
        n_vocab = self.config.vocab_size
        return logits_BTV if logits_BTV.shape[-1] == n_vocab else logits_BTV[..., :n_vocab]

    def row_major(self, n_in: int, n_out: int) -> bool:
        """Is an [in, out] matrix of this model stored as it is (else transposed)?
        ``torch_weights.row_major`` on this model's device and dtype."""
        return row_major(self.device, n_in, n_out, self.dtype)

    def _run(
        self, ids_BT: torch.Tensor, cache: Any, plan: Plan | None, last_only: bool = False
    ) -> torch.Tensor:
        """``run_pass`` and its logits checked finite (over the rows the plan writes), then the
        plan committed; a pass that raises is aborted, leaving the cache as it was."""
        try:
            logits = self.run_pass(ids_BT, cache, plan, last_only)
            rows = None if plan is None or plan.rows.size == plan.n_batch else plan.rows
            check_logits(logits, rows)
        except BaseException:
            if cache is not None:
                cache.abort(plan)
            raise
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

    def check_cache(self, cache: Any, kind: str | None = None) -> KVCacheBase:
        """``cache`` if it is a torch cache that fits this model (layers, KV heads, head width,
        dtype, device, at most ``max_seq_len`` positions) and, given ``kind``, of that kind: a
        batched one from ``new_cache``, or a cache of one sequence made for this model (window,
        int8, paged, prefix-cached: ``for_model(model, ...)``); else a TypeError or ValueError
        naming ``cache`` and the cache."""
        cache = check_cache(cache, self, "torch")
        if kind is not None and cache.kind != kind:
            raise ValueError(
                f"cache: expected a kind={kind!r} cache, got a {type(cache).__name__} (kind={cache.kind!r})"
            )
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
        ids_1T = token_ids(ids_T, 1, self.config.vocab_size, "ids_T", self.device)[None]
        plan = cache.plan(ids_1T.shape[1], row=row, name="ids_T")  # raises if the row lacks room
        return self._run(ids_1T, cache, plan)[0]

    def prefill_row(self, ids_T: Any, cache: TorchKVCache, row: int) -> torch.Tensor:
        """[T] -> [T,V]: prefill one row of a batched cache (an empty row); the other rows are untouched."""
        cache = self.check_cache(cache)
        row = cache.check_row(row)
        ids_T = token_ids(ids_T, 1, self.config.vocab_size, "ids_T", self.device)
        cache.plan(len(ids_T), row=row, name="ids_T")  # the cache's own refusals first: room, layout
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
        CUDA graphs replay. Any cache of this model serves (``check_cache``).
        """
        if cache is None:
            raise TypeError(f"cache: expected a cache from {type(self).__name__}.new_cache(), got None")
        cache = self.check_cache(cache)
        ids_B1 = token_ids(ids_B, 1, self.config.vocab_size, "ids_B", self.device)[:, None]
        check_batch(ids_B1, cache, "ids_B")
        active_B = cache.check_active(active)
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
        graphs are kept for the next call of the same batch size and capacity bucket, so only the
        first call pays for the capture. ``graphs=False`` runs every step eagerly.
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
        finite = torch.ones((), dtype=torch.bool, device=self.device)  # on the device: no sync a step
        for i in range(1, n_new):
            logits_BV = step(out_NB[i - 1])
            finite &= torch.isfinite(logits_BV).all()
            torch.argmax(logits_BV, dim=-1, out=out_NB[i])
        if not bool(finite):  # a graphed step's logits, checked once at the end
            raise ValueError(
                "logits: expected finite numbers, got NaN or inf in a decode step: the weights or "
                "the inputs overflow this model's dtype (no token is returned)"
            )
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
        ``cuda_graphs.compile_decode``.
        """
        return compile_decode(self, cache, mode)

    def logits_without_cache(self, ids_BT: Any) -> torch.Tensor:
        """[B,T] -> [B,T,V]: every position recomputed from scratch, no cache involved."""
        return self.forward(ids_BT, None)
