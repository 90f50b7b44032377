"""Intervals of a run statistic's ratio: paired t, two-level bootstrap, within-run, and their coverage."""

import math

import numpy as np
import pytest

from harness.gate import intervals, student_t
from harness.gate.bootstrap import stat_function


def test_student_t_matches_tables():
    assert student_t.quantile(0.975, 1) == pytest.approx(12.706, abs=1e-3)
    assert student_t.quantile(0.975, 4) == pytest.approx(2.776, abs=1e-3)
    assert student_t.quantile(0.95, 9) == pytest.approx(1.833, abs=1e-3)
    assert student_t.cdf(0.0, 7) == pytest.approx(0.5)
    assert student_t.quantile(0.025, 4) == pytest.approx(-2.776, abs=1e-3)
    assert student_t.quantile(0.975, 7.5) == pytest.approx(2.3330, abs=1e-3)  # Welch's df are fractional
    assert student_t.quantile(0.975, intervals.NORMAL_DF) == pytest.approx(1.959964, abs=1e-6)  # the normal's
    assert student_t.cdf(student_t.quantile(0.9, 3.5), 3.5) == pytest.approx(0.9, abs=1e-12)
    with pytest.raises(ValueError, match="degrees of freedom"):
        student_t.quantile(0.9, 0)


def test_paired_t_by_hand():
    a, b = [100.0, 110.0, 90.0], [105.0, 112.0, 99.0]
    d = np.log(b) - np.log(a)
    i = intervals.paired_t(a, b)
    se = d.std(ddof=1) / math.sqrt(3)
    assert i.method == intervals.PAIRED_T and i.blocks == 3
    assert i.ratio == pytest.approx(math.exp(d.mean()))
    assert i.high == pytest.approx(math.exp(d.mean() + student_t.quantile(0.975, 2) * se))
    assert i.lower_bound == pytest.approx(math.exp(d.mean() - student_t.quantile(0.95, 2) * se))
    assert 0 < i.p_greater < 0.5


def test_paired_t_refuses_unpaired_or_single_block():
    with pytest.raises(ValueError, match="as many"):
        intervals.paired_t([1, 2], [1])
    with pytest.raises(ValueError, match="2 blocks"):
        intervals.paired_t([1], [1])


def _runs(rng, n_runs, scale, sd_run=0.05, n=40):
    return [rng.lognormal(math.log(scale) + rng.normal(0, sd_run), 0.3, n) for _ in range(n_runs)]


def test_paired_t_coverage_on_aa():
    """Identical arms with run-level noise: the 95 % interval excludes 1 in about 5 % of cases."""
    rng = np.random.default_rng(1)
    misses = 0
    for _ in range(400):
        a = rng.lognormal(0, 0.05, 5)
        b = rng.lognormal(0, 0.05, 5)
        i = intervals.paired_t(a, b)
        misses += not (i.low <= 1 <= i.high)
    assert misses / 400 < 0.09


def test_two_level_bootstrap_holds_run_noise_the_within_run_interval_does_not():
    rng = np.random.default_rng(2)
    median = stat_function("median")
    wide_misses = narrow_misses = 0
    for seed in range(40):
        a, b = _runs(rng, 4, 1.0, sd_run=0.08), _runs(rng, 4, 1.0, sd_run=0.08)
        two = intervals.two_level_bootstrap(a, b, median, resamples=400, seed=seed)
        one = intervals.two_level_bootstrap(a[:1], b[:1], median, resamples=400, seed=seed)
        assert two.method == intervals.RUN_BOOTSTRAP and one.method == intervals.WITHIN_RUN
        assert not one.decides
        wide_misses += not (two.low <= 1 <= two.high)
        narrow_misses += not (one.low <= 1 <= one.high)
    assert narrow_misses > wide_misses


def test_run_metric_bootstrap_uses_run_values():
    i = intervals.two_level_bootstrap(
        [], [], None, a_values=[10.0, 11.0, 10.5], b_values=[12.0, 12.5, 11.8], resamples=500
    )
    assert i.method == intervals.RUN_BOOTSTRAP and i.ratio > 1.1 and i.low > 1


def test_widened_by_noise_floor():
    rng = np.random.default_rng(3)
    within = intervals.two_level_bootstrap(
        _runs(rng, 1, 1.0), _runs(rng, 1, 1.0), stat_function("median"), resamples=500
    )
    wide = intervals.widened_by_noise_floor(within, 0.05)
    assert wide.method == intervals.WITHIN_RUN_WITH_FLOOR and wide.decides
    assert wide.low < within.low and wide.high > within.high
    assert wide.ratio == within.ratio
    # a floor measured from few runs is uncertain itself: Student's t, wider the fewer the runs
    from_five = intervals.widened_by_noise_floor(within, 0.05, dof=5)
    from_many = intervals.widened_by_noise_floor(within, 0.05, dof=10_000)
    assert from_five.high > from_many.high > within.high and from_five.low < from_many.low
    assert from_many.high == pytest.approx(wide.high, rel=1e-3)
    # ν = ν_σ (se² / 2σ²)² (Welch–Satterthwaite: the within-run part is known far better)
    half_width = math.log(from_five.high / from_five.ratio)
    se = math.log(wide.high / wide.ratio) / 1.959964
    nu = 5 * (se**2 / (2 * 0.05**2)) ** 2
    assert half_width / se == pytest.approx(student_t.quantile(0.975, nu), rel=1e-3)
    assert 1.96 < half_width / se < 2.5706  # between the normal and t(0.975, 5)


def test_repeats_made_apart_are_widened_by_the_spread_between_sessions():
    """Each side's repeats ran back to back: the bootstrap holds their spread, not the time
    between the sides; a floor adds σ_time = √(σ_apart² − σ_run²)."""
    from harness.gate.noise import FigureNoise

    rng = np.random.default_rng(4)
    both = intervals.two_level_bootstrap(_runs(rng, 3, 1.0), _runs(rng, 3, 1.0), stat_function("median"), resamples=500)
    assert both.method == intervals.RUN_BOOTSTRAP
    floor = FigureNoise(sd_run=0.03, within_var=None, blocks=10, requests_per_run=50, sd_run_apart=0.05)
    sd_time, dof = floor.between_sessions()
    assert sd_time == pytest.approx(0.04) and dof == 19
    wide = intervals.widened_by_noise_floor(both, sd_time, dof, method=intervals.RUNS_WITH_FLOOR)
    assert wide.method == intervals.RUNS_WITH_FLOOR and wide.decides
    assert wide.low < both.low and wide.high > both.high and wide.ratio == both.ratio
    # no σ_apart kept, or none beyond the runs side by side: nothing to add
    assert FigureNoise(0.03, None, 10, 50).between_sessions() is None
    assert FigureNoise(0.05, None, 10, 50, sd_run_apart=0.04).between_sessions() is None
