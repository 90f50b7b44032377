"""Every point × figure of a history: its series, change points and alert (for trend and check)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import pandas as pd

from core.errors import HarnessError
from harness.history.alerts import AlertRule, SeriesVerdict, evaluate
from harness.history.query import points, series
from harness.history.record import STATS, figure_column
from harness.results import metrics

# TTFT p50, TPOT p50, ITL p90 and output tokens/s: the figures a nightly watches by default
DEFAULT_FIGURES = ("ttft_s.p50", "tpot_s.p50", "itl_s.p90", "output_tokens_per_s")


@dataclass(frozen=True)
class Figure:
    """A figure of the history: a metric, and a statistic of it for request metrics."""

    metric: str
    stat: Optional[str]

    @property
    def column(self) -> str:
        return figure_column(self.metric, self.stat)

    @property
    def name(self) -> str:
        return f"{self.metric}.{self.stat}" if self.stat else self.metric

    @property
    def definition(self) -> type[metrics.Metric]:
        return metrics.get(self.metric)

    @property
    def label(self) -> str:
        d = self.definition
        return f"{d.label} {self.stat} ({d.unit})" if self.stat else f"{d.label} ({d.unit})"


def parse_figure(text: str) -> Figure:
    """``ttft_s.p50`` (a request metric and one of :data:`STATS`) or ``output_tokens_per_s``."""
    metric, _, stat = text.partition(".")
    if metric in metrics.REQUEST_METRICS:
        if stat not in STATS:
            raise HarnessError(f"--metric {text}: a request metric needs a statistic, one of "
                               f"{', '.join(f'{metric}.{s}' for s in STATS)}")
        return Figure(metric, stat)
    if metric in metrics.RUN_METRICS and not stat:
        return Figure(metric, None)
    raise HarnessError(f"--metric {text}: unknown figure; use metric.stat for one of {', '.join(metrics.REQUEST_METRICS)} "
                       f"or a run metric: {', '.join(metrics.RUN_METRICS)}")


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


def analyse(frame: pd.DataFrame, figures: Sequence[Figure], rule: AlertRule = AlertRule()) -> list[SeriesReport]:
    """Each point × figure with a run (a series of tainted runs only has no change point)."""
    out = []
    for point, label in points(frame):
        for figure in figures:
            runs = series(frame, point, figure.column)
            if runs.empty:
                continue
            clean = runs[~runs["tainted"]]
            verdict = evaluate(clean["value"].to_numpy(), figure.definition.lower_is_better, rule)
            out.append(SeriesReport(point, label, figure, runs, verdict))
    return out
