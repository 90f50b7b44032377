"""Student's t distribution for the gate's intervals: its CDF and quantiles, from ``scipy.stats.t``.

Kept as two functions so that callers (``intervals.py``, ``noise.py``) state what they need and
check their arguments the same way; degrees of freedom may be fractional (Welch–Satterthwaite).
"""

from __future__ import annotations

from scipy.stats import t as _t


def cdf(t: float, df: float) -> float:
    """P(T ≤ t) for T with ``df`` degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0 (got {df})")
    return float(_t.cdf(t, df))


def quantile(p: float, df: float) -> float:
    """The t with P(T ≤ t) = p."""
    if not 0 < p < 1:
        raise ValueError(f"p must be in (0, 1) (got {p})")
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0 (got {df})")
    return float(_t.ppf(p, df))
