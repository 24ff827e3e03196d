"""Reproducible training of the toy model's weights: ``python -m kvtutor.models.train_toy OUT.npz``.

Trains ``transformers``' GPT-2 (the reference implementation, built by ``gpt2_weights.build_hf_gpt2``)
at TOY_CONFIG sizes on the toy corpus, full batch, seeded, on the CPU, in about 15 seconds, then
stores the weights as npz in OUT.npz. The output path is required and checked before training
(``environment.check_output_path``); the weights the package ships
(``kvtutor/data/toy_weights.npz``) are replaced only with ``--overwrite-shipped``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..environment import check_output_path, write_atomically
from ..validate import check_int, check_seed
from .config import TOY_CONFIG
from .gpt2 import GPT2Model
from .gpt2_weights import build_hf_gpt2
from .toy import TOY_CORPUS, load_toy_tokenizer, toy_weights_path

__all__ = ["train_toy", "check_toy_output", "main"]


def _is_shipped(path: str | os.PathLike) -> bool:
    shipped = toy_weights_path()
    if os.path.exists(path) and shipped.exists():
        return os.path.samefile(path, shipped)
    return Path(path).resolve() == shipped.resolve()


def check_toy_output(out: Any, overwrite_shipped: bool = False, name: str = "out") -> str:
    """``out`` as a path that the weights may be written to, checked before any training: a
    writable ``.npz`` file (``check_output_path``), and not the shipped weights unless
    ``overwrite_shipped``; else a TypeError/ValueError naming ``name``."""
    if not isinstance(overwrite_shipped, bool):
        raise TypeError(f"overwrite_shipped: expected a bool, got {type(overwrite_shipped).__name__}")
    out = check_output_path(out, name)
    if not out.endswith(".npz"):
        raise ValueError(f"{name}: expected a file name ending in .npz, got {out!r}")
    if _is_shipped(out) and not overwrite_shipped:
        raise ValueError(
            f"{name}: expected a new file, got the shipped weights {out!r}; to replace them on "
            "purpose, pass --overwrite-shipped (overwrite_shipped=True)"
        )
    return out


def train_toy(
    steps: int = 3000, seed: int = 0, out: str | os.PathLike | None = None, overwrite_shipped: bool = False
) -> GPT2Model:
    """Train the toy model on TOY_CORPUS with transformers' GPT-2 -> the model; with ``out``, also
    save its weights there (npz, whole or not at all). Every argument is checked before training;
    ``out`` None writes nothing, and the shipped weights are refused unless ``overwrite_shipped``."""
    steps, seed = check_int("steps", steps, 1), check_seed(seed)
    if out is not None:
        out = check_toy_output(out, overwrite_shipped)
    import torch

    cfg = TOY_CONFIG
    tok = load_toy_tokenizer()
    torch.manual_seed(seed)
    model = build_hf_gpt2(cfg).train()  # transformers' own initialisation, seeded
    rows = [tok.encode(line) for line in TOY_CORPUS]
    width = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        labels[i, : len(r)] = torch.tensor(r)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-2, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    for _ in range(steps):
        loss = model(input_ids=ids, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    result = GPT2Model.from_gpt2_state_dict(sd, n_heads=cfg.n_heads)
    if out is not None:
        arrays = {k.removeprefix("transformer."): v for k, v in result.to_gpt2_state_dict().items()}
        arrays.pop("lm_head.weight")
        meta = json.dumps({"n_heads": cfg.n_heads, "steps": steps, "seed": seed, "loss": loss.item()})

        def save(tmp: str) -> None:
            with open(tmp, "xb") as f:  # a file object: savez would add .npz to a name
                np.savez_compressed(f, meta=np.array(meta), **arrays)

        write_atomically(out, save)
    return result


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m kvtutor.models.train_toy",
        description="Train the toy model's weights (seeded, about 15 s on a CPU) and write them as npz.",
        epilog=f"The package's own weights are {toy_weights_path()}; they are replaced only with "
        "--overwrite-shipped.",
    )
    p.add_argument("out", metavar="OUT.npz", help="the npz file to write (checked before training)")
    p.add_argument("--steps", type=int, default=3000, help="optimizer steps (default 3000)")
    p.add_argument("--seed", type=int, default=0, help="torch's seed (default 0)")
    p.add_argument("--overwrite-shipped", action="store_true", help="allow OUT to be the shipped weights")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m kvtutor.models.train_toy OUT.npz [--steps N] [--seed S] [--overwrite-shipped]``:
    0 after training, 0 for ``--help`` (nothing trained), 2 for bad arguments (nothing trained)."""
    parser = _parser()
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:  # argparse has printed its message; give the status back to the caller
        return int(exc.code or 0)
    try:
        check_int("--steps", args.steps, 1)
        check_seed(args.seed, "--seed")
        check_toy_output(args.out, args.overwrite_shipped, "OUT")
    except (TypeError, ValueError) as exc:
        parser.print_usage(sys.stderr)
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    model = train_toy(args.steps, args.seed, args.out, args.overwrite_shipped)
    tok = load_toy_tokenizer()
    for line in TOY_CORPUS:
        words = line.split()
        prompt = " ".join(words[:3])
        new = model.generate(tok.encode(prompt), len(words) - 3)
        print(f"{prompt!r} -> {tok.decode(new)!r}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
