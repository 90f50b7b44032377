"""A load's verdict against the SLO from several runs: meets, misses, or cannot tell.

Per SLO limit k, over the n runs of a load, with d_ik = ln(q_ik / L_k) the log margin of run i
(:mod:`harness.gate.slo_margins`)::

    d̄_k  = mean_i d_ik,   s_k = sd_i d_ik
    se_k² = s_k² / n + σ_time,k²              σ_time from the configuration's noise floor
                                              (harness/gate/noise.py between_sessions), 0 without one
    low_k  = d̄_k − t(1 − α, n − 1) · se_k     the one-sided (1 − α) bounds of the mean
    high_k = d̄_k + t(1 − α, n − 1) · se_k

σ_time² is the spread between sessions made apart beyond that of runs side by side: the runs of
one search share its time (machine state, clocks, the one engine load), so that part of the
noise does not average out over its runs and is added to the variance of their mean whole.

- **meets**: high_k < 0 for every limit (each quantile below its limit, beyond noise);
- **misses**: low_k > 0 for some limit (a quantile above its limit, beyond noise);
- **cannot tell**: neither.

A run whose d is +∞ (more than 1 − a of its requests failed) makes its limit's bounds +∞: the
load misses, as it does when a run failed or was stopped saturated (the caller's rule).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from harness.gate import student_t

MEETS = "meets"
MISSES = "misses"
CANNOT_TELL = "cannot tell"
VERDICTS = (MEETS, MISSES, CANNOT_TELL)


@dataclass(frozen=True)
class LimitBounds:
    """One limit's d̄ and one-sided bounds over a load's runs (logs of q / limit)."""

    limit: str  # the metric key: ttft_s, tpot_s, e2e_s
    runs: int
    mean: float
    sd: float
    sigma_time: Optional[float]  # None: no noise floor stored for the configuration
    low: float
    high: float

    def ratios(self) -> tuple[float, float, float]:
        """q / limit: the geometric mean over the runs and its one-sided bounds."""
        return _exp(self.mean), _exp(self.low), _exp(self.high)


def _exp(x: float) -> float:
    return math.inf if x > 700 else math.exp(x)  # exp overflows beyond ~709


def limit_bounds(limit: str, d: Sequence[float], alpha: float, sigma_time: Optional[float] = None) -> LimitBounds:
    """d̄ and its one-sided (1 − α) bounds (module doc); needs at least 2 runs."""
    n = len(d)
    if n < 2:
        raise ValueError(f"the bounds of a mean need at least 2 runs (got {n})")
    if any(math.isinf(x) and x > 0 for x in d):
        return LimitBounds(limit, n, math.inf, math.nan, sigma_time, math.inf, math.inf)
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    se = math.sqrt(sd**2 / n + (sigma_time or 0.0) ** 2)
    t = student_t.quantile(1 - alpha, n - 1)
    return LimitBounds(limit, n, mean, sd, sigma_time, mean - t * se, mean + t * se)


def verdict(bounds: Sequence[LimitBounds]) -> str:
    """meets, misses or cannot tell (module doc)."""
    if any(b.low > 0 for b in bounds):
        return MISSES
    if bounds and all(b.high < 0 for b in bounds):
        return MEETS
    return CANNOT_TELL
