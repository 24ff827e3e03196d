"""The two-arm knee fit: exact on data with two arms, honest about data without, and the
recorded runs' knees that the Rooflines chapter states."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtutor.measure import knee, recorded

BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]


@settings(max_examples=50, deadline=None)
@given(
    fixed=st.floats(1e-5, 1.0),
    kn=st.floats(2.0, 500.0),
)
def test_recovers_exact_two_arms(fixed, kn):
    per = fixed / kn
    fit = knee.fit_knee(BATCHES, [fixed + b * per for b in BATCHES])
    assert fit.knee == pytest.approx(kn, rel=1e-6)
    assert fit.fixed_s == pytest.approx(fixed, rel=1e-6)
    assert fit.rms_rel_error < 1e-9 and fit.fits
    assert fit.time(kn) == pytest.approx(2 * fixed, rel=1e-6)  # at the knee, twice the flat arm


def test_resolved_needs_both_arms_in_the_sweep():
    per = 1e-3 / 100  # knee at B = 100
    small = [1, 2, 4, 8, 16, 32, 64]  # never reaches 2 x the knee
    assert not knee.fit_knee(small, [1e-3 + b * per for b in small]).resolved
    assert knee.fit_knee(BATCHES, [1e-3 + b * per for b in BATCHES]).resolved
    flat = knee.fit_knee(BATCHES, [1e-3] * len(BATCHES))
    assert flat.knee == math.inf and not flat.resolved
    assert flat.as_dict()["knee"] is None


def test_a_curve_without_two_arms_does_not_fit():
    # grows as sqrt(B): no flat part, no linear part
    fit = knee.fit_knee(BATCHES, [1e-3 * math.sqrt(b) for b in BATCHES])
    assert not fit.fits and not fit.resolved


@pytest.mark.parametrize(
    "batches, times, match",
    [
        ([1, 2], [1.0, 2.0], "at least 3"),
        ([1, 2, 4], [1.0, 2.0], "one time per batch"),
        ([1, 2, 2], [1.0, 2.0, 3.0], "distinct"),
        ([0, 2, 4], [1.0, 2.0, 3.0], "ints >= 1"),
        ([1, 2, 4], [1.0, -2.0, 3.0], "positive finite"),
        ([1, 2, 4], [1.0, math.nan, 3.0], "positive finite"),
    ],
)
def test_errors(batches, times, match):
    with pytest.raises(ValueError, match=match):
        knee.fit_knee(batches, times)


def test_sweep_helpers_errors():
    with pytest.raises(ValueError, match="points"):
        knee.sweep_times({"x": 1})
    with pytest.raises(ValueError, match="was not measured"):
        knee.time_ratio(recorded.cpu_bench()["decode_sweep"], 3)


def test_recorded_h200_knee_matches_the_prediction():
    # the chapter's claims on the recorded H200 run (commit 6d8bdd6): two arms fit, the knee
    # lies within 10% of the roofline's prediction from the same run's ceilings
    d = recorded.h200_run()["bench"]["decode_sweep"]
    fit = knee.fit_sweep(d)
    assert fit.resolved
    assert fit.knee == pytest.approx(d["predicted_ridge_batch"], rel=0.10)
    assert knee.time_ratio(d, 64) < 1.5


def test_recorded_cpu_sweep_has_no_clean_knee():
    d = recorded.cpu_bench()["decode_sweep"]
    fit = knee.fit_sweep(d)
    assert not fit.fits and not fit.resolved
    assert knee.time_ratio(d, 8) > 1.5  # the roofline: about 1


def test_growth_ratios():
    times = ((1, 1.0), (2, 1.5), (4, 3.0))
    sweep = {"points": [{"batch_size": b, "time": {"median_s": t}} for b, t in times]}
    assert knee.growth_ratios(sweep) == [1.5, 2.0]
    assert knee.time_ratio(sweep, 4, 2) == 2.0


def test_decode_plots_of_the_recorded_runs():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kvtutor.plots import perf as perf_plots

    cpu = recorded.cpu_bench()["decode_sweep"]
    gpu = recorded.h200_run()["bench"]["decode_sweep"]
    fig = perf_plots.plot_decode_batch(gpu)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert any(label.startswith("measured knee B = 211") for label in labels)
    assert "flat, then linear" not in fig._suptitle.get_text()
    fig_cpu = perf_plots.plot_decode_batch(cpu)  # no knee resolved: no knee line
    assert not any("measured knee" in x for x in fig_cpu.axes[0].get_legend_handles_labels()[1])
    fig2 = perf_plots.plot_decode_growth({"cpu": cpu, "h200": gpu})
    assert len(fig2.axes[0].lines) == 3
    with pytest.raises(ValueError, match="at least one"):
        perf_plots.plot_decode_growth({})
    plt.close("all")
