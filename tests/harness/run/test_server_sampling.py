"""A run samples the server's /metrics during its measured phase; a slow /metrics never holds it."""

import json
import shutil
import time

import pandas as pd
import pytest
from conftest import make_config

from harness.reports.compare.cli import main as compare_main
from harness.run.point import run_benchmark

REF = [
    "backend=reference",
    "backend.count_prompt_tokens=false",
    "model=tiny-random",
    "workload=synthetic",
    "workload.input_len=40",
    "workload.warmup_requests=1",
]


@pytest.mark.slow
def test_a_run_samples_the_servers_state_and_draws_it(tmp_path):
    cfg = make_config(
        *REF,
        "backend.ttft_ms=20",
        "backend.itl_ms=10",
        "backend.max_running=2",
        "backend.spec_draft_tokens=4",
        "backend.spec_acceptance=0.5",
        "workload.num_requests=8",
        "workload.output_len=20",
        "workload.concurrency=4",
        "server_metrics.interval_s=0.1",
    )
    run = tmp_path / "run"
    run_benchmark(cfg, run)
    s = json.loads((run / "summary.json").read_text())
    sampled = s["server_metrics"]["sampled"]
    assert sampled["around"] == {"before": "ok", "after": "ok"}
    assert sampled["scrapes"] >= 3 and sampled["ok"] == sampled["scrapes"] and sampled["mean"] == "time-weighted"
    assert sampled["requests_running"]["peak"] == 2 and sampled["requests_waiting"]["peak"] >= 1
    assert 0 < sampled["kv_cache_usage"]["peak"] <= 1
    spec = s["server_metrics"]["speculative"]  # from the counters' Δ over the phase
    assert spec["source"] == "counters" and spec["acceptance_rate"] == 0.5 and spec["mean_acceptance_length"] == 3.0
    series = pd.read_parquet(run / "server_metrics.parquet")
    assert list(series.columns) == ["t_s", "name", "labels", "kind", "value"]
    assert {"kv_cache_usage", "requests_running", "requests_waiting", "spec_acceptance_rate"} <= set(
        series.loc[series["kind"] == "neutral", "name"]
    )
    assert series["t_s"].max() <= s["duration_s"] + 1.0
    page = (run / "report.html").read_text()
    assert 'data-plot="server-time"' in page and "Server state over time" in page
    other = tmp_path / "run2"
    shutil.copytree(run, other)
    assert compare_main([str(run), str(other), "--out", str(tmp_path / "cmp")]) == 0
    assert 'data-plot="server-time"' in (tmp_path / "cmp" / "compare.html").read_text()


@pytest.mark.slow
def test_a_dripping_metrics_does_not_hold_a_short_run(tmp_path):
    """/metrics drips one byte a second (its ~6 KB would take over an hour): every scrape is given
    up at its deadline, so the run ends within a few seconds of its measured phase."""
    cfg = make_config(
        *REF,
        "backend.ttft_ms=5",
        "backend.itl_ms=5",
        "backend.metrics_drip_s=1.0",
        "server_metrics.timeout_s=0.5",
        "server_metrics.interval_s=0.2",
        "workload.num_requests=4",
        "workload.output_len=200",
        "workload.concurrency=2",
    )
    # a measured phase of about 2 s (4 requests of 200 tokens at 5 ms, 2 at a time), so the sampler
    # tries at least one scrape after the one given up before the phase has ended (a phase shorter
    # than that saw only a skipped scrape on a fast machine)
    start = time.perf_counter()
    outcome = run_benchmark(cfg, tmp_path / "run")
    took = time.perf_counter() - start
    s = outcome.summary
    assert s.status == "complete" and s.requests["completed"] == 4
    # what the run spent besides launching the server and the measured phase: the tokenizer, the
    # warm-up, a scrape given up before the phase and one sampler deadline after it, the tables and the report
    assert took - s.load_s - s.duration_s < 10.0, (took, s.load_s, s.duration_s)
    sampled = s.server_metrics["sampled"]
    assert sampled["around"]["before"] == "slow" and sampled["ok"] == 0 and sampled["slow"] >= 1
    assert not (tmp_path / "run" / "server_metrics.parquet").exists()
    assert "No server-state panel: no scrape answered in time." in (tmp_path / "run" / "report.html").read_text()


@pytest.mark.parametrize("value", ["0", "-1", "nan"])
def test_bad_intervals_are_one_line(value):
    from core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^server_metrics\.(interval_s|timeout_s) must be"):
        make_config("backend=reference", f"server_metrics.interval_s={value}")
