"""The machine's state around a run, and whether it was fit to measure on (machine.json).

:class:`~harness.telemetry.machine_monitor.MachineMonitor` reads the machine once before the
run (CPU frequency and governor per core, load average, and through NVML where it runs: clocks,
clocks-event reasons, violation time, temperature, power limit, persistence, ECC/MIG/compute
modes, the GPU's processes), then every ``interval_s`` on a daemon thread of its own until it
stops, and gives a :class:`MachineState`: the reading before, the figures during (and the last
reading), the other processes that used the CPU, and ``taint``.

A run is **tainted** — named in its summary, to be rerun or left out of a decision, never
averaged in silently — by any of these, one sentence each in ``taint``:

- **another busy process**: a process that is not ours used at least
  :data:`BUSY_PROCESS_PCT` % of one core on average over the whole monitored window (its CPU
  time in the window / the window), seen in at least :data:`BUSY_MIN_SAMPLES` samples. Ours are
  this process, the engine's process (``engine_process``, e.g. a launched server), the pids
  the caller names, and all their descendants and, for a server leading a process group, the
  group. Processes matched by ``ignore`` (a name, or a piece of the command line) are not counted:
  e.g. the local server measured through ``backend=openai``.

The load average is recorded (before and during) but never taints: it counts this harness's
own engine too (an in-process engine's warm-up leaves the 1-minute load above the cores), so
it cannot tell another tenant from the run itself; the busy-process rule can.
- **GPU clocks held down**: a clocks-event reason in :data:`TAINTING_GPU_REASONS` (HW slowdown,
  SW or HW thermal slowdown, HW power brake) seen in any reading, or any time below clocks for
  thermal reasons (NVML's thermal violation counter moved). SW power cap is normal at full load:
  recorded, never tainting; so are GPU idle, application clocks and sync boost.
- **another process on a GPU**: a compute process on a visible GPU that is not ours and that
  this machine can name. A PID NVML lists that is not visible here (another PID namespace: the
  harness in a container sees host PIDs) is recorded in ``other_processes`` with ``name`` null,
  and does not taint, since it may be our own engine seen from outside.

The monitor never slows the measurement: it runs on its own thread, holds no lock the
measuring code takes, catches and records its own errors (``errors``), and stops within one
sample. A process scan reads each /proc/<pid>/stat once per interval (about 2 ms per hundred
processes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from harness.telemetry.cpu_state import BusyProcess, CpuState
from harness.telemetry.gpu_state import GpuState, reason_names

BUSY_PROCESS_PCT = 50.0  # % of one core, mean over the window: another process this busy taints the run
BUSY_MIN_SAMPLES = 2  # ...when seen in at least this many samples during the run
RECORDED_PROCESS_PCT = 5.0  # other processes at least this busy are listed in machine.json
TOP_PROCESSES = 10
TAINTING_GPU_REASONS = {
    "hw_slowdown": "HW slowdown",
    "sw_thermal": "SW thermal slowdown",
    "hw_thermal": "HW thermal slowdown",
    "hw_power_brake": "HW power brake",
}

RULES = {
    "busy_process_pct": BUSY_PROCESS_PCT,
    "busy_min_samples": BUSY_MIN_SAMPLES,
    "tainting_gpu_reasons": list(TAINTING_GPU_REASONS),
    "thermal_violation": "any time below clocks for thermal reasons",
    "other_gpu_process": "a visible compute process on a GPU that is not ours",
}


@dataclass
class Snapshot:
    t_s: float  # seconds since the monitor started
    cpu: CpuState
    gpus: list[GpuState] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"t_s": round(self.t_s, 3), "cpu": self.cpu.to_dict(), "gpus": [g.to_dict() for g in self.gpus]}


@dataclass
class CpuDuring:
    samples: int = 0
    load1_max: Optional[float] = None
    load1_mean: Optional[float] = None
    freq_mhz_min: Optional[float] = None
    freq_mhz_max: Optional[float] = None


@dataclass
class GpuProcess:
    pid: int
    name: Optional[str]  # None: not visible from here (another PID namespace, or gone)
    cmdline: str = ""


@dataclass
class GpuDuring:
    index: int
    uuid: str
    name: str
    samples: int = 0
    sm_clock_mhz_min: Optional[int] = None
    sm_clock_mhz_max: Optional[int] = None
    mem_clock_mhz_min: Optional[int] = None
    mem_clock_mhz_max: Optional[int] = None
    clocks_event_reasons: list[str] = field(default_factory=list)  # the union over all readings
    violation_power_s: Optional[float] = None  # growth of NVML's violation counters over the run
    violation_thermal_s: Optional[float] = None
    temperature_c_max: Optional[int] = None
    other_processes: list[GpuProcess] = field(default_factory=list)


@dataclass
class MachineState:
    """machine.json, typed."""

    started_at: str
    interval_s: float
    window_s: float
    before: Snapshot
    after: Optional[Snapshot]
    cpu: CpuDuring
    gpus: list[GpuDuring]
    busy_processes: list[BusyProcess]
    taint: list[str]
    gpu_driver: Optional[dict[str, Any]] = None
    errors: list[str] = field(default_factory=list)

    @property
    def tainted(self) -> bool:
        return bool(self.taint)

    def to_dict(self) -> dict[str, Any]:
        return {
            "taint": list(self.taint),
            "started_at": self.started_at,
            "interval_s": self.interval_s,
            "window_s": round(self.window_s, 3),
            "rules": RULES,
            "before": self.before.to_dict(),
            "during": {"cpu": asdict(self.cpu), "gpus": [asdict(g) for g in self.gpus]},
            "after": self.after.to_dict() if self.after is not None else None,
            "busy_processes": [b.to_dict() for b in self.busy_processes],
            "gpu_driver": self.gpu_driver,
            "errors": list(self.errors),
        }


# --- the figures during the run and the taint rules (pure: tests give their own readings) ----


def cpu_during(samples: Sequence[Snapshot]) -> CpuDuring:
    loads = [s.cpu.load_avg[0] for s in samples if s.cpu.load_avg is not None]
    lows = [lo for lo, _ in (s.cpu.freq_range_mhz for s in samples) if lo is not None]
    highs = [hi for _, hi in (s.cpu.freq_range_mhz for s in samples) if hi is not None]
    return CpuDuring(
        len(samples),
        max(loads) if loads else None,
        round(sum(loads) / len(loads), 3) if loads else None,
        min(lows) if lows else None,
        max(highs) if highs else None,
    )


def gpus_during(
    before: Snapshot, samples: Sequence[Snapshot], ours: set[int], describe: Callable[[int], GpuProcess]
) -> list[GpuDuring]:
    """Per GPU of the reading before: clock ranges, the reasons seen, the violation counters'
    growth, the hottest reading, and the processes that are not ``ours`` (named by ``describe``)."""
    out = []
    for first in before.gpus:
        readings = [g for s in samples for g in s.gpus if g.index == first.index]
        every = [first, *readings]
        during = GpuDuring(first.index, first.uuid, first.name, len(readings))
        during.sm_clock_mhz_min, during.sm_clock_mhz_max = _range(g.sm_clock_mhz for g in readings)
        during.mem_clock_mhz_min, during.mem_clock_mhz_max = _range(g.mem_clock_mhz for g in readings)
        mask = 0
        for g in every:
            mask |= g.clocks_event_reasons or 0
        during.clocks_event_reasons = reason_names(mask)
        during.violation_power_s = _growth_s([g.violation_power_ns for g in every])
        during.violation_thermal_s = _growth_s([g.violation_thermal_ns for g in every])
        temperatures = [g.temperature_c for g in every if g.temperature_c is not None]
        during.temperature_c_max = max(temperatures) if temperatures else None
        pids = sorted({pid for g in every for pid in g.processes} - ours)
        during.other_processes = [describe(pid) for pid in pids]
        out.append(during)
    return out


def taint_reasons(before: CpuState, gpus: Sequence[GpuDuring], busy: Sequence[BusyProcess]) -> list[str]:
    """One short sentence per reason the run is tainted (the rules in the module docstring)."""
    taint = []
    for b in busy:
        if b.cpu_pct_mean >= BUSY_PROCESS_PCT and b.samples >= BUSY_MIN_SAMPLES:
            taint.append(f"another busy process: {b.name} (pid {b.pid}) used {b.cpu_pct_mean:.0f}% of a core")
    for g in gpus:
        for reason, label in TAINTING_GPU_REASONS.items():
            if reason in g.clocks_event_reasons:
                taint.append(f"GPU {g.index}: {label} seen")
        if g.violation_thermal_s:
            taint.append(f"GPU {g.index}: {g.violation_thermal_s:.2f} s below clocks for thermal reasons")
        for p in g.other_processes:
            if p.name is not None:
                taint.append(f"GPU {g.index}: another process on the GPU: {p.name} (pid {p.pid})")
    return taint


def _range(values: Iterable[Optional[int]]) -> tuple[Optional[int], Optional[int]]:
    known = [v for v in values if v is not None]
    return (min(known), max(known)) if known else (None, None)


def _growth_s(counters_ns: list[Optional[int]]) -> Optional[float]:
    known = [c for c in counters_ns if c is not None]
    if len(known) < 2 or known[-1] < known[0]:  # one reading, or the counter restarted (driver reload)
        return None
    return (known[-1] - known[0]) / 1e9


def matches(ignore: Sequence[str], name: Optional[str], cmdline: str) -> bool:
    return any(pattern == name or (pattern and pattern in cmdline) for pattern in ignore)
