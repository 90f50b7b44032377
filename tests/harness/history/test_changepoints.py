"""E-divisive means with a permutation test, on seeded synthetic series."""

from __future__ import annotations

import numpy as np
import pytest

from harness.history.changepoints import change_points, segment_means, split_statistics


def noisy(seed: int, n: int, cv: float = 0.03) -> np.ndarray:
    return 100 * (1 + cv * np.random.default_rng(seed).standard_normal(n))


@pytest.mark.parametrize("seed", range(10))
def test_finds_a_15_percent_step_where_it_is(seed):
    values = noisy(seed, 40)
    values[22:] *= 1.15
    found = change_points(values, seed=seed)
    assert len(found) >= 1
    best = min(found, key=lambda cp: abs(cp.index - 22))
    assert abs(best.index - 22) <= 2
    assert best.relative_change == pytest.approx(0.15, abs=0.04)
    assert best.p_value <= 0.01


def test_finds_nothing_in_pure_noise_in_at_least_19_of_20_series():
    clean = sum(not change_points(noisy(seed, 50), seed=seed) for seed in range(20))
    assert clean >= 19


def test_two_steps_and_the_segment_means():
    values = np.r_[noisy(1, 20), noisy(2, 20) * 1.2, noisy(3, 20)]
    found = change_points(values)
    assert [abs(cp.index - at) <= 2 for cp, at in zip(found, (20, 40))] == [True, True]
    means = segment_means(values, found)
    assert means[0] == pytest.approx(values[: found[0].index].mean())
    assert means[-1] == pytest.approx(values[found[1].index :].mean())


def test_the_statistic_matches_its_formula():
    """Q̂(τ) = m·k/(m+k) · (2/(mk) ΣΣ|x−y| − C(m,2)⁻¹ Σ|x−x'| − C(k,2)⁻¹ Σ|y−y'|), by brute force."""
    z = np.random.default_rng(0).normal(size=9)
    q = split_statistics(z[None, :], 2)[0]
    for tau, value in zip(range(2, 8), q):
        x, y = z[:tau], z[tau:]
        m, k = len(x), len(y)
        between = np.abs(x[:, None] - y[None, :]).sum()
        wx = np.abs(x[:, None] - x[None, :]).sum() / 2
        wy = np.abs(y[:, None] - y[None, :]).sum() / 2
        energy = 2 * between / (m * k) - wx / (m * (m - 1) / 2) - wy / (k * (k - 1) / 2)
        assert value == pytest.approx(m * k / (m + k) * energy)


def test_constant_and_short_series_and_bad_input():
    assert change_points([5.0] * 30) == []
    assert change_points([1.0, 2.0, 3.0]) == []
    with pytest.raises(ValueError):
        change_points([1.0, float("nan"), 2.0])


def test_same_seed_same_answer():
    values = noisy(4, 45)
    values[30:] *= 1.08
    assert change_points(values, seed=3) == change_points(values, seed=3)
