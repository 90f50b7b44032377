"""The state of each visible GPU through NVML: clocks, why they are held down (the
clocks-event reasons), time spent below clocks for power or thermal reasons, temperature, power
limit, persistence, ECC, MIG and compute modes, and the processes running on it.

It reads the devices :mod:`harness.telemetry.gpu` opened (the same NVML handle and the
``CUDA_VISIBLE_DEVICES`` rules). A reading the driver refuses is None and its reason is kept in
``errors``; nothing here raises.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from harness.telemetry.gpu import GpuDevice

# nvmlClocksEventReason* bits (nvidia-ml-py; "throttle reasons" before driver 535)
CLOCKS_EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clocks",
}

# NVML's enums, as nvidia-ml-py names them (read off the module when it has them)
CLOCK_SM, CLOCK_MEM = ("NVML_CLOCK_SM", 1), ("NVML_CLOCK_MEM", 2)
TEMPERATURE_GPU = ("NVML_TEMPERATURE_GPU", 0)
PERF_POLICY_POWER, PERF_POLICY_THERMAL = ("NVML_PERF_POLICY_POWER", 0), ("NVML_PERF_POLICY_THERMAL", 1)


@dataclass
class GpuState:
    index: int  # CUDA ordinal, as in gpu.parquet
    uuid: str
    name: str
    sm_clock_mhz: Optional[int] = None
    mem_clock_mhz: Optional[int] = None
    clocks_event_reasons: Optional[int] = None  # the bit mask; names: reason_names()
    violation_power_ns: Optional[int] = None  # cumulative since the driver loaded
    violation_thermal_ns: Optional[int] = None
    temperature_c: Optional[int] = None
    performance_state: Optional[int] = None  # P0 (fastest) … P15
    processes: list[int] = field(default_factory=list)  # PIDs of the compute processes, as NVML sees them
    # read once, before the run (full=True)
    sm_clock_max_mhz: Optional[int] = None
    mem_clock_max_mhz: Optional[int] = None
    power_limit_w: Optional[float] = None  # enforced
    persistence_mode: Optional[bool] = None
    ecc_enabled: Optional[bool] = None
    mig_enabled: Optional[bool] = None
    compute_mode: Optional[int] = None  # 0 default, 2 prohibited, 3 exclusive process
    errors: dict[str, str] = field(default_factory=dict)  # reading → why NVML refused it

    @property
    def reasons(self) -> list[str]:
        return reason_names(self.clocks_event_reasons)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["clocks_event_reason_names"] = self.reasons
        return out


def reason_names(mask: Optional[int]) -> list[str]:
    if not mask:
        return []
    names = [name for bit, name in CLOCKS_EVENT_REASONS.items() if mask & bit]
    unknown = mask & ~sum(CLOCKS_EVENT_REASONS)
    return names + ([f"0x{unknown:x}"] if unknown else [])


def driver_versions(nvml: Any) -> dict[str, Any]:
    """The driver's version and the CUDA version it supports (e.g. 12040 → "12.4")."""
    errors: dict[str, str] = {}
    driver = _read(lambda: _text(nvml.nvmlSystemGetDriverVersion()), "driver", errors)
    cuda = _read(lambda: int(nvml.nvmlSystemGetCudaDriverVersion()), "cuda", errors)
    return {
        "driver": driver,
        "cuda": f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None,
        **({"errors": errors} if errors else {}),
    }


def read_gpu_states(nvml: Any, devices: list[GpuDevice], full: bool = True) -> list[GpuState]:
    """One :class:`GpuState` per device; ``full=False`` leaves out what does not change during a
    run (maximum clocks, power limit, modes) and costs half the NVML calls."""
    return [read_gpu_state(nvml, device, full) for device in devices]


def read_gpu_state(nvml: Any, device: GpuDevice, full: bool = True) -> GpuState:
    h = device.handle
    e: dict[str, str] = {}  # reading → why NVML did not give it
    state = GpuState(device.index, device.uuid, device.name)

    def clock(kind: tuple[str, int]) -> int:
        return int(nvml.nvmlDeviceGetClockInfo(h, _enum(nvml, kind)))

    state.sm_clock_mhz = _read(lambda: clock(CLOCK_SM), "sm_clock_mhz", e)
    state.mem_clock_mhz = _read(lambda: clock(CLOCK_MEM), "mem_clock_mhz", e)
    state.clocks_event_reasons = _read(lambda: int(_clocks_event_reasons(nvml, h)), "clocks_event_reasons", e)

    def violation(policy: tuple[str, int]) -> int:
        return int(nvml.nvmlDeviceGetViolationStatus(h, _enum(nvml, policy)).violationTime)

    state.violation_power_ns = _read(lambda: violation(PERF_POLICY_POWER), "violation_power_ns", e)
    state.violation_thermal_ns = _read(lambda: violation(PERF_POLICY_THERMAL), "violation_thermal_ns", e)
    state.temperature_c = _read(
        lambda: int(nvml.nvmlDeviceGetTemperature(h, _enum(nvml, TEMPERATURE_GPU))), "temperature_c", e
    )
    state.performance_state = _read(lambda: int(nvml.nvmlDeviceGetPerformanceState(h)), "performance_state", e)
    state.processes = _read(lambda: [int(p.pid) for p in _compute_processes(nvml, h)], "processes", e) or []
    if full:

        def max_clock(kind: tuple[str, int]) -> int:
            return int(nvml.nvmlDeviceGetMaxClockInfo(h, _enum(nvml, kind)))

        state.sm_clock_max_mhz = _read(lambda: max_clock(CLOCK_SM), "sm_clock_max_mhz", e)
        state.mem_clock_max_mhz = _read(lambda: max_clock(CLOCK_MEM), "mem_clock_max_mhz", e)
        state.power_limit_w = _read(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0, "power_limit_w", e)
        state.persistence_mode = _read(lambda: bool(nvml.nvmlDeviceGetPersistenceMode(h)), "persistence_mode", e)
        state.ecc_enabled = _read(lambda: bool(nvml.nvmlDeviceGetEccMode(h)[0]), "ecc_enabled", e)
        state.mig_enabled = _read(lambda: bool(nvml.nvmlDeviceGetMigMode(h)[0]), "mig_enabled", e)
        state.compute_mode = _read(lambda: int(nvml.nvmlDeviceGetComputeMode(h)), "compute_mode", e)
    state.errors = e
    return state


def _clocks_event_reasons(nvml: Any, handle: Any) -> int:
    read = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    if read is None:  # nvidia-ml-py before 12.535
        read = nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    return read(handle)


def _compute_processes(nvml: Any, handle: Any) -> list[Any]:
    try:
        return list(nvml.nvmlDeviceGetComputeRunningProcesses(handle))
    except Exception:
        # nvidia-ml-py ≥ 12 asks for the _v3 call, which drivers before R510 lack
        v2 = getattr(nvml, "nvmlDeviceGetComputeRunningProcesses_v2", None)
        if v2 is None:
            raise
        return list(v2(handle))


def _enum(nvml: Any, name_and_value: tuple[str, int]) -> int:
    name, value = name_and_value
    return getattr(nvml, name, value)


def _read(fn: Callable[[], Any], reading: str, errors: dict[str, str]) -> Any:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - NVML answers "Not Supported" and more
        errors[reading] = str(exc) or type(exc).__name__
        return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
