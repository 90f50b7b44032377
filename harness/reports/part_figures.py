"""The cells of one part of a run (a stage, an endpoint): its figures from the summary, columns
from the metric registry, request metrics as two statistics (e.g. p50 / p99)."""

from __future__ import annotations

from typing import Any

from harness.reports.html import fmt
from harness.results import metrics


def part_cells(
    part: dict[str, Any], stats: tuple[str, str] = ("p50", "p99"), compare_only: bool = False
) -> dict[str, str]:
    """``{column: cell}`` for a summary part holding ``latency`` and ``throughput``: each console
    request metric (``compare_only``: only those compare bootstraps) as "a / b", then each run
    metric the part has."""
    cells: dict[str, str] = {}
    low, high = stats
    latency, throughput = part.get("latency") or {}, part.get("throughput") or {}
    for key, metric in metrics.REQUEST_METRICS.items():
        if metric.in_console and (metric.in_compare or not compare_only):
            d = latency.get(key) or {}
            cells[f"{metric.label} {low} / {high} ({metric.unit})"] = (
                f"{fmt(d.get(low), metric.digits, metric.scale)} / {fmt(d.get(high), metric.digits, metric.scale)}"
            )
    for key in metrics.shown_run_metrics(throughput):
        run_metric = metrics.RUN_METRICS[key]
        cells[f"{run_metric.label} ({run_metric.unit})"] = fmt(throughput.get(key), run_metric.digits, run_metric.scale)
    return cells


def uniform_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of runs with different metric sets: every row with every column ("–" where absent)."""
    columns = list(dict.fromkeys(c for r in rows for c in r))
    return [{c: r.get(c, "–") for c in columns} for r in rows]
