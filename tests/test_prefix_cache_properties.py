"""Prefix caching under random workloads: whatever the order of look-ups, prefills, decodes,
roll-backs, forks and frees over sequences that share prefixes, every cache hit gives a cold run's
logits and a named block never changes under its name. Then the checked whole-prompt prefill
(``PrefixCachedSequence.prefill``)."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from test_prefix_cache import assert_same_state, gpt2, llama, pool_state

from kvtutor.caches.prefix import PrefixCachingPool, block_hashes

MAX_LEN = 14  # positions per sequence (the models' max_seq_len)
VOCAB = 3  # few tokens, so that prompts and generated tokens meet the same blocks again
MAX_LIVE = 3  # live sequences at most, so that the steps keep meeting the same ones
TOKEN = st.integers(0, VOCAB - 1)
MODELS = {
    "gpt2": gpt2(max_seq_len=MAX_LEN, vocab=VOCAB, seed=5),
    "llama": llama(max_seq_len=MAX_LEN, vocab=VOCAB, seed=5),
}


@lru_cache(maxsize=8192)
def cold(name: str, tokens: tuple[int, ...]):
    """A cold run of ``tokens``: a fresh contiguous cache, no prefix caching. Logits [T, V], and
    keys and values [H, T, K] per layer."""
    model = MODELS[name]
    cache = model.new_cache()
    logits = model.prefill(list(tokens), cache)
    n_layers = model.config.n_layers
    keys = [np.array(cache.keys(i)) for i in range(n_layers)]
    return logits, keys, [np.array(cache.values(i)) for i in range(n_layers)]


class Live:
    """A sequence under test and what it should hold: ``tokens``, the ids of its written positions,
    and ``ids``, the token ids it should know (its prompt, then the tokens declared)."""

    def __init__(self, seq, tokens, ids):
        self.seq, self.tokens, self.ids = seq, tokens, ids


def prefilling(x: Live) -> bool:
    return len(x.ids) > len(x.tokens)


def decodable(x: Live) -> bool:
    return 0 < len(x.tokens) < MAX_LEN and not prefilling(x)


def written(x: Live) -> bool:
    return bool(x.tokens)


def some(want):
    """A precondition: a live sequence for which ``want`` holds."""
    return lambda self: any(want(x) for x in self.live)


class PrefixCacheMachine(RuleBasedStateMachine):
    """At most MAX_LIVE sequences over one small pool, their prompts drawn from a few prefixes."""

    model_name = "gpt2"

    @initialize(
        block_size=st.sampled_from([1, 2, 2, 3, 3, 4]),
        spare=st.integers(0, 5),
        prefixes=st.lists(st.lists(TOKEN, min_size=2, max_size=9), min_size=1, max_size=3),
    )
    def start(self, block_size, spare, prefixes):
        self.model = MODELS[self.model_name]
        self.p = block_size
        self.n_blocks = -(-MAX_LEN // block_size) + spare  # room for one sequence of MAX_LEN at least
        self.pool = PrefixCachingPool.for_model(self.model, self.n_blocks, block_size)
        self.prefixes = prefixes
        self.live: list[Live] = []
        self.prefix_of: dict[str, tuple[int, ...]] = {}  # every name seen -> the tokens it stands for

    def pick(self, i, want):
        found = [x for x in self.live if want(x)]
        return found[i % len(found)]

    def check_logits(self, x, logits, n_new):
        ref = cold(self.model_name, tuple(x.tokens))[0][-n_new:]
        np.testing.assert_allclose(np.reshape(logits, ref.shape), ref, rtol=0, atol=1e-5)

    def out_of_blocks(self, exc, before):
        assert str(exc).startswith("cache: out of blocks")
        assert_same_state(pool_state(self.pool), before)

    def roll_back(self, x, back, into_full):
        """``back`` positions, or into the middle of a full block (which others may hold under its
        name); never to 0, which would leave a sequence that can only be freed."""
        length = max(1, len(x.tokens) - back)
        n_full = len(x.tokens) // self.p
        if into_full and n_full and self.p > 1:
            length = (n_full - 1 - back % n_full) * self.p + 1 + back % (self.p - 1)
        x.seq.truncate(length)
        x.tokens, x.ids = x.tokens[:length], x.ids[:length]

    # ------------------------------------------------------------ rules
    @precondition(lambda self: len(self.live) < MAX_LIVE)
    @rule(which=st.integers(0, 2), suffix=st.lists(TOKEN, min_size=1, max_size=5))
    def look_up(self, which, suffix):
        """A new request: it starts on the cached blocks of its prompt (the prefill comes later)."""
        prompt = (self.prefixes[which % len(self.prefixes)] + suffix)[:MAX_LEN]
        expected = len(self.pool.allocator.match(block_hashes(prompt[:-1], self.p)))
        seq = self.pool.new_sequence(token_ids=prompt)
        assert len(seq) == seq.n_cached_tokens == expected * self.p
        self.live.append(Live(seq, prompt[: len(seq)], list(prompt)))

    @precondition(some(prefilling))
    @rule(i=st.integers(0, 9), chunk=st.integers(1, MAX_LEN), whole=st.booleans())
    def prefill(self, i, chunk, whole):
        """Prefill (a chunk of) the rest of a prompt: the rows after the cache hits are a cold run's."""
        x = self.pick(i, prefilling)
        start = len(x.tokens)
        end = min(len(x.ids), start + chunk)
        before = pool_state(self.pool)
        try:
            if whole:  # the checked API, given the prompt so far whole
                logits = x.seq.prefill(self.model, x.ids[:end])
            else:
                logits = self.model.prefill(x.ids[start:end], x.seq)
        except ValueError as exc:
            return self.out_of_blocks(exc, before)
        x.tokens = x.ids[:end]
        self.check_logits(x, logits, end - start)

    @precondition(some(decodable))
    @rule(i=st.integers(0, 9), tokens=st.lists(TOKEN, min_size=1, max_size=4))
    def decode(self, i, tokens):
        """A few generated tokens, one decode step each; an even one is declared first (so that its
        block is named once full), an odd one is not (its position has no id)."""
        x = self.pick(i, decodable)
        for token in tokens[: MAX_LEN - len(x.tokens)]:
            declare = token % 2 == 0 and len(x.ids) == len(x.tokens)
            before = pool_state(self.pool)
            if declare:
                x.seq.extend_tokens([token])
            try:
                logits = self.model.decode_step(token, x.seq)
            except ValueError as exc:
                if declare:
                    x.seq.truncate(len(x.seq))  # drop the declared id again
                return self.out_of_blocks(exc, before)
            x.tokens = x.tokens + [token]
            if declare:
                x.ids = x.ids + [token]
            self.check_logits(x, logits, 1)

    @precondition(some(written))
    @rule(i=st.integers(0, 9), back=st.integers(0, 6), into_full=st.booleans())
    def truncate(self, i, back, into_full):
        """Roll back (rejected draft tokens, a retry)."""
        self.roll_back(self.pick(i, written), back, into_full)

    @precondition(lambda self: 0 < len(self.live) < MAX_LIVE)
    @rule(i=st.integers(0, 9), back=st.integers(0, 6), into_full=st.booleans(), prune=st.booleans())
    def fork(self, i, back, into_full, prune):
        """A second sequence on the same blocks (beam search, parallel sampling), rolled back to
        branch off before the end when ``back`` > 0; ``prune`` frees the parent (a beam search
        keeps only the branches)."""
        x = self.pick(i, lambda x: True)
        child = Live(x.seq.fork(), list(x.tokens), list(x.ids))
        self.live.append(child)
        if back and child.tokens:
            self.roll_back(child, back, into_full)
        if prune:
            self.live.remove(x)
            x.seq.free()

    @precondition(some(lambda x: True))
    @rule(i=st.integers(0, 9), oldest=st.booleans())
    def free(self, i, oldest):
        """A request finishes: any one, or the one that started first (whose blocks others found)."""
        x = self.live[0] if oldest else self.pick(i, lambda x: True)
        self.live.remove(x)
        x.seq.free()

    # ------------------------------------------------------------ invariants
    @invariant()
    def pool_and_sequences_agree_with_cold_runs(self):
        """Checked after every step, so that a write into a named block fails where it happens."""
        pool, a = self.pool, self.pool.allocator
        # reference counts: the table entries that point at each block; free, cached, held: the pool
        counts = [0] * self.n_blocks
        for x in self.live:
            for block in x.seq.block_table:
                counts[block] += 1
        assert a.refcount == counts
        held = {b for b in range(self.n_blocks) if counts[b]}
        assert sorted([*a.free_list, *a.evictable, *held]) == list(range(self.n_blocks))
        assert all(b not in a.hash_of for b in a.free_list) and all(b in a.hash_of for b in a.evictable)
        assert {b: h for h, b in a.block_of.items()} == a.hash_of
        # every sequence holds a cold run's keys and values, and knows the ids it should
        for x in self.live:
            seq = x.seq
            assert len(seq) == len(x.tokens) and seq.token_ids == x.ids
            assert seq.block_hashes == block_hashes(x.tokens, self.p)[: len(seq.block_hashes)]
            for j, h in enumerate(seq.block_hashes):
                self.prefix_of[h] = tuple(x.tokens[: (j + 1) * self.p])
            if x.tokens:
                _, keys, values = cold(self.model_name, tuple(x.tokens))
                for layer in range(self.model.config.n_layers):
                    # float32 rows of size ~2 computed in other chunks: a few units in the last place
                    np.testing.assert_allclose(seq.keys(layer), keys[layer], rtol=0, atol=1e-5)
                    np.testing.assert_allclose(seq.values(layer), values[layer], rtol=0, atol=1e-5)
        # every named block, held or cached, holds the keys and values of the tokens its name stands for
        for h, block in a.block_of.items():
            _, keys, values = cold(self.model_name, self.prefix_of[h])
            for layer in range(self.model.config.n_layers):
                for buf, ref in ((pool.k_LNHPK, keys[layer]), (pool.v_LNHPK, values[layer])):
                    np.testing.assert_allclose(buf[layer, block], ref[:, -self.p :], rtol=0, atol=1e-5)


class LlamaPrefixCacheMachine(PrefixCacheMachine):
    model_name = "llama"


TestPrefixCacheGPT2 = PrefixCacheMachine.TestCase
TestPrefixCacheGPT2.settings = settings(max_examples=300, stateful_step_count=50, deadline=None)
TestPrefixCacheLlama = LlamaPrefixCacheMachine.TestCase
TestPrefixCacheLlama.settings = settings(max_examples=100, stateful_step_count=50, deadline=None)


# ---------------------------------------------------------------- the whole-prompt prefill


def test_prefill_takes_the_whole_prompt_and_skips_what_the_sequence_holds():
    model = gpt2()
    pool = PrefixCachingPool.for_model(model, n_blocks=16, block_size=4)
    system = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]
    first, second = system + [7], system + [8, 9, 9]
    a = pool.new_sequence(token_ids=first)
    np.testing.assert_array_equal(a.prefill(model, first), model.prefill(first, model.new_cache()))
    b = pool.new_sequence(token_ids=second)
    n = len(b)
    assert n == 8
    logits = b.prefill(model, second)  # the whole prompt: the 8 cached positions are skipped
    cold_logits = model.logits_without_cache(second)
    assert logits.shape == (len(second) - n, model.config.vocab_size) and len(b) == len(second)
    np.testing.assert_allclose(logits, cold_logits[n:], rtol=0, atol=1e-5)
    # in growing prefixes: a chunked prefill; ids past the declared ones are declared
    c = pool.new_sequence(token_ids=second[:9])
    longer = second + [0, 2, 1]
    rows = [c.prefill(model, longer[:11]), c.prefill(model, longer)]
    np.testing.assert_allclose(
        np.concatenate(rows), model.logits_without_cache(longer)[8:], rtol=0, atol=1e-5
    )
    assert c.token_ids == longer and len(c.block_hashes) == 4
    assert pool.allocator.block_of[c.block_hashes[3]] == c.block_table[3]  # named after its tokens


def test_prefill_refusals_change_nothing():
    model = gpt2(max_seq_len=16)
    pool = PrefixCachingPool.for_model(model, n_blocks=4, block_size=4)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6, 5]
    model.prefill(prompt, pool.new_sequence(token_ids=prompt))
    seq = pool.new_sequence(token_ids=prompt + [7])  # 8 cached, 2 to run
    assert len(seq) == 8
    before = pool_state(pool)
    for model_arg, ids, error, message in [
        (None, prompt, TypeError, r"^model: expected a kvtutor model, got NoneType$"),
        (model, "abc", TypeError, r"^prompt_ids: expected a sequence of int token ids, got str"),
        (model, prompt[:8], ValueError, r"^prompt_ids: expected more than the 8 ids this sequence holds"),
        (model, [3, 1, 0] + prompt[3:], ValueError,
         r"^prompt_ids: expected 4 at index 2 \(the id this sequence holds there\), got 0$"),
        (model, prompt[:8] + [0], ValueError,
         r"^prompt_ids: expected 5 at index 8 \(the id this sequence was given there\), got 0$"),
        (model, prompt + [7] * 8, ValueError, r"^prompt_ids: expected at most capacity=16 ids, got 17$"),
        (model, prompt + [7, 30], ValueError, r"^ids_T: expected token ids in \[0, 30\), got 30 at index 2"),
        (model, prompt + [7] * 7, ValueError, r"^cache: out of blocks: 8 new tokens need 2 free blocks"),
    ]:  # fmt: skip
        with pytest.raises(error, match=message):
            seq.prefill(model_arg, ids)
        assert_same_state(pool_state(pool), before)
    seq.prefill(model, prompt + [7])
    model.decode_step(2, seq)  # without extend_tokens: position 10 has no id
    before = pool_state(pool)
    with pytest.raises(
        ValueError, match=r"^prompt_ids: cannot be checked: positions 10 to 10 of this sequence"
    ):
        seq.prefill(model, prompt + [7, 2, 1])
    assert_same_state(pool_state(pool), before)
