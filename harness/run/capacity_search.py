"""The capacity search's logic, apart from any engine: which load to run next, how many times,
and when to stop. :func:`search` is given ``run_once(load, probe, run)``, one measured run at a
load (harness/run/slo_search.py backs it with the engine; tests with a function).

**A probe** is one load, run again until its verdict against the SLO is clear
(:mod:`harness.gate.slo_verdict`): after each of its runs from the ``min_runs``-th on, the
verdict is taken at level α / L, L = max_runs_per_probe − min_runs + 1 looks (Bonferroni over
the looks, as the gate's sequential blocks: stopping at the first clear look keeps α per limit).
A run that failed or was stopped saturated ends the probe at once: misses. At the cap of
``max_runs_per_probe`` runs, still unclear: cannot tell.

**The loads**::

    grow:    x₀ = low,  x_{j+1} = min(2 x_j, high)   while x_j does not miss and x_j < high
    hi = the lowest load that misses
    lo = the highest load below hi that meets
    points = lo < c₁ < … < c_m < hi                the cannot-tell loads c between them
    a gap (a, b) of neighbouring points is open while (b − a) / b > tolerance (b − a > 1 for
    integer loads: concurrency); the widest open gap (relatively) is bisected at (a + b) / 2
    (⌊(a + b) / 2⌋), until none is open or the budget ends

The capacity lies in [lo, hi]; the cannot-tell loads lie inside. A cannot-tell load below lo
(the load drifted, or the machine did) is out of order: the answer names it. Without lo (nothing met) the
points start at the lowest cannot-tell load, without hi (nothing missed up to ``high``) they end
at the highest.

**The budget**: at most ``max_runs`` runs in all, ``max_probes`` loads, and, with
``max_time_s``, no run is begun that would end past it (a run is expected to take the mean of
the runs so far). A probe the budget cuts short is "cannot tell" (``cut_short``); the search says
what ended it (``stopped_by``) when a gap was still open or a probe still unclear.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from harness.config import SLOSearchConfig
from harness.gate.slo_verdict import CANNOT_TELL, MEETS, MISSES, LimitBounds, limit_bounds, verdict


@dataclass(frozen=True)
class RunOutcome:
    """One run of a probe, as the verdict needs it."""

    margins: dict[str, float]  # d = ln(q / limit) per SLO limit (metric key)
    ok: bool  # completed: not failed, interrupted nor stopped saturated
    # σ_time per limit from the noise floor of the load's configuration (none stored: absent)
    sigma_time: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)  # what the record keeps of the run


RunOnce = Callable[[float, int, int], RunOutcome]  # (load, probe number, run number) → outcome


@dataclass(frozen=True)
class Settings:
    low: float
    high: Optional[float]
    tolerance: float
    integer: bool
    min_runs: int = 2
    max_runs_per_probe: int = 5
    max_runs: int = 40
    max_time_s: Optional[float] = None
    max_probes: int = 10
    alpha: float = 0.05

    @classmethod
    def of(cls, cfg: SLOSearchConfig) -> Settings:
        return cls(
            cfg.low,
            cfg.high,
            cfg.tolerance,
            cfg.over == "concurrency",
            cfg.min_runs,
            cfg.max_runs_per_probe,
            cfg.max_runs,
            cfg.max_time_s,
            cfg.max_probes,
            cfg.alpha,
        )

    @property
    def alpha_per_look(self) -> float:
        return self.alpha / (self.max_runs_per_probe - self.min_runs + 1)

    def load(self, value: float) -> float:
        """A load as it is run: an integer for concurrency, else 6 decimals."""
        return float(int(value)) if self.integer else round(value, 6)

    def apart(self, a: float, b: float) -> bool:
        """Is the gap (a, b) still open (module doc)?"""
        return b - a > 1 if self.integer else (b - a) / b > self.tolerance


@dataclass
class Probe:
    index: int
    load: float
    runs: list[RunOutcome] = field(default_factory=list)
    verdict: Optional[str] = None  # None while it runs
    bounds: list[LimitBounds] = field(default_factory=list)
    cut_short: bool = False  # the budget ended it before its verdict was clear


@dataclass
class Search:
    """The search as it stands: the probes with a verdict, the one running, the budget spent."""

    settings: Settings
    probes: list[Probe] = field(default_factory=list)
    current: Optional[Probe] = None
    runs: int = 0
    wall_s: float = 0.0
    stopped_by: Optional[str] = None  # max_runs | max_time_s | max_probes: what ended it early

    def loads(self, kind: str) -> list[float]:
        return sorted(p.load for p in self.probes if p.verdict == kind)

    @property
    def capacity_high(self) -> Optional[float]:
        """The lowest load that misses."""
        misses = self.loads(MISSES)
        return misses[0] if misses else None

    @property
    def capacity_low(self) -> Optional[float]:
        """The highest load below capacity_high that meets."""
        hi = self.capacity_high
        meets = [x for x in self.loads(MEETS) if hi is None or x < hi]
        return meets[-1] if meets else None

    def inside(self) -> list[float]:
        """The cannot-tell loads between capacity_low and capacity_high."""
        lo, hi = self.capacity_low, self.capacity_high
        return [x for x in self.loads(CANNOT_TELL) if (lo is None or x > lo) and (hi is None or x < hi)]

    def out_of_order(self) -> list[float]:
        """The cannot-tell loads below capacity_low: verdicts out of order (time's noise)."""
        lo = self.capacity_low
        return [x for x in self.loads(CANNOT_TELL) if lo is not None and x < lo]

    def open_gap(self) -> Optional[tuple[float, float]]:
        """The widest gap still open between neighbouring points (module doc), or None."""
        points = [x for x in (self.capacity_low, *self.inside(), self.capacity_high) if x is not None]
        gaps = [(a, b) for a, b in zip(points, points[1:]) if self.settings.apart(a, b)]
        return max(gaps, key=lambda g: (g[1] - g[0]) / g[1], default=None)

    @property
    def tolerance_reached(self) -> bool:
        return self.stopped_by is None


def search(
    settings: Settings,
    run_once: RunOnce,
    on_change: Callable[[Search], None] = lambda s: None,
    clock: Callable[[], float] = time.monotonic,
) -> Search:
    """Probe loads until the capacity is within the tolerance or the budget ends (module doc);
    ``on_change`` sees the search after each run and each verdict."""
    state = Search(settings)
    start = clock()
    run_s: list[float] = []

    def spent() -> Optional[str]:
        if state.runs >= settings.max_runs:
            return "max_runs"
        if settings.max_time_s is not None:
            expected = sum(run_s) / len(run_s) if run_s else 0.0
            if clock() - start + expected > settings.max_time_s:
                return "max_time_s"
        return None

    def probe(load: float) -> Optional[Probe]:
        if len(state.probes) >= settings.max_probes:
            state.stopped_by = "max_probes"
            return None
        p = state.current = Probe(len(state.probes) + 1, settings.load(load))
        while p.verdict is None:
            state.stopped_by = spent()
            if state.stopped_by:
                p.cut_short = True
                break
            began = clock()
            p.runs.append(run_once(p.load, p.index, len(p.runs) + 1))
            run_s.append(clock() - began)
            state.runs += 1
            state.wall_s = clock() - start
            p.verdict, p.bounds = judge(p, settings)
            if p.verdict is None:
                on_change(state)
        state.current = None
        if not p.runs:
            return None
        if p.verdict is None:
            p.verdict = CANNOT_TELL
        state.probes.append(p)
        state.wall_s = clock() - start
        on_change(state)
        return p

    x = settings.load(settings.low)
    while (p := probe(x)) is not None and not state.stopped_by and p.verdict != MISSES:
        if settings.high is not None and x >= settings.high:
            break
        x = settings.load(2 * x if settings.high is None else min(2 * x, settings.high))
    while not state.stopped_by and (gap := state.open_gap()) is not None:
        if probe((gap[0] + gap[1]) / 2) is None:
            break
    state.wall_s = clock() - start
    return state


def judge(p: Probe, settings: Settings) -> tuple[Optional[str], list[LimitBounds]]:
    """The probe's verdict after its runs so far, or None while another run is needed."""
    ok = [r for r in p.runs if r.ok]
    bounds = _bounds(ok, settings.alpha_per_look) if len(ok) >= 2 else []
    if len(ok) < len(p.runs):
        return MISSES, bounds
    if len(p.runs) < settings.min_runs:
        return None, bounds
    found = verdict(bounds)
    if found == CANNOT_TELL and len(p.runs) < settings.max_runs_per_probe:
        return None, bounds
    return found, bounds


def _bounds(runs: list[RunOutcome], alpha: float) -> list[LimitBounds]:
    sigma = runs[0].sigma_time
    return [limit_bounds(k, [r.margins[k] for r in runs], alpha, sigma.get(k)) for k in runs[0].margins]
