"""What a sweep costs beyond its measurements: wall time ÷ (one engine load + Σ measured phases).

Runs, as a user would, the 4-point sweep of issue 9 and reads its sweep.json:

    python -m harness -m backend=vllm workload=synthetic workload.num_requests=8 \
        workload.input_len=64 workload.output_len=32 workload.concurrency=1,2,4,8

    .venv/bin/python benchmarks/sweep_reuse.py                      # in-process, engine reused
    .venv/bin/python benchmarks/sweep_reuse.py --no-reuse           # every point loads (as before the session split)
    .venv/bin/python benchmarks/sweep_reuse.py --mode server        # vLLM's server, started once
    .venv/bin/python benchmarks/sweep_reuse.py --backend llamacpp --extra backend.batched=true

The ideal is 1.0: the sweep takes one load and its measured phases. What is left above it is
Python start-up, model resolution, warm-up requests, writing results and reports, and (with
--no-reuse) every extra load.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="vllm")
    parser.add_argument("--mode", default="inprocess", choices=["inprocess", "server"])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument(
        "--no-reuse", action="store_true", help="sweep.reuse_engine=false: load the engine at every point"
    )
    parser.add_argument("--concurrency", default="1,2,4,8")
    parser.add_argument("--extra", nargs="*", default=[], help="more overrides, e.g. backend.batched=true")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="sweep-bench-") as tmp:
        cmd = [
            sys.executable,
            "-m",
            "harness",
            "-m",
            f"backend={args.backend}",
            f"backend.mode={args.mode}",
            f"model={args.model}",
            "workload=synthetic",
            "workload.num_requests=8",
            "workload.input_len=64",
            "workload.output_len=32",
            f"workload.concurrency={args.concurrency}",
            "progress=false",
            f"sweep.reuse_engine={'false' if args.no_reuse else 'true'}",
            f"output_root={tmp}",
            *args.extra,
        ]
        print("$", " ".join(cmd[1:]), flush=True)
        t = time.perf_counter()
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
        wall = time.perf_counter() - t
        if proc.returncode != 0:
            print(proc.stderr[-3000:], file=sys.stderr)
            return proc.returncode
        sweep = json.loads(next(Path(tmp).glob("sweep-*/sweep.json")).read_text())
        measured, loads = 0.0, []
        for point in sweep["points"]:
            summary = json.loads((Path(point["run_dirs"][0]) / "summary.json").read_text())
            measured += summary["duration_s"]
            if summary["load_s"]:
                loads.append(summary["load_s"])
        one_load = loads[0]
        ratio = wall / (one_load + measured)
        print(
            f"points: {len(sweep['points'])} · engine loads: {sweep['engine_loads']} ({', '.join(f'{s:.1f}' for s in loads)} s)"
        )
        print(
            f"wall {wall:.1f} s · one load {one_load:.1f} s · Σ measured phases {measured:.1f} s · "
            f"all loads {sum(loads):.1f} s"
        )
        print(f"ratio wall / (one load + Σ measured) = {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
