"""The run's GPU figures from its NVML samples (harness/telemetry/gpu.py): energy, power and utilisation
over the measured phase, and memory peaks over the whole run.

Over the measured phase [t0, t1] (T = t1 − t0), for each visible device:

- energy E_d = counter(t1) − counter(t0) from NVML's total energy counter (mJ since the driver
  loaded), the counter at t0 and t1 interpolated linearly between the samples around them;
  where the device has no counter, E_d = ∫ P dt over [t0, t1] of the sampled power (trapezoids,
  the power at t0 and t1 interpolated likewise);
- utilisation U_d = (1/T) ∫ u dt of the sampled ``utilization.gpu`` (the share of NVML's last
  sample period in which a kernel ran), the same way.

The run's energy is Σ_d E_d (absent if a device has neither counter nor power), its
utilisation the mean of U_d over the devices that report it. A phase the samples do not cover
(no sample at or before t0, or none at or after t1) has no figure.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import pandas as pd

from harness.telemetry.gpu import COLUMNS

COUNTER, POWER = "nvml_energy_counter", "sampled_power"


@dataclass
class GpuPhase:
    """What the run metrics (harness/results/metrics.py) read: the measured phase's GPU energy
    (J, Σ over devices) and mean utilisation (fraction, mean over devices)."""

    energy_j: Optional[float]
    util: Optional[float]
    energy_source: Optional[str] = None  # COUNTER, POWER or "mixed"
    devices: list[dict[str, Any]] = field(
        default_factory=list
    )  # per device: energy_j, energy_source, mean_power_w, util


def frame(rows: Sequence[tuple]) -> pd.DataFrame:
    """The samples as a table with gpu.parquet's columns (t in perf_counter seconds)."""
    return pd.DataFrame(list(rows), columns=list(COLUMNS))


def measured_phase(samples: pd.DataFrame, devices: Sequence[int], t0: float, t1: float) -> GpuPhase:
    """Energy and utilisation over [t0, t1] (module docstring), per device and in all."""
    per_device: list[dict[str, Any]] = []
    for d in devices:
        rows = samples[samples["device"] == d].sort_values("t")
        t = rows["t"].to_numpy(float)
        energy, source = counter_delta(t, _floats(rows["energy_j"]), t0, t1), COUNTER
        if energy is None:
            energy, source = integral(t, _floats(rows["power_w"]), t0, t1), POWER
        util = integral(t, _floats(rows["util_pct"]), t0, t1)
        span = t1 - t0
        per_device.append(
            {
                "device": d,
                "energy_j": energy,
                "energy_source": source if energy is not None else None,
                "mean_power_w": energy / span if energy is not None and span > 0 else None,
                "util": util / span / 100.0 if util is not None and span > 0 else None,
            }
        )
    energies = [p["energy_j"] for p in per_device]
    utils = [p["util"] for p in per_device if p["util"] is not None]
    sources = {p["energy_source"] for p in per_device}
    total = sum(energies) if per_device and None not in energies else None
    return GpuPhase(
        energy_j=total,
        util=sum(utils) / len(utils) if utils else None,
        energy_source=(sources.pop() if len(sources) == 1 else "mixed") if total is not None else None,
        devices=per_device,
    )


def counter_delta(t: np.ndarray, counter: np.ndarray, t0: float, t1: float) -> Optional[float]:
    """counter(t1) − counter(t0), each interpolated between the samples around it; None when the
    samples do not cover [t0, t1] or the counter went back (a driver reload)."""
    t, counter = _finite(t, counter)
    if not _covers(t, t0, t1):
        return None
    delta = float(np.interp(t1, t, counter) - np.interp(t0, t, counter))
    return delta if delta >= 0 else None


def integral(t: np.ndarray, values: np.ndarray, t0: float, t1: float) -> Optional[float]:
    """∫ values dt over [t0, t1] by trapezoids through the samples inside and the values
    interpolated at t0 and t1; None when the samples do not cover [t0, t1]."""
    t, values = _finite(t, values)
    if not _covers(t, t0, t1):
        return None
    inside = (t > t0) & (t < t1)
    grid = np.concatenate([[t0], t[inside], [t1]])
    v = np.interp(grid, t, values)
    return float(np.sum((v[1:] + v[:-1]) / 2 * np.diff(grid)))


def memory_peaks(samples: pd.DataFrame) -> dict[str, Any]:
    """Whole-run peaks: of Σ over devices of memory used, of Σ over devices of the engine
    processes' memory, and each device's own."""
    out: dict[str, Any] = {"used_bytes": None, "process_used_bytes": None, "per_device": {}}
    if samples.empty:
        return out
    for key in ("used_bytes", "process_used_bytes"):
        values = samples[["t", key]].dropna()
        if not values.empty:
            out[key] = int(values.groupby("t")[key].sum().max())
    device = samples["device"].to_numpy(int)
    for d in np.unique(device):
        rows = samples[device == d]
        out["per_device"][int(d)] = {
            key: int(rows[key].max()) if rows[key].notna().any() else None
            for key in ("used_bytes", "process_used_bytes")
        }
    return out


def _floats(column: pd.Series) -> np.ndarray:
    return pd.to_numeric(column, errors="coerce").to_numpy(float)


def _finite(t: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    keep = np.isfinite(t) & np.isfinite(values)
    t, values = t[keep], values[keep]
    order = np.argsort(t, kind="stable")
    return t[order], values[order]


def _covers(t: np.ndarray, t0: float, t1: float) -> bool:
    return t.size > 0 and t1 >= t0 and t[0] <= t0 and t[-1] >= t1


@dataclass
class GpuRun:
    """A run's GPU figures: the measured phase's (for the run metrics), summary.json's ``gpu``
    section, and the keys it adds to summary.json's ``memory``."""

    phase: Optional[GpuPhase]
    section: dict[str, Any]
    memory: dict[str, Optional[int]]


WHOLE_DEVICE = "Energy, power and utilisation are whole-GPU figures (NVML has none per process): other work on these GPUs counts too."
REMOTE = (
    "The engine is no local process (a remote server): there is no per-process GPU memory, and every figure is the "
    "whole GPUs', the engine's only when its server runs on these GPUs."
)
UNLISTED = (
    "No process of the engine appeared in NVML's list of compute processes (in a container NVML may list the "
    "host's PIDs): per-process GPU memory is absent."
)


def run_figures(
    devices: Sequence[dict[str, Any]],
    notes: Sequence[str],
    rows: Sequence[tuple],
    engine_local: bool,
    t0: Optional[float],
    t1: Optional[float],
    interval_s: float,
) -> GpuRun:
    """Everything the summary says about the GPUs, from the samples; [t0, t1]: the measured
    phase in perf_counter seconds (None: it never began)."""
    samples = frame(rows)
    peaks = memory_peaks(samples)
    phase = (
        measured_phase(samples, [d["index"] for d in devices], t0, t1) if t0 is not None and t1 is not None else None
    )
    per_phase = {p["device"]: p for p in (phase.devices if phase else [])}
    section_notes = [WHOLE_DEVICE, *notes]
    if not engine_local:
        section_notes.append(REMOTE)
    elif peaks["process_used_bytes"] is None:
        section_notes.append(UNLISTED)
    offset = time.time() - time.perf_counter()
    section = {
        "scope": "engine processes" if engine_local else "device",
        "energy_j": phase.energy_j if phase else None,
        "energy_source": phase.energy_source if phase else None,
        "window_unix_s": [t0 + offset, t1 + offset] if t0 is not None and t1 is not None else None,  # (the phase's)
        "samples": int(samples["t"].nunique()),
        "sample_interval_s": interval_s,
        "devices": [
            {
                **d,
                "peak_used_bytes": peaks["per_device"].get(d["index"], {}).get("used_bytes"),
                "peak_process_used_bytes": peaks["per_device"].get(d["index"], {}).get("process_used_bytes"),
                **{k: v for k, v in per_phase.get(d["index"], {}).items() if k != "device"},
            }
            for d in devices
        ],
        "notes": section_notes,
    }
    memory = {
        "gpu_nvml_peak_used_bytes": peaks["used_bytes"],
        "gpu_nvml_peak_process_used_bytes": peaks["process_used_bytes"],
    }
    return GpuRun(phase, section, memory)
