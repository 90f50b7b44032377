"""Per-run summaries: failures are counted apart and length mismatches are flagged."""

import pytest
from records import record

from harness.config import SLOConfig
from harness.reports.console import format_summary
from harness.results.schema import RunSummary
from harness.results.summary import overhead_warnings, run_warnings, summarize


def test_failed_requests_are_counted_apart():
    records = [record(0, ttft=0.1), record(1, ttft=0.3), record(2, error="boom")]
    s = summarize(records, duration_s=2.0, slo=SLOConfig())
    assert s["requests"] == {"sent": 3, "completed": 2, "failed": 1}
    assert s["latency"]["ttft_s"]["count"] == 2
    assert s["latency"]["ttft_s"]["mean"] == pytest.approx(0.2)
    assert s["throughput"]["requests_per_s"] == pytest.approx(1.0)
    assert s["throughput"]["output_tokens_per_s"] == pytest.approx(10.0)
    assert s["latency"]["itl_s"]["count"] == 18  # pooled over the two good requests
    assert any("1 of 3 requests failed" in w for w in s["warnings"])


def test_goodput_counts_requests_meeting_every_slo():
    records = [record(0, ttft=0.1), record(1, ttft=0.6), record(2, ttft=0.2)]
    s = summarize(records, duration_s=1.5, slo=SLOConfig(ttft_s=0.5))
    assert s["throughput"]["goodput_requests_per_s"] == pytest.approx(2 / 1.5)
    assert s["throughput"]["slo_attainment"] == pytest.approx(2 / 3)


def test_length_mismatches_are_flagged():
    records = [
        record(0, n_out=7, requested=10),
        record(1, prompt=49, expected=50),
        record(2, exact=False, n_out=12, requested=10),
    ]
    warnings = summarize(records, 1.0, SLOConfig())["warnings"]
    assert any("exact output length" in w and "7 instead of 10" in w for w in warnings)
    assert any("prompts differ" in w and "49 instead of 50" in w for w in warnings)
    assert any("more than their maximum" in w for w in warnings)


def test_per_turn_rows_and_table():
    records = [record(0, turn=0, ttft=0.1, prompt=40), record(1, turn=1, ttft=0.3, prompt=90)]
    s = summarize(records, 1.0, SLOConfig())
    assert [row["turn"] for row in s["per_turn"]] == [0, 1]
    assert s["per_turn"][1]["ttft_mean_s"] == pytest.approx(0.3)
    text = format_summary(
        RunSummary(status="complete", backend={"name": "x"}, model={"name": "m"}, workload={"name": "chat"}, **s)
    )
    assert "TTFT (ms)" in text and "per turn" in text


def test_large_overhead_is_a_warning():
    lines = overhead_warnings(
        {"delivery_lag_max_s": {"p90": 0.03}, "send_lag_s": {"p90": 0.2}}, {"e2e_s": {"p50": 0.1}}
    )
    assert len(lines) == 2 and "30 ms" in lines[0] and "200 ms late" in lines[1]
    assert overhead_warnings({"delivery_lag_max_s": {"p90": 0.01}}, {"e2e_s": {"p50": 1.0}}) == []


def test_interrupted_and_saturated_endings_are_warnings():
    base = dict(requests={"sent": 3, "completed": 3, "failed": 0}, workload={"requests_planned": 10})
    assert "interrupted: 3 of 10" in run_warnings(RunSummary(status="interrupted", **base))[0]
    saturated = run_warnings(RunSummary(status="saturated", saturated="backlog grew", **base))[0]
    assert "over-saturated (backlog grew)" in saturated and "3 of 10" in saturated
    assert run_warnings(RunSummary(status="complete", **base)) == []


@pytest.mark.engine
def test_the_client_checks_itself(tmp_path):
    """Every run records the event loop's lag and the process's CPU over the measured phase; a
    busy client is a warning (server and remote modes)."""
    from conftest import make_config

    from harness.reports.console import format_summary
    from harness.results.schema import RunSummary
    from harness.results.summary import client_warnings
    from harness.run.point import run_benchmark

    outcome = run_benchmark(
        make_config(
            "model=tiny-random",
            "workload=synthetic",
            "workload.num_requests=6",
            "workload.input_len=48",
            "workload.output_len=8",
            "progress=false",
            "report=false",
        ),
        tmp_path,
    )
    harness = outcome.summary.harness
    assert harness["loop_lag_s"]["count"] >= 1 and harness["loop_lag_s"]["p99"] >= 0
    assert harness["cpu_cores"] > 0
    assert "client: event-loop lag p50" in format_summary(outcome.summary)
    busy = RunSummary(backend={"mode": "server"}, harness={"loop_lag_s": {"p99": 0.03}, "cpu_cores": 0.97})
    assert [w.split(":")[0] for w in client_warnings(busy)] == ["The client may be the bottleneck"] * 2
    assert client_warnings(RunSummary(backend={"mode": "inprocess"}, harness={"cpu_cores": 1.7})) == []


def test_cache_hit_rates_side_by_side():
    records = [record(0, prompt=100), record(1, prompt=100)]
    records[0].cached_tokens, records[1].cached_tokens = 0, 80
    s = summarize(records, 1.0, SLOConfig())
    workload = {
        "name": "shared_prefix",
        "target_cache_hit": 0.5,
        "theoretical_cache_hit": 0.48,
        "data": {"path": "d.jsonl", "format": "mooncake", "records": 3, "sha256": "ab" * 32},
    }
    text = format_summary(
        RunSummary(status="complete", backend={"name": "x"}, model={"name": "m"}, workload=workload, **s)
    )
    assert "prefix-cache hit rate: target 50.0% · theoretical 48.0% · measured 40.0%" in text
    assert "data: d.jsonl (mooncake, 3 records, sha256 abababababab…)" in text
    plain = format_summary(
        RunSummary(status="complete", backend={"name": "x"}, model={"name": "m"}, workload={"name": "chat"}, **s)
    )
    assert "prefix-cache hit rate" not in plain


def test_cost_per_million_tokens_only_with_a_price():
    from core.errors import ConfigError
    from harness.config import CostConfig

    records = [record(0, ttft=0.1), record(1, ttft=0.3), record(2, error="boom")]  # 2 × 10 output tokens
    s = summarize(records, duration_s=36.0, slo=SLOConfig(), usd_per_hour=2.0)  # $0.02 for the phase
    out = sum(r.output_tokens for r in records[:2])
    total = sum(r.output_tokens + r.prompt_tokens for r in records[:2])
    assert s["throughput"]["usd_per_million_output_tokens"] == pytest.approx(0.02 / out * 1e6)
    assert s["throughput"]["usd_per_million_total_tokens"] == pytest.approx(0.02 / total * 1e6)
    none = summarize(records, duration_s=36.0, slo=SLOConfig())
    assert none["throughput"]["usd_per_million_output_tokens"] is None  # absent, not zero
    head = {"status": "complete", "backend": {"name": "x"}, "model": {"name": "m"}, "workload": {"name": "chat"}}
    assert "$ per million output tokens" in format_summary(RunSummary(**head, **s))
    assert "$ per million" not in format_summary(RunSummary(**head, **none))
    assert CostConfig(usd_per_accelerator_hour=3.0, accelerators=8).machine_usd_per_hour() == 24.0
    with pytest.raises(ConfigError, match="not both"):
        CostConfig(usd_per_hour=1.0, usd_per_accelerator_hour=1.0).validate()
    with pytest.raises(ConfigError, match="cost.usd_per_hour must be > 0"):
        CostConfig(usd_per_hour=0.0).validate()
    for absurd in (1e308, float("inf"), float("nan")):
        with pytest.raises(ConfigError, match="at most 1,000,000 US dollars per hour"):
            CostConfig(usd_per_accelerator_hour=absurd).validate()


def test_the_console_says_what_a_long_queue_wait_means():
    records = [record(i, ttft=1.0) for i in range(4)]
    for r in records:
        r.queue_wait_s = 0.8
    s = summarize(records, duration_s=4.0, slo=SLOConfig())
    head = {"status": "complete", "model": {"name": "m"}, "workload": {"name": "chat"}}
    note = (
        "transformers runs one request at a time with batching=serial; backend.batching=continuous serves them together"
    )
    serial = format_summary(
        RunSummary(**head, backend={"name": "transformers", "info": {"notes": {"queue_wait": note}}}, **s)
    )
    assert "queue wait: 800 ms of the TTFT p50 1000 ms" in serial and "backend.batching=continuous" in serial
    other = format_summary(RunSummary(**head, backend={"name": "vllm", "info": {}}, **s))
    assert "queue wait: 800 ms" in other and "batching=continuous" not in other
    for r in records:
        r.queue_wait_s = 0.01
    quick = summarize(records, duration_s=4.0, slo=SLOConfig())
    assert "queue wait:" not in format_summary(RunSummary(**head, backend={"name": "vllm"}, **quick))
