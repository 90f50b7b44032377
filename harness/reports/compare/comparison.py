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


@dataclass(frozen=True)
class CompareOptions:
    """How to compare runs: the gate's figure and threshold, the statistics of the differences,
    and which runs make the baseline."""

    metric: str = "ttft_s"  # of the regression gate
    stat: str = "median"  # of per-request values, in the differences
    resamples: int = stats.DEFAULT_RESAMPLES  # of each bootstrap interval
    seed: int = 0  # of the bootstrap
    fail_pct: Optional[float] = None  # the gate's threshold; None: no gate
    strict: bool = False  # refuse incomparable runs (CompareError) before anything is written
    baseline_count: Optional[int] = None  # the first runs are the baseline; None: the first run's configuration
    noise_dir: Optional[Path] = None  # the stored noise floors (python -m harness.ab --aa); None: no floor
    decisions: Sequence[Decision] = ()  # an A/B experiment's, shown as they were made


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


def make_comparison(paths: Sequence[Path], out_dir: Path, options: CompareOptions) -> Comparison:
    """Load the runs and compare them: the baseline is the first ``options.baseline_count`` runs (None:
    the runs of the first run's configuration), the other runs are grouped by configuration;
    ``options.strict``: refuse incomparable runs (CompareError). Nothing is written:
    :mod:`harness.reports.compare.outputs` writes the files into ``out_dir``."""
    o = options
    runs = load_runs(paths)
    baseline = runs[0]
    comp = check_comparable(runs)
    if comp.problems and o.strict:
        raise CompareError("runs are not comparable (--strict): " + " | ".join(comp.problems))
    all_sides = sides(runs, o.baseline_count)
    comp.problems.extend(tainted_notes(runs, all_sides))
    floor = noise.load(o.noise_dir, *config_key(baseline.data)) if o.noise_dir else None
    metrics = list(dict.fromkeys([o.metric, *DIFF_METRICS]))
    diffs = differences(all_sides, metrics, o.stat, o.resamples, o.seed, floor)
    regression_lines = regressions(diffs, o.metric, o.fail_pct, floor) if o.fail_pct is not None else []
    return Comparison(
        runs,
        comp,
        runs_table(runs),
        diffs,
        regression_lines,
        out_dir,
        o.metric,
        o.stat,
        o.fail_pct,
        token_agreement(runs),
        all_sides,
        floor,
        list(o.decisions),
    )
