"""One comparison: the runs loaded, whether they compare, each run's differences from the
baseline, the regression gate's verdict and the token agreement."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pandas as pd

from harness.gate import noise
from harness.gate.paired import config_key
from harness.gate.verdicts import Decision
from harness.reports import agreement
from harness.reports.compare import stats
from harness.reports.compare.differences import DIFF_METRICS, Side, differences, regressions, sides, tainted_notes
from harness.reports.compare.runs import (
    Comparability,
    CompareError,
    Run,
    check_comparable,
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
    agreements: list[agreement.Agreement] = field(default_factory=list)  # token agreement with the baseline
    sides: list[Side] = field(default_factory=list)  # the baseline's runs first, then each other side's
    floor: Optional[noise.NoiseFloor] = None  # the baseline configuration's noise floor on its machine
    decisions: list[Decision] = field(default_factory=list)  # an A/B experiment's, shown as they were made

    @property
    def baseline(self) -> Run:
        return self.runs[0]

    @property
    def gate(self) -> Optional[tuple[float, list[str]]]:
        """(threshold %, the regression lines) when the comparison gates; None otherwise."""
        return (self.fail_pct, self.regression_lines) if self.fail_pct is not None else None


def make_comparison(
    paths: Sequence[Path],
    out_dir: Path,
    *,
    metric: str = "ttft_s",
    stat: str = "median",
    resamples: int = stats.DEFAULT_RESAMPLES,
    seed: int = 0,
    fail_pct: Optional[float] = None,
    strict: bool = False,
    baseline_count: Optional[int] = None,
    noise_dir: Optional[Path] = None,
    decisions: Sequence[Decision] = (),
) -> Comparison:
    """Load the runs and compare them: the baseline is the first ``baseline_count`` runs (None: the
    runs of the first run's configuration), the other runs are grouped by configuration; ``strict``: refuse
    incomparable runs (CompareError). Nothing is written: :mod:`harness.reports.compare.outputs`
    writes the files into ``out_dir``."""
    runs = load_runs(paths)
    baseline = runs[0]
    comp = check_comparable(runs)
    if comp.problems and strict:
        raise CompareError("runs are not comparable (--strict): " + " | ".join(comp.problems))
    all_sides = sides(runs, baseline_count)
    comp.problems.extend(tainted_notes(runs, all_sides))
    floor = noise.load(noise_dir, *config_key(baseline.data)) if noise_dir else None
    diffs = differences(all_sides, list(dict.fromkeys([metric, *DIFF_METRICS])), stat, resamples, seed, floor)
    regression_lines = regressions(diffs, metric, fail_pct, floor) if fail_pct is not None else []
    return Comparison(
        runs,
        comp,
        runs_table(runs),
        diffs,
        regression_lines,
        out_dir,
        metric,
        stat,
        fail_pct,
        token_agreement(runs),
        all_sides,
        floor,
        list(decisions),
    )
