"""Student's t distribution: its CDF and quantiles, with the standard library only.

    F(t; ν) = 1 − ½ · I_x(ν/2, ½)   for t ≥ 0, where x = ν / (ν + t²)
    F(−t; ν) = 1 − F(t; ν)

``I_x(a, b)`` is the regularized incomplete beta function, evaluated by its continued fraction
(modified Lentz); the quantile inverts F by bisection. Accurate to about 1e-10, which is far
below what a benchmark's interval needs.
"""

from __future__ import annotations

import math

_EPS = 1e-15
_TINY = 1e-300


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 500):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + numerator / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            break
    return h


def regularized_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b) for 0 ≤ x ≤ 1."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1) / (a + b + 2):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, 1 - x) / b


def cdf(t: float, df: float) -> float:
    """P(T ≤ t) for T with ``df`` degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0 (got {df})")
    tail = 0.5 * regularized_beta(df / (df + t * t), df / 2, 0.5)
    return 1.0 - tail if t >= 0 else tail


def quantile(p: float, df: float) -> float:
    """The t with P(T ≤ t) = p."""
    if not 0 < p < 1:
        raise ValueError(f"p must be in (0, 1) (got {p})")
    if p < 0.5:
        return -quantile(1 - p, df)
    lo, hi = 0.0, 1.0
    while cdf(hi, df) < p:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2
