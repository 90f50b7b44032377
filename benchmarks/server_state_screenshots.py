"""report.html and compare.html with the server's state over time, from real runs, and their screenshots.

    .venv/bin/python benchmarks/server_state_screenshots.py [--out /tmp/server-shots] [RUN_DIR …]

Two runs against the reference server (tiny-random, open loop), whose /metrics is sampled every
0.25 s: one the server keeps up with, and one where it serves at most 2 requests at once
(``backend.max_running=2``) while requests arrive faster than it can serve them, so its
waiting queue grows through the run and its KV-cache use (reply tokens reserved ÷
``backend.kv_capacity_tokens``) sits at its top. Any RUN_DIRs given (a real engine's server
runs) join the compare. The pages are opened in headless Chromium (tests/browser.py) and
saved as PNG: OUT/report-queue.png, OUT/compare.png.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's packages first
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the tests' helpers (browser.py)

from browser import Chromium, chromium_binary

REPO = Path(__file__).resolve().parent.parent
COMMON = [
    "model=tiny-random",
    "backend=reference",
    "backend.ttft_ms=30",
    "backend.itl_ms=10",
    "workload=synthetic",
    "workload.input_len=48",
    "workload.output_len=32",
    "workload.num_requests=60",
    "workload.rate=12",
    "workload.warmup_requests=0",
    "server_metrics.interval_s=0.25",
    "progress=false",
]
RUNS = {
    "keeps-up": [],
    "queue": ["backend.max_running=2", "backend.kv_capacity_tokens=64"],
}


def harness(module: str, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{module} failed:\n{proc.stderr[-2000:]}")
    return proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/server-shots"))
    parser.add_argument("extra_runs", nargs="*", type=Path, metavar="RUN_DIR")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    runs = []
    for overrides in RUNS.values():
        stdout = harness("harness", *COMMON, *overrides, f"output_root={args.out / 'runs'}")
        runs.append(Path(stdout.strip().splitlines()[-1].removeprefix("results: ")))
    compare_dir = args.out / "compare"
    harness("harness.compare", *map(str, runs), *map(str, args.extra_runs), "--out", str(compare_dir))
    binary = chromium_binary()
    if binary is None:
        sys.exit("chromium is not installed: the pages are written, the screenshots are not")
    browser = Chromium(binary)
    try:
        for page, png in (
            (runs[1] / "report.html", args.out / "report-queue.png"),
            (compare_dir / "compare.html", args.out / "compare.png"),
        ):
            result = browser.open(page, screenshot=png)
            print(f"screenshot: {result.screenshot} ({len(result.plots)} plots, errors: {result.errors or 'none'})")
    finally:
        browser.close()


if __name__ == "__main__":
    main()
