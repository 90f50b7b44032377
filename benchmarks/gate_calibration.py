"""Does the gate cry wolf, and does it catch a real slowdown? A/A calibration and power, on
this machine, with real runs, today's rule beside the previous one on the same runs.

    # A/A: one configuration against itself, 2 × BLOCKS runs, each a fresh process (as CI jobs are)
    .venv/bin/python benchmarks/gate_calibration.py aa --blocks 60 --out results/calibration/llamacpp -- \\
        backend=llamacpp model=smollm2-135m workload=synthetic workload.num_requests=16 ...
    .venv/bin/python benchmarks/gate_calibration.py analyse results/calibration/llamacpp [--group 3]

    # sweeps: identical sweeps minutes apart, every pair and each against those before it through
    # the sweep gate (previous rule and now), and slower sweeps for the power (benchmarks/gate_sweeps.py)
    .venv/bin/python benchmarks/gate_calibration.py sweeps --out results/calibration/sweeps-llamacpp -- \\
        backend=llamacpp model=smollm2-135m workload=synthetic workload.concurrency=1,2 repeat=3 ...

    # power: N decisions of python -m harness.ab, arm B slower (or faster) by a setting
    .venv/bin/python benchmarks/gate_calibration.py power --decisions 20 --b "backend.itl_ms=5.75" \\
        --out results/calibration/power-slow -- backend=reference backend.itl_ms=5 backend.run_noise_cv=0.03 ...

``analyse`` reads the A/A experiment's blocks (ab.json) and reports, per figure (TTFT, TPOT and
E2E medians):

- **previous compare** (one run against one run, requests resampled; what
  ``python -m harness.compare`` did before the runs became the unit): the share of run pairs
  called significantly faster or slower, for pairs side by side (the two runs of a block) and
  pairs apart (runs a quarter of the experiment apart, as a nightly and an older baseline are);
- **previous gate** (the same interval, a regression when worse by more than 10 % or 5 % with the
  CI excluding no change): false regressions over both directions of each pair;
- **compare now, one run against one run**: "within-run only", so no claim, and with the noise
  floor measured on the *other* half of the blocks (cross-fitted, so a pair never calibrates
  itself): the share called different;
- **decisions now**: disjoint groups of ``--group`` blocks, each decided as ``harness.ab``
  decides (paired t on block log-ratios, Benjamini–Hochberg over the figures, 5 % threshold):
  the share whose 95 % interval excludes no change, and the false regressions, both directions.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's packages first

import gate_sweeps  # benchmarks/gate_sweeps.py: the sweeps subcommand  # noqa: E402 - after the checkout's path

from harness.gate import noise, paired
from harness.gate.bootstrap import resampled_stat, stat_function
from harness.gate.figures import parse_figure
from harness.reports.compare.comparison import CompareOptions, make_comparison

REPO = Path(__file__).resolve().parent.parent
FIGURES = ("ttft_s.p50", "tpot_s.p50", "e2e_s.p50")


def previous_rule(a: np.ndarray, b: np.ndarray, resamples: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """The previous compare: medians, requests resampled independently; (rel change, CI low, CI high) of b vs a."""
    rng = np.random.default_rng(seed)
    fn = stat_function("median")
    ba, bb = resampled_stat(a, fn, resamples, rng), resampled_stat(b, fn, resamples, rng)
    d = bb - ba
    lo, hi = np.quantile(d, [0.025, 0.975])
    sa = float(np.median(a))
    return float(np.median(b)) / sa - 1, float(lo) / sa, float(hi) / sa


def load_blocks(out: Path) -> tuple[list[paired.BlockRuns], dict]:
    exp = json.loads((out / "ab.json").read_text())
    by_block: dict[int, dict[str, Path]] = {}
    for r in exp["runs"]:
        if (Path(r["run_dir"]) / "summary.json").is_file():
            by_block.setdefault(r["block"], {})[r["arm"]] = Path(r["run_dir"])
    blocks = [paired.load_block(i, d.get("A"), d.get("B")) for i, d in sorted(by_block.items())]
    good, left_out = paired.usable(blocks)
    for p in left_out:
        print(f"left out: {p}")
    return good, exp


def analyse(out: Path, group: int, threshold: float) -> None:
    good, exp = load_blocks(out)
    n = len(good)
    walls = [r["wall_s"] for r in exp["runs"] if r["exit_code"] == 0]
    print(f"{out}: {n} usable A/A blocks ({2 * n} runs), run wall time mean {np.mean(walls):.1f} s")
    figures = [parse_figure(f) for f in FIGURES]
    for f in figures:
        vals = [f.of(r.summary) for b in good for r in (b.a, b.b)]
        print(
            f"  {f.label}: runs' values {min(vals) * 1000:.2f}–{max(vals) * 1000:.2f} ms "
            f"(spread ±{(max(vals) / min(vals) - 1) * 50:.1f} %), run-to-run sd of ln "
            f"{np.std(np.log(vals), ddof=1) * 100:.2f} %"
        )

    half = n // 2
    # pairs of runs: side by side (the two runs of a block), and apart (block i's A with the B of
    # the block half a half later, minutes apart: as a nightly is compared with an older baseline)
    side_by_side = [(i, b.a, b.b) for i, b in enumerate(good)]
    apart = []
    for lo, hi in ((0, half), (half, n)):
        size = hi - lo
        apart += [(i, good[i].a, good[lo + (i - lo + size // 2) % size].b) for i in range(lo, hi)]
    for label, pairs in (("side by side", side_by_side), ("apart", apart)):
        print(
            f"\nprevious compare, one run against one run, {label} ({len(pairs)} pairs): called significantly different"
        )
        for f in figures:
            called = sum(
                1 for _, x, y in pairs if _excludes_zero(previous_rule(x.values(f.metric), y.values(f.metric)))
            )
            print(f"  {f.label}: {called} of {len(pairs)} ({called / len(pairs) * 100:.0f} %)")
    for pct in (10, 5):
        fails = 0
        for b in good:
            x, y = b.a.values("ttft_s"), b.b.values("ttft_s")
            for base, cand in ((x, y), (y, x)):
                rel, lo, hi = previous_rule(base, cand)
                fails += rel > pct / 100 and lo > 0
        print(f"previous gate at {pct} % (TTFT median): {fails} of {2 * n} false regressions")

    # cross-fitted: each half's pairs are judged with the floor of the other half
    floors = [
        paired.measure_noise_floor(good[half:], figures, walls),
        paired.measure_noise_floor(good[:half], figures, walls),
    ]
    for label, pairs in (("side by side", side_by_side), ("apart", apart)):
        print(
            f"\ncompare now, one run against one run, {label} ({len(pairs)} pairs): 'within-run only' without a "
            "noise floor (no claim); with the floor of the other half of the blocks, called significantly different:"
        )
        counts = {f.name: 0 for f in figures}
        gate_fails = 0
        for i, x, y in pairs:
            floor = floors[0] if i < half else floors[1]
            for base, cand in ((x, y), (y, x)):
                comp = _compare(base.run_dir, cand.run_dir, floor)
                for row in comp.diffs:
                    name = f"{row['metric']}.p50"
                    if name in counts and base is x and row["verdict"] not in ("no significant difference",):
                        counts[name] += 1
                gate_fails += bool(comp.regression_lines)
        for f in figures:
            print(f"  {f.label}: {counts[f.name]} of {len(pairs)} ({counts[f.name] / len(pairs) * 100:.0f} %)")
        print(
            f"gate now, one run against one run with the floor, {threshold * 100:g} % threshold (TTFT median): "
            f"{gate_fails} of {2 * len(pairs)} false regressions"
        )
    for fl, name in ((floors[0], "second half"), (floors[1], "first half")):
        print(
            f"  floor used for the {name}: "
            + ", ".join(
                f"{k} sd {v.sd_run * 100:.2f} % (apart {v.sd_run_apart * 100:.2f} %)" for k, v in fl.figures.items()
            )
        )

    groups = [good[i : i + group] for i in range(0, n - group + 1, group)]
    print(
        f"\ndecisions now: {len(groups)} disjoint groups of {group} interleaved blocks, paired t, "
        f"{threshold * 100:g} % threshold"
    )
    different = {f.name: 0 for f in figures}
    verdict_counts: dict[str, int] = {}
    for g in groups:
        for swap in (False, True):
            blocks = [paired.BlockRuns(b.index, b.b, b.a) if swap else b for b in g]
            ev = paired.evaluate(blocks, figures, threshold)
            for d in ev.decisions:
                verdict_counts[d.verdict] = verdict_counts.get(d.verdict, 0) + 1
                if not swap and not (d.interval.low <= 1 <= d.interval.high):
                    different[d.figure.name] += 1
    for f in figures:
        print(f"  {f.label}: interval excludes no change in {different[f.name]} of {len(groups)}")
    total = sum(verdict_counts.values())
    print(
        f"  gate verdicts over {total} decisions (figures × groups × both directions): "
        + ", ".join(f"{k} {v}" for k, v in sorted(verdict_counts.items()))
    )
    with_floor: dict[str, int] = {}
    for gi, g in enumerate(groups):
        floor = floors[0] if gi * group < half else floors[1]  # the other half's floor
        folder = Path("/tmp/gate-calibration-floor")
        key, hw = paired.config_key(g[0].a)
        noise.save(
            folder, noise.NoiseFloor(key or "unknown", hw, floor.figures, floor.cost_run_s, floor.cost_request_s)
        )
        for swap in (False, True):
            blocks = [paired.BlockRuns(b.index, b.b, b.a) if swap else b for b in g]
            for d in paired.evaluate(blocks, figures, threshold, noise_dir=folder).decisions:
                with_floor[d.verdict] = with_floor.get(d.verdict, 0) + 1
    print(
        "  the same with the margin raised to 3 × the other half's noise floor: "
        + ", ".join(f"{k} {v}" for k, v in sorted(with_floor.items()))
    )


def _excludes_zero(r: tuple[float, float, float]) -> bool:
    return r[1] > 0 or r[2] < 0


def _compare(base: Path, cand: Path, floor: noise.NoiseFloor, tmp: Path = Path("/tmp/gate-calibration-compare")):
    """make_comparison with the floor stored where it looks (the comparison is not written)."""
    run = paired.load_block(0, base, cand).a
    key, hw = paired.config_key(run)
    noise.save(tmp, noise.NoiseFloor(key or "unknown", hw, floor.figures, floor.cost_run_s, floor.cost_request_s))
    options = CompareOptions(resamples=1000, fail_pct=5.0, noise_dir=tmp, metric="ttft_s")
    return make_comparison([base, cand], tmp / "out", options)


def run_ab(args: Sequence[str]) -> int:
    return subprocess.call([sys.executable, "-m", "harness.ab", *args], cwd=REPO)


def power(
    decisions: int,
    b: str,
    out: Path,
    common: Sequence[str],
    blocks: int,
    max_blocks: int,
    threshold: float,
    figures: str,
) -> None:
    results = []
    for i in range(decisions):
        dest = out / f"decision{i:02d}"
        start = time.perf_counter()
        code = run_ab(
            [
                "--b",
                b,
                "--blocks",
                str(blocks),
                "--max-blocks",
                str(max_blocks),
                "--threshold",
                str(threshold),
                "--figures",
                figures,
                "--out",
                str(dest),
                "--",
                *common,
            ]
        )
        exp = json.loads((dest / "ab.json").read_text())
        results.append(
            (
                exp.get("verdict"),
                len(exp["runs"]),
                exp["looks"][-1]["blocks"] if exp["looks"] else 0,
                time.perf_counter() - start,
                code,
            )
        )
        print(f"decision {i}: {results[-1]}", flush=True)
    verdict_counts: dict[str, int] = {}
    for v, *_ in results:
        verdict_counts[str(v)] = verdict_counts.get(str(v), 0) + 1
    runs = [r[1] for r in results]
    walls = [r[3] for r in results]
    print(
        f"\n{out}: {decisions} decisions of arm B ({b}): "
        + ", ".join(f"{k} {v}" for k, v in sorted(verdict_counts.items()))
    )
    print(
        f"runs per decision: mean {np.mean(runs):.1f}, min {min(runs)}, max {max(runs)}; "
        f"wall time per decision: mean {np.mean(walls):.0f} s, max {max(walls):.0f} s"
    )


def main(argv: Optional[Sequence[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    aa = sub.add_parser("aa")
    aa.add_argument("--blocks", type=int, default=60)
    aa.add_argument("--out", type=Path, required=True)
    aa.add_argument("common", nargs="*")
    an = sub.add_parser("analyse")
    an.add_argument("out", type=Path)
    an.add_argument("--group", type=int, default=3)
    an.add_argument("--threshold", type=float, default=5.0)
    pw = sub.add_parser("power")
    pw.add_argument("--decisions", type=int, default=20)
    pw.add_argument("--b", required=True)
    pw.add_argument("--out", type=Path, required=True)
    pw.add_argument("--blocks", type=int, default=3)
    pw.add_argument("--max-blocks", type=int, default=6)
    pw.add_argument("--threshold", type=float, default=5.0)
    pw.add_argument("--figures", default="tpot_s.p50")
    pw.add_argument("common", nargs="*")
    gate_sweeps.add_parser(sub)
    a = p.parse_args(argv)
    if a.cmd == "aa":
        sys.exit(
            run_ab(
                [
                    "--aa",
                    "--blocks",
                    str(a.blocks),
                    "--out",
                    str(a.out),
                    "--noise-dir",
                    str(a.out / "noise"),
                    "--",
                    *a.common,
                ]
            )
        )
    if a.cmd == "sweeps":
        gate_sweeps.sweeps(a)
    elif a.cmd == "analyse":
        analyse(a.out, a.group, a.threshold / 100)
    else:
        power(a.decisions, a.b, a.out, a.common, a.blocks, a.max_blocks, a.threshold, a.figures)


if __name__ == "__main__":
    main()
