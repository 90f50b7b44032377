"""One comparison: load the runs, check they compare, compute the differences and the agreement,
and write compare.csv, differences.csv, agreement.csv and compare.html."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import pandas as pd

from harness.reports import agreement as agree
from harness.reports.compare import stats
from harness.reports.compare.differences import DIFF_METRICS, differences, differences_frame, regressions
from harness.reports.compare.page import build_compare_html
from harness.reports.compare.runs import (
    Comparability,
    CompareError,
    Run,
    check_comparable,
    format_runs_list,
    format_runs_table,
    load_runs,
    runs_table,
)
from harness.reports.compare.token_agreement import token_agreement


@dataclass
class Comparison:
    """What one comparison produced (its files are in ``out_dir``)."""

    runs: list[Run]
    comparability: Comparability
    table: pd.DataFrame
    diffs: list[dict[str, Any]]
    regression_lines: list[str]
    out_dir: Path
    metric: str = "ttft_s"  # of the regression gate
    stat: str = "median"  # of per-request values, in the differences
    fail_pct: Optional[float] = None  # the gate's threshold; None: no gate
    agreements: list[agree.Agreement] = field(default_factory=list)  # token agreement with the baseline

    @property
    def baseline(self) -> Run:
        return self.runs[0]


def compare_runs(paths: Sequence[Path], out_dir: Path, *, metric: str = "ttft_s", stat: str = "median",
                 resamples: int = stats.DEFAULT_RESAMPLES, seed: int = 0, fail_pct: Optional[float] = None,
                 strict: bool = False) -> Comparison:
    """Load the runs (the first is the baseline), compare them, and write compare.csv,
    differences.csv and compare.html into ``out_dir``; ``strict``: refuse incomparable runs
    (CompareError) before writing anything."""
    runs = load_runs(paths)
    baseline = runs[0]
    comp = check_comparable(runs)
    if comp.problems and strict:
        raise CompareError("runs are not comparable (--strict): " + " | ".join(comp.problems))
    table = runs_table(runs)
    diffs = differences(runs, baseline, list(dict.fromkeys([metric, *DIFF_METRICS])), stat, resamples, seed)
    regression_lines = regressions(diffs, metric, fail_pct) if fail_pct is not None else []
    agreements = token_agreement(runs)
    out_dir.mkdir(parents=True, exist_ok=True)
    table.to_csv(out_dir / "compare.csv", index=False)
    differences_frame(diffs).to_csv(out_dir / "differences.csv", index=False)
    if agreements:
        pd.DataFrame([a.row() for a in agreements]).to_csv(out_dir / "agreement.csv", index=False)
    gate = (fail_pct, regression_lines) if fail_pct is not None else None
    html, _ = build_compare_html(runs, baseline, table, diffs, comp, out_dir, metric, stat, gate, agreements)
    tmp = out_dir / "compare.html.tmp"
    tmp.write_text(html, encoding="utf-8", errors="replace")  # a lone surrogate a server sent must not cost the page
    tmp.replace(out_dir / "compare.html")
    return Comparison(runs, comp, table, diffs, regression_lines, out_dir, metric, stat, fail_pct, agreements)


def write_comparison(paths: Sequence[Path], out_dir: Path, quiet: bool = True) -> Path:
    """compare.html (and the CSVs) of a sweep's points, baseline the first; for sweep.json's folder."""
    result = compare_runs(paths, out_dir, resamples=500)
    if not quiet:
        print(format_runs_list(result.runs))
        print(format_runs_table(result.table))
    return out_dir / "compare.html"
