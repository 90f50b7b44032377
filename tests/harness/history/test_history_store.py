"""The history's files: one immutable Parquet file per run, partitioned by engine and date."""

from __future__ import annotations

import os

import pyarrow.parquet as pq
import pytest
from history_runs import FakeRun, fake_run, nightly

from core.errors import HarnessError
from harness.history import store
from harness.history.record import run_row
from harness.history.store import ADDED, ALREADY_THERE, add_decision, add_run, add_runs


def test_one_file_per_run_in_engine_and_date_partitions(tmp_path):
    run = fake_run(tmp_path / "r", 3, FakeRun(engine="llamacpp"))
    stored = add_run(tmp_path / "h", run)
    assert stored.status == ADDED
    row = run_row(run)
    assert stored.path == tmp_path / "h" / "runs" / "engine=llamacpp" / "date=2026-03-04" / f"{row['run_id']}.parquet"
    table = pq.read_table(stored.path).to_pylist()
    assert len(table) == 1 and table[0]["ttft_s_p50"] == pytest.approx(0.1)
    assert table[0]["hardware"] and table[0]["point"] and table[0]["taint"] == [] and table[0]["tainted"] is False
    assert [p.name for p in stored.path.parent.iterdir()] == [stored.path.name]  # no temporary file left


def test_adding_a_run_twice_is_a_no_op_and_never_rewrites_the_file(tmp_path):
    run = fake_run(tmp_path / "r", 0)
    first = add_run(tmp_path / "h", run)
    before = (first.path.stat().st_mtime_ns, first.path.read_bytes())
    again = add_run(tmp_path / "h", run)
    assert again.status == ALREADY_THERE and again.path == first.path
    assert (first.path.stat().st_mtime_ns, first.path.read_bytes()) == before


def test_a_file_is_linked_into_place_whole_and_never_overwritten(tmp_path, monkeypatch):
    """Another process added the same run between the check and the link: the first file stays."""
    run = fake_run(tmp_path / "r", 0)
    row = run_row(run)
    target = store.run_path(tmp_path / "h", row)
    target.parent.mkdir(parents=True)
    real_link = os.link

    def racing_link(src, dst):
        target.write_bytes(b"the other process's file")
        real_link(src, dst)

    monkeypatch.setattr(store.os, "link", racing_link)
    stored = add_run(tmp_path / "h", run)
    assert stored.status == ALREADY_THERE
    assert target.read_bytes() == b"the other process's file"
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name]  # the temporary file is gone


def test_tainted_and_unfinished_runs(tmp_path):
    tainted = add_run(tmp_path / "h", fake_run(tmp_path / "t", 1, FakeRun(taint=["GPU thermal slowdown"])))
    assert pq.read_table(tainted.path).to_pylist()[0]["taint"] == ["GPU thermal slowdown"]
    failed = add_run(tmp_path / "h", fake_run(tmp_path / "f", 2, FakeRun(status="failed")))
    assert failed.status.startswith("skipped") and not failed.path.exists()


def test_a_folder_of_runs_adds_each_and_a_non_run_is_refused(tmp_path):
    nightly(tmp_path / "nightly", [0.01, 0.011, 0.012])
    assert [s.status for s in add_runs(tmp_path / "h", [tmp_path / "nightly"])] == [ADDED] * 3
    (tmp_path / "empty").mkdir()
    with pytest.raises(HarnessError, match="holds no run folder"):
        add_runs(tmp_path / "h", [tmp_path / "empty"])


def test_decisions_are_files_of_their_own(tmp_path):
    decision = {
        "arms": ["base", "head"],
        "metric": "ttft_s",
        "stat": "p50",
        "ratio": 1.02,
        "ci_low": 0.99,
        "ci_high": 1.05,
        "verdict": "pass",
        "blocks": 5,
        "runs": 10,
        "wall_s": 312.5,
        "commits": {"base": "a" * 40, "head": "b" * 40},
        "started_at": "2026-03-02T01:00:00+00:00",
    }
    stored = add_decision(tmp_path / "h", decision)
    assert stored.status == ADDED and stored.path.parent.name == "date=2026-03-02"
    row = pq.read_table(stored.path).to_pylist()[0]
    assert row["verdict"] == "pass" and row["arms"] == ["base", "head"] and row["commits_head"] == "b" * 40
    assert add_decision(tmp_path / "h", decision).status == ALREADY_THERE
