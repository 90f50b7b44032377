"""Memory measured the same way for every engine: process RSS (with child processes, since
some engines run in workers), and on GPUs the torch allocator's and NVML's peaks."""
from __future__ import annotations

import sys
import threading
import time
from typing import Any, Optional

import psutil


class MemorySampler:
    """Samples RSS (and GPU memory used, via NVML when installed) on a background thread."""

    CHILDREN_REFRESH_S = 1.0  # listing child processes scans /proc (~1 ms): not every sample

    def __init__(self, interval_s: float = 0.05):
        self.interval_s = interval_s
        self._children: list[psutil.Process] = []
        self._children_t = float("-inf")
        self.samples: list[tuple[float, int, Optional[int]]] = []  # (perf_counter, rss, gpu used)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="memory-sampler", daemon=True)
        self._process = psutil.Process()
        self._nvml = _nvml_handle()

    def start(self) -> "MemorySampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def sample(self) -> None:
        self.samples.append((time.perf_counter(), self._rss(), self._gpu_used()))

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def _rss(self) -> int:
        total = 0
        try:
            total = self._process.memory_info().rss
            now = time.perf_counter()
            if now - self._children_t >= self.CHILDREN_REFRESH_S:
                self._children, self._children_t = self._process.children(recursive=True), now
            for child in self._children:
                try:
                    total += child.memory_info().rss
                except psutil.Error:
                    pass
        except psutil.Error:
            pass
        return total

    def _gpu_used(self) -> Optional[int]:
        if self._nvml is None:
            return None
        import pynvml

        try:
            return int(pynvml.nvmlDeviceGetMemoryInfo(self._nvml).used)
        except Exception:  # noqa: BLE001
            return None

    def peak_rss(self, since_t: float = float("-inf")) -> Optional[int]:
        values = [rss for t, rss, _ in self.samples if t >= since_t]
        return max(values) if values else None

    def peak_gpu_used(self) -> Optional[int]:
        values = [g for _, _, g in self.samples if g is not None]
        return max(values) if values else None


def _nvml_handle() -> Any:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception:  # noqa: BLE001 - no NVML, no GPU, or no driver
        return None


def torch_gpu_peaks() -> dict[str, int]:
    """The torch allocator's peaks, when torch is already in use with CUDA."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return {}
    return {
        "gpu_peak_allocated_bytes": int(torch.cuda.max_memory_allocated()),
        "gpu_peak_reserved_bytes": int(torch.cuda.max_memory_reserved()),
    }


def reset_torch_gpu_peaks() -> None:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.reset_peak_memory_stats()
