"""The model configuration, shared by the NumPy and the PyTorch backends."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..text import TEXT_WIDTH, fields_call
from ..validate import check_scale


@dataclass(frozen=True)
class GPT2Config:
    """Sizes of a GPT-2-style decoder.

    ``d_ff`` defaults to ``4 * d_model`` and ``n_kv_heads`` to ``n_heads`` (plain multi-head
    attention); fewer KV heads give grouped-query attention, one gives multi-query attention.
    """

    vocab_size: int
    d_model: int
    n_heads: int
    n_layers: int
    max_seq_len: int
    d_ff: int = field(default=0)
    n_kv_heads: int = field(default=0)
    layer_norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_heads", "n_layers", "max_seq_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name}: expected an int, got {type(value).__name__} {value!r}")
            if value < 1:
                raise ValueError(f"{name}: expected a positive int, got {value}")
        for name in ("d_ff", "n_kv_heads"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name}: expected a non-negative int (0 = default), got {value!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model: expected a multiple of n_heads={self.n_heads}, got {self.d_model}")
        if self.d_ff == 0:
            object.__setattr__(self, "d_ff", 4 * self.d_model)
        if self.n_kv_heads == 0:
            object.__setattr__(self, "n_kv_heads", self.n_heads)
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_kv_heads: expected a divisor of n_heads={self.n_heads}, got {self.n_kv_heads}"
            )
        check_scale("layer_norm_eps", self.layer_norm_eps)  # inf would make every LayerNorm output its bias

    def __str__(self) -> str:
        """The same fields as ``repr()``, wrapped to fit ``TEXT_WIDTH`` columns."""
        return self.wrapped(TEXT_WIDTH)

    def wrapped(self, width: int) -> str:
        """The repr's fields wrapped to ``width`` columns (a model's repr nests its config)."""
        return fields_call(self, width)

    @property
    def d_head(self) -> int:
        """K, the width of one attention head.

        The book shows this in "Meet the toy model".
        """
        return self.d_model // self.n_heads

    @property
    def group_size(self) -> int:
        """Query heads that share one KV head (1 for plain multi-head attention)."""
        return self.n_heads // self.n_kv_heads

    @property
    def n_params(self) -> int:
        """Parameters, counting the tied embedding / LM head once."""
        d, f, kv = self.d_model, self.d_ff, self.n_kv_heads * self.d_head
        per_layer = (
            2 * d  # ln_1
            + d * (d + 2 * kv)
            + (d + 2 * kv)  # W_Q, W_K, W_V and biases
            + d * d
            + d  # W_O
            + 2 * d  # ln_2
            + d * f
            + f
            + f * d
            + d  # FFN
        )
        return self.vocab_size * d + self.max_seq_len * d + self.n_layers * per_layer + 2 * d


#: The sizes of the toy model: D = 8, H = 2 heads of K = 4, two layers, a word vocabulary.
TOY_CONFIG = GPT2Config(vocab_size=32, d_model=8, n_heads=2, n_layers=2, max_seq_len=16, d_ff=32)
