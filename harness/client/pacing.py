"""Open-loop pacing: wake at a due time on ``time.perf_counter``, to well under a millisecond.

asyncio's timers wake ~1 ms late (the selector's timeout is rounded up to whole
milliseconds, then the loop runs what is ready), so at 1000 req/s a plain ``asyncio.sleep``
shifts every send by about one inter-arrival gap. ``pace_until`` sleeps on the timer until
``SPIN_S`` before the due time, then yields to the loop (``asyncio.sleep(0)``) until it has
come: streams keep being read while it waits, and its error is one loop iteration. The cost
is bounded: at most ``SPIN_S`` of yielding per arrival, by one task (the dispatcher).
"""

from __future__ import annotations

import asyncio
import time

# asyncio's timer is never early and up to ~1 ms late (epoll's timeout is whole milliseconds,
# rounded up): waking this long before the due time leaves room for that and a little more
SPIN_S = 0.0015


async def pace_until(due: float, spin: bool = True) -> None:
    """Return at ``due`` (a perf_counter time): spin (default) or asyncio's timer alone."""
    delay = due - time.perf_counter() - (SPIN_S if spin else 0.0)
    if delay > 0:
        await asyncio.sleep(delay)
    if spin:
        while time.perf_counter() < due:
            await asyncio.sleep(0)
