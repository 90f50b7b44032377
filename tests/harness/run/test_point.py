"""Whole runs through run_benchmark: the run folder, exact lengths, chat history, the real model."""

import json

import pandas as pd
import pytest
from conftest import make_config, run_warnings

from harness.results.schema import REQUEST_COLUMNS
from harness.results.store import load_requests
from harness.run.point import run_benchmark


@pytest.mark.engine
def test_synthetic_run_writes_every_file(tmp_path):
    cfg = make_config(
        "model=tiny-random",
        "workload=synthetic",
        "workload.num_requests=6",
        "workload.input_len=64",
        "workload.output_len=9",
        "workload.concurrency=2",
    )
    outcome = run_benchmark(cfg, tmp_path)
    for name in (
        "requests.parquet",
        "requests.jsonl",
        "summary.json",
        "config.yaml",
        "env.json",
        "workload.json",
        "memory.parquet",
    ):
        assert (tmp_path / name).exists(), name
    df = pd.read_parquet(tmp_path / "requests.parquet")
    assert list(df.columns) == list(REQUEST_COLUMNS)
    assert len(df) == 6 and df.error.isna().all()
    assert (df.prompt_tokens == 64).all()  # exact input lengths, counted after the template
    assert (df.output_tokens == 9).all()  # exact output lengths
    assert df.itl_s.map(len).eq(8).all()
    assert (df.ttft_s > 0).all() and (df.e2e_s >= df.ttft_s).all()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "complete"
    assert summary["requests"] == {"sent": 6, "completed": 6, "failed": 0}
    assert run_warnings(summary["warnings"]) == []
    assert summary["memory"]["rss_peak_bytes"] > 0 and summary["memory"]["kv_bytes_per_token"] == 2 * 2 * 1 * 64 * 4
    workload = json.loads((tmp_path / "workload.json").read_text())
    assert workload["sha256"] == summary["workload"]["sha256"]
    assert 0 < summary["workload"]["plan_s"] < 60  # the plan's build, timed in seconds
    assert [len(s["turns"][0]["prompt_token_ids"]) for s in workload["sessions"]] == [64] * 6
    env = json.loads((tmp_path / "env.json").read_text())
    assert env["libraries"]["transformers"] and env["cpu"]["logical_cores"] >= 1
    assert outcome.summary.throughput["output_tokens_per_s"] > 0


@pytest.mark.engine
def test_open_loop_run_records_schedule(tmp_path):
    cfg = make_config(
        "model=tiny-random",
        "workload=synthetic",
        "workload.num_requests=5",
        "workload.input_len=40",
        "workload.output_len=4",
        "workload.rate=20",
        "workload.arrival=constant",
    )
    run_benchmark(cfg, tmp_path)
    df = load_requests(tmp_path)
    assert df.scheduled_s.tolist() == pytest.approx([0.0, 0.05, 0.1, 0.15, 0.2])
    assert (df.start_s >= df.scheduled_s - 1e-3).all()


@pytest.mark.engine
def test_static_batching_shows_in_the_engine_stats(tmp_path):
    cfg = make_config(
        "model=tiny-random",
        "workload=synthetic",
        "workload.num_requests=8",
        "workload.input_len=40",
        "workload.output_len=6",
        "workload.concurrency=4",
        "backend.batching=static",
        "backend.batch_wait_s=0.05",
    )
    run_benchmark(cfg, tmp_path)
    df = load_requests(tmp_path)
    sizes = df.engine_stats.map(lambda s: json.loads(s)["batch_size"])
    assert sizes.max() > 1
    assert (df.output_tokens == 6).all()


@pytest.mark.engine
def test_real_model_chat_resends_history(tmp_path):
    cfg = make_config(
        "workload=chat",
        "workload.sessions=2",
        "workload.turns=3",
        "workload.output_len=12",
        "workload.concurrency=2",
        "workload.user_len=24",
    )
    outcome = run_benchmark(cfg, tmp_path)
    df = load_requests(tmp_path).sort_values(["session_id", "turn"])
    assert len(df) == 6 and df.error.isna().all()
    for _, session in df.groupby("session_id"):
        rows = session.to_dict("records")
        for earlier, later in zip(rows, rows[1:]):
            # the next prompt holds the whole previous prompt, the reply and a new message
            assert later["prompt_tokens"] > earlier["prompt_tokens"] + earlier["output_tokens"]
    assert [row["turn"] for row in outcome.summary.per_turn] == [0, 1, 2]
    assert df.output_text.str.len().gt(0).all()
    assert outcome.summary.model["name"] == "smollm2-135m"


@pytest.mark.engine
def test_real_model_synthetic_exact_lengths(tmp_path):
    cfg = make_config(
        "workload=synthetic",
        "workload.num_requests=4",
        "workload.input_len=100",
        "workload.output_len=16",
        "workload.concurrency=4",
        "workload.input_len_dist=uniform",
        "workload.input_len_spread=30",
    )
    outcome = run_benchmark(cfg, tmp_path)
    df = load_requests(tmp_path)
    assert (df.output_tokens == 16).all()
    assert (df.prompt_tokens == df.expected_prompt_tokens).all()
    assert run_warnings(outcome.summary.warnings) == []


@pytest.mark.engine
def test_a_failing_table_write_keeps_the_summary_and_the_report(tmp_path, monkeypatch, caplog):
    from harness.results.store import RunWriter

    def broken(self, *tables):
        raise OSError("disk full")

    monkeypatch.setattr(RunWriter, "write_tables", broken)
    cfg = make_config(
        "model=tiny-random",
        "workload=synthetic",
        "workload.num_requests=2",
        "workload.input_len=40",
        "workload.output_len=3",
    )
    run_benchmark(cfg, tmp_path)
    assert not (tmp_path / "requests.parquet").exists()
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "complete"
    assert (tmp_path / "report.html").exists()  # rebuilt from requests.jsonl
    assert any(
        "requests.parquet and memory.parquet not written (OSError: disk full)" in r.message for r in caplog.records
    )


def test_a_second_interrupt_waits_for_the_results(tmp_path):
    """SIGINT during the final writes is held until they are done, then raised."""
    import os
    import signal

    from harness.run.point import _interrupts_deferred

    written = []
    before = signal.getsignal(signal.SIGINT)  # Python's, or SIG_IGN when the suite runs as a background job
    with pytest.raises(KeyboardInterrupt):
        with _interrupts_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            written.append("summary.json")  # still runs after the signal arrived
    assert written == ["summary.json"]
    assert signal.getsignal(signal.SIGINT) is before


def test_a_taken_run_folder_is_refused_in_one_line(tmp_path):
    from core.errors import HarnessError
    from harness.results.store import check_run_dir_free

    check_run_dir_free(tmp_path)
    with pytest.raises(HarnessError, match="already holds a run"):
        check_run_dir_free(tmp_path)  # a second run given the same folder, even before it has written anything


def test_a_count_whose_arrivals_span_hours_is_named_before_the_wait(caplog):
    from harness.run.point import warn_of_a_long_span
    from workloads.base import SessionSpec, TurnSpec, WorkloadPlan

    def plan(last_arrival_s, schedule=None):
        sessions = [SessionSpec(i, [TurnSpec("hi", 4)], arrival_s=t) for i, t in enumerate((0.0, last_arrival_s))]
        return WorkloadPlan("synthetic", sessions, [], True, None, True, schedule=schedule)

    with caplog.at_level("WARNING", logger="harness"):
        warn_of_a_long_span(plan(600.0))
        warn_of_a_long_span(plan(7200.0, schedule=object()))  # a timed run: its length is the point
        assert caplog.messages == []
        warn_of_a_long_span(plan(1e9))
    [message] = caplog.messages
    assert message.startswith(
        "open loop: the last of 2 requests is due 2.78e+05 h after the first (check workload.rate"
    )
