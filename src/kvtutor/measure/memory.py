"""How much memory the KV cache of a real model takes, next to its weights.

Per token, every attention layer keeps one key and one value row per KV head::

    kv_bytes_per_token = 2 (K and V) x n_layers x n_kv_heads x d_head x bytes per number

Multi-head latent attention (DeepSeek) keeps instead one latent vector and one small rotary key
per token and layer, shared by every head::

    kv_bytes_per_token = n_layers x (kv_lora_rank + qk_rope_head_dim) x bytes per number

A sequence of S tokens keeps S such rows, except in layers with a sliding window W, which keep
only the last min(S, W). A hybrid (Jamba) counts only its attention layers there; its
state-space layers keep a state of constant size per sequence instead, and a state-space model
(Mamba) keeps only that state and no KV cache (``state_bytes_per_sequence``). A batch of B
sequences keeps B times both. The command line
``python -m kvtutor kv-memory CONFIG.json --seq-len 8192 --batch 8 --dtype bf16`` prints it all.

Shrinking it: ``stored_bytes_per_*`` count a quantized cache's numbers and scales (``KVQuant``
states the scales assumed), a ``window`` with ``sinks`` imposes a sliding window on any model, and
``kv_shrink_rows`` sets every bundled model side by side: bf16, int8, fp8 and windowed.
``kv_quant_of`` states the int8 cache of ``kvtutor.caches.quant`` in these terms (one count).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import asdict, dataclass
from typing import Any

from ..caches.quant import DEFAULT_GROUP_SIZE
from ..models.hf_config import ModelSpec, bundled_models, family_examples, load_model_spec
from ..models.model_spec import KEY_SCALES, KVQuant
from ..validate import DTYPES, MAX_COUNT, check_at_most, check_int, dtype_info
from .kv_stored import (
    KVBytes,
    ShrinkRow,
    check_spec,
    fixed_scale_bytes,
    kv_quant_of,
    kv_shrink_rows,
    state_bytes_per_sequence,
    state_dtype,
    stored_bytes_per_sequence,
    stored_bytes_per_token,
)

__all__ = [
    "DTYPE_BITS", "GIB", "dtype_bytes", "kv_bytes_per_token", "kv_bytes_per_token_decompressed",
    "kv_bytes_per_sequence", "kv_bytes_total", "weights_bytes", "max_batch", "mla_decode_costs",
    "KV_DTYPES", "KEY_SCALES", "KVQuant", "KVBytes", "stored_bytes_per_token",
    "stored_bytes_per_sequence", "fixed_scale_bytes", "kv_quant_of", "ShrinkRow", "kv_shrink_rows",
    "state_bytes_per_sequence", "state_dtype", "KVMemory", "kv_memory", "format_bytes", "format_report",
    "context_warning", "main",
]  # fmt: skip

#: bits per stored number, by every name the calculator accepts (``validate.DTYPES``' names and aliases)
DTYPE_BITS = {alias: d.bits for d in DTYPES.values() for alias in (d.name, *d.aliases)}
#: the KV-cache dtypes the command line lists (any name in DTYPE_BITS is accepted)
KV_DTYPES = ("bf16", "fp16", "fp32", "fp8", "int8", "int4")
GIB = 2**30
MAX_MEMORY_GIB = 2**30  # the largest memory budget kv_memory takes: 1 EiB


def _check_dtype(dtype: str, name: str = "dtype") -> int:
    if not isinstance(dtype, str) or dtype.lower() not in DTYPE_BITS:
        raise ValueError(f"{name}: expected one of {sorted(DTYPE_BITS)}, got {dtype!r}")
    return dtype_info(dtype, name).bits


def _nbytes(count: int, bits: int) -> int:
    return (count * bits + 7) // 8


def dtype_bytes(dtype: str) -> float:
    """Bytes per number: 'bf16' -> 2, 'int4' -> 0.5."""
    return _check_dtype(dtype) / 8


def kv_bytes_per_token(spec: ModelSpec, dtype: str = "bf16") -> int:
    """2 x L x Hkv x K x bytes (MLA: L x (latent + rope key) x bytes): what
    one more token adds to the cache, in every attention layer.

    The book shows this in "How big the KV cache gets" and "RoPE and the
    cache".
    """
    check_spec(spec)
    numbers = spec.n_attention_layers * spec.kv_numbers_per_layer
    return _nbytes(numbers, _check_dtype(dtype))


def kv_bytes_per_token_decompressed(spec: ModelSpec, dtype: str = "bf16") -> int:
    """Per token, K and V of every head as attention reads them: for MLA the
    cache of an implementation that stores the expanded heads; otherwise the
    same as ``kv_bytes_per_token``."""
    check_spec(spec)
    numbers = spec.n_attention_layers * spec.kv_numbers_per_layer_decompressed
    return _nbytes(numbers, _check_dtype(dtype))


def kv_bytes_per_sequence(
    spec: ModelSpec,
    seq_len: int,
    dtype: str = "bf16",
) -> int:
    """One sequence of seq_len tokens; layers with a sliding window keep only
    the last W tokens.

    The book shows this in "How big the KV cache gets".
    """
    check_spec(spec)
    check_int("seq_len", seq_len, 1)
    n_numbers = spec.kv_numbers_per_layer * spec.cached_tokens(seq_len)
    return _nbytes(n_numbers, _check_dtype(dtype))


def kv_bytes_total(spec: ModelSpec, seq_len: int, batch: int, dtype: str = "bf16") -> int:
    """A batch of ``batch`` sequences of seq_len tokens each."""
    check_int("batch", batch, 1)
    return batch * kv_bytes_per_sequence(spec, seq_len, dtype)


def weights_bytes(spec: ModelSpec, dtype: str = "bf16") -> int:
    """The weights, ``spec.n_params`` numbers of ``dtype``."""
    check_spec(spec)
    return _nbytes(spec.n_params, _check_dtype(dtype))


def max_batch(
    spec: ModelSpec,
    seq_len: int,
    memory_bytes: int,
    dtype: str = "bf16",
    weights_dtype: str | None = None,
) -> int:
    """The largest batch of seq_len-token sequences whose cache (and, in a
    hybrid, the state) fits in memory_bytes next to the weights (0 when not
    even one does). Activations and framework overhead are ignored.

    The book shows this in "How big the KV cache gets".
    """
    check_int("memory_bytes", memory_bytes, 1)
    room = memory_bytes - weights_bytes(spec, weights_dtype or dtype)
    kv = kv_bytes_per_sequence(spec, seq_len, dtype)
    return max(0, room // (kv + state_bytes_per_sequence(spec, dtype)))


def mla_decode_costs(spec: ModelSpec, seq_len: int, dtype: str = "bf16") -> dict[str, int]:
    """What one decode step costs in one layer of a latent-attention (MLA) model, for one sequence
    of seq_len cached tokens: bytes read from the cache and FLOPs (2 per multiply-add), three ways.

    * ``heads``: a cache of expanded per-head K and V (what MHA would keep): read them, attend:
      2 S H (K + Kv) FLOPs for the scores and the weighted sum.
    * ``expand``: read the latents and up-project all S of them into K and V at every step
      (2 S r H (K - rope + Kv) more FLOPs), then attend as ``heads``.
    * ``absorbed``: fold the key up-projection into the query and the value up-projection into the
      output (2 H r (K - rope + Kv) per step, whatever S), and attend over the latents directly:
      2 S H (r + rope) for the scores, 2 S H r for the weighted sum.

    r = kv_lora_rank, K = d_head (nope + rope), Kv = v_head_dim, H = n_heads.
    """
    check_spec(spec)
    check_int("seq_len", seq_len, 1)
    if not spec.kv_lora_rank:
        raise ValueError(
            f"spec: expected a latent-attention (MLA) model, got {spec.attention_kind} {spec.name}"
        )
    bits = _check_dtype(dtype)
    s, h, r, rope = seq_len, spec.n_heads, spec.kv_lora_rank, spec.qk_rope_head_dim
    k, kv = spec.d_head, spec.d_value
    attend = 2 * s * h * (k + kv)
    up_projection = 2 * r * h * (k - rope + kv)  # per token
    return {
        "heads_bytes": _nbytes(s * spec.kv_numbers_per_layer_decompressed, bits),
        "latent_bytes": _nbytes(s * spec.kv_numbers_per_layer, bits),
        "heads_flops": attend,
        "expand_flops": s * up_projection + attend,
        "absorbed_flops": up_projection + 2 * s * h * (r + rope) + 2 * s * h * r,
        "up_projection_weight_bytes": _nbytes(r * h * (k - rope + kv), bits),
    }


@dataclass(frozen=True)
class KVMemory:
    """Every number the calculator reports for one model, context length, batch and dtype.

    ``kv_bytes_*`` include ``KVQuant``'s scales; ``window``, ``sinks``: a what-if on every layer
    (``sliding_window``: the model's own). ``_full`` keeps every token, ``_bf16`` is the same windows
    in bf16 (the reference of ``saving_vs_bf16``); ``window_saving`` is full over windowed.
    A hybrid's ``n_state_layers`` keep ``state_bytes_per_sequence`` (in ``state_dtype``) besides
    the KV of its ``n_attention_layers``; ``kv_bytes_total`` (and the batch that fits) counts both.
    ``beyond_context``: seq_len is more than the config's ``max_position_embeddings``."""

    model: str
    dtype: str
    weights_dtype: str
    seq_len: int
    batch: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    attention: str
    sliding_window: int | None
    n_sliding_layers: int
    max_position_embeddings: int
    n_params: int
    kv_bytes_per_token: int
    kv_bytes_per_sequence: int
    kv_bytes_total: int
    weights_bytes: int
    total_bytes: int
    n_active_params: int
    kv_bytes_per_token_decompressed: int
    n_experts: int
    n_experts_per_token: int
    memory_bytes: int | None = None
    max_batch: int | None = None
    fits: bool | None = None
    window: int | None = None
    sinks: int = 0
    key_scales: str = "per_token"
    group_size: int = DEFAULT_GROUP_SIZE
    scale_dtype: str = "fp16"
    kv_scale_bytes_per_token: int = 0
    kv_scale_bytes_per_sequence: int = 0
    kv_residual_bytes_per_sequence: int = 0
    kv_scale_bytes_fixed: int = 0
    kv_bytes_per_sequence_full: int = 0
    kv_bytes_per_sequence_bf16: int = 0
    saving_vs_bf16: float = 1.0
    window_saving: float = 1.0
    n_attention_layers: int = 0
    n_state_layers: int = 0
    state_numbers_per_layer: int = 0
    state_bytes_per_sequence: int = 0
    state_dtype: str = "bf16"
    beyond_context: bool = False
    nested_in: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _memory_bytes(memory_gib: Any) -> int:
    """GiB -> whole bytes; a clear error for inf, nan, <= 0, over MAX_MEMORY_GIB or under one byte."""
    if isinstance(memory_gib, bool) or not isinstance(memory_gib, (int, float)):
        raise TypeError(f"memory_gib: expected a number of GiB, got {type(memory_gib).__name__}")
    if memory_gib == math.inf or not memory_gib > 0:  # math.isfinite overflows on a huge int
        raise ValueError(f"memory_gib: expected a finite number of GiB > 0, got {memory_gib!r}")
    check_at_most("memory_gib", memory_gib, MAX_MEMORY_GIB, " GiB (1 EiB)")
    memory = int(memory_gib * GIB)
    if memory < 1:
        raise ValueError(f"memory_gib: expected at least one byte (2**-30 GiB), got {memory_gib!r}")
    return memory


def kv_memory(
    spec: ModelSpec,
    seq_len: int,
    batch: int = 1,
    dtype: str = "bf16",
    memory_gib: float | None = None,
    weights_dtype: str | None = None,
    *,
    window: int | None = None,
    sinks: int = 0,
    key_scales: str = "per_token",
    group_size: int = DEFAULT_GROUP_SIZE,
    scale_dtype: str = "fp16",
) -> KVMemory:
    """All the calculator's numbers; with ``memory_gib``, also the largest batch that fits. The
    cache is ``dtype`` with ``KVQuant(dtype, key_scales, group_size, scale_dtype)``'s scales, and a
    hybrid's state is kept in ``state_dtype(dtype)``."""
    check_spec(spec)
    _check_dtype(dtype)
    q = KVQuant(dtype, key_scales, group_size, scale_dtype)
    weights_dtype = (weights_dtype or dtype).lower()
    _check_dtype(weights_dtype, "weights_dtype")
    check_int("batch", batch, 1)
    seq = stored_bytes_per_sequence(spec, seq_len, q, window, sinks)
    check_at_most("seq_len", seq_len, MAX_COUNT), check_at_most("batch", batch, MAX_COUNT)
    token, fixed = stored_bytes_per_token(spec, q), fixed_scale_bytes(spec, q)
    full = stored_bytes_per_sequence(spec.without_window(), seq_len, q).total
    bf16 = stored_bytes_per_sequence(spec, seq_len, "bf16", window, sinks).total
    state, state_bf16 = state_bytes_per_sequence(spec, q), state_bytes_per_sequence(spec, "bf16")
    cache = seq.total + state  # one sequence: its KV rows and its constant state
    total, w = batch * cache + fixed, weights_bytes(spec, weights_dtype)
    memory = biggest = fits = None
    if memory_gib is not None:
        memory = _memory_bytes(memory_gib)
        biggest, fits = max(0, (memory - w - fixed) // cache), w + total <= memory
    return KVMemory(
        model=spec.name, dtype=dtype.lower(), weights_dtype=weights_dtype, seq_len=seq_len, batch=batch,
        n_layers=spec.n_layers, n_heads=spec.n_heads, n_kv_heads=spec.n_kv_heads, d_head=spec.d_head,
        attention=spec.attention_kind, sliding_window=spec.sliding_window,
        n_sliding_layers=spec.n_sliding_layers, max_position_embeddings=spec.max_seq_len,
        n_params=spec.n_params, kv_bytes_per_token=token.total,
        kv_bytes_per_sequence=seq.total, kv_bytes_total=total,
        weights_bytes=w, total_bytes=w + total, n_active_params=spec.n_active_params,
        kv_bytes_per_token_decompressed=kv_bytes_per_token_decompressed(spec, dtype),
        n_experts=spec.n_experts, n_experts_per_token=spec.n_experts_per_token,
        memory_bytes=memory, max_batch=biggest, fits=fits, window=window, sinks=sinks,
        key_scales=q.key_scales, group_size=q.group_size, scale_dtype=q.scale_dtype.lower(),
        kv_scale_bytes_per_token=token.scales, kv_scale_bytes_per_sequence=seq.scales,
        kv_residual_bytes_per_sequence=seq.residual, kv_scale_bytes_fixed=fixed,
        kv_bytes_per_sequence_full=full, kv_bytes_per_sequence_bf16=bf16,
        saving_vs_bf16=(bf16 + state_bf16) / cache, window_saving=(full + state) / cache,
        n_attention_layers=spec.n_attention_layers, n_state_layers=spec.n_state_layers,
        state_numbers_per_layer=spec.state_numbers_per_layer, state_bytes_per_sequence=state,
        state_dtype=state_dtype(q), beyond_context=0 < spec.max_seq_len < seq_len, nested_in=spec.nested_in,
    )  # fmt: skip


def format_bytes(n: float) -> str:
    """1536 -> '1.50 KiB' (binary units, as GPU memory is quoted)."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def _scale_lines(m: KVMemory) -> list[str]:
    """How the cache's scales are stored, as report lines ([] for a float cache)."""
    kind, mla = KVQuant(m.dtype).kind, m.attention == "MLA"
    if kind == "fp8":
        per = "one fp32 per layer" + ("" if mla else " for K and one for V")
        return [f"scales     per tensor: {per}, {m.kv_scale_bytes_fixed:,} B in all"]
    if kind == "float":
        return []
    row = "token and layer (MLA row)" if mla else "KV head and token"
    if m.key_scales == "per_token":
        return [f"scales     one {m.scale_dtype} per {row}, for K and for V"]
    return [
        f"scales     V: one {m.scale_dtype} per KV head and token; K: one per KV head and channel",
        f"           per {m.group_size} tokens, the unfilled last group's keys kept in bf16",
    ]


def _model_lines(m: KVMemory) -> list[str]:
    """The report's head: parameters, attention (and state) layers, window, dtypes."""
    lines = [f"model      {m.model}: {m.n_params / 1e9:.2f} B parameters"]
    if m.n_experts > 1:
        lines.append(
            f"           {m.n_active_params / 1e9:.2f} B active per token "
            f"({m.n_experts_per_token} of {m.n_experts} routed experts)"
        )
    if m.nested_in:
        lines.append(f"           the language model of a {m.nested_in} config (other towers not counted)")
    layers = (
        f"{m.n_layers} layers" if not m.n_state_layers else f"{m.n_attention_layers} of {m.n_layers} layers"
    )
    if m.attention == "none":
        lines.append("attention  none: no layer attends, so there is no KV cache")
    elif m.attention == "MLA":
        lines += [
            f"attention  {layers}, {m.n_heads} heads, key head dim {m.d_head}",
            "           multi-head latent: one compressed latent (and rotary key) per",
            "           token and layer, shared by every head",
        ]
    else:
        kind = {"MHA": "multi-head", "GQA": "grouped-query", "MQA": "multi-query"}[m.attention]
        group = m.n_heads // m.n_kv_heads
        lines += [
            f"attention  {layers}, {m.n_heads} query heads, {m.n_kv_heads} KV heads, head dim {m.d_head}",
            f"           {kind}: {group} query head{'s' if group > 1 else ''} per KV head",
        ]
    if m.n_state_layers:
        lines += [
            f"state      {m.n_state_layers} state-space layers, {m.state_numbers_per_layer:,} numbers each",
            f"           per sequence ({m.state_dtype}), whatever its length",
        ]
    window = f"none (every {'attention ' if m.n_state_layers else ''}layer keeps the whole context)"
    if m.sliding_window:
        window = f"{m.sliding_window:,} tokens in {m.n_sliding_layers} of {m.n_attention_layers} layers"
    if m.window is not None:
        own = f"\n           (its own: {window})" if m.sliding_window else ""
        kept = f" ({m.sinks:,} sinks + the last {m.window - m.sinks:,})" if m.sinks else ""
        window = f"what-if: {m.window:,} tokens in every layer{kept}{own}"
    if m.attention != "none":
        lines.append(f"window     {window}")
    return [*lines, f"dtype      KV cache {m.dtype}, weights {m.weights_dtype}", *_scale_lines(m), ""]


def context_warning(m: KVMemory) -> str:
    """What the report says beside the figure when seq_len is past the model's context ("" if not)."""
    if not m.beyond_context:
        return ""
    return (f"{m.seq_len:,} tokens is more than this model's context "
            f"(max_position_embeddings = {m.max_position_embeddings:,})")  # fmt: skip


def format_report(m: KVMemory) -> str:
    """The table the command line prints."""
    lines = _model_lines(m)
    layers = "all layers" if not m.n_state_layers else f"{m.n_attention_layers} attention layers"
    rows: list[tuple[str, int] | str] = [(f"KV per token ({layers})", m.kv_bytes_per_token)]
    if m.kv_scale_bytes_per_token:
        rows.append(("  of which scales", m.kv_scale_bytes_per_token))
    if m.attention == "MLA":
        rows.append(("  if heads were stored expanded", m.kv_bytes_per_token_decompressed))
    rows.append((f"KV per sequence ({m.seq_len:,} tokens)", m.kv_bytes_per_sequence))
    if m.beyond_context:  # beside the figure it concerns
        rows.append(f"  warning: more than this model's context ({m.max_position_embeddings:,} tokens)")
    if m.kv_bytes_per_sequence_full != m.kv_bytes_per_sequence:
        rows.append(("  without the window", m.kv_bytes_per_sequence_full))
    if m.kv_bytes_per_sequence_bf16 != m.kv_bytes_per_sequence:
        rows.append(("  the same in bf16", m.kv_bytes_per_sequence_bf16))
    if m.n_state_layers:
        rows.append((f"state per sequence ({m.n_state_layers} layers)", m.state_bytes_per_sequence))
    cache = "KV + state" if m.n_state_layers else "KV"
    rows += [
        (f"{cache} for the batch ({m.batch} x {m.seq_len:,})", m.kv_bytes_total),
        ("weights", m.weights_bytes),
        (f"weights + {cache}", m.total_bytes),
    ]
    if m.memory_bytes is not None:
        rows.append(("memory budget", m.memory_bytes))
    width = max(len(r[0]) for r in rows if isinstance(r, tuple))
    lines.append(f"{'':<{width}}  {'bytes':>18}  {'':>10}")
    for row in rows:
        lines.append(
            row if isinstance(row, str) else f"{row[0]:<{width}}  {row[1]:>18,d}  {format_bytes(row[1]):>10}"
        )
    if m.saving_vs_bf16 != 1 or m.window_saving != 1:
        lines.append("")
    if m.saving_vs_bf16 != 1:
        x = m.saving_vs_bf16
        lines.append(
            f"{m.dtype} vs bf16: {max(x, 1 / x):.2f}x {'smaller' if x > 1 else 'larger'} per sequence"
        )
    if m.window_saving != 1:
        lines.append(f"window: {m.window_saving:.2f}x smaller than the full cache at {m.seq_len:,} tokens")
    if m.memory_bytes is not None:
        verdict = "fits" if m.fits else "does NOT fit"
        lines += [
            "",
            f"batch {m.batch} at {m.seq_len:,} tokens {verdict} in {format_bytes(m.memory_bytes)}",
            f"largest batch that fits: {m.max_batch}",
        ]
    return "\n".join(lines)


# ---------------------------------------------------------------- command line


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m kvtutor kv-memory",
        description="KV-cache and weight memory of a model, from its Hugging Face config.json.",
        epilog="CONFIG is a path to a config.json (or a folder holding one) or a bundled model name; "
        "--list shows the bundled names.",
    )
    p.add_argument("config", nargs="?", help="config.json path or bundled model name, e.g. llama-3-8b")
    p.add_argument("--seq-len", type=int, help="tokens per sequence (default: the model's context)")
    p.add_argument("--batch", type=int, default=1, help="sequences held at once (default 1)")
    kv, keys = ", ".join(KV_DTYPES), "one fp16 scale per KV head and token, as values"
    p.add_argument("--dtype", default="bf16", help=f"cache and weights: {kv} (default bf16)")
    p.add_argument("--kv-dtype", help="KV cache dtype (default: --dtype); int8/int4 add their scales")
    p.add_argument("--weights-dtype", default=None, help="weights dtype (default: the same as --dtype)")
    p.add_argument("--key-scales", default="per_token", help=f"int8/int4 keys: per-token ({keys}) or "
                   "per-channel (per KV head and channel, per --group-size tokens)")  # fmt: skip
    p.add_argument("--group-size", type=int, default=DEFAULT_GROUP_SIZE, help="tokens per key-scale group")
    p.add_argument("--window", type=int, help="what-if: every layer keeps only W tokens, the last ones")
    p.add_argument("--sinks", type=int, default=0, help="with --window: S of the W are the first tokens")
    p.add_argument("--memory-gib", type=float, help="memory budget in GiB: report the largest batch")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument(
        "--list", action="store_true", help="list the bundled model names (and family examples) and exit"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    """``python -m kvtutor kv-memory ...``: 0 on success, 2 on bad arguments or a bad config file."""
    parser = _parser()
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:  # argparse has printed its message; give the status back to the caller
        return int(exc.code or 0)
    if args.list:  # the bundled models, then one published config of each further family
        print("\n".join([*bundled_models(), *family_examples()]))
        return 0
    if args.config is None:
        parser.print_usage(sys.stderr)
        print(
            "kv-memory: error: config: expected a config.json path or a bundled model name", file=sys.stderr
        )
        return 2
    try:
        spec = load_model_spec(args.config)
        if args.seq_len is None and not spec.max_seq_len:
            raise ValueError(f"seq_len: expected a number of tokens ({spec.name}'s config states no context "
                             "length, max_position_embeddings), got none")  # fmt: skip
        seq_len = spec.max_seq_len if args.seq_len is None else args.seq_len
        kv_dtype = args.dtype if args.kv_dtype is None else args.kv_dtype
        _check_dtype(kv_dtype, "dtype" if args.kv_dtype is None else "kv_dtype")
        report = kv_memory(
            spec, seq_len, args.batch, kv_dtype, args.memory_gib, args.weights_dtype or args.dtype,
            window=args.window, sinks=args.sinks, key_scales=args.key_scales, group_size=args.group_size,
        )  # fmt: skip
    except (ValueError, TypeError) as exc:
        message = str(exc)
        flags = ("seq_len", "batch", "dtype", "kv_dtype", "weights_dtype", "memory_gib", "key_scales")
        for flag in (*flags, "group_size", "window", "sinks"):
            if message.startswith(f"{flag}:"):  # name the flag the user typed
                message = "--" + flag.replace("_", "-") + message[len(flag) :]
        for name in ("name_or_path", "name", "path"):  # the positional argument is CONFIG
            if message.startswith(f"{name}:"):
                message = "CONFIG" + message[len(name) :]
        for line in message.splitlines():  # a config can hold several bad keys: one a line
            print(f"kv-memory: error: {line}", file=sys.stderr)
        return 2
    if report.beyond_context:
        print(f"kv-memory: warning: {context_warning(report)}", file=sys.stderr)
    if args.json:
        out = report.to_dict()
        out["source"] = args.config if os.path.exists(args.config) else f"bundled:{spec.name}"
        print(json.dumps(out, indent=2))
    else:
        print(format_report(report))
    return 0
