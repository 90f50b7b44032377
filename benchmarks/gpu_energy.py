"""On a GPU machine: a short run, and the harness's NVML figures next to nvidia-smi's.

While ``python -m harness`` runs, ``nvidia-smi`` samples every GPU every 100 ms (power,
utilisation, memory used) and the compute processes every 200 ms. Afterwards, over the
measured phase (``summary.json`` → ``gpu.window_unix_s``) and for the GPUs the run measured
(matched by UUID), it prints side by side:

- energy: the harness's (NVML's energy counter, or its sampled power) and ∫ power.draw dt of
  nvidia-smi's samples (trapezoids), Σ over the GPUs;
- mean power (W) and mean utilisation (%) over the phase;
- peak memory used per GPU over the run, and the peak Σ over the GPUs of the memory of
  nvidia-smi's compute processes (all of them: on a machine given to the run, the engine's)
  against the harness's per-process figure.

Exit status 1 when a figure differs by more than its tolerance (energy and power 15 %,
utilisation 15 points, memory 5 % + 64 MiB), 2 when the run or nvidia-smi did not work.
``nvidia-smi``'s power.draw is a 1 s mean on recent GPUs, so short runs differ more: the
default run lasts a few tens of seconds.

    .venv/bin/python benchmarks/gpu_energy.py                       # the default run below
    .venv/bin/python benchmarks/gpu_energy.py -- backend=vllm model=smollm2-135m workload.num_requests=200
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Optional

import numpy as np

REPO = Path(__file__).resolve().parent.parent
DEFAULT_RUN = [
    "backend=transformers",
    "backend.device=cuda",
    "backend.batching=static",
    "backend.max_batch_size=16",
    "model=smollm2-135m",
    "workload=synthetic",
    "workload.num_requests=128",
    "workload.concurrency=16",
    "workload.input_len=256",
    "workload.output_len=256",
    "progress=false",
]
GPU_QUERY = "timestamp,uuid,power.draw,utilization.gpu,memory.used"
APPS_QUERY = "timestamp,gpu_uuid,pid,used_memory"
TOLERANCE = {"energy": 0.15, "power": 0.15, "util_points": 15.0, "memory": 0.05, "memory_abs": 64 * 2**20}


def parse_time(text: str) -> float:
    """nvidia-smi's timestamp (local time, ``2024/01/31 12:00:00.123``) as Unix seconds."""
    return datetime.strptime(text.strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()


def number(text: str) -> Optional[float]:
    try:
        return float(text.strip())
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None


def read_csv(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        return [row for row in csv.reader(f) if row and not row[0].startswith("timestamp")]


def smi_gpu_samples(path: Path) -> dict[str, dict[str, np.ndarray]]:
    """uuid → arrays t, power_w, util_pct, used_bytes."""
    out: dict[str, dict[str, list[float]]] = {}
    for row in read_csv(path):
        if len(row) < 5:
            continue
        try:
            t = parse_time(row[0])
        except ValueError:
            continue
        d = out.setdefault(row[1].strip(), {"t": [], "power_w": [], "util_pct": [], "used_bytes": []})
        used = number(row[4])
        for key, value in (
            ("t", t),
            ("power_w", number(row[2])),
            ("util_pct", number(row[3])),
            ("used_bytes", used * 2**20 if used is not None else None),
        ):
            d[key].append(np.nan if value is None else value)
    return {u: {k: np.asarray(v, dtype=float) for k, v in d.items()} for u, d in out.items()}


def smi_process_peak(path: Path, uuids: set[str]) -> Optional[float]:
    """The peak over nvidia-smi's samples of Σ used_memory of the compute processes on ``uuids``."""
    totals: dict[str, float] = {}
    for row in read_csv(path):
        if len(row) < 4 or row[1].strip() not in uuids:
            continue
        used = number(row[3])
        if used is not None:
            totals[row[0].strip()] = totals.get(row[0].strip(), 0.0) + used * 2**20
    return max(totals.values()) if totals else None


def phase_integral(t: np.ndarray, v: np.ndarray, t0: float, t1: float) -> Optional[float]:
    """∫ v dt over [t0, t1] through the samples (the values at t0 and t1 interpolated)."""
    keep = np.isfinite(t) & np.isfinite(v)
    t, v = t[keep], v[keep]
    if t.size == 0 or t[0] > t0 or t[-1] < t1:
        return None
    grid = np.concatenate([[t0], t[(t > t0) & (t < t1)], [t1]])
    values = np.interp(grid, t, v)
    return float(np.sum((values[1:] + values[:-1]) / 2 * np.diff(grid)))


def compare_line(name: str, harness: Optional[float], smi: Optional[float], unit: str, ok: Optional[bool]) -> str:
    h = "–" if harness is None else f"{harness:,.2f}"
    s = "–" if smi is None else f"{smi:,.2f}"
    rel = f"{(harness - smi) / smi * 100:+.1f}%" if harness is not None and smi else ""
    verdict = {True: "ok", False: "DIFFERS", None: "n/a"}[ok]
    return f"{name:<38} {h:>14} {s:>14} {unit:<8} {rel:>8}  {verdict}"


def within(harness: Optional[float], smi: Optional[float], rel: float, abs_: float = 0.0) -> Optional[bool]:
    if harness is None or smi is None:
        return None
    return abs(harness - smi) <= rel * abs(smi) + abs_


def check(run_dir: Path, gpu_csv: Path, apps_csv: Path) -> int:
    summary = json.loads((run_dir / "summary.json").read_text())
    gpu = summary.get("gpu")
    if not gpu:
        print("the run has no GPU figures: is nvidia-ml-py installed (pip install -e '.[gpu]') and a GPU visible?")
        return 2
    if not gpu.get("window_unix_s"):
        print("the run has no measured phase")
        return 2
    t0, t1 = gpu["window_unix_s"]
    smi = smi_gpu_samples(gpu_csv)
    devices = [d for d in gpu["devices"] if d.get("uuid") in smi]
    if len(devices) != len(gpu["devices"]):
        print(f"nvidia-smi did not sample every GPU the run measured ({[d.get('uuid') for d in gpu['devices']]})")
        return 2
    span = t1 - t0
    lines, verdicts = [], []

    def add(name: str, h: Optional[float], s: Optional[float], unit: str, ok: Optional[bool]) -> None:
        lines.append(compare_line(name, h, s, unit, ok))
        verdicts.append(ok)

    smi_energy = [phase_integral(smi[d["uuid"]]["t"], smi[d["uuid"]]["power_w"], t0, t1) for d in devices]
    smi_total = sum(smi_energy) if None not in smi_energy else None
    add(
        f"energy ({gpu.get('energy_source')})",
        gpu.get("energy_j"),
        smi_total,
        "J",
        within(gpu.get("energy_j"), smi_total, TOLERANCE["energy"]),
    )
    thr = summary.get("throughput") or {}
    smi_power = smi_total / span if smi_total is not None and span > 0 else None
    add(
        "mean power",
        thr.get("gpu_power_w"),
        smi_power,
        "W",
        within(thr.get("gpu_power_w"), smi_power, TOLERANCE["power"]),
    )
    smi_util = [phase_integral(smi[d["uuid"]]["t"], smi[d["uuid"]]["util_pct"], t0, t1) for d in devices]
    smi_util_mean = (sum(smi_util) / len(smi_util) / span) if None not in smi_util and span > 0 else None
    util = thr.get("gpu_util") * 100 if thr.get("gpu_util") is not None else None
    add("mean utilisation", util, smi_util_mean, "%", within(util, smi_util_mean, 0.0, TOLERANCE["util_points"]))
    tokens = (summary.get("tokens") or {}).get("output_total")
    add(
        "energy per output token",
        thr.get("energy_per_token_j"),
        smi_total / tokens if smi_total and tokens else None,
        "J/token",
        None,
    )
    for d in devices:
        used = smi[d["uuid"]]["used_bytes"]
        peak = float(np.nanmax(used)) if np.isfinite(used).any() else None
        add(
            f"GPU {d['index']} peak memory used",
            _mib(d.get("peak_used_bytes")),
            _mib(peak),
            "MiB",
            within(d.get("peak_used_bytes"), peak, TOLERANCE["memory"], TOLERANCE["memory_abs"]),
        )
    procs = smi_process_peak(apps_csv, {d["uuid"] for d in devices})
    engine = (summary.get("memory") or {}).get("gpu_nvml_peak_process_used_bytes")
    add(
        "peak memory of the engine's processes",
        _mib(engine),
        _mib(procs),
        "MiB",
        within(engine, procs, TOLERANCE["memory"], TOLERANCE["memory_abs"]),
    )

    names = ", ".join(f"GPU {d['index']} ({d['name']})" for d in devices)
    print(f"measured phase: {span:.1f} s on {names}; scope: {gpu.get('scope')}; {gpu.get('samples')} NVML samples")
    print(f"{'figure':<38} {'harness (NVML)':>14} {'nvidia-smi':>14} {'unit':<8} {'diff':>8}")
    print("\n".join(lines))
    for note in gpu.get("notes") or []:
        print(f"note: {note}")
    if any(v is False for v in verdicts):
        print("some figures differ beyond their tolerance")
        return 1
    return 0


def _mib(value: Optional[float]) -> Optional[float]:
    return None if value is None else value / 2**20


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="run folder (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument(
        "overrides", nargs="*", help="Hydra overrides for the run (after --); default: " + " ".join(DEFAULT_RUN)
    )
    args = parser.parse_args(argv)
    if shutil.which("nvidia-smi") is None:
        print("nvidia-smi is not on PATH: this check needs an NVIDIA GPU machine", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="gpu-energy-"))
    run_dir = args.out or work / "run"
    gpu_csv, apps_csv = work / "nvidia-smi-gpu.csv", work / "nvidia-smi-apps.csv"
    overrides = args.overrides or DEFAULT_RUN
    samplers = []
    try:
        for query, interval_ms, path in (
            (f"--query-gpu={GPU_QUERY}", 100, gpu_csv),
            (f"--query-compute-apps={APPS_QUERY}", 200, apps_csv),
        ):
            with open(path, "w") as out:  # the child keeps its own copy of the descriptor
                samplers.append(
                    subprocess.Popen(
                        ["nvidia-smi", query, "--format=csv,noheader,nounits", f"--loop-ms={interval_ms}"],
                        stdout=out,
                        stderr=subprocess.DEVNULL,
                    )
                )
        proc = subprocess.run([sys.executable, "-m", "harness", *overrides, f"hydra.run.dir={run_dir}"], cwd=REPO)
    finally:
        for sampler in samplers:
            sampler.terminate()
            sampler.wait(timeout=10)
    if proc.returncode != 0:
        print(f"the run failed (exit {proc.returncode})", file=sys.stderr)
        return 2
    status = check(run_dir, gpu_csv, apps_csv)
    if args.keep or status:
        print(f"files: {run_dir} (run), {gpu_csv}, {apps_csv}")
    elif args.out is None:
        shutil.rmtree(work, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
