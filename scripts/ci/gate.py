"""The regression gate of a benchmark job: this sweep against a baseline sweep made at another time.

    python scripts/ci/gate.py --current results/ci/vllm --baseline baseline/vllm \
        --fail-on-regression 10 --noise-dir noise --summary "$GITHUB_STEP_SUMMARY" --out results/ci/vllm-compare

The two sweeps were made apart (another night, often another runner), and the repeats of each
were made back to back: their spread says nothing of the noise between the two (three identical
sweeps a minute apart were called a regression in 1 to 3 of 3 pairs when it did). So each
point is judged as the nightly gate judges one (harness/history/nightly.py), with the baseline as
a history of one nightly: the noise between sweeps comes from a stored noise floor's σ_apart for
the point's configuration on this hardware (``--noise-dir``: ``python -m harness.ab --aa``
measures it); without one the point is **inconclusive**, never a regression, and the summary says
what would decide. A point **regresses** when it lies outside the floor's prediction interval on
the worse side (Benjamini–Hochberg over the points) and is worse by more than the threshold. A
baseline from another hardware fingerprint decides nothing unless ``--allow-other-hardware``.

Nightlies are judged against their whole history instead (``python -m harness.history gate``,
scripts/ci/history.sh), and a pull request by an interleaved A/B (``python -m harness.ab``,
scripts/ci/ab-gate.sh): this script is for one sweep against one baseline. Each point's runs are
also compared in full (compare.html under ``--out``) for a person to read. Without a baseline (the
first run, or an expired artifact) there is no gate: the summary says so and the exit code is 0.

Exit codes: 0 no regression (or no baseline), 1 a regression, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's packages first

import pandas as pd

from harness.history import nightly
from harness.history.analysis import parse_figure
from harness.history.store import rows_in
from harness.reports.compare.comparison import CompareOptions
from harness.reports.compare.outputs import compare_runs
from harness.reports.compare.runs import CompareError
from harness.results import metrics
from harness.results.sweep_file import SWEEP_JSON

EXIT_REGRESSION, EXIT_BAD_INPUT = 1, 2


def find_sweep(folder: Path) -> Optional[Path]:
    """The sweep.json under ``folder`` (an artifact may nest it one level down)."""
    if not folder.is_dir():
        return None
    found = sorted(folder.glob(SWEEP_JSON)) or sorted(folder.glob(f"*/{SWEEP_JSON}"))
    return found[0] if found else None


def gate(
    current: Path,
    baseline: Optional[Path],
    out: Path,
    fail_pct: float,
    metric: str,
    stat: str = "p50",
    noise_dir: Optional[Path] = None,
    fdr: float = 0.05,
    allow_other_hardware: bool = False,
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
    now, before = pd.DataFrame(rows_in(current_sweep.parent)), pd.DataFrame(rows_in(base_sweep.parent))
    if now.empty:
        raise CompareError(f"{current_sweep.parent} holds no finished run")
    figure = parse_figure(f"{metric}.{'p50' if stat == 'median' else stat}")
    result = nightly.judge(
        before,
        now,
        [figure],
        margin=fail_pct / 100,
        fdr=fdr,
        noise_dir=noise_dir,
        allow_other_hardware=allow_other_hardware,
        follow_up=False,
    )
    details = []
    for point, runs_now in now.groupby("point", sort=False):
        runs_before = before[before["point"] == point] if not before.empty else before
        if runs_before.empty:
            continue
        dirs = [Path(d) for d in [*runs_before["run_dir"], *runs_now["run_dir"]]]
        compare_runs(dirs, out / str(point), CompareOptions(metric=metric, stat=stat, fail_pct=fail_pct,
                                                            resamples=1000, baseline_count=len(runs_before)))  # fmt: skip
        details.append(f"- {runs_now['point_label'].iloc[0]}: {out / str(point) / 'compare.html'}")
    missing = set(before["point"]) - set(now["point"]) if not before.empty else set()
    lines = [title + nightly.markdown(result, "Gate against the baseline", "the baseline sweep")]
    if missing:
        lines.append(f"{len(missing)} point(s) of the baseline did not run or failed in this sweep.\n")
    if details:
        lines += ["Comparisons in full (compare.html, the runs of each side):", *details, ""]
    return (EXIT_REGRESSION if result.regressions else 0), "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--current", type=Path, required=True, help="this job's sweep folder")
    p.add_argument("--baseline", type=Path, default=None, help="the baseline sweep folder (absent: no gate)")
    p.add_argument("--out", type=Path, required=True, help="folder for the comparisons (compare.html per point)")
    p.add_argument(
        "--fail-on-regression",
        type=float,
        default=10.0,
        metavar="PCT",
        help="the margin: a regression is worse beyond noise and by more than PCT%% (or 3 x the noise floor)",
    )
    p.add_argument(
        "--metric", default="ttft_s", choices=sorted(metrics.REQUEST_METRICS), help="the request metric judged"
    )
    p.add_argument("--summary", type=Path, default=None, help="markdown appended here (e.g. $GITHUB_STEP_SUMMARY)")
    p.add_argument("--noise-dir", type=Path, default=None, help="noise floors (python -m harness.ab --aa)")
    p.add_argument("--fdr", type=float, default=0.05, help="Benjamini-Hochberg level over the points (default 0.05)")
    p.add_argument("--allow-other-hardware", action="store_true", help="judge against a baseline of other hardware")
    a = p.parse_args(argv)
    try:
        code, markdown = gate(
            a.current,
            a.baseline,
            a.out,
            a.fail_on_regression,
            a.metric,
            noise_dir=a.noise_dir,
            fdr=a.fdr,
            allow_other_hardware=a.allow_other_hardware,
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
