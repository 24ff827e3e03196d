"""What decides a KV cache's memory: ``ModelSpec``, the sizes of a real model, with the counts
derived from them (numbers cached per token, tokens kept per layer, weights, active weights), and
``KVQuant``, the number format the cache stores them in and the scales that format needs.

``kvtutor.models.hf_config`` reads a Hugging Face ``config.json`` into a ``ModelSpec``;
``kvtutor.measure.memory`` turns both into bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from ..caches.quant import DEFAULT_GROUP_SIZE
from ..validate import MAX_COUNT, check_at_most, check_int, dtype_info
from .config import GPT2Config

__all__ = ["ModelSpec", "KVQuant", "KEY_SCALES", "ARCH_PRESETS"]

#: int8/int4 keys: one scale per KV head and token, or per KV head and channel over a token group
KEY_SCALES = ("per_token", "per_channel")


def _dtype_name(value: object, name: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name}: expected a dtype name such as 'bf16', got {value!r}")
    return dtype_info(value, name).name


@dataclass(frozen=True)
class KVQuant:
    """How a KV cache stores its numbers, and what its scales cost: the calculator's assumption.

    * float formats (``bf16``, ``fp16``, ``fp32``): the numbers alone.
    * ``fp8`` (e4m3, e5m2): the numbers, plus one fp32 scale per layer for K and one for V (one
      for MLA's row), calibrated once and shared by every sequence (per tensor): a few hundred
      bytes for the whole cache.
    * ``int8``, ``int4``: symmetric quantization with ``scale_dtype`` scales. Values get one scale
      per KV head and token; so do keys (``key_scales="per_token"``), or, with ``"per_channel"``
      (KIVI's choice, and ``kvtutor.caches.quant``'s), one per KV head and channel for each group of
      ``group_size`` tokens, the keys of the unfilled last group kept in ``float_dtype``. Latent
      attention (MLA) caches one row per token and layer, with one scale per row.

    Names are stored lower-case; ``key_scales`` takes ``per-token`` / ``per-channel`` too.
    """

    dtype: str = "bf16"
    key_scales: str = "per_token"
    group_size: int = DEFAULT_GROUP_SIZE
    scale_dtype: str = "fp16"
    float_dtype: str = "bf16"

    def __post_init__(self) -> None:
        _dtype_name(self.dtype, "dtype")
        for name in ("scale_dtype", "float_dtype"):
            value = getattr(self, name)
            if _dtype_name(value, name) not in ("float16", "bfloat16", "float32", "float64"):
                raise ValueError(f"{name}: expected a float format (fp16, bf16, fp32), got {value!r}")
            object.__setattr__(self, name, value.lower())
        key_scales = self.key_scales.replace("-", "_") if isinstance(self.key_scales, str) else None
        if key_scales not in KEY_SCALES:
            raise ValueError(f"key_scales: expected one of {list(KEY_SCALES)}, got {self.key_scales!r}")
        object.__setattr__(self, "group_size", check_int("group_size", self.group_size, 1))
        object.__setattr__(self, "dtype", self.dtype.lower())
        object.__setattr__(self, "key_scales", key_scales)
        if key_scales == "per_channel" and self.kind != "int":
            raise ValueError(
                f"key_scales: 'per_channel' applies to int8 and int4 caches, got dtype {self.dtype!r}"
            )

    @property
    def kind(self) -> str:
        """'int' (scales per token or per channel), 'fp8' (per-tensor scales) or 'float' (none)."""
        name = dtype_info(self.dtype).name
        return "int" if name.startswith("int") else "fp8" if name.startswith("float8") else "float"

    @property
    def bits(self) -> tuple[int, int, int]:
        """Bits of one stored number, one scale and one float (residual) number."""
        return tuple(dtype_info(d).bits for d in (self.dtype, self.scale_dtype, self.float_dtype))

    def layer_bits(self, spec: ModelSpec, n: int | Fraction) -> list[Fraction]:
        """[payload, scales, residual] bits that n tokens of one layer of ``spec`` take in this
        format; a Fraction n spreads per-channel key scales over their group (the cost per token)."""
        rows, k_width, v_width = spec.n_kv_heads, spec.d_head, spec.d_value
        if spec.kv_lora_rank:  # one row of latent + rotary key, no separate keys
            if self.key_scales == "per_channel":
                raise ValueError(
                    "key_scales: 'per_channel' needs separate keys; latent attention (MLA) caches "
                    f"one row per token and layer in {spec.name}: use 'per_token'"
                )
            rows, k_width, v_width = 1, 0, spec.kv_numbers_per_layer
        n_q, key_scales = n, Fraction(n)  # keys stored quantized; key scales per row
        if self.kind == "int" and self.key_scales == "per_channel":
            n_q = n if isinstance(n, Fraction) else n // self.group_size * self.group_size
            key_scales = Fraction(n_q, self.group_size) * k_width
        bits, scale_bits, float_bits = self.bits
        payload = rows * (n * v_width + n_q * k_width) * bits
        residual = rows * (n - n_q) * k_width * float_bits
        scales = rows * (n + (key_scales if k_width else 0)) * scale_bits if self.kind == "int" else 0
        return [Fraction(payload), Fraction(scales), Fraction(residual)]


#: what each ``arch`` leaves out of a ``ModelSpec``: norm numbers per channel (2: LayerNorm with
#: biases, 1: RMSNorm), a gated MLP, MLP biases, attention biases, learned position rows
ARCH_PRESETS = {
    arch: dict(
        zip(("norm_params", "mlp_gated", "mlp_bias", "attention_bias", "positions"), preset, strict=True)
    )
    for arch, preset in {
        "gpt2": (2, False, True, "qkvo", True),
        "gated": (1, True, False, "", False),
        "plain": (2, False, True, "qkvo", False),
        "ssm": (1, False, False, "", False),
    }.items()
}


@dataclass(frozen=True)
class ModelSpec:
    """The sizes of a real model that decide its KV-cache and weight memory.

    ``arch`` presets the weights' layout: ``"gpt2"`` (LayerNorm with biases, learned positions, an
    MLP with biases), ``"gated"`` (RMSNorm, rotary positions, a gated MLP without biases),
    ``"plain"`` (LayerNorm, rotary or no positions, an MLP with biases: Falcon, GPT-NeoX) or
    ``"ssm"`` (state-space layers only, no MLP: Mamba). A family that differs says so in the fields
    left at None: ``norm_params`` (numbers per channel of one norm: 2, 1, or 0 for a norm without
    weights), ``mlp_gated``, ``mlp_bias``, ``attention_bias`` ("" none, "qkv", "qkvo") and
    ``position_rows`` (learned position embeddings); ``d_embed`` is an embedding narrower than the
    model with projections in and out (OPT-350M; 0: d_model), ``final_norm`` the norm before the
    head, ``qk_norm`` a norm on queries and keys, of d_head per head or (``qk_norm_width``) of
    their whole width.

    ``sliding_window`` is the number of most recent tokens that ``n_sliding_layers`` of the
    attention layers attend to (and so need to keep); the other layers attend to, and keep, the
    whole context. A hybrid (Jamba) has ``n_state_layers`` state-space layers instead of attention,
    each keeping ``state_numbers_per_layer`` numbers per sequence whatever its length (and holding
    ``state_params_per_layer`` weights); a state-space model (Mamba) has only those, no KV cache,
    and 0 heads. ``max_seq_len`` 0 means the config states no context length.

    Mixture of experts: ``n_experts`` routed experts of width ``d_ff_expert`` in every MoE layer,
    ``n_experts_per_token`` of them run for each token, plus shared experts of total width
    ``d_ff_shared`` that every token runs; the first ``n_dense_layers`` layers (or the layers a Qwen
    config lists) have a dense MLP of width ``d_ff`` instead.

    Multi-head latent attention (``kv_lora_rank > 0``, DeepSeek): the cache keeps, per token and
    layer, one latent vector of ``kv_lora_rank`` numbers and one rotary key of ``qk_rope_head_dim``
    numbers shared by every head; ``n_heads`` keys of ``d_head`` (= nope + rope) and values of
    ``v_head_dim`` are re-expanded from the latent. ``q_lora_rank`` is the query's bottleneck
    (0: a direct query projection). ``nested_in`` names the multimodal wrapper whose language
    model this is (its other towers are not counted).
    """

    name: str
    model_type: str
    arch: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    d_ff: int
    vocab_size: int
    max_seq_len: int
    sliding_window: int | None = None
    n_sliding_layers: int = 0
    tie_word_embeddings: bool = False
    attention_bias: str | None = None  # "" none, "qkv" (Qwen2), "qkvo" (Llama's attention_bias=true)
    n_experts: int = 1
    norms_per_layer: int = 2
    n_experts_per_token: int = 1
    d_ff_expert: int = 0  # 0: d_ff
    n_dense_layers: int = 0  # layers with a dense MLP in a mixture-of-experts model
    d_ff_shared: int = 0
    shared_expert_gate: bool = False  # Qwen2-MoE: a sigmoid gate [D, 1] on the shared expert
    qk_norm: bool = False
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0  # 0: d_head
    norm_params: int | None = None
    mlp_gated: bool | None = None
    mlp_bias: bool | None = None
    position_rows: int | None = None
    d_embed: int = 0  # 0: d_model
    final_norm: bool = True
    qk_norm_width: bool = False
    n_state_layers: int = 0
    state_numbers_per_layer: int = 0
    state_params_per_layer: int = 0
    nested_in: str = ""

    def __post_init__(self) -> None:
        if self.arch not in ARCH_PRESETS:
            raise ValueError(
                f"arch: expected one of {', '.join(repr(a) for a in ARCH_PRESETS)}, got {self.arch!r}"
            )
        ssm = self.arch == "ssm"
        n_state = check_int("n_state_layers", self.n_state_layers, 0)
        attends = n_state < check_int("n_layers", self.n_layers, 1)
        lows = {"n_layers": 1, "d_model": 1, "vocab_size": 1, "n_experts": 1, "n_experts_per_token": 1,
                "n_heads": int(attends), "n_kv_heads": int(attends), "d_head": int(attends),
                "d_ff": 0 if ssm else 1, "max_seq_len": 0 if ssm else 1}  # fmt: skip
        counts = ("d_ff_expert", "n_dense_layers", "d_ff_shared", "kv_lora_rank", "q_lora_rank")
        counts += ("qk_rope_head_dim", "v_head_dim", "d_embed", "n_state_layers", "state_numbers_per_layer")
        counts += ("state_params_per_layer",)
        for key, low in [*lows.items(), *((key, 0) for key in counts)]:
            # a numpy int is accepted and stored as a plain int; past MAX_COUNT, byte counts overflow floats
            object.__setattr__(
                self, key, check_at_most(key, check_int(key, getattr(self, key), low), MAX_COUNT)
            )
        preset = ARCH_PRESETS[self.arch]
        for key in ("norm_params", "mlp_gated", "mlp_bias", "attention_bias"):
            if getattr(self, key) is None:
                object.__setattr__(self, key, preset[key])
        if self.position_rows is None:
            object.__setattr__(self, "position_rows", self.max_seq_len if preset["positions"] else 0)
        object.__setattr__(self, "position_rows", check_int("position_rows", self.position_rows, 0))
        check_int("norm_params", self.norm_params, 0, 2)
        if self.n_state_layers > self.n_layers:
            raise ValueError(f"n_state_layers: expected 0 .. {self.n_layers}, got {self.n_state_layers}")
        if self.n_state_layers and not self.state_numbers_per_layer:
            raise ValueError("state_numbers_per_layer: expected at least 1 with state-space layers")
        if self.n_heads and not self.n_kv_heads or self.n_kv_heads and self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_kv_heads: expected a divisor of n_heads={self.n_heads}, got {self.n_kv_heads}"
            )
        if self.sliding_window is not None:
            window = check_at_most(
                "sliding_window", check_int("sliding_window", self.sliding_window, 1), MAX_COUNT
            )
            object.__setattr__(self, "sliding_window", window)
        if not 0 <= self.n_sliding_layers <= self.n_attention_layers:
            raise ValueError(
                f"n_sliding_layers: expected 0 .. {self.n_attention_layers}, got {self.n_sliding_layers}"
            )
        if self.n_sliding_layers and self.sliding_window is None:
            raise ValueError("n_sliding_layers: expected 0 when sliding_window is None")
        if self.attention_bias not in ("", "qkv", "qkvo"):
            raise ValueError(f"attention_bias: expected '', 'qkv' or 'qkvo', got {self.attention_bias!r}")
        if self.n_experts_per_token > self.n_experts:
            raise ValueError(
                f"n_experts_per_token: expected <= n_experts={self.n_experts}, got {self.n_experts_per_token}"
            )
        if self.n_dense_layers > self.n_layers:
            raise ValueError(f"n_dense_layers: expected 0 .. {self.n_layers}, got {self.n_dense_layers}")
        if self.kv_lora_rank:
            if self.arch != "gated" or self.n_kv_heads != self.n_heads:
                raise ValueError(
                    "kv_lora_rank: latent attention expects arch 'gated' and n_kv_heads == n_heads"
                )
            if not 0 < self.qk_rope_head_dim < self.d_head:
                raise ValueError(
                    f"qk_rope_head_dim: expected 1 .. d_head-1 = {self.d_head - 1} with latent attention, "
                    f"got {self.qk_rope_head_dim}"
                )
            if self.sliding_window is not None:
                raise ValueError("sliding_window: expected None with latent attention")
        elif self.q_lora_rank or self.qk_rope_head_dim:
            raise ValueError("q_lora_rank: expected 0 without latent attention (kv_lora_rank = 0)")

    # ------------------------------------------------------------ derived sizes
    @property
    def group_size(self) -> int:
        """Query heads that share one KV head: 1 is multi-head, n_heads is multi-query attention
        (0 without attention)."""
        return self.n_heads // self.n_kv_heads if self.n_kv_heads else 0

    @property
    def attention_kind(self) -> str:
        """'MHA', 'GQA', 'MQA', 'MLA' (multi-head latent attention) or 'none' (a state-space model)."""
        if not self.n_attention_layers:
            return "none"
        if self.kv_lora_rank:
            return "MLA"
        if self.n_kv_heads == self.n_heads:
            return "MHA"
        return "MQA" if self.n_kv_heads == 1 else "GQA"

    @property
    def d_value(self) -> int:
        """Width of one value head (d_head except in latent attention)."""
        return self.v_head_dim or self.d_head

    @property
    def kv_width(self) -> int:
        """Numbers per token per layer for K of all KV heads: n_kv_heads x d_head (before any latent)."""
        return self.n_kv_heads * self.d_head

    @property
    def kv_numbers_per_layer(self) -> int:
        """Numbers cached per token per layer: K and V rows of every KV head, or MLA's latent + rope key."""
        if self.kv_lora_rank:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return self.n_kv_heads * (self.d_head + self.d_value)

    @property
    def kv_numbers_per_layer_decompressed(self) -> int:
        """Per token per layer, K and V of every head as attention uses them (MLA: after expansion)."""
        return self.n_kv_heads * (self.d_head + self.d_value)

    @property
    def n_attention_layers(self) -> int:
        """Layers that attend, and so keep K and V (all but a hybrid's state-space layers)."""
        return self.n_layers - self.n_state_layers

    @property
    def n_full_layers(self) -> int:
        """Attention layers that attend to (and cache) the whole context."""
        return self.n_attention_layers - self.n_sliding_layers

    @property
    def state_numbers(self) -> int:
        """Numbers of constant state one sequence keeps in all state-space layers, whatever its length."""
        return self.n_state_layers * self.state_numbers_per_layer

    def cached_tokens(self, seq_len: int) -> int:
        """Token rows kept over all layers for a sequence of seq_len tokens (window-aware)."""
        seq_len = check_int("seq_len", seq_len, 1)
        windowed = min(seq_len, self.sliding_window) if self.sliding_window else seq_len
        return self.n_full_layers * seq_len + self.n_sliding_layers * windowed

    def without_window(self) -> ModelSpec:
        """The same model with every layer keeping the whole context (its sliding window removed)."""
        return replace(self, sliding_window=None, n_sliding_layers=0)

    def layer_tokens(self, seq_len: int, window: int | None = None, sinks: int = 0) -> list[tuple[int, int]]:
        """(attention layers, tokens each keeps) for a sequence of seq_len tokens, one pair per kind.

        Without ``window`` this is the model's own rule (``cached_tokens`` is the sum). A given
        ``window`` imposes a what-if on every layer: keep ``window`` tokens, the first ``sinks`` of
        the sequence (attention sinks, as StreamingLLM counts them: inside the window) and the last
        window - sinks, so min(seq_len, window); a layer whose own window is shorter keeps to its own.
        """
        seq_len = check_int("seq_len", seq_len, 1)
        sinks = check_int("sinks", sinks, 0)
        if window is None:
            if sinks:
                raise ValueError(f"sinks: expected 0 without a window, got {sinks}")
            cap = seq_len
        else:
            window = check_int("window", window, 1)
            check_int("sinks", sinks, 0, window - 1)  # at least one recent token besides the sinks
            cap = min(seq_len, window)
        own = min(cap, self.sliding_window) if self.sliding_window else cap
        pairs = [(self.n_full_layers, cap), (self.n_sliding_layers, own)]
        return [(layers, tokens) for layers, tokens in pairs if layers]

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 1

    @property
    def n_moe_layers(self) -> int:
        return self.n_layers - self.n_dense_layers if self.is_moe else 0

    @property
    def expert_params(self) -> int:
        """Weights of one routed expert (a gated MLP of width d_ff_expert)."""
        return 3 * self.d_model * (self.d_ff_expert or self.d_ff)

    def _attention_params(self) -> int:
        d, h, k = self.d_model, self.n_heads, self.d_head
        if self.kv_lora_rank:  # DeepSeek's latent attention
            r_q, r_kv, rope = self.q_lora_rank, self.kv_lora_rank, self.qk_rope_head_dim
            q = d * r_q + r_q + r_q * h * k if r_q else d * h * k  # (down, norm, up) or direct
            kv = (
                d * (r_kv + rope) + r_kv + r_kv * h * (k - rope + self.d_value)
            )  # down, norm, up to K_nope, V
            return q + kv + h * self.d_value * d
        q_width, kv = h * k, self.kv_width
        bias = {"": 0, "qkv": q_width + 2 * kv, "qkvo": q_width + 2 * kv + d}[self.attention_bias]
        return d * q_width + 2 * d * kv + q_width * d + bias

    @property
    def n_params(self) -> int:
        """Weight count from the sizes (exact for the bundled models, tied matrices counted once)."""
        d, f, v, e = self.d_model, self.d_ff, self.vocab_size, self.d_embed or self.d_model
        embed = v * e + self.position_rows * d + (2 * d * e if e != d else 0)  # tokens, positions, in/out
        head = 0 if self.tie_word_embeddings else v * e
        qk_norm = (self.n_heads + self.n_kv_heads) * self.d_head if self.qk_norm_width else 2 * self.d_head
        norms = self.norms_per_layer * self.norm_params * d + (qk_norm if self.qk_norm else 0)
        dense_mlp = (3 if self.mlp_gated else 2) * d * f
        if self.mlp_bias:
            dense_mlp += (2 * f if self.mlp_gated else f) + d
        moe_mlp = (
            self.n_experts * self.expert_params + d * self.n_experts  # experts, router
            + 3 * d * self.d_ff_shared + (d if self.shared_expert_gate else 0)
        )  # fmt: skip
        n_moe = self.n_moe_layers
        mlps = (self.n_layers - n_moe) * dense_mlp + n_moe * moe_mlp
        mixers = (
            self.n_attention_layers * self._attention_params()
            + self.n_state_layers * self.state_params_per_layer
        )
        final = self.norm_params * d if self.final_norm else 0
        return embed + mixers + self.n_layers * norms + mlps + final + head

    @property
    def n_active_params(self) -> int:
        """Weights one token runs through: n_params less the routed experts it does not use."""
        idle = self.n_moe_layers * (self.n_experts - self.n_experts_per_token) * self.expert_params
        return self.n_params - idle

    def to_model_config(self, max_seq_len: int | None = None, vocab_size: int | None = None) -> GPT2Config:
        """A ``GPT2Config`` with the same attention shapes (so the same KV cache layout).

        For a GPT-2 config this is the model itself. For a gated (Llama-style) model the NumPy
        model built from it is GPT-2-style: its cache has the same shape per token, its weights
        do not (use ``n_params`` for those). Needs ``n_heads * d_head == d_model``.
        """
        if self.n_state_layers:
            raise ValueError(
                f"spec: GPT2Config has no state-space layers ({self.n_state_layers} in {self.name})"
            )
        if self.kv_lora_rank:
            raise ValueError(
                f"spec: GPT2Config has no latent attention (kv_lora_rank={self.kv_lora_rank}) for {self.name}"
            )
        if self.n_heads * self.d_head != self.d_model:
            raise ValueError(
                f"spec: GPT2Config needs n_heads * d_head == d_model, got {self.n_heads} * "
                f"{self.d_head} != {self.d_model} for {self.name}"
            )
        return GPT2Config(
            vocab_size=self.vocab_size if vocab_size is None else vocab_size,
            d_model=self.d_model,
            n_heads=self.n_heads,
            n_layers=self.n_layers,
            max_seq_len=self.max_seq_len if max_seq_len is None else max_seq_len,
            d_ff=self.d_ff,
            n_kv_heads=self.n_kv_heads,
        )

    @classmethod
    def from_model_config(cls, config: GPT2Config, name: str = "kvtutor") -> ModelSpec:
        """The spec of a kvtutor ``GPT2Config`` (a GPT-2-style model, tied embeddings)."""
        return cls(
            name=name, model_type="gpt2", arch="gpt2", n_layers=config.n_layers, d_model=config.d_model,
            n_heads=config.n_heads, n_kv_heads=config.n_kv_heads, d_head=config.d_head, d_ff=config.d_ff,
            vocab_size=config.vocab_size, max_seq_len=config.max_seq_len, tie_word_embeddings=True,
        )  # fmt: skip
