"""The CPU's state (frequency and governor per core, load average) and the CPU time every
process on the machine uses, so a run can tell which *other* processes competed with it.

Read from Linux's sysfs and /proc through psutil; a file or figure the machine does not have
(no cpufreq driver in a VM, a process that denies access) is None, never an error.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

import psutil

CPU_SYSFS = Path("/sys/devices/system/cpu")
PROC_STAT = Path("/proc/self/stat")
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass
class CpuState:
    load_avg: Optional[tuple[float, float, float]]  # 1, 5 and 15 minutes, over the whole machine
    logical_cores: Optional[int]
    usable_cores: Optional[int]  # the cores this process may run on (its affinity)
    freq_mhz: list[Optional[float]] = field(default_factory=list)  # per core
    max_freq_mhz: list[Optional[float]] = field(default_factory=list)
    governors: list[Optional[str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def freq_range_mhz(self) -> tuple[Optional[float], Optional[float]]:
        known = [f for f in self.freq_mhz if f is not None]
        return (min(known), max(known)) if known else (None, None)


def usable_cores() -> Optional[int]:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count()


def cpu_state(sysfs: Path = CPU_SYSFS) -> CpuState:
    """Load average, and per core its current and maximum frequency and its governor: from
    cpufreq in sysfs where the machine has it, else the current frequency psutil reads."""
    cores = os.cpu_count() or 0
    try:
        load: Optional[tuple[float, float, float]] = os.getloadavg()
    except OSError:
        load = None
    fallback = _psutil_freqs()
    freq, max_freq, governors = [], [], []
    for core in range(cores):
        cpufreq = sysfs / f"cpu{core}" / "cpufreq"
        cur_khz, max_khz = _read_number(cpufreq / "scaling_cur_freq"), _read_number(cpufreq / "scaling_max_freq")
        known = fallback[core] if core < len(fallback) else (None, None)
        freq.append(cur_khz / 1000 if cur_khz else known[0])
        max_freq.append(max_khz / 1000 if max_khz else known[1])
        governors.append(_read_text(cpufreq / "scaling_governor"))
    return CpuState(load, cores or None, usable_cores(), freq, max_freq, governors)


def _psutil_freqs() -> list[tuple[Optional[float], Optional[float]]]:
    try:
        freqs = psutil.cpu_freq(percpu=True) or []
    except Exception:  # noqa: BLE001 - some platforms raise instead of returning nothing
        return []
    return [(f.current or None, f.max or None) for f in freqs]  # psutil gives 0.0 for "unknown"


def _read_text(path: Path) -> Optional[str]:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def _read_number(path: Path) -> Optional[float]:
    text = _read_text(path)
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


# --- processes --------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessReading:
    pid: int
    ppid: Optional[int]
    name: str
    create_time: float  # epoch seconds
    cpu_s: Optional[float]  # user + system CPU time so far


def scan_processes() -> list[ProcessReading]:
    """Every process on the machine with its CPU time so far: /proc/<pid>/stat read once each
    where Linux has it (about 20 µs a process), else through psutil (about three times that)."""
    if PROC_STAT.exists():
        return _scan_proc()
    out = []
    for proc in psutil.process_iter(["ppid", "name", "create_time", "cpu_times"]):
        info = proc.info
        times = info.get("cpu_times")
        out.append(
            ProcessReading(
                proc.pid,
                info.get("ppid"),
                info.get("name") or "?",
                info.get("create_time") or 0.0,
                times.user + times.system if times is not None else None,
            )
        )
    return out


def _scan_proc() -> list[ProcessReading]:
    boot = psutil.boot_time()
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            # "pid (comm) state ppid … utime stime … starttime …": comm may hold spaces and parentheses
            comm = stat[stat.index(b"(") + 1 : stat.rindex(b")")].decode(errors="replace")
            fields = stat[stat.rindex(b")") + 2 :].split()
            ppid, cpu_ticks, start_ticks = int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[19])
        except (OSError, ValueError, IndexError):  # gone meanwhile
            continue
        out.append(ProcessReading(int(entry), ppid, comm, boot + start_ticks / _CLOCK_TICKS, cpu_ticks / _CLOCK_TICKS))
    return out


def own_processes(readings: Iterable[ProcessReading], roots: Iterable[int]) -> set[int]:
    """The roots and their descendants; and for a root that leads a process group of its own
    (a launched server), the group's members, which a worker that forked twice stays in."""
    readings, roots = list(readings), list(roots)
    children: dict[int, list[int]] = {}
    for r in readings:
        if r.ppid is not None:
            children.setdefault(r.ppid, []).append(r.pid)
    ours: set[int] = set()
    stack = list(roots)
    while stack:
        pid = stack.pop()
        if pid not in ours:
            ours.add(pid)
            stack.extend(children.get(pid, ()))
    leaders = [root for root in roots if root != os.getpid() and _pgid(root) == root]
    if leaders:
        ours.update(r.pid for r in readings if _pgid(r.pid) in leaders)
    return ours


def _pgid(pid: int) -> Optional[int]:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


@dataclass
class BusyProcess:
    pid: int
    name: str
    cmdline: str
    cpu_pct_mean: float  # % of one core over the whole monitored window
    cpu_pct_max: float  # the busiest interval between two samples
    samples: int  # samples it was seen in (the first reading, before the run, not counted)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Track:
    name: str
    cpu_base_s: float
    cpu_last_s: float
    t_last: float
    samples: int = 0
    peak_pct: float = 0.0


class ProcessTracker:
    """The CPU time each process used since :meth:`prime`, sample by sample. Processes that are
    ours (``roots`` and theirs, see :func:`own_processes`) at any sample are left out of :meth:`busy`."""

    def __init__(
        self,
        scan: Callable[[], list[ProcessReading]] = scan_processes,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ):
        self._scan, self._clock, self._wall = scan, clock, wall_clock
        self._tracks: dict[tuple[int, float], _Track] = {}
        self._ours: set[tuple[int, float]] = set()
        self.ours_pids: set[int] = set()  # every pid that was ours at some sample
        self.t0: Optional[float] = None
        self.t_last: Optional[float] = None
        self._wall0 = 0.0

    def prime(self, roots: Iterable[int]) -> None:
        """The first reading: each process's CPU time before the run."""
        self.t0, self._wall0 = self._clock(), self._wall()
        self._record(roots, counted=False)

    def sample(self, roots: Iterable[int]) -> None:
        if self.t0 is None:
            self.prime(roots)
            return
        self._record(roots, counted=True)

    def _record(self, roots: Iterable[int], counted: bool) -> None:
        readings = self._scan()
        now = self._clock()
        ours = own_processes(readings, roots)
        self.ours_pids |= ours
        for r in readings:
            if r.cpu_s is None:
                continue
            key = (r.pid, round(r.create_time, 2))
            if r.pid in ours:
                self._ours.add(key)
            track = self._tracks.get(key)
            if track is None:
                # born during the run: all its CPU time is the run's; else from this reading on
                base = 0.0 if counted and r.create_time >= self._wall0 else r.cpu_s
                track = self._tracks[key] = _Track(r.name, base, base, now)
            elif now > track.t_last:
                track.peak_pct = max(track.peak_pct, 100 * (r.cpu_s - track.cpu_last_s) / (now - track.t_last))
            track.cpu_last_s, track.t_last = r.cpu_s, now
            track.samples += counted
        self.t_last = now

    @property
    def window_s(self) -> float:
        return (self.t_last - self.t0) if self.t0 is not None and self.t_last is not None else 0.0

    def busy(self, floor_pct: float, top: int) -> list[BusyProcess]:
        """The other processes that used at least ``floor_pct`` % of a core on average over the
        window, busiest first, at most ``top``."""
        window = self.window_s
        if window <= 0:
            return []
        found = []
        for key, track in self._tracks.items():
            mean = 100 * (track.cpu_last_s - track.cpu_base_s) / window
            if key not in self._ours and mean >= floor_pct:
                found.append(
                    BusyProcess(
                        key[0],
                        track.name,
                        command_line(key[0]),
                        round(mean, 1),
                        round(max(track.peak_pct, mean), 1),
                        track.samples,
                    )
                )
        found.sort(key=lambda b: b.cpu_pct_mean, reverse=True)
        return found[:top]


def command_line(pid: int, limit: int = 200) -> str:
    try:
        text = " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def process_name(pid: int) -> Optional[str]:
    """The name of a process visible here, or None (gone, or in another PID namespace)."""
    try:
        return psutil.Process(pid).name()
    except psutil.Error:
        return None
