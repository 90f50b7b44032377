"""compare's verdict words from a ratio's interval: faster, slower, no significant difference,
and within-run only for one run against one run (harness/reports/compare/stats.py)."""

import numpy as np

from harness.gate import intervals
from harness.gate.bootstrap import stat_function
from harness.reports.compare import stats


def _interval(ratio, lo, hi, method=intervals.RUN_BOOTSTRAP):
    return intervals.Interval(method, ratio, lo, hi, lo, hi, 0.05, 3, 3)


def test_words_follow_the_interval_and_the_better_side():
    assert stats.verdict(_interval(0.9, 0.85, 0.95)) == stats.FASTER
    assert stats.verdict(_interval(1.1, 1.05, 1.15)) == stats.SLOWER
    assert stats.verdict(_interval(1.1, 1.05, 1.15), lower_is_better=False) == stats.FASTER
    assert stats.verdict(_interval(1.0, 0.95, 1.05)) == stats.NO_DIFFERENCE


def test_one_run_against_one_claims_nothing_unless_widened_by_a_noise_floor():
    within = _interval(1.5, 1.4, 1.6, intervals.WITHIN_RUN)
    assert stats.verdict(within) == stats.WITHIN_RUN_ONLY
    assert stats.verdict(intervals.widened_by_noise_floor(within, 0.02)) == stats.SLOWER


def test_identical_runs_with_run_noise_are_rarely_called_different():
    """Three runs a side, each run's level moved by 5 %: the run-level interval calls identical
    configurations different in about 5 % of cases, not the third a request bootstrap would."""
    rng = np.random.default_rng(7)
    median = stat_function("median")
    called = 0
    trials = 60
    for seed in range(trials):
        sides = [[rng.lognormal(rng.normal(0, 0.05), 0.3, 60) for _ in range(3)] for _ in range(2)]
        i = intervals.two_level_bootstrap(sides[0], sides[1], median, resamples=400, seed=seed)
        called += stats.verdict(i) != stats.NO_DIFFERENCE
    assert called / trials <= 0.15
