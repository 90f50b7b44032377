"""The steady-state window and the per-stage figures of the summary, against records built by hand."""

import pytest
from records import record

from harness.config import SLOConfig
from harness.results import metrics
from harness.results.schema import RunSummary
from harness.results.summary import summarize, time_windows

STAGES = [
    {"index": 0, "start_s": 0.0, "end_s": 10.0, "rate": 1.0},
    {"index": 1, "start_s": 10.0, "end_s": 20.0, "rate": 2.0},
]


def _at(i, start, ttft, n_out=10, stage=None, error=None):
    r = record(i, ttft=ttft, e2e=ttft + 0.9, n_out=n_out, error=error)
    r.start_s, r.end_s, r.stage = start, start + ttft + 0.9, stage
    return r


def _runs():
    # a slow fill (TTFT 1 s) in the first 2 s, steady (0.1 s) after, a slow drain after 18 s
    return (
        [_at(i, 0.5 * i, 1.0) for i in range(4)]  # starts 0, 0.5, 1, 1.5
        + [_at(10 + i, 2.0 + i, 0.1) for i in range(16)]  # starts 2 … 17
        + [_at(40, 18.5, 2.0), _at(41, 19.0, 2.0, error="boom")]
    )


def test_the_window_counts_the_requests_that_started_inside_it():
    records = _runs()
    whole = summarize(records, 22.0, SLOConfig())
    out = time_windows(whole, records, SLOConfig(), window=(2.0, 17.0))
    assert out["window"] == {
        "start_s": 2.0,
        "end_s": 17.0,
        "duration_s": 15.0,
        "requests": {"sent": 16, "completed": 16, "failed": 0},
    }
    assert out["latency"]["ttft_s"]["count"] == 16 and out["latency"]["ttft_s"]["p99"] == pytest.approx(0.1)
    assert out["throughput"]["requests_per_s"] == pytest.approx(16 / 15.0)
    assert out["throughput"]["output_tokens_per_s"] == pytest.approx(160 / 15.0)
    # the whole run's, as summarize made them, with their own counts
    assert out["whole_run"]["requests"] == {"sent": 22, "completed": 21, "failed": 1}
    assert out["whole_run"]["latency"] == whole["latency"] and out["whole_run"]["throughput"] == whole["throughput"]
    assert out["whole_run"]["latency"]["ttft_s"]["p99"] > 1.0
    assert out["requests"] == whole["requests"]  # what was sent: the whole run
    # the same metric set as the registry's, nothing derived apart
    assert set(out["latency"]) == set(metrics.REQUEST_METRICS) and set(out["throughput"]) == set(metrics.RUN_METRICS)


def test_without_a_window_or_stages_nothing_changes():
    records = _runs()
    whole = summarize(records, 22.0, SLOConfig())
    assert time_windows(whole, records, SLOConfig()) == whole
    summary = RunSummary(**whole).to_dict()
    assert not {"window", "whole_run", "stages"} & set(summary)


def test_each_request_belongs_to_the_stage_it_started_in():
    records = _runs()
    records[0].stage = 1  # the column, where the driver stamped it, is what counts
    out = time_windows(summarize(records, 22.0, SLOConfig()), records, SLOConfig(), stages=STAGES)
    first, second = out["stages"]
    assert first["index"] == 0 and first["rate"] == 1.0 and (first["start_s"], first["end_s"]) == (0.0, 10.0)
    # stage 0: starts 0.5, 1, 1.5 and 2 … 9.0 (8); stage 1: the stamped one, 10 … 17 (8) and the two after 18 s
    assert first["requests"] == {"sent": 11, "completed": 11, "failed": 0}
    assert second["requests"] == {"sent": 11, "completed": 10, "failed": 1}
    assert first["throughput"]["requests_per_s"] == pytest.approx(11 / 10.0)
    assert second["latency"]["ttft_s"]["count"] == 10
    assert second["latency"]["ttft_s"]["max"] == pytest.approx(2.0)


def test_an_empty_window_is_a_warning():
    records = _runs()
    out = time_windows(summarize(records, 22.0, SLOConfig()), records, SLOConfig(), window=(30.0, 31.0))
    assert out["window"]["requests"]["sent"] == 0 and out["latency"]["ttft_s"]["count"] == 0
    assert any("steady-state window" in w for w in out["warnings"])
