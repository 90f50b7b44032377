"""Student's t distribution for the gate's intervals: its CDF and quantiles, from scipy's
``stdtr`` and ``stdtrit`` (the functions behind ``scipy.stats.t.cdf`` and ``t.ppf``).

From ``scipy.special`` rather than ``scipy.stats``: every ``python -m harness`` imports this
module, and ``scipy.stats`` takes 0.76 s to import here against 0.25 s for ``scipy.special``
(the suite starts a few hundred such processes). Kept as two functions so that callers
(``intervals.py``, ``noise.py``) state what they need and check their arguments the same way;
degrees of freedom may be fractional (Welch–Satterthwaite).
"""

from __future__ import annotations

from scipy.special import stdtr, stdtrit


def cdf(t: float, df: float) -> float:
    """P(T ≤ t) for T with ``df`` degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0 (got {df})")
    return float(stdtr(df, t))


def quantile(p: float, df: float) -> float:
    """The t with P(T ≤ t) = p."""
    if not 0 < p < 1:
        raise ValueError(f"p must be in (0, 1) (got {p})")
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0 (got {df})")
    return float(stdtrit(df, p))
