"""Time-shaped load: timed runs, stages and ramps (``workload.duration_s``, ``.stages``, ``.ramp``).

A schedule is a list of segments on the run's clock, each of a rate (open loop, requests/s)
or of a concurrency (closed loop, sessions in flight), constant or ramped:

- ``workload.duration_s`` alone: one segment, at ``workload.rate`` (open loop) or at
  ``workload.concurrency`` (closed loop, 1 when unset);
- ``workload.stages``: one segment per stage, each ``{duration_s, rate}`` or ``{duration_s, concurrency}``;
- ``workload.ramp``: ``{from, to, duration_s, shape: linear|exponential, of: rate|concurrency}``,
  then, when ``workload.duration_s`` is longer, a hold at ``to`` until it.

Open loop: arrivals are the configured arrival process at unit rate, u_k (u_0 = 0), mapped
through the inverse of the cumulative intensity, t_k = Λ⁻¹(u_k), Λ(t) = ∫₀ᵗ λ(s) ds (time
rescaling): a Poisson process stays Poisson (non-homogeneous, intensity λ), a gamma or constant
process keeps its gap shape in the rescaled time, and a constant rate gives the plain process.
Arrivals are generated until the schedule ends. Closed loop: the cap on sessions in flight
follows the schedule (:meth:`LoadSchedule.cap_steps`), and no session starts after its end.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from core.errors import ConfigError

RATE, CONCURRENCY = "rate", "concurrency"
SHAPES = ("linear", "exponential")
STAGE_KEYS = {"duration_s", RATE, CONCURRENCY}
RAMP_KEYS = {"from", "to", "duration_s", "shape", "of"}
# Closed loop, timed: sessions generated up front = max(the configured count, peak concurrency ×
# duration × this), at most TIMED_SESSIONS_MAX from the estimate (a session is assumed to take
# at least 1 / this seconds; a plan that runs out before the end is said in the log).
SESSIONS_PER_SLOT_S = 20.0
TIMED_SESSIONS_MAX = 20000


@dataclass(frozen=True)
class Segment:
    """A stretch of the schedule: ``value`` from ``first`` to ``last`` over [start_s, end_s)."""

    index: int
    start_s: float
    end_s: float
    first: float
    last: float
    shape: str = "constant"  # constant | linear | exponential

    @property
    def length(self) -> float:
        return self.end_s - self.start_s

    def value(self, t: float) -> float:
        x = min(max((t - self.start_s) / self.length, 0.0), 1.0)
        if self.shape == "exponential":
            return self.first * (self.last / self.first) ** x
        return self.first + (self.last - self.first) * x

    def integral(self) -> float:
        """∫ value dt over the whole segment."""
        a, b, d = self.first, self.last, self.length
        if self.shape == "exponential" and a != b:
            return a * d * (b / a - 1) / math.log(b / a)
        return (a + b) / 2 * d

    def inverse(self, u: float) -> float:
        """The time t in the segment where ∫ from start_s to t of value = u (0 ≤ u ≤ integral())."""
        a, b, d = self.first, self.last, self.length
        if a == b:
            return self.start_s + u / a
        if self.shape == "exponential":
            k = math.log(b / a) / d
            return self.start_s + math.log1p(u * k / a) / k
        slope = (b - a) / d  # a x + slope x² / 2 = u
        disc = a * a + 2 * slope * u
        return self.start_s + (math.sqrt(max(disc, 0.0)) - a) / slope

    def describe(self, kind: str) -> dict[str, Any]:
        out: dict[str, Any] = {"index": self.index, "start_s": round(self.start_s, 6), "end_s": round(self.end_s, 6)}
        first, last = (int(self.first), int(self.last)) if kind == CONCURRENCY else (self.first, self.last)
        out[kind] = first if self.shape == "constant" else {"from": first, "to": last, "shape": self.shape}
        return out


@dataclass(frozen=True)
class LoadSchedule:
    kind: str  # rate (open loop) | concurrency (closed loop)
    segments: tuple[Segment, ...]

    @property
    def duration_s(self) -> float:
        return self.segments[-1].end_s

    @property
    def peak(self) -> float:
        return max(max(s.first, s.last) for s in self.segments)

    def stage_of(self, t: float) -> int:
        """The stage a request started at ``t`` belongs to: the segment holding t; before 0 the
        first, at or after the end the last (a closed-loop chat's later turns)."""
        for s in self.segments:
            if t < s.end_s:
                return s.index
        return self.segments[-1].index

    def to_json(self) -> list[dict[str, Any]]:
        return [s.describe(self.kind) for s in self.segments]

    # --- open loop -------------------------------------------------------------------------

    def arrivals(self, rng: np.random.Generator, process: Any, burstiness: float) -> list[float]:
        """Arrival times (s) in [0, duration_s): the process at unit rate through Λ⁻¹."""
        total = sum(s.integral() for s in self.segments)
        units: list[float] = [0.0]
        chunk = max(16, int(total * 1.1) + 16)
        while units[-1] < total:
            gaps = process.gaps(rng, chunk, 1.0, burstiness)
            units.extend((units[-1] + np.cumsum(gaps)).tolist())
        out, seg, before = [], 0, 0.0  # before: Λ at the start of segment seg
        for u in units:
            if u >= total:
                break
            while seg < len(self.segments) - 1 and u >= before + self.segments[seg].integral():
                before += self.segments[seg].integral()
                seg += 1
            s = self.segments[seg]
            out.append(min(s.inverse(u - before), s.end_s))
        return out

    # --- closed loop ------------------------------------------------------------------------

    def cap_steps(self) -> list[tuple[float, int]]:
        """(time, cap) at each change of the cap, from 0: a ramped segment steps through every
        whole number between its ends, each from the time the ramp reaches it (rounded toward
        the start value: floor going up, ceil going down)."""
        steps: list[tuple[float, int]] = []
        for s in self.segments:
            a, b = int(round(s.first)), int(round(s.last))
            steps.append((s.start_s, a))
            if s.shape != "constant" and a != b:
                direction = 1 if b > a else -1
                for level in range(a + direction, b + direction, direction):
                    steps.append((self._time_at(s, level), level))
        out: list[tuple[float, int]] = []
        for t, cap in steps:  # drop repeats
            if out and out[-1][1] == cap:
                continue
            if out and out[-1][0] == t:
                out[-1] = (t, cap)
            else:
                out.append((t, cap))
        return out

    @staticmethod
    def _time_at(s: Segment, level: float) -> float:
        a, b, d = s.first, s.last, s.length
        x = math.log(level / a) / math.log(b / a) if s.shape == "exponential" else (level - a) / (b - a)
        return s.start_s + min(max(x, 0.0), 1.0) * d

    def sessions_needed(self, configured: int) -> int:
        """Closed loop: how many sessions to generate up front (see SESSIONS_PER_SLOT_S)."""
        estimate = sum(max(s.first, s.last) * s.length for s in self.segments) * SESSIONS_PER_SLOT_S
        return max(configured, min(int(math.ceil(estimate)), TIMED_SESSIONS_MAX))


def _number(key: str, value: Any, rule: str, ok) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or not ok(value):
        raise ConfigError(f"{key} must be {rule} (got {value!r})")
    return float(value)


def _whole(key: str, value: Any) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or value != value
        or value < 1
        or value != int(value)
    ):
        raise ConfigError(f"{key} must be a whole number >= 1 (got {value!r})")
    return int(value)


def _mapping(key: str, value: Any, example: str = "{duration_s: 60, rate: 1}") -> dict[str, Any]:
    if hasattr(value, "items"):
        return dict(value.items())
    raise ConfigError(f"{key} must be a mapping, e.g. {example} (got {value!r})")


def load_schedule(cfg: Any) -> Optional[LoadSchedule]:
    """The config's schedule, or None for a run of a count (no duration_s, stages or ramp).
    Bad settings raise one ConfigError line naming the key and what to do."""
    duration = getattr(cfg, "duration_s", None)
    stages = getattr(cfg, "stages", None)
    ramp = getattr(cfg, "ramp", None)
    rate = getattr(cfg, "rate", None)
    if duration is not None:
        duration = _number(
            "workload.duration_s", duration, "> 0 seconds, or null for a run of a count", lambda v: v > 0
        )
    if stages is not None and ramp is not None:
        raise ConfigError("set workload.stages or workload.ramp, not both (a ramp is one stage that changes)")
    if stages is not None:
        if duration is not None:
            raise ConfigError(
                "workload.duration_s and workload.stages are both set: the stages' durations make "
                "the run's; drop workload.duration_s"
            )
        return _stages(stages, rate)
    if ramp is not None:
        return _ramp(_mapping("workload.ramp", ramp, "{from: 1, to: 8, duration_s: 60}"), rate, duration)
    if duration is None:
        return None
    if rate is not None:
        return LoadSchedule(RATE, (Segment(0, 0.0, duration, float(rate), float(rate)),))
    cap = float(getattr(cfg, "concurrency", None) or 1)
    return LoadSchedule(CONCURRENCY, (Segment(0, 0.0, duration, cap, cap),))


def _stages(stages: Any, rate: Optional[float]) -> LoadSchedule:
    if isinstance(stages, (str, bytes)) or not hasattr(stages, "__len__") or len(stages) == 0:
        raise ConfigError(
            "workload.stages must be a non-empty list, e.g. '[{duration_s: 60, rate: 1}, "
            "{duration_s: 60, rate: 2}]' (or null)"
        )
    kinds, segments, t = set(), [], 0.0
    for i, raw in enumerate(stages):
        key = f"workload.stages[{i}]"
        stage = _mapping(key, raw)
        unknown = set(stage) - STAGE_KEYS
        if unknown:
            raise ConfigError(
                f"{key} has unknown keys {', '.join(sorted(unknown))}: a stage is {{duration_s, rate}} "
                "(open loop) or {duration_s, concurrency} (closed loop)"
            )
        if (RATE in stage) == (CONCURRENCY in stage):
            raise ConfigError(f"{key} needs a rate (open loop) or a concurrency (closed loop), exactly one of them")
        d = _number(f"{key}.duration_s", stage.get("duration_s"), "> 0 seconds", lambda v: v > 0)
        if RATE in stage:
            v = _number(f"{key}.rate", stage[RATE], "> 0 requests/s", lambda v: v > 0)
            kinds.add(RATE)
        else:
            v = float(_whole(f"{key}.concurrency", stage[CONCURRENCY]))
            kinds.add(CONCURRENCY)
        segments.append(Segment(i, t, t + d, v, v))
        t += d
    if len(kinds) > 1:
        raise ConfigError(
            "workload.stages mixes rate and concurrency stages: use one kind (rate: open loop, "
            "concurrency: closed loop)"
        )
    kind = kinds.pop()
    if kind == RATE and rate is not None:
        raise ConfigError("workload.rate and rate stages are both set: the stages give the rates; drop workload.rate")
    return LoadSchedule(kind, tuple(segments))


def _ramp(ramp: dict[str, Any], rate: Optional[float], duration: Optional[float]) -> LoadSchedule:
    unknown = set(ramp) - RAMP_KEYS
    if unknown:
        raise ConfigError(
            f"workload.ramp has unknown keys {', '.join(sorted(unknown))}: a ramp is "
            "{from, to, duration_s, shape: linear|exponential, of: rate|concurrency}"
        )
    of = ramp.get("of", RATE)
    if of not in (RATE, CONCURRENCY):
        raise ConfigError(f"workload.ramp.of must be rate or concurrency (got {of!r})")
    shape = ramp.get("shape", "linear")
    if shape not in SHAPES:
        raise ConfigError(f"workload.ramp.shape must be linear or exponential (got {shape!r})")
    d = _number("workload.ramp.duration_s", ramp.get("duration_s"), "> 0 seconds", lambda v: v > 0)
    if of == RATE:
        if rate is not None:
            raise ConfigError(
                "workload.rate and workload.ramp are both set: the ramp gives the rate; drop workload.rate"
            )
        low = (lambda v: v > 0) if shape == "exponential" else (lambda v: v >= 0)
        first = _number(
            "workload.ramp.from",
            ramp.get("from"),
            "> 0 requests/s" if shape == "exponential" else ">= 0 requests/s",
            low,
        )
        last = _number("workload.ramp.to", ramp.get("to"), "> 0 requests/s", lambda v: v > 0)
    else:
        first = float(_whole("workload.ramp.from", ramp.get("from")))
        last = float(_whole("workload.ramp.to", ramp.get("to")))
    segments = [Segment(0, 0.0, d, first, last, shape)]
    if duration is not None:
        if duration < d:
            raise ConfigError(
                f"workload.duration_s ({duration:g}) is shorter than workload.ramp.duration_s ({d:g}): "
                "make it longer (the run holds the ramp's end value after it) or drop it"
            )
        if duration > d:
            segments.append(Segment(1, d, duration, last, last))
    return LoadSchedule(of, tuple(segments))


def count_arrivals(schedule: LoadSchedule, rng: np.random.Generator, process: Any, burstiness: float) -> int:
    """How many arrivals ``rng`` gives, leaving it untouched (the plan draws them again)."""
    return len(schedule.arrivals(copy.deepcopy(rng), process, burstiness))
