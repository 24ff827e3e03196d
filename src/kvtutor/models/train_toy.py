"""Reproducible training of the toy model's weights: ``python -m kvtutor.models.train_toy [OUT.npz]``.

Trains ``transformers``' GPT-2 (the reference implementation, built by ``gpt2_weights.build_hf_gpt2``)
at TOY_CONFIG sizes on the toy corpus, full batch, seeded, on the CPU, in about 15 seconds, then
stores the weights as npz.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .config import TOY_CONFIG
from .gpt2 import GPT2Model
from .gpt2_weights import build_hf_gpt2
from .toy import TOY_CORPUS, load_toy_tokenizer, toy_weights_path


def train_toy(steps: int = 3000, seed: int = 0, out: Path | None = None) -> GPT2Model:
    """Train the toy model on TOY_CORPUS with transformers' GPT-2 and save the weights (npz)."""
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
    arrays = {k.removeprefix("transformer."): v for k, v in result.to_gpt2_state_dict().items()}
    arrays.pop("lm_head.weight")
    meta = json.dumps({"n_heads": cfg.n_heads, "steps": steps, "seed": seed, "loss": loss.item()})
    np.savez_compressed(out or toy_weights_path(), meta=np.array(meta), **arrays)
    return result


def main() -> None:
    import sys

    model = train_toy(out=Path(sys.argv[1]) if len(sys.argv) > 1 else None)
    tok = load_toy_tokenizer()
    for line in TOY_CORPUS:
        words = line.split()
        prompt = " ".join(words[:3])
        new = model.generate(tok.encode(prompt), len(words) - 3)
        print(f"{prompt!r} -> {tok.decode(new)!r}")


if __name__ == "__main__":
    main()
