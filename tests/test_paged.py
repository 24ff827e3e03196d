"""The paged KV cache: same attention as the contiguous cache, block accounting, prefix sharing."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvtutor
from kvtutor.caches.paged import BlockAllocator, PagedKVCache, PagedKVPool, block_owners
from kvtutor.caches.prefix import block_hashes
from kvtutor.caches.protocol import KVCacheBase
from kvtutor.serving.paged_trace import Request, random_trace, shared_prefix_trace, simulate_trace


def make_model(n_heads=4, n_kv_heads=2, d_head=4, n_layers=2, max_seq_len=48, vocab=30, seed=0):
    cfg = kvtutor.GPT2Config(
        vocab_size=vocab, d_model=n_heads * d_head, n_heads=n_heads, n_layers=n_layers,
        max_seq_len=max_seq_len, n_kv_heads=n_kv_heads,
    )  # fmt: skip
    return kvtutor.GPT2Model.random(cfg, seed=seed)


def pool_state(pool):
    return (
        list(pool.allocator.free_list),
        list(pool.allocator.refcount),
        pool.k_LNHPK.copy(),
        pool.v_LNHPK.copy(),
    )


def assert_same_pool(a, b):
    assert a[0] == b[0] and a[1] == b[1]
    np.testing.assert_array_equal(a[2], b[2])
    np.testing.assert_array_equal(a[3], b[3])


# ---------------------------------------------------------------- the allocator


def test_allocator_free_list_and_refcounts():
    a = BlockAllocator(3)
    assert [a.allocate(), a.allocate()] == [0, 1] and a.n_used == 2 and a.n_free == 1
    a.retain(0)
    a.release(0)
    assert a.refcount[0] == 1 and 0 not in a.free_list
    a.release(0)
    assert a.refcount[0] == 0 and a.free_list[-1] == 0
    assert a.allocate() == 0  # the most recently freed block is handed out next
    assert a.allocate() == 2
    with pytest.raises(ValueError, match=r"^allocate: expected a free block, got none of 3 free"):
        a.allocate()


def test_allocator_errors():
    a = BlockAllocator(2)
    with pytest.raises(ValueError, match=r"^block: expected an allocated block, got free block 1"):
        a.release(1)
    with pytest.raises(ValueError, match=r"^block: expected 0 <= block <= 1, got 5"):
        a.retain(5)
    with pytest.raises(ValueError, match=r"^n_blocks: expected an int >= 1, got 0"):
        BlockAllocator(0)
    with pytest.raises(TypeError, match=r"^n_blocks: expected an int"):
        BlockAllocator(2.0)


# ---------------------------------------------------------------- paged == contiguous


def test_protocol_and_shapes():
    model = make_model()
    pool = PagedKVPool.for_model(model, n_blocks=8, block_size=4)
    seq = pool.new_sequence()
    assert isinstance(seq, KVCacheBase)
    assert (seq.n_layers, seq.n_kv_heads, seq.d_head, seq.capacity) == (2, 2, 4, 48)
    assert pool.k_LNHPK.shape == (2, 8, 2, 4, 4)
    assert pool.block_bytes == 2 * 2 * 2 * 4 * 4 * 4 and pool.token_bytes == pool.block_bytes // 4
    model.prefill([1, 2, 3, 4, 5], seq)
    assert len(seq) == 5 and seq.block_table == [0, 1] and seq.keys(1).shape == (2, 5, 4)


@settings(max_examples=40, deadline=None)
@given(
    n_heads_kv=st.sampled_from([(1, 1), (2, 1), (2, 2), (4, 1), (4, 2), (4, 4), (6, 3), (6, 2)]),
    d_head=st.integers(1, 5),
    n_layers=st.integers(1, 3),
    block_size=st.integers(1, 6),
    prompt_len=st.integers(1, 12),
    n_decode=st.integers(0, 8),
    seed=st.integers(0, 2**16),
)
def test_paged_attention_equals_contiguous_bit_for_bit(
    n_heads_kv, d_head, n_layers, block_size, prompt_len, n_decode, seed
):
    n_heads, n_kv_heads = n_heads_kv
    model = make_model(n_heads, n_kv_heads, d_head, n_layers, max_seq_len=24, seed=seed % 97)
    rng = np.random.default_rng(seed)
    prompt = rng.integers(0, 30, prompt_len).tolist()
    pool = PagedKVPool.for_model(model, n_blocks=24 // block_size + 2, block_size=block_size)
    seq, ref = pool.new_sequence(), model.new_cache(kind="preallocated")
    np.testing.assert_array_equal(model.prefill(prompt, seq), model.prefill(prompt, ref))
    for token in rng.integers(0, 30, n_decode).tolist():
        np.testing.assert_array_equal(model.decode_step(token, seq), model.decode_step(token, ref))
    for layer in range(n_layers):
        np.testing.assert_array_equal(seq.keys(layer), ref.keys(layer))
        np.testing.assert_array_equal(seq.values(layer), ref.values(layer))
    assert len(seq.block_table) == -(-len(seq) // block_size)


def test_chunked_prefill_across_block_boundaries():
    model = make_model()
    pool = PagedKVPool.for_model(model, n_blocks=10, block_size=3)
    seq, ref = pool.new_sequence(), model.new_cache()
    for chunk in ([1, 2], [3, 4, 5, 6, 7], [8], [9, 10, 11, 12]):
        np.testing.assert_array_equal(model.forward(chunk, seq), model.forward(chunk, ref))
    assert len(seq) == 12 and len(seq.block_table) == 4


def test_generate_on_a_paged_cache():
    model = make_model(max_seq_len=40)
    pool = PagedKVPool.for_model(model, n_blocks=10, block_size=4)
    assert model.generate([3, 1, 4], 20, cache=pool.new_sequence()) == model.generate([3, 1, 4], 20)


def test_blocks_come_from_the_free_list_not_in_order():
    model = make_model()
    pool = PagedKVPool.for_model(model, n_blocks=12, block_size=2)
    a, b = pool.new_sequence(), pool.new_sequence()
    ref = model.new_cache()
    np.testing.assert_array_equal(model.prefill([1, 2, 3], a), model.prefill([1, 2, 3], ref))  # blocks 0, 1
    model.prefill([4, 5], b)  # block 2
    for token in (6, 7):  # position 4 opens a new block
        np.testing.assert_array_equal(model.decode_step(token, a), model.decode_step(token, ref))
    assert a.block_table == [0, 1, 3] and b.block_table == [2]
    np.testing.assert_array_equal(model.decode_step(8, a), model.decode_step(8, ref))


def test_interleaved_sequences_stay_equal_to_their_contiguous_twins():
    model = make_model()
    pool = PagedKVPool.for_model(model, n_blocks=16, block_size=2)
    seqs = [pool.new_sequence() for _ in range(3)]
    refs = [model.new_cache() for _ in range(3)]
    rng = np.random.default_rng(1)
    for s, r in zip(seqs, refs, strict=True):
        p = rng.integers(0, 30, 3).tolist()
        np.testing.assert_array_equal(model.prefill(p, s), model.prefill(p, r))
    for _ in range(5):
        for s, r in zip(seqs, refs, strict=True):
            t = int(rng.integers(0, 30))
            np.testing.assert_array_equal(model.decode_step(t, s), model.decode_step(t, r))
    tables = [b for s in seqs for b in s.block_table]
    assert len(tables) == len(set(tables)) == pool.allocator.n_used


# ---------------------------------------------------------------- accounting


def test_usage_counts_reserved_and_used_bytes():
    model = make_model()
    pool = PagedKVPool.for_model(model, n_blocks=10, block_size=4)
    a, b = pool.new_sequence(), pool.new_sequence()
    model.prefill(list(range(9)), a)  # 3 blocks, last holds 1
    model.prefill([1, 2], b)  # 1 block, holds 2
    u = pool.usage()
    assert (u.blocks_used, u.blocks_free, u.blocks_shared, u.tokens_stored) == (4, 6, 0, 11)
    assert u.bytes_reserved == 4 * pool.block_bytes and u.bytes_used == 11 * pool.token_bytes
    assert u.bytes_wasted == (3 + 2) * pool.token_bytes  # only the last block of each is partly empty
    assert a.nbytes == 3 * pool.block_bytes and b.nbytes == pool.block_bytes
    assert block_owners([a, b]) == ({0: 0, 1: 0, 2: 0, 3: 1}, {0: 4, 1: 4, 2: 1, 3: 2})
    assert pool.nbytes == pool.k_LNHPK.nbytes * 2 == 10 * pool.block_bytes


def test_truncate_gives_blocks_back_and_continues_like_contiguous():
    model = make_model()
    pool = PagedKVPool.for_model(model, n_blocks=10, block_size=3)
    seq, ref = pool.new_sequence(), model.new_cache()
    model.prefill(list(range(10)), seq)
    model.prefill(list(range(10)), ref)
    seq.truncate(4)
    ref.truncate(4)
    assert len(seq) == 4 and len(seq.block_table) == 2 and pool.allocator.n_used == 2
    np.testing.assert_array_equal(model.decode_step(7, seq), model.decode_step(7, ref))
    seq.truncate(0)
    assert seq.block_table == [] and pool.allocator.n_free == 10


def test_free_returns_every_block_and_retires_the_sequence():
    model = make_model()
    pool = PagedKVPool.for_model(model, n_blocks=6, block_size=2)
    seq = pool.new_sequence()
    model.prefill([1, 2, 3], seq)
    seq.free()
    assert pool.allocator.n_free == 6 and pool.sequences == []
    with pytest.raises(ValueError, match=r"^cache: expected a live sequence"):
        seq.free()
    with pytest.raises(ValueError, match=r"^seq: expected a live sequence"):
        pool.fork(seq)
    with pytest.raises(ValueError, match=r"^cache: expected a live sequence"):
        seq.plan(1)  # the pool has no other sequence: the check must not depend on that
    assert pool.allocator.n_free == 6


# ---------------------------------------------------------------- prefix sharing


def test_fork_shares_blocks_and_copies_on_first_write():
    model = make_model()
    pool = PagedKVPool.for_model(model, n_blocks=12, block_size=4)
    prompt = [5, 1, 7, 2, 9, 3]  # 6 tokens: one full block, one half-full block
    parent = pool.new_sequence()
    model.prefill(prompt, parent)
    ref_parent = model.new_cache()
    model.prefill(prompt, ref_parent)
    ref_child = copy.deepcopy(ref_parent)
    child = parent.fork()
    assert child.block_table == parent.block_table == [0, 1] and len(child) == 6
    assert pool.allocator.refcount[:2] == [2, 2]
    u = pool.usage()
    assert (u.blocks_used, u.blocks_shared, u.tokens_stored) == (2, 2, 6)  # the prompt is stored once
    parent_keys = [parent.keys(layer).copy() for layer in range(2)]

    np.testing.assert_array_equal(model.decode_step(4, child), model.decode_step(4, ref_child))
    assert child.block_table == [0, 2]  # block 1 was shared and written to: copied to block 2
    assert pool.allocator.refcount[:3] == [2, 1, 1]
    for layer in range(2):
        np.testing.assert_array_equal(parent.keys(layer), parent_keys[layer])  # untouched
    np.testing.assert_array_equal(model.decode_step(8, parent), model.decode_step(8, ref_parent))
    assert parent.block_table == [0, 1]  # block 1 is the parent's alone now: written in place
    for _ in range(3):
        np.testing.assert_array_equal(model.decode_step(6, child), model.decode_step(6, ref_child))
    assert pool.usage().blocks_shared == 1


def test_fork_at_a_block_boundary_copies_nothing():
    model = make_model()
    pool = PagedKVPool.for_model(model, n_blocks=8, block_size=4)
    parent = pool.new_sequence()
    model.prefill(list(range(8)), parent)
    child = pool.fork(parent)
    model.decode_step(3, child)
    assert child.block_table == [0, 1, 2] and parent.block_table == [0, 1]
    assert pool.usage().blocks_shared == 2


def test_many_forks_of_one_prompt_save_memory():
    model = make_model()
    pool = PagedKVPool.for_model(model, n_blocks=40, block_size=4)
    root = pool.new_sequence()
    model.prefill(list(range(16)), root)  # 4 full blocks
    children = [root.fork() for _ in range(4)]
    for c in children:
        model.decode_step(1, c)
    # 4 shared prompt blocks + one new block per child, instead of 5 blocks per sequence
    assert pool.allocator.n_used == 4 + 4
    assert pool.usage().tokens_stored == 16 + 4


def test_freeing_a_parent_keeps_the_childs_blocks():
    model = make_model()
    pool = PagedKVPool.for_model(model, n_blocks=8, block_size=4)
    parent = pool.new_sequence()
    model.prefill([1, 2, 3, 4, 5], parent)
    child = parent.fork()
    keys = child.keys(0).copy()
    parent.free()
    assert pool.allocator.n_used == 2 and pool.allocator.refcount[:2] == [1, 1]
    np.testing.assert_array_equal(child.keys(0), keys)


# ---------------------------------------------------------------- errors leave state unchanged


def test_out_of_blocks_leaves_everything_unchanged():
    model = make_model()
    pool = PagedKVPool.for_model(model, n_blocks=3, block_size=2)
    seq = pool.new_sequence()
    model.prefill([1, 2, 3, 4, 5], seq)  # 3 blocks: the pool is full
    model.decode_step(1, seq)  # position 5 still fits in block 2
    before, table, keys = pool_state(pool), list(seq.block_table), seq.keys(0).copy()
    # issue 12: this used to name k_new_HTK, which the caller never passed
    with pytest.raises(
        ValueError, match=r"^cache: out of blocks: 1 new tokens need 1 free blocks, the pool has 0 of 3"
    ):
        model.decode_step(2, seq)
    assert len(seq) == 6 and seq.block_table == table
    assert_same_pool(pool_state(pool), before)
    np.testing.assert_array_equal(seq.keys(0), keys)


def test_copy_on_write_without_a_free_block_changes_nothing():
    model = make_model()
    pool = PagedKVPool.for_model(model, n_blocks=2, block_size=4)
    parent = pool.new_sequence()
    model.prefill([1, 2, 3, 4, 5], parent)
    child = parent.fork()
    before = pool_state(pool)
    with pytest.raises(
        ValueError, match=r"^cache: out of blocks: 1 new tokens need 1 free blocks, the pool has 0"
    ):
        model.decode_step(1, child)
    assert_same_pool(pool_state(pool), before)
    assert len(child) == 5 and child.block_table == [0, 1]


def test_protocol_errors():
    model = make_model()
    pool = PagedKVPool.for_model(model, n_blocks=4, block_size=2)
    seq = pool.new_sequence(capacity=6)
    k = np.zeros((2, 1, 4), np.float32)
    plan = seq.plan(1)
    with pytest.raises(ValueError, match=r"^layer: expected 0 <= layer < 2, got 2"):
        seq.update(2, k, k, plan)
    with pytest.raises(ValueError, match=r"^k_new: expected shape \[H=2, T=1, K=4\]"):
        seq.update(0, np.zeros((4, 1, 4), np.float32), k, plan)
    with pytest.raises(
        ValueError, match=r"^ids: 7 new tokens after 0 cached ones exceed the cache capacity 6"
    ):
        seq.plan(7)
    seq.update(0, k, k, plan)
    with pytest.raises(ValueError, match=r"^plan: layers \[1\] were not written under this plan"):
        seq.advance(plan)  # layer 1 has not been written yet
    with pytest.raises(ValueError, match=r"^layer: layer 0 was already written under this plan"):
        seq.update(0, k, k, plan)
    seq.update(1, k, k, plan)
    seq.advance(plan)
    with pytest.raises(ValueError, match=r"^plan: expected an open plan, got one already committed"):
        seq.advance(plan)
    with pytest.raises(ValueError, match=r"^length: expected 0 <= length <= 1 \(every row.s length\), got 2"):
        seq.truncate(2)
    with pytest.raises(ValueError, match=r"^capacity: expected 1 <= capacity <= 48, got 49"):
        pool.new_sequence(capacity=49)
    other = PagedKVPool(2, 2, 4, 4, 2)
    with pytest.raises(TypeError, match=r"^seq: expected a sequence of this pool"):
        other.fork(seq)
    with pytest.raises(ValueError, match=r"^cache: expected \(layers, kv heads, head dim\)"):
        make_model(n_kv_heads=4).prefill([1], seq)
    with pytest.raises(ValueError, match=r"^block_size: expected an int >= 1, got 0"):
        PagedKVPool(2, 2, 4, 4, 0)


def test_failed_forward_half_way_leaves_the_committed_state():
    model = make_model()
    pool = PagedKVPool.for_model(model, n_blocks=8, block_size=2)
    seq = pool.new_sequence()
    model.prefill([1, 2, 3], seq)
    keys = [seq.keys(layer).copy() for layer in range(2)]
    k = np.ones((2, 2, 4), np.float32)
    seq.update(0, k, k, seq.plan(2))  # layer 0 written, layer 1 not: the pass "failed"
    assert len(seq) == 3
    for layer in range(2):
        np.testing.assert_array_equal(seq.keys(layer), keys[layer])
    ref = model.new_cache()
    model.prefill([1, 2, 3], ref)
    np.testing.assert_array_equal(model.decode_step(4, seq), model.decode_step(4, ref))


# ---------------------------------------------------------------- the request trace


def test_random_trace_is_reproducible_and_fits():
    a, b = random_trace(50, 128, seed=3), random_trace(50, 128, seed=3)
    assert a == b and a != random_trace(50, 128, seed=4)
    assert all(r.prompt_len + r.output_len <= 128 and r.prompt_len >= 1 and r.output_len >= 1 for r in a)
    assert [r.arrival for r in a] == sorted(r.arrival for r in a)


def test_paging_wastes_less_and_runs_more_requests_at_once():
    trace = random_trace(150, 256, seed=0)
    contiguous = simulate_trace(trace, "contiguous", capacity_tokens=2048, max_seq_len=256, block_size=16)
    paged = simulate_trace(trace, "paged", capacity_tokens=2048, max_seq_len=256, block_size=16)
    assert contiguous.finished == paged.finished == 150
    assert contiguous.tokens_generated == paged.tokens_generated == sum(r.output_len for r in trace)
    assert contiguous.preemptions == 0
    for run in (contiguous, paged):
        assert all(0 <= u <= r <= 2048 for u, r in zip(run.used, run.reserved, strict=True))
    assert all(r == 256 * n for r, n in zip(contiguous.reserved, contiguous.running, strict=True))
    # paging wastes at most the unfilled part of one block per running request
    assert all(
        r - u < 16 * max(n, 1) for r, u, n in zip(paged.reserved, paged.used, paged.running, strict=True)
    )
    assert max(contiguous.running) <= 2048 // 256
    assert paged.waste_fraction < 0.5 * contiguous.waste_fraction
    assert paged.mean_running > contiguous.mean_running
    assert paged.steps < contiguous.steps


@pytest.mark.parametrize("scheme", ["contiguous", "paged"])
def test_replay_with_a_real_model_measures_the_same_memory(scheme):
    model = make_model(max_seq_len=32)
    trace = random_trace(12, 32, seed=2)
    book = simulate_trace(trace, scheme, capacity_tokens=64, max_seq_len=32, block_size=4)
    real = simulate_trace(trace, scheme, capacity_tokens=64, max_seq_len=32, block_size=4, model=model)
    assert (real.reserved, real.used, real.running) == (book.reserved, book.used, book.running)
    assert real.finished == 12 and real.preemptions == book.preemptions


def test_preemption_under_pressure_still_finishes_everything():
    trace = [Request(0, 10, 20) for _ in range(6)]
    r = simulate_trace(trace, "paged", capacity_tokens=40, max_seq_len=32, block_size=4)
    assert r.finished == 6 and r.preemptions > 0
    assert r.tokens_generated == 6 * 20
    model = make_model(max_seq_len=32)
    real = simulate_trace(trace, "paged", capacity_tokens=40, max_seq_len=32, block_size=4, model=model)
    assert (real.reserved, real.preemptions) == (r.reserved, r.preemptions)
    # every preemption is paid for by one readmission that prefills its tokens again: its prompt
    # and what it had generated
    assert len(r.recomputed_tokens) == r.preemptions and min(r.recomputed_tokens) >= 10
    assert sum(r.first_prefill_tokens) == 6 * 10
    assert sum(r.first_prefill_tokens) + sum(r.recomputed_tokens) == r.prefill_tokens
    assert real.recomputed_tokens == r.recomputed_tokens
    assert simulate_trace(trace, "contiguous", 40, 32).recomputed_tokens == []


def test_trace_errors():
    trace = [Request(0, 4, 4)]
    with pytest.raises(ValueError, match=r"^scheme: expected one of \['contiguous', 'paged'\], got 'buddy'"):
        simulate_trace(trace, "buddy", 64, 16)
    with pytest.raises(ValueError, match=r"^capacity_tokens: expected room for one sequence"):
        simulate_trace(trace, "paged", 15, 16)
    with pytest.raises(ValueError, match=r"^trace: request 0: expected prompt_len \+ output_len <= .* = 7"):
        simulate_trace(trace, "paged", 64, 6)
    with pytest.raises(TypeError, match=r"^trace: request 0: expected a Request, got tuple"):
        simulate_trace([(0, 4, 4)], "paged", 64, 16)
    with pytest.raises(ValueError, match=r"^model: expected max_seq_len >= 64"):
        simulate_trace(trace, "paged", 64, 64, model=make_model(max_seq_len=48))


def test_a_sequence_is_a_paged_cache_view():
    pool = PagedKVPool(1, 1, 2, 4, 2)
    seq = pool.new_sequence()
    assert isinstance(seq, PagedKVCache) and seq.pool is pool and seq.block_size == 2


# ---------------------------------------------------------------- issue 12: dtypes and lengths


@pytest.mark.parametrize("dtype", [np.int8, np.int32, bool, "bogus"])
def test_a_pool_of_integers_is_refused(dtype):
    """An int8 pool used to round every key and value and give wrong tokens."""
    with pytest.raises(TypeError, match=r"^dtype: expected a floating NumPy dtype such as np.float32, got "):
        PagedKVPool(2, 2, 4, 4, 2, dtype=dtype)


def test_a_pool_longer_than_the_model_is_refused_by_name():
    """A sequence of more positions than the model has used to fail in a NumPy broadcast."""
    model = make_model(max_seq_len=8)
    pool = PagedKVPool(2, 2, 4, n_blocks=8, block_size=2)  # 16 positions per sequence
    seq = pool.new_sequence()
    with pytest.raises(
        ValueError, match=r"^cache: expected a capacity <= this model's max_seq_len 8, got 16"
    ):
        model.prefill(list(range(10)), seq)
    assert len(seq) == 0 and seq.block_table == [] and pool.allocator.n_free == 8
    fitting = PagedKVPool(2, 2, 4, n_blocks=8, block_size=2, max_seq_len=8).new_sequence()
    assert model.prefill([1, 2], fitting).shape == (2, 30)


# ---------------------------------------------------------------- shared system prompts, prefix caching


def test_shared_prefix_trace_is_reproducible_and_shares_prefixes():
    a = shared_prefix_trace(60, 128, 500, n_prefixes=3, prefix_len=40, seed=2)
    assert a == shared_prefix_trace(60, 128, 500, n_prefixes=3, prefix_len=40, seed=2)
    assert a != shared_prefix_trace(60, 128, 500, n_prefixes=3, prefix_len=40, seed=3)
    assert all(len(r.prompt_ids) == r.prompt_len > 40 and r.prompt_len + r.output_len <= 128 for r in a)
    assert len({r.prompt_ids[:40] for r in a}) == 3
    assert [r.arrival for r in a] == sorted(r.arrival for r in a)
    assert "prompt_ids" not in repr(a[0])
    with pytest.raises(ValueError, match=r"^prefix_len: expected 1 <= prefix_len <= 126, got 127"):
        shared_prefix_trace(5, 128, 500, prefix_len=127)
    with pytest.raises(ValueError, match=r"^mean_suffix: expected a finite number >= 1, got 0.5"):
        shared_prefix_trace(5, 128, 500, mean_suffix=0.5)
    with pytest.raises(TypeError, match=r"^mean_gap: expected a number, got str"):
        shared_prefix_trace(5, 128, 500, mean_gap="1")


@pytest.mark.parametrize("capacity", [48, 64, 96, 400])
def test_replay_with_prefix_caching_counts_what_the_real_caches_do(capacity):
    model = make_model()
    trace = shared_prefix_trace(
        30, 48, 30, n_prefixes=3, prefix_len=12, seed=1, mean_suffix=6, mean_output=10, mean_gap=0.7
    )
    book = simulate_trace(trace, "paged", capacity, 48, 4, prefix_caching=True)
    real = simulate_trace(trace, "paged", capacity, 48, 4, model=model, prefix_caching=True)
    plain = simulate_trace(trace, "paged", capacity, 48, 4, model=model)
    for key in ("reserved", "used", "running", "steps", "preemptions", "evictions", "prompt_tokens",
                "cached_tokens", "first_prefill_tokens", "first_cached_tokens"):  # fmt: skip
        assert getattr(book, key) == getattr(real, key), key
    assert real.outputs == plain.outputs and all(
        len(o) == r.output_len for o, r in zip(real.outputs, trace, strict=True)
    )
    assert book.cached_tokens > 0 and book.prefill_tokens < plain.prefill_tokens
    assert sum(book.first_prefill_tokens) + sum(book.first_cached_tokens) == sum(r.prompt_len for r in trace)
    assert plain.cached_tokens == plain.evictions == 0 and plain.hit_rate == 0.0


def test_more_memory_keeps_more_prefixes_cached():
    trace = shared_prefix_trace(300, 512, 1000, n_prefixes=16, prefix_len=128, seed=0)
    rates = [
        simulate_trace(trace, "paged", n * 16, 512, 16, prefix_caching=True).first_hit_rate
        for n in (32, 128, 512)
    ]
    assert rates[0] < rates[1] < rates[2]
    ample = simulate_trace(trace, "paged", 4096 * 16, 512, 16, prefix_caching=True)
    assert ample.evictions == ample.preemptions == 0
    # with room for everything, a first prefill misses only what no request admitted before named
    named, expected = set(), []
    for r in sorted(trace, key=lambda r: r.arrival):  # admitted in arrival order
        expected.append(16 * sum(h in named for h in block_hashes(r.prompt_ids[:-1], 16)))
        named.update(block_hashes(r.prompt_ids, 16))
    assert sorted(ample.first_cached_tokens) == sorted(expected) and sum(expected) > 0


def test_trace_errors_for_prefix_caching():
    trace = [Request(0, 4, 4)]
    with pytest.raises(ValueError, match=r"^prefix_caching: expected False with scheme 'contiguous'"):
        simulate_trace(trace, "contiguous", 64, 16, prefix_caching=True)
    with pytest.raises(TypeError, match=r"^prefix_caching: expected a bool, got str"):
        simulate_trace(trace, "paged", 64, 16, prefix_caching="yes")
    with pytest.raises(
        ValueError, match=r"^trace: request 0: expected 4 prompt_ids \(its prompt_len\), got 3"
    ):
        simulate_trace([Request(0, 4, 4, (1, 2, 3))], "paged", 64, 16, prefix_caching=True)
    with pytest.raises(
        ValueError, match=r"^trace: request 0: prompt_ids: expected token ids in \[0, 30\), got 30 at index 1"
    ):
        simulate_trace([Request(0, 2, 2, (1, 30))], "paged", 64, 16, model=make_model(), prefix_caching=True)
