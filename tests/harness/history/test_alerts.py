"""The nightly rule: two consecutive bad runs after a change point; tainted runs left out."""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.gate.figures import Figure
from harness.history.alerts import AlertRule, evaluate
from harness.history.analysis import analyse


def history(seed: int, n: int = 40) -> np.ndarray:
    return 100 * (1 + 0.02 * np.random.default_rng(seed).standard_normal(n))


def test_one_bad_run_does_not_alert():
    values = np.r_[history(0), 120.0]
    assert evaluate(values, lower_is_better=True).alert is None


def test_two_bad_runs_alert():
    values = np.r_[history(0), 120.0, 121.0]
    verdict = evaluate(values, lower_is_better=True)
    assert verdict.alert is not None
    assert verdict.alert.change_index == 40
    assert verdict.alert.relative_change > 0.15
    assert verdict.bad[-2:] == [True, True]


def test_direction_follows_the_metric():
    faster = np.r_[history(1), 80.0, 79.0]
    assert evaluate(faster, lower_is_better=True).alert is None  # a latency that fell is good news
    assert evaluate(faster, lower_is_better=False).alert is not None  # a throughput that fell is not


def test_a_change_within_the_margin_does_not_alert():
    values = np.r_[history(2), history(3, 6) * 1.03]
    assert evaluate(values, lower_is_better=True, rule=AlertRule(margin=0.05)).alert is None


def test_an_old_regression_stops_paging_after_max_age():
    values = np.r_[history(4), history(5, 12) * 1.2]
    assert evaluate(values, lower_is_better=True, rule=AlertRule(max_age=7)).alert is None
    assert evaluate(values, lower_is_better=True, rule=AlertRule(max_age=20)).alert is not None


def series_frame(values, tainted):
    n = len(values)
    return pd.DataFrame(
        {
            "point": ["p"] * n,
            "point_label": ["the point"] * n,
            "run_id": [f"r{i}" for i in range(n)],
            "started_at": pd.date_range("2026-03-01", periods=n, freq="D"),
            "git_commit": ["a" * 40] * n,
            "engine_version": ["1"] * n,
            "tainted": tainted,
            "taint": [["busy"] if t else [] for t in tainted],
            "itl_s_p50": values,
        }
    )


def test_tainted_runs_are_left_out_of_change_points_and_alerts():
    values = list(history(6) / 1e4) + [0.012, 0.0121]
    frame = series_frame(values, [False] * 40 + [True, True])
    (report,) = analyse(frame, [Figure("itl_s", "p50")])
    assert report.verdict.alert is None and not report.verdict.points
    assert len(report.clean) == 40 and len(report.runs) == 42
    frame = series_frame(values, [False] * 42)
    (report,) = analyse(frame, [Figure("itl_s", "p50")])
    assert report.verdict.alert is not None
