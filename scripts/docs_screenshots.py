"""The screenshots in docs/images/, made from real runs: report.png, compare.png and import-compare.png.

    .venv/bin/python scripts/docs_screenshots.py [--out docs/images] [--keep DIR | --reuse DIR] [--run 'OVERRIDES' …]
        [--size WIDTHxHEIGHT] [-- OVERRIDE…]
    .venv/bin/python scripts/docs_screenshots.py --compare RUN RUN … [--out docs/images] [--size WIDTHxHEIGHT]

Two runs of ``python -m harness`` on SmolLM2-135M (``model=smollm2-135m``), in-process, the same
small chat workload: llama.cpp, then transformers (each ``--run`` replaces these with a run of
its own, its overrides in one quoted string; OVERRIDEs after ``--`` go to every run). Then
``python -m harness.compare`` of the runs, and headless Chromium (tests/browser.py) opens the
first run's report.html and the comparison's compare.html at a window of WIDTH × HEIGHT CSS
pixels, one device pixel each, and saves the top of each page, down to the last section heading
in the window's lower half: OUT/report.png, OUT/compare.png. The window's size keeps each PNG
small (~200-400 KB) without an optimiser. The runs go to a temporary folder, removed at the end
unless ``--keep DIR`` names one; ``--reuse DIR`` takes the runs kept there instead of running
them again (new pictures of the same runs after a change to the pages).

``--compare RUN …`` makes no runs: it compares the run folders given — a harness run and runs
imported from other tools (``python -m harness.import``, or the folders ``python -m
harness.crosscheck`` writes) — and saves the top of that compare.html as OUT/import-compare.png
(docs/guides/other-tools.md shows it).

On a machine that other work keeps busy the runs are tainted (docs/machine-state.md) and both
pages open with that warning; ``-- machine.enabled=false`` leaves the check out, as the images
in docs/images/ were made.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # tests/browser.py drives Chromium

from browser import Chromium, chromium_binary  # noqa: E402 - after the tests' folder is on the path

WIDTH, HEIGHT = 1280, 1800
WORKLOAD = [
    "model=smollm2-135m",
    "workload=chat",
    "workload.sessions=4",
    "workload.turns=2",
    "workload.output_len=24",
    "workload.concurrency=2",
]
RUNS = [["backend=llamacpp", *WORKLOAD], ["backend=transformers", *WORKLOAD]]


def harness(*args: str) -> str:
    """``python -m <args>`` from the repository; its stdout, or exit with its stderr's end."""
    proc = subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"python -m {shlex.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.stdout


def run(overrides: Sequence[str], root: Path) -> Path:
    """One run into ``root``; its folder (the ``results:`` line, the last)."""
    stdout = harness("harness", *overrides, "progress=false", f"output_root={root}")
    return Path(stdout.strip().splitlines()[-1].removeprefix("results: "))


def screenshots(
    runs: Sequence[Sequence[str]], out: Path, work: Path, size: tuple[int, int] = (WIDTH, HEIGHT), reuse: bool = False
) -> list[Path]:
    """Make the runs in ``work`` (or, with ``reuse``, take those there), compare them, and save
    the top of the first report and of compare.html as ``out``/report.png and ``out``/compare.png."""
    if reuse:
        folders = sorted(p for p in (work / "runs").iterdir() if (p / "summary.json").is_file())  # by start time
    else:
        folders = [run(overrides, work / "runs") for overrides in runs]
    for folder in folders:
        print(f"run: {folder}")
    harness("harness.compare", *map(str, folders), "--out", str(work / "compare"))
    pages = {"report.png": folders[0] / "report.html", "compare.png": work / "compare" / "compare.html"}
    return shoot(pages, out, size)


def compare_screenshot(folders: Sequence[Path], out: Path, work: Path, size: tuple[int, int] = (WIDTH, HEIGHT)) -> Path:
    """compare.html of run folders made elsewhere (a harness run and imported ones), its top saved
    as ``out``/import-compare.png."""
    for folder in folders:
        if not (folder / "summary.json").is_file():
            sys.exit(f"{folder} is not a run folder (no summary.json)")
        print(f"run: {folder}")
    harness("harness.compare", *map(str, folders), "--out", str(work / "compare"))
    (shot,) = shoot({"import-compare.png": work / "compare" / "compare.html"}, out, size)
    return shot


def shoot(pages: dict[str, Path], out: Path, size: tuple[int, int]) -> list[Path]:
    """Each page's top, down to its last section heading in the window's lower half, as ``out``/name."""
    binary = chromium_binary()
    if binary is None:
        sys.exit("chromium is not installed (apt-get install -y chromium)")
    browser = Chromium(binary)
    shots = []
    try:
        for name, page in pages.items():
            result = browser.open(page, screenshot=out / name, viewport=size, cut_at="h2")
            if result.errors:
                sys.exit(f"{page} has errors in the browser: {result.errors}")
            shots.append(out / name)
    finally:
        browser.close()
    return shots


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "images")
    kept = parser.add_mutually_exclusive_group()
    kept.add_argument("--keep", type=Path, default=None, help="keep the runs and the comparison in this folder")
    kept.add_argument("--reuse", type=Path, default=None, help="take the runs kept in this folder by --keep")
    parser.add_argument("--run", action="append", default=None, help="one run's overrides, quoted (repeat it)")
    parser.add_argument(
        "--compare",
        type=Path,
        nargs="+",
        default=None,
        metavar="RUN",
        help="make no runs: compare these run folders (a harness run, imported runs) into import-compare.png",
    )
    parser.add_argument("--size", default=f"{WIDTH}x{HEIGHT}", help="the window, WIDTHxHEIGHT in CSS pixels")
    parser.add_argument("overrides", nargs="*", help="overrides for every run (after --)")
    args = parser.parse_args(argv)
    if args.compare and (args.reuse or args.run or args.overrides):
        parser.error("--compare takes run folders made elsewhere: not with --reuse, --run or overrides")
    runs = [shlex.split(r) for r in args.run] if args.run else RUNS
    runs = [[*r, *args.overrides] for r in runs]
    width, height = (int(v) for v in args.size.split("x"))
    work = args.keep or args.reuse or Path(tempfile.mkdtemp(prefix="docs-screenshots-"))
    try:
        if args.compare:
            shots = [compare_screenshot(args.compare, args.out, work, (width, height))]
        else:
            shots = screenshots(runs, args.out, work, (width, height), reuse=args.reuse is not None)
        for shot in shots:
            print(f"{shot}: {shot.stat().st_size / 1024:.0f} KiB")
    finally:
        if args.keep is None and args.reuse is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
