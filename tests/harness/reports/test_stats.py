"""The bootstrap verdict on synthetic data where the answer is known."""
import numpy as np
import pytest

from harness.reports.compare import stats


def normal(mean, sd, n, seed):
    return np.random.default_rng(seed).normal(mean, sd, n)


def test_clear_shift_down_is_faster_and_ci_covers_the_true_difference():
    a, b = normal(100, 10, 400, 1), normal(90, 10, 400, 2)
    d = stats.bootstrap_difference(a, b, "median")
    assert stats.verdict(d) == stats.FASTER
    assert d.ci_low < -10 < d.ci_high  # true difference of medians: -10
    assert d.ci_high < 0
    assert d.rel_ci_low < -0.10 < d.rel_ci_high  # true relative change: -10 %


def test_clear_shift_up_is_slower_and_a_regression_beyond_the_threshold():
    a, b = normal(100, 10, 400, 3), normal(120, 10, 400, 4)
    d = stats.bootstrap_difference(a, b, "mean")
    assert stats.verdict(d) == stats.SLOWER
    assert d.ci_low < 20 < d.ci_high
    assert stats.is_regression(d, pct=10)
    assert not stats.is_regression(d, pct=30)  # +20 % is not worse than +30 %


def test_same_distribution_is_no_significant_difference():
    a, b = normal(100, 10, 300, 15), normal(100, 10, 300, 16)
    d = stats.bootstrap_difference(a, b, "median")
    assert stats.verdict(d) == stats.NO_DIFFERENCE
    assert d.ci_low < 0 < d.ci_high
    assert not stats.is_regression(d, pct=0)


def test_same_distribution_is_called_different_about_5_percent_of_the_time():
    trials = 60
    false_alarms = sum(
        stats.bootstrap_difference(normal(100, 10, 200, 1000 + s), normal(100, 10, 200, 2000 + s),
                                   resamples=600, seed=s).significant
        for s in range(trials)
    )
    assert false_alarms / trials <= 0.12


def test_higher_is_better_flips_the_words():
    a, b = normal(50, 5, 300, 7), normal(60, 5, 300, 8)  # tokens/s went up
    d = stats.bootstrap_difference(a, b)
    assert stats.verdict(d, lower_is_better=False) == stats.FASTER
    assert not stats.is_regression(d, pct=5, lower_is_better=False)
    d_down = stats.bootstrap_difference(b, a)
    assert stats.verdict(d_down, lower_is_better=False) == stats.SLOWER
    assert stats.is_regression(d_down, pct=5, lower_is_better=False)


def test_a_small_real_shift_in_noise_is_no_regression_at_a_larger_threshold():
    a, b = normal(100, 10, 2000, 9), normal(103, 10, 2000, 10)
    d = stats.bootstrap_difference(a, b, "mean")
    assert stats.verdict(d) == stats.SLOWER  # 3 % is real here (n=2000) …
    assert not stats.is_regression(d, pct=5)  # … but under the 5 % gate


def test_ci_covers_the_true_difference_about_95_percent_of_the_time():
    covered = 0
    trials = 60
    for seed in range(trials):
        a, b = normal(10, 2, 120, 100 + seed), normal(11, 2, 120, 200 + seed)
        d = stats.bootstrap_difference(a, b, "mean", resamples=600, seed=seed)
        covered += d.ci_low <= 1.0 <= d.ci_high
    assert covered / trials >= 0.85


def test_seeded_and_percentile_statistics():
    a, b = normal(1, 0.1, 200, 11), normal(1.2, 0.1, 200, 12)
    assert stats.bootstrap_difference(a, b, "p90", seed=3) == stats.bootstrap_difference(a, b, "p90", seed=3)
    d = stats.bootstrap_difference(a, b, "p90")
    assert d.baseline == pytest.approx(np.percentile(a, 90))
    assert stats.verdict(d) == stats.SLOWER


def test_too_few_values_give_no_verdict_and_nan_is_dropped():
    d = stats.bootstrap_difference([1.0, float("nan"), None], [2.0, 3.0, 4.0])
    assert d.n_baseline == 1 and stats.verdict(d) == stats.NOT_ENOUGH_DATA
    assert not stats.is_regression(d, pct=0)
    empty = stats.bootstrap_difference([], [])
    assert empty.baseline is None and stats.verdict(empty) == stats.NOT_ENOUGH_DATA


def test_unknown_statistic_is_an_error():
    with pytest.raises(ValueError, match="unknown statistic"):
        stats.stat_function("mode")
