"""Speculative decoding: make one request's query block taller.

Decode computes one query row per step. Speculative decoding (``speculative_generate``) lets a
cheap draft guess k tokens, and the target checks all of them in one forward pass over k + 1
query rows, which is a prefill-shaped pass at an offset, so it needs the offset causal mask again.
Rejected guesses are rolled back with ``cache.truncate``. ``speculative_loop`` is that round,
repeated; ``speculative_run`` checks the arguments and the draft's proposals around it. The drafts
here: a small model (``ModelDraft``), the target's own first layers (``layer_cut_draft``), prompt
lookup (``PromptLookupDraft``), which needs no model, and ``CoinDraft``, which pays a real draft's
cost but agrees with the target at a rate set in advance (to time the theory on random weights).
``expected_tokens_per_step`` and ``expected_speedup`` are the theory (Leviathan et al. 2023).

It works with ``GPT2Model`` and ``TorchGPT2Model`` alike, one sequence at a time: both make the
cache with ``new_cache()`` and roll it back with ``truncate``; the one step where they differ
(the torch model takes and returns a batch) is ``kvtutor.serving.backends.forward_one``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..models.config import GPT2Config
from ..models.gpt2 import NumpyDecoder, softmax
from ..validate import (
    check_int,
    check_logits,
    check_max_new_tokens,
    check_real,
    check_seed,
    check_temperature,
    check_token_id,
    check_token_ids,
    checked_by,
    greedy,
)
from .backends import check_empty_cache, check_model, forward_one, is_torch_model

__all__ = [
    "speculative_generate",
    "speculative_run",
    "speculative_loop",
    "CoinDraft",
    "SpeculativeResult",
    "token_probs",
    "verify_draft",
    "check_distributions",
    "check_verify",
    "SUM_TOLERANCE",
    "Draft",
    "ModelDraft",
    "PromptLookupDraft",
    "layer_cut_draft",
    "expected_tokens_per_step",
    "expected_speedup",
]


# ---------------------------------------------------------------- speculative decoding: the theory


def expected_tokens_per_step(a: float, k: int) -> float:
    """acceptance rate a, k drafts -> E = (1 - a^(k+1)) / (1 - a), tokens per target pass.

    Each draft is accepted with probability a until the first rejection; the target pass adds
    one token of its own (the correction, or a bonus token when all k are accepted).
    """
    _number("a", a, "an acceptance rate in [0, 1]")
    if not 0.0 <= a <= 1.0:
        raise ValueError(f"a: expected an acceptance rate in [0, 1], got {a}")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
        raise ValueError(f"k: expected an int >= 0, got {k!r}")
    if a == 1.0:
        return float(k + 1)
    return float((1.0 - a ** (k + 1)) / (1.0 - a))


def expected_speedup(a: float, k: int, c: float, v: float = 1.0) -> float:
    """a, k, c = draft step cost / target step cost, v = verify pass cost / target step cost
    -> E / (k c + v), the wall-clock speed-up over plain decoding.

    A round costs k draft steps and one target pass over k + 1 query rows, and yields E tokens on
    average. Leviathan et al. (2023) take v = 1: the k + 1 rows read the same weights as one, so
    where decode is memory-bound the pass costs one decode step. Where the arithmetic of the extra
    rows shows (a CPU), pass the measured v.
    """
    _number("c", c, "a cost ratio >= 0")
    _number("v", v, "a cost ratio > 0")
    if not c >= 0:
        raise ValueError(f"c: expected a cost ratio >= 0, got {c}")
    if not v > 0:
        raise ValueError(f"v: expected a cost ratio > 0, got {v}")
    return expected_tokens_per_step(a, k) / (k * c + v)


def _number(name: str, value: Any, want: str) -> None:
    """A TypeError naming ``name`` unless ``value`` is a number (a NumPy scalar too, not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name}: expected {want}, got {type(value).__name__} {value!r}")


# ---------------------------------------------------------------- speculative decoding: one round


def token_probs(logits_TV: np.ndarray, temperature: float) -> np.ndarray:
    """[T,V] -> [T,V] float64: softmax(logits / temperature); one-hot at the argmax if temperature = 0."""
    logits_TV = np.asarray(logits_TV, dtype=np.float64)
    if temperature == 0:
        probs_TV = np.zeros_like(logits_TV)
        probs_TV[np.arange(len(logits_TV)), [greedy(row_V) for row_V in logits_TV]] = 1.0
        return probs_TV
    check_logits(logits_TV)
    return softmax(logits_TV / temperature)


def _draw(probs_V: np.ndarray, rng: np.random.Generator) -> int:
    """[V] -> token id drawn from the distribution (the argmax, without using rng, if one-hot)."""
    top = int(np.argmax(probs_V))
    if probs_V[top] == 1.0:
        return top
    return int(rng.choice(len(probs_V), p=probs_V / probs_V.sum()))


def verify_draft(
    p_TV: np.ndarray,
    q_KV: np.ndarray | None,
    draft_tokens: Sequence[int],
    rng: np.random.Generator,
) -> tuple[int, int]:
    """[k+1,V] target probs, [k,V] draft probs (None: a deterministic draft),
    k drafts -> (kept, next).

    Draft token i is kept with probability min(1, p_i(d) / q_i(d)); at the
    first rejection the next token is drawn from the residual
    max(0, p_i - q_i), normalised, and the rest is thrown away. If all k are
    kept the next token comes from p_k, the target's distribution after them.
    The tokens that come out are distributed exactly as if the target had
    sampled them itself. With temperature 0, p and q are one-hot: a draft is
    kept iff it is the target's argmax.

    The book shows this in "Speculative decoding".
    """
    for i, token in enumerate(draft_tokens):
        p_V = p_TV[i]
        if q_KV is None:
            q_V = np.zeros_like(p_V)
            q_V[token] = 1.0
        else:
            q_V = q_KV[i]
        p_d, q_d = p_V[token], q_V[token]
        if p_d >= q_d or (p_d > 0 and rng.random() < p_d / q_d):
            continue  # accepted
        residual_V = np.maximum(p_V - q_V, 0.0)
        if not residual_V.sum() > 0:  # only through rounding: p and q equal
            residual_V = p_V
        return i, _draw(residual_V, rng)
    return len(draft_tokens), _draw(p_TV[len(draft_tokens)], rng)


#: how far a probability row's sum may be from 1 (float32 softmax rounding over a large vocabulary)
SUM_TOLERANCE = 1e-4


def check_distributions(probs_KV: np.ndarray, name: str, tokens: Sequence[int] = ()) -> None:
    """A ValueError naming ``name`` unless each row of ``probs_KV`` is a probability distribution
    (finite, non-negative, summing to 1 within ``SUM_TOLERANCE``: log-probabilities or logits are
    refused, never used as probabilities) and row i gives ``tokens[i]``, a guess drawn from it, a
    probability above 0."""
    total_K, low_K = probs_KV.sum(axis=-1), probs_KV.min(axis=-1)  # NaN or inf fail the sum's test
    good_K = (low_K >= 0) & (np.abs(total_K - 1) <= SUM_TOLERANCE)
    if not good_K.all():
        i = int(np.argmin(good_K))
        raise ValueError(
            f"{name}: expected probabilities (finite, >= 0, summing to 1) in row {i}, got a row that "
            f"sums to {total_K[i]:.6g} with a smallest entry {low_K[i]:.6g} (log-probabilities?)"
        )
    for i, token in enumerate(tokens):
        if not probs_KV[i, token] > 0:
            raise ValueError(f"{name}: expected draft token {i} ({token}) to have a probability > 0, got 0")


def check_verify(p_TV: Any, q_KV: Any, draft_tokens: Any, rng: Any) -> None:
    """``verify_draft``'s arguments, before any is used: ``p_TV`` k + 1 (or more) rows of
    probabilities over V tokens, ``draft_tokens`` k token ids, ``q_KV`` None or k (or more) rows
    of probabilities that give each guess a chance above 0, ``rng`` a NumPy Generator; else a
    TypeError/ValueError naming the argument."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected a NumPy Generator (np.random.default_rng), got {type(rng).__name__}")
    p = np.asarray(p_TV)
    if not np.issubdtype(p.dtype, np.floating):
        raise TypeError(f"p_TV: expected floating probabilities [k+1, V], got dtype {p.dtype}")
    if p.ndim != 2:
        raise ValueError(f"p_TV: expected probabilities [k+1, V], got shape {list(p.shape)}")
    if isinstance(draft_tokens, (str, bytes)) or not isinstance(draft_tokens, Sequence):
        raise TypeError(f"draft_tokens: expected a list of token ids, got {type(draft_tokens).__name__}")
    tokens = [check_token_id(t, p.shape[1], "draft_tokens") for t in draft_tokens]
    if len(p) < len(tokens) + 1:
        raise ValueError(
            f"p_TV: expected k + 1 = {len(tokens) + 1} rows for {len(tokens)} draft tokens, got {len(p)}"
        )
    check_distributions(p[: len(tokens) + 1], "p_TV")
    if q_KV is not None:
        q = np.asarray(q_KV)
        if q.ndim != 2 or q.shape[1] != p.shape[1] or len(q) < len(tokens):
            want = f"[k={len(tokens)}, V={p.shape[1]}]"
            raise ValueError(f"q_KV: expected probabilities {want} or None, got shape {list(q.shape)}")
        check_distributions(q[: len(tokens)], "q_KV", tokens)


# what the package offers as verify_draft: its arguments checked, then the rule the book shows
verify_draft = checked_by(check_verify)(verify_draft)


# ---------------------------------------------------------------- speculative decoding: drafts


@runtime_checkable
class Draft(Protocol):
    """What speculative decoding needs from a draft: guesses, and forgetting rejected ones."""

    def propose(
        self, seq: list[int], k: int, temperature: float, rng: np.random.Generator
    ) -> tuple[list[int], np.ndarray | None]:
        """context -> up to k guessed next tokens and their probabilities [k,V] (None: deterministic)."""
        ...

    def rollback(self, length: int) -> None:
        """Forget everything after the first ``length`` tokens of the context."""
        ...


class ModelDraft:
    """A small language model as the draft: k decode steps on its own cache, one token each.

    One draft serves run after run: ``speculative_run`` calls ``reset`` first, so ``calls`` counts
    the forward passes of the current run (or of the last one) only."""

    def __init__(self, model: Any) -> None:
        check_model(model, "model")
        self.model = model
        self.cache: Any = None
        self.calls = 0  # forward passes run since the last reset

    def reset(self) -> None:
        """Forget every earlier run: no cache (a new one is made on the next proposal), no calls."""
        self.cache, self.calls = None, 0

    def propose(
        self, seq: list[int], k: int, temperature: float, rng: np.random.Generator
    ) -> tuple[list[int], np.ndarray | None]:
        """context -> k tokens, one decode step of the draft each (``guess`` picks the token), and
        their probabilities [k,V] (None when the guesses are not drawn from the draft's own)."""
        if k == 0:
            return [], None
        if self.cache is None:
            self.cache = self.model.new_cache()
        tokens: list[int] = []
        q_rows = []
        new = seq[len(self.cache) :]  # the context the draft has not seen yet
        for i in range(k):
            logits_TV = forward_one(self.model, new, self.cache)
            self.calls += 1
            token, q_V = self.guess(logits_TV[-1:], len(seq) + i, temperature, rng)
            tokens.append(token)
            q_rows.append(q_V)
            new = tokens[-1:]
        # the last guess is not fed to the draft: if it is accepted, the next round feeds it
        return tokens, None if q_rows[0] is None else np.stack(q_rows)

    def guess(
        self, logits_1V: Any, position: int, temperature: float, rng: np.random.Generator
    ) -> tuple[int, np.ndarray | None]:
        """The token for ``position`` from the draft's logits: sampled (its argmax at temperature
        0), with the probabilities [V] it was drawn from."""
        q_V = token_probs(logits_1V, temperature)[0]
        return _draw(q_V, rng), q_V

    def rollback(self, length: int) -> None:
        if self.cache is not None and len(self.cache) > length:
            self.cache.truncate(length)


@dataclass
class PromptLookupDraft:
    """Prompt lookup: propose what followed the most recent earlier occurrence of the last n tokens.

    No model: it finds the context's final n-gram (n = max_ngram down to min_ngram) earlier in the
    context and copies up to k tokens that came after it. It pays off on text that repeats itself
    (code edits, summaries quoting their source, ...) and proposes nothing when there is no match.
    """

    max_ngram: int = 3
    min_ngram: int = 1

    def __post_init__(self) -> None:
        for name in ("max_ngram", "min_ngram"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
        if self.min_ngram > self.max_ngram:
            raise ValueError(f"min_ngram: expected <= max_ngram={self.max_ngram}, got {self.min_ngram}")

    def propose(
        self, seq: list[int], k: int, temperature: float, rng: np.random.Generator
    ) -> tuple[list[int], np.ndarray | None]:
        """context -> the up to k tokens that followed the last earlier match of its final n-gram."""
        if k == 0:
            return [], None
        for n in range(self.max_ngram, self.min_ngram - 1, -1):
            if len(seq) <= n:
                continue
            tail = seq[-n:]
            for start in range(len(seq) - n - 1, -1, -1):  # most recent match first
                if seq[start : start + n] == tail:
                    return list(seq[start + n : start + n + k]), None
        return [], None

    def rollback(self, length: int) -> None:
        pass  # nothing cached


def layer_cut_draft(model: Any, n_layers: int) -> Any:
    """model, n -> a draft made of the model's first n blocks, then its final norm and LM head
    (``first_layers``, on every kvtutor model).

    The weight arrays (NumPy) or tensors (torch) are shared with the target, nothing is copied.
    Early layers already predict many easy tokens; the cut model runs n of the L blocks.
    """
    check_model(model, "model")
    return model.first_layers(n_layers)


class CoinDraft(ModelDraft):
    """A draft that agrees with the target at a rate ``a`` set in advance, at a real model's cost.

    Each guess costs one decode step of ``model`` (e.g. ``layer_cut_draft(target, 1)``) on its own
    cache, as ``ModelDraft``'s do, but the model's logits are thrown away: the guess is the
    target's own next greedy token, read from ``reference_ids`` (the prompt and the target's
    greedy continuation, from a plain run beforehand), with probability ``a``, and a wrong token
    otherwise, by a coin seeded with ``seed``. So under greedy decoding every guess is kept with
    probability a, independently, which is what ``expected_tokens_per_step`` assumes: a stand-in
    for a trained draft, to test the cost side of the theory on a model with random weights.
    """

    def __init__(self, model: Any, reference_ids: Sequence[int], a: float, seed: int = 0) -> None:
        super().__init__(model)
        vocab_size = self.model.config.vocab_size
        self.reference = [int(t) for t in check_token_ids(reference_ids, vocab_size, "reference_ids")]
        try:
            self.a = check_real("a", a, 0.0, 1.0)
        except ValueError:
            raise ValueError(f"a: expected an acceptance rate in [0, 1], got {a!r}") from None
        self.seed = check_seed(seed)
        self.coin = np.random.default_rng(self.seed)

    def reset(self) -> None:
        """``ModelDraft.reset``, and the coin starts again from its seed: a reused draft guesses
        as a new one would."""
        super().reset()
        self.coin = np.random.default_rng(self.seed)

    def guess(
        self, logits_1V: Any, position: int, temperature: float, rng: np.random.Generator
    ) -> tuple[int, np.ndarray | None]:
        """The reference's token at ``position`` with probability a, else another; the draft's
        logits (its step is the cost) are not used."""
        right = self.reference[position] if position < len(self.reference) else 0
        wrong = (right + 1) % self.model.config.vocab_size
        return (right if self.coin.random() < self.a else wrong), None


# ---------------------------------------------------------------- speculative decoding: the loop


@dataclass
class SpeculativeResult:
    """What one speculative generation produced, round by round."""

    tokens: list[int]
    k: int
    proposed: list[int] = field(default_factory=list)  # per round: draft tokens proposed
    accepted: list[int] = field(default_factory=list)  # per round: draft tokens kept
    draft_calls: int = 0  # forward passes of the draft model (0 for prompt lookup)
    seconds: float = 0.0

    @property
    def rounds(self) -> int:
        """Target verification passes (one per round), not counting the prompt's prefill."""
        return len(self.proposed)

    @property
    def acceptance_rate(self) -> float:
        """Per-draft acceptance a: drafts kept / drafts judged (a judged draft is kept or is the
        round's first rejection; guesses after a rejection are never judged)."""
        judged = sum(acc + (acc < prop) for acc, prop in zip(self.accepted, self.proposed, strict=True))
        return sum(self.accepted) / judged if judged else float("nan")

    @property
    def kept_fraction(self) -> float:
        """Drafts kept / drafts proposed."""
        proposed = sum(self.proposed)
        return sum(self.accepted) / proposed if proposed else float("nan")

    @property
    def tokens_per_step(self) -> float:
        """New tokens per target pass (1 for plain decoding)."""
        return len(self.tokens) / self.rounds if self.rounds else float("nan")

    def predicted(self, c: float = 0.0, a: float | None = None, v: float = 1.0) -> tuple[float, float]:
        """c, a (default: the measured rate), v -> (tokens per target pass, speed-up) the theory
        predicts.

        The formulas applied round by round, to the number of guesses each round really made:
        sum E(a, k_r) / rounds and sum E(a, k_r) / sum (k_r c + v). With k guesses in every
        round they are E(a, k) and E(a, k) / (k c + v) (``expected_speedup``).
        """
        a = self.acceptance_rate if a is None else a
        if not self.rounds or math.isnan(a):
            return float("nan"), float("nan")
        tokens = sum(expected_tokens_per_step(a, k) for k in self.proposed)
        cost = sum(k * c + v for k in self.proposed)
        return tokens / self.rounds, tokens / cost


def _check_proposal(proposal: Any, k_round: int, vocab_size: int) -> tuple[list[int], np.ndarray | None]:
    """A draft's (tokens, probabilities) -> up to k_round int tokens and [k,V] float64 probs, or an
    error naming the draft (a bad token would otherwise surface as the target's ``ids_T``)."""
    if not isinstance(proposal, tuple) or len(proposal) != 2:
        raise TypeError(f"draft: propose() must return (tokens, probs), got {type(proposal).__name__}")
    guesses, q_KV = proposal
    if isinstance(guesses, (str, bytes)) or not isinstance(guesses, Sequence):
        raise TypeError(f"draft: propose() must return a list of token ids, got {type(guesses).__name__}")
    tokens = []
    for i, token in enumerate(list(guesses)[:k_round]):
        try:
            tokens.append(check_token_id(token, vocab_size, "draft"))
        except (TypeError, ValueError) as err:
            raise type(err)(f"{err} (proposed token {i})") from None
    if q_KV is None:
        return tokens, None
    q = np.asarray(q_KV, dtype=np.float64) if isinstance(q_KV, np.ndarray) else None
    if q is None or q.ndim != 2 or q.shape[1] != vocab_size or len(q) < len(tokens):
        shape = list(q_KV.shape) if hasattr(q_KV, "shape") else type(q_KV).__name__
        raise ValueError(
            f"draft: propose() must return probabilities [k={len(tokens)}, V={vocab_size}] or None, "
            f"got {shape}"
        )
    q = q[: len(tokens)]
    check_distributions(q, "draft", tokens)
    return tokens, q


def _as_draft(draft: Any, target_cfg: GPT2Config) -> Draft:
    if isinstance(draft, NumpyDecoder) or is_torch_model(draft):
        if draft.config.vocab_size != target_cfg.vocab_size:
            raise ValueError(
                f"draft: expected the target's vocab_size {target_cfg.vocab_size}, "
                f"got {draft.config.vocab_size}"
            )
        return ModelDraft(draft)
    if isinstance(draft, Draft):
        return draft
    raise TypeError(
        f"draft: expected a kvtutor model or a Draft (propose/rollback), got {type(draft).__name__}"
    )


def speculative_loop(
    target: Any,
    draft: Draft,
    prompt: list[int],
    max_new_tokens: int,
    k: int,
    temperature: float,
    rng: np.random.Generator,
    cache: Any,
) -> SpeculativeResult:
    """prompt [T] -> SpeculativeResult: draft k tokens, verify them in one
    target pass, keep the longest agreeing prefix, roll the cache back
    (between rounds it holds every token but the last one).

    The book shows this in "Speculative decoding".
    """
    result = SpeculativeResult([], k)
    seq = list(prompt)
    while len(result.tokens) < max_new_tokens:
        k_round = min(k, max_new_tokens - len(result.tokens) - 1)
        guesses, q_KV = draft.propose(seq, k_round, temperature, rng)
        if not result.tokens and len(prompt) > 1:  # prefill all but the last
            forward_one(target, prompt[:-1], cache)
        # one target pass over k + 1 query rows: the last token and the guesses
        logits_TV = forward_one(target, [seq[-1], *guesses], cache)
        p_TV = token_probs(logits_TV, temperature)
        kept, next_token = verify_draft(p_TV, q_KV, guesses, rng)
        new = [*guesses[:kept], next_token]
        seq, result.tokens = seq + new, result.tokens + new
        result.proposed.append(len(guesses))
        result.accepted.append(kept)
        # forget the K/V rows of the rejected guesses
        cache.truncate(len(seq) - 1)
        draft.rollback(len(seq) - 1)
    return result


class _CheckedDraft:
    """A draft whose proposals are checked (``_check_proposal``) before the target sees them."""

    def __init__(self, draft: Draft, vocab_size: int) -> None:
        self.draft, self.vocab_size = draft, vocab_size

    def propose(
        self, seq: list[int], k: int, temperature: float, rng: np.random.Generator
    ) -> tuple[list[int], np.ndarray | None]:
        return _check_proposal(self.draft.propose(seq, k, temperature, rng), k, self.vocab_size)

    def rollback(self, length: int) -> None:
        self.draft.rollback(length)


def speculative_run(
    target: Any,
    draft: Any,
    prompt_ids: Any,
    max_new_tokens: int,
    k: int = 4,
    temperature: float = 0.0,
    seed: int | None = None,
    cache: Any = None,
) -> SpeculativeResult:
    """prompt [T] -> SpeculativeResult: ``speculative_generate`` with what each round proposed and
    kept, its time and the draft's forward passes.

    Checks every argument, then runs ``speculative_loop``; a draft's proposals are checked before
    the target sees them, and a call that fails part-way leaves the cache empty, as it came.
    ``cache`` (optional, empty) is the target's, to inspect afterwards.
    """
    target_cfg = check_model(target, "target")
    drafter = _as_draft(draft, target_cfg)
    token_ids = check_token_ids(prompt_ids, target_cfg.vocab_size, "prompt_ids")
    prompt = [int(t) for t in token_ids]
    k = check_int("k", k)
    if k < 0:
        raise ValueError(f"k: expected an int >= 0 (0 = plain decoding), got {k}")
    temperature = check_temperature(temperature)
    if seed is not None:
        seed = check_seed(seed)
    cache_given = cache is not None
    if cache is None:
        cache = target.new_cache()
    else:
        check_empty_cache(target, cache)
    limit = "the cache's capacity" if cache_given else "max_seq_len"
    check_max_new_tokens(max_new_tokens, len(prompt), cache.capacity, limit)
    if isinstance(drafter, ModelDraft):
        draft_max_len = drafter.model.config.max_seq_len
        check_max_new_tokens(max_new_tokens, len(prompt), draft_max_len, "the draft's max_seq_len")
    if max_new_tokens == 0:
        return SpeculativeResult([], k)
    # a run starts the draft afresh: a reused draft forgets the earlier run's context (and a
    # ModelDraft its count and a CoinDraft its coin), so it guesses as a new one would
    if isinstance(drafter, ModelDraft):
        drafter.reset()
    else:
        drafter.rollback(0)
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    try:
        checked = _CheckedDraft(drafter, target_cfg.vocab_size)
        result = speculative_loop(target, checked, prompt, max_new_tokens, k, temperature, rng, cache)
    except (TypeError, ValueError):
        # a draft that fails part-way: the cache is left empty, as it came
        cache.truncate(0)
        raise
    result.seconds = time.perf_counter() - start
    result.draft_calls = drafter.calls if isinstance(drafter, ModelDraft) else 0
    return result


def speculative_generate(
    target: Any,
    draft: Any,
    prompt_ids: Any,
    max_new_tokens: int,
    k: int = 4,
    temperature: float = 0.0,
    seed: int | None = None,
    cache: Any = None,
) -> list[int]:
    """prompt [T] -> the new token ids, the draft guessing k at a time and the target verifying.

    Greedy (temperature 0): exactly the target's own greedy tokens. With temperature > 0 the
    tokens are distributed exactly as the target's samples. ``draft`` is a model (GPT2Model or
    TorchGPT2Model, e.g. ``layer_cut_draft(target, 1)``) or a ``Draft`` such as ``PromptLookupDraft()``.
    """
    return speculative_run(target, draft, prompt_ids, max_new_tokens, k, temperature, seed, cache).tokens
