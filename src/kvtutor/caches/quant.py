"""A quantized KV cache for the NumPy models: keys and values stored as int8 with scales.

The cache quantizes at store time and dequantizes when attention reads, so ``GPT2Model`` and
``LlamaModel`` run on it unchanged through the protocol of ``kvtutor.caches.kv`` (``update`` /
``advance``, ``truncate``, ``keys`` / ``values``). Quantization is symmetric int8: a slice x gets
``scale = max|x| / 127`` and is stored as ``q = round(x / scale)`` in [-127, 127]; reading gives
``q * scale``. Rounding moves each element by at most half a step, so **every dequantized element
is within scale / 2 of the float it was quantized from** (exactly so in real arithmetic; the float
products add a few units in the last place of max|x|). A slice of zeros gets scale 0 and reads back
as zeros.

Which elements share a scale is the design choice:

- **values, per token**: one scale per head and token, over the K channels of the row. Attention
  mixes whole value rows, so a row's error stays that row's.
- **keys, per channel** (``key_mode="per_channel"``, the default, as KIVI does): one scale per head
  and channel, over a group of ``group_size`` tokens. Keys have *outlier channels*: a few of the K
  channels carry magnitudes many times the others', the same channels at every token. A per-token
  scale is set by the row's outlier, so every other channel of that row is rounded in steps of
  outlier / 127 and loses most of its digits; a per-channel scale fits each channel's own range.
  A channel's scale needs several tokens, so the tokens of a group that is not full yet stay in the
  cache's float dtype (the *residual*) until the group fills; then the group is quantized once and
  its scales never change.
- **keys, per token** (``key_mode="per_token"``): like the values; simpler, worse with outliers.

Scales are stored in float32 (float64 for a float64 cache). ``nbytes`` counts what the stored
positions take (int8 payload, scales, float residual) and ``float_nbytes`` what a float cache of
the same length would take, so their ratio is the saving. ``measure_agreement`` runs a model with a
float and a quantized cache side by side and counts where their greedy tokens agree.

One letter of the dimension key is specific here: N counts token groups (``group_size`` positions
each), as in the per-channel key scales ``k_scale_LHNK``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..validate import check_int, check_max_new_tokens, check_prompts, check_seed, greedy
from .backend import QMAX, broadcast_copy, dequantize_int8, itemsize, quantize_int8
from .kv import OneSequenceCache, check_numpy_model, model_cache_shape
from .protocol import Plan

__all__ = [
    "QMAX",
    "KEY_MODES",
    "DEFAULT_GROUP_SIZE",
    "quantize_int8",
    "dequantize_int8",
    "QuantizedKVCache",
    "AgreementReport",
    "random_prompts",
    "measure_agreement",
]

#: How keys are quantized: one scale per channel over a group of tokens, or one per token.
KEY_MODES = ("per_channel", "per_token")

#: Tokens per group of per-channel key scales (KIVI's group size).
DEFAULT_GROUP_SIZE = 32


class QuantizedKVCache(OneSequenceCache):
    """A KV cache that stores int8 keys and values with scales (see the module docstring).

    Per layer: values ``v_q_LHMK`` (int8) with one scale per head and token, ``v_scale_LHM``; keys
    ``k_q_LHMK`` (int8) with ``k_scale_LHM`` (``key_mode="per_token"``) or ``k_scale_LHNK``, one
    scale per head, group of ``group_size`` tokens and channel (``"per_channel"``), the tokens of
    the unfilled last group held in ``dtype`` until it fills. ``keys`` and ``values`` return the
    dequantized [H, len, K] in ``dtype``. NumPy arrays for a NumPy model, tensors on the device
    for a torch model (``for_model``); the rounding is the same in both.

    ``truncate`` to a length inside a quantized key group returns that group's surviving rows to
    the float residual as their dequantized values (the originals are gone); when the group fills
    again it is quantized anew, so those rows carry two roundings, each within its scale / 2.
    ``error_bounds`` counts both: what each float row already carries (``_k_carry``) and, per
    group and channel, what its rows carried into its quantization (``k_carry_LHNK``).
    """

    kind = "int8"

    def __init__(
        self,
        n_layers: int,
        n_kv_heads: int,
        capacity: int,
        d_head: int,
        dtype: Any = np.float32,
        key_mode: str = "per_channel",
        group_size: int = DEFAULT_GROUP_SIZE,
        device: Any = None,
    ) -> None:
        self._init_sequence(n_layers, n_kv_heads, capacity, d_head, dtype, device)
        if key_mode not in KEY_MODES:
            raise ValueError(f"key_mode: expected one of {list(KEY_MODES)}, got {key_mode!r}")
        self.group_size = check_int("group_size", group_size, 1)
        self.key_mode = key_mode
        shape_LHMK = (self.n_layers, self.n_kv_heads, self._capacity, self.d_head)
        int8 = self.xp.int8
        self.v_q_LHMK = self.zeros(shape_LHMK, int8)
        self.v_scale_LHM = self.zeros(shape_LHMK[:3], self.scale_dtype)
        self.k_q_LHMK = self.zeros(shape_LHMK, int8)
        if key_mode == "per_token":
            self.k_scale_LHM = self.zeros(shape_LHMK[:3], self.scale_dtype)
        else:
            n_groups = self._capacity // self.group_size
            shape_LHNK = (self.n_layers, self.n_kv_heads, n_groups, self.d_head)
            self.k_scale_LHNK = self.zeros(shape_LHNK, self.scale_dtype)
            self.k_carry_LHNK = self.zeros(shape_LHNK, self.scale_dtype)  # rounding carried in
        empty = self.zeros((self.n_kv_heads, 0, self.d_head))
        self._k_float = [empty] * self.n_layers  # per layer [H, len - quantized, K]: the unfilled group
        # per layer and float row, the rounding it already carries (a truncate into a group)
        self._k_carry = [self.zeros((self.n_kv_heads, 0, self.d_head), self.scale_dtype)] * self.n_layers

    @classmethod
    def for_model(
        cls,
        model: Any,
        capacity: int | None = None,
        key_mode: str = "per_channel",
        group_size: int = DEFAULT_GROUP_SIZE,
    ) -> QuantizedKVCache:
        """An empty cache for one sequence of ``model`` (any kvtutor model, in its backend, dtype
        and device), up to ``capacity`` positions (default max_seq_len)."""
        n_layers, n_kv_heads, capacity, d_head, dtype, device = model_cache_shape(model, capacity)
        return cls(n_layers, n_kv_heads, capacity, d_head, dtype, key_mode, group_size, device)

    def n_quantized_keys(self, length: int) -> int:
        """How many of the first ``length`` positions hold int8 keys (the rest are float)."""
        if self.key_mode == "per_token":
            return length
        return length // self.group_size * self.group_size

    # ------------------------------------------------------------ reading
    def _read_keys(self, layer: int, length: int, float_rows: Any) -> Any:
        """[H, length, K]: dequantized keys, then the float rows of the unfilled group."""
        if self.key_mode == "per_token":
            q_HSK = self.k_q_LHMK[layer, :, :length]
            return dequantize_int8(q_HSK, self.k_scale_LHM[layer, :, :length, None], self.dtype)
        n_q, g = self.n_quantized_keys(length), self.group_size
        q_HNGK = self.k_q_LHMK[layer, :, :n_q].reshape(self.n_kv_heads, n_q // g, g, self.d_head)
        scale_HN1K = self.k_scale_LHNK[layer, :, : n_q // g, None, :]
        k_HSK = dequantize_int8(q_HNGK, scale_HN1K, self.dtype).reshape(self.n_kv_heads, n_q, self.d_head)
        return self.xp.concat([k_HSK, float_rows], axis=1)

    def _read_values(self, layer: int, length: int) -> Any:
        q_HSK = self.v_q_LHMK[layer, :, :length]
        return dequantize_int8(q_HSK, self.v_scale_LHM[layer, :, :length, None], self.dtype)

    def read(self, which: str, layer: int) -> Any:
        """[H, len, K]: the committed keys or values, dequantized (a new array)."""
        if which == "k":
            return self._read_keys(layer, self.length, self._k_float[layer])
        return self._read_values(layer, self.length)

    def error_bounds(self, layer: int) -> tuple[Any, Any]:
        """[H, len, K], [H, len, K]: half the scale each committed key and value element was
        quantized with, so |keys(layer) - the rows written| <= bound elementwise; 0 for keys still
        held in float."""
        layer = self.check_layer(layer)
        n = self.length
        shape = (self.n_kv_heads, n, self.d_head)
        v_HSK = broadcast_copy(self.v_scale_LHM[layer, :, :n, None] / 2, shape)
        if self.key_mode == "per_token":
            return broadcast_copy(self.k_scale_LHM[layer, :, :n, None] / 2, shape), v_HSK
        n_q, g = self.n_quantized_keys(n), self.group_size
        k_HSK = self.zeros(shape, self.scale_dtype)
        group_HNK = self.k_scale_LHNK[layer, :, : n_q // g] / 2 + self.k_carry_LHNK[layer, :, : n_q // g]
        k_HSK[:, :n_q] = self.xp.repeat(group_HNK, g, axis=1)
        k_HSK[:, n_q:] = self._k_carry[layer]
        return k_HSK, v_HSK

    # ------------------------------------------------------------ writing
    def update(self, layer, k_HTK, v_HTK, plan):
        """[H,T,K] x2 -> [H,S,K] x2 and the mask: quantize and store at len .. len+T-1 (keys of an
        unfilled group stay float); return every key and value, dequantized."""
        for name, arr in (("k_new", k_HTK), ("v_new", v_HTK)):
            if not bool(self.xp.all(self.xp.isfinite(arr))):
                raise ValueError(f"{name}: expected finite numbers to quantize, got nan or inf")
        start, end, xp = plan.start, plan.start + plan.n_new, self.xp
        k_HTK, v_HTK = xp.astype(k_HTK, self.dtype, copy=True), xp.astype(v_HTK, self.dtype, copy=True)
        # everything below writes at positions >= len only: the committed state stays as it was
        v_q, v_scale = quantize_int8(v_HTK, -1, self.scale_dtype)
        self.v_q_LHMK[layer, :, start:end] = v_q
        self.v_scale_LHM[layer, :, start:end] = v_scale[..., 0]
        if self.key_mode == "per_token":
            k_q, k_scale = quantize_int8(k_HTK, -1, self.scale_dtype)
            self.k_q_LHMK[layer, :, start:end] = k_q
            self.k_scale_LHM[layer, :, start:end] = k_scale[..., 0]
            float_rows, carry_rows = self._k_float[layer], self._k_carry[layer]  # empty: none held
        else:
            # the unfilled group's float rows, then the new ones: positions first .. end-1
            first, done = self.n_quantized_keys(start), self.n_quantized_keys(end)
            rows_HSK = xp.concat([self._k_float[layer], k_HTK], axis=1)
            fresh = self.zeros((self.n_kv_heads, plan.n_new, self.d_head), self.scale_dtype)
            carry_HSK = xp.concat([self._k_carry[layer], fresh], axis=1)
            if done > first:  # groups that fill now: quantize each over its tokens, per channel
                g, n_full = self.group_size, done - first
                x_HNGK = rows_HSK[:, :n_full].reshape(self.n_kv_heads, n_full // g, g, self.d_head)
                k_q, k_scale = quantize_int8(x_HNGK, 2, self.scale_dtype)
                self.k_q_LHMK[layer, :, first:done] = k_q.reshape(self.n_kv_heads, n_full, self.d_head)
                self.k_scale_LHNK[layer, :, first // g : done // g] = k_scale[:, :, 0]
                carried = carry_HSK[:, :n_full].reshape(self.n_kv_heads, n_full // g, g, self.d_head)
                self.k_carry_LHNK[layer, :, first // g : done // g] = xp.max(carried, axis=2)
            float_rows, carry_rows = rows_HSK[:, done - first :], carry_HSK[:, done - first :]
        plan.staged[layer] = (float_rows, carry_rows)  # the residual after this pass, for advance
        k_HSK, v_HSK = self._read_keys(layer, end, float_rows), self._read_values(layer, end)
        return k_HSK, v_HSK, plan.mask

    def _commit(self, plan: Plan) -> None:
        self._k_float, self._k_carry = (list(x) for x in zip(*plan.staged, strict=True))

    def _truncate(self, length: int, row: int | None) -> None:
        first = self.n_quantized_keys(length)
        if self.key_mode == "per_channel" and first < self.n_quantized_keys(self.length):
            # the cut falls in a quantized group: its rows before the cut go back to float, each
            # carrying the group's rounding (and what the group carried in)
            g = self.group_size
            k_float, k_carry = list(self._k_float), list(self._k_carry)
            for layer in range(self.n_layers):
                q_HSK = self.k_q_LHMK[layer, :, first:length]
                scale_H1K = self.k_scale_LHNK[layer, :, first // g, None, :]
                k_float[layer] = dequantize_int8(q_HSK, scale_H1K, self.dtype)
                carry_H1K = scale_H1K / 2 + self.k_carry_LHNK[layer, :, first // g, None, :]
                k_carry[layer] = broadcast_copy(carry_H1K, tuple(q_HSK.shape))
            self._k_float, self._k_carry = k_float, k_carry
        else:
            self._k_float = [rows[:, : length - first] for rows in self._k_float]
            self._k_carry = [rows[:, : length - first] for rows in self._k_carry]

    # ------------------------------------------------------------ memory
    @property
    def nbytes(self) -> int:
        """Bytes the stored positions take: int8 payload, scales and float residual (the buffers
        are allocated for the whole capacity up front: see ``reserved_nbytes``)."""
        n, n_q = self.length, self.n_quantized_keys(self.length)
        scale_size = itemsize(self.scale_dtype)
        per_row = self.n_layers * self.n_kv_heads  # rows of K numbers per position
        value_bytes = per_row * n * (self.d_head + scale_size)
        if self.key_mode == "per_token":
            return value_bytes + per_row * n * (self.d_head + scale_size)
        key_scales = per_row * (n_q // self.group_size) * self.d_head * scale_size
        residual = sum(int(rows.nbytes) for rows in self._k_float)
        return value_bytes + per_row * n_q * self.d_head + key_scales + residual

    @property
    def float_nbytes(self) -> int:
        """Bytes a float cache of ``dtype`` holding the same positions would take (keys and values)."""
        return 2 * self.n_layers * self.n_kv_heads * self.length * self.d_head * itemsize(self.dtype)

    @property
    def reserved_nbytes(self) -> int:
        """Bytes allocated: the int8 and scale buffers for the whole capacity, and the residual."""
        scales = self.k_scale_LHM if self.key_mode == "per_token" else self.k_scale_LHNK
        buffers = self.k_q_LHMK.nbytes + self.v_q_LHMK.nbytes + self.v_scale_LHM.nbytes + scales.nbytes
        return int(buffers) + sum(int(rows.nbytes) for rows in self._k_float)


# ---------------------------------------------------------------- float vs quantized: greedy tokens


@dataclass(frozen=True)
class AgreementReport:
    """Greedy decoding with a float cache against a quantized one, over ``n_prompts`` prompts.

    ``n_tokens`` new tokens in all, ``n_agree`` of them where the quantized cache's argmax equals
    the float cache's; ``first_divergence[i]``, the index among prompt i's new tokens of the first
    disagreement (None: none), which is where the quantized cache's own greedy text would first
    differ; ``max_logit_diff``, the largest |float logit - quantized logit| at those positions.
    """

    n_prompts: int
    n_tokens: int
    n_agree: int
    first_divergence: tuple[int | None, ...]
    max_logit_diff: float

    @property
    def agreement(self) -> float:
        """The fraction of new tokens on which both caches agree."""
        return self.n_agree / self.n_tokens

    @property
    def n_diverged(self) -> int:
        """Prompts whose greedy continuation differs somewhere."""
        return sum(d is not None for d in self.first_divergence)


def random_prompts(vocab_size: int, n_prompts: int, prompt_len: int, seed: int = 0) -> list[list[int]]:
    """``n_prompts`` prompts of ``prompt_len`` token ids drawn uniformly from [0, vocab_size)."""
    vocab_size = check_int("vocab_size", vocab_size, 1)
    n_prompts = check_int("n_prompts", n_prompts, 1)
    prompt_len = check_int("prompt_len", prompt_len, 1)
    rng = np.random.default_rng(check_seed(seed))
    return rng.integers(0, vocab_size, size=(n_prompts, prompt_len)).tolist()


def measure_agreement(
    model: Any,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    key_mode: str = "per_channel",
    group_size: int = DEFAULT_GROUP_SIZE,
) -> AgreementReport:
    """Greedy-token agreement of a float and a quantized cache on ``model``, over ``prompts``.

    For each prompt both caches are prefilled, then fed the *float* cache's greedy tokens one at a
    time (teacher forcing), and at each of the ``max_new_tokens`` positions their argmaxes are
    compared. Up to the first disagreement this is exactly what the quantized cache's own greedy
    decoding would produce; after it, the comparison stays token for token on the same text.
    """
    cfg = check_numpy_model(model)  # every argument by its own name, before any work
    QuantizedKVCache.for_model(model, 1, key_mode, group_size)
    prompts = check_prompts(prompts, cfg.vocab_size, cfg.max_seq_len)
    max_new_tokens = check_int("max_new_tokens", max_new_tokens, 1)
    for prompt in prompts:
        check_max_new_tokens(max_new_tokens, len(prompt), cfg.max_seq_len, "max_seq_len")
    n_agree, firsts, max_diff = 0, [], 0.0
    for prompt in prompts:
        capacity = len(prompt) + max_new_tokens - 1
        float_cache = model.new_cache(capacity=capacity)
        quant_cache = QuantizedKVCache.for_model(model, capacity, key_mode, group_size)
        f_V, q_V = model.prefill(prompt, float_cache)[-1], model.prefill(prompt, quant_cache)[-1]
        first = None
        for i in range(max_new_tokens):
            token = greedy(f_V)
            if token == greedy(q_V):
                n_agree += 1
            elif first is None:
                first = i
            max_diff = max(max_diff, float(np.max(np.abs(f_V - q_V))))
            if i + 1 < max_new_tokens:
                f_V, q_V = model.decode_step(token, float_cache), model.decode_step(token, quant_cache)
        firsts.append(first)
    return AgreementReport(len(prompts), len(prompts) * max_new_tokens, n_agree, tuple(firsts), max_diff)
