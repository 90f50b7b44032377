"""The harness's own memory over a long run: peak RSS at 1×, 10× and 100× the requests.

Each run is ``python -m harness backend=reference workload=synthetic`` in a process of its own
(the reference server in another, as always in server mode); this script samples the harness
process's RSS (not its children's) every 0.1 s and prints, per request count: the peak over the
whole run (the tables written at its end included), its wall time, the requests per second, and
the bytes per request of the growth (peak − the smallest run's peak) / (requests − its requests).

    .venv/bin/python benchmarks/long_run_memory.py [--requests 2000 20000 200000]
        [--concurrency 256] [--rate R] [--output-len 64] [--python .venv/bin/python] [--cwd .]

``--cwd`` and ``--python`` run another checkout (e.g. a ``git worktree`` of an older commit)
for a before/after. The report is off (``report=false``): it reads the whole requests table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent


def run(n: int, args: argparse.Namespace, out: Path) -> dict:
    cmd = [
        args.python,
        "-m",
        "harness",
        "backend=reference",
        "model=tiny-random",
        "workload=synthetic",
        f"workload.num_requests={n}",
        f"workload.concurrency={args.concurrency}",
        "workload.input_len=32",
        f"workload.output_len={args.output_len}",
        f"workload.warmup_requests={args.concurrency}",
        *([f"workload.rate={args.rate}", "saturation.enabled=false"] if args.rate else []),
        f"backend.ttft_ms={args.ttft_ms}",
        f"backend.itl_ms={args.itl_ms}",
        "report=false",
        "progress=false",
        "machine.enabled=false",
        f"hydra.run.dir={out}",
    ]
    proc = subprocess.Popen(cmd, cwd=args.cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ps = psutil.Process(proc.pid)
    peak = 0
    t0 = time.perf_counter()
    while proc.poll() is None:
        try:
            rss = ps.memory_info().rss
        except psutil.Error:
            break
        peak = max(peak, rss)
        time.sleep(0.1)
    err = proc.communicate()[1]
    if proc.returncode != 0:
        sys.exit(f"the run of {n} requests failed ({proc.returncode}): {err.strip().splitlines()[-1:]}")
    summary = json.loads(next(out.rglob("summary.json")).read_text())
    return {
        "requests": n,
        "peak_mib": peak / 2**20,
        "wall_s": time.perf_counter() - t0,
        "req_s": summary["throughput"]["requests_per_s"],
        "itl_sampled": summary["harness"].get("itl_sampled"),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, nargs="+", default=[2000, 20000, 200000])
    p.add_argument("--concurrency", type=int, default=256)
    p.add_argument("--rate", type=float, help="an open loop at this many requests/s (the concurrency then a cap)")
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--ttft-ms", type=float, default=5.0)
    p.add_argument("--itl-ms", type=float, default=1.0)
    p.add_argument("--python", default=str(ROOT / ".venv/bin/python"))
    p.add_argument("--cwd", default=str(ROOT))
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.requests:
            rows.append(run(n, args, Path(tmp) / f"n{n}"))
            r = rows[-1]
            grow = ""
            if len(rows) > 1:
                base = rows[0]
                per = (r["peak_mib"] - base["peak_mib"]) * 2**20 / (n - base["requests"])
                grow = f"  growth {per:,.0f} B/request"
            print(
                f"{n:>8,} requests: peak {r['peak_mib']:7.0f} MiB  wall {r['wall_s']:5.0f} s  "
                f"{r['req_s']:6.0f} req/s{grow}  itl_sampled={r['itl_sampled']}",
                flush=True,
            )


if __name__ == "__main__":
    main()
