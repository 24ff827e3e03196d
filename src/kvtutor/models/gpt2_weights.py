"""GPT-2 weights: the container, random initialisation, and loading Hugging Face state dicts.

Hugging Face's GPT-2 stores Q, K and V side by side in one ``attn.c_attn.weight`` of shape
[D, 3D] (a Conv1D, applied as ``x @ W``). We keep W_Q, W_K and W_V apart, as the walkthrough
names them, and split / join at the boundary.
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ..validate import check_float_dtype, check_seed
from .config import GPT2Config
from .weight_schema import check_weights


@dataclass
class LayerWeights:
    """One block. Shapes: ln [D]; w_q [D, H*K], w_k and w_v [D, Hkv*K]; w_o [D, D];
    w_fc [D, F]; w_proj [F, D]; each bias the width of its output."""

    ln1_g: np.ndarray
    ln1_b: np.ndarray
    w_q: np.ndarray
    b_q: np.ndarray
    w_k: np.ndarray
    b_k: np.ndarray
    w_v: np.ndarray
    b_v: np.ndarray
    w_o: np.ndarray
    b_o: np.ndarray
    ln2_g: np.ndarray
    ln2_b: np.ndarray
    w_fc: np.ndarray
    b_fc: np.ndarray
    w_proj: np.ndarray
    b_proj: np.ndarray


@dataclass
class GPT2Weights:
    """All weights: embeddings wte [V, D] (also the LM head) and wpe [M, D], the blocks, ln_f."""

    wte_VD: np.ndarray
    wpe_MD: np.ndarray
    layers: list[LayerWeights]
    lnf_g: np.ndarray
    lnf_b: np.ndarray

    def arrays(self) -> Iterator[np.ndarray]:
        yield from (self.wte_VD, self.wpe_MD, self.lnf_g, self.lnf_b)
        for layer in self.layers:
            yield from (getattr(layer, f.name) for f in fields(layer))

    def named(self) -> dict[str, Any]:
        """Every weight by name (``"wte_VD"``, ``"layers[0].w_q"``, ...), for ``check``."""
        out = {"wte_VD": self.wte_VD, "wpe_MD": self.wpe_MD, "lnf_g": self.lnf_g, "lnf_b": self.lnf_b}
        for i, layer in enumerate(self.layers):
            out |= {f"layers[{i}].{f.name}": getattr(layer, f.name) for f in fields(layer)}
        return out

    @staticmethod
    def schema(config: GPT2Config) -> dict[str, tuple[int, ...]]:
        """Every weight ``config`` describes -> its shape (the names of ``named``)."""
        d, f, m, kv = config.d_model, config.d_ff, config.max_seq_len, config.n_kv_heads * config.d_head
        layer = {
            "ln1_g": (d,), "ln1_b": (d,), "w_q": (d, d), "b_q": (d,), "w_k": (d, kv), "b_k": (kv,),
            "w_v": (d, kv), "b_v": (kv,), "w_o": (d, d), "b_o": (d,), "ln2_g": (d,), "ln2_b": (d,),
            "w_fc": (d, f), "b_fc": (f,), "w_proj": (f, d), "b_proj": (d,),
        }  # fmt: skip
        out = {"wte_VD": (config.vocab_size, d), "wpe_MD": (m, d), "lnf_g": (d,), "lnf_b": (d,)}
        for i in range(config.n_layers):
            out |= {f"layers[{i}].{name}": shape for name, shape in layer.items()}
        return out

    def check(self, config: GPT2Config) -> None:
        """These weights against ``config`` (``weight_schema.check_weights``): every one present,
        of its shape, one floating dtype, finite; none beyond the config's layers."""
        if not isinstance(config, GPT2Config):
            raise TypeError(f"config: expected a kvtutor.GPT2Config, got {type(config).__name__}")
        check_weights(self, config, self.schema(config), "layer_norm_eps")

    def to_state_dict(self) -> dict[str, np.ndarray]:
        """Hugging Face ``GPT2LMHeadModel`` naming (``transformer.`` prefix, c_attn fused)."""

        def fused_qkv(ly: LayerWeights) -> tuple[np.ndarray, np.ndarray]:
            return np.concatenate([ly.w_q, ly.w_k, ly.w_v], axis=1), np.concatenate([ly.b_q, ly.b_k, ly.b_v])

        return gpt2_state_dict(self, fused_qkv)


def gpt2_state_dict(weights: Any, fused_qkv: Any) -> dict[str, Any]:
    """Any model's weights -> Hugging Face ``GPT2LMHeadModel`` names.

    ``weights`` has ``wte_VD``, ``wpe_MD``, ``layers`` (each with the ``LayerWeights`` field names)
    and ``lnf_g``/``lnf_b``; ``fused_qkv(layer)`` returns c_attn's [D, D + 2 Hkv K] weight and bias.
    Shared by the NumPy and the PyTorch model, whatever their arrays are.
    """
    sd = {"transformer.wte.weight": weights.wte_VD, "transformer.wpe.weight": weights.wpe_MD}
    for i, ly in enumerate(weights.layers):
        p = f"transformer.h.{i}."
        w_qkv, b_qkv = fused_qkv(ly)
        sd |= {
            p + "ln_1.weight": ly.ln1_g, p + "ln_1.bias": ly.ln1_b,
            p + "attn.c_attn.weight": w_qkv, p + "attn.c_attn.bias": b_qkv,
            p + "attn.c_proj.weight": ly.w_o, p + "attn.c_proj.bias": ly.b_o,
            p + "ln_2.weight": ly.ln2_g, p + "ln_2.bias": ly.ln2_b,
            p + "mlp.c_fc.weight": ly.w_fc, p + "mlp.c_fc.bias": ly.b_fc,
            p + "mlp.c_proj.weight": ly.w_proj, p + "mlp.c_proj.bias": ly.b_proj,
        }  # fmt: skip
    sd |= {"transformer.ln_f.weight": weights.lnf_g, "transformer.ln_f.bias": weights.lnf_b}
    sd["lm_head.weight"] = weights.wte_VD
    return sd


def _layer_shapes(cfg: GPT2Config) -> dict[str, tuple[int, ...]]:
    d, f, kv = cfg.d_model, cfg.d_ff, cfg.n_kv_heads * cfg.d_head
    return {
        "ln_1.weight": (d,), "ln_1.bias": (d,),
        "attn.c_attn.weight": (d, d + 2 * kv), "attn.c_attn.bias": (d + 2 * kv,),
        "attn.c_proj.weight": (d, d), "attn.c_proj.bias": (d,),
        "ln_2.weight": (d,), "ln_2.bias": (d,),
        "mlp.c_fc.weight": (d, f), "mlp.c_fc.bias": (f,),
        "mlp.c_proj.weight": (f, d), "mlp.c_proj.bias": (d,),
    }  # fmt: skip


def _split_layer(get, p: str, cfg: GPT2Config) -> LayerWeights:
    d, kv = cfg.d_model, cfg.n_kv_heads * cfg.d_head
    w, b = get(p + "attn.c_attn.weight"), get(p + "attn.c_attn.bias")
    cuts = [d, d + kv]
    w_q, w_k, w_v = np.split(w, cuts, axis=1)
    b_q, b_k, b_v = np.split(b, cuts)
    return LayerWeights(
        get(p + "ln_1.weight"), get(p + "ln_1.bias"), w_q, b_q, w_k, b_k, w_v, b_v,
        get(p + "attn.c_proj.weight"), get(p + "attn.c_proj.bias"),
        get(p + "ln_2.weight"), get(p + "ln_2.bias"),
        get(p + "mlp.c_fc.weight"), get(p + "mlp.c_fc.bias"),
        get(p + "mlp.c_proj.weight"), get(p + "mlp.c_proj.bias"),
    )  # fmt: skip


def random_weights(cfg: GPT2Config, seed: int = 0, dtype=np.float32) -> GPT2Weights:
    """Normal(0, 0.02) matrices, LayerNorm gains near 1, small biases: a GPT-2-like draw."""
    if not isinstance(cfg, GPT2Config):
        raise TypeError(f"config: expected a kvtutor.GPT2Config, got {type(cfg).__name__}")
    dtype = check_float_dtype(dtype)
    rng = np.random.default_rng(check_seed(seed))

    def draw(shape: tuple[int, ...], name: str) -> np.ndarray:
        if name.startswith("ln"):
            base = 1.0 if name.endswith("weight") else 0.0
            return (base + 0.1 * rng.standard_normal(shape)).astype(dtype)
        scale = 0.02 if name.endswith("weight") else 0.01
        return (scale * rng.standard_normal(shape)).astype(dtype)

    sd = {
        "wte.weight": draw((cfg.vocab_size, cfg.d_model), "wte.weight"),
        "wpe.weight": draw((cfg.max_seq_len, cfg.d_model), "wpe.weight"),
        "ln_f.weight": draw((cfg.d_model,), "ln_f.weight"),
        "ln_f.bias": draw((cfg.d_model,), "ln_f.bias"),
    }
    for i in range(cfg.n_layers):
        for key, shape in _layer_shapes(cfg).items():
            sd[f"h.{i}.{key}"] = draw(shape, key)
    return _build(sd, cfg)


def _build(sd: Mapping[str, np.ndarray], cfg: GPT2Config) -> GPT2Weights:
    layers = [_split_layer(sd.__getitem__, f"h.{i}.", cfg) for i in range(cfg.n_layers)]
    return GPT2Weights(sd["wte.weight"], sd["wpe.weight"], layers, sd["ln_f.weight"], sd["ln_f.bias"])


_IGNORED = re.compile(r"^h\.\d+\.attn\.(bias|masked_bias)$")  # causal-mask buffers, not weights
_LAYER_KEY = re.compile(r"^h\.(\d+)\.")


def weight_array(value: Any, key: str, dtype: np.dtype) -> np.ndarray:
    """One state-dict entry -> a finite floating array of ``dtype``; errors name the key."""
    label = f"state_dict[{key!r}]"
    if hasattr(value, "detach"):  # a torch tensor; .float() also handles bf16
        if not value.is_floating_point():
            raise TypeError(f"{label}: expected floating-point weights, got a tensor of dtype {value.dtype}")
        value = value.detach().cpu().float().numpy()
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{label}: expected a numpy array or torch tensor, got {type(value).__name__}")
    if not np.issubdtype(value.dtype, np.floating):
        raise TypeError(f"{label}: expected floating-point weights, got an array of dtype {value.dtype}")
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow becomes inf, reported below
        arr = value.astype(dtype)
    finite = np.isfinite(arr)
    if not finite.all():
        where = np.unravel_index(int(np.argmin(finite)), arr.shape)
        bad = arr[where]
        extra = ""
        if np.isfinite(value[where]):
            extra = f" ({value[where]!r} overflows {arr.dtype})"
        raise ValueError(
            f"{label}: expected finite weights, got {bad} at index {list(map(int, where))}{extra} "
            f"({int(arr.size - finite.sum())} non-finite in all)"
        )
    return arr


def _check_layer_numbering(sd: Mapping[str, Any]) -> int:
    """The number of layers: h.0 .. h.{n-1}, each present; a key past a gap is named as unexpected."""
    ids = sorted({int(m.group(1)) for k in sd if (m := _LAYER_KEY.match(k))})
    n_layers = 0
    while n_layers in ids:
        n_layers += 1
    if n_layers < len(ids):
        first_extra = ids[n_layers]
        key = min((k for k in sd if k.startswith(f"h.{first_extra}.")), key=str)
        run = f"layers h.0 .. h.{n_layers - 1} are numbered in order" if n_layers else "there is no layer h.0"
        raise ValueError(
            f"state_dict: unexpected key {key!r}: {run}, then comes h.{first_extra} "
            f"(a gap in the layer numbering: an extra layer, or layer h.{n_layers} is missing)"
        )
    return n_layers


_HF_KEYS = {"n_layer": "n_layers", "n_head": "n_heads", "n_embd": "d_model", "vocab_size": "vocab_size",
            "n_positions": "max_seq_len", "n_inner": "d_ff"}  # fmt: skip


def check_against_hf_config(config: GPT2Config, hf_config: Mapping[str, Any]) -> None:
    """The sizes read off a state dict must be those its config.json states (a truncated or
    mismatched checkpoint is caught): ``n_layer``, ``n_head``, ``n_embd``, ``vocab_size``,
    ``n_positions`` and ``n_inner`` where present."""
    if not isinstance(hf_config, Mapping):
        raise TypeError(f"hf_config: expected a config.json dict, got {type(hf_config).__name__}")
    model_type = hf_config.get("model_type", "gpt2")
    if model_type != "gpt2":
        raise ValueError(f"hf_config['model_type']: expected 'gpt2', got {model_type!r}")
    for key, field in _HF_KEYS.items():
        want = hf_config.get(key)
        if want is None:
            continue
        got = getattr(config, field)
        if want != got:
            raise ValueError(
                f"hf_config[{key!r}]: the config says {want!r}, the state dict has {got} "
                f"({field}); a truncated checkpoint, or the config of another model?"
            )


def weights_from_state_dict(
    state_dict: Mapping[str, Any],
    n_heads: int,
    n_kv_heads: int | None = None,
    dtype=np.float32,
    hf_config: Mapping[str, Any] | None = None,
) -> tuple[GPT2Config, GPT2Weights]:
    """Check and convert a Hugging Face GPT-2 state dict; errors name the offending key.

    Refused: keys that are not strings, values that are not floating-point arrays or tensors
    (integers, strings, objects), non-finite numbers, layers numbered with a gap, missing or
    unexpected keys, wrong shapes, an ``lm_head.weight`` that is not the tied ``wte.weight``, and,
    with ``hf_config`` (the model's config.json as a dict), sizes that differ from the config's.
    """
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"state_dict: expected a mapping of names to arrays, got {type(state_dict).__name__}")
    dtype = check_float_dtype(dtype)
    sd: dict[str, Any] = {}
    lm_head = None
    for key, value in state_dict.items():
        if not isinstance(key, str):
            raise TypeError(f"state_dict: expected str keys, got {type(key).__name__} key {key!r}")
        if key == "lm_head.weight":
            lm_head = weight_array(value, key, dtype)
            continue
        short = key.removeprefix("transformer.")
        if _IGNORED.match(short):
            continue
        arr = weight_array(value, key, dtype)
        if short in sd:
            raise ValueError(f"state_dict: key {key!r} given twice (with and without 'transformer.')")
        sd[short] = arr
    for key in ("wte.weight", "wpe.weight"):
        if key not in sd:
            raise ValueError(f"state_dict: missing key {key!r}")
    wte, wpe = sd["wte.weight"], sd["wpe.weight"]
    if wte.ndim != 2:
        raise ValueError(f"state_dict['wte.weight']: expected [V, D], got shape {list(wte.shape)}")
    if wpe.ndim != 2 or wte.shape[1] != wpe.shape[1]:
        raise ValueError(
            f"state_dict['wpe.weight']: expected [M, D] with D = wte's {wte.shape[1]}, got {list(wpe.shape)}"
        )
    n_layers = _check_layer_numbering(sd)
    fc_key = "h.0.mlp.c_fc.weight"
    if n_layers == 0 or fc_key not in sd:
        raise ValueError(f"state_dict: missing key {fc_key!r}")
    if sd[fc_key].ndim != 2:
        raise ValueError(f"state_dict[{fc_key!r}]: expected [D, F], got shape {list(sd[fc_key].shape)}")
    d_model = int(wte.shape[1])
    d_head = d_model // n_heads if isinstance(n_heads, int) and n_heads > 0 and d_model % n_heads == 0 else 0
    attn = sd.get("h.0.attn.c_attn.weight")
    if n_kv_heads is None and attn is not None and attn.ndim == 2 and d_head:
        n_kv_heads = (int(attn.shape[1]) - d_model) // (2 * d_head)
        if n_kv_heads < 1:
            raise ValueError(
                f"state_dict['h.0.attn.c_attn.weight']: expected [D, D + 2 Hkv K] with D = {d_model}, "
                f"got {list(attn.shape)}"
            )
    config = GPT2Config(
        vocab_size=int(wte.shape[0]),
        d_model=d_model,
        n_heads=n_heads,
        n_layers=n_layers,
        max_seq_len=int(wpe.shape[0]),
        d_ff=int(sd[fc_key].shape[1]),
        n_kv_heads=n_kv_heads or 0,
    )
    expected = {
        "wte.weight": (config.vocab_size, d_model),
        "wpe.weight": (config.max_seq_len, d_model),
        "ln_f.weight": (d_model,),
        "ln_f.bias": (d_model,),
    }
    for i in range(n_layers):
        expected |= {f"h.{i}.{k}": s for k, s in _layer_shapes(config).items()}
    missing = sorted(set(expected) - set(sd))
    if missing:
        raise ValueError(f"state_dict: missing key {missing[0]!r} ({len(missing)} missing in all)")
    unexpected = sorted(set(sd) - set(expected))
    if unexpected:
        raise ValueError(f"state_dict: unexpected key {unexpected[0]!r}")
    arrays = {}
    for key, shape in expected.items():
        if tuple(sd[key].shape) != shape:
            raise ValueError(f"state_dict[{key!r}]: expected shape {list(shape)}, got {list(sd[key].shape)}")
        arrays[key] = sd[key]
    if lm_head is not None:
        head = lm_head
        if head.shape != arrays["wte.weight"].shape:
            raise ValueError(
                f"state_dict['lm_head.weight']: expected the tied wte.weight's shape "
                f"{list(arrays['wte.weight'].shape)}, got {list(head.shape)}"
            )
        if not np.allclose(head, arrays["wte.weight"]):
            raise ValueError(
                "state_dict['lm_head.weight']: expected the tied token embedding wte.weight "
                "(GPT-2 ties them), got a different matrix"
            )
    if hf_config is not None:
        check_against_hf_config(config, hf_config)
    return config, _build(arrays, config)


# ---------------------------------------------------------------- transformers' GPT-2


def hf_gpt2_config(config: GPT2Config) -> Any:
    """transformers' ``GPT2Config`` for a ``GPT2Config``: the same sizes, GELU (tanh), no dropout, no
    special tokens (imports transformers)."""
    import transformers

    if not isinstance(config, GPT2Config):
        raise TypeError(f"config: expected a kvtutor.GPT2Config, got {type(config).__name__}")
    if config.n_kv_heads != config.n_heads:
        raise ValueError(
            f"config: expected plain multi-head attention for GPT-2, got n_kv_heads={config.n_kv_heads}"
        )
    return transformers.GPT2Config(
        vocab_size=config.vocab_size, n_positions=config.max_seq_len, n_embd=config.d_model,
        n_layer=config.n_layers, n_head=config.n_heads, n_inner=config.d_ff,
        activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        layer_norm_epsilon=config.layer_norm_eps, bos_token_id=None, eos_token_id=None,
        pad_token_id=None, loss_type="ForCausalLM",
    )  # fmt: skip


def build_hf_gpt2(source: Any, device: str = "cpu", dtype: Any = None) -> Any:
    """transformers' ``GPT2LMHeadModel`` (in eval mode), the one place kvtutor builds it.

    ``source`` is either a ``GPT2Config``: the model gets transformers' own random initialisation
    (seed ``torch`` first for a reproducible draw); or a model with ``.config`` and
    ``.to_gpt2_state_dict()`` (``GPT2Model``, ``TorchGPT2Model``): the model holds its weights, built
    directly on ``device`` without a random initialisation (a 1.3B model is never materialised in
    host memory). ``dtype`` (a name or torch dtype) defaults to float32. Imports torch and transformers.
    """
    import torch
    import transformers

    from ..validate import torch_device, torch_dtype

    device, dt = torch_device(device), torch.float32 if dtype is None else torch_dtype(dtype)
    if isinstance(source, GPT2Config):
        hf = transformers.GPT2LMHeadModel(hf_gpt2_config(source))
        return hf.to(device=device, dtype=dt).eval()
    if not hasattr(source, "to_gpt2_state_dict"):
        kind = type(source).__name__
        raise TypeError(f"source: expected a GPT2Config or a model with to_gpt2_state_dict(), got {kind}")
    hf_cfg = hf_gpt2_config(source.config)
    try:  # skip the random init: every weight is overwritten below
        from transformers.initialization import no_init_weights
    except ImportError:
        no_init_weights = getattr(transformers.modeling_utils, "no_init_weights", contextlib.nullcontext)
    with warnings.catch_warnings(), no_init_weights(), torch.device(device):
        warnings.simplefilter("ignore")
        hf = transformers.GPT2LMHeadModel(hf_cfg).to(dt)
    sd = {k: torch.as_tensor(v) for k, v in source.to_gpt2_state_dict().items()}
    missing, unexpected = hf.load_state_dict(sd, strict=False)
    if unexpected or any(not k.endswith((".attn.bias", ".attn.masked_bias")) for k in missing):
        raise RuntimeError(f"weights do not fit GPT2LMHeadModel: missing {missing}, unexpected {unexpected}")
    hf.tie_weights()
    return hf.to(device=device, dtype=dt).eval()
