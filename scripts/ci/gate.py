"""The regression gate of a benchmark job: this sweep against the baseline sweep, point by point.

    python scripts/ci/gate.py --current results/ci/vllm --baseline baseline/vllm \
        --fail-on-regression 10 --summary "$GITHUB_STEP_SUMMARY" --out results/ci/vllm-compare

Points are paired by their overrides (sweep.json). Each pair goes through
``harness.reports.compare.runs`` (the baseline point first); a point is a regression when its
``--metric`` is worse than the baseline's by more than the threshold and the bootstrap 95 %
CI excludes zero. The job summary gets a markdown table, one row per point, then each
comparison in full. Without a baseline (the first run on the default branch, or an expired
artifact) there is no gate: the summary says so and the exit code is 0.

Exit codes: 0 no regression (or no baseline), 1 a regression, 2 bad input.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional, Sequence

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from harness.reports.compare.markdown import comparison_markdown  # noqa: E402
from harness.reports.compare.outputs import compare_runs
from harness.reports.compare.runs import CompareError
from harness.results import metrics  # noqa: E402
from harness.results.sweep_file import SWEEP_JSON, varying_overrides  # noqa: E402

EXIT_REGRESSION, EXIT_BAD_INPUT = 1, 2
IGNORED_OVERRIDES = ("hydra.", "output_root=", "progress=", "report=")


def find_sweep(folder: Path) -> Optional[Path]:
    """The sweep.json under ``folder`` (an artifact may nest it one level down)."""
    if not folder.is_dir():
        return None
    found = sorted(folder.glob(SWEEP_JSON)) or sorted(folder.glob(f"*/{SWEEP_JSON}"))
    return found[0] if found else None


def finished_points(sweep_json: Path) -> dict[tuple[str, ...], Path]:
    """Each point with a finished run, keyed by where it sits on the sweep's axes (the
    overrides that vary between its points: the same engine setting changed by a commit is
    the same point) → its run folder. Run folders are found under the sweep's folder: they
    moved with the artifact."""
    data = json.loads(sweep_json.read_text())
    points = data.get("points", [])
    axes = varying_overrides([[o for o in p.get("overrides") or [] if not o.startswith(IGNORED_OVERRIDES)]
                              for p in points])
    found: dict[tuple[str, ...], Path] = {}
    for p, key in zip(points, axes):
        run_dirs = p.get("run_dirs") or []
        if p.get("status") not in ("complete", "saturated") or not run_dirs:
            continue
        first, point_dir = Path(run_dirs[0]), Path(p["run_dir"])
        run_dir = sweep_json.parent / first.relative_to(point_dir.parent) if first.is_relative_to(point_dir.parent) else first
        if (run_dir / "summary.json").is_file():
            found[tuple(sorted(key))] = run_dir
    return found


def gate(current: Path, baseline: Optional[Path], out: Path, fail_pct: float, metric: str,
         stat: str = "median") -> tuple[int, str]:
    """(exit code, markdown for the job summary)."""
    current_sweep = find_sweep(current)
    if current_sweep is None:
        raise CompareError(f"no {SWEEP_JSON} under {current}: did the sweep run?")
    title = f"### Benchmark gate: {current.name}\n\n"
    base_sweep = find_sweep(baseline) if baseline is not None else None
    if base_sweep is None:
        return 0, title + ("**No baseline** (the first run on the default branch, or its artifact expired): "
                           "no gate this time. This run's results become the next run's baseline.\n")
    now, before = finished_points(current_sweep), finished_points(base_sweep)
    m = metrics.REQUEST_METRICS[metric]
    lines = [f"Metric: **{m.label} {stat}** ({m.unit}); a regression is worse by more than **{fail_pct:g}%** "
             f"with the 95% CI excluding zero.\n",
             "| point | baseline | this run | change | 95% CI | gate |", "|---|---|---|---|---|---|"]
    details, regressed = [], 0
    for key, run_dir in now.items():
        label = " ".join(key) or "(the one point)"
        if key not in before:
            lines.append(f"| {label} | - | - | - | - | new point: no baseline |")
            continue
        result = compare_runs([before[key], run_dir], out / run_dir.name, metric=metric, stat=stat,
                              fail_pct=fail_pct, resamples=1000)
        row = next(r for r in result.diffs if r["metric"] == metric)
        verdict = "**REGRESSION**" if result.regression_lines else "pass"
        regressed += bool(result.regression_lines)
        ci = f"[{_pct(row['ci_low_pct'])}, {_pct(row['ci_high_pct'])}]" if row["ci_low_pct"] is not None else "-"
        lines.append(f"| {label} | {_num(row['baseline_value'])} | {_num(row['value'])} | {_pct(row['change_pct'])} "
                     f"| {ci} | {verdict} |")
        details.append(f"<details><summary>{label}</summary>\n\n{comparison_markdown(result)}\n</details>\n")
    for key in before.keys() - now.keys():
        lines.append(f"| {' '.join(key) or '(the one point)'} | ran | missing | - | - | point not run or failed |")
    verdict_line = (f"\n**{regressed} point(s) regressed.**\n" if regressed else "\nNo regression.\n")
    return (EXIT_REGRESSION if regressed else 0), title + "\n".join(lines) + "\n" + verdict_line + "\n" + "\n".join(details)


def _num(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.4g}"


def _pct(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:+.1f}%"


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--current", type=Path, required=True, help="this job's sweep folder")
    p.add_argument("--baseline", type=Path, default=None, help="the baseline sweep folder (absent: no gate)")
    p.add_argument("--out", type=Path, required=True, help="folder for the comparisons (compare.html per point)")
    p.add_argument("--fail-on-regression", type=float, default=10.0, metavar="PCT")
    p.add_argument("--metric", default="ttft_s", choices=sorted(metrics.REQUEST_METRICS))
    p.add_argument("--summary", type=Path, default=None, help="markdown appended here (e.g. $GITHUB_STEP_SUMMARY)")
    a = p.parse_args(argv)
    try:
        code, markdown = gate(a.current, a.baseline, a.out, a.fail_on_regression, a.metric)
    except CompareError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(markdown)
    if a.summary is not None:
        with a.summary.open("a", encoding="utf-8") as f:
            f.write(markdown + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
