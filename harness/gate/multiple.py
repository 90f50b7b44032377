"""Many comparisons at once: Benjamini–Hochberg control of the false discovery rate.

A 40-point sweep gated on 3 metrics is 120 tests; at α = 5 % each, about 6 identical points
would be flagged. Benjamini–Hochberg at level q: sort the m p-values p_(1) ≤ … ≤ p_(m), find
the largest i with p_(i) ≤ i · q / m, and reject the hypotheses of p_(1)…p_(i). The expected
share of false discoveries among the rejections is then at most q (for independent or
positively dependent tests, as the points of one sweep on one machine are).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional


def benjamini_hochberg(p_values: Sequence[Optional[float]], q: float = 0.05) -> list[bool]:
    """Rejected or not, in the order given; None (no test) is never rejected."""
    if not 0 < q < 1:
        raise ValueError(f"q must be in (0, 1) (got {q})")
    tested = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    m = len(tested)
    cutoff = 0
    for rank, (p, _) in enumerate(tested, start=1):
        if p <= rank * q / m:
            cutoff = rank
    rejected = [False] * len(p_values)
    for _, i in tested[:cutoff]:
        rejected[i] = True
    return rejected
