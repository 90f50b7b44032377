"""A stand-in for nvidia-ml-py's ``pynvml``: exactly the calls harness/telemetry/gpu.py makes, on GPUs
whose power, utilisation, memory and processes a test sets. The energy counter integrates the
power over the fake's clock (power changes count from the last reading on), so a test knows
the energy of any interval. Install it with ``monkeypatch.setitem(sys.modules, "pynvml", fake)``.
"""
from __future__ import annotations

import threading
import time
import types
from dataclasses import dataclass, field
from typing import Callable, Optional

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
    read_t: Optional[float] = field(default=None, repr=False)


class FakeNVML(types.ModuleType):
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
