"""Fresh engines against held ones: what ``harness.ab --keep-loaded`` saves, and the noise it sees.

Runs the same A/A experiment twice, ``python -m harness.ab --aa`` with a fresh engine per run and
then with one engine per arm kept loaded, and prints per mode: the experiment's wall time, a
run's mean wall time (its engine load included where fresh), the cost of a run beyond its
requests (the noise floor's ``cost_run_s``), and each figure's run-to-run sd.

    .venv/bin/python benchmarks/held_engines.py --blocks 5 -- backend=llamacpp model=smollm2-135m \\
        workload=synthetic workload.num_requests=16 workload.concurrency=4 workload.output_len=32
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_mode(keep_loaded: bool, args: argparse.Namespace, folder: Path) -> dict:
    out, floors = folder / ("held" if keep_loaded else "fresh"), folder / "noise"
    cmd = [
        sys.executable,
        "-m",
        "harness.ab",
        "--aa",
        "--blocks",
        str(args.blocks),
        "--seed",
        "1",
        "--out",
        str(out),
        "--noise-dir",
        str(floors),
        *(["--keep-loaded"] if keep_loaded else []),
        "--",
        *args.overrides,
        "report=false",
    ]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    exp = json.loads((out / "ab.json").read_text())
    floor = json.loads(Path(exp["noise_floor"]).read_text())
    walls = [r["wall_s"] for r in exp["runs"]]
    return {
        "wall_s": exp["wall_s"],
        "runs": len(walls),
        "run_wall_s": sum(walls) / len(walls),
        "first_runs_s": walls[:2],
        "cost_run_s": floor["cost_run_s"],
        "sd_run": {name: fig["sd_run"] for name, fig in floor["figures"].items()},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("overrides", nargs="+", help="the run's Hydra overrides (after --)")
    p.add_argument("--blocks", type=int, default=5)
    p.add_argument("--out", type=Path, default=None, help="default: a temporary folder")
    args = p.parse_args()
    folder = args.out or Path(tempfile.mkdtemp(prefix="held-engines-"))
    results = {mode: run_mode(mode == "held", args, folder) for mode in ("fresh", "held")}
    figures = sorted(results["fresh"]["sd_run"])
    print(f"A/A of {args.blocks} blocks: {' '.join(args.overrides)}  (folders in {folder})")
    print(
        f"{'engines':8} {'runs':>5} {'wall s':>8} {'run s':>7} {'cost/run s':>10}  "
        + "  ".join(f"sd {f:>22}" for f in figures)
    )
    for mode, r in results.items():
        sds = "  ".join(f"{r['sd_run'].get(f, float('nan')) * 100:24.2f}%" for f in figures)
        print(f"{mode:8} {r['runs']:5d} {r['wall_s']:8.1f} {r['run_wall_s']:7.2f} {r['cost_run_s']:10.2f}  {sds}")


if __name__ == "__main__":
    main()
