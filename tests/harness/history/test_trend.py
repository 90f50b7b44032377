"""trend.html: the series, the change point marked, the alert in red, tainted runs in grey."""

from __future__ import annotations

import pytest
from browser import screenshot_dir
from history_runs import FakeRun, fake_run, nightly

from harness.history.analysis import DEFAULT_FIGURES, analyse, parse_figure
from harness.history.query import runs
from harness.history.store import add_runs
from harness.history.trend import write_trend

BASE = [0.0100, 0.0102, 0.0099, 0.0101, 0.0098, 0.0100, 0.0103, 0.0099, 0.0101, 0.0100] * 3


def build(tmp_path, itl):
    nightly(tmp_path / "runs", itl)
    fake_run(tmp_path / "runs" / "tainted", len(itl), FakeRun(itl_s=0.02, taint=["another busy process"]))
    add_runs(tmp_path / "h", [tmp_path / "runs"])
    reports = analyse(runs(tmp_path / "h"), [parse_figure(f) for f in DEFAULT_FIGURES])
    return write_trend(tmp_path / "trend.html", reports, tmp_path / "h"), reports


@pytest.mark.slow
def test_trend_marks_the_change_point_and_the_alert(tmp_path, chromium):
    path, reports = build(tmp_path, BASE + [0.0116, 0.0115, 0.0117])
    itl = next(r for r in reports if r.figure.name == "itl_s.p90")
    assert [cp.index for cp in itl.verdict.points] == [30] and itl.verdict.alert is not None
    html = path.read_text()
    assert "change point +15" in html and "2 alert(s)" in html  # TPOT p50 and ITL p90 (the same gaps here)
    assert "alert(s)" in html and "tainted (left out)" in html and "segment mean" in html
    page = chromium.open(path, screenshot=screenshot_dir(tmp_path) / "trend-change.png")
    assert not page.errors, page.errors
    assert len(page.plots) == len(reports) and all(p["traces"] for p in page.plots)


def test_trend_without_a_change(tmp_path):
    path, reports = build(tmp_path, BASE)
    assert not any(r.verdict.points for r in reports)
    html = path.read_text()
    assert "no change point in any series" in html and "change point +" not in html and "no alert" in html
