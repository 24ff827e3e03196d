"""Speculative decoding: greedy gives the target's own tokens, sampling keeps the target's
distribution, rejected guesses are rolled back out of the cache, and bad input is refused."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import assert_same_state, cache_state
from hypothesis import given, settings
from hypothesis import strategies as st

import kvtutor
from kvtutor.models.toy import TOY_CORPUS
from kvtutor.serving.speculative import (
    CoinDraft,
    ModelDraft,
    PromptLookupDraft,
    SpeculativeResult,
    expected_speedup,
    expected_tokens_per_step,
    layer_cut_draft,
    speculative_generate,
    speculative_loop,
    speculative_run,
    token_probs,
    verify_draft,
)


def chi_square_critical(df: int, z: float = 4.265) -> float:
    """Wilson-Hilferty upper quantile of chi-square(df); z = 4.265 is the 1e-5 tail of a normal."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def chi_square(counts: np.ndarray, probs: np.ndarray) -> tuple[float, int]:
    """Pearson's statistic and degrees of freedom, cells with expected count < 5 pooled into one."""
    n = counts.sum()
    expected = probs * n
    big = expected >= 5
    obs = list(counts[big]) + [counts[~big].sum()]
    exp = list(expected[big]) + [expected[~big].sum()]
    obs, exp = np.array(obs, dtype=float), np.array(exp, dtype=float)
    keep = exp > 0
    assert obs[~keep].sum() == 0, "a token the target never produces was sampled"
    stat = float(((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum())
    return stat, int(keep.sum()) - 1


def random_model(vocab=8, d_model=8, n_layers=2, max_seq_len=16, seed=0, scale=1.0):
    cfg = kvtutor.GPT2Config(
        vocab_size=vocab, d_model=d_model, n_heads=2, n_layers=n_layers, max_seq_len=max_seq_len
    )
    model = kvtutor.GPT2Model.random(cfg, seed=seed)
    if scale != 1.0:  # sharper, more varied distributions than the GPT-2 initialisation gives
        for arr in model.weights.arrays():
            if arr.ndim == 2:
                arr *= scale
    return model


# ---------------------------------------------------------------- greedy: exactly the target's tokens


def toy_prompts():
    tok = kvtutor.load_toy_tokenizer()
    return [tok.encode(" ".join(line.split()[:n])) for line in TOY_CORPUS for n in (1, 3)]


@pytest.mark.parametrize("k", [0, 1, 2, 4, 7])
@pytest.mark.parametrize("draft_kind", ["layer_cut", "prompt_lookup"])
def test_greedy_speculative_equals_target_greedy_on_the_toy_model(toy_model, k, draft_kind):
    draft = layer_cut_draft(toy_model, 1) if draft_kind == "layer_cut" else PromptLookupDraft()
    judged = 0
    for prompt in toy_prompts():
        n_new = toy_model.config.max_seq_len - len(prompt)
        result = speculative_run(toy_model, draft, prompt, n_new, k=k)
        assert result.tokens == toy_model.generate(prompt, n_new)
        judged += sum(result.proposed)
    if k > 0:
        assert judged > 0  # the drafts really proposed something


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n_layers=st.integers(1, 3),
    prompt_len=st.integers(1, 6),
    n_new=st.integers(0, 12),
    k=st.integers(0, 5),
    draft_kind=st.sampled_from(["layer_cut", "other_model", "prompt_lookup"]),
    kind=st.sampled_from(["preallocated", "concat"]),
    scale=st.sampled_from([1.0, 30.0]),
)
def test_greedy_speculative_equals_target_greedy_random_models(
    seed, n_layers, prompt_len, n_new, k, draft_kind, kind, scale
):
    target = random_model(vocab=16, n_layers=n_layers, max_seq_len=20, seed=seed, scale=scale)
    if draft_kind == "layer_cut":
        draft = layer_cut_draft(target, max(1, n_layers - 1))
    elif draft_kind == "other_model":
        draft = random_model(vocab=16, n_layers=1, max_seq_len=20, seed=seed + 1, scale=scale)
    else:
        draft = PromptLookupDraft(max_ngram=2)
    prompt = np.random.default_rng(seed).integers(0, 16, prompt_len).tolist()
    cache = target.new_cache(kind=kind)
    result = speculative_run(target, draft, prompt, n_new, k=k, cache=cache)
    assert result.tokens == target.generate(prompt, n_new)
    assert len(result.tokens) == n_new
    assert sum(result.accepted) + result.rounds == n_new  # each round: kept guesses + one of its own


def test_speculative_generate_returns_the_tokens_of_speculative_run(toy_model):
    prompt = [1, 2, 3]
    draft = layer_cut_draft(toy_model, 1)
    assert (
        speculative_generate(toy_model, draft, prompt, 10)
        == speculative_run(toy_model, draft, prompt, 10).tokens
    )


def test_k_zero_is_plain_decoding(toy_model):
    result = speculative_run(toy_model, layer_cut_draft(toy_model, 1), [1, 2, 3], 8, k=0)
    assert result.rounds == 8 and result.draft_calls == 0 and result.proposed == [0] * 8


# ---------------------------------------------------------------- the cache after rejections


@pytest.mark.parametrize("kind", ["preallocated", "concat"])
@pytest.mark.parametrize("draft_kind", ["layer_cut", "prompt_lookup"])
def test_target_cache_after_speculation_equals_plain_decoding(toy_model, kind, draft_kind):
    draft = layer_cut_draft(toy_model, 1) if draft_kind == "layer_cut" else PromptLookupDraft(max_ngram=1)
    rejected = 0
    for prompt in toy_prompts()[:12]:
        n_new = toy_model.config.max_seq_len - len(prompt)
        spec_cache, plain_cache = toy_model.new_cache(kind=kind), toy_model.new_cache(kind=kind)
        result = speculative_run(toy_model, draft, prompt, n_new, k=4, cache=spec_cache)
        plain = toy_model.generate(prompt, n_new, cache=plain_cache)
        assert result.tokens == plain
        # plain decoding has fed the prompt and every new token but the last one
        assert len(spec_cache) == len(plain_cache) == len(prompt) + n_new - 1
        for layer in range(toy_model.config.n_layers):
            np.testing.assert_allclose(spec_cache.keys(layer), plain_cache.keys(layer), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(
                spec_cache.values(layer), plain_cache.values(layer), rtol=1e-5, atol=1e-6
            )
        rejected += sum(p - a for p, a in zip(result.proposed, result.accepted, strict=True))
    assert rejected > 0  # rollbacks really happened


def test_draft_cache_is_rolled_back_to_the_kept_tokens(toy_model):
    draft = ModelDraft(layer_cut_draft(toy_model, 1))
    prompt = [1, 2, 3]
    result = speculative_run(toy_model, draft, prompt, 12, k=3)
    seq = prompt + result.tokens
    # the draft's cache holds a prefix of what was kept, never a rejected guess
    n = len(draft.cache)
    assert n <= len(seq) - 1
    fresh = draft.model.new_cache()
    draft.model.forward(seq[:n], fresh)
    for layer in range(draft.model.config.n_layers):
        np.testing.assert_allclose(draft.cache.keys(layer), fresh.keys(layer), rtol=1e-5, atol=1e-6)


def test_verification_pass_equals_one_decode_step_per_row(toy_model):
    """k + 1 query rows at an offset, with the offset causal mask, give the logits of k + 1 steps."""
    seq = [1, 2, 3, 4, 5, 6, 7]
    block_cache, step_cache = toy_model.new_cache(), toy_model.new_cache()
    toy_model.prefill(seq[:3], block_cache)
    toy_model.prefill(seq[:3], step_cache)
    block_TV = toy_model.forward(seq[3:], block_cache)
    steps_TV = np.stack([toy_model.decode_step(t, step_cache) for t in seq[3:]])
    np.testing.assert_allclose(block_TV, steps_TV, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- sampling keeps the target's distribution


def test_token_probs():
    logits = np.array([[1.0, 3.0, 2.0], [0.0, 0.0, 5.0]])
    np.testing.assert_array_equal(token_probs(logits, 0.0), [[0, 1, 0], [0, 0, 1]])
    probs = token_probs(logits, 2.0)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0)
    np.testing.assert_allclose(probs[0], np.exp([0.5, 1.5, 1.0]) / np.exp([0.5, 1.5, 1.0]).sum())


def _verify_samples(p_TV, q_KV, n, seed, deterministic_guess=None, rule=verify_draft):
    """First emitted token of n rounds: guesses drawn from q (or a fixed guess), then verified."""
    rng = np.random.default_rng(seed)
    counts = np.zeros(p_TV.shape[1], dtype=int)
    kept = 0
    for _ in range(n):
        if deterministic_guess is None:
            guesses = [int(rng.choice(len(q), p=q)) for q in q_KV]
            n_kept, nxt = rule(p_TV, q_KV, guesses, rng)
        else:
            guesses = list(deterministic_guess)
            n_kept, nxt = rule(p_TV, None, guesses, rng)
        first = guesses[0] if n_kept > 0 else nxt
        counts[first] += 1
        kept += n_kept > 0
    return counts, kept / n


def _dirichlet(rng, n_rows, vocab):
    return rng.dirichlet(np.full(vocab, 0.7), size=n_rows)


def test_verify_draft_first_token_follows_the_target():
    rng = np.random.default_rng(0)
    p_TV, q_KV = _dirichlet(rng, 4, 8), _dirichlet(rng, 3, 8)
    counts, kept = _verify_samples(p_TV, q_KV, 40_000, seed=1)
    stat, df = chi_square(counts, p_TV[0])
    assert stat < chi_square_critical(df), (stat, df)
    assert 0.2 < kept < 0.95  # both branches (accept, resample from the residual) were exercised
    # the draft's own distribution is clearly rejected by the same test: the test has power
    stat_q, df_q = chi_square(counts, q_KV[0])
    assert stat_q > chi_square_critical(df_q)


def test_verify_draft_with_a_deterministic_guess_follows_the_target():
    rng = np.random.default_rng(2)
    p_TV = _dirichlet(rng, 3, 8)
    guess = int(np.argsort(p_TV[0])[-2])  # a plausible but not the likeliest token
    counts, kept = _verify_samples(p_TV, None, 40_000, seed=3, deterministic_guess=[guess, 0])
    stat, df = chi_square(counts, p_TV[0])
    assert stat < chi_square_critical(df), (stat, df)
    assert abs(kept - p_TV[0][guess]) < 0.02


def test_a_wrong_rejection_rule_is_detected():
    """Resampling from p itself after a rejection (not from the residual) biases the output."""

    def wrong_rule(p_TV, q_KV, guesses, rng):
        for i, token in enumerate(guesses):
            if rng.random() < min(1.0, p_TV[i][token] / q_KV[i][token]):
                continue
            return i, int(rng.choice(p_TV.shape[1], p=p_TV[i]))
        return len(guesses), int(rng.choice(p_TV.shape[1], p=p_TV[len(guesses)]))

    rng = np.random.default_rng(0)
    p_TV, q_KV = _dirichlet(rng, 4, 8), _dirichlet(rng, 3, 8)
    counts, _ = _verify_samples(p_TV, q_KV, 40_000, seed=1, rule=wrong_rule)
    stat, df = chi_square(counts, p_TV[0])
    assert stat > chi_square_critical(df)


def _target_joint(target, prompt, temperature):
    """Exact probabilities of the first two new tokens: [V*V] = p(t1) p(t2 | t1)."""
    vocab = target.config.vocab_size
    p1 = token_probs(target.logits_without_cache(prompt)[-1:], temperature)[0]
    joint = np.zeros((vocab, vocab))
    for t1 in range(vocab):
        joint[t1] = p1[t1] * token_probs(target.logits_without_cache(prompt + [t1])[-1:], temperature)[0]
    return p1, joint.reshape(-1)


@pytest.mark.parametrize("draft_kind", ["other_model", "prompt_lookup"])
def test_sampled_speculative_tokens_follow_the_target_distribution(draft_kind):
    """End to end, V = 8: the first token, and the first two jointly, match the target's softmax."""
    target = random_model(vocab=8, n_layers=2, seed=3, scale=25.0)
    prompt = [1, 5, 2, 5, 1]
    temperature = 1.0
    if draft_kind == "other_model":
        draft = random_model(vocab=8, n_layers=1, seed=4, scale=25.0)
    else:
        draft = PromptLookupDraft(max_ngram=1)
    p1, joint = _target_joint(target, prompt, temperature)
    assert p1.max() < 0.9  # not degenerate
    n = 3000
    first, pairs = np.zeros(8, dtype=int), np.zeros(64, dtype=int)
    proposed = accepted = 0
    for i in range(n):
        result = speculative_run(target, draft, prompt, 3, k=2, temperature=temperature, seed=i)
        first[result.tokens[0]] += 1
        pairs[result.tokens[0] * 8 + result.tokens[1]] += 1
        proposed += sum(result.proposed)
        accepted += sum(result.accepted)
    for counts, probs in ((first, p1), (pairs, joint)):
        stat, df = chi_square(counts, probs)
        assert stat < chi_square_critical(df), (stat, df)
    assert 0 < accepted < proposed  # guesses were both kept and rejected


def test_sampling_is_reproducible_with_a_seed(toy_model):
    draft = layer_cut_draft(toy_model, 1)
    a = speculative_generate(toy_model, draft, [1, 2, 3], 10, temperature=0.8, seed=7)
    b = speculative_generate(toy_model, draft, [1, 2, 3], 10, temperature=0.8, seed=7)
    assert a == b


# ---------------------------------------------------------------- drafts, statistics, theory


def test_prompt_lookup_proposes_the_continuation_of_the_last_match():
    draft = PromptLookupDraft(max_ngram=3)
    rng = np.random.default_rng(0)
    seq = [5, 6, 7, 8, 9, 1, 5, 6, 7]
    assert draft.propose(seq, 3, 0.0, rng) == ([8, 9, 1], None)
    assert draft.propose(seq, 10, 0.0, rng) == ([8, 9, 1, 5, 6, 7], None)
    # the most recent match wins; shorter n-grams are tried when longer ones do not match
    assert draft.propose([1, 2, 3, 1, 4, 9, 1], 2, 0.0, rng) == ([4, 9], None)
    assert draft.propose([1, 2, 3], 2, 0.0, rng) == ([], None)
    assert draft.propose([4, 4], 3, 0.0, rng) == ([4], None)  # a match may run into the tail
    assert draft.propose(seq, 0, 0.0, rng) == ([], None)
    assert PromptLookupDraft(max_ngram=2, min_ngram=2).propose([1, 2, 3, 1], 2, 0.0, rng) == ([], None)


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"max_ngram": 0}, ValueError, "max_ngram: expected an int >= 1, got 0"),
        ({"min_ngram": 1.5}, ValueError, "min_ngram: expected an int >= 1, got 1.5"),
        ({"max_ngram": 2, "min_ngram": 3}, ValueError, "min_ngram: expected <= max_ngram=2, got 3"),
    ],
)
def test_prompt_lookup_rejects_bad_sizes(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        PromptLookupDraft(**kwargs)


def test_layer_cut_draft_keeps_the_first_layers(toy_model):
    cut = layer_cut_draft(toy_model, 1)
    assert cut.config.n_layers == 1 and cut.config.vocab_size == toy_model.config.vocab_size
    assert cut.weights.layers[0] is toy_model.weights.layers[0]  # shared, not copied
    assert cut.weights.wte_VD is toy_model.weights.wte_VD and cut.weights.lnf_g is toy_model.weights.lnf_g
    full = layer_cut_draft(toy_model, 2)
    np.testing.assert_array_equal(
        full.logits_without_cache([1, 2, 3]), toy_model.logits_without_cache([1, 2, 3])
    )
    assert toy_model.config.n_layers == 2  # the target is untouched


@pytest.mark.parametrize(
    ("n", "exc", "match"),
    [
        (0, ValueError, "n_layers: expected 1 <= n_layers <= 2, got 0"),
        (3, ValueError, "n_layers: expected 1 <= n_layers <= 2, got 3"),
        (1.0, TypeError, "n_layers: expected an int, got float"),
    ],
)
def test_layer_cut_draft_rejects_bad_sizes(toy_model, n, exc, match):
    with pytest.raises(exc, match=match):
        layer_cut_draft(toy_model, n)


def test_layer_cut_draft_rejects_a_non_model():
    with pytest.raises(TypeError, match="model: expected a kvtutor model, got dict"):
        layer_cut_draft({}, 1)


def test_result_statistics():
    result = SpeculativeResult(tokens=list(range(9)), k=3, proposed=[3, 3, 2], accepted=[3, 1, 0])
    assert result.rounds == 3
    assert result.tokens_per_step == 3.0
    # judged: 3 kept (no rejection) + 1 kept and 1 rejected + 1 rejected = 4 kept of 6 judged
    assert result.acceptance_rate == pytest.approx(4 / 6)
    assert result.kept_fraction == pytest.approx(4 / 8)
    tps, speed = result.predicted(c=0.5, a=0.5)
    e3, e2 = expected_tokens_per_step(0.5, 3), expected_tokens_per_step(0.5, 2)
    assert tps == pytest.approx((2 * e3 + e2) / 3)
    assert speed == pytest.approx((2 * e3 + e2) / (2 * 2.5 + 2))
    uniform = SpeculativeResult(list(range(6)), 2, [2, 2], [1, 1])
    assert uniform.predicted(0.25) == pytest.approx(
        (expected_tokens_per_step(0.5, 2), expected_speedup(0.5, 2, 0.25))
    )
    empty = SpeculativeResult([], 4)
    assert all(math.isnan(x) for x in empty.predicted(0.1))
    assert math.isnan(empty.acceptance_rate) and math.isnan(empty.tokens_per_step)


def test_theory():
    assert expected_tokens_per_step(0.0, 4) == 1.0
    assert expected_tokens_per_step(1.0, 4) == 5.0
    assert expected_tokens_per_step(0.5, 1) == pytest.approx(1.5)
    assert expected_tokens_per_step(0.8, 4) == pytest.approx(sum(0.8**i for i in range(5)))
    assert expected_speedup(0.8, 4, 0.0) == pytest.approx(expected_tokens_per_step(0.8, 4))
    assert expected_speedup(0.5, 2, 0.25) == pytest.approx(1.75 / 1.5)
    with pytest.raises(ValueError, match="a: expected an acceptance rate in \\[0, 1\\], got 1.5"):
        expected_tokens_per_step(1.5, 4)
    with pytest.raises(ValueError, match="k: expected an int >= 0, got -1"):
        expected_tokens_per_step(0.5, -1)
    with pytest.raises(ValueError, match="c: expected a cost ratio >= 0, got -0.1"):
        expected_speedup(0.5, 2, -0.1)


# ---------------------------------------------------------------- the predicted speed-up


@pytest.mark.parametrize(
    ("a", "k", "c", "v", "want"),
    [
        (0.8, 4, 0.1, 1.0, (1 - 0.8**5) / 0.2 / 1.4),  # Leviathan et al.'s formula
        (0.5, 2, 0.25, 1.0, 1.75 / 1.5),
        (0.5, 2, 0.25, 2.0, 1.75 / 2.5),  # a verification pass that costs two decode steps
        (0.0, 4, 0.1, 1.0, 1 / 1.4),  # every guess rejected: one token per round, k drafts paid
        (0.0, 0, 0.3, 1.0, 1.0),  # k = 0 is plain decoding
        (1.0, 4, 0.1, 1.0, 5 / 1.4),  # every guess kept: k + 1 tokens per round
        (1.0, 3, 0.0, 1.0, 4.0),  # a free, perfect draft: k + 1 times faster
    ],
)
def test_expected_speedup_known_values(a, k, c, v, want):
    assert expected_speedup(a, k, c, v) == pytest.approx(want)
    assert expected_speedup(a, k, c, v) == pytest.approx(expected_tokens_per_step(a, k) / (k * c + v))


def test_expected_speedup_loses_with_a_costly_or_wrong_draft():
    assert expected_speedup(0.0, 4, 0.05) < 1  # a draft that is never right only costs
    assert expected_speedup(0.9, 4, 0.9) < 1  # a right but dear draft
    assert expected_speedup(0.9, 4, 0.05) > 2


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((1.5, 4, 0.1), "a: expected an acceptance rate in \\[0, 1\\], got 1.5"),
        ((-0.1, 4, 0.1), "a: expected an acceptance rate in \\[0, 1\\], got -0.1"),
        ((float("nan"), 4, 0.1), "a: expected an acceptance rate in \\[0, 1\\], got nan"),
        ((0.5, -1, 0.1), "k: expected an int >= 0, got -1"),
        ((0.5, 2.5, 0.1), "k: expected an int >= 0, got 2.5"),
        ((0.5, True, 0.1), "k: expected an int >= 0, got True"),
        ((0.5, 4, -0.1), "c: expected a cost ratio >= 0, got -0.1"),
        ((0.5, 4, float("nan")), "c: expected a cost ratio >= 0, got nan"),
        ((0.5, 4, 0.1, 0.0), "v: expected a cost ratio > 0, got 0.0"),
        ((0.5, 4, 0.1, float("nan")), "v: expected a cost ratio > 0, got nan"),
    ],
)
def test_expected_speedup_rejects_bad_input_naming_it(args, match):
    with pytest.raises(ValueError, match=match):
        expected_speedup(*args)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (("high", 4, 0.1), "a: expected an acceptance rate in \\[0, 1\\], got str 'high'"),
        ((None, 4, 0.1), "a: expected an acceptance rate in \\[0, 1\\], got NoneType None"),
        ((0.5, 4, "0.1"), "c: expected a cost ratio >= 0, got str '0.1'"),
        ((0.5, 4, 0.1, [1.0]), "v: expected a cost ratio > 0, got list \\[1.0\\]"),
    ],
)
def test_expected_speedup_rejects_what_is_not_a_number_naming_it(args, match):
    with pytest.raises(TypeError, match=match):
        expected_speedup(*args)
    assert expected_speedup(np.float64(0.5), np.int64(2), np.float32(0.25)) == pytest.approx(1.75 / 1.5)


def test_predicted_takes_the_verification_cost():
    result = SpeculativeResult(list(range(6)), 2, [2, 2], [1, 1])
    assert result.predicted(0.25, v=2.0)[1] == pytest.approx(expected_speedup(0.5, 2, 0.25, 2.0))


# ---------------------------------------------------------------- the loop and a draft of a set rate


def test_the_loop_alone_gives_what_the_checked_entry_point_gives(toy_model):
    prompt = [1, 2, 3]
    want = speculative_run(toy_model, layer_cut_draft(toy_model, 1), prompt, 10, k=3)
    got = speculative_loop(
        toy_model, ModelDraft(layer_cut_draft(toy_model, 1)), prompt, 10, 3, 0.0,
        np.random.default_rng(0), toy_model.new_cache(),
    )  # fmt: skip
    assert got.tokens == want.tokens == toy_model.generate(prompt, 10)
    assert (got.proposed, got.accepted) == (want.proposed, want.accepted)


@pytest.mark.parametrize("a", [0.0, 0.4, 0.8, 1.0])
def test_coin_draft_is_accepted_at_its_rate_and_leaves_the_tokens_alone(toy_model, a):
    cut = layer_cut_draft(toy_model, 1)
    accepted = judged = 0
    for prompt in toy_prompts():
        n_new = 16 - len(prompt)
        reference = prompt + toy_model.generate(prompt, n_new)
        result = speculative_run(
            toy_model, CoinDraft(cut, reference, a, seed=len(prompt)), prompt, n_new, k=3
        )
        assert result.tokens == reference[len(prompt) :]
        assert result.draft_calls == sum(result.proposed)  # one draft decode step per guess
        accepted += sum(result.accepted)
        judged += sum(k + (k < p) for k, p in zip(result.accepted, result.proposed, strict=True))
    assert accepted / judged == pytest.approx(a, abs=0.08)


@pytest.mark.parametrize(
    ("a", "reference", "exc", "match"),
    [
        (1.5, [1, 2], ValueError, "a: expected an acceptance rate in \\[0, 1\\], got 1.5"),
        ("high", [1, 2], TypeError, "a: expected a number, got str 'high'"),
        (float("nan"), [1, 2], ValueError, "a: expected an acceptance rate in \\[0, 1\\], got nan"),
        (0.5, [1, 99], ValueError, "reference_ids: expected token ids in \\[0, 32\\), got 99"),
        (0.5, [], ValueError, "reference_ids: expected at least one token"),
    ],
)
def test_coin_draft_rejects_bad_input(toy_model, a, reference, exc, match):
    with pytest.raises(exc, match=match):
        CoinDraft(layer_cut_draft(toy_model, 1), reference, a)


# ---------------------------------------------------------------- the recorded run


def test_the_recorded_run_loads_with_what_the_chapter_reads():
    from kvtutor.bench import speculative as bench_spec

    run = bench_spec.load()
    for key in bench_spec.KEYS["top"]:
        assert key in run
    assert run["command"] == bench_spec.COMMAND and run["machine"] and run["hardware"]["cpu"]
    assert run["versions"]["torch"] and run["versions"]["numpy"]
    assert run["load_average"]["rounds"] and run["torch_threads"] == 1
    mb = run["memory_bound"]
    assert mb["config"]["n_params"] * 4 <= mb["weights_bytes"]  # float32, LM head tied
    assert mb["step_s"] > 0 and mb["c"] > 0 and mb["pass_v"]["1"] == 1.0
    for s in mb["settings"]:
        assert 0 <= s["acceptance"] <= 1 and s["measured"] > 0 and s["seconds"] > 0
        # the predictions are the formula, from the recorded costs
        assert s["formula"] == pytest.approx(expected_speedup(s["a_set"], s["k"], mb["c"]))
        v = mb["pass_v"][str(s["k"] + 1)]
        assert s["formula_v"] == pytest.approx(expected_speedup(s["a_set"], s["k"], mb["c"], v))
    toy = run["toy"]
    assert set(toy["drafts"]) == set(bench_spec.TOY_DRAFTS)
    for rows in toy["drafts"].values():
        assert [r["k"] for r in rows] == toy["ks"]
        assert all(r["measured"] > 0 and 0 <= r["acceptance"] <= 1 for r in rows)


def test_the_recorded_run_is_checked_for_missing_keys():
    from kvtutor.bench import speculative as bench_spec

    run = bench_spec.load()
    broken = {**run, "memory_bound": {k: v for k, v in run["memory_bound"].items() if k != "c"}}
    with pytest.raises(ValueError, match="memory_bound lacks \\['c'\\]"):
        bench_spec.check(broken)
    with pytest.raises(ValueError, match="x.json: expected a JSON object, got list"):
        bench_spec.check([], "x.json")
    with pytest.raises(FileNotFoundError, match="kvtutor.bench.speculative"):
        bench_spec.load("no-such-run.json")


def test_measured_tokens_per_step_follows_theory_on_a_geometric_draft(toy_model):
    """A draft whose guesses are right with probability a: measured E is near (1 - a^(k+1)) / (1 - a)."""

    class CoinDraft:
        def __init__(self, a, seed):
            self.a, self.rng = a, np.random.default_rng(seed)

        def propose(self, seq, k, temperature, rng):
            right = toy_model.generate(seq, k) if len(seq) + k <= 16 else [0] * k
            wrong = [(t + 1) % 32 for t in right]
            return [r if self.rng.random() < self.a else w for r, w in zip(right, wrong, strict=True)], None

        def rollback(self, length):
            pass

    draft = CoinDraft(0.7, seed=0)
    accepted = judged = rounds = tokens = 0
    for i in range(150):
        result = speculative_run(toy_model, draft, [1 + i % 20], 15, k=3)
        full = [r for r, p in zip(result.accepted, result.proposed, strict=True) if p == 3]
        accepted += sum(full)
        judged += sum(a + (a < 3) for a in full)
        rounds += len(full)
        tokens += sum(full) + len(full)
    assert accepted / judged == pytest.approx(0.7, abs=0.04)
    assert tokens / rounds == pytest.approx(expected_tokens_per_step(0.7, 3), abs=0.12)


# ---------------------------------------------------------------- errors leave the cache unchanged


class NotADraft:
    pass


class FixedDraft:
    """A custom draft that always proposes the same thing (possibly something bad)."""

    def __init__(self, proposal):
        self.proposal = proposal

    def propose(self, seq, k, temperature, rng):
        return self.proposal

    def rollback(self, length):
        pass


FIXED_PROPOSALS = {
    "bad_token": ([3, 40], None),
    "float_token": ([2.5], None),
    "not_a_list": (7, None),
    "no_tuple": [1, 2],
    "bad_probs": ([1, 2], np.ones((2, 5))),
}


BAD_CALLS = [
    ({"target": "model"}, TypeError, "target: expected a kvtutor model, got str"),
    ({"draft": NotADraft()}, TypeError, "draft: expected a kvtutor model or a Draft"),
    ({"draft": "other_vocab"}, ValueError, "draft: expected the target's vocab_size 32, got 16"),
    ({"prompt_ids": []}, ValueError, "prompt_ids: expected at least one token"),
    ({"prompt_ids": [1, 40]}, ValueError, "prompt_ids: expected token ids in \\[0, 32\\), got 40"),
    (
        {"max_new_tokens": 15},
        ValueError,
        "max_new_tokens: prompt of 3 \\+ 15 new tokens exceeds the cache.s capacity 16: it needs 17",
    ),
    ({"max_new_tokens": -1}, ValueError, "max_new_tokens: expected >= 0, got -1"),
    ({"max_new_tokens": 2.0}, TypeError, "max_new_tokens: expected an int, got float"),
    ({"k": -1}, ValueError, "k: expected an int >= 0 \\(0 = plain decoding\\), got -1"),
    ({"k": 2.5}, TypeError, "k: expected an int, got float"),
    ({"temperature": -0.5}, ValueError, "temperature: expected >= 0 and finite, got -0.5"),
    ({"temperature": float("nan")}, ValueError, "temperature: expected >= 0 and finite, got nan"),
    (
        {"draft": "bad_token"},
        ValueError,
        "draft: expected a token id in \\[0, 32\\), got 40 \\(proposed token 1\\)",
    ),
    (
        {"draft": "float_token"},
        TypeError,
        "draft: expected an int token id, got float 2.5 \\(proposed token 0\\)",
    ),
    ({"draft": "not_a_list"}, TypeError, "draft: propose\\(\\) must return a list of token ids, got int"),
    ({"draft": "no_tuple"}, TypeError, "draft: propose\\(\\) must return \\(tokens, probs\\), got list"),
    ({"draft": "bad_probs"}, ValueError, "draft: propose\\(\\) must return probabilities \\[k=2, V=32\\]"),
    ({"temperature": "hot"}, TypeError, "temperature: expected a float, got str"),
    (
        {"draft": "short"},
        ValueError,
        "max_new_tokens: prompt of 3 \\+ 10 new tokens exceeds the draft's max_seq_len 8",
    ),
    ({"cache": "filled"}, ValueError, "cache: expected an empty cache, got one holding 2"),
    ({"cache": "wrong_model"}, ValueError, "cache: expected \\(layers, kv heads, head dim\\)"),
]


@pytest.mark.parametrize(("change", "exc", "match"), BAD_CALLS)
def test_bad_speculative_calls_are_rejected_and_the_cache_unchanged(toy_model, change, exc, match):
    args = {
        "target": toy_model,
        "draft": layer_cut_draft(toy_model, 1),
        "prompt_ids": [1, 2, 3],
        "max_new_tokens": 10,
        "k": 4,
        "temperature": 0.0,
        "cache": toy_model.new_cache(),
    }
    args |= change
    if args["draft"] == "other_vocab":
        args["draft"] = random_model(vocab=16)
    if args["draft"] == "short":
        args["draft"] = random_model(vocab=32, max_seq_len=8)
    if isinstance(args["draft"], str) and args["draft"] in FIXED_PROPOSALS:
        args["draft"] = FixedDraft(FIXED_PROPOSALS[args["draft"]])
    if args["cache"] == "filled":
        args["cache"] = toy_model.new_cache()
        toy_model.prefill([1, 2], args["cache"])
    if args["cache"] == "wrong_model":
        args["cache"] = random_model(vocab=32, n_layers=3).new_cache()
    before = cache_state(args["cache"])
    with pytest.raises(exc, match=match):
        speculative_run(**args)
    assert_same_state(before, cache_state(args["cache"]))


# ---------------------------------------------------------------- the PyTorch model, batch 1


@pytest.fixture(scope="module")
def torch_toy(toy_model):
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is fastest
    yield kvtutor.TorchGPT2Model.from_numpy(toy_model, device="cpu", dtype=torch.float32)
    torch.set_num_threads(threads)


@pytest.mark.parametrize("draft_kind", ["torch_layer_cut", "numpy_layer_cut", "prompt_lookup"])
def test_greedy_speculative_with_a_torch_target(toy_model, torch_toy, draft_kind):
    import torch

    draft = {
        "torch_layer_cut": lambda: layer_cut_draft(torch_toy, 1),
        "numpy_layer_cut": lambda: layer_cut_draft(toy_model, 1),
        "prompt_lookup": PromptLookupDraft,
    }[draft_kind]()
    for prompt in toy_prompts()[::3]:
        n_new = 16 - len(prompt)
        want = torch_toy.generate(torch.tensor([prompt]), n_new)[0].tolist()
        assert speculative_generate(torch_toy, draft, prompt, n_new, k=3) == want


def test_torch_layer_cut_shares_the_tensors(torch_toy):
    cut = layer_cut_draft(torch_toy, 1)
    assert cut.config.n_layers == 1 and len(cut.layers) == 1 and torch_toy.config.n_layers == 2
    assert cut.layers[0] is torch_toy.layers[0] and cut.wte_VD is torch_toy.wte_VD
    assert len(torch_toy.layers) == 2


def test_torch_target_cache_after_speculation_holds_the_kept_tokens(torch_toy):
    prompt = [1, 2, 3]
    cache = torch_toy.new_cache(1)
    result = speculative_run(torch_toy, layer_cut_draft(torch_toy, 1), prompt, 12, k=4, cache=cache)
    assert sum(result.proposed) > sum(result.accepted)  # something was rolled back
    seq = prompt + result.tokens
    fresh = torch_toy.new_cache(1)
    torch_toy.forward([seq[:-1]], fresh)
    assert cache.host_lengths == fresh.host_lengths == [len(seq) - 1]
    for layer in range(2):
        np.testing.assert_allclose(cache.keys(layer).numpy(), fresh.keys(layer).numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(
            cache.values(layer).numpy(), fresh.values(layer).numpy(), rtol=1e-5, atol=1e-6
        )


def test_torch_target_rejects_a_batched_cache(torch_toy):
    cache = torch_toy.new_cache(2)
    with pytest.raises(ValueError, match="cache: expected a cache of batch size 1, got 2"):
        speculative_generate(torch_toy, PromptLookupDraft(), [1, 2], 3, cache=cache)
    assert cache.host_lengths == [0, 0]


# ---------------------------------------------------------------- issue 12: lengths that fit


@pytest.mark.parametrize("draft", ["layer_cut", "lookup"])
def test_a_prompt_of_m_minus_1_and_two_new_tokens_fits(toy_model, draft):
    """M positions suffice: the last new token is never fed back (this used to be refused)."""
    prompt = [int(t) % 32 for t in range(1, 16)]  # M - 1 = 15 tokens
    d = layer_cut_draft(toy_model, 1) if draft == "layer_cut" else PromptLookupDraft()
    assert speculative_generate(toy_model, d, prompt, 2, k=3) == toy_model.generate(prompt, 2)
    assert speculative_generate(toy_model, d, [1], 16, k=3) == toy_model.generate([1], 16)
    with pytest.raises(
        ValueError, match=r"^max_new_tokens: prompt of 15 \+ 3 new tokens exceeds max_seq_len 16"
    ):
        speculative_generate(toy_model, d, prompt, 3, k=3)
    assert speculative_generate(toy_model, d, list(range(16)), 0) == []
