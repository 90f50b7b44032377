"""Change points in a series of runs: E-divisive means (Matteson and James, 2014) with a
permutation test.

For a segment ``z[0:n]`` split at τ into ``X = z[0:τ]`` (m = τ values) and ``Y = z[τ:n]``
(k = n − τ values), the energy distance of the two parts (α = 1) is

    Ê(τ) = 2/(m·k) · Σᵢ Σⱼ |Xᵢ − Yⱼ|  −  C(m,2)⁻¹ · Σ_{i<i'} |Xᵢ − Xᵢ'|  −  C(k,2)⁻¹ · Σ_{j<j'} |Yⱼ − Yⱼ'|

and the split statistic is Q̂(τ) = m·k/(m + k) · Ê(τ). Ê is 0 in expectation when both parts
come from one distribution and grows with any difference between them (mean, spread, shape);
the m·k/(m+k) weight makes a split with more evidence on both sides win.

**Recursive bisection.** The series is one segment at first. For each segment, the candidate
is τ̂ = argmax Q̂(τ) over min_segment ≤ τ ≤ n − min_segment; it is tested, and when significant
the segment is cut at τ̂ and both halves are searched again, until no segment holds a
significant candidate.

**Significance (permutation test).** Shuffling a segment destroys any change in it while
keeping its values: with R shuffles (each its own draw of the same seeded generator),
p = (1 + #{r : max_τ Q̂_r(τ) ≥ Q̂(τ̂)}) / (R + 1). The maximum over τ is taken in every shuffle
too, so the search for the best split is paid for: in a series without a change, a segment
is cut with probability ≤ p_value. Shuffles stop early once more than p_value·(R + 1) of them
have beaten the observed statistic (the candidate can no longer pass), so noise costs few.

Defaults: ``min_segment=2`` (a change two runs before the end can be found: the alert rule
needs two bad runs, see :mod:`harness.history.alerts`), ``p_value=0.01``, ``permutations=199``
(the smallest p a test can give is 1/(R+1) = 0.005). Cost: O(R·n²) per tested segment, the
pairwise distances of n values (about 0.1 s for 300 points when a change is found).

Each reported change point gives the index of the first value after the change, the means of
the segments either side of it in the final segmentation, the relative change
after/before − 1, and the p-value of its test.

Why our own: neither library that does this installs beside the engines, and ours holds its
false-alarm rate. benchmarks/changepoints.py runs them on the same seeded series (100 per row,
30–60 runs, CV 2–5 %, 0, 1 or 2 steps of ±5–20 %), 2026-12-05, 2-core x86_64:

- MongoDB's signal-processing-algorithms 2.1.6 (the same E-divisive means with a permutation
  test) pins numpy < 2, setuptools < 71 and gevent: installing it here would downgrade numpy
  2.3 to 1.26. At our p 0.01 and R 199 it found 96.0 % / 87.5 % of 1 / 2 steps (ours 94.0 % /
  83.0 %) but cut 4 of 100 pure-noise series (ours 1, as p 0.01 promises), 0.07 false change
  points per series with 1 step (ours 0.04); 8–30 ms per series (ours 1.4–15 ms).
- Apache Otava 0.8 (E-divisive with a t-test, Hunter's sliding windows) pins numpy 2.2 and
  scipy 1.16 and pulls cloud clients; at its defaults it finds as many steps as ours with about
  3 times the false change points (docs/history.md has its rows).
- ruptures (PELT, binary segmentation…) needs a penalty or the number of change points, and
  gives no p-value: the alert rule would need its own calibration on top.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MIN_SEGMENT = 2
P_VALUE = 0.01
PERMUTATIONS = 199
BATCH = 16  # shuffles evaluated at once (their distance matrices side by side)


@dataclass(frozen=True)
class ChangePoint:
    """A change before ``index`` (the first value of the new segment)."""

    index: int
    mean_before: float
    mean_after: float
    p_value: float

    @property
    def relative_change(self) -> float:
        """mean_after / mean_before − 1 (NaN when the mean before is 0)."""
        return self.mean_after / self.mean_before - 1 if self.mean_before else math.nan


def split_statistics(batch: np.ndarray, min_segment: int) -> np.ndarray:
    """Q̂(τ) for each row of ``batch`` (shape r × n) and each τ in [min_segment, n − min_segment].

    From the 2-D prefix sums P[a, b] = Σ_{i<a, j<b} |zᵢ − zⱼ|: the within-X sum is P[τ,τ]/2, the
    between sum P[τ,n] − P[τ,τ], the within-Y sum (P[n,n] − 2·P[τ,n] + P[τ,τ])/2.
    """
    r, n = batch.shape
    dist = np.abs(batch[:, :, None] - batch[:, None, :])
    prefix = np.zeros((r, n + 1, n + 1))
    prefix[:, 1:, 1:] = dist.cumsum(axis=1).cumsum(axis=2)
    tau = np.arange(min_segment, n - min_segment + 1)
    m, k = tau.astype(float), (n - tau).astype(float)
    corner = prefix[:, tau, tau]
    row = prefix[:, tau, n]
    total = prefix[:, n, n][:, None]
    between = row - corner
    within_x = corner / 2
    within_y = (total - 2 * row + corner) / 2
    pairs_x = np.maximum(m * (m - 1) / 2, 1.0)  # a part of one value has no pairs (its term is 0)
    pairs_y = np.maximum(k * (k - 1) / 2, 1.0)
    energy = 2 * between / (m * k) - within_x / pairs_x - within_y / pairs_y
    return m * k / (m + k) * energy


def best_split(segment: np.ndarray, min_segment: int) -> tuple[int, float]:
    """(τ̂, Q̂(τ̂)) of a segment: the split with the largest statistic."""
    q = split_statistics(segment[None, :], min_segment)[0]
    best = int(np.argmax(q))
    return best + min_segment, float(q[best])


def permutation_p_value(
    segment: np.ndarray, observed: float, min_segment: int, permutations: int, p_value: float, rng: np.random.Generator
) -> float:
    """p of the segment's best split against R shuffles of it (see the module docstring);
    stops early once the candidate cannot reach ``p_value``."""
    allowed = math.floor(p_value * (permutations + 1) + 1e-9) - 1  # exceedances a significant test may have
    beaten = done = 0
    tolerance = 1e-12 * max(1.0, abs(observed))  # ties (constant segments) count as beaten
    while done < permutations:
        size = min(BATCH, permutations - done)
        shuffled = np.stack([rng.permutation(segment) for _ in range(size)])
        best = split_statistics(shuffled, min_segment).max(axis=1)
        beaten += int(np.count_nonzero(best >= observed - tolerance))
        done += size
        if beaten > allowed:
            return (1 + beaten) / (1 + done)
    return (1 + beaten) / (1 + permutations)


def change_points(
    values: Sequence[float] | np.ndarray,
    *,
    min_segment: int = MIN_SEGMENT,
    p_value: float = P_VALUE,
    permutations: int = PERMUTATIONS,
    seed: int = 0,
) -> list[ChangePoint]:
    """The significant change points of ``values`` in order (E-divisive means; module docstring)."""
    series = np.asarray(values, dtype=float)
    if series.ndim != 1 or not np.all(np.isfinite(series)):
        raise ValueError("change_points takes a 1-D series of finite numbers")
    if min_segment < 1 or not 0 < p_value < 1 or permutations < 1:
        raise ValueError("min_segment >= 1, 0 < p_value < 1 and permutations >= 1 are required")
    rng = np.random.default_rng(seed)
    found: dict[int, float] = {}  # index → p of its test
    pending = [(0, series.size)]
    while pending:
        start, end = pending.pop()
        if end - start < 2 * min_segment:
            continue
        segment = series[start:end]
        tau, observed = best_split(segment, min_segment)
        p = permutation_p_value(segment, observed, min_segment, permutations, p_value, rng)
        if p <= p_value:
            found[start + tau] = p
            pending += [(start + tau, end), (start, start + tau)]
    return describe(series, found)


def describe(series: np.ndarray, found: dict[int, float]) -> list[ChangePoint]:
    """Each change point with the means of its neighbouring segments in the final segmentation."""
    bounds = [0, *sorted(found), series.size]
    out = []
    for before, at, after in zip(bounds, bounds[1:], bounds[2:]):
        out.append(ChangePoint(at, float(series[before:at].mean()), float(series[at:after].mean()), found[at]))
    return out


def segment_means(values: Sequence[float] | np.ndarray, points: Sequence[ChangePoint]) -> list[float]:
    """Each value's segment mean (a step line through the series)."""
    series = np.asarray(values, dtype=float)
    bounds = [0, *(cp.index for cp in points), series.size]
    out: list[float] = []
    for start, end in zip(bounds, bounds[1:]):
        out += [float(series[start:end].mean())] * (end - start)
    return out
