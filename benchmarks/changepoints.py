"""The history's change-point detector (harness/history/changepoints.py) against Apache Otava and
MongoDB's signal-processing-algorithms (the same E-divisive means with a permutation test).

    .venv/bin/python benchmarks/changepoints.py [--trials 100] [--seed 0] [--detectors ours otava spa]
        [--venv /tmp/otava-venv] [--spa-venv /tmp/spa-venv]

Neither library can share the project's environment (apache-otava 0.8 pins numpy 2.2 and scipy
1.16 and pulls cloud clients; signal-processing-algorithms 2.1.6 pins numpy < 2, setuptools < 71
and gevent), so each runs in a virtual environment of its own, created on first use
(``python3 -m venv VENV && VENV/bin/pip install apache-otava``, or ``signal-processing-algorithms``),
fed the same series as JSON.

Series (seeded): n ~ U{30…60} runs of a level 100 with Gaussian noise of CV ~ U[2 %, 5 %], and
0, 1 or 2 steps (``--trials`` series each) of ±U[5 %, 20 %] at positions at least 6 runs from
the ends and from each other. A change point found within ±3 runs of a true one matches it
(one to one, nearest first). Printed per detector and number of steps: detection rate
(matched / true change points; also for steps of 5–10 % and 10–20 %), false change points
per series, series of pure noise with any change point, mean |location error| of matched
ones, and the time per series.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.history.changepoints import change_points

TOLERANCE = 3  # runs
MIN_GAP = 6  # runs between steps, and from the ends

# runs in Otava's environment: series in on stdin, change point indices (first run after) out
OTAVA_DRIVER = """
import json, sys, time
from otava.analysis import compute_change_points
job = json.load(sys.stdin)
out = []
for values in job["series"]:
    t = time.perf_counter()
    found, _ = compute_change_points(values, window_len=job["window"], max_pvalue=job["p"], min_magnitude=0.0)
    out.append({"found": sorted(int(c.index) for c in found), "s": time.perf_counter() - t})
json.dump(out, sys.stdout)
"""

# the same for signal-processing-algorithms: e_divisive returns the first index after each change
SPA_DRIVER = """
import json, sys, time
from signal_processing_algorithms.energy_statistics.energy_statistics import e_divisive
job = json.load(sys.stdin)
out = []
for values in job["series"]:
    t = time.perf_counter()
    found = e_divisive(values, pvalue=job["p"], permutations=job["permutations"])
    out.append({"found": sorted(int(i) for i in found), "s": time.perf_counter() - t})
json.dump(out, sys.stdout)
"""


@dataclass
class Series:
    values: list[float]
    steps: list[int]  # index of the first run after each step
    sizes: list[float]  # |relative step|


def make_series(rng: np.random.Generator, n_steps: int) -> Series:
    n = int(rng.integers(30, 61))
    cv = rng.uniform(0.02, 0.05)
    while True:
        steps = sorted(int(i) for i in rng.integers(MIN_GAP, n - MIN_GAP + 1, size=n_steps))
        if all(b - a >= MIN_GAP for a, b in zip(steps, steps[1:])):
            break
    level = np.full(n, 100.0)
    sizes = []
    for at in steps:
        size = rng.uniform(0.05, 0.20)
        sizes.append(size)
        level[at:] *= 1 + size * rng.choice((-1.0, 1.0))
    values = level * (1 + cv * rng.standard_normal(n))
    return Series(values.tolist(), steps, sizes)


def match(found: list[int], truth: list[int]) -> list[tuple[int, int]]:
    """(true, found) pairs within ±TOLERANCE, one to one, nearest first."""
    pairs = sorted((abs(f - t), t, f) for t in truth for f in found if abs(f - t) <= TOLERANCE)
    used_t, used_f, out = set(), set(), []
    for _, t, f in pairs:
        if t not in used_t and f not in used_f:
            used_t.add(t)
            used_f.add(f)
            out.append((t, f))
    return out


@dataclass
class Score:
    true_points: int = 0
    matched: int = 0
    by_size: dict[str, list[int]] = field(default_factory=lambda: {"5-10%": [0, 0], "10-20%": [0, 0]})
    false_points: int = 0
    series: int = 0
    noisy_with_any: int = 0
    errors: list[int] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, s: Series, found: list[int], seconds: float) -> None:
        pairs = match(found, s.steps)
        self.series += 1
        self.true_points += len(s.steps)
        self.matched += len(pairs)
        self.false_points += len(found) - len(pairs)
        self.noisy_with_any += int(not s.steps and bool(found))
        self.errors += [abs(t - f) for t, f in pairs]
        self.seconds += seconds
        hit = {t for t, _ in pairs}
        for at, size in zip(s.steps, s.sizes):
            bucket = self.by_size["5-10%" if size < 0.10 else "10-20%"]
            bucket[0] += at in hit
            bucket[1] += 1


def ensure_venv(venv: Path, package: str, module: str) -> Path:
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run(["python3", "-m", "venv", str(venv)], check=True)
    probe = subprocess.run([str(python), "-c", f"import {module}"], capture_output=True)
    if probe.returncode != 0:
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", package], check=True)
    return python


def run_driver(python: Path, driver: str, series: list[Series], **job: float) -> list[dict]:
    data = json.dumps({"series": [s.values for s in series], **job})
    out = subprocess.run([str(python), "-c", driver], input=data, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def ours(series: list[Series], p: float, permutations: int) -> list[dict]:
    out = []
    for i, s in enumerate(series):
        t = time.perf_counter()
        found = [cp.index for cp in change_points(s.values, p_value=p, permutations=permutations, seed=i)]
        out.append({"found": found, "s": time.perf_counter() - t})
    return out


def report(name: str, by_steps: dict[int, list[Series]], results: dict[int, list[dict]]) -> None:
    for k, group in by_steps.items():
        score = Score()
        for s, r in zip(group, results[k]):
            score.add(s, r["found"], r["s"])
        detect = f"{score.matched / score.true_points:6.1%}" if score.true_points else "     –"
        sizes = "  ".join(f"{b}: {h / n:5.1%}" if n else f"{b}:     –" for b, (h, n) in score.by_size.items())
        err = f"{np.mean(score.errors):.2f}" if score.errors else "–"
        any_cp = f"{score.noisy_with_any}/{score.series}" if k == 0 else "–"
        print(
            f"{name:34s} {k} steps  detected {detect}  [{sizes}]  false/series {score.false_points / score.series:.2f}  "
            f"noise series with a CP {any_cp:>7s}  |loc err| {err:>4s}  {1000 * score.seconds / score.series:6.1f} ms/series"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100, help="series per number of steps (0, 1, 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--detectors", nargs="+", choices=("ours", "otava", "spa"), default=["ours", "otava", "spa"])
    parser.add_argument("--venv", type=Path, default=Path("/tmp/otava-venv"))
    parser.add_argument("--spa-venv", type=Path, default=Path("/tmp/spa-venv"))
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    by_steps = {k: [make_series(rng, k) for _ in range(args.trials)] for k in (0, 1, 2)}
    print(f"{args.trials} series per row · n 30–60 · CV 2–5 % · steps ±5–20 % · match within ±{TOLERANCE} runs")
    detectors = {}
    if "ours" in args.detectors:
        detectors["ours (p 0.01, R 199, default)"] = lambda g: ours(g, 0.01, 199)
        detectors["ours (p 0.001, R 999)"] = lambda g: ours(g, 0.001, 999)
    if "otava" in args.detectors:
        otava = ensure_venv(args.venv, "apache-otava", "otava")
        detectors["otava (window 50, p 0.001, default)"] = lambda g: run_driver(
            otava, OTAVA_DRIVER, g, window=50, p=0.001
        )
        detectors["otava (window 50, p 0.01)"] = lambda g: run_driver(otava, OTAVA_DRIVER, g, window=50, p=0.01)
    if "spa" in args.detectors:
        spa = ensure_venv(args.spa_venv, "signal-processing-algorithms", "signal_processing_algorithms")
        detectors["spa (p 0.05, R 100, default)"] = lambda g: run_driver(spa, SPA_DRIVER, g, p=0.05, permutations=100)
        detectors["spa (p 0.01, R 199, as ours)"] = lambda g: run_driver(spa, SPA_DRIVER, g, p=0.01, permutations=199)
    for name, detect in detectors.items():
        report(name, by_steps, {k: detect(group) for k, group in by_steps.items()})


if __name__ == "__main__":
    main()
