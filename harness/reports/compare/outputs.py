"""The files of a comparison, in its folder: compare.csv, differences.csv, agreement.csv (when
the runs recorded their output ids) and compare.html."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from harness.reports.compare.comparison import CompareOptions, Comparison, make_comparison
from harness.reports.compare.differences import differences_frame
from harness.reports.compare.page import build_compare_html
from harness.reports.compare.runs import format_runs_list, format_runs_table


def write_outputs(result: Comparison) -> Path:
    """The comparison's files into ``result.out_dir``; the path of compare.html."""
    out_dir = result.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    result.table.to_csv(out_dir / "compare.csv", index=False)
    differences_frame(result.diffs).to_csv(out_dir / "differences.csv", index=False)
    if result.agreements:
        pd.DataFrame([a.row() for a in result.agreements]).to_csv(out_dir / "agreement.csv", index=False)
    page, _ = build_compare_html(result)
    tmp = out_dir / "compare.html.tmp"
    tmp.write_text(page, encoding="utf-8", errors="replace")  # a lone surrogate a server sent must not cost the page
    tmp.replace(out_dir / "compare.html")
    return out_dir / "compare.html"


def compare_runs(paths: Sequence[Path], out_dir: Path, options: CompareOptions) -> Comparison:
    """Compare the runs (the first is the baseline) and write the files into ``out_dir``;
    ``options.strict``: refuse incomparable runs (CompareError) before writing anything."""
    result = make_comparison(paths, out_dir, options)
    write_outputs(result)
    return result


def write_comparison(paths: Sequence[Path], out_dir: Path, quiet: bool = True) -> Path:
    """compare.html (and the CSVs) of a sweep's points, baseline the first; for sweep.json's folder."""
    result = compare_runs(paths, out_dir, CompareOptions(resamples=500))
    if not quiet:
        print(format_runs_list(result.runs))
        print(format_runs_table(result.table))
    return out_dir / "compare.html"
