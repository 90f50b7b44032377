"""A new nightly against the nightlies before it: a prediction interval on log figures.

A nightly's figure for one point is the geometric mean of its repeats. Repeats made back to back
share the machine's state of that hour (its clocks, its neighbours, its thermal band), so their
spread says nothing of the spread between nightlies; the spread *of earlier nightlies* does.
With the logs x₁ … x_n of the n earlier nightlies (mean m, sd s) and the new nightly's log y:

    PI(1 − α)  = m ± t(1 − α/2, n − 1) · s · √(1 + 1/n)
    T          = (y − m) / (s · √(1 + 1/n))            Student's t with n − 1 degrees of freedom
    p_worse    = 1 − F_t(T; n − 1)  for a figure where lower is better (F_t(T) where higher is)

(the prediction interval for one new value from a normal sample). It is used only
with at least :data:`MIN_NIGHTLIES` earlier nightlies.

With fewer, a stored noise floor stands in for s: σ_apart, the sd of ln s of runs made at
different times of an A/A experiment (:mod:`harness.gate.noise`), with its own degrees of
freedom ν (2k − 1 for k blocks); m is then the mean of the nightlies there are (one, for a
baseline sweep). σ_apart is the spread of single runs made apart, which is at least a nightly
mean's, so the interval is on the safe side.

With neither there is no noise to judge by: the point is inconclusive, never a regression.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from harness.gate import student_t

MIN_NIGHTLIES = 5  # earlier nightlies for the history's own spread (n − 1 = 4 degrees of freedom)
ALPHA = 0.05
HISTORY = "history"
FLOOR = "noise floor"


@dataclass(frozen=True)
class Prediction:
    """Where the new value falls against what came before (all ratios are to exp(m))."""

    source: str  # HISTORY or FLOOR
    n: int  # earlier nightlies
    mean: float  # exp(m): the earlier nightlies' geometric mean
    sd_log: float  # s, or σ_apart
    df: float  # degrees of freedom of sd_log
    value: float  # the new nightly's figure
    low: float  # the (1 − α) prediction interval, as values of the figure
    high: float
    p_worse: float  # one-sided p-value of "no worse than before"
    lower_is_better: bool
    alpha: float = ALPHA

    @property
    def change(self) -> float:
        """value / mean − 1: the change of the figure, signed as it moved."""
        return self.value / self.mean - 1

    @property
    def worse(self) -> float:
        """How much worse the new value is (a fraction; negative when better)."""
        ratio = self.value / self.mean
        return ratio - 1 if self.lower_is_better else 1 / ratio - 1

    @property
    def outside(self) -> bool:
        """The new value lies outside the prediction interval on the worse side."""
        return self.value > self.high if self.lower_is_better else self.value < self.low

    def describe(self) -> str:
        spread = (
            f"{self.n} earlier nightlies, sd {self.sd_log * 100:.1f}%"
            if self.source == HISTORY
            else f"{self.n} earlier nightl{'y' if self.n == 1 else 'ies'} with the noise floor's "
            f"σ_apart {self.sd_log * 100:.1f}%"
        )
        return (
            f"{self.change * 100:+.1f}% against {self.mean:.4g}; "
            f"{(1 - self.alpha) * 100:g}% prediction interval [{self.low:.4g}, {self.high:.4g}] from {spread}"
        )


def _logs(values: Sequence[float]) -> list[float]:
    if not values or any(not math.isfinite(v) or v <= 0 for v in values):
        raise ValueError("figures must be finite and > 0 to take their logarithm")
    return [math.log(v) for v in values]


def _predict(
    source: str, earlier: Sequence[float], sd: float, df: float, new: float, lower_is_better: bool, alpha: float
) -> Prediction:
    logs, (y,) = _logs(earlier), _logs([new])
    n = len(logs)
    m = sum(logs) / n
    se = sd * math.sqrt(1 + 1 / n)
    t = student_t.quantile(1 - alpha / 2, df)
    if se > 0:
        tail = student_t.cdf((y - m) / se, df)
        p_worse = 1 - tail if lower_is_better else tail
    else:
        p_worse = 0.0 if (y > m if lower_is_better else y < m) else 1.0
    return Prediction(
        source, n, math.exp(m), sd, df, new, math.exp(m - t * se), math.exp(m + t * se), p_worse, lower_is_better, alpha
    )


def from_history(earlier: Sequence[float], new: float, lower_is_better: bool, alpha: float = ALPHA) -> Prediction:
    """The prediction from the earlier nightlies' own spread (at least :data:`MIN_NIGHTLIES`)."""
    if len(earlier) < MIN_NIGHTLIES:
        raise ValueError(f"a prediction from the history needs {MIN_NIGHTLIES} earlier nightlies (got {len(earlier)})")
    logs = _logs(earlier)
    m = sum(logs) / len(logs)
    sd = math.sqrt(sum((x - m) ** 2 for x in logs) / (len(logs) - 1))
    return _predict(HISTORY, earlier, sd, len(logs) - 1, new, lower_is_better, alpha)


def from_floor(
    earlier: Sequence[float], new: float, sd_apart: float, df: float, lower_is_better: bool, alpha: float = ALPHA
) -> Prediction:
    """The prediction with a noise floor's σ_apart (ν = ``df``) for the spread between nightlies."""
    if sd_apart <= 0 or df <= 0:
        raise ValueError(f"a noise floor needs σ_apart > 0 and degrees of freedom > 0 (got {sd_apart}, {df})")
    return _predict(FLOOR, earlier, sd_apart, df, new, lower_is_better, alpha)


def nightlies_needed(have: int) -> Optional[int]:
    """How many more nightlies the history needs to judge by its own spread (None: enough)."""
    return None if have >= MIN_NIGHTLIES else MIN_NIGHTLIES - have
