"""The toy model of the walkthrough: its vocabulary, corpus, stored weights and training script.

The weights in ``data/toy_weights.npz`` were produced by ``python -m kvtutor.models.train_toy`` (needs
torch and transformers); the script is seeded, so rerunning it reproduces them.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import numpy as np

from .config import TOY_CONFIG
from .gpt2 import GPT2Model
from .tokenizer import ToyTokenizer

TOY_PROMPT = "The cat sat"

TOY_CORPUS = [
    "The cat sat on the mat .",
    "The dog sat on the rug .",
    "The cat ate the fish .",
    "The dog ate the bone .",
    "The bird sat in the tree .",
    "The bird ate the seed .",
    "A cat slept in the box .",
    "A dog slept on the bed .",
    "The big dog lay under the tree .",
    "The red bird sat on the box .",
    "The sun was warm .",
    "The cat was happy and the dog was happy .",
    "It was a big box .",
]

_SPECIALS = ["<unk>"]


def toy_vocab() -> list[str]:
    """The 32 tokens: specials, then the corpus words in order of first appearance, then fillers."""
    words: list[str] = list(_SPECIALS)
    for line in TOY_CORPUS:
        for w in line.split():
            if w not in words:
                words.append(w)
    fillers = ["then", "mouse", "hat", "ran", "to", "red", "cold", "small"]
    words += [w for w in fillers if w not in words][: TOY_CONFIG.vocab_size - len(words)]
    if len(words) != TOY_CONFIG.vocab_size:
        raise AssertionError(f"toy vocabulary has {len(words)} words, config says {TOY_CONFIG.vocab_size}")
    return words


def toy_weights_path() -> Path:
    return Path(str(resources.files("kvtutor") / "data" / "toy_weights.npz"))


def load_toy_tokenizer() -> ToyTokenizer:
    """The word-level tokenizer of the toy model: "The cat sat" is three tokens."""
    return ToyTokenizer(toy_vocab())


def load_toy_model() -> GPT2Model:
    """The trained toy model (TOY_CONFIG sizes) from the weights shipped with
    the package.

    The book shows this in "Meet the toy model".
    """
    with np.load(toy_weights_path(), allow_pickle=False) as data:
        state_dict = {k: data[k] for k in data.files if k != "meta"}
        meta = json.loads(str(data["meta"]))
    return GPT2Model.from_gpt2_state_dict(state_dict, n_heads=meta["n_heads"])
