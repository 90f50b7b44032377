"""trend.html from real histories, one with an injected change and one without, and their screenshots.

    .venv/bin/python benchmarks/trend_screenshots.py [--out /tmp/trend-shots] [--runs 12] [OVERRIDE…]

Each history is ``--runs`` real runs against the reference server (tiny-random, 8 requests of
32 → 24 tokens at concurrency 2, ±1 ms jitter per token), made by one sweep with repeats, in
order: in the first the server's inter-token latency is 10 ms for the first half of the runs
and 11.5 ms (+15 %) after, the change this page should mark; in the second it stays 10 ms.
Both are added with ``python -m harness.history add``, drawn with ``trend`` and checked with
``check``; the pages are opened in headless Chromium (tests/browser.py) and saved as PNG:
OUT/trend-change.png and OUT/trend-no-change.png (with their trend.html beside them).
OVERRIDEs go to every run (e.g. ``machine.enabled=false`` on a machine other jobs keep busy:
its runs are tainted otherwise, drawn grey and left out of the change points).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's packages first
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the tests' helpers (browser.py)

from browser import Chromium, chromium_binary

REPO = Path(__file__).resolve().parent.parent
RUN = [
    "model=tiny-random",
    "backend=reference",
    "backend.ttft_ms=20",
    "backend.jitter_ms=1",
    "workload=synthetic",
    "workload.input_len=32",
    "workload.output_len=24",
    "workload.num_requests=8",
    "workload.concurrency=2",
    "workload.warmup_requests=1",
    "progress=false",
    "report=false",
]


def harness(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        sys.exit(f"{' '.join(args[:2])} failed:\n{proc.stderr[-2000:]}")
    return proc


def make_history(out: Path, name: str, itl_ms: list[float], runs_per_value: int, overrides: list[str]) -> Path:
    """A sweep of ``runs_per_value`` repeats per ITL (in order), added to its own history."""
    results, root = out / f"{name}-results", out / f"{name}-history"
    shutil.rmtree(results, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)
    values = ",".join(str(v) for v in itl_ms)
    harness(
        "harness",
        "-m",
        *RUN,
        *overrides,
        f"backend.itl_ms={values}",
        f"repeat={runs_per_value}",
        f"output_root={results}",
    )
    sweep = next(results.glob("sweep-*"))
    added = harness("harness.history", "add", str(root), str(sweep)).stdout
    print(f"{name}: {added.count('added: ')} runs added to {root}")
    page = out / f"trend-{name}.html"
    print(harness("harness.history", "trend", str(root), "--out", str(page)).stdout.strip())
    check = harness("harness.history", "check", str(root))
    print(f"check exit {check.returncode}: " + check.stdout.strip().replace("\n", "\n  "))
    return page


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/trend-shots"))
    parser.add_argument("--runs", type=int, default=12, help="runs per history (even)")
    parser.add_argument("overrides", nargs="*", metavar="OVERRIDE", help="Hydra overrides for every run")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    half = args.runs // 2
    pages = {
        "change": make_history(args.out, "change", [10.0, 11.5], half, args.overrides),
        "no-change": make_history(args.out, "no-change", [10.0], 2 * half, args.overrides),
    }
    binary = chromium_binary()
    if binary is None:
        sys.exit("chromium is not installed: the pages are written, the screenshots are not")
    browser = Chromium(binary)
    try:
        for name, page in pages.items():
            result = browser.open(page, screenshot=args.out / f"trend-{name}.png")
            print(f"screenshot: {result.screenshot} ({len(result.plots)} plots, errors: {result.errors or 'none'})")
    finally:
        browser.close()


if __name__ == "__main__":
    main()
