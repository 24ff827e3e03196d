"""Automatic prefix caching on the paged cache: block hashes, cached == cold, LRU eviction, traces."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvtutor
from kvtutor.caches.paged import PagedKVPool
from kvtutor.caches.prefix import (
    ROOT_HASH,
    PrefixCachedSequence,
    PrefixCachingAllocator,
    PrefixCachingPool,
    block_hash,
    block_hashes,
)


def gpt2(max_seq_len=48, vocab=30, n_layers=2, seed=0):
    cfg = kvtutor.GPT2Config(
        vocab_size=vocab, d_model=16, n_heads=4, n_layers=n_layers, max_seq_len=max_seq_len, n_kv_heads=2
    )
    return kvtutor.GPT2Model.random(cfg, seed=seed)


def llama(max_seq_len=48, vocab=30, seed=0):
    cfg = kvtutor.LlamaConfig(
        vocab_size=vocab, d_model=16, n_heads=4, n_layers=2, max_seq_len=max_seq_len, d_ff=24,
        n_kv_heads=2, rope_theta=100.0,
    )  # fmt: skip
    return kvtutor.LlamaModel.random(cfg, seed=seed, std=0.2)


MODELS = {"gpt2": gpt2, "llama": llama}


def pool_state(pool):
    a = pool.allocator
    return (
        list(a.free_list), list(a.refcount), list(a.evictable), dict(a.block_of), dict(a.hash_of),
        a.evictions, pool.query_tokens, pool.hit_tokens, pool.k_LNHPK.copy(), pool.v_LNHPK.copy(),
        [(list(s.block_table), len(s), list(s.token_ids), list(s.block_hashes)) for s in pool.sequences],
    )  # fmt: skip


def assert_same_state(a, b):
    assert a[:8] == b[:8] and a[10] == b[10]
    np.testing.assert_array_equal(a[8], b[8])
    np.testing.assert_array_equal(a[9], b[9])


def assert_same_cache(seq, twin, n_layers):
    assert len(seq) == len(twin)
    for layer in range(n_layers):
        np.testing.assert_allclose(seq.keys(layer), twin.keys(layer), rtol=0, atol=1e-6)
        np.testing.assert_allclose(seq.values(layer), twin.values(layer), rtol=0, atol=1e-6)


# ---------------------------------------------------------------- block hashes


def test_block_hashes_name_a_block_by_its_tokens_and_everything_before_it():
    chain = block_hashes([1, 2, 3, 4, 5, 6, 7, 8, 9], 4)
    assert len(chain) == 2  # the ninth token is a partly filled block: no name
    assert chain[0] == block_hash(ROOT_HASH, [1, 2, 3, 4]) and chain[1] == block_hash(chain[0], [5, 6, 7, 8])
    assert block_hashes([1, 2, 3, 4, 5, 6, 7, 8], 4) == chain
    assert block_hashes(np.array([1, 2, 3, 4, 5, 6, 7, 8, 0]), 4) == chain
    # the same four tokens after a different first block are a different block
    other = block_hashes([0, 2, 3, 4, 5, 6, 7, 8], 4)
    assert other[0] != chain[0] and other[1] != chain[1]
    assert block_hashes([5, 6, 7, 8], 4)[0] != chain[1]  # the same tokens at position 0
    assert block_hashes([1, 2, 3], 4) == [] and block_hashes([], 4) == []
    assert len(chain[0]) == 16 and int(chain[0], 16) >= 0  # 16 hex digits, the same in every run
    assert block_hash("root", [1, 2]) == "2dbd8d930cfa4c59"


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        (("abc", 4), TypeError, r"^token_ids: expected a sequence of int token ids, got str"),
        ((5, 4), TypeError, r"^token_ids: expected a sequence of int token ids, got int"),
        (([1.0, 2.0], 4), TypeError, r"^token_ids: expected int token ids, got dtype float64"),
        (([1, -2], 4), ValueError, r"^token_ids: expected token ids >= 0, got -2 at index 1"),
        (([[1, 2]], 4), ValueError, r"^token_ids: expected a 1-D sequence of token ids, got shape \[1, 2\]"),
        (([1, 2], 0), ValueError, r"^block_size: expected an int >= 1, got 0"),
        (([1, 2], 2.0), TypeError, r"^block_size: expected an int"),
    ],
)
def test_block_hashes_errors(args, error, message):
    with pytest.raises(error, match=message):
        block_hashes(*args)


# ---------------------------------------------------------------- the allocator


def test_freed_blocks_with_a_name_stay_cached_and_are_evicted_least_recently_used_first():
    a = PrefixCachingAllocator(4)
    blocks = [a.allocate() for _ in range(4)]
    assert blocks == [0, 1, 2, 3] and a.n_free == 0
    assert a.register(0, "h0") and a.register(1, "h1") and a.register(2, "h2")
    assert not a.register(3, "h0")  # another block holds h0: block 3 stays unnamed
    assert a.register(0, "h0") and a.n_cached == 3  # its own name again: nothing changes
    for block in (2, 0, 3, 1):
        a.release(block)
    assert list(a.evictable) == [2, 0, 1] and a.free_list == [3] and a.n_free == 4 and a.n_used == 0
    assert a.n_cached == 3 and a.match(["h0", "h1", "h2", "h3"]) == [0, 1, 2]
    assert a.match(["h0", "hx", "h2"]) == [0]  # the run stops at the first miss
    a.take([0])  # a hit: held again, no longer evictable
    assert a.refcount[0] == 1 and list(a.evictable) == [2, 1] and a.n_free == 3
    assert a.allocate() == 3  # the free list before any cached block
    assert a.allocate() == 2 and a.evictions == 1  # then the least recently used
    assert "h2" not in a.block_of and 2 not in a.hash_of and a.refcount[2] == 1
    a.release(0)
    assert list(a.evictable) == [1, 0]  # block 0 is now the most recently used
    assert a.allocate() == 1 and a.allocate() == 0 and a.evictions == 3 and a.n_cached == 0
    with pytest.raises(ValueError, match=r"^allocate: expected a free block, got none of 4 free"):
        a.allocate()


def test_forget_and_consumption_counts():
    a = PrefixCachingAllocator(5)
    b0, b1 = a.allocate(), a.allocate()
    a.register(b0, "x")
    a.register(b1, "y")
    a.release(b1)
    # a sequence of 3 blocks whose first two are cached: 1 new block + the unheld hit b1
    assert a.blocks_consumed(["x", "y"], 3) == 2 and a.blocks_consumed([], 3) == 3
    a.forget(b0)
    assert a.match(["x"]) == [] and a.n_cached == 1
    a.forget(b0)  # no name: nothing to do
    a.release(b0)
    assert a.free_list[-1] == b0 and list(a.evictable) == [b1]


def test_allocator_errors_change_nothing():
    a = PrefixCachingAllocator(3)
    b = a.allocate()
    a.register(b, "x")
    before = (list(a.free_list), list(a.refcount), dict(a.block_of))
    with pytest.raises(ValueError, match=r"^blocks: expected cached blocks, got block 1, which has no hash"):
        a.take([b, 1])
    with pytest.raises(ValueError, match=r"^block: expected 0 <= block <= 2, got 7"):
        a.take([7])
    with pytest.raises(ValueError, match=r"^block: expected an allocated block, got free block 2"):
        a.register(2, "z")
    with pytest.raises(ValueError, match=r"^block: expected an allocated block, got free block 1"):
        a.release(1)
    # a named block never gets a second name: it would stand for two prefixes
    with pytest.raises(ValueError, match=r"^block: expected a block without a name, got block 0, named x"):
        a.register(b, "y")
    assert (list(a.free_list), list(a.refcount), dict(a.block_of)) == before
    assert a.hash_of == {b: "x"}


# ---------------------------------------------------------------- cached == cold


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("block_size", [1, 3, 4])
def test_a_request_served_from_cached_blocks_equals_a_cold_one(name, block_size):
    """Same logits for the positions it computes, same greedy tokens, same cache contents."""
    model = MODELS[name]()
    rng = np.random.default_rng(block_size)
    system = rng.integers(0, 30, 13).tolist()
    first, second = system + [1, 2, 3], system + [4, 5, 6, 7, 8]
    pool = PrefixCachingPool.for_model(model, n_blocks=40, block_size=block_size)
    a = pool.new_sequence(token_ids=first)
    assert len(a) == 0 and a.n_cached_tokens == 0
    model.prefill(first, a)
    a.free()  # finished: its named blocks stay cached
    assert pool.allocator.n_used == 0 and pool.allocator.n_cached == len(first) // block_size

    warm = pool.new_sequence(token_ids=second)
    n_cached = 13 // block_size * block_size
    assert len(warm) == warm.n_cached_tokens == n_cached > 0
    assert pool.hit_tokens == n_cached and pool.query_tokens == len(first) + len(second)
    cold = model.new_cache()
    logits_warm = model.prefill(second[n_cached:], warm)  # only the rest of the prompt
    logits_cold = model.prefill(second, cold)
    np.testing.assert_allclose(logits_warm, logits_cold[n_cached:], rtol=0, atol=1e-5)
    assert_same_cache(warm, cold, 2)
    token = int(np.argmax(logits_warm[-1]))
    tokens_warm, tokens_cold = [token], [token]
    for _ in range(10):
        tokens_warm.append(int(np.argmax(model.decode_step(tokens_warm[-1], warm))))
        tokens_cold.append(int(np.argmax(model.decode_step(tokens_cold[-1], cold))))
    assert tokens_warm == tokens_cold
    assert_same_cache(warm, cold, 2)


def test_a_fully_cached_prompt_still_runs_its_last_block():
    model = gpt2()
    pool = PrefixCachingPool.for_model(model, n_blocks=10, block_size=4)
    prompt = list(range(8))  # two full blocks
    a = pool.new_sequence(token_ids=prompt)
    model.prefill(prompt, a)
    assert pool.allocator.n_cached == 2
    b = pool.new_sequence(token_ids=prompt)
    assert len(b) == 4 and b.block_table == a.block_table[:1]  # the last token's block is recomputed
    logits = model.prefill(prompt[4:], b)
    np.testing.assert_allclose(logits[-1], model.logits_without_cache(prompt)[-1], rtol=0, atol=1e-5)
    assert b.block_table[1] != a.block_table[1] and pool.allocator.n_cached == 2  # a duplicate: no name
    c = pool.new_sequence(token_ids=prompt[:1])
    assert len(c) == 0  # one token: nothing to look up


def test_running_requests_share_blocks_and_the_partial_block_is_never_shared():
    model = gpt2()
    pool = PrefixCachingPool.for_model(model, n_blocks=12, block_size=4)
    system = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]  # two full blocks and two tokens
    a = pool.new_sequence(token_ids=system + [7])
    model.prefill(system + [7], a)
    b = pool.new_sequence(token_ids=system + [8, 9])
    assert b.block_table == a.block_table[:2] and pool.allocator.refcount[a.block_table[0]] == 2
    model.prefill((system + [8, 9])[8:], b)
    assert b.block_table[2] != a.block_table[2]  # the third block differs in its last tokens
    assert pool.usage().blocks_shared == 2


def test_generated_tokens_declared_with_extend_tokens_are_cached_for_the_next_turn():
    model = gpt2()
    pool = PrefixCachingPool.for_model(model, n_blocks=12, block_size=4)
    prompt = [2, 7, 1, 8, 2]
    seq = pool.new_sequence(token_ids=prompt)
    token = int(np.argmax(model.prefill(prompt, seq)[-1]))
    turn = list(prompt)
    for _ in range(6):
        seq.extend_tokens([token])  # the id of the position decode_step is about to write
        turn.append(token)
        token = int(np.argmax(model.decode_step(token, seq)))
    assert len(seq) == 11 and len(seq.block_hashes) == 2 and pool.allocator.n_cached == 2
    seq.free()
    follow_up = turn + [9, 9]  # the next turn's prompt starts with the whole first turn
    nxt = pool.new_sequence(token_ids=follow_up)
    assert len(nxt) == 8
    logits = model.prefill(follow_up[8:], nxt)
    np.testing.assert_allclose(logits, model.logits_without_cache(follow_up)[8:], rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match=r"^token_ids: 40 more ids after 13 exceed the capacity 48"):
        nxt.extend_tokens([0] * 40)
    assert len(nxt.token_ids) == 13


def test_fork_and_truncate_keep_cached_blocks_correct():
    model = gpt2()
    pool = PrefixCachingPool.for_model(model, n_blocks=16, block_size=4)
    prompt = [4, 8, 15, 16, 23, 12, 4, 8, 15]
    seq = pool.new_sequence(token_ids=prompt)
    model.prefill(prompt, seq)
    child = seq.fork()
    assert isinstance(child, PrefixCachedSequence) and child.token_ids == prompt
    assert child.block_hashes == seq.block_hashes and len(child.block_hashes) == 2
    twin = model.new_cache()
    model.prefill(prompt, twin)
    child_twin = copy.deepcopy(twin)
    model.decode_step(5, child)
    model.decode_step(5, child_twin)
    assert child.block_table[2] != seq.block_table[2]  # copy-on-write of the shared partial block
    assert_same_cache(seq, twin, 2)
    assert_same_cache(child, child_twin, 2)
    # roll the child back into its second block: shared with seq, so it keeps its name ...
    child.truncate(6)
    child_twin.truncate(6)
    named = seq.block_table[1]
    assert pool.allocator.hash_of[named] == seq.block_hashes[1] and child.block_hashes == seq.block_hashes[:1]
    model.decode_step(7, child)  # ... and the write copies it
    model.decode_step(7, child_twin)
    assert child.block_table[1] != named and seq.block_table[1] == named
    assert_same_cache(child, child_twin, 2)
    assert_same_cache(seq, twin, 2)
    # roll seq back into its own named block: it loses its name before anything is written
    seq.truncate(5)
    twin.truncate(5)
    assert named not in pool.allocator.hash_of and seq.token_ids == prompt[:5]
    model.decode_step(1, seq)
    model.decode_step(1, twin)
    assert seq.block_table[1] == named  # written in place: nobody else could find it
    assert_same_cache(seq, twin, 2)
    again = pool.new_sequence(token_ids=prompt)
    assert len(again) == 4  # only the first block still has its name
    model.prefill(prompt[4:], again)
    cold = model.new_cache()
    model.prefill(prompt, cold)
    assert_same_cache(again, cold, 2)


@pytest.mark.parametrize("share", ["cache hit", "fork"])
@pytest.mark.parametrize("write", ["decode", "prefill"])
def test_a_named_block_rewritten_by_its_last_holder_loses_its_name(share, write):
    """The issue's scenario: b shares a's two full blocks, rolls back into the second (a still
    holds it, so it keeps its name), a finishes, and b writes other tokens there, alone. The write
    drops the name first: a later request with a's prompt finds only the first block, and gets a
    cold run's logits (it used to find the second too, holding b's keys: logits off by 9e-3)."""
    model = gpt2()
    pool = PrefixCachingPool.for_model(model, n_blocks=12, block_size=4)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6, 5]  # two full blocks and one token
    a = pool.new_sequence(token_ids=prompt)
    model.prefill(prompt, a)
    if share == "fork":
        b = a.fork()
    else:
        b = pool.new_sequence(token_ids=prompt)
        assert b.block_table == a.block_table[:2]
        model.prefill(prompt[len(b) :], b)
    second, a_names = b.block_table[1], list(a.block_hashes)
    b.truncate(6)  # into the second block: a holds it too, so it keeps its name
    assert pool.allocator.hash_of[second] == a_names[1]
    a.free()
    assert pool.allocator.refcount[second] == 1  # b alone holds it now
    b.extend_tokens([7, 8])  # not prompt[6:8] == [2, 6]
    if write == "decode":
        model.decode_step(7, b)
        dropped = second not in pool.allocator.hash_of  # the name went before the write
        model.decode_step(8, b)
    else:
        model.prefill([7, 8], b)
        dropped = True
    again = pool.new_sequence(token_ids=prompt)
    n, hits = len(again), list(again.block_table)
    logits = model.prefill(prompt[n:], again)
    np.testing.assert_allclose(logits, model.logits_without_cache(prompt)[n:], rtol=0, atol=1e-5)
    assert n == 4 and hits == b.block_table[:1] and dropped
    assert b.block_table[1] == second  # written in place, and named after b's tokens once full
    assert pool.allocator.hash_of[second] == b.block_hashes[1] != a_names[1]
    twin = model.new_cache()
    model.prefill(prompt[:6] + [7, 8], twin)
    assert_same_cache(b, twin, 2)


def test_freeing_gives_the_last_block_back_first():
    model = gpt2()
    pool = PrefixCachingPool.for_model(model, n_blocks=6, block_size=2)
    seq = pool.new_sequence(token_ids=[1, 2, 3, 4, 5, 6, 7])
    model.prefill([1, 2, 3, 4, 5, 6, 7], seq)
    table = list(seq.block_table)
    seq.free()
    # the tail of a prefix is evicted before its head, which other prompts are likelier to share
    assert list(pool.allocator.evictable) == table[:3][::-1] and pool.allocator.free_list[-1] == table[3]
    other = pool.new_sequence(token_ids=[9] * 11)
    model.prefill([9] * 11, other)  # 6 blocks: takes every free block, evicting tail first
    assert pool.allocator.evictions == 3 and pool.allocator.n_cached == 5


# ---------------------------------------------------------------- errors


def test_new_sequence_errors_change_nothing():
    model = gpt2(max_seq_len=16)
    pool = PrefixCachingPool.for_model(model, n_blocks=8, block_size=2)
    seq = pool.new_sequence(token_ids=[1, 2, 3, 4, 5])
    model.prefill([1, 2, 3, 4, 5], seq)
    before = pool_state(pool)
    for kwargs, error, message in [
        ({"token_ids": "hello"}, TypeError, r"^token_ids: expected a sequence of int token ids, got str"),
        ({"token_ids": [1, 2, -3]}, ValueError, r"^token_ids: expected token ids >= 0, got -3 at index 2"),
        ({"token_ids": [True, False]}, TypeError, r"^token_ids: expected int token ids, got dtype bool"),
        ({"token_ids": [1] * 17}, ValueError, r"^token_ids: expected at most capacity=16 tokens, got 17"),
        ({"token_ids": [1] * 5, "capacity": 4}, ValueError, r"^token_ids: expected at most capacity=4"),
        ({"capacity": 17}, ValueError, r"^capacity: expected 1 <= capacity <= 16, got 17"),
        ({"capacity": "16"}, TypeError, r"^capacity: expected an int"),
    ]:
        with pytest.raises(error, match=message):
            pool.new_sequence(**kwargs)
        assert_same_state(pool_state(pool), before)
    with pytest.raises(TypeError, match=r"^token_ids: expected a sequence of int token ids, got int"):
        seq.extend_tokens(3)
    with pytest.raises(TypeError, match=r"^pool: expected a PrefixCachingPool, got PagedKVPool"):
        PrefixCachedSequence(PagedKVPool.for_model(model, 4, 2), 8)
    assert_same_state(pool_state(pool), before)


@pytest.mark.parametrize("pool_type", [PagedKVPool, PrefixCachingPool])
@pytest.mark.parametrize(
    ("model", "got"), [(None, "NoneType"), ("gpt2", "str"), (kvtutor.GPT2Config, "type")]
)
def test_for_model_without_a_model_is_a_type_error_naming_it(pool_type, model, got):
    small = gpt2()
    pool = PrefixCachingPool.for_model(small, n_blocks=4, block_size=2)
    small.prefill([1, 2, 3], pool.new_sequence(token_ids=[1, 2, 3]))
    before = pool_state(pool)
    with pytest.raises(
        TypeError,
        match=rf"^model: expected a kvtutor model \(.*\), got {got}$",
    ):
        pool_type.for_model(model, n_blocks=4, block_size=2)
    assert_same_state(pool_state(pool), before)
    assert isinstance(PagedKVPool.for_model(llama(), 4, 2), PagedKVPool)


def test_out_of_blocks_after_the_hits_leaves_the_pool_as_the_look_up_left_it():
    model = gpt2()
    pool = PrefixCachingPool.for_model(model, n_blocks=4, block_size=2)
    a = pool.new_sequence(token_ids=[1, 2, 3, 4, 5])
    model.prefill([1, 2, 3, 4, 5], a)  # 3 blocks, 2 named
    b = pool.new_sequence(token_ids=[1, 2, 3, 4, 9, 9, 9])  # hits 2 blocks, needs 2 more: 1 is free
    assert len(b) == 4
    before = pool_state(pool)
    with pytest.raises(ValueError, match=r"^cache: out of blocks: 3 new tokens need 2 free blocks"):
        model.prefill([9, 9, 9], b)
    assert_same_state(pool_state(pool), before)
    b.free()
    assert pool.allocator.refcount == [1, 1, 1, 0]


# ---------------------------------------------------------------- random workloads on a small pool


@st.composite
def workloads(draw):
    block_size = draw(st.integers(1, 4))
    n_blocks = draw(st.integers(-(-13 // block_size), -(-24 // block_size) + 2))  # 13: the longest prompt
    prefixes = [draw(st.lists(st.integers(0, 5), min_size=0, max_size=9)) for _ in range(3)]
    start = st.tuples(
        st.just("start"), st.integers(0, 2), st.lists(st.integers(0, 5), min_size=1, max_size=4)
    )
    op = st.one_of(
        start,
        start,  # twice as likely: the pool fills and cached blocks get evicted
        st.tuples(st.just("decode"), st.integers(0, 9), st.integers(0, 5), st.booleans()),
        st.tuples(st.just("free"), st.integers(0, 9)),
        st.tuples(st.just("free"), st.integers(0, 9)),
        st.tuples(st.just("fork"), st.integers(0, 9)),
        st.tuples(st.just("truncate"), st.integers(0, 9), st.integers(0, 24)),
    )
    return block_size, n_blocks, prefixes, draw(st.lists(op, min_size=8, max_size=30))


MODEL = gpt2(max_seq_len=24, vocab=6, n_layers=1, seed=3)


@settings(max_examples=60, deadline=None)
@given(workloads())
def test_random_shared_prefix_workloads_keep_every_invariant(workload):
    block_size, n_blocks, prefixes, ops = workload
    model = MODEL
    pool = PrefixCachingPool.for_model(model, n_blocks, block_size)
    a = pool.allocator
    live = []  # (sequence, its contiguous twin)
    prefix_of = {}  # every hash ever named -> the tokens it stands for
    for op in ops:
        prev_evictable, evictions = list(a.evictable), a.evictions
        hits, released = [], []
        if op[0] == "start":
            prompt = (prefixes[op[1]] + op[2])[:24]
            chain = block_hashes(prompt[:-1], block_size)
            expected = 0
            while expected < len(chain) and chain[expected] in a.block_of:
                expected += 1
            queries, hit_tokens = pool.query_tokens, pool.hit_tokens
            n_need = -(-len(prompt) // block_size)
            if a.blocks_consumed(chain, n_need) > a.n_free:
                continue  # a scheduler would not admit it
            seq = pool.new_sequence(token_ids=prompt)
            assert len(seq) == seq.n_cached_tokens == expected * block_size  # hit counts
            assert pool.query_tokens - queries == len(prompt) and pool.hit_tokens - hit_tokens == len(seq)
            hits = list(seq.block_table)
            twin = model.new_cache()
            cold = model.prefill(prompt, twin)
            warm = model.prefill(prompt[len(seq) :], seq)
            np.testing.assert_allclose(warm, cold[expected * block_size :], rtol=0, atol=1e-5)
            for j, h in enumerate(block_hashes(prompt, block_size)):
                prefix_of[h] = prompt[: (j + 1) * block_size]
            live.append((seq, twin))
        elif not live:
            continue
        elif op[0] == "decode":
            seq, twin = live[op[1] % len(live)]
            if not 0 < len(seq) < 24:
                continue
            if op[3] and len(seq.token_ids) < len(seq):  # positions written without ids came first
                with pytest.raises(ValueError, match=r"^token_ids: expected the ids of the positions from"):
                    seq.extend_tokens([op[2]])
            elif op[3]:  # declare the token: its block is named once full
                seq.extend_tokens([op[2]])
            before = pool_state(pool)
            try:
                logits = model.decode_step(op[2], seq)
            except ValueError as exc:
                assert str(exc).startswith("cache: out of blocks")
                assert_same_state(pool_state(pool), before)
                seq.truncate(len(seq))  # drop the declared id again
                continue
            np.testing.assert_allclose(logits, model.decode_step(op[2], twin), rtol=0, atol=1e-5)
            p = block_size
            if len(seq.token_ids) >= len(seq) and len(seq) % p == 0:
                prefix_of[seq.block_hashes[-1]] = seq.token_ids[: len(seq)]
        elif op[0] == "free":
            seq, _ = live.pop(op[1] % len(live))
            released = list(seq.block_table)
            seq.free()
        elif op[0] == "fork":
            seq, twin = live[op[1] % len(live)]
            live.append((seq.fork(), copy.deepcopy(twin)))
        else:
            seq, twin = live[op[1] % len(live)]
            length = min(op[2], len(seq))
            released = list(seq.block_table[seq.n_blocks_needed(length) :])
            seq.truncate(length)
            twin.truncate(length)

        # refcounts: exactly the number of table entries that point at each block
        counts = [0] * n_blocks
        for seq, _ in live:
            for block in seq.block_table:
                counts[block] += 1
        assert a.refcount == counts
        # no block is free or evictable while referenced; the three sets cover the pool
        held = {b for b in range(n_blocks) if counts[b]}
        assert held.isdisjoint(a.free_list) and held.isdisjoint(a.evictable)
        assert sorted(list(a.free_list) + list(a.evictable) + sorted(held)) == list(range(n_blocks))
        assert all(b not in a.hash_of for b in a.free_list) and all(b in a.hash_of for b in a.evictable)
        assert {b: h for h, b in a.block_of.items()} == a.hash_of
        # LRU: blocks evicted in this operation were the least recently used ones ...
        evicted = [b for b in prev_evictable if b not in a.evictable and b not in hits]
        assert evicted == [b for b in prev_evictable if b not in hits][: len(evicted)]
        assert a.evictions - evictions == len(evicted)
        # ... and blocks released in it joined the end, the last block of a sequence first
        joined = [b for b in reversed(released) if b in a.evictable and b not in prev_evictable]
        kept = [b for b in prev_evictable if b in a.evictable]
        assert list(a.evictable) == kept + joined
        # every sequence holds what a contiguous cache of the same tokens holds (copy-on-write
        # kept sharers unchanged), and its named blocks carry the names of its tokens
        for seq, twin in live:
            assert_same_cache(seq, twin, 1)
            assert seq.block_hashes == block_hashes(seq.token_ids, block_size)[: len(seq.block_hashes)]
    # every cached block holds the keys and values of the tokens its name stands for
    for h, block in a.block_of.items():
        tokens = prefix_of[h]
        twin = model.new_cache()
        model.prefill(tokens, twin)
        for buf, ref in ((pool.k_LNHPK, twin.keys(0)), (pool.v_LNHPK, twin.values(0))):
            np.testing.assert_allclose(buf[0, block], ref[:, -block_size:], rtol=0, atol=1e-6)


# ---------------------------------------------------------------- figures


def test_figures_of_prefix_caching_draw_what_the_pool_holds():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kvtutor.plots import prefix as prefix_plots

    model = gpt2()
    pool = PrefixCachingPool.for_model(model, n_blocks=6, block_size=4)
    a = pool.new_sequence(token_ids=[1, 2, 3, 4, 5, 6, 7, 8, 9])
    model.prefill(a.token_ids, a)
    b = pool.new_sequence(token_ids=[1, 2, 3, 4, 11])
    model.prefill([11], b)
    a.free()
    ax = prefix_plots.draw_prefix_sharing(pool, {"B": b}, title="t")
    labels = [t.get_text() for t in ax.texts]
    assert "B: 5 tokens, 4 cached" in labels and labels.count(b.block_hashes[0][:4]) == 2  # row and pool
    assert "no hash" in labels and "#0\nheld" in labels and "#1\ncached 1" in labels and "#5\nfree" in labels
    assert [t.get_text() for t in ax.texts if t.get_text() in {"11", "1"}] == ["1", "11"]  # token ids
    plt.close("all")
    ax = prefix_plots.plot_hit_rate_vs_pool([32, 64, 128], [0.25, 0.5, 0.7], ceiling=0.8)
    assert list(ax.lines[0].get_ydata()) == [25.0, 50.0, 70.0] and ax.lines[1].get_ydata()[0] == 80.0
    assert [t.get_text() for t in ax.get_xticklabels()] == ["32", "64", "128"]
    plt.close("all")


def test_importing_the_figures_module_does_not_import_matplotlib():
    import subprocess
    import sys

    code = "import sys, kvtutor.plots.prefix, kvtutor.caches.prefix; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
