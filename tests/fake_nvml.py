"""A stand-in for nvidia-ml-py's ``pynvml``: exactly the calls harness/telemetry/gpu.py and
gpu_state.py make, on GPUs whose power, utilisation, memory, processes, clocks, clocks-event
reasons (throttling), violation counters, temperature and modes a test sets. The energy counter integrates the
power over the fake's clock (power changes count from the last reading on), so a test knows
the energy of any interval. Install it with ``monkeypatch.setitem(sys.modules, "pynvml", fake)``.
"""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Optional

GIB = 2**30


class NVMLError(Exception):
    pass


@dataclass
class FakeGpu:
    name: str = "Fake GPU"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    power_w: float = 200.0
    util_pct: int = 50
    used_bytes: int = 2 * GIB
    total_bytes: int = 80 * GIB
    energy_counter: bool = True  # False: "Not Supported", as before Volta
    processes: Callable[[], list[tuple[int, Optional[int]]]] = lambda: []  # (pid, usedGpuMemory)
    energy_mj: float = 7.0e9  # since the "driver loaded": never 0 at the start of a run
    sm_clock_mhz: int = 1980
    mem_clock_mhz: int = 2619
    sm_clock_max_mhz: int = 1980
    mem_clock_max_mhz: int = 2619
    clocks_event_reasons: int = 0  # nvmlClocksEventReason* bits, e.g. 0x40 HW thermal slowdown
    violation_power_ns: int = 5_000_000_000  # NVML's counters, since the "driver loaded"
    violation_thermal_ns: int = 0
    temperature_c: int = 45
    power_limit_w: float = 700.0
    persistence_mode: int = 1
    performance_state: int = 0
    ecc_mode: int = 1
    mig_mode: int = 0
    compute_mode: int = 0
    read_t: Optional[float] = field(default=None, repr=False)


class FakeNVML(types.ModuleType):
    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2
    NVML_TEMPERATURE_GPU = 0
    NVML_PERF_POLICY_POWER, NVML_PERF_POLICY_THERMAL = 0, 1

    def __init__(self, gpus: list[FakeGpu], clock: Callable[[], float] = time.perf_counter):
        super().__init__("pynvml")
        self.gpus = gpus
        self.clock = clock
        self.inits = 0
        self._lock = threading.Lock()

    def nvmlInit(self) -> None:
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.inits -= 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, gpu: FakeGpu) -> str:
        return gpu.uuid

    def nvmlDeviceGetName(self, gpu: FakeGpu) -> str:
        return gpu.name

    def nvmlDeviceGetMemoryInfo(self, gpu: FakeGpu) -> types.SimpleNamespace:
        return types.SimpleNamespace(total=gpu.total_bytes, used=gpu.used_bytes, free=gpu.total_bytes - gpu.used_bytes)

    def nvmlDeviceGetUtilizationRates(self, gpu: FakeGpu) -> types.SimpleNamespace:
        return types.SimpleNamespace(gpu=gpu.util_pct, memory=0)

    def nvmlDeviceGetPowerUsage(self, gpu: FakeGpu) -> int:
        self._integrate(gpu)
        return int(round(gpu.power_w * 1000))

    def nvmlDeviceGetTotalEnergyConsumption(self, gpu: FakeGpu) -> int:
        if not gpu.energy_counter:
            raise NVMLError("Not Supported")
        self._integrate(gpu)
        return int(gpu.energy_mj)

    def nvmlDeviceGetComputeRunningProcesses(self, gpu: FakeGpu) -> list[types.SimpleNamespace]:
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in gpu.processes()]

    def nvmlDeviceGetClockInfo(self, gpu: FakeGpu, kind: int) -> int:
        return {self.NVML_CLOCK_SM: gpu.sm_clock_mhz, self.NVML_CLOCK_MEM: gpu.mem_clock_mhz}[kind]

    def nvmlDeviceGetMaxClockInfo(self, gpu: FakeGpu, kind: int) -> int:
        return {self.NVML_CLOCK_SM: gpu.sm_clock_max_mhz, self.NVML_CLOCK_MEM: gpu.mem_clock_max_mhz}[kind]

    def nvmlDeviceGetCurrentClocksEventReasons(self, gpu: FakeGpu) -> int:
        return gpu.clocks_event_reasons

    def nvmlDeviceGetViolationStatus(self, gpu: FakeGpu, policy: int) -> types.SimpleNamespace:
        ns = {
            self.NVML_PERF_POLICY_POWER: gpu.violation_power_ns,
            self.NVML_PERF_POLICY_THERMAL: gpu.violation_thermal_ns,
        }
        return types.SimpleNamespace(referenceTime=int(self.clock() * 1e6), violationTime=ns[policy])

    def nvmlDeviceGetTemperature(self, gpu: FakeGpu, sensor: int) -> int:
        assert sensor == self.NVML_TEMPERATURE_GPU
        return gpu.temperature_c

    def nvmlDeviceGetEnforcedPowerLimit(self, gpu: FakeGpu) -> int:
        return int(gpu.power_limit_w * 1000)  # mW

    def nvmlDeviceGetPersistenceMode(self, gpu: FakeGpu) -> int:
        return gpu.persistence_mode

    def nvmlDeviceGetPerformanceState(self, gpu: FakeGpu) -> int:
        return gpu.performance_state

    def nvmlDeviceGetEccMode(self, gpu: FakeGpu) -> list[int]:
        return [gpu.ecc_mode, gpu.ecc_mode]  # current, pending

    def nvmlDeviceGetMigMode(self, gpu: FakeGpu) -> list[int]:
        return [gpu.mig_mode, gpu.mig_mode]

    def nvmlDeviceGetComputeMode(self, gpu: FakeGpu) -> int:
        return gpu.compute_mode

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12040

    def set_power(self, gpu: FakeGpu, watts: float) -> None:
        """From now on the GPU draws ``watts`` (the energy so far is booked at the old power)."""
        self._integrate(gpu)
        gpu.power_w = watts

    def _integrate(self, gpu: FakeGpu) -> None:
        with self._lock:
            now = self.clock()
            if gpu.read_t is not None:
                gpu.energy_mj += gpu.power_w * (now - gpu.read_t) * 1000
            gpu.read_t = now
