"""Does the sweep gate cry wolf across time, and does it catch a real slowdown?
(``benchmarks/gate_calibration.py sweeps``)

Identical sweeps made minutes apart, each a fresh process as a nightly is, then every pair of
them through the gate, both rules on the same sweeps:

- **previous**: the sweep gate until December 2026: each point's repeats against the baseline's,
  a two-level bootstrap over the runs (harness/gate/intervals.py), Benjamini–Hochberg over the
  points, a regression when worse beyond that interval and by more than the threshold. The
  repeats of one sweep run back to back, so their spread holds none of the noise between sweeps;
- **now**: ``scripts/ci/gate.py`` (harness/history/nightly.py): the baseline as a history of one
  nightly, judged with a noise floor's σ_apart measured beforehand by an A/A experiment
  (``python -m harness.ab --aa``, one per point), inconclusive without one; and each sweep
  through the history check (``python -m harness.history gate``) against the sweeps before it.

Power: ``--slower`` sweeps (the same overrides plus one that slows the engine, e.g. the reference
server's ``backend.itl_ms``) made between the others, each against every normal sweep (pairs) and
against the normal sweeps before it (history).

    .venv/bin/python benchmarks/gate_calibration.py sweeps --out results/calibration/sweeps-llamacpp \\
        --sweeps 6 --gap-s 60 -- backend=llamacpp model=smollm2-135m workload=synthetic \\
        workload.num_requests=12 workload.concurrency=1,2 repeat=3

``--reuse`` judges the sweeps and floors already under ``--out`` again (no new runs).
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts" / "ci"))

import gate as sweep_gate  # scripts/ci/gate.py  # noqa: E402 - after the path it lives on

from harness.gate.verdicts import INCONCLUSIVE, REGRESSION  # noqa: E402 - after the checkout's path
from harness.history import nightly  # noqa: E402 - after the checkout's path
from harness.history.analysis import parse_figure  # noqa: E402 - after the checkout's path
from harness.history.query import EmptyHistory, runs  # noqa: E402 - after the checkout's path
from harness.history.store import add_runs, rows_in  # noqa: E402 - after the checkout's path
from harness.reports.compare.comparison import CompareOptions  # noqa: E402 - after the checkout's path
from harness.reports.compare.differences import decide_rows  # noqa: E402 - after the checkout's path
from harness.reports.compare.outputs import compare_runs  # noqa: E402 - after the checkout's path


@dataclass
class Tally:
    judged: int = 0
    regressions: int = 0
    inconclusive: int = 0
    lines: list[str] = field(default_factory=list)

    def cell(self) -> str:
        return f"{self.regressions} of {self.judged}" + (
            f" ({self.inconclusive} inconclusive)" if self.inconclusive else ""
        )


def run_sweep(common: Sequence[str], extra: Sequence[str], dest: Path) -> float:
    """One sweep, a fresh process; its wall time."""
    start = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "harness", "-m", *common, *extra, f"hydra.sweep.dir={dest}", "progress=false"],
        cwd=REPO,
        check=False,
        stdout=subprocess.DEVNULL,
    )
    return time.monotonic() - start


def point_overrides(common: Sequence[str]) -> list[list[str]]:
    """The overrides of each point of the sweep (its comma lists expanded; repeat= left out)."""
    axes = []
    for o in common:
        key, _, value = o.partition("=")
        if key.startswith("repeat") or key.startswith("hydra."):
            continue
        axes.append([f"{key}={v}" for v in value.split(",")] if "," in value and not value.startswith("[") else [o])
    return [list(p) for p in itertools.product(*axes)]


def measure_floors(common: Sequence[str], out: Path, blocks: int) -> Path:
    """An A/A noise floor per point (python -m harness.ab --aa), stored under out/noise."""
    for i, overrides in enumerate(point_overrides(common)):
        dest = out / f"aa-{i}"
        if (dest / "ab.json").is_file():
            continue
        subprocess.run(
            [sys.executable, "-m", "harness.ab", "--aa", "--blocks", str(blocks), "--out", str(dest),
             "--noise-dir", str(out / "noise"), "--", *overrides],
            cwd=REPO, check=False, stdout=subprocess.DEVNULL,
        )  # fmt: skip
    return out / "noise"


def previous_rule(base: Path, cand: Path, metric: str, pct: float, work: Path) -> tuple[int, int, list[str]]:
    """(regressions, points judged, lines): the sweep gate as it was (module doc)."""
    now, before = sweep_points(cand), sweep_points(base)
    rows = []
    for key, dirs in now.items():
        if key in before:
            result = compare_runs(
                [*before[key], *dirs],
                work / f"{base.name}-{cand.name}-{key}",
                CompareOptions(metric=metric, stat="median", fail_pct=pct, resamples=1000,
                               baseline_count=len(before[key])),
            )  # fmt: skip
            rows.append((key, next(r for r in result.diffs if r["metric"] == metric)))
    decisions = decide_rows([(row, None) for _, row in rows], pct)
    lines = [
        f"{key}: {row['change_pct']:+.1f}% [{row['ci_low_pct']:+.1f}%, {row['ci_high_pct']:+.1f}%] {d.verdict if d else '-'}"
        for (key, row), d in zip(rows, decisions)
    ]
    return sum(1 for d in decisions if d is not None and d.verdict == REGRESSION), len(rows), lines


def sweep_points(sweep_dir: Path) -> dict[str, list[Path]]:
    frame = pd.DataFrame(rows_in(sweep_dir))
    return {str(p): [Path(d) for d in g["run_dir"]] for p, g in frame.groupby("point", sort=False)}


def now_rule(
    base: Path, cand: Path, metric: str, pct: float, floors: Path, work: Path
) -> tuple[int, int, int, list[str]]:
    code, md = sweep_gate.gate(cand, base, work / f"{base.name}-{cand.name}", pct, metric, noise_dir=floors)
    verdicts = [
        line.rstrip(" |").rsplit("| ", 1)[1] for line in md.splitlines() if line.startswith("| ") and "·" in line
    ]
    regressed = sum(v.startswith("REGRESSION") for v in verdicts)
    unsure = sum(v.startswith(INCONCLUSIVE) for v in verdicts)
    return regressed, len(verdicts), unsure, verdicts


def history_rule(earlier: Sequence[Path], cand: Path, metric: str, pct: float, floors: Path) -> tuple[int, int, int]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "h"
        if earlier:
            add_runs(root, list(earlier))
        try:
            history = runs(root)
        except EmptyHistory:
            history = pd.DataFrame()
        result = nightly.judge(history, pd.DataFrame(rows_in(cand)), [parse_figure(f"{metric}.p50")],
                               margin=pct / 100, noise_dir=floors)  # fmt: skip
    verdicts = [v.verdict for v in result.verdicts]
    return verdicts.count(REGRESSION), len(verdicts), verdicts.count(INCONCLUSIVE)


def order(sweep_dir: Path) -> int:
    """A sweep's place in the plan (its folder is <kind>-<index>)."""
    return int(sweep_dir.name.rsplit("-", 1)[1])


def judge_all(out: Path, normal: list[Path], slow: list[Path], metric: str, pct: float, floors: Path) -> str:
    work = out / "judged"
    prev, now, hist = Tally(), Tally(), Tally()
    prev_power, now_power, hist_power = Tally(), Tally(), Tally()
    for a, b in itertools.combinations(normal, 2):
        r, n, lines = previous_rule(a, b, metric, pct, work / "previous")
        prev.judged, prev.regressions = prev.judged + 1, prev.regressions + (r > 0)
        prev.lines.append(f"{b.name} vs {a.name}: " + "; ".join(lines))
        r, n, unsure, verdicts = now_rule(a, b, metric, pct, floors, work / "now")
        now.judged, now.regressions, now.inconclusive = (
            now.judged + 1,
            now.regressions + (r > 0),
            now.inconclusive + (unsure > 0),
        )
        now.lines.append(f"{b.name} vs {a.name}: {', '.join(verdicts)}")
    for i, cand in enumerate(normal[1:], start=1):
        r, n, unsure = history_rule(normal[:i], cand, metric, pct, floors)
        hist.judged, hist.regressions, hist.inconclusive = (
            hist.judged + 1,
            hist.regressions + (r > 0),
            hist.inconclusive + (unsure == n),
        )
    for s in slow:
        for base in normal:
            r, _, _ = previous_rule(base, s, metric, pct, work / "previous")
            prev_power.judged, prev_power.regressions = prev_power.judged + 1, prev_power.regressions + (r > 0)
            r, _, unsure, _ = now_rule(base, s, metric, pct, floors, work / "now")
            now_power.judged, now_power.regressions = now_power.judged + 1, now_power.regressions + (r > 0)
            now_power.inconclusive += unsure > 0
        # every identical sweep as its history: the slower ones are made between them (the same
        # machine over the same hours), and the history path needs at least 5 nightlies
        r, n, unsure = history_rule(normal, s, metric, pct, floors)
        hist_power.judged, hist_power.regressions = hist_power.judged + 1, hist_power.regressions + (r > 0)
        hist_power.inconclusive += unsure == n
    lines = [
        f"{len(normal)} identical sweeps, {len(slow)} slower; {metric} median, margin {pct:g}%",
        "",
        "| rule | identical pairs called a regression | slower sweep caught |",
        "|---|---|---|",
        f"| previous: repeats against repeats | {prev.cell()} | {prev_power.cell() if slow else '-'} |",
        f"| now: against the baseline, noise floor σ_apart | {now.cell()} | {now_power.cell() if slow else '-'} |",
        f"| now: against the sweeps before it (history) | {hist.cell()} | {hist_power.cell() if slow else '-'} |",
        "",
        "previous, pair by pair:",
        *(f"  {x}" for x in prev.lines),
        "now, pair by pair:",
        *(f"  {x}" for x in now.lines),
    ]
    return "\n".join(lines)


def sweeps(args: argparse.Namespace) -> None:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    floors = out / "noise"
    if not args.reuse:
        floors = measure_floors(args.common, out, args.aa_blocks)
        # the slower sweeps spread evenly among the others, after the first
        after = {round((k + 1) * args.sweeps / (args.slow_sweeps + 1)) for k in range(args.slow_sweeps)}
        plan = [kind for i in range(args.sweeps) for kind in (["normal", "slow"] if i + 1 in after else ["normal"])]
        for i, kind in enumerate(plan):
            dest = out / f"{kind}-{i:02d}"
            extra = [args.slower] if kind == "slow" else []
            wall = run_sweep(args.common, extra, dest)
            print(f"{dest.name}: {wall:.0f} s", flush=True)
            if i < len(plan) - 1:
                time.sleep(args.gap_s)
    normal = sorted(out.glob("normal-*"))
    slow = sorted(out.glob("slow-*"))
    table = judge_all(out, normal, slow, args.metric, args.margin, floors)
    (out / "calibration.md").write_text(table + "\n")
    floor_lines = []
    for f in sorted(floors.glob("*/*.json")):
        data = json.loads(f.read_text())
        fig = data["figures"].get(f"{args.metric}.p50") or {}
        floor_lines.append(
            f"floor {f.name[:12]}: σ_run {fig.get('sd_run', 0) * 100:.1f}%, σ_apart {(fig.get('sd_run_apart') or 0) * 100:.1f}% "
            f"({fig.get('blocks')} blocks)"
        )
    print(table)
    print("\n".join(floor_lines))


def add_parser(sub) -> None:
    sw = sub.add_parser("sweeps", help="identical sweeps minutes apart, every pair through the gate")
    sw.add_argument("--out", type=Path, required=True)
    sw.add_argument("--sweeps", type=int, default=6)
    sw.add_argument("--slower", default=None, help="an override that slows the engine, for the power")
    sw.add_argument("--slow-sweeps", type=int, default=0)
    sw.add_argument("--gap-s", type=float, default=60.0, help="seconds between sweeps")
    sw.add_argument("--aa-blocks", type=int, default=5, help="A/A blocks of each point's noise floor")
    sw.add_argument("--metric", default="ttft_s")
    sw.add_argument("--margin", type=float, default=10.0, help="the gate's threshold in %% (default 10)")
    sw.add_argument("--reuse", action="store_true", help="judge what is under --out again, no new runs")
    sw.add_argument("common", nargs="*")
