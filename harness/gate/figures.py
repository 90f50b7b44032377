"""The figures a gate compares: one statistic of one metric per run, read from its summary.

A figure is named ``metric.stat`` for a request metric (``ttft_s.p50``, ``tpot_s.p90``) and
``metric`` for a run metric (``output_tokens_per_s``). Its value for a run is the one the run's
summary.json holds (nothing re-derived); its per-request values, for resampling, come from the
run's requests table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from harness.gate.bootstrap import StatFunction, stat_function
from harness.results import metrics
from harness.results.schema import RunResult, RunSummary

# median and p90 of TTFT, TPOT and ITL, output tokens/s and goodput (absent without an SLO)
DEFAULT_FIGURES = (
    "ttft_s.p50",
    "ttft_s.p90",
    "tpot_s.p50",
    "tpot_s.p90",
    "itl_s.p50",
    "itl_s.p90",
    "output_tokens_per_s",
    "goodput_requests_per_s",
)
STAT_ALIASES = {"median": "p50"}


@dataclass(frozen=True)
class Figure:
    metric: str
    stat: Optional[str]  # None for a run metric

    @property
    def name(self) -> str:
        return f"{self.metric}.{self.stat}" if self.stat else self.metric

    @property
    def definition(self) -> type[metrics.Metric]:
        return metrics.get(self.metric)

    @property
    def label(self) -> str:
        return f"{self.definition.label} {self.stat}" if self.stat else self.definition.label

    @property
    def lower_is_better(self) -> bool:
        return self.definition.lower_is_better

    @property
    def stat_fn(self) -> Optional[StatFunction]:
        return stat_function(self.stat) if self.stat else None

    def of(self, summary: RunSummary) -> Optional[float]:
        """The run's value, from its summary (None when absent or not > 0)."""
        value = summary.stat(self.metric, self.stat or "")
        return value if value is not None and value > 0 else None

    def request_values(self, run: RunResult) -> Optional[np.ndarray]:
        """The per-request values the statistic is taken over (None for a run metric)."""
        return run.values(self.metric) if self.stat else None


def parse_figure(name: str) -> Figure:
    """``ttft_s.p50`` | ``ttft_s.median`` | ``ttft_s`` (its p50) | ``output_tokens_per_s``."""
    metric, _, stat = name.partition(".")
    if metric in metrics.REQUEST_METRICS:
        if metrics.REQUEST_METRICS[metric].pooled and not stat:
            stat = "p50"
        stat = STAT_ALIASES.get(stat, stat) or "p50"
        if stat != "mean" and not (stat.startswith("p") and stat[1:].replace(".", "", 1).isdigit()):
            raise ValueError(f"unknown statistic '{stat}' in figure '{name}': use p50, p90, p99 or mean")
        return Figure(metric, stat)
    if metric in metrics.RUN_METRICS and not stat:
        return Figure(metric, None)
    known = ", ".join([*(f"{m}.p50" for m in metrics.REQUEST_METRICS), *metrics.RUN_METRICS])
    raise ValueError(f"unknown figure '{name}': one of {known}")


# the statistics compare and the gates take of a request metric (compare: --stat, median by default)
FLOOR_STATS = ("p50", "p90", "p99")
# the run metrics a gate may judge that every run has (goodput and the SLO share need an SLO)
FLOOR_RUN_METRICS = ("requests_per_s", "output_tokens_per_s", "total_tokens_per_s", "goodput_requests_per_s")


def floor_figures(decided: tuple[Figure, ...] | list[Figure] = ()) -> list[Figure]:
    """Every figure an A/A noise floor keeps: those ``decided`` by the experiment, each statistic
    of every request metric compare judges (TTFT, TPOT, E2E, per-request tokens/s), the pooled ITL
    the history follows, and the run metrics. A floor without one of them leaves compare and the
    gates with no noise for it ("within-run only", inconclusive)."""
    names = [f.name for f in decided]
    for key, metric in metrics.REQUEST_METRICS.items():
        if metric.in_compare or key == "itl_s":
            names += [f"{key}.{stat}" for stat in FLOOR_STATS]
    names += list(FLOOR_RUN_METRICS)
    return [parse_figure(name) for name in dict.fromkeys(names)]
