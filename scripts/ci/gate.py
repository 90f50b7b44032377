"""The regression gate of a benchmark job: this sweep against the baseline sweep, point by point.

    python scripts/ci/gate.py --current results/ci/vllm --baseline baseline/vllm \
        --fail-on-regression 10 --summary "$GITHUB_STEP_SUMMARY" --out results/ci/vllm-compare

Points are paired by their overrides (sweep.json); a point's runs are all its repeats
(``repeat=N``). Each pair goes through ``harness.reports.compare`` (the baseline's runs as one
side, this job's as the other: the interval comes from the runs, harness/gate/intervals.py).
Three verdicts per point (harness/gate/verdicts.py): **regression** (worse beyond noise, with
Benjamini–Hochberg over the points so a 40-point sweep is not 40 chances to cry wolf, and by
more than the threshold, or 3 × the noise floor of ``--noise-dir``), **pass**, **inconclusive**
(never fails). One run against one run is inconclusive unless a noise floor is known. The
interleaved base/head experiment (``python -m harness.ab``) is the stronger test where one
runner can run both. The job summary gets a markdown table, one row per point, then each
comparison in full. Without a baseline (the first run on the default branch, or an expired
artifact) there is no gate: the summary says so and the exit code is 0.

Exit codes: 0 no regression (or no baseline), 1 a regression, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's packages first

from harness.gate.verdicts import PASS, REGRESSION
from harness.reports.compare.comparison import CompareOptions
from harness.reports.compare.differences import decide_rows
from harness.reports.compare.markdown import comparison_markdown
from harness.reports.compare.outputs import compare_runs
from harness.reports.compare.runs import CompareError
from harness.results import metrics
from harness.results.sweep_file import SWEEP_JSON, varying_overrides

EXIT_REGRESSION, EXIT_BAD_INPUT = 1, 2
IGNORED_OVERRIDES = ("hydra.", "output_root=", "progress=", "report=")


def find_sweep(folder: Path) -> Optional[Path]:
    """The sweep.json under ``folder`` (an artifact may nest it one level down)."""
    if not folder.is_dir():
        return None
    found = sorted(folder.glob(SWEEP_JSON)) or sorted(folder.glob(f"*/{SWEEP_JSON}"))
    return found[0] if found else None


def finished_points(sweep_json: Path) -> dict[tuple[str, ...], list[Path]]:
    """Each point with finished runs, keyed by where it sits on the sweep's axes (the overrides
    that vary between its points: the same engine setting changed by a commit is the same
    point) → its run folders (all its repeats). Run folders are found under the sweep's folder:
    they moved with the artifact."""
    data = json.loads(sweep_json.read_text())
    points = data.get("points", [])
    axes = varying_overrides(
        [[o for o in p.get("overrides") or [] if not o.startswith(IGNORED_OVERRIDES)] for p in points]
    )
    found: dict[tuple[str, ...], list[Path]] = {}
    for p, key in zip(points, axes):
        if p.get("status") not in ("complete", "saturated") or not p.get("run_dirs"):
            continue
        point_dir = Path(p["run_dir"])
        dirs = [
            sweep_json.parent / Path(d).relative_to(point_dir.parent)
            if Path(d).is_relative_to(point_dir.parent)
            else Path(d)
            for d in p["run_dirs"]
        ]
        dirs = [d for d in dirs if (d / "summary.json").is_file()]
        if dirs:
            found[tuple(sorted(key))] = dirs
    return found


def gate(
    current: Path,
    baseline: Optional[Path],
    out: Path,
    fail_pct: float,
    metric: str,
    stat: str = "median",
    noise_dir: Optional[Path] = None,
    fdr: float = 0.05,
) -> tuple[int, str]:
    """(exit code, markdown for the job summary)."""
    current_sweep = find_sweep(current)
    if current_sweep is None:
        raise CompareError(f"no {SWEEP_JSON} under {current}: did the sweep run?")
    title = f"### Benchmark gate: {current.name}\n\n"
    base_sweep = find_sweep(baseline) if baseline is not None else None
    if base_sweep is None:
        return 0, title + (
            "**No baseline** (the first run on the default branch, or its artifact expired): "
            "no gate this time. This run's results become the next run's baseline.\n"
        )
    now, before = finished_points(current_sweep), finished_points(base_sweep)
    m = metrics.REQUEST_METRICS[metric]
    compared = []
    for key, run_dirs in now.items():
        if key in before:
            options = CompareOptions(
                metric=metric,
                stat=stat,
                fail_pct=fail_pct,
                resamples=1000,
                baseline_count=len(before[key]),
                noise_dir=noise_dir,
            )
            result = compare_runs([*before[key], *run_dirs], out / run_dirs[0].name, options)
            compared.append((key, result, next(r for r in result.diffs if r["metric"] == metric)))
    decisions = decide_rows([(row, result.floor) for _, result, row in compared], fail_pct, fdr)
    lines = [
        f"Metric: **{m.label} {stat}** ({m.unit}). A point **regresses** when it is worse than the baseline "
        f"beyond noise (Benjamini–Hochberg over the {len(compared)} points at {fdr:g}) and by more than the margin "
        f"({fail_pct:g}%, or 3 × the noise floor); it **passes** when its one-sided 95% bound is inside the margin; "
        "otherwise it is **inconclusive** and does not fail. One run against one run decides only with a noise "
        "floor (`python -m harness.ab --aa`).\n",
        "| point | baseline | this run | change | 95% CI | runs | gate |",
        "|---|---|---|---|---|---|---|",
    ]
    details, regressed, unsure = [], 0, 0
    for key in now:
        label = " ".join(key) or "(the one point)"
        if key not in before:
            lines.append(f"| {label} | - | - | - | - | - | new point: no baseline |")
    for (key, result, row), decision in zip(compared, decisions):
        label = " ".join(key) or "(the one point)"
        verdict = decision.verdict if decision is not None else "not enough data"
        regressed += verdict == REGRESSION
        unsure += verdict != REGRESSION and verdict != PASS
        ci = f"[{_pct(row['ci_low_pct'])}, {_pct(row['ci_high_pct'])}]" if row["ci_low_pct"] is not None else "-"
        mark = {REGRESSION: "**REGRESSION**"}.get(verdict, verdict)
        lines.append(
            f"| {label} | {_num(row['baseline_value'])} | {_num(row['value'])} | {_pct(row['change_pct'])} "
            f"| {ci} | {row['baseline_runs']} / {row['runs']} | {mark} |"
        )
        details.append(f"<details><summary>{label}</summary>\n\n{comparison_markdown(result)}\n</details>\n")
    for key in before.keys() - now.keys():
        lines.append(f"| {' '.join(key) or '(the one point)'} | ran | missing | - | - | - | point not run or failed |")
    verdict_line = (
        f"\n**{regressed} point(s) regressed.**\n"
        if regressed
        else f"\nNo regression ({unsure} point(s) inconclusive: more runs or a noise floor would decide).\n"
        if unsure
        else "\nNo regression.\n"
    )
    return (EXIT_REGRESSION if regressed else 0), title + "\n".join(lines) + "\n" + verdict_line + "\n" + "\n".join(
        details
    )


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
    p.add_argument("--noise-dir", type=Path, default=None, help="noise floors (python -m harness.ab --aa)")
    p.add_argument("--fdr", type=float, default=0.05, help="Benjamini-Hochberg level over the points (default 0.05)")
    a = p.parse_args(argv)
    try:
        code, markdown = gate(
            a.current, a.baseline, a.out, a.fail_on_regression, a.metric, noise_dir=a.noise_dir, fdr=a.fdr
        )
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
