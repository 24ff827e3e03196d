"""A word-level tokenizer for the toy model: one token per word or punctuation mark."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..validate import check_token_ids

_WORD = re.compile(r"\w+|[^\w\s]")


class ToyTokenizer:
    """Splits on whitespace and punctuation; case is kept, so "The" and "the" differ."""

    def __init__(self, vocab: Sequence[str]) -> None:
        vocab = list(vocab)
        if len(set(vocab)) != len(vocab):
            raise ValueError("vocab: expected distinct tokens, got duplicates")
        self.vocab = vocab
        self.ids = {tok: i for i, tok in enumerate(vocab)}

    def __len__(self) -> int:
        return len(self.vocab)

    def split(self, text: str) -> list[str]:
        if not isinstance(text, str):
            raise TypeError(f"text: expected a str, got {type(text).__name__}")
        return _WORD.findall(text)

    def encode(self, text: str) -> list[int]:
        words = self.split(text)
        unknown = [w for w in words if w not in self.ids]
        if unknown:
            raise ValueError(f"text: expected words from the toy vocabulary, got unknown word {unknown[0]!r}")
        return [self.ids[w] for w in words]

    def decode(self, ids: Sequence[int]) -> str:
        ids = check_token_ids(list(ids), len(self.vocab), "ids") if len(ids) else []
        text = " ".join(self.vocab[i] for i in ids)
        return re.sub(r" ([^\w\s])", r"\1", text)
