"""Where a run's memory goes: the harness's RSS at the end of the measured phase, around each
final write, and its peak, for a run against the reference server (in this process), with
``--trace`` tracemalloc's largest lines at the end of the measured phase.

    .venv/bin/python benchmarks/memory_phases.py 2000 10000 40000
    .venv/bin/python benchmarks/memory_phases.py 8000 --trace      # slower: every allocation traced

Each count runs in a process of its own (the peak is the process's). benchmarks/long_run_memory.py
measures the same from outside, through the command line.
"""

from __future__ import annotations

import argparse
import gc
import resource
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent


def rss_mib() -> float:
    return psutil.Process().memory_info().rss / 2**20


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def watch(cls: type, name: str, trace: bool, snapshots: dict) -> None:
    """Print RSS and peak around ``cls.name``; before PointRun.summary also snapshot tracemalloc."""
    inner = getattr(cls, name)

    def wrapped(*args, **kwargs):
        gc.collect()
        before = rss_mib(), peak_mib()
        if trace and name == "summary":
            snapshots["end of the measured phase"] = tracemalloc.take_snapshot()
        try:
            return inner(*args, **kwargs)
        finally:
            print(
                f"  {name}: RSS {before[0]:.0f} → {rss_mib():.0f} MiB, peak {before[1]:.0f} → {peak_mib():.0f} MiB",
                flush=True,
            )

    setattr(cls, name, wrapped)


def one_run(n: int, trace: bool) -> None:
    sys.path.insert(0, str(ROOT))
    from harness.cli import compose_config
    from harness.results.store import RunWriter
    from harness.run import point

    snapshots: dict = {}
    watch(point.PointRun, "summary", trace, snapshots)
    watch(RunWriter, "write_tables", trace, snapshots)
    watch(RunWriter, "write_summary", trace, snapshots)
    cfg = compose_config(
        "progress=false",
        "backend=reference",
        "model=tiny-random",
        "workload=synthetic",
        f"workload.num_requests={n}",
        "workload.concurrency=256",
        "workload.input_len=32",
        "workload.output_len=64",
        "workload.warmup_requests=256",
        "backend.ttft_ms=5",
        "backend.itl_ms=1",
        "report=false",
        "machine.enabled=false",
    )
    print(f"{n:,} requests (RSS before: {rss_mib():.0f} MiB)", flush=True)
    if trace:
        tracemalloc.start(8)
    with tempfile.TemporaryDirectory() as tmp:
        point.run_benchmark(cfg, Path(tmp) / "run")
    gc.collect()
    print(f"  after the run: RSS {rss_mib():.0f} MiB, peak {peak_mib():.0f} MiB", flush=True)
    if trace:
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        print(f"  tracemalloc peak {peak:.0f} MiB; at the end of the measured phase:")
        for stat in snapshots["end of the measured phase"].statistics("lineno")[:20]:
            print(f"  {stat.size / 2**20:8.1f} MiB {stat.count:9d}  {stat.traceback[0]}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("requests", type=int, nargs="+")
    p.add_argument("--trace", action="store_true")
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # the child process
    a = p.parse_args()
    if a.one:
        one_run(a.requests[0], a.trace)
        return
    for n in a.requests:
        subprocess.run([sys.executable, __file__, str(n), "--one", *(["--trace"] if a.trace else [])], check=True)


if __name__ == "__main__":
    main()
