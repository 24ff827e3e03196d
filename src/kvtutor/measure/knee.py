"""The measured knee of a decode sweep: where step time stops being flat in the batch size.

A decode step for B sequences costs a part that every batch pays once (streaming the weights,
launching the kernels) and a part that each sequence adds (its arithmetic, its keys and values).
``fit_knee`` fits the two arms, t(B) = fixed + B x per_sequence, to the measured step times and
returns the batch where they are equal, ``fixed / per_sequence``: below it the step time is
mostly the shared part (flat in B, memory-bound), above it mostly the per-sequence part (linear in
B). It is the measured counterpart of ``costs.ridge_batch``, which puts the same equality
(FLOP time = byte time) on the cost model with the machine's ceilings.

The fit minimises the *relative* error of every point (each point weighs the same, whatever its
time), which keeps it linear and closed-form; ``KneeFit.rms_rel_error`` says how well two arms
describe the sweep, and ``KneeFit.resolved`` whether the sweep shows a knee at all.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["KneeFit", "fit_knee", "sweep_times", "fit_sweep", "time_ratio", "growth_ratios", "GOOD_FIT"]

#: the largest root-mean-square relative error at which two arms count as describing the sweep
GOOD_FIT = 0.10


@dataclass(frozen=True)
class KneeFit:
    """t(B) = fixed_s + B x per_sequence_s fitted to a sweep; ``knee`` = fixed_s / per_sequence_s."""

    fixed_s: float  # the part of a step every batch pays once
    per_sequence_s: float  # the part each sequence adds
    knee: float  # the batch where the two parts are equal (math.inf if the time never grows)
    rms_rel_error: float  # root-mean-square of (fit - measured) / measured over the points
    max_rel_error: float  # the worst point
    min_batch: int
    max_batch: int

    def time(self, batch_size: float) -> float:
        """The fitted step time at batch_size, in seconds."""
        return self.fixed_s + batch_size * self.per_sequence_s

    @property
    def fits(self) -> bool:
        """Two arms describe the sweep: rms relative error <= ``GOOD_FIT``."""
        return self.rms_rel_error <= GOOD_FIT

    @property
    def resolved(self) -> bool:
        """The sweep shows a knee: two arms fit it, and it reaches at least twice the knee on
        one side and at most half of it on the other (so both arms were measured)."""
        if not (self.fits and math.isfinite(self.knee)):
            return False
        return self.min_batch <= self.knee / 2 and 2 * self.knee <= self.max_batch

    def as_dict(self) -> dict[str, Any]:
        """Every field plus ``fits`` and ``resolved``: plain Python numbers (inf as None)."""
        out: dict[str, Any] = asdict(self)
        out["knee"] = None if math.isinf(self.knee) else self.knee
        out.update(fits=self.fits, resolved=self.resolved)
        return out


def _check_sweep(batches: Sequence[Any], times_s: Sequence[Any]) -> tuple[list[int], list[float]]:
    b, t = list(batches), list(times_s)
    if len(b) != len(t):
        raise ValueError(f"times_s: expected one time per batch size ({len(b)}), got {len(t)}")
    if len(b) < 3:
        raise ValueError(f"batches: expected at least 3 batch sizes to fit two arms, got {len(b)}")
    for x in b:
        if isinstance(x, bool) or not isinstance(x, numbers.Integral) or x < 1:
            raise ValueError(f"batches: expected ints >= 1, got {x!r}")
    if len(set(b)) != len(b):
        raise ValueError(f"batches: expected distinct batch sizes, got {b}")
    for x in t:
        if isinstance(x, bool) or not isinstance(x, numbers.Real) or not math.isfinite(x) or x <= 0:
            raise ValueError(f"times_s: expected positive finite times, got {x!r}")
    return [int(x) for x in b], [float(x) for x in t]


def fit_knee(batches: Sequence[int], times_s: Sequence[float]) -> KneeFit:
    """Step times at batch sizes -> the two-arm fit t(B) = fixed + B x
    per_sequence, and its knee.

    Least squares on the relative error: minimise
    sum(((fixed + B_i x per) - t_i) / t_i)^2, which is linear in (fixed, per),
    so the 2 x 2 normal equations give it exactly.

    The book shows this in "Rooflines: decode as the batch grows".
    """
    b, t = _check_sweep(batches, times_s)
    # rows (1 / t_i, B_i / t_i) . (fixed, per) ~ 1
    s11 = sum(1 / ti**2 for ti in t)
    s12 = sum(bi / ti**2 for bi, ti in zip(b, t, strict=True))
    s22 = sum(bi**2 / ti**2 for bi, ti in zip(b, t, strict=True))
    r1 = sum(1 / ti for ti in t)
    r2 = sum(bi / ti for bi, ti in zip(b, t, strict=True))
    det = s11 * s22 - s12**2
    fixed = (r1 * s22 - r2 * s12) / det
    per = (s11 * r2 - s12 * r1) / det
    if per <= 0:
        knee = math.inf
    elif fixed <= 0:
        knee = 0.0
    else:
        knee = fixed / per
    rel = [(fixed + bi * per) / ti - 1 for bi, ti in zip(b, t, strict=True)]
    return KneeFit(
        fixed_s=fixed,
        per_sequence_s=per,
        knee=knee,
        rms_rel_error=math.sqrt(sum(r * r for r in rel) / len(rel)),
        max_rel_error=max(abs(r) for r in rel),
        min_batch=min(b),
        max_batch=max(b),
    )


def sweep_times(decode: dict[str, Any]) -> tuple[list[int], list[float]]:
    """A decode sweep (``bench.run_decode_sweep``, live or recorded) -> (batch sizes, median times)."""
    if not isinstance(decode, dict) or "points" not in decode:
        raise ValueError(f"decode: expected a decode sweep with 'points', got {type(decode).__name__}")
    pts = decode["points"]
    return [p["batch_size"] for p in pts], [p["time"]["median_s"] for p in pts]


def fit_sweep(decode: dict[str, Any]) -> KneeFit:
    """``fit_knee`` on a decode sweep's median step times."""
    return fit_knee(*sweep_times(decode))


def time_ratio(decode: dict[str, Any], batch_size: int, base: int = 1) -> float:
    """Step time at batch_size over step time at base, in a decode sweep."""
    b, t = sweep_times(decode)
    by_b = dict(zip(b, t, strict=True))
    for x in (batch_size, base):
        if x not in by_b:
            raise ValueError(f"batch_size: {x} was not measured; the sweep has {b}")
    return by_b[batch_size] / by_b[base]


def growth_ratios(decode: dict[str, Any]) -> list[float]:
    """A decode sweep -> the step time at each batch size over the time at the one before it
    (with batches 1, 2, 4, ...: how much each doubling of B costs; 2.0 is time proportional to B)."""
    _, t = sweep_times(decode)
    return [t2 / t1 for t1, t2 in zip(t, t[1:], strict=False)]
