"""GPU telemetry from NVML: memory, utilisation, power and energy of the GPUs the engine sees.

NVML comes from the ``nvidia-ml-py`` package (``pip install -e '.[gpu]'``, imported as
``pynvml``), imported here only when a run opens its telemetry. Without the package, the NVML
library (no NVIDIA driver) or a visible GPU, :meth:`GpuTelemetry.open` returns None after one
info line saying why, and the run's GPU figures are absent.

The devices are those visible to the engine: ``CUDA_VISIBLE_DEVICES`` when it is set (indices,
or ``GPU-…`` UUIDs and their unique prefixes, up to the first entry CUDA would reject), else
all. A device's ``index`` is the CUDA ordinal the engine uses; ``nvml_index`` its place in
NVML's order (PCI bus order, which indices in ``CUDA_VISIBLE_DEVICES`` follow only under
``CUDA_DEVICE_ORDER=PCI_BUS_ID``; a run notes when that may not hold).

Each reading is probed once when the telemetry opens; a reading the device does not support
(the energy counter before Volta, per-process memory under some virtualisation) is never asked
again and its column stays empty. :meth:`GpuTelemetry.read` runs on the sampler's thread
(harness/telemetry/memory.py), never on the event loop.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Optional

log = logging.getLogger("harness")

# one row per device per sample (gpu.parquet): t is time.perf_counter()
COLUMNS = ("t", "device", "used_bytes", "process_used_bytes", "util_pct", "power_w", "energy_j")
Row = tuple[float, int, Optional[int], Optional[int], Optional[float], Optional[float], Optional[float]]


@dataclass
class GpuDevice:
    index: int  # CUDA ordinal as the engine sees it
    nvml_index: int
    name: str
    uuid: str
    memory_total_bytes: Optional[int]
    handle: Any = field(repr=False, default=None)
    unsupported: dict[str, str] = field(default_factory=dict)  # reading → why NVML refused it

    def describe(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "nvml_index": self.nvml_index,
            "name": self.name,
            "uuid": self.uuid,
            "memory_total_bytes": self.memory_total_bytes,
            "unsupported": dict(self.unsupported),
        }


class GpuTelemetry:
    """NVML opened on the visible devices; :meth:`read` samples them all, :meth:`close` shuts NVML."""

    clock: Callable[[], float] = staticmethod(time.perf_counter)  # the runner's clock (tests give their own)

    def __init__(self, nvml: Any, devices: list[GpuDevice], notes: list[str]):
        self.nvml = nvml
        self.devices = devices
        self.notes = notes
        self._list_processes: Callable[[Any], Iterable[Any]] = nvml.nvmlDeviceGetComputeRunningProcesses
        self._open = True
        for device in devices:
            self._probe(device)

    @classmethod
    def open(cls, environ: Optional[dict[str, str]] = None) -> Optional[GpuTelemetry]:
        """NVML on the engine's visible GPUs, or None (one info line says why)."""
        nvml, why = _init_nvml()
        if nvml is None:
            log.info("GPU figures off: %s", why)
            return None
        try:
            devices, notes = visible_devices(nvml, os.environ if environ is None else environ)
        except Exception as exc:  # noqa: BLE001 - NVML answers anything; the run goes on without GPU figures
            devices, notes = [], [f"NVML could not list the GPUs ({_why(exc)})"]
        if not devices:
            log.info("GPU figures off: %s", notes[-1] if notes else "NVML sees no GPU")
            _shutdown(nvml)
            return None
        telemetry = cls(nvml, devices, notes)
        log.info("GPU figures from NVML on %s", ", ".join(f"GPU {d.index} ({d.name})" for d in devices))
        return telemetry

    def _probe(self, device: GpuDevice) -> None:
        """Ask each reading once; what the device refuses is left out of every later sample."""
        nvml, h = self.nvml, device.handle
        probes: dict[str, Callable[[], Any]] = {
            "used_bytes": lambda: nvml.nvmlDeviceGetMemoryInfo(h),
            "util_pct": lambda: nvml.nvmlDeviceGetUtilizationRates(h),
            "power_w": lambda: nvml.nvmlDeviceGetPowerUsage(h),
            "energy_j": lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(h),
            "process_used_bytes": lambda: self._processes(h),
        }
        for reading, probe in probes.items():
            try:
                probe()
            except Exception as exc:  # noqa: BLE001 - any error means the device lacks the reading
                device.unsupported[reading] = _why(exc)

    def _processes(self, handle: Any) -> list[Any]:
        try:
            return list(self._list_processes(handle))
        except Exception:
            # nvidia-ml-py ≥ 12 asks for the _v3 call, which drivers before R510 lack; _v2 then
            v2 = getattr(self.nvml, "nvmlDeviceGetComputeRunningProcesses_v2", None)
            if v2 is None or self._list_processes is v2:
                raise
            self._list_processes = v2
            return list(v2(handle))

    def read(self, pids: Optional[frozenset[int]]) -> list[Row]:
        """One row per device, all stamped with one ``clock()`` reading. ``pids``: the engine's
        processes, whose GPU memory makes ``process_used_bytes`` (None: no local engine process)."""
        nvml = self.nvml
        t = self.clock()
        # energy and power first, right after the stamp: the phase's energy is interpolated in t
        energy_power = [(self._energy_j(d), self._power_w(d)) for d in self.devices]
        rows = []
        for d, (energy, power) in zip(self.devices, energy_power):
            skip, h = d.unsupported, d.handle
            used = _call(lambda h: int(nvml.nvmlDeviceGetMemoryInfo(h).used), h) if "used_bytes" not in skip else None
            util = (
                _call(lambda h: float(nvml.nvmlDeviceGetUtilizationRates(h).gpu), h) if "util_pct" not in skip else None
            )
            process = None
            if pids is not None and "process_used_bytes" not in skip:
                process = _call(lambda h: process_memory(self._processes(h), pids), h)
            rows.append((t, d.index, used, process, util, power, energy))
        return rows

    def _energy_j(self, d: GpuDevice) -> Optional[float]:
        if "energy_j" in d.unsupported:
            return None
        return _call(lambda: self.nvml.nvmlDeviceGetTotalEnergyConsumption(d.handle) / 1000.0)  # mJ

    def _power_w(self, d: GpuDevice) -> Optional[float]:
        if "power_w" in d.unsupported:
            return None
        return _call(lambda: self.nvml.nvmlDeviceGetPowerUsage(d.handle) / 1000.0)  # mW

    def close(self) -> None:
        if self._open:
            self._open = False
            _shutdown(self.nvml)


def process_memory(processes: Iterable[Any], pids: frozenset[int]) -> Optional[int]:
    """Σ GPU memory of the listed processes whose PID is in ``pids``; None when none of them is
    listed, or NVML gives no figure for them (``usedGpuMemory`` None)."""
    used = [p.usedGpuMemory for p in processes if p.pid in pids]
    known = [int(u) for u in used if u is not None]
    return sum(known) if known else None


def visible_devices(nvml: Any, environ: Any) -> tuple[list[GpuDevice], list[str]]:
    """The GPUs ``CUDA_VISIBLE_DEVICES`` leaves to the engine (all when unset), and notes; when
    none is left, the last note says why."""
    count = nvml.nvmlDeviceGetCount()
    if count == 0:
        return [], ["NVML sees no GPU"]
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    uuids = [_text(nvml.nvmlDeviceGetUUID(h)) for h in handles]
    names = [_call(lambda h: _text(nvml.nvmlDeviceGetName(h)), h) or "?" for h in handles]
    spec = environ.get("CUDA_VISIBLE_DEVICES")
    notes: list[str] = []
    chosen = list(range(count)) if spec is None else _parse_visible(spec, uuids, notes)
    if not chosen:
        return [], notes + [f"CUDA_VISIBLE_DEVICES={spec!r} leaves no GPU visible (NVML sees {count})"]
    devices = []
    for cuda_index, nvml_index in enumerate(chosen):
        h = handles[nvml_index]
        total = _call(lambda h: int(nvml.nvmlDeviceGetMemoryInfo(h).total), h)
        devices.append(GpuDevice(cuda_index, nvml_index, names[nvml_index], uuids[nvml_index], total, h))
    numeric = spec is not None and any(part.strip().isdigit() for part in spec.split(","))
    if numeric and len(set(names)) > 1 and environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        notes.append(
            "CUDA_VISIBLE_DEVICES holds indices and the GPUs differ: CUDA numbers them fastest first, "
            "NVML in PCI bus order; set CUDA_DEVICE_ORDER=PCI_BUS_ID (or use GPU UUIDs) so both mean the same GPUs"
        )
    return devices, notes


def _parse_visible(spec: str, uuids: list[str], notes: list[str]) -> list[int]:
    """NVML indices of the entries of CUDA_VISIBLE_DEVICES, read as CUDA reads them: up to the
    first entry that names no GPU."""
    chosen: list[int] = []
    for part in (p.strip() for p in spec.split(",")):
        if part.lstrip("-").isdigit():
            index = int(part)
            if not 0 <= index < len(uuids):
                break
        elif part.startswith("GPU-"):
            matches = [i for i, u in enumerate(uuids) if u.startswith(part)]
            if len(matches) != 1:
                break
            index = matches[0]
        else:
            if part.startswith("MIG-"):
                notes.append("MIG instances are not measured: NVML gives power and energy per whole GPU only")
            break
        if index not in chosen:
            chosen.append(index)
    return chosen


def describe_visible() -> list[dict[str, Any]]:
    """Name and memory of each visible GPU from NVML (for env.json when torch has no CUDA); [] without NVML."""
    nvml, _ = _init_nvml()
    if nvml is None:
        return []
    try:
        devices, _ = visible_devices(nvml, os.environ)
        return [{"name": d.name, "memory_bytes": d.memory_total_bytes, "uuid": d.uuid} for d in devices]
    except Exception:  # noqa: BLE001 - env.json then lists no GPU, the run goes on
        return []
    finally:
        _shutdown(nvml)


def _init_nvml() -> tuple[Any, str]:
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py is not installed (pip install -e '.[gpu]')"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - no library, no driver, no permission
        return None, f"NVML did not start ({_why(exc)}): no NVIDIA driver here?"
    return pynvml, ""


def _shutdown(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - NVML going away is nothing to report
        pass


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``: a reading, or None when NVML fails it this time."""
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - NVML answers anything; the figure is then missing
        return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _why(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
