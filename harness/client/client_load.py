"""The client's own state through the measured phase: is the harness keeping up?

Two figures go into ``summary.json → harness``:

- ``loop_lag_s``: the event loop's lag, sampled every ``interval_s``: a task asks to wake at
  t and records (woken − t). Every stamp the loop takes waits behind the same work, so a
  lag of L delays chunk stamps by up to L. asyncio's own timers wake up to ~1 ms late, so
  ~1 ms is the floor.
- ``workers``: client processes (``client.workers``; harness/client/workers.py). With more than
  one, the lag is the workers' (their loops take the stamps) and the CPU is theirs plus
  this process's.
- ``cpu_cores``: this process's CPU time (user + system, every thread) over the phase's wall
  time. One event loop can use one core at most: near 1, the client (in server and remote
  mode) is the bottleneck. In-process engines run in this process too, so there it
  measures harness and engine together.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, Optional

import psutil

from harness.results import formulas

INTERVAL_S = 0.05


class ClientLoad:
    def __init__(self, interval_s: float = INTERVAL_S):
        self.interval_s = interval_s
        self.lags: list[float] = []
        self._task: Optional[asyncio.Task] = None
        self._process = psutil.Process()
        self._cpu0 = self._t0 = 0.0
        self._figures: dict[str, Any] = {}

    def start(self) -> None:
        """On the running event loop, as the measured phase begins."""
        times = self._process.cpu_times()
        self._cpu0, self._t0 = times.user + times.system, time.perf_counter()
        self._task = asyncio.get_running_loop().create_task(self._sample())

    async def _sample(self) -> None:
        while True:
            due = time.perf_counter() + self.interval_s
            await asyncio.sleep(self.interval_s)
            self.lags.append(max(0.0, time.perf_counter() - due))

    def stop(self, worker_loads: Sequence[tuple[list[float], float]] = ()) -> None:
        """``worker_loads``: each client worker's (loop lags, CPU seconds) when the requests ran
        in worker processes (harness/client/workers.py): their loops took the stamps, so the lag is
        theirs, pooled sample by sample; the CPU is theirs and this process's together."""
        if self._task is None:
            return
        self._task.cancel()
        self._task = None
        times = self._process.cpu_times()
        wall = time.perf_counter() - self._t0
        cpu = times.user + times.system - self._cpu0 + sum(cpu_s for _, cpu_s in worker_loads)
        lags = [lag for lags, _ in worker_loads for lag in lags] if worker_loads else self.lags
        self._figures = {
            "loop_lag_s": formulas.distribution(lags),
            "cpu_cores": cpu / wall if wall > 0 else None,
            "workers": max(1, len(worker_loads)),
        }

    def figures(self) -> dict[str, Any]:
        """{} when the phase never began."""
        return dict(self._figures)
