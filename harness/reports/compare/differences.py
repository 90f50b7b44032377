"""Each run against the baseline: the change of a statistic with its bootstrap 95 % CI and a verdict
(:mod:`harness.reports.compare.stats`), and the regression gate over those differences."""
from __future__ import annotations

from typing import Any, Optional, Sequence

import pandas as pd

from harness.reports.compare import stats
from harness.reports.compare.runs import Run
from harness.reports.html import fmt
from harness.reports.tables import text_table
from harness.results import metrics

# request metrics compared with bootstrap CIs; the gate may use any request metric not pooled
DIFF_METRICS = tuple(k for k, m in metrics.REQUEST_METRICS.items() if m.in_compare)

GATE_METRICS = tuple(k for k, m in metrics.REQUEST_METRICS.items() if not m.pooled)


def differences(runs: Sequence[Run], baseline: Run, keys: Sequence[str], stat: str,
                resamples: int = stats.DEFAULT_RESAMPLES, seed: int = 0) -> list[dict[str, Any]]:
    """Every other run against the baseline, per metric: change, bootstrap 95 % CI, verdict."""
    rows = []
    base_values = {m: baseline.data.values(m) for m in keys}
    for run in runs:
        if run is baseline:
            continue
        for metric in keys:
            m = metrics.REQUEST_METRICS[metric]
            label, lower_better, scale, unit = m.label, m.lower_is_better, m.scale, m.unit
            d = stats.bootstrap_difference(base_values[metric], run.data.values(metric), stat, resamples, seed=seed)
            rows.append({
                "run": run.label, "baseline": baseline.label, "metric": metric, "label": label, "stat": stat, "unit": unit,
                "baseline_value": _scaled(d.baseline, scale), "value": _scaled(d.candidate, scale),
                "diff": _scaled(d.diff, scale), "ci_low": _scaled(d.ci_low, scale), "ci_high": _scaled(d.ci_high, scale),
                "change_pct": _pct(d.rel), "ci_low_pct": _pct(d.rel_ci_low), "ci_high_pct": _pct(d.rel_ci_high),
                "verdict": stats.verdict(d, lower_better),
                "n_baseline": d.n_baseline, "n": d.n_candidate, "lower_is_better": lower_better,
                "_difference": d,
            })
    return rows


def _scaled(v: Optional[float], scale: float) -> Optional[float]:
    return None if v is None else v * scale


def _pct(v: Optional[float]) -> Optional[float]:
    return None if v is None else v * 100


def differences_frame(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame([{k: v for k, v in r.items() if not k.startswith("_")} for r in rows])


def format_differences(rows: Sequence[dict[str, Any]]) -> str:
    """Per metric: the baseline's value, then each run's value, change, 95% CI and verdict."""
    lines: list[str] = []
    for group in by_metric(rows):
        first = group[0]
        lines.append(f"{first['label']} {first['stat']} ({first['unit']}): baseline {fmt(first['baseline_value'], 2)}")
        cells = [[r["run"], fmt(r["value"], 2), pct_text(r["change_pct"]), ci_text(r), r["verdict"]] for r in group]
        lines += text_table([["run"], ["this run"], ["change"], ["95% CI"], ["verdict"]], cells, align="lrrrl", indent="  ")
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


def gate_results(rows: Sequence[dict[str, Any]], metric: str, pct: float) -> list[tuple[dict[str, Any], bool]]:
    """Each run's difference in the gate's ``metric`` and whether it fails the gate: worse than
    the baseline by more than ``pct`` % beyond noise."""
    return [(r, stats.is_regression(r["_difference"], pct, r["lower_is_better"])) for r in rows if r["metric"] == metric]


def regressions(rows: Sequence[dict[str, Any]], metric: str, pct: float) -> list[str]:
    """Lines for the runs whose ``metric`` is worse than the baseline by > pct % beyond noise."""
    return [
        f"REGRESSION: {r['run']}: {r['label']} {r['stat']} {fmt(r['value'], 2)} {r['unit']} vs "
        f"{fmt(r['baseline_value'], 2)} (baseline {r['baseline']}): {pct_text(r['change_pct'])}, "
        f"95% CI {ci_text(r)}, worse than the {pct:g}% allowed"
        for r, failed in gate_results(rows, metric, pct) if failed
    ]


def gate_passed_text(metric: str, stat: str, pct: float) -> str:
    return f"no run is worse than the baseline by more than {pct:g}% in {metrics.get(metric).label} {stat} beyond noise"
