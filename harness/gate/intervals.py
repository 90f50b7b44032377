"""Confidence intervals for the ratio B / A of a run statistic, with the run as the unit.

Each run gives one value of a statistic ``s`` (TTFT p50, TPOT p90, output tokens/s…). B is the
candidate, A the baseline; all work is on logarithms, so a ratio's interval is symmetric in
log space and "2 % slower" means the same at every scale.

**Paired runs** (interleaved blocks: block j ran A once and B once, in random order)::

    d_j  = ln s(B_j) − ln s(A_j)                       j = 1…k
    d̄   = mean(d_j),   s_d = sd(d_j),   se = s_d / √k
    ratio          = exp(d̄)                            (geometric mean of the block ratios)
    two-sided CI   = exp(d̄ ± t(1 − α/2, k−1) · se)
    one-sided      = exp(d̄ − t(1 − α, k−1) · se),  exp(d̄ + t(1 − α, k−1) · se)
    p(B > A)       = 1 − F_t(d̄ / se; k−1)              (H0: ratio ≤ 1)

**Unpaired runs** (repeats, or runs from different times): a two-level bootstrap. Each side's
estimate is θ = mean over its runs of ln s(run). A replicate resamples the side's runs with
replacement, then each chosen run's requests with replacement, and recomputes θ*; the interval
is the percentile interval of exp(θ*_B − θ*_A), the one-sided bounds its α and 1 − α quantiles.
Run metrics (tokens/s) have no requests: only the runs are resampled.

**Repeats against repeats** (each side's runs made back to back, the sides at different times):
the bootstrap holds the spread of runs within a session, not between sessions. With a noise
floor, it is widened as below by σ_time² = max(σ_apart² − σ_run², 0), the spread the floor finds
between runs made apart beyond that of runs side by side.

**One run against one run** has no run-to-run spread in it: the interval resamples requests
only and is labelled ``within-run``. It holds the noise inside a run, not between runs (another
process, placement, clocks), so on its own it never decides a gate. When the noise floor σ of
the configuration is known (:mod:`harness.gate.noise`: σ_apart, the sd of ln s of runs made
at different times), it is widened to the spread a one-run comparison really has, with Student's
t at the Welch–Satterthwaite degrees of freedom, since σ is itself estimated from the A/A's
runs (ν_σ = 2k − 1 for k blocks)::

    se² = se_within² + 2 σ²,   ν = ν_σ · (se² / 2σ²)²,   bounds exp(ln ratio ± t(1 − α/2, ν) · se)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from harness.gate import student_t
from harness.gate.bootstrap import StatFunction, resampled_stat

ALPHA = 0.05
PAIRED_T = "paired-t"
RUN_BOOTSTRAP = "run-bootstrap"
WITHIN_RUN = "within-run"
WITHIN_RUN_WITH_FLOOR = "within-run + noise floor"
RUNS_WITH_FLOOR = "run-bootstrap + noise between sessions"

METHOD_TEXT = {
    PAIRED_T: "paired t on block log-ratios",
    RUN_BOOTSTRAP: "two-level bootstrap (runs, then requests)",
    WITHIN_RUN: "within-run only (requests resampled; run-to-run noise not included)",
    WITHIN_RUN_WITH_FLOOR: "within-run, widened by the measured noise floor",
    RUNS_WITH_FLOOR: "two-level bootstrap, widened by the noise floor's spread between sessions made apart",
}


@dataclass(frozen=True)
class Interval:
    """ratio = s(B) / s(A) with its (1 − α) two-sided interval and one-sided (1 − α) bounds."""

    method: str
    ratio: float
    low: float
    high: float
    lower_bound: float
    upper_bound: float
    alpha: float
    n_a: int  # runs of the baseline
    n_b: int  # runs of the candidate
    p_greater: Optional[float] = None  # one-sided p-value of "B > A" (H0: ratio ≤ 1)
    sd_log: Optional[float] = None  # paired: sd of d_j; unpaired: pooled sd of ln s between runs

    @property
    def decides(self) -> bool:
        """False for a within-run interval: it lacks the run-to-run noise."""
        return self.method != WITHIN_RUN

    @property
    def blocks(self) -> Optional[int]:
        return self.n_a if self.method == PAIRED_T else None


def _logs(values: Sequence[float]) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError("run statistics must be finite and > 0 to take their ratio")
    return np.log(arr)


def paired_t(a: Sequence[float], b: Sequence[float], alpha: float = ALPHA) -> Interval:
    """The paired t-interval on per-block log-ratios (module doc); a[j], b[j] ran in block j."""
    if len(a) != len(b):
        raise ValueError(f"paired runs need as many A runs as B runs (got {len(a)} and {len(b)})")
    if len(a) < 2:
        raise ValueError("a paired interval needs at least 2 blocks")
    d = _logs(b) - _logs(a)
    k = d.size
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    se = sd / math.sqrt(k)
    t2, t1 = student_t.quantile(1 - alpha / 2, k - 1), student_t.quantile(1 - alpha, k - 1)
    if se > 0:
        p_greater = 1 - student_t.cdf(mean / se, k - 1)
    else:
        p_greater = 0.0 if mean > 0 else 1.0
    return Interval(
        PAIRED_T,
        math.exp(mean),
        math.exp(mean - t2 * se),
        math.exp(mean + t2 * se),
        math.exp(mean - t1 * se),
        math.exp(mean + t1 * se),
        alpha,
        k,
        k,
        p_greater,
        sd,
    )


def two_level_bootstrap(
    a_runs: Sequence[np.ndarray],
    b_runs: Sequence[np.ndarray],
    fn: Optional[StatFunction],
    a_values: Optional[Sequence[float]] = None,
    b_values: Optional[Sequence[float]] = None,
    alpha: float = ALPHA,
    resamples: int = 2000,
    seed: int = 0,
) -> Interval:
    """Runs, then requests within runs, resampled (module doc).

    ``a_runs``/``b_runs``: each run's per-request values, with ``fn`` the statistic; for a run
    metric pass ``fn=None`` and the per-run values in ``a_values``/``b_values``."""
    rng = np.random.default_rng(seed)
    if fn is None:
        a_stats, b_stats = _logs(a_values or []), _logs(b_values or [])
        theta_a = _resample_runs(a_stats[None, :].repeat(resamples, axis=0), rng)
        theta_b = _resample_runs(b_stats[None, :].repeat(resamples, axis=0), rng)
        n_a, n_b = a_stats.size, b_stats.size
        point = float(b_stats.mean() - a_stats.mean())
        pooled = _pooled_sd([a_stats, b_stats])
    else:
        a_table = _replicate_table(a_runs, fn, resamples, rng)
        b_table = _replicate_table(b_runs, fn, resamples, rng)
        theta_a, theta_b = _resample_runs(a_table, rng), _resample_runs(b_table, rng)
        a_point = np.log([float(fn(np.asarray(r, dtype=float))) for r in a_runs])
        b_point = np.log([float(fn(np.asarray(r, dtype=float))) for r in b_runs])
        n_a, n_b = len(a_runs), len(b_runs)
        point = float(b_point.mean() - a_point.mean())
        pooled = _pooled_sd([a_point, b_point])
    diff = theta_b - theta_a
    lo2, hi2, lo1, hi1 = np.quantile(diff, [alpha / 2, 1 - alpha / 2, alpha, 1 - alpha])
    method = WITHIN_RUN if n_a == 1 and n_b == 1 else RUN_BOOTSTRAP
    p_greater = float(np.mean(diff <= 0))
    return Interval(
        method,
        math.exp(point),
        math.exp(lo2),
        math.exp(hi2),
        math.exp(lo1),
        math.exp(hi1),
        alpha,
        n_a,
        n_b,
        p_greater,
        pooled,
    )


def _replicate_table(
    runs: Sequence[np.ndarray], fn: StatFunction, resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """ln s(run*) for each run (columns) and replicate (rows): the requests level."""
    if not runs:
        raise ValueError("each side needs at least one run")
    cols = []
    for values in runs:
        x = np.asarray(values, dtype=float)
        if x.size == 0:
            raise ValueError("a run has no values for this metric")
        cols.append(np.log(np.maximum(resampled_stat(x, fn, resamples, rng), 1e-300)))
    return np.stack(cols, axis=1)


def _resample_runs(table: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """θ* per replicate: the mean of n runs drawn with replacement (the runs level), each drawn
    run contributing its replicate in that row (its requests level)."""
    resamples, n = table.shape
    picks = rng.integers(0, n, size=(resamples, n))
    return np.take_along_axis(table, picks, axis=1).mean(axis=1)


def _pooled_sd(groups: Sequence[np.ndarray]) -> Optional[float]:
    """The pooled within-group sd of ln s: the run-to-run spread (None with one run per side)."""
    dof = sum(g.size - 1 for g in groups)
    if dof <= 0:
        return None
    return math.sqrt(sum(float(((g - g.mean()) ** 2).sum()) for g in groups) / dof)


def widened_by_noise_floor(
    within: Interval, sd_run: float, dof: Optional[int] = None, method: str = WITHIN_RUN_WITH_FLOOR
) -> Interval:
    """An interval widened by a known sd of ln s per side, estimated with ``dof`` degrees of
    freedom (None: known exactly) (module doc): a within-run interval by σ_apart, or a bootstrap
    over each side's repeats (made back to back, so sharing their session's state) by the spread
    the floor finds between sessions, σ_time (:meth:`harness.gate.noise.FigureNoise.between_sessions`)."""
    se_within = (math.log(within.high) - math.log(within.low)) / (2 * _normal_quantile(1 - within.alpha / 2))
    floor_var = 2 * sd_run**2
    se = math.sqrt(se_within**2 + floor_var)
    df = dof * (se**2 / floor_var) ** 2 if dof and floor_var > 0 else NORMAL_DF
    t2, t1 = student_t.quantile(1 - within.alpha / 2, df), student_t.quantile(1 - within.alpha, df)
    mid = math.log(within.ratio)
    p_greater = 1 - student_t.cdf(mid / se, df) if se > 0 else (0.0 if mid > 0 else 1.0)
    return replace(
        within,
        method=method,
        low=math.exp(mid - t2 * se),
        high=math.exp(mid + t2 * se),
        lower_bound=math.exp(mid - t1 * se),
        upper_bound=math.exp(mid + t1 * se),
        p_greater=p_greater,
        sd_log=sd_run,
    )


NORMAL_DF = 1e9  # the t quantile with a huge df is the normal quantile to ~1e-7


def _normal_quantile(p: float) -> float:
    return student_t.quantile(p, NORMAL_DF)
