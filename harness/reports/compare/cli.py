"""``python -m harness.compare RUN… --out DIR``: compare run folders, side by side and with statistics.

Writes into ``--out`` (default ``results/compare-<date>-<time>``):

- ``compare.csv`` — one row per run: what ran, key percentiles (ms) and throughputs; the
  console prints a selection within 120 columns;
- ``differences.csv`` — each side against the baseline (``--baseline``, default the runs of the
  first run's configuration; the other runs are grouped by configuration, so the repeats of a
  point are one side): for TTFT, TPOT, E2E and per-request output tokens/s, the change of a
  statistic (median by default) with a 95 % confidence interval from the runs (runs, then
  requests within runs, resampled: harness/gate/intervals.py) and a verdict: faster, slower, no
  significant difference, or "within-run only" for one run against one run, whose interval
  lacks the noise between runs (unless ``--noise-dir`` holds the configuration's noise floor);
- ``agreement.csv`` — for greedy runs that recorded their output token ids: each run's token
  agreement with the baseline (harness/reports/agreement.py): identical requests, mean common prefix,
  the first divergence with both texts, and the run's dtype and quantization;
- ``compare.html`` — self-contained charts: the CDFs overlaid, latency against throughput
  (one line per setup across the runs that differ only in concurrency or rate: the curve of a
  sweep), per-turn TTFT for chat runs, throughputs, and the differences with their CIs.

Runs are comparable when they ran the same model, the same workload (sha256 of its
prompts; a different arrival schedule alone is only noted) on the same hardware (CPU model
and GPUs). Otherwise the comparison warns loudly (WARNING lines and a banner), or with
``--strict`` refuses (exit 2). Backend and engine differences are listed: they are usually
the point. ``--fail-on-regression PCT`` exits 1 when ``--metric`` got worse than the baseline
beyond noise and by more than PCT % (three verdicts: regression, pass, inconclusive;
harness/gate/verdicts.py). ``--markdown FILE`` appends the comparison
as GitHub markdown to FILE (``-``: stdout), for a job summary or a pull-request comment.

Runs are labelled short (``2 vllm c=8``: index, backend, the settings that differ; see
:func:`assign_labels`); every output also lists what each label stands for in full.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Optional, TextIO

from core.errors import HarnessError
from harness.gate.bootstrap import stat_function
from harness.reports.compare import stats
from harness.reports.compare.comparison import CompareOptions, Comparison
from harness.reports.compare.differences import GATE_METRICS, format_differences, gate_passed_text
from harness.reports.compare.markdown import comparison_markdown, write_markdown
from harness.reports.compare.outputs import compare_runs
from harness.reports.compare.runs import CompareError, expand_runs, format_runs_list, format_runs_table
from harness.reports.compare.token_agreement import format_agreement
from harness.reports.tables import wrap

EXIT_REGRESSION = 1

EXIT_REFUSED = 2


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m harness.compare",
        description="Compare benchmark run folders: a table, compare.html, and bootstrap CIs against a baseline.",
    )
    parser.add_argument("runs", nargs="+", help="run folders, globs (quoted), or folders of runs (a sweep)")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: results/compare-<date>-<time>)")
    parser.add_argument(
        "--baseline",
        default=None,
        help="the run(s) the others are compared with: a folder, a quoted glob or a folder of runs "
        "(default: the runs of the first run's configuration)",
    )
    parser.add_argument(
        "--noise-dir",
        type=Path,
        default=Path("results/noise"),
        help="noise floors measured by python -m harness.ab --aa (default: results/noise)",
    )
    parser.add_argument(
        "--metric",
        default="ttft_s",
        choices=sorted(GATE_METRICS),
        help="metric for the regression gate (default: ttft_s)",
    )
    parser.add_argument(
        "--stat", default="median", help="statistic of per-request values: median (default), mean or pNN, e.g. p90"
    )
    parser.add_argument(
        "--fail-on-regression",
        type=float,
        default=None,
        metavar="PCT",
        help="exit 1 when --metric regressed: worse beyond noise and by more than PCT%% "
        "(or 3 x the noise floor); one run against one decides only with a noise floor",
    )
    parser.add_argument("--strict", action="store_true", help="refuse (exit 2) when the runs are not comparable")
    parser.add_argument(
        "--resamples", type=int, default=stats.DEFAULT_RESAMPLES, help="bootstrap resamples (default: 2000)"
    )
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default: 0)")
    parser.add_argument(
        "--markdown",
        default=None,
        metavar="FILE",
        help="also write the comparison as markdown, appended to FILE (e.g. $GITHUB_STEP_SUMMARY); "
        "'-': to stdout, the console output then goes to stderr",
    )
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    try:
        return run_compare(args)
    except (CompareError, HarnessError, OSError) as exc:  # an OSError names its path
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_REFUSED


def run_compare(args: argparse.Namespace) -> int:
    try:
        stat_function(args.stat)
    except ValueError as exc:
        raise CompareError(str(exc)) from None
    if args.fail_on_regression is not None and args.fail_on_regression < 0:
        raise CompareError("--fail-on-regression must be >= 0")
    if args.resamples < 1:
        raise CompareError(f"--resamples must be >= 1 (got {args.resamples}); the default is {stats.DEFAULT_RESAMPLES}")
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        raise CompareError(f"--out must be a folder, and {args.out} is a file")
    if args.markdown == "":
        raise CompareError("--markdown got an empty file name (is $GITHUB_STEP_SUMMARY set?)")
    if args.markdown not in (None, "-") and Path(args.markdown).is_dir():
        raise CompareError(f"--markdown must be a file, not a folder: {args.markdown}")
    paths = expand_runs(args.runs)
    baseline_count = None
    if args.baseline:
        base_paths = expand_runs([args.baseline])
        chosen = {p.resolve() for p in base_paths}
        paths = base_paths + [p for p in paths if p.resolve() not in chosen]
        baseline_count = len(base_paths)
    if len(paths) < 2:
        raise CompareError(f"need at least two run folders to compare (got {len(paths)})")
    out_dir = args.out or fresh_folder(Path("results") / f"compare-{datetime.now().strftime('%Y%m%d-%H%M%S')}")
    options = CompareOptions(
        metric=args.metric,
        stat=args.stat,
        resamples=args.resamples,
        seed=args.seed,
        fail_pct=args.fail_on_regression,
        strict=args.strict,
        baseline_count=baseline_count,
        noise_dir=args.noise_dir,
    )
    result = compare_runs(paths, out_dir, options)
    console = sys.stderr if args.markdown == "-" else sys.stdout
    print_comparison(result, console)
    if args.markdown:
        write_markdown(comparison_markdown(result), args.markdown)
    print(f"compare: {out_dir / 'compare.html'}", file=console, flush=True)
    return EXIT_REGRESSION if result.regression_lines else 0


def fresh_folder(path: Path) -> Path:
    """``path``, or ``path-2``, ``path-3`` … where it is taken (two compares in one second)."""
    candidate, k = path, 1
    while candidate.exists():
        k += 1
        candidate = path.with_name(f"{path.name}-{k}")
    return candidate


def print_comparison(result: Comparison, console: TextIO) -> None:
    """Warnings (stderr), notes, the runs, their figures, the differences and the gate's result;
    every line within 120 columns but for a path longer than that."""
    comp = result.comparability
    for problem in comp.problems:
        print("\n".join(wrap(f"WARNING: runs are not comparable: {problem}")), file=sys.stderr)
    lines = [line for note in comp.notes for line in wrap(f"note: {note}")]
    lines += [
        format_runs_list(result.runs),
        "",
        format_runs_table(result.table),
        "",
        f"against the baseline ({result.sides[0].label}): {result.stat} of per-request values, 95% CI from the runs",
        format_differences(result.diffs),
    ]
    if result.agreements:
        lines += ["", *format_agreement(result.agreements)]
    lines += [line for r in result.regression_lines for line in wrap(r)]
    if result.fail_pct is not None and not result.regression_lines:
        lines += wrap("no regression: " + gate_passed_text(result.metric, result.stat, result.fail_pct))
    print("\n".join(lines), file=console)


if __name__ == "__main__":
    sys.exit(main())
