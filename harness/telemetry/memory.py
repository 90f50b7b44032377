"""Memory measured the same way for every engine: process RSS (with child processes, since
some engines run in workers), and on GPUs the torch allocator's peaks and NVML's samples
(harness/telemetry/gpu.py: memory, utilisation, power and energy of the visible GPUs)."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Optional

import psutil

from harness.telemetry.gpu import GpuTelemetry, Row
from harness.telemetry.processes import engine_pids


class MemorySampler:
    """Samples RSS, and the GPUs through NVML when it is there, on one background thread.

    ``engine_process`` says where the engine runs (``Backend.engine_process``): its processes'
    GPU memory is ``process_used_bytes``; None means no local engine process (a remote server).
    """

    CHILDREN_REFRESH_S = 1.0  # listing child processes scans /proc (~1 ms): not every sample
    # NVML's figures change no faster than this (power is a 1 s mean on recent GPUs, the energy
    # counter moves every 20-100 ms, utilisation covers 1/6-1 s): reading them more often costs
    # NVML calls and tells nothing more
    GPU_MIN_INTERVAL_S = 0.1

    def __init__(self, interval_s: float = 0.05, engine_process: Callable[[], Optional[int]] = os.getpid):
        self.interval_s = interval_s
        self._children: list[psutil.Process] = []
        self._children_t = float("-inf")
        self.samples: list[tuple[float, int]] = []  # (perf_counter, rss)
        self.gpu = GpuTelemetry.open()  # None without NVML or a visible GPU (one info line says why)
        self.gpu_samples: list[Row] = []  # one row per device per GPU sample (harness/telemetry/gpu.py COLUMNS)
        self.engine_local = False  # an engine process was seen (per-process GPU memory is meaningful)
        self._engine_process = engine_process
        self._engine_root: Optional[int] = None
        self._engine_pids: Optional[frozenset[int]] = None
        self._engine_pids_t = float("-inf")
        self._gpu_t = float("-inf")
        self._stop = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="memory-sampler", daemon=True)
        self._process = psutil.Process()

    def start(self) -> MemorySampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        """End the sampling with one last sample (after the measured phase) and close NVML; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        self.sample(force_gpu=True)
        if self.gpu is not None:
            self.gpu.close()

    def sample(self, force_gpu: bool = False) -> None:
        now = time.perf_counter()
        self.samples.append((now, self._rss()))
        if self.gpu is not None and (force_gpu or now - self._gpu_t >= max(self.interval_s, self.GPU_MIN_INTERVAL_S)):
            self._gpu_t = now
            self.gpu_samples.extend(self.gpu.read(self._engine_process_ids(now)))

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def _engine_process_ids(self, now: float) -> Optional[frozenset[int]]:
        """The engine's PIDs, listed again when its root changes (a server started) or every second."""
        try:
            root = self._engine_process()
        except Exception:  # noqa: BLE001 - a backend being closed
            root = None
        if root is None:
            self._engine_root, self._engine_pids = None, None
            return None
        self.engine_local = True
        if root != self._engine_root or now - self._engine_pids_t >= self.CHILDREN_REFRESH_S:
            self._engine_root, self._engine_pids, self._engine_pids_t = root, engine_pids(root), now
        return self._engine_pids

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

    def peak_rss(self, since_t: float = float("-inf")) -> Optional[int]:
        values = [rss for t, rss in self.samples if t >= since_t]
        return max(values) if values else None


def torch_gpu_peaks() -> dict[str, object]:
    """The torch allocator's peaks in this process, when torch is already in use with CUDA: Σ over
    its devices of each one's peak, and per device when there are several."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return {}
    n = torch.cuda.device_count()
    allocated = [int(torch.cuda.max_memory_allocated(i)) for i in range(n)]
    reserved = [int(torch.cuda.max_memory_reserved(i)) for i in range(n)]
    out: dict[str, object] = {"gpu_peak_allocated_bytes": sum(allocated), "gpu_peak_reserved_bytes": sum(reserved)}
    if n > 1:
        out["gpu_peak_allocated_bytes_per_device"] = allocated
        out["gpu_peak_reserved_bytes_per_device"] = reserved
    return out


def reset_torch_gpu_peaks() -> None:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        for i in range(torch.cuda.device_count()):
            torch.cuda.reset_peak_memory_stats(i)
