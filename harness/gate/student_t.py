"""Student's t distribution for the gate's intervals: its CDF and quantiles, from scipy's
``stdtr`` and ``stdtrit`` (the functions behind ``scipy.stats.t.cdf`` and ``t.ppf``).

From ``scipy.special`` rather than ``scipy.stats``, and imported when first called: every
``python -m harness`` imports this module, but only a sweep, a gate or a compare computes an
interval. ``scipy.stats`` takes 0.76 s to import here and ``scipy.special`` 0.2 s, a tenth of a
plain run's start (``benchmarks/process_start.py``). Kept as two functions so that callers
(``intervals.py``, ``noise.py``) state what they need and check their arguments the same way;
degrees of freedom may be fractional (Welch–Satterthwaite).
"""

from __future__ import annotations


def cdf(t: float, df: float) -> float:
    """P(T ≤ t) for T with ``df`` degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0 (got {df})")
    from scipy.special import stdtr

    return float(stdtr(df, t))


def quantile(p: float, df: float) -> float:
    """The t with P(T ≤ t) = p."""
    if not 0 < p < 1:
        raise ValueError(f"p must be in (0, 1) (got {p})")
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0 (got {df})")
    from scipy.special import stdtrit

    return float(stdtrit(df, p))
