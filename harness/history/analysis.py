"""Every point × figure of a history: its series, change points and alert (for trend and check)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import pandas as pd

from core.errors import HarnessError
from harness.gate.figures import Figure
from harness.history.alerts import DEFAULT_RULE, AlertRule, SeriesVerdict, evaluate
from harness.history.query import points, series
from harness.history.record import STATS, figure_column
from harness.reports.html import fmt
from harness.results import metrics

# TTFT p50, TPOT p50, ITL p90 and output tokens/s: the figures a nightly watches by default
DEFAULT_FIGURES = ("ttft_s.p50", "tpot_s.p50", "itl_s.p90", "output_tokens_per_s")


def parse_figure(text: str) -> Figure:
    """``ttft_s.p50`` (a request metric and one of :data:`STATS`) or ``output_tokens_per_s``."""
    metric, _, stat = text.partition(".")
    if metric in metrics.REQUEST_METRICS:
        if stat not in STATS:
            raise HarnessError(
                f"--metric {text}: a request metric needs a statistic, one of "
                f"{', '.join(f'{metric}.{s}' for s in STATS)}"
            )
        return Figure(metric, stat)
    if metric in metrics.RUN_METRICS and not stat:
        return Figure(metric, None)
    raise HarnessError(
        f"--metric {text}: unknown figure; use metric.stat for one of {', '.join(metrics.REQUEST_METRICS)} "
        f"or a run metric: {', '.join(metrics.RUN_METRICS)}"
    )


@dataclass(frozen=True)
class SeriesReport:
    point: str
    point_label: str
    figure: Figure
    runs: pd.DataFrame  # query.series: every run with the figure, tainted ones too, oldest first
    verdict: SeriesVerdict  # over the untainted runs only

    @property
    def clean(self) -> pd.DataFrame:
        """The untainted runs, in the order the verdict indexes them."""
        return self.runs[~self.runs["tainted"]].reset_index(drop=True)


def alert_cells(report: SeriesReport) -> Optional[dict[str, str]]:
    """A series' alert as text (since, reference, latest, change), or None without one; for
    check's lines and trend.html's table alike."""
    alert = report.verdict.alert
    if alert is None:
        return None
    d = report.figure.definition
    return {
        "since": f"{pd.Timestamp(report.clean['started_at'].iloc[alert.change_index]):%Y-%m-%d %H:%M}",
        "reference": fmt(alert.reference, d.digits, d.scale, f" {d.unit}"),
        "latest": ", ".join(fmt(v, d.digits, d.scale) for v in alert.latest),
        "change": f"{alert.relative_change * 100:+.1f} %",
    }


def analyse(frame: pd.DataFrame, figures: Sequence[Figure], rule: AlertRule = DEFAULT_RULE) -> list[SeriesReport]:
    """Each point × figure with a run (a series of tainted runs only has no change point)."""
    out = []
    for point, label in points(frame):
        for figure in figures:
            runs = series(frame, point, figure_column(figure.metric, figure.stat))
            if runs.empty:
                continue
            clean = runs[~runs["tainted"]]
            verdict = evaluate(clean["value"].to_numpy(), figure.definition.lower_is_better, rule)
            out.append(SeriesReport(point, label, figure, runs, verdict))
    return out
