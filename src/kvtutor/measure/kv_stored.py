"""What a KV cache stores, by part, and what shrinks it: a quantized cache's numbers, scales and
residual keys (``KVQuant``'s assumptions), windows imposed on every layer, the table of every
bundled model four ways (``kv_shrink_rows``), and the constant state that the state-space layers of
a hybrid or a state-space model keep per sequence. ``kvtutor.measure.memory`` re-exports all of it
beside the plain byte counts and the calculator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from ..caches.quant import QuantizedKVCache
from ..models.hf_config import ModelSpec, bundled_models, load_model_spec
from ..models.model_spec import KVQuant
from ..validate import DTYPES, check_int, dtype_info

__all__ = [
    "check_spec", "KVBytes", "stored_bytes_per_token", "stored_bytes_per_sequence", "fixed_scale_bytes",
    "state_bytes_per_sequence", "state_dtype", "kv_quant_of", "ShrinkRow", "kv_shrink_rows",
]  # fmt: skip


def check_spec(spec: Any) -> ModelSpec:
    """``spec`` if it is a ModelSpec, else a TypeError naming the argument."""
    if isinstance(spec, ModelSpec):
        return spec
    raise TypeError(f"spec: expected a ModelSpec (see kvtutor.models.hf_config), got {type(spec).__name__}")


@dataclass(frozen=True)
class KVBytes:
    """A stored cache's bytes by part: the numbers (``payload``), their ``scales`` (int8, int4) and
    the ``residual``, keys of an unfilled per-channel group kept in float. Each part is rounded up
    to whole bytes; ``total`` is their sum."""

    payload: int
    scales: int = 0
    residual: int = 0

    @property
    def total(self) -> int:
        return self.payload + self.scales + self.residual


def _quant_for(spec: Any, quant: Any) -> KVQuant:
    check_spec(spec)
    if isinstance(quant, str):
        quant = KVQuant(quant)
    if not isinstance(quant, KVQuant):
        raise TypeError(f"quant: expected a dtype name or a KVQuant, got {type(quant).__name__}")
    quant.layer_bits(spec, 1)  # refuses per-channel key scales for latent attention
    return quant


def _to_bytes(bits: list[Fraction]) -> KVBytes:
    return KVBytes(*(math.ceil(b / 8) for b in bits))


def stored_bytes_per_token(spec: ModelSpec, quant: str | KVQuant = "bf16") -> KVBytes:
    """What one more token adds to a cache stored as ``quant`` (a dtype name or a ``KVQuant``), all
    attention layers: the numbers and their scales, per-channel key scales spread over their group."""
    q = _quant_for(spec, quant)
    return _to_bytes([spec.n_attention_layers * b for b in q.layer_bits(spec, Fraction(1))])


def stored_bytes_per_sequence(
    spec: ModelSpec, seq_len: int, quant: str | KVQuant = "bf16", window: int | None = None, sinks: int = 0
) -> KVBytes:
    """One sequence of seq_len tokens stored as ``quant``, with the model's own windows; ``window``
    and ``sinks`` impose one on every layer (``ModelSpec.layer_tokens``)."""
    q = _quant_for(spec, quant)
    bits = [Fraction(0)] * 3
    for layers, n in spec.layer_tokens(seq_len, window, sinks):
        bits = [total + layers * b for total, b in zip(bits, q.layer_bits(spec, n), strict=True)]
    return _to_bytes(bits)


def fixed_scale_bytes(spec: ModelSpec, quant: str | KVQuant = "bf16") -> int:
    """Bytes of per-tensor scales, one set for the whole cache (fp8: one fp32 scale per layer for K
    and one for V, one for an MLA row), 0 for the other formats."""
    q = _quant_for(spec, quant)
    return (1 if spec.kv_lora_rank else 2) * spec.n_attention_layers * 4 if q.kind == "fp8" else 0


def state_dtype(quant: str | KVQuant = "bf16") -> str:
    """The format a state-space layer's state is kept in beside a cache stored as ``quant``: the
    cache's own when it is a float format (bf16, fp16, fp32), else ``KVQuant.float_dtype`` (bf16):
    a recurrent state is not quantized like keys and values."""
    q = KVQuant(quant) if isinstance(quant, str) else quant
    if not isinstance(q, KVQuant):
        raise TypeError(f"quant: expected a dtype name or a KVQuant, got {type(quant).__name__}")
    return q.dtype if q.kind == "float" else q.float_dtype


def state_bytes_per_sequence(spec: ModelSpec, quant: str | KVQuant = "bf16") -> int:
    """The constant state one sequence keeps in every state-space layer (a hybrid's Mamba layers,
    every layer of a Mamba model), whatever its length: ``n_state_layers x state_numbers_per_layer``
    numbers in ``state_dtype(quant)``; 0 for a model that only attends."""
    check_spec(spec)
    return (spec.state_numbers * dtype_info(state_dtype(quant)).bits + 7) // 8


def kv_quant_of(cache: QuantizedKVCache) -> KVQuant:
    """An int8 ``QuantizedKVCache``'s layout as a ``KVQuant``, so that ``stored_bytes_per_sequence(spec,
    len(cache), kv_quant_of(cache)).total == cache.nbytes``: one count of int8 bytes, scales included."""
    if not isinstance(cache, QuantizedKVCache):
        raise TypeError(f"cache: expected a QuantizedKVCache, got {type(cache).__name__}")
    scale, residual = (DTYPES[d.name].aliases[0] for d in (cache.scale_dtype, cache.dtype))  # 'fp32'
    return KVQuant("int8", cache.key_mode, cache.group_size, scale, residual)


@dataclass(frozen=True)
class ShrinkRow:
    """One model's KV cache at ``seq_len`` tokens four ways, in bytes per token and per sequence.

    ``bf16``: every layer keeps every token (the reference; a model's own window left out);
    ``int8`` with its scales and ``fp8`` (``KVQuant``'s assumptions; fp8's per-tensor scales belong
    to the whole cache, not to a sequence); ``windowed``: bf16 with the given window in every layer,
    else the model's own (None: it has none). A windowed per-token figure is what token seq_len + 1
    adds: 0 once every layer's window is full. seq_len may exceed the model's ``max_seq_len``.
    """

    model: str
    attention: str
    max_seq_len: int
    seq_len: int
    window: int | None
    sinks: int
    n_windowed_layers: int
    bf16_per_token: int
    int8_per_token: int
    fp8_per_token: int
    windowed_per_token: int | None
    bf16_per_sequence: int
    int8_per_sequence: int
    fp8_per_sequence: int
    windowed_per_sequence: int | None

    def saving(self, kind: str) -> float | None:
        """bf16 bytes per sequence over those of ``kind`` ('int8', 'fp8' or 'windowed'): 2.0 halves."""
        if kind not in ("int8", "fp8", "windowed"):
            raise ValueError(f"kind: expected 'int8', 'fp8' or 'windowed', got {kind!r}")
        other = getattr(self, f"{kind}_per_sequence")
        return None if other is None else self.bf16_per_sequence / other


def kv_shrink_rows(
    seq_len: int, window: int | None = None, sinks: int = 0, names: list[str] | None = None
) -> list[ShrinkRow]:
    """For every bundled model (or ``names``), its cache at seq_len tokens in bf16, int8, fp8 and
    windowed: the rows of the book's table and figure."""
    check_int("seq_len", seq_len, 1)
    names = bundled_models() if names is None else names
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise TypeError(f"names: expected a list of model names, got {names!r}")
    rows = []
    for name in names:
        spec = load_model_spec(name)
        full = spec.without_window()
        seq = {d: stored_bytes_per_sequence(full, seq_len, d).total for d in ("bf16", "int8", "fp8")}
        tok = {d: stored_bytes_per_token(full, d).total for d in ("bf16", "int8", "fp8")}
        own = window is None and spec.sliding_window is None
        windowed = [None if own else stored_bytes_per_sequence(spec, n, "bf16", window, sinks).total
                    for n in (seq_len, seq_len + 1)]  # fmt: skip
        rows.append(ShrinkRow(
            model=name, attention=spec.attention_kind, max_seq_len=spec.max_seq_len, seq_len=seq_len,
            window=window if window is not None else spec.sliding_window, sinks=sinks,
            n_windowed_layers=spec.n_attention_layers if window is not None else spec.n_sliding_layers,
            bf16_per_token=tok["bf16"], int8_per_token=tok["int8"], fp8_per_token=tok["fp8"],
            windowed_per_token=None if own else windowed[1] - windowed[0],
            bf16_per_sequence=seq["bf16"], int8_per_sequence=seq["int8"], fp8_per_sequence=seq["fp8"],
            windowed_per_sequence=windowed[0],
        ))  # fmt: skip
    return rows
