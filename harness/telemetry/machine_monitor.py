"""Samples the machine around a run: :class:`MachineMonitor` gives a
:class:`harness.telemetry.machine_state.MachineState` (machine.json; the taint rules are there)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from typing import Any, Optional

from harness.telemetry.cpu_state import (
    BusyProcess,
    CpuState,
    ProcessTracker,
    command_line,
    cpu_state,
    process_name,
)
from harness.telemetry.gpu import GpuTelemetry
from harness.telemetry.gpu_state import GpuState, driver_versions, read_gpu_states
from harness.telemetry.machine_state import (
    RECORDED_PROCESS_PCT,
    TOP_PROCESSES,
    GpuProcess,
    MachineState,
    Snapshot,
    cpu_during,
    gpus_during,
    matches,
    taint_reasons,
)

log = logging.getLogger("harness")

DEFAULT_INTERVAL_S = 1.0


class MachineMonitor:
    """The machine's state before and during a run, sampled on a daemon thread.

    ``engine_process``: the engine's root PID (``Backend.engine_process``) or None; called at
    each sample. ``exclude_pids``: more processes that are ours. ``gpu``: the NVML handle and
    devices the run's telemetry opened (None: no GPU figures). ``ignore``: names or command-line
    pieces of processes never counted as others.
    """

    def __init__(
        self,
        interval_s: float = DEFAULT_INTERVAL_S,
        engine_process: Callable[[], Optional[int]] = lambda: None,
        exclude_pids: Iterable[int] = (),
        gpu: Optional[GpuTelemetry] = None,
        ignore: Sequence[str] = (),
        tracker: Optional[ProcessTracker] = None,
        read_cpu: Callable[[], CpuState] = cpu_state,
    ):
        self.interval_s = interval_s
        self._engine_process = engine_process
        self._exclude = set(exclude_pids)
        self._gpu = gpu
        self._ignore = tuple(ignore)
        self._tracker = tracker or ProcessTracker()
        self._read_cpu = read_cpu
        self._errors: dict[str, int] = {}
        self._samples: list[Snapshot] = []
        self._lock = threading.Lock()  # the monitor's own: between its thread and stop()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="machine-monitor", daemon=True)
        self._t0 = time.monotonic()
        self.started_at = ""
        self.before: Optional[Snapshot] = None
        self._gpu_driver: Optional[dict[str, Any]] = None
        self._result: Optional[MachineState] = None

    def start(self) -> MachineMonitor:
        """The reading before the run (in the caller's thread: tens of ms), then the sampling thread."""
        self._t0 = time.monotonic()
        self.started_at = datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")
        self.before = self._snapshot(full=True) or Snapshot(0.0, CpuState(None, None, None))
        gpu = self._gpu
        if gpu is not None:
            self._gpu_driver = self._guarded("GPU driver", lambda: driver_versions(gpu.nvml))
        self._guarded("process scan", lambda: self._tracker.prime(self._roots()))
        self._thread.start()
        return self

    def stop(self) -> MachineState:
        """End the sampling with one last reading and give the result; idempotent, never raises."""
        if self._result is not None:
            return self._result
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=max(2.0, 2 * self.interval_s))
        if self.before is None:  # never started
            self.before = Snapshot(0.0, CpuState(None, None, None))
        if not self._thread.is_alive():
            self._sample()
        else:
            self._note("the sampling thread did not stop in time; its last readings are left out")
        if not self._lock.acquire(timeout=2.0):
            self._note("the sampling thread held its readings too long; the processes are left out")
            self._result = self._build(list(self._samples), with_processes=False)
            return self._result
        try:
            self._result = self._build(list(self._samples), with_processes=True)
        finally:
            self._lock.release()
        return self._result

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        snapshot = self._snapshot(full=False)
        with self._lock:
            if snapshot is not None:
                self._samples.append(snapshot)
            self._guarded("process scan", lambda: self._tracker.sample(self._roots()))

    def _snapshot(self, full: bool) -> Optional[Snapshot]:
        cpu = self._guarded("CPU state", self._read_cpu)
        if cpu is None:
            return None
        gpus: list[GpuState] = []
        if self._gpu is not None:
            gpu = self._gpu
            gpus = self._guarded("GPU state", lambda: read_gpu_states(gpu.nvml, gpu.devices, full)) or []
        return Snapshot(time.monotonic() - self._t0, cpu, gpus)

    def _roots(self) -> set[int]:
        roots = {os.getpid(), *self._exclude}
        engine = self._guarded("engine process", self._engine_process)
        if engine is not None:
            roots.add(engine)
        return roots

    def _build(self, samples: list[Snapshot], with_processes: bool) -> MachineState:
        assert self.before is not None
        tracker = self._tracker
        busy: list[BusyProcess] = []
        if with_processes:
            busy = self._guarded("busy processes", lambda: tracker.busy(RECORDED_PROCESS_PCT, TOP_PROCESSES * 2)) or []
            busy = [b for b in busy if not matches(self._ignore, b.name, b.cmdline)][:TOP_PROCESSES]
        ours = set(tracker.ours_pids) | self._roots()
        gpus = gpus_during(self.before, samples, ours, self._describe_gpu_process)
        for g in gpus:
            g.other_processes = [p for p in g.other_processes if not matches(self._ignore, p.name, p.cmdline)]
        taint = taint_reasons(self.before.cpu, gpus, busy)
        if taint:
            log.warning("the run is tainted: %s", "; ".join(taint))
        return MachineState(
            started_at=self.started_at,
            interval_s=self.interval_s,
            window_s=tracker.window_s or (samples[-1].t_s - self.before.t_s if samples else 0.0),
            before=self.before,
            after=samples[-1] if samples else None,
            cpu=cpu_during(samples),
            gpus=gpus,
            busy_processes=busy,
            taint=taint,
            gpu_driver=self._gpu_driver,
            errors=[f"{what} (×{n})" if n > 1 else what for what, n in self._errors.items()],
        )

    @staticmethod
    def _describe_gpu_process(pid: int) -> GpuProcess:
        return GpuProcess(pid, process_name(pid), command_line(pid))

    def _guarded(self, what: str, read: Callable[[], Any]) -> Any:
        try:
            return read()
        except Exception as exc:  # noqa: BLE001 - the run goes on; the record says what was missed
            self._note(f"{what}: {type(exc).__name__}: {exc}")
            return None

    def _note(self, message: str) -> None:
        self._errors[message] = self._errors.get(message, 0) + 1
