"""Each side of runs against the baseline's: the change of a statistic with its 95 % interval
from the runs (:mod:`harness.gate.intervals`) and a verdict (:mod:`harness.reports.compare.stats`),
and the regression gate over those differences (:mod:`harness.gate.verdicts`).

A side is one run, or the runs of one configuration (the repeats of a sweep point share its
``config_sha256``); its value is the geometric mean of its runs' statistics.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import pandas as pd

from harness.gate import intervals, verdicts
from harness.gate.bootstrap import stat_function
from harness.gate.figures import parse_figure
from harness.gate.multiple import benjamini_hochberg
from harness.gate.noise import NoiseFloor
from harness.reports.compare import stats
from harness.reports.compare.runs import Run
from harness.reports.html import fmt
from harness.reports.tables import text_table, wrap
from harness.results import metrics

# request metrics compared with bootstrap CIs; the gate may use any request metric not pooled
DIFF_METRICS = tuple(k for k, m in metrics.REQUEST_METRICS.items() if m.in_compare)

GATE_METRICS = tuple(k for k, m in metrics.REQUEST_METRICS.items() if not m.pooled)


@dataclass
class Side:
    """The runs of one arm of a comparison."""

    runs: list[Run]

    @property
    def label(self) -> str:
        first = self.runs[0].label
        return first if len(self.runs) == 1 else f"{first} ×{len(self.runs)}"


def sides(runs: Sequence[Run], baseline_count: Optional[int] = None) -> list[Side]:
    """The baseline side first: the first ``baseline_count`` runs, or (None) the runs sharing the
    first run's configuration; then the other runs grouped by configuration, in order. When that
    would leave nothing to compare, one side per run. A tainted run (the machine was busy or
    throttled: summary.json's ``taint``) is left out of a side that has untainted runs."""
    return [_untainted(side) for side in _grouped(runs, baseline_count)]


def tainted_notes(runs: Sequence[Run], all_sides: Sequence[Side]) -> list[str]:
    """What the comparison did with each tainted run: left out, or kept as its side's only run."""
    kept = {id(r) for side in all_sides for r in side.runs}
    return [
        f"run {r.label} is tainted ({'; '.join(r.summary.taint)}): "
        + (
            "kept, as the only run of its side: its differences are suspect"
            if id(r) in kept
            else "left out of the differences"
        )
        for r in runs
        if r.summary.taint
    ]


def _untainted(side: Side) -> Side:
    clean = [r for r in side.runs if not r.summary.taint]
    return Side(clean) if clean else side


def _grouped(runs: Sequence[Run], baseline_count: Optional[int]) -> list[Side]:
    if baseline_count is not None:
        base, rest = list(runs[:baseline_count]), list(runs[baseline_count:])
    else:
        key = runs[0].summary.config_sha256
        base = [r for r in runs if key and r.summary.config_sha256 == key] or [runs[0]]
        rest = [r for r in runs if r not in base]
        if not rest:
            return [Side([r]) for r in runs]
    groups: dict[Any, list[Run]] = {}
    for r in rest:
        groups.setdefault(r.summary.config_sha256 or id(r), []).append(r)
    return [Side(base), *(Side(g) for g in groups.values())]


def differences(
    all_sides: Sequence[Side],
    keys: Sequence[str],
    stat: str,
    resamples: int = stats.DEFAULT_RESAMPLES,
    seed: int = 0,
    floor: Optional[NoiseFloor] = None,
) -> list[dict[str, Any]]:
    """Every other side against the baseline side (the first), per metric: change, 95 % CI, verdict."""
    base, rows = all_sides[0], []
    fn = stat_function(stat)
    for side in all_sides[1:]:
        for metric in keys:
            rows.append(_difference(base, side, metric, stat, fn, resamples, seed, floor))
    return rows


def _difference(
    base: Side, side: Side, metric: str, stat: str, fn, resamples: int, seed: int, floor: Optional[NoiseFloor]
) -> dict[str, Any]:
    m = metrics.REQUEST_METRICS[metric]
    figure = parse_figure(f"{metric}.{stat}")
    a = [_positive(r.data.values(metric)) for r in base.runs]
    b = [_positive(r.data.values(metric)) for r in side.runs]
    row: dict[str, Any] = {
        "run": side.label,
        "baseline": base.label,
        "metric": metric,
        "label": m.label,
        "stat": stat,
        "unit": m.unit,
        "runs": len(side.runs),
        "baseline_runs": len(base.runs),
        "method": None,
        "baseline_value": _side_value(a, fn, m.scale),
        "value": _side_value(b, fn, m.scale),
        "diff": None,
        "ci_low": None,
        "ci_high": None,
        "change_pct": None,
        "ci_low_pct": None,
        "ci_high_pct": None,
        "verdict": stats.NOT_ENOUGH_DATA,
        "n_baseline": sum(x.size for x in a),
        "n": sum(x.size for x in b),
        "lower_is_better": m.lower_is_better,
        "_interval": None,
        "_figure": figure,
    }
    if min(x.size for x in a + b) < stats.MIN_SAMPLES:
        return row
    interval = intervals.two_level_bootstrap(a, b, fn, resamples=resamples, seed=seed)
    noise = floor.figures.get(figure.name) if floor else None
    if interval.method == intervals.WITHIN_RUN and noise is not None:
        interval = intervals.widened_by_noise_floor(interval, *noise.one_run_each())
    elif interval.method == intervals.RUN_BOOTSTRAP and noise is not None and (apart := noise.between_sessions()):
        interval = intervals.widened_by_noise_floor(interval, *apart, method=intervals.RUNS_WITH_FLOOR)
    base_value = row["baseline_value"]
    verdict = stats.verdict(interval, m.lower_is_better)
    share, base_share = valid_share(side), valid_share(base)
    if verdict == stats.FASTER and share is not None and share < (base_share if base_share is not None else 1.0):
        verdict = stats.invalid_verdict(share)
    row.update(
        {
            "method": interval.method,
            "change_pct": (interval.ratio - 1) * 100,
            "ci_low_pct": (interval.low - 1) * 100,
            "ci_high_pct": (interval.high - 1) * 100,
            "verdict": verdict,
            "_interval": interval,
        }
    )
    if base_value is not None and row["value"] is not None:
        row.update(
            {
                "diff": row["value"] - base_value,
                "ci_low": base_value * (interval.low - 1),
                "ci_high": base_value * (interval.high - 1),
            }
        )
    return row


def valid_share(side: Side) -> Optional[float]:
    """The share of a side's checked replies that kept their constraint (summary.json's
    ``structured``, pooled over its runs); None where no reply was checked."""
    checked = valid = 0
    for run in side.runs:
        section = run.summary.structured or {}
        checked += section.get("checked") or 0
        valid += section.get("valid") or 0
    return valid / checked if checked else None


def _positive(values: np.ndarray) -> np.ndarray:
    return values[values > 0] if values.size else values


def _side_value(runs: Sequence[np.ndarray], fn, scale: float) -> Optional[float]:
    """The geometric mean of the runs' statistics, in display units."""
    values = [float(fn(x)) for x in runs if x.size]
    if not values or min(values) <= 0:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values)) * scale


def differences_frame(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame([{k: v for k, v in r.items() if not k.startswith("_")} for r in rows])


def format_differences(rows: Sequence[dict[str, Any]]) -> str:
    """Per metric: the baseline's value, then each side's value, change, 95% CI, runs and verdict."""
    lines: list[str] = []
    for group in by_metric(rows):
        first = group[0]
        lines.append(
            f"{first['label']} {first['stat']} ({first['unit']}): baseline {fmt(first['baseline_value'], 2)}"
            f" ({first['baseline_runs']} run{'s' if first['baseline_runs'] > 1 else ''})"
        )
        cells = [
            [r["run"], fmt(r["value"], 2), pct_text(r["change_pct"]), ci_text(r), str(r["runs"]), r["verdict"]]
            for r in group
        ]
        lines += text_table(
            [["run"], ["this run"], ["change"], ["95% CI"], ["runs"], ["verdict"]], cells, align="lrrrrl", indent="  "
        )
    if any(r["method"] == intervals.WITHIN_RUN for r in rows):
        lines += wrap(
            "within-run only: one run against one run; the interval lacks the noise between runs, so it "
            "claims no difference (repeat the runs, or measure the noise floor with python -m harness.ab --aa)"
        )
    return "\n".join(lines)


def by_metric(rows: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The difference rows grouped by metric, in the order the metrics first appear."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r["metric"], []).append(r)
    return list(groups.values())


def pct_text(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:+.1f}%"


def ci_text(r: dict[str, Any]) -> str:
    return f"[{pct_text(r['ci_low_pct'])}, {pct_text(r['ci_high_pct'])}]" if r["ci_low_pct"] is not None else "-"


def gate_results(
    rows: Sequence[dict[str, Any]], metric: str, pct: float, floor: Optional[NoiseFloor] = None, fdr: float = 0.05
) -> list[tuple[dict[str, Any], Optional[verdicts.Decision]]]:
    """Each side's decision on the gate's ``metric`` (:func:`decide_rows`)."""
    gated = [r for r in rows if r["metric"] == metric]
    return list(zip(gated, decide_rows([(r, floor) for r in gated], pct, fdr)))


def decide_rows(
    rows: Sequence[tuple[dict[str, Any], Optional[NoiseFloor]]], pct: float, fdr: float = 0.05
) -> list[Optional[verdicts.Decision]]:
    """Each difference row's verdict: regression, pass or inconclusive, with the margin ``pct`` %
    raised to 3 × the row's noise floor when one is known (None: not enough data). With several
    rows (sides, or a sweep's points), "worse beyond noise" is decided by Benjamini–Hochberg over
    them at ``fdr``, so many comparisons are not many chances to cry wolf."""
    p_worse = [_p_worse(r) for r, _ in rows]
    significant = benjamini_hochberg(p_worse, fdr) if len(rows) > 1 else [None] * len(rows)
    out: list[Optional[verdicts.Decision]] = []
    for (r, floor), worse in zip(rows, significant):
        interval, figure = r["_interval"], r["_figure"]
        if interval is None:
            out.append(None)
            continue
        margin, source = floor.margin(figure.name, pct / 100) if floor else (pct / 100, f"threshold {pct:g}%")
        out.append(verdicts.decide(figure, interval, margin, source, worse_significant=worse))
    return out


def _p_worse(row: dict[str, Any]) -> Optional[float]:
    interval = row["_interval"]
    if interval is None or not interval.decides or interval.p_greater is None:
        return None
    return interval.p_greater if row["lower_is_better"] else 1 - interval.p_greater


def regressions(
    rows: Sequence[dict[str, Any]], metric: str, pct: float, floor: Optional[NoiseFloor] = None
) -> list[str]:
    """Lines for the sides whose ``metric`` regressed (:func:`harness.gate.verdicts.decide`)."""
    return [
        f"REGRESSION: {r['run']}: {r['label']} {r['stat']} {fmt(r['value'], 2)} {r['unit']} vs "
        f"{fmt(r['baseline_value'], 2)} (baseline {r['baseline']}): {pct_text(r['change_pct'])}, "
        f"95% CI {ci_text(r)}, worse than the {d.margin * 100:.1f}% margin ({d.margin_source}) beyond noise"
        for r, d in gate_results(rows, metric, pct, floor)
        if d is not None and d.verdict == verdicts.REGRESSION
    ]


def gate_passed_text(metric: str, stat: str, pct: float) -> str:
    return f"no run is shown worse than the baseline by more than {pct:g}% in {metrics.get(metric).label} {stat}"
