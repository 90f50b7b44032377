"""Run ``python -m harness`` from a benchmark script: the command and its time printed, its run
folders returned (the scripts in benchmarks/ share this)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def run_harness(args: list[str], out: Path, *, report: bool = False, exit_on_failure: bool = True) -> list[Path]:
    """``python -m harness ARGS`` with ``output_root=out``: the run folders under ``out``, oldest
    first (a sweep with -m writes several; the last is the newest). On a failure the tail of its
    output is printed, then the script exits with the harness's code, or [] is returned when
    ``exit_on_failure`` is false."""
    cmd = [
        sys.executable,
        "-m",
        "harness",
        *args,
        "progress=false",
        f"output_root={out}",
        *([] if report else ["report=false"]),
    ]
    print("$ python -m harness", " ".join(args), flush=True)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    print(f"  ({time.perf_counter() - start:.0f} s)", flush=True)
    if proc.returncode != 0:
        print((proc.stderr or proc.stdout)[-3000:], file=sys.stderr)
        if exit_on_failure:
            raise SystemExit(proc.returncode)
        return []
    return [p.parent for p in sorted(out.glob("**/summary.json"), key=lambda p: p.stat().st_mtime)]


def read_summary(run_dir: Path) -> dict[str, Any]:
    """The run's summary.json, with the folder under ``dir``."""
    return {"dir": str(run_dir), **json.loads((run_dir / "summary.json").read_text())}
