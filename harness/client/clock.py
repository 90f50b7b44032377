"""One clock for every host: each client worker's clock offset to this process's, by round trips.

Each host stamps on its own ``time.perf_counter`` (CLOCK_MONOTONIC: time since that host
booted), so two hosts' readings differ by an arbitrary constant, and by a little more as the run
goes on (their oscillators' rates differ, and NTP slews them). The driver measures that constant
before the run and after it, as NTP does, with round trips to the worker:

    t_send (driver's clock) → the worker reads r on its clock → t_recv (driver's clock)
    offset = r − (t_send + t_recv) / 2      (worker − driver, at the round trip's midpoint)
    |error| ≤ RTT / 2 = (t_recv − t_send) / 2   (r was read somewhere inside the round trip)

Of ``n`` ≥ 20 round trips the one with the smallest RTT is kept (the minimum-RTT filter): its
bound is the tightest, and a round trip slowed by a queue, the scheduler or the GIL has a wide
bound and is simply not used. The first :data:`WARM_UP` round trips are not counted (the first
call to a worker pays for its connection).

How the offset is applied: the driver picks t0 on its clock and sends each worker
``t0 + offset``, its t0 on its own clock. Every stamp the worker takes is relative to that, so
its records are on the driver's timeline to within the offset's error, and each host paces the
open-loop schedule against the same instant.

Drift: ``after − before``, whose own uncertainty is ``(rtt_before + rtt_after) / 2``. A host
whose drift exceeds the bound (``client.max_clock_drift_ms``) beyond that uncertainty is named
in the summary's warnings: its stamps late in the run are off by up to the drift.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from core.errors import HarnessError

WARM_UP = 2  # round trips not counted: the first pays for the connection
MAX_RTT_S = 0.1  # a host whose fastest round trip is slower than this cannot be placed in time well enough
DEADLINE_S = 20.0  # all of one measurement's round trips, at most


class ClockUnmeasured(HarnessError):
    """A host's clock offset could not be measured: the run is refused (one line)."""


@dataclass
class ClockReading:
    """One measurement: the offset (worker − driver) by the fastest round trip, and its bound."""

    offset_s: float  # worker's clock − driver's clock
    rtt_s: float  # the fastest round trip: the offset is within ± rtt_s / 2
    at_s: float  # when (driver's perf_counter), the fastest round trip's midpoint
    samples: list[tuple[float, float]] = field(default_factory=list)  # each round trip's (rtt_s, offset_s)

    @property
    def uncertainty_s(self) -> float:
        return self.rtt_s / 2

    def to_dict(self) -> dict[str, Any]:
        return {
            "offset_s": self.offset_s,
            "rtt_s": self.rtt_s,
            "uncertainty_s": self.uncertainty_s,
            "samples": len(self.samples),
        }


def measure(
    read_remote: Callable[[], float],
    samples: int,
    local: Callable[[], float] = time.perf_counter,
    deadline_s: float = DEADLINE_S,
    max_rtt_s: float = MAX_RTT_S,
) -> ClockReading:
    """``samples`` round trips to ``read_remote`` (the worker's clock, read where it runs), after
    :data:`WARM_UP` uncounted ones; the fastest gives the offset. :class:`ClockUnmeasured` when a
    round trip fails, when they take longer than ``deadline_s`` together, or when even the
    fastest took longer than ``max_rtt_s``."""
    pairs: list[tuple[float, float, float]] = []  # (rtt, offset, midpoint)
    start = local()
    for i in range(WARM_UP + samples):
        if local() - start > deadline_s:
            raise ClockUnmeasured(
                f"{len(pairs)} of {samples} round trips in {deadline_s:g} s (the deadline of a measurement)"
            )
        t_send = local()
        try:
            remote = float(read_remote())
        except Exception as exc:  # noqa: BLE001 - any failure to answer makes the clock unmeasurable
            raise ClockUnmeasured(f"a round trip failed ({type(exc).__name__}: {str(exc)[:120]})") from exc
        t_recv = local()
        if i >= WARM_UP:
            mid = (t_send + t_recv) / 2
            pairs.append((t_recv - t_send, remote - mid, mid))
    rtt, offset, at = min(pairs)
    if rtt > max_rtt_s:
        raise ClockUnmeasured(
            f"the fastest of {samples} round trips took {rtt * 1e3:.0f} ms (more than {max_rtt_s * 1e3:.0f} ms): "
            f"its offset would be uncertain by ±{rtt * 500:.0f} ms"
        )
    return ClockReading(offset, rtt, at, [(r, o) for r, o, _ in pairs])


@dataclass
class Drift:
    """How far a host's offset moved between the measurements before and after the run."""

    drift_s: float  # after − before
    uncertainty_s: float  # (rtt_before + rtt_after) / 2: what the two measurements alone could move
    bound_s: float  # client.max_clock_drift_ms

    @property
    def beyond(self) -> bool:
        """It moved by more than the bound, beyond the measurements' uncertainty."""
        return abs(self.drift_s) > self.bound_s + self.uncertainty_s


def drift(before: ClockReading, after: Optional[ClockReading], bound_s: float) -> Optional[Drift]:
    """The drift over the run; None when the measurement after it is missing (a host lost)."""
    if after is None:
        return None
    return Drift(after.offset_s - before.offset_s, (before.rtt_s + after.rtt_s) / 2, bound_s)
