"""Is run B faster or slower than run A? Bootstrap confidence intervals and a verdict.

The comparison is of one statistic ``s`` (median by default; or mean, or a percentile
``p90``…) of per-request values (TTFT, TPOT, E2E… one value per completed request):

- difference   d = s(B) − s(A)                      (B: the candidate, A: the baseline)
- relative     r = s(B) / s(A) − 1
- bootstrap    resample A and B independently, with replacement, each at its own size,
               R times (seeded): d*_i = s(B*_i) − s(A*_i), r*_i = s(B*_i) / s(A*_i) − 1
- 95 % CI      the percentile interval [q_2.5 %(d*), q_97.5 %(d*)] (and the same for r*)
- verdict      "no significant difference" when the CI of d contains 0; otherwise
               "faster" or "slower" by the sign of d and whether lower is better
               (latencies: lower is better; tokens/s: higher is better)
- regression   the candidate is worse by more than PCT % (r > PCT/100 for latencies,
               r < −PCT/100 for rates) AND its CI excludes 0 on the worse side

The bootstrap treats requests as independent draws, which a run's requests only
approximately are (requests that queue together are correlated). Repeated runs, each
one sample, are the stricter test; this one catches what one run pair can show.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

FASTER = "faster"
SLOWER = "slower"
NO_DIFFERENCE = "no significant difference"
NOT_ENOUGH_DATA = "not enough data"

MIN_SAMPLES = 3  # fewer values on either side: no verdict
DEFAULT_RESAMPLES = 2000
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Difference:
    """Candidate minus baseline for one statistic, with bootstrap percentile intervals."""

    stat: str
    baseline: Optional[float]
    candidate: Optional[float]
    diff: Optional[float]
    ci_low: Optional[float]
    ci_high: Optional[float]
    rel: Optional[float]
    rel_ci_low: Optional[float]
    rel_ci_high: Optional[float]
    n_baseline: int
    n_candidate: int
    confidence: float = CONFIDENCE

    @property
    def significant(self) -> bool:
        """True when the CI of the difference excludes 0."""
        if self.ci_low is None or self.ci_high is None:
            return False
        return self.ci_low > 0 or self.ci_high < 0


def stat_function(stat: str) -> Callable[[np.ndarray], np.ndarray]:
    """``median`` | ``mean`` | ``pNN`` → a function of a (R, n) array giving R values (row-wise)."""
    if stat == "median":
        return lambda a: np.median(a, axis=-1)
    if stat == "mean":
        return lambda a: np.mean(a, axis=-1)
    if stat.startswith("p") and stat[1:].replace(".", "", 1).isdigit() and 0 <= float(stat[1:]) <= 100:
        q = float(stat[1:])
        return lambda a: np.percentile(a, q, axis=-1)
    raise ValueError(f"unknown statistic '{stat}': use median, mean or pNN (e.g. p90)")


def clean(values: Sequence[float]) -> np.ndarray:
    """The finite values as a float array (None and NaN dropped)."""
    arr = np.asarray([v for v in values if v is not None], dtype=float)
    return arr[np.isfinite(arr)]


def bootstrap_difference(
    baseline: Sequence[float],
    candidate: Sequence[float],
    stat: str = "median",
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> Difference:
    """d = s(B) − s(A) and r = s(B)/s(A) − 1 with bootstrap percentile CIs (see module doc)."""
    fn = stat_function(stat)
    a, b = clean(baseline), clean(candidate)
    if a.size < MIN_SAMPLES or b.size < MIN_SAMPLES:
        sa = float(fn(a)) if a.size else None
        sb = float(fn(b)) if b.size else None
        diff = sb - sa if sa is not None and sb is not None else None
        return Difference(stat, sa, sb, diff, None, None, None, None, None, int(a.size), int(b.size), confidence)
    rng = np.random.default_rng(seed)
    boot_a = _resampled_stat(a, fn, resamples, rng)
    boot_b = _resampled_stat(b, fn, resamples, rng)
    sa, sb = float(fn(a)), float(fn(b))
    alpha = (1 - confidence) / 2
    d_star = boot_b - boot_a
    lo, hi = np.quantile(d_star, [alpha, 1 - alpha])
    rel = rel_lo = rel_hi = None
    if sa != 0 and np.all(boot_a != 0):
        r_star = boot_b / boot_a - 1
        rel = sb / sa - 1
        rel_lo, rel_hi = (float(x) for x in np.quantile(r_star, [alpha, 1 - alpha]))
    return Difference(stat, sa, sb, sb - sa, float(lo), float(hi), rel, rel_lo, rel_hi, int(a.size), int(b.size), confidence)


def _resampled_stat(x: np.ndarray, fn, resamples: int, rng: np.random.Generator, max_cells: int = 4_000_000) -> np.ndarray:
    """s(x*) for ``resamples`` bootstrap resamples of x, in blocks of at most max_cells values."""
    out = np.empty(resamples)
    block = max(1, max_cells // x.size)
    for start in range(0, resamples, block):
        stop = min(resamples, start + block)
        idx = rng.integers(0, x.size, size=(stop - start, x.size))
        out[start:stop] = fn(x[idx])
    return out


def verdict(d: Difference, lower_is_better: bool = True) -> str:
    """faster | slower | no significant difference | not enough data (CI of d contains 0 → no difference)."""
    if d.ci_low is None or d.ci_high is None or d.diff is None:
        return NOT_ENOUGH_DATA
    if not d.significant:
        return NO_DIFFERENCE
    improved = d.diff < 0 if lower_is_better else d.diff > 0
    return FASTER if improved else SLOWER


def worse_by(d: Difference, lower_is_better: bool = True) -> Optional[float]:
    """How much worse the candidate is, as a fraction of the baseline (negative: better)."""
    if d.rel is None:
        return None
    return d.rel if lower_is_better else -d.rel


def is_regression(d: Difference, pct: float, lower_is_better: bool = True) -> bool:
    """Worse by more than ``pct`` percent AND the CI excludes 0 on the worse side."""
    worse = worse_by(d, lower_is_better)
    if worse is None or verdict(d, lower_is_better) != SLOWER:
        return False
    return worse * 100 > pct
