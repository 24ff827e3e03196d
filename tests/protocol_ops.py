"""Random sequences of cache-protocol calls, valid and invalid, and a driver that predicts each
call's outcome from a reference (the committed rows of every layer, in float64) and checks it:
an invalid call raises the predicted error, naming the predicted argument, and leaves the cache as
it was; a valid one returns, and commits, what the reference says. ``tests/test_cache_protocol.py``
runs every cache class through it; ``tests/test_window_cache.py`` reuses the operations."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st

from kvtutor.caches.protocol import Plan

PLAN_FAULTS = [None, None, None, "n_zero", "n_float", "too_long", "row", "row_negative", "active"]
UPDATE_FAULTS = [None] * 6 + [
    "layer_out", "layer_str", "layer_again", "k_heads", "v_tokens", "k_list", "plan_none",
    "plan_other", "plan_stale", "dtype",
]  # fmt: skip
ADVANCE_FAULTS = [None, None, "plan_none", "plan_closed"]
TRUNCATE_FAULTS = [None, None, "too_long", "negative", "float"]


@st.composite
def operations(draw, n_layers: int, capacity: int, max_ops: int = 30) -> list[tuple]:
    """[(kind, number, fault)]: kind one of plan, update, advance, truncate, read; number a token
    count, a layer or a length (the driver takes it modulo what fits)."""
    ops = []
    for _ in range(draw(st.integers(1, max_ops))):
        kind = draw(st.sampled_from(["plan", "update", "update", "update", "advance", "truncate", "read"]))
        number = draw(st.integers(0, max(capacity, n_layers) + 1))
        faults = {"plan": PLAN_FAULTS, "update": UPDATE_FAULTS, "advance": ADVANCE_FAULTS}
        fault = draw(st.sampled_from(faults.get(kind, TRUNCATE_FAULTS if kind == "truncate" else [None])))
        ops.append((kind, number, fault))
    return ops


def as_numpy(x: Any) -> np.ndarray:
    """An array or tensor, [1, ...] batched or not, as a float64 NumPy array without the batch."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def state_of(obj: Any, depth: int = 0) -> Any:
    """A deep copy of everything a cache holds (arrays, tensors, lists, numbers), for equality."""
    if hasattr(obj, "detach"):
        return ("tensor", obj.detach().cpu().clone())
    if isinstance(obj, np.ndarray):
        return ("array", obj.copy())
    if isinstance(obj, (list, tuple)):
        return [state_of(x, depth) for x in obj]
    if isinstance(obj, dict):
        return {k: state_of(v, depth) for k, v in obj.items()}
    if isinstance(obj, (int, float, str, bool, type(None))):
        return obj
    if depth < 2 and hasattr(obj, "__dict__") and not isinstance(obj, type):
        return {k: state_of(v, depth + 1) for k, v in vars(obj).items() if k not in ("ops", "sequences")}
    return type(obj).__name__


def same_state(a: Any, b: Any) -> bool:
    if isinstance(a, tuple) and a and a[0] in ("tensor", "array"):
        return isinstance(b, tuple) and b[0] == a[0] and np.array_equal(np.asarray(a[1]), np.asarray(b[1]))
    if isinstance(a, list):
        return (
            isinstance(b, list)
            and len(a) == len(b)
            and all(same_state(x, y) for x, y in zip(a, b, strict=True))
        )
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same_state(a[k], b[k]) for k in a)
    return a == b


class Driver:
    """Runs protocol calls on ``cache`` (a cache of one sequence, NumPy or torch, batched or not),
    predicting each outcome. ``exact``: the cache keeps every position it was given (else int8:
    within its error bounds). ``twin`` makes another cache of the same class, for a foreign plan."""

    def __init__(self, cache: Any, twin: Any, seed: int, exact: bool = True) -> None:
        self.cache, self.twin, self.exact = cache, twin, exact
        self.rng = np.random.default_rng(seed)
        self.n_layers, self.h, self.k = cache.n_layers, cache.n_kv_heads, cache.d_head
        self.ref = [[np.zeros((self.h, 0, self.k)) for _ in range(2)] for _ in range(cache.n_layers)]
        self.plan: Plan | None = None
        self.stale: Plan | None = None
        self.staged: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.closed: Plan | None = None

    # ------------------------------------------------------------ arrays in the cache's kind
    def rows(self, n_heads: int, n_new: int) -> np.ndarray:
        return self.rng.standard_normal((n_heads, n_new, self.k))

    def to_cache(self, arr: np.ndarray, wrong_dtype: bool = False) -> Any:
        c = self.cache
        if c.backend == "numpy":
            return arr.astype(np.float64 if wrong_dtype else c.dtype)
        import torch

        dtype = c.dtype
        if wrong_dtype:
            dtype = torch.float32 if c.dtype != torch.float32 else torch.float64
        t = torch.tensor(arr, dtype=dtype, device=c.device)
        return t[None] if c.batched else t

    @property
    def length(self) -> int:
        return self.ref[0][0].shape[1]

    # ------------------------------------------------------------ one call
    def run(self, kind: str, number: int, fault: str | None) -> None:
        call, expected = getattr(self, f"_{kind}")(number, fault)
        before = state_of(self.cache)
        if expected is None:
            result = call()
            self.after(kind, result)
        else:
            exc_type, name = expected
            try:
                call()
            except (TypeError, ValueError) as exc:
                assert type(exc) is exc_type, (kind, fault, type(exc), exc)
                assert str(exc).startswith(f"{name}:"), (kind, fault, str(exc))
            except Exception as exc:  # a raw error from deep inside: the check is missing
                raise AssertionError(f"{kind} with {fault!r} raised {type(exc).__name__}: {exc}") from exc
            else:
                raise AssertionError(f"{kind} with {fault!r} was accepted")
            assert same_state(before, state_of(self.cache)), (kind, fault, "changed the cache")
        self.check_committed()

    def _plan(self, number: int, fault: str | None):
        c, room = self.cache, self.cache.capacity - self.length
        n = 1 + number % max(1, room) if room else 1
        calls = {
            None: (lambda: c.plan(n), None if room else (ValueError, "ids")),
            "n_zero": (lambda: c.plan(0), (ValueError, "n_new")),
            "n_float": (lambda: c.plan(1.5), (TypeError, "n_new")),
            "too_long": (lambda: c.plan(room + 1 + number), (ValueError, "ids")),
            "row": (lambda: c.plan(1, row=1), (ValueError, "row")),
            "row_negative": (lambda: c.plan(1, row=-1), (ValueError, "row")),
            "active": (lambda: c.plan(1, active=[True, False]), (ValueError, "active")),
        }
        self.pending = n
        return calls[fault]

    def _update(self, number: int, fault: str | None):
        c, plan = self.cache, self.plan
        if plan is None and fault not in ("plan_none", "plan_other", "plan_stale"):
            fault = "plan_none"
        if fault == "plan_stale" and self.stale is None:
            fault = "plan_none"
        if fault == "layer_again" and not self.staged:
            fault = None
        n = plan.n_new if plan is not None else 1
        layer = number % self.n_layers
        if plan is not None and layer in self.staged and fault != "layer_again":
            layer = next((i for i in range(self.n_layers) if i not in self.staged), None)
            if layer is None:  # every layer written: the only call left to refuse is another write
                fault, layer = "layer_again", 0
        k, v = self.rows(self.h, n), self.rows(self.h, n)
        self.update_args = (layer, k, v)
        use = plan
        if fault == "plan_none":
            use = None
        elif fault == "plan_other":
            use = self.twin.plan(1)
        elif fault == "plan_stale":
            use = self.stale
        kc, vc = self.to_cache(k), self.to_cache(v)
        expected = None
        if fault in ("plan_none",):
            expected = (TypeError, "plan")
        elif fault in ("plan_other", "plan_stale"):
            expected = (ValueError, "plan")
        elif fault == "layer_out":
            layer, expected = self.n_layers, (ValueError, "layer")
        elif fault == "layer_str":
            layer, expected = "0", (TypeError, "layer")
        elif fault == "layer_again":
            layer, expected = next(iter(self.staged)), (ValueError, "layer")
        elif fault == "k_heads":
            kc, expected = self.to_cache(self.rows(self.h + 1, n)), (ValueError, "k_new")
        elif fault == "v_tokens":
            vc, expected = self.to_cache(self.rows(self.h, n + 1)), (ValueError, "v_new")
        elif fault == "k_list":
            kc, expected = k.tolist(), (TypeError, "k_new")
        elif fault == "dtype":
            if c.backend == "numpy":  # a NumPy cache takes any floating dtype: not a fault there
                kc = self.to_cache(k, wrong_dtype=True)
            else:
                kc, expected = self.to_cache(k, wrong_dtype=True), (ValueError, "k_new")
        return (lambda: c.update(layer, kc, vc, use)), expected

    def _advance(self, number: int, fault: str | None):
        c, plan = self.cache, self.plan
        if fault == "plan_closed":
            return (lambda: c.advance(self.closed)), (
                (ValueError, "plan") if self.closed is not None else (TypeError, "plan")
            )
        if plan is None or fault == "plan_none":
            return (lambda: c.advance(None)), (TypeError, "plan")
        if len(self.staged) < self.n_layers:
            return (lambda: c.advance(plan)), (ValueError, "plan")
        return (lambda: c.advance(plan)), None

    def _truncate(self, number: int, fault: str | None):
        c, n = self.cache, self.length
        calls = {
            None: (lambda: c.truncate(number % (n + 1)), None),
            "too_long": (lambda: c.truncate(n + 1 + number), (ValueError, "length")),
            "negative": (lambda: c.truncate(-1), (ValueError, "length")),
            "float": (lambda: c.truncate(1.5), (TypeError, "length")),
        }
        self.truncate_to = number % (n + 1)
        return calls[fault]

    def _read(self, number: int, fault: str | None):
        layer = number % self.n_layers
        return (lambda: (self.cache.keys(layer), self.cache.values(layer))), None

    # ------------------------------------------------------------ what a valid call changed
    def after(self, kind: str, result: Any) -> None:
        if kind == "plan":  # an older open plan stays valid (the cache has not changed since)
            self.plan, self.staged = result, {}
        elif kind == "update":
            layer, k, v = self.update_args
            self.staged[layer] = (k, v)
            keys, values, mask = result
            if self.exact:
                want_k = np.concatenate([self.ref[layer][0], k], axis=1)
                want_v = np.concatenate([self.ref[layer][1], v], axis=1)
                np.testing.assert_array_equal(squeeze(keys), self.rounded(want_k))
                np.testing.assert_array_equal(squeeze(values), self.rounded(want_v))
            n_new, n_keys = k.shape[1], squeeze(keys).shape[1]
            if mask is not None:  # else the plain causal mask: these caches keep every position
                causal = np.arange(n_keys)[None, :] <= np.arange(n_new)[:, None] + n_keys - n_new
                np.testing.assert_array_equal(as_numpy(mask).reshape(n_new, n_keys).astype(bool), causal)
        elif kind == "advance":
            for layer, (k, v) in self.staged.items():
                pairs = zip(self.ref[layer], (k, v), strict=True)
                self.ref[layer] = [np.concatenate([r, x], axis=1) for r, x in pairs]
            self.closed, self.stale = self.plan, self.plan
            self.plan, self.staged = None, {}
        elif kind == "truncate":
            self.ref = [[r[:, : self.truncate_to] for r in layer] for layer in self.ref]
            self.stale, self.plan, self.staged = self.plan, None, {}

    def rounded(self, arr: np.ndarray) -> np.ndarray:
        """``arr`` as the cache stores it (float32 rounding in a float32 cache)."""
        return as_numpy(self.to_cache(arr))[0] if self.cache.batched else as_numpy(self.to_cache(arr))

    def check_committed(self) -> None:
        c = self.cache
        assert len(c) == self.length and c.host_lengths == [self.length]
        for layer in range(self.n_layers):
            keys, values = squeeze(c.keys(layer)), squeeze(c.values(layer))
            want_k, want_v = (self.rounded(r) for r in self.ref[layer])
            if self.exact:
                np.testing.assert_array_equal(keys, want_k)
                np.testing.assert_array_equal(values, want_v)
            else:  # int8: each element within half its quantisation step (and float rounding)
                k_bound, v_bound = (as_numpy(b) for b in c.error_bounds(layer))
                assert (np.abs(keys - want_k) <= k_bound * (1 + 1e-5) + 1e-6).all()
                assert (np.abs(values - want_v) <= v_bound * (1 + 1e-5) + 1e-6).all()


def squeeze(x: Any) -> np.ndarray:
    """A cache's answer as float64 [H, S, K] (a torch cache's batch of one dropped)."""
    arr = as_numpy(x)
    return arr[0] if arr.ndim == 4 else arr
