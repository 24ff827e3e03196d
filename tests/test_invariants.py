"""Invariants by construction, tried with illegal moves as well as legal ones.

Stateful property tests (hypothesis ``RuleBasedStateMachine``) drive every cache kind, both
backends, and the block pools with what a user may do wrong: a plan made stale by a newer one,
a second commit, a shallow copy, a pass that fails half way, a second model on a pool. After
every step, a refused call must have changed nothing a reader can see (lengths, keys, values,
block tables and counts), and every committed key must equal the reference (what a correct
cache holds: the rows written under committed plans, in float64). A second group checks the
models: weights against their config, non-finite logits, the fixed plan's replays.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from test_cache_protocol import CACHES, H, K, L

import kvtutor
from kvtutor.book.demos import attention_offset_mask
from kvtutor.caches.paged import PagedKVPool
from kvtutor.caches.prefix import PrefixCachingPool
from kvtutor.caches.protocol import Plan

torch = pytest.importorskip("torch")

CAPACITY = 6
MACHINE_SETTINGS = settings(
    max_examples=25, stateful_step_count=20, deadline=None, suppress_health_check=list(HealthCheck)
)


def as_np(x) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    x = np.asarray(x, dtype=np.float64)
    return x[0] if x.ndim == 4 else x


def visible(cache) -> dict:
    """Everything a reader of ``cache`` (and of its pool) can see: lengths, committed keys and
    values, and for a paged sequence its block table and the pool's counts."""
    seen = {"lengths": cache.host_lengths}
    for layer in range(cache.n_layers):
        seen[f"k{layer}"] = as_np(cache.keys(layer)).tolist()
        seen[f"v{layer}"] = as_np(cache.values(layer)).tolist()
    pool = getattr(cache, "pool", None)
    if pool is not None:
        alloc = pool.allocator
        seen |= {"table": list(cache.block_table), "refcount": list(alloc.refcount), "free": alloc.n_free}
    return seen


def refused(call, error=ValueError, name="plan") -> None:
    with pytest.raises(error) as info:
        call()
    assert str(info.value).startswith(f"{name}:"), str(info.value)


class CacheMachine(RuleBasedStateMachine):
    """One cache of one kind, driven through the protocol with legal and illegal moves."""

    kind = ""

    def __init__(self) -> None:
        super().__init__()
        make, self.exact = CACHES[self.kind]
        self.cache = make(CAPACITY)
        self.rng = np.random.default_rng(0)
        self.ref = [[np.zeros((H, 0, K)), np.zeros((H, 0, K))] for _ in range(L)]
        self.open: Plan | None = None
        self.written: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.stale: list[Plan] = []

    # ------------------------------------------------------------ helpers
    @property
    def length(self) -> int:
        return self.ref[0][0].shape[1]

    def rows(self, n: int) -> np.ndarray:
        return self.rng.standard_normal((H, n, K))

    def to_cache(self, x: np.ndarray, cache=None):
        c = cache if cache is not None else self.cache
        if c.backend == "numpy":
            return x.astype(c.dtype)
        t = torch.tensor(x, dtype=c.dtype)
        return t[None] if c.batched else t

    def rounded(self, x: np.ndarray) -> np.ndarray:
        return as_np(self.to_cache(x))

    def refused_unchanged(self, call, error=ValueError, name="plan") -> None:
        before = visible(self.cache)
        refused(call, error, name)
        assert visible(self.cache) == before, "a refused call changed the cache"

    # ------------------------------------------------------------ legal moves
    @rule(n=st.integers(1, 3))
    def plan(self, n):
        room = self.cache.capacity - self.length
        if n > room:
            self.refused_unchanged(lambda: self.cache.plan(n), name="ids")
            return
        if self.open is not None:
            self.stale.append(self.open)
        self.open, self.written = self.cache.plan(n), {}

    @precondition(lambda self: self.open is not None)
    @rule(layer=st.integers(0, L - 1))
    def update(self, layer):
        plan = self.open
        k, v = self.rows(plan.n_new), self.rows(plan.n_new)
        if layer in self.written:
            self.refused_unchanged(
                lambda: self.cache.update(layer, self.to_cache(k), self.to_cache(v), plan), name="layer"
            )
            return
        keys, values, _ = self.cache.update(layer, self.to_cache(k), self.to_cache(v), plan)
        self.written[layer] = (k, v)
        if self.exact:  # what attention reads: the committed rows, then the new ones
            want = np.concatenate([self.ref[layer][0], k], axis=1)
            np.testing.assert_array_equal(as_np(keys), self.rounded(want))

    @precondition(lambda self: self.open is not None)
    @rule()
    def advance(self):
        if len(self.written) < L:
            self.refused_unchanged(lambda: self.cache.advance(self.open))
            return
        self.cache.advance(self.open)
        for layer, (k, v) in self.written.items():
            self.ref[layer] = [
                np.concatenate([r, x], axis=1) for r, x in zip(self.ref[layer], (k, v), strict=True)
            ]
        self.stale.append(self.open)  # committed: any further use is refused
        self.open, self.written = None, {}

    @rule(data=st.data())
    def truncate(self, data):
        length = data.draw(st.integers(0, self.length))
        try:
            self.cache.truncate(length)
        except ValueError as err:  # a window that evicted what it would keep
            assert str(err).startswith("length:") and self.kind.endswith(("window", "window+sink"))
            return
        self.ref = [[r[:, :length] for r in layer] for layer in self.ref]
        if self.open is not None:
            self.stale.append(self.open)
        self.open, self.written = None, {}

    # ------------------------------------------------------------ illegal moves
    @precondition(lambda self: bool(self.stale))
    @rule(which=st.integers(0, 10**6), commit=st.booleans())
    def use_a_stale_plan(self, which, commit):
        """A plan that a newer plan, a commit or a truncate made stale: refused either way."""
        plan = self.stale[which % len(self.stale)]
        if commit:
            self.refused_unchanged(lambda: self.cache.advance(plan))
        else:
            k = self.to_cache(self.rows(plan.n_new))
            self.refused_unchanged(lambda: self.cache.update(0, k, k, plan))

    @rule()
    def shallow_copy(self):
        """copy.copy would share buffers and lengths: refused, naming what to use."""
        with pytest.raises(TypeError, match=r"^copy: .*copy\.deepcopy"):
            copy.copy(self.cache)

    @precondition(lambda self: self.open is None)
    @rule(n=st.integers(1, 2))
    def deep_copy_is_independent(self, n):
        """A deep copy takes a whole pass; the original does not move."""
        if self.cache.capacity - self.length < n:
            return
        before = visible(self.cache)
        twin = copy.deepcopy(self.cache)
        plan = twin.plan(n)
        for layer in range(L):
            k = self.to_cache(self.rows(n), twin)
            twin.update(layer, k, k, plan)
        twin.advance(plan)
        assert twin.host_lengths == [self.length + n]
        assert visible(self.cache) == before

    @precondition(lambda self: self.open is None)
    @rule(n=st.integers(1, 3), layers=st.integers(1, L))
    def fail_half_way(self, n, layers):
        """A pass that writes some layers, then fails: abort() leaves everything as it was
        (a paged sequence gives back the blocks it took and the copies it made)."""
        if self.cache.capacity - self.length < n:
            return
        before = visible(self.cache)
        plan = self.cache.plan(n)
        for layer in range(layers):
            k = self.to_cache(self.rows(n))
            self.cache.update(layer, k, k, plan)
        self.cache.abort()
        assert visible(self.cache) == before
        self.stale.append(plan)

    # ------------------------------------------------------------ after every step
    @invariant()
    def committed_equals_the_reference(self):
        c = self.cache
        assert c.host_lengths == [self.length]
        for layer in range(L):
            keys, values = as_np(c.keys(layer)), as_np(c.values(layer))
            want_k, want_v = (self.rounded(r) for r in self.ref[layer])
            if self.exact:
                np.testing.assert_array_equal(keys, want_k)
                np.testing.assert_array_equal(values, want_v)
            else:
                k_bound, v_bound = (as_np(b) for b in c.error_bounds(layer))
                assert (np.abs(keys - want_k) <= k_bound * (1 + 1e-5) + 1e-6).all()
                assert (np.abs(values - want_v) <= v_bound * (1 + 1e-5) + 1e-6).all()

    @invariant()
    def a_pool_holds_only_what_its_sequences_need(self):
        pool = getattr(self.cache, "pool", None)
        if pool is None or (self.open is not None and self.written):
            return
        needed = -(-self.length // pool.block_size)
        assert len(self.cache.block_table) == needed
        assert pool.allocator.n_used == needed or isinstance(pool, PrefixCachingPool)


MACHINES = {}
for _kind in CACHES:
    _name = "Machine_" + "".join(ch if ch.isalnum() else "_" for ch in _kind)
    MACHINES[_kind] = type(_name, (CacheMachine,), {"kind": _kind})


@pytest.mark.parametrize("kind", list(MACHINES))
def test_every_cache_kind_survives_illegal_moves(kind):
    MACHINES[kind].TestCase.settings = MACHINE_SETTINGS
    MACHINES[kind].TestCase().runTest()


# ---------------------------------------------------------------- a pool, two models, forks


def _models():
    cfg = kvtutor.GPT2Config(vocab_size=13, d_model=8, n_heads=2, n_layers=2, max_seq_len=16)
    return kvtutor.GPT2Model.random(cfg, seed=1), kvtutor.GPT2Model.random(cfg, seed=2)


class PoolMachine(RuleBasedStateMachine):
    """Sequences of one pool (plain or prefix-caching) under two models of the same shape:
    every answer equals the model's own recomputation, a second model is refused while the
    pool holds the first one's keys, and a fork's failed step gives its copy back."""

    def __init__(self) -> None:
        super().__init__()
        self.models = _models()
        self.live: list[tuple[object, list[int]]] = []  # (sequence, its tokens)

    @initialize(prefix=st.booleans())
    def start(self, prefix):
        cls = PrefixCachingPool if prefix else PagedKVPool
        self.pool = cls.for_model(self.models[0], n_blocks=40, block_size=2)
        self.owner = None  # the model whose keys the pool holds

    def holds(self) -> bool:  # keys of a live sequence, or named blocks kept after their sequences
        cached = isinstance(self.pool, PrefixCachingPool) and self.pool.allocator.n_cached > 0
        return bool(self.live) or cached

    @staticmethod
    def run_prefill(model, seq, prompt):
        return seq.prefill(model, prompt) if hasattr(seq, "prefill") else model.prefill(prompt, seq)

    def check(self, model, seq, tokens, logits) -> None:
        want = model.logits_without_cache(tokens)[-logits.shape[0] :]
        np.testing.assert_allclose(logits, want, atol=1e-5)

    @precondition(lambda self: len(self.live) < 3)
    @rule(which=st.integers(0, 1), prompt=st.lists(st.integers(0, 3), min_size=1, max_size=5))
    def prefill(self, which, prompt):
        model = self.models[which]
        if isinstance(self.pool, PrefixCachingPool):
            seq = self.pool.new_sequence(token_ids=prompt)
        else:
            seq = self.pool.new_sequence()
        other = self.owner is not None and self.owner is not model and self.holds()
        if other:
            before = (list(self.pool.allocator.refcount), self.pool.allocator.n_free)
            refused(lambda: self.run_prefill(model, seq, prompt), name="cache")
            assert (list(self.pool.allocator.refcount), self.pool.allocator.n_free) == before
            seq.free()
            return
        logits = self.run_prefill(model, seq, prompt)
        self.owner = model
        self.check(model, seq, prompt, logits)
        self.live.append((seq, list(prompt)))

    @precondition(lambda self: bool(self.live))
    @rule(i=st.integers(0, 10), token=st.integers(0, 3))
    def decode(self, i, token):
        seq, tokens = self.live[i % len(self.live)]
        if len(tokens) >= 15:
            return
        if hasattr(seq, "extend_tokens"):
            seq.extend_tokens([token])
        logits = self.owner.decode_step(token, seq)
        tokens.append(token)
        self.check(self.owner, seq, tokens, logits[None])

    @precondition(lambda self: bool(self.live) and len(self.live) < 3)
    @rule(i=st.integers(0, 10), token=st.integers(0, 3))
    def fork_then_fail(self, i, token):
        """A forked child's step that fails at layer 1 (after layer 0 copied the shared block):
        the pool and the child are as they were; then the child's real step is right."""
        seq, tokens = self.live[i % len(self.live)]
        if len(tokens) >= 15 or isinstance(self.pool, PrefixCachingPool):
            return
        child = self.pool.fork(seq)
        before = visible(child)

        def fail_at_layer_1(layer, q, k, v):
            if layer == 1:
                raise RuntimeError("injected")
            return attention_offset_mask(q, k, v)

        with pytest.raises(RuntimeError, match="injected"):
            self.owner.forward([token], child, core=fail_at_layer_1)
        assert visible(child) == before
        logits = self.owner.decode_step(token, child)
        self.check(self.owner, child, tokens + [token], logits[None])
        self.live.append((child, tokens + [token]))

    @precondition(lambda self: bool(self.live))
    @rule(i=st.integers(0, 10))
    def free(self, i):
        seq, _ = self.live.pop(i % len(self.live))
        seq.free()

    @invariant()
    def blocks_are_accounted_for(self):
        if isinstance(self.pool, PrefixCachingPool):
            return
        needed = sum(-(-len(tokens) // 2) for _, tokens in self.live)
        shared = sum(r - 1 for r in self.pool.allocator.refcount if r > 1)
        assert self.pool.allocator.n_used == needed - shared


def test_a_pool_serves_one_model_and_failures_give_back_what_they_took():
    PoolMachine.TestCase.settings = MACHINE_SETTINGS
    PoolMachine.TestCase().runTest()


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("pool_cls", [PagedKVPool, PrefixCachingPool])
@pytest.mark.parametrize("meanwhile", ["rewritten", "freed to a new sequence"])
def test_an_aborted_copy_on_write_keeps_the_rows_it_protects(backend, pool_cls, meanwhile):
    """B forks A, B's open plan copies their shared block, then A (its last other holder) writes
    into the original after a truncate, or frees it to a new sequence that fills it: B's abort
    must leave B reading its own committed rows (it put the changed original back: B read A's or
    C's keys as its own, silently)."""
    dtype = np.float32 if backend == "numpy" else torch.float32
    pool = pool_cls(1, 1, 2, 8, 4, dtype=dtype)

    def rows(x):
        x = np.asarray(x, np.float32)
        return x if backend == "numpy" else torch.from_numpy(x)[None]

    def write(seq, k, commit=True):
        plan = seq.plan(k.shape[1])
        seq.update(0, rows(k), rows(k), plan)
        if commit:
            seq.advance(plan)

    a = pool.new_sequence()
    write(a, np.random.default_rng(0).standard_normal((1, 6, 2)))
    b = a.fork()
    before = as_np(b.keys(0)).copy()
    write(b, np.zeros((1, 1, 2)), commit=False)  # the shared block 1 is copied for b
    if meanwhile == "rewritten":
        a.truncate(5)
        write(a, np.full((1, 1, 2), 100.0))  # a alone holds block 1 now: written in place
    else:
        a.free()
        write(pool.new_sequence(), np.full((1, 8, 2), 7.0))  # takes block 1 off the free list
    b.abort()
    assert len(b) == 6
    np.testing.assert_array_equal(as_np(b.keys(0)), before)
    write(b, np.ones((1, 1, 2)))  # and b goes on from its own rows
    np.testing.assert_array_equal(as_np(b.keys(0))[..., :6, :], before)


# ---------------------------------------------------------------- the cases the issue names


@pytest.mark.parametrize(
    "kind", ["numpy preallocated", "numpy int8 per_channel", "numpy paged", "torch batched preallocated"]
)
def test_a_second_plan_makes_the_first_stale(kind):
    """``a = c.plan(2); b = c.plan(1)``, both written: ``advance(a)`` used to commit b's keys at
    a's positions."""
    make, _ = CACHES[kind]
    c = make(CAPACITY)
    a, b = c.plan(2), c.plan(1)

    def ones(n):
        return np.ones((H, n, K)) if c.backend == "numpy" else torch.ones((1, H, n, K), dtype=c.dtype)

    refused(lambda: c.update(0, ones(2), ones(2), a))
    for layer in range(L):
        c.update(layer, ones(1), ones(1), b)
    refused(lambda: c.advance(a))
    c.advance(b)
    assert c.host_lengths == [1]


def test_a_concat_cache_keeps_its_length_and_keys_in_step():
    c = kvtutor.ConcatKVCache(L, H, CAPACITY, K)
    a = c.plan(2)
    for layer in range(L):
        c.update(layer, np.ones((H, 2, K)), np.ones((H, 2, K)), a)
    b = c.plan(1)
    refused(lambda: c.advance(a))
    for layer in range(L):
        c.update(layer, np.zeros((H, 1, K)), np.zeros((H, 1, K)), b)
    c.advance(b)
    assert len(c) == 1 and c.keys(0).shape == (H, 1, K) and not c.keys(0).any()


def test_a_fixed_plan_is_never_rerun_eagerly_nor_past_its_keys():
    cfg = kvtutor.GPT2Config(vocab_size=13, d_model=8, n_heads=2, n_layers=2, max_seq_len=16)
    model = kvtutor.TorchGPT2Model.random(cfg, device="cpu")
    cache = model.new_cache(1, 16)
    model.prefill([[1, 2, 3]], cache)
    plan = cache.fixed_plan(5)
    model.run_pass(torch.tensor([[4]]), cache, plan)
    cache.advance(plan)
    before = visible(cache)
    refused(lambda: model.run_pass(torch.tensor([[5]]), cache, plan))  # its mask is the old one
    assert visible(cache) == before
    cache.truncate(3)
    plan = cache.fixed_plan(4)  # one more token fits: slot 3
    model.run_pass(torch.tensor([[4]]), cache, plan)
    cache.advance(plan)
    refused(plan.replayed, name="n_keys")  # slot 4 is outside its 4 keys
    plan.written = [True] * cache.n_layers
    refused(lambda: cache.advance(plan), name="n_keys")
    assert cache.host_lengths == [4]


# ---------------------------------------------------------------- weights, epsilons, logits


@pytest.fixture(scope="module")
def qwen3():
    cfg = kvtutor.Qwen3Config(
        vocab_size=17, d_model=16, n_heads=4, n_layers=2, max_seq_len=12, d_ff=24, n_kv_heads=2, d_head=4
    )
    return kvtutor.Qwen3Model.random(cfg, seed=3)


def _without(weights, layer, field):
    layers = list(weights.layers)
    layers[layer] = replace(layers[layer], **{field: None})
    return replace(weights, layers=layers)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_weights_are_checked_against_their_config(qwen3, backend):
    build = (lambda c, w: type(qwen3)(c, w)) if backend == "numpy" else (
        lambda c, w: kvtutor.TorchQwen3Model(c, w, device="cpu")
    )  # fmt: skip
    cfg, w = qwen3.config, qwen3.weights
    with pytest.raises(ValueError, match=r"^weights: expected every weight .* missing layers\[1\]\.k_norm_K"):
        build(cfg, _without(w, 1, "k_norm_K"))  # QK-norm silently skipped, before
    two = replace(cfg, n_layers=1)
    with pytest.raises(ValueError, match=r"^weights: expected only the weights .* got layers\[1\]\."):
        build(two, w)  # the extra layer silently ignored, before
    bad = replace(w.layers[0], w_q=w.layers[0].w_q[:, :-1])
    with pytest.raises(ValueError, match=r"^layers\[0\]\.w_q: expected shape \[16, 16\]"):
        build(cfg, replace(w, layers=[bad, *w.layers[1:]]))
    tiny = replace(cfg, rms_norm_eps=1e-50)
    with pytest.raises(
        ValueError, match=r"^rms_norm_eps: expected a number > 0 in the weights' dtype float32"
    ):
        build(tiny, w)
    half = replace(w.layers[0], w_o=w.layers[0].w_o.astype(np.float64))
    with pytest.raises(ValueError, match=r"^layers\[0\]\.w_o: expected wte_VD's dtype float32, got float64"):
        build(cfg, replace(w, layers=[half, *w.layers[1:]]))


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_no_token_is_chosen_from_a_non_finite_logit(backend):
    """Weights finite in float32 whose products overflow: the logits are inf or NaN. The pass is
    refused before the commit (the cache unchanged) and generate raises instead of returning
    token 0 again and again."""
    cfg = kvtutor.GPT2Config(vocab_size=13, d_model=8, n_heads=2, n_layers=2, max_seq_len=16)
    model = kvtutor.GPT2Model.random(cfg, seed=1)
    model.weights.lnf_g[:] = 3e38  # finite, but the final norm's products overflow float32
    model = type(model)(model.config, model.weights)
    if backend == "torch":
        model = kvtutor.TorchGPT2Model.from_numpy(model, device="cpu")
        cache, ids = model.new_cache(1, 8), [[1, 2]]
    else:
        cache, ids = model.new_cache(capacity=8), [1, 2]
    before = visible(cache)
    refused(lambda: model.prefill(ids, cache), name="logits")
    assert visible(cache) == before
    refused(lambda: model.generate(ids, 3), name="logits")
