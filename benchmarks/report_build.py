"""How big report.html is, and how long it takes to build, for a run of 1,000 requests.

Makes a real run first (tiny-random, synthetic, 1,000 requests of 40 → 8 tokens, static
batching at concurrency 8: well under a minute on a CPU), unless ``--run DIR`` names one.
Then builds the report ``--repeats`` times in this process: the first build includes
importing plotly; the others are the steady state.

    .venv/bin/python benchmarks/report_build.py [--run results/RUN] [--repeats 3] [--out /tmp/report-bench]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

OVERRIDES = [
    "model=tiny-random",
    "workload=synthetic",
    "workload.num_requests=1000",
    "workload.output_len=8",
    "workload.input_len=40",
    "workload.concurrency=8",
    "backend.batching=static",
    "report=false",
]


def make_run(out: Path) -> Path:
    from conftest import make_config

    from harness.run.point import run_benchmark

    run_dir = out / "run-1000"
    t = time.perf_counter()
    outcome = run_benchmark(make_config(*OVERRIDES), run_dir, progress=False)
    print(
        f"run: {outcome.summary.requests['completed']} requests completed in {time.perf_counter() - t:.1f} s "
        f"(measured phase {outcome.summary.duration_s:.1f} s) → {run_dir}"
    )
    return run_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=None, help="an existing run folder (default: make one)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="where to make the run (default: a temp folder)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="report-bench-"))
    run_dir = args.run or make_run(out)

    import pandas as pd

    n = len(pd.read_parquet(run_dir / "requests.parquet"))
    times = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        from harness.reports.run_report import write_report

        path = write_report(run_dir)
        times.append(time.perf_counter() - t)
    from plotly.offline import get_plotlyjs

    size = path.stat().st_size
    js = len(get_plotlyjs().encode())
    print(f"report: {path}")
    print(f"requests: {n}")
    print(
        f"size: {size / 2**20:.2f} MiB ({size:,} bytes; plotly.js {js / 2**20:.2f} MiB, the run's data and page {(size - js) / 2**10:.0f} KiB)"
    )
    print(
        f"build time: first {times[0]:.2f} s (imports plotly), then "
        f"{statistics.median(times[1:]) if len(times) > 1 else times[0]:.2f} s (median of {max(1, len(times) - 1)})"
    )


if __name__ == "__main__":
    main()
