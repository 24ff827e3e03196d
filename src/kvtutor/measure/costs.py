"""A cost model of inference: FLOPs and bytes of prefill and of one decode step.

Counting rules (the book's Rooflines chapter explains them):

- FLOPs are those of the matrix products, two per multiply-add. Element-wise work (biases,
  LayerNorm, softmax, GELU, residual adds) is left out: it is O(T D) against the O(T D^2) of the
  products.
- Attention is counted as a dense implementation runs it: every new query against every one of
  the S keys (``2 B H T S K`` for Q K^T and as much again for A V), the causal mask included: a
  prefill counts the masked half of its T x T scores too.
- Prefill computes logits for every position (what ``prefill`` returns); ``generate`` needs only
  the last one (``prefill_cost(..., all_logits=False)``).
- Bytes are the least traffic to and from memory: every weight once per forward pass (however
  many tokens share it), every cached key and value the attention reads, and the new keys and
  values written. Activations are left out; they stay small next to weights in decode and are
  reused from cache in prefill. A pass that writes new keys and values also counts them among the
  keys and values attention reads, as an unfused implementation does (writes, then reads back).

A decode step at context length S has T = 1 new token attending to S keys (S - 1 cached + 1 new);
prefill of a T-token prompt has T = S.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass, fields
from typing import Any

from ..models.config import GPT2Config
from ..validate import check_int, dtype_info

__all__ = [
    "Cost",
    "bytes_per_element",
    "kv_cache_bytes",
    "layer_weight_count",
    "decode_weight_bytes",
    "layer_cost",
    "forward_cost",
    "prefill_cost",
    "decode_cost",
    "generation_costs",
    "machine_balance",
    "attainable_flops",
    "roofline_time",
    "ridge_batch",
    "compute_bound_batch",
    "products_ridge_batch",
    "attention_intensity",
    "DATASHEETS",
]


def bytes_per_element(dtype: Any) -> int:
    """A dtype (``4``, ``"bf16"``, ``"float32"``, ``np.float32``, ``torch.bfloat16``) -> its size in bytes."""
    if isinstance(dtype, bool):
        raise TypeError(f"dtype: expected an int, a dtype or a dtype name, got {dtype!r}")
    if isinstance(dtype, int):
        if dtype < 1:
            raise ValueError(f"dtype: expected a positive number of bytes, got {dtype}")
        return dtype
    info = dtype_info(dtype)
    if info.bits % 8:
        raise ValueError(f"dtype: expected a whole number of bytes per element, got {info.name}")
    return info.bits // 8


def _check_config(config: Any) -> GPT2Config:
    if not isinstance(config, GPT2Config):
        raise TypeError(f"config: expected a GPT2Config, got {type(config).__name__}")
    return config


def _check_positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise TypeError(f"{name}: expected a finite number, got {type(value).__name__} {value!r}")
    if value <= 0:
        raise ValueError(f"{name}: expected a positive number, got {value}")
    return float(value)


@dataclass(frozen=True)
class Cost:
    """FLOPs and bytes of some work; costs add up (``a + b``) and scale (``n * cost``)."""

    matmul_flops: int = 0  # x @ W in the blocks: Q, K, V, O and the FFN
    attention_flops: int = 0  # Q K^T and A V
    lm_head_flops: int = 0
    weight_bytes: int = 0  # block weights and the final LayerNorm
    lm_head_bytes: int = 0  # the [V, D] output matrix (the tied token embedding)
    kv_read_bytes: int = 0
    kv_write_bytes: int = 0

    @property
    def flops(self) -> int:
        return self.matmul_flops + self.attention_flops + self.lm_head_flops

    @property
    def bytes(self) -> int:
        return self.weight_bytes + self.lm_head_bytes + self.kv_read_bytes + self.kv_write_bytes

    @property
    def all_weight_bytes(self) -> int:
        """Weights read, the LM head included."""
        return self.weight_bytes + self.lm_head_bytes

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOPs per byte moved."""
        return self.flops / self.bytes if self.bytes else math.inf

    def __add__(self, other: Cost) -> Cost:
        if not isinstance(other, Cost):
            return NotImplemented
        return Cost(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def __mul__(self, n: int) -> Cost:
        n = check_int("n", n, 0)
        return Cost(**{f.name: getattr(self, f.name) * n for f in fields(self)})

    __rmul__ = __mul__

    def as_dict(self) -> dict[str, float]:
        """Every field plus the totals ``flops``, ``bytes`` and ``intensity``: plain Python numbers."""
        out: dict[str, float] = dict(asdict(self))
        out.update(flops=self.flops, bytes=self.bytes, intensity=float(self.intensity))
        return out


def kv_cache_bytes(config: GPT2Config, n_tokens: int, batch_size: int = 1, dtype: Any = 4) -> int:
    """Bytes of keys and values for n_tokens in each of batch_size sequences:
    2 x L x Hkv x K x tokens x B x bytes per element."""
    cfg = _check_config(config)
    n_tokens = check_int("n_tokens", n_tokens, 0)
    batch_size = check_int("batch_size", batch_size, 1)
    return 2 * cfg.n_layers * cfg.n_kv_heads * cfg.d_head * n_tokens * batch_size * bytes_per_element(dtype)


def layer_weight_count(config: GPT2Config) -> int:
    """Parameters of one block: W_Q, W_K, W_V, W_O, the FFN, their biases and both LayerNorms."""
    cfg = _check_config(config)
    d, f, kv = cfg.d_model, cfg.d_ff, cfg.n_kv_heads * cfg.d_head
    return d * (d + 2 * kv) + (d + 2 * kv) + d * d + d + d * f + f + f * d + d + 4 * d


def decode_weight_bytes(config: GPT2Config, dtype: Any = 4) -> int:
    """Bytes of the weights one forward pass must read: every block, the final LayerNorm and the
    [V, D] LM head (only one row of the position table is read, so it is left out)."""
    cfg = _check_config(config)
    n = cfg.n_layers * layer_weight_count(cfg) + 2 * cfg.d_model + cfg.vocab_size * cfg.d_model
    return n * bytes_per_element(dtype)


def layer_cost(
    config: GPT2Config,
    n_new: int,
    n_past: int = 0,
    batch_size: int = 1,
    dtype: Any = 4,
    cached: bool = True,
) -> Cost:
    """One block running n_new tokens after n_past cached ones, in each of
    batch_size sequences; with ``cached=False`` no cache is read or written
    (n_past must then be 0).

    The book shows this in "Rooflines: measuring compute-bound and
    memory-bound".
    """
    cfg = _check_config(config)
    t = check_int("n_new", n_new, 1)
    past = check_int("n_past", n_past, 0)
    b = check_int("batch_size", batch_size, 1)
    if not cached and past:
        raise ValueError(
            f"n_past: expected 0 without a cache (cached=False), got {past}"
        )  # fmt: skip
    bpe = bytes_per_element(dtype)
    d, f = cfg.d_model, cfg.d_ff
    h, k, hkv = cfg.n_heads, cfg.d_head, cfg.n_kv_heads
    s = past + t
    # multiply-adds per token: Q, K, V projections, W_O, the two FFN matrices
    macs_per_token = d * (h * k + 2 * hkv * k) + d * d + 2 * d * f
    kv_row = 2 * hkv * k * bpe  # one token's keys and values in one layer
    return Cost(
        matmul_flops=2 * b * t * macs_per_token,
        attention_flops=2 * 2 * b * h * t * s * k,
        weight_bytes=layer_weight_count(cfg) * bpe,
        kv_read_bytes=b * s * kv_row if cached else 0,
        kv_write_bytes=b * t * kv_row if cached else 0,
    )


def forward_cost(
    config: GPT2Config,
    n_new: int,
    n_past: int = 0,
    batch_size: int = 1,
    dtype: Any = 4,
    cached: bool = True,
    all_logits: bool = True,
) -> Cost:
    """The whole model on n_new tokens after n_past cached ones: L blocks, the final LayerNorm,
    and the LM head for every new token (``all_logits``) or only the last one."""
    cfg = _check_config(config)
    block = layer_cost(cfg, n_new, n_past, batch_size, dtype, cached)
    rows = batch_size * (n_new if all_logits else 1)
    bpe = bytes_per_element(dtype)
    head = Cost(
        lm_head_flops=2 * rows * cfg.d_model * cfg.vocab_size,
        weight_bytes=2 * cfg.d_model * bpe,
        lm_head_bytes=cfg.vocab_size * cfg.d_model * bpe,
    )
    return cfg.n_layers * block + head


def prefill_cost(
    config: GPT2Config, n_tokens: int, batch_size: int = 1, dtype: Any = 4, all_logits: bool = True
) -> Cost:
    """Prefill of an n_tokens prompt (T = S = n_tokens) in each of batch_size sequences, logits for
    every position (what ``prefill`` returns) or, with ``all_logits=False``, for the last one only
    (all that ``generate`` needs)."""
    if not isinstance(all_logits, bool):
        raise TypeError(f"all_logits: expected a bool, got {type(all_logits).__name__}")
    return forward_cost(config, n_tokens, 0, batch_size, dtype, all_logits=all_logits)


def decode_cost(config: GPT2Config, context_len: int, batch_size: int = 1, dtype: Any = 4) -> Cost:
    """One decode step: T = 1 new token attending to S = context_len keys (the new one included)."""
    context_len = check_int("context_len", context_len, 1)
    return forward_cost(config, 1, context_len - 1, batch_size, dtype)


def generation_costs(
    config: GPT2Config,
    prompt_len: int,
    n_new: int,
    cached: bool = True,
    batch_size: int = 1,
    dtype: Any = 4,
) -> list[Cost]:
    """The cost of each of n_new generated tokens, one entry per token.

    Cached: token 1 comes from the prefill of the prompt, token i > 1 from a
    decode step at context prompt_len + i - 1, so each costs O(context)
    (attention) on top of a constant. Uncached: token i recomputes the whole
    sequence of prompt_len + i - 1 tokens, O(context) matrix products and
    O(context^2) attention, with logits only for the last position.

    The book shows this in "Same answer, less work".
    """
    cfg, p, n = _check_generation(config, prompt_len, n_new)
    out = []
    for i in range(n):  # token i + 1 comes from a pass over p + i positions
        if not cached:
            cost = forward_cost(
                cfg, p + i, 0, batch_size, dtype, cached=False, all_logits=False
            )  # fmt: skip
        elif i == 0:  # the prefill, the last row's logits only
            cost = prefill_cost(cfg, p, batch_size, dtype, all_logits=False)
        else:
            cost = decode_cost(cfg, p + i, batch_size, dtype)
        out.append(cost)
    return out


def _check_generation(config: Any, prompt_len: Any, n_new: Any) -> tuple[GPT2Config, int, int]:
    cfg = _check_config(config)
    p = check_int("prompt_len", prompt_len, 1)
    n = check_int("n_new", n_new, 0)
    if p + n - 1 > cfg.max_seq_len:
        raise ValueError(
            f"n_new: prompt of {p} + {n} new tokens needs {p + n - 1} "
            f"positions, more than max_seq_len {cfg.max_seq_len}"
        )  # fmt: skip
    return cfg, p, n


# ---------------------------------------------------------------- rooflines


def machine_balance(peak_flops: float, bandwidth: float) -> float:
    """FLOP/s, bytes/s -> the ridge point: the intensity (FLOPs/byte) above which work is compute-bound."""
    return _check_positive("peak_flops", peak_flops) / _check_positive("bandwidth", bandwidth)


def attainable_flops(intensity: float, peak_flops: float, bandwidth: float) -> float:
    """The roofline: min(peak, intensity x bandwidth), in FLOP/s."""
    peak = _check_positive("peak_flops", peak_flops)
    bw = _check_positive("bandwidth", bandwidth)
    if isinstance(intensity, bool) or not isinstance(intensity, numbers.Real) or not intensity >= 0:
        raise ValueError(f"intensity: expected a number >= 0, got {intensity!r}")
    return min(peak, float(intensity) * bw)


def roofline_time(cost: Cost, peak_flops: float, bandwidth: float) -> float:
    """The least time the work can take: max(FLOPs / peak, bytes / bandwidth), in seconds."""
    if not isinstance(cost, Cost):
        raise TypeError(f"cost: expected a Cost, got {type(cost).__name__}")
    peak = _check_positive("peak_flops", peak_flops)
    bw = _check_positive("bandwidth", bandwidth)
    return max(cost.flops / peak, cost.bytes / bw)


def ridge_batch(
    config: GPT2Config,
    context_len: int,
    peak_flops: float,
    bandwidth: float,
    dtype: Any = 4,
) -> float:
    """The batch size B (a real number) at which a decode step's intensity
    reaches the machine balance.

    A decode step's FLOPs grow as B x a and its bytes as W + B x c (weights
    once, each sequence's keys and values), so the intensity B a / (W + B c)
    crosses the balance r at B = r W / (a - r c). ``math.inf`` when a <= r c:
    the KV reads alone keep the step memory-bound at any batch.

    The book shows this in "Rooflines: decode as the batch grows".
    """
    balance = machine_balance(peak_flops, bandwidth)
    one = decode_cost(config, context_len, 1, dtype)
    a = one.flops
    c = one.kv_read_bytes + one.kv_write_bytes
    w = one.all_weight_bytes
    if a <= balance * c:
        return math.inf
    return balance * w / (a - balance * c)


def compute_bound_batch(
    config: GPT2Config, context_len: int, peak_flops: float, bandwidth: float, dtype: Any = 4
) -> int | None:
    """The smallest batch at which decode at context_len turns compute-bound, or None if none does."""
    b = ridge_batch(config, context_len, peak_flops, bandwidth, dtype)
    return None if math.isinf(b) else max(1, math.ceil(b))


def products_ridge_batch(peak_flops: float, bandwidth: float, dtype: Any = 4) -> float:
    """The batch at which the weight products alone turn compute-bound: B rows through a weight
    of ``bytes`` bytes do 2 B FLOPs, an intensity of 2 B / bytes, which reaches the machine balance
    r at B = r x bytes / 2 (= r in 16-bit formats). Activations and the cache are left out."""
    return machine_balance(peak_flops, bandwidth) * bytes_per_element(dtype) / 2


def attention_intensity(config: GPT2Config, dtype: Any = 4) -> float:
    """FLOPs per byte of a decode step's attention: each sequence's query meets its own S cached
    keys and values, 4 H S K FLOPs against 2 Hkv S K x bytes read, so 2 H / (Hkv x bytes) whatever
    the batch and the context: sequences share no keys, so batching never raises it."""
    cfg = _check_config(config)
    return 2 * cfg.n_heads / (cfg.n_kv_heads * bytes_per_element(dtype))


#: Datasheet ceilings of two GPUs (SXM boards): HBM bandwidth in bytes/s and dense bfloat16 tensor
#: FLOP/s (the datasheets print 1,979 TFLOP/s "with sparsity"; dense is half). Sources: NVIDIA H100
#: Tensor Core GPU datasheet (H100 SXM: 3.35 TB/s HBM3) and NVIDIA H200 Tensor Core GPU datasheet
#: (H200 SXM: 4.8 TB/s HBM3e, 141 GB); both list the same tensor cores.
DATASHEETS: dict[str, dict[str, float]] = {
    "H100 SXM": {"bandwidth": 3.35e12, "bf16_flops": 989e12},
    "H200 SXM": {"bandwidth": 4.8e12, "bf16_flops": 989e12},
}
