"""Over-saturation stop for open-loop load points.

An open-loop point (sessions arrive on a schedule) past the engine's capacity builds a queue
that grows for as long as the point runs: the backlog (sessions that have arrived but not
finished, including those waiting for the driver's concurrency cap) rises steadily, and so
does the time to first token. :class:`SaturationDetector` recognises that trend from two
series the driver feeds it, so the point can end early and be marked saturated.

Times passed to the detector are seconds since the measured phase began.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Optional

import numpy as np

from harness.config import MIN_POINTS, SaturationConfig


def slope_t(t: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """Least-squares line y ≈ a + b·t: returns (a, b, b / SE(b)).

    b = Σ(t−t̄)(y−ȳ) / Σ(t−t̄)², SE(b) = √( Σ(y − a − b·t)² / (n − 2) / Σ(t−t̄)² ).
    A perfect fit (no residual) gives a t-statistic of ±∞ (or 0 when flat).
    """
    t_mean, y_mean = t.mean(), y.mean()
    dt, dy = t - t_mean, y - y_mean
    sxx = float(dt @ dt)
    if sxx <= 0.0:
        return y_mean, 0.0, 0.0
    b = float(dt @ dy) / sxx
    a = y_mean - b * t_mean
    resid = dy - b * dt
    sse = float(resid @ resid)
    scale = max(float(dy @ dy), 1e-300)
    if sse <= 1e-12 * scale:  # a perfect line: as significant as a slope can be
        return a, b, (math.copysign(math.inf, b) if b != 0.0 else 0.0)
    se = math.sqrt(sse / (len(t) - 2) / sxx)
    return a, b, b / se


class SaturationDetector:
    """Decides from the backlog and TTFT series whether an open-loop point is over-saturated.

    At each check (one per backlog sample), over the window W = [now − window_s, now], fit
    least-squares lines backlog(t) ≈ a_B + b_B·t and TTFT(t) ≈ a_T + b_T·t, each with its
    t-statistic τ = b / SE(b), SE(b) = √( SSE / (n − 2) / Σ(t − t̄)² ). The rule is

        R(now) =  backlog(now) ≥ min_backlog
                  and  n_B ≥ 5, b_B > 0, τ_B ≥ min_t                           (backlog rises)
                  and  n_T ≥ 5, b_T ≥ min_ttft_slope_s, b_T > 0, τ_T ≥ min_t    (TTFT rises)

    and the point is over-saturated at ``now`` iff  now ≥ min_s  and R held at every check in
    [now − hold_s, now]. backlog(now) is the latest sample, n the samples in W; a TTFT sample
    is stamped with the time its request finished.

    Why the two guards on top of the slope tests: consecutive samples of a queue are strongly
    correlated, so the textbook SE(b), which assumes independent residuals, is too small and
    τ alone is "significant" in a large share of windows of a queue well under capacity
    (a simulated M/M/c queue at 50 % load passes τ_B ≥ 2 in ~40 % of 10 s windows).
    The TTFT rate has a physical scale instead — a FIFO queue at load ρ > 1 has TTFT rising
    at 1 − 1/ρ s/s against finish time — and an excursion under capacity ends, so requiring
    the rule to persist for ``hold_s`` removes most of the rest.

    Cost: appends are O(1); :meth:`check` fits two lines over the window's samples with numpy
    (tens to a few thousand points), once per ``sample_interval_s``.
    """

    def __init__(self, cfg: SaturationConfig):
        self.cfg = cfg
        self._backlog: deque[tuple[float, float]] = deque()
        self._ttft: deque[tuple[float, float]] = deque()
        self._held_since: Optional[float] = None  # start of the current run of checks where R held

    def observe_backlog(self, t: float, backlog: int) -> None:
        """Backlog (sessions arrived, not finished) sampled at time ``t``."""
        self._backlog.append((t, float(backlog)))

    def observe_ttft(self, t: float, ttft_s: float) -> None:
        """TTFT of a request that finished (ok) at time ``t``."""
        self._ttft.append((t, ttft_s))

    def check(self, now: float) -> Optional[str]:
        """A one-line reason when the point is over-saturated at ``now``, else None.

        Call it once per backlog sample: the hold is counted across calls.
        """
        cfg = self.cfg
        start = now - cfg.window_s
        for series in (self._backlog, self._ttft):
            while series and series[0][0] < start:
                series.popleft()
        fits = self._rule()
        if fits is None:
            self._held_since = None
            return None
        if self._held_since is None:
            self._held_since = now
        if now < cfg.min_s or now - self._held_since < cfg.hold_s:
            return None
        (t0_b, t1_b, a_b, b_b), (t0_t, t1_t, a_t, b_t) = fits
        b_from, b_to = (max(0.0, a_b + b_b * x) for x in (t0_b, t1_b))
        t_from, t_to = (max(0.0, a_t + b_t * x) for x in (t0_t, t1_t))
        return (
            f"over-saturated: backlog grew from {b_from:.0f} to {b_to:.0f} sessions ({b_b:+.1f}/s) "
            f"and TTFT from {t_from:.2g} s to {t_to:.2g} s ({b_t:+.2g} s/s) "
            f"over the last {min(cfg.window_s, now):.3g} s"
        )

    def _rule(self):
        """R over the current window: the two fits (first t, last t, a, b) when it holds, else None."""
        cfg = self.cfg
        if not self._backlog or self._backlog[-1][1] < cfg.min_backlog:
            return None
        if len(self._backlog) < MIN_POINTS or len(self._ttft) < MIN_POINTS:
            return None
        tb, yb = np.array(self._backlog).T
        a_b, b_b, tau_b = slope_t(tb, yb)
        if not (b_b > 0 and tau_b >= cfg.min_t):
            return None
        tt, yt = np.array(self._ttft).T
        a_t, b_t, tau_t = slope_t(tt, yt)
        if not (b_t > 0 and b_t >= cfg.min_ttft_slope_s and tau_t >= cfg.min_t):
            return None
        return (tb[0], tb[-1], a_b, b_b), (tt[0], tt[-1], a_t, b_t)
