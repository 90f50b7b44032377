"""DuckDB over the history's files."""

from __future__ import annotations

from datetime import date

import pytest
from history_runs import FakeRun, fake_run, nightly

from harness.history.query import EmptyHistory, RunFilter, decisions, runs, series
from harness.history.store import add_decision, add_runs


def test_duckdb_reads_every_file_with_its_partitions(tmp_path):
    nightly(tmp_path / "a", [0.010, 0.011, 0.012])
    fake_run(tmp_path / "b" / "run", 5, FakeRun(engine="llamacpp", engine_version="0.3.36"))
    add_runs(tmp_path / "h", [tmp_path / "a", tmp_path / "b"])
    frame = runs(tmp_path / "h")
    assert len(frame) == 4
    assert list(frame["engine"]) == ["vllm", "vllm", "vllm", "llamacpp"]
    assert list(frame["date"]) == ["2026-03-01", "2026-03-02", "2026-03-03", "2026-03-06"]
    assert not list(tmp_path.rglob("*.duckdb"))
    assert len(runs(tmp_path / "h", RunFilter(engine="llamacpp"))) == 1
    assert len(runs(tmp_path / "h", RunFilter(since=date(2026, 3, 2)))) == 3
    point = frame["point"].iloc[0]
    assert len(runs(tmp_path / "h", RunFilter(point=point[:6]))) == 3  # the other engine is another point
    itl = series(frame, point, "itl_s_p50")
    assert list(itl["value"]) == pytest.approx([0.010, 0.011, 0.012])
    assert {"run_id", "git_commit", "engine_version", "tainted"} <= set(itl.columns)


def test_an_empty_history_is_one_clear_message(tmp_path):
    with pytest.raises(EmptyHistory, match="holds no runs yet"):
        runs(tmp_path / "nothing")
    with pytest.raises(EmptyHistory, match="holds no decisions yet"):
        decisions(tmp_path / "nothing")


def test_decisions_read_back(tmp_path):
    add_decision(tmp_path / "h", {"verdict": "regression", "ratio": 1.2, "date": "2026-03-02"})
    add_decision(tmp_path / "h", {"verdict": "pass", "ratio": 1.0, "blocks": 10, "date": "2026-03-03"})
    frame = decisions(tmp_path / "h")
    assert list(frame["verdict"]) == ["regression", "pass"]
