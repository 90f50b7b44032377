"""The nightly alert rule: two consecutive bad runs after a change point.

For one point and one figure, over its untainted runs x₁ … x_n (oldest first; tainted runs are
left out of the change points and of the rule):

1. change points c₁ < … < c_k by E-divisive means (:mod:`harness.history.changepoints`);
2. the last change point at or before the last two runs, c = max{cᵢ : cᵢ ≤ n − 2}
   (0-based: the first run of the new segment); no such change point → no alert;
3. the reference r = the mean of the segment before c, x[c_prev : c];
4. a run is **bad** when it is worse than r by more than the margin δ:
   x > r·(1 + δ) for a figure where lower is better (latencies), x < r·(1 − δ) where higher
   is better (throughputs) — the metric registry's ``lower_is_better``;
5. **alert** when the last two runs are both bad, and c is recent: n − c ≤ ``max_age``.

One bad night never pages anyone (noise, a busy runner); a regression that stays pages from
its second night, and keeps paging for ``max_age`` runs (a week of nightlies by default)
unless fixed; after that its segment is the new normal. The detector needs history to call a
change from two runs: with 40 runs before a 15 % step at 3 % noise it finds it at the second
run after it about 9 times in 10, at the third 19 in 20; with 20 before, about half at the
second run and nearly always at the third.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import numpy as np

from harness.history.changepoints import ChangePoint, change_points

MARGIN = 0.05  # δ: at least 3× the A/A spread of a run's median on quiet runners
CONSECUTIVE = 2
MAX_AGE = 7


@dataclass(frozen=True)
class AlertRule:
    margin: float = MARGIN
    consecutive: int = CONSECUTIVE
    max_age: int = MAX_AGE


DEFAULT_RULE = AlertRule()  # the rule of every history command that is given none


@dataclass(frozen=True)
class SeriesVerdict:
    """The rule applied to one series: its change points, and the alert (None when quiet)."""

    points: list[ChangePoint]
    bad: list[bool]  # per untainted run: worse than its segment's reference by more than the margin
    alert: Optional[Alert]


@dataclass(frozen=True)
class Alert:
    change_index: int  # index (among untainted runs) of the first run after the change point
    reference: float  # mean of the segment before it
    latest: tuple[float, ...]  # the bad runs' values, oldest first
    relative_change: float  # mean of the latest runs / reference − 1


def is_bad(value: float, reference: float, margin: float, lower_is_better: bool) -> bool:
    if lower_is_better:
        return value > reference * (1 + margin)
    return value < reference * (1 - margin)


def evaluate(
    values: Sequence[float],
    lower_is_better: bool,
    rule: AlertRule = DEFAULT_RULE,
    points: Optional[list[ChangePoint]] = None,
) -> SeriesVerdict:
    """The rule over one series of untainted values (see the module docstring)."""
    series = np.asarray(values, dtype=float)
    found = change_points(series) if points is None else points
    bounds = [0, *(cp.index for cp in found)]
    n = series.size
    # each run's reference: the mean of the segment before its own segment (none in the first)
    bad = [False] * n
    for i, start in enumerate(bounds[1:], start=1):
        reference = float(series[bounds[i - 1] : start].mean())
        end = bounds[i + 1] if i + 1 < len(bounds) else n
        for j in range(start, end):
            bad[j] = is_bad(float(series[j]), reference, rule.margin, lower_is_better)
    alert = None
    recent = [b for b in bounds[1:] if b <= n - rule.consecutive]
    if recent and n >= rule.consecutive:
        c = recent[-1]
        before = bounds[bounds.index(c) - 1]
        reference = float(series[before:c].mean())
        latest = series[n - rule.consecutive :]
        if n - c <= rule.max_age and all(is_bad(float(v), reference, rule.margin, lower_is_better) for v in latest):
            alert = Alert(c, reference, tuple(float(v) for v in latest), float(latest.mean() / reference - 1))
    return SeriesVerdict(found, bad, alert)
