"""Every metric defined once: tag, label, unit, direction and formula; the summary follows the metrics."""

import pytest
from records import record

from harness.config import SLOConfig
from harness.results import metrics
from harness.results.kept import as_table
from harness.results.summary import summarize


def test_every_metric_is_fully_defined():
    for key, metric in {**metrics.REQUEST_METRICS, **metrics.RUN_METRICS}.items():
        assert metric.key == key and metric.label and metric.unit
        assert "=" in metric.formula(), f"{key}: the docstring is its formula"
        assert isinstance(metric.lower_is_better, bool)


def test_summary_sections_follow_the_registry():
    s = summarize([record(0), record(1, ttft=0.3)], 2.0, SLOConfig(ttft_s=0.2))
    assert list(s["latency"]) == list(metrics.REQUEST_METRICS)
    assert list(s["throughput"]) == list(metrics.RUN_METRICS)
    assert s["throughput"]["slo_attainment"] == pytest.approx(0.5)


def test_a_metric_cannot_be_defined_twice():
    with pytest.raises(ValueError, match="defined twice"):

        @metrics.register
        class AnotherTTFT(metrics.RequestMetric):
            """TTFT again = no."""

            key, label, unit = "ttft_s", "TTFT", "ms"


def test_display_and_direction():
    ttft, tps = metrics.get("ttft_s"), metrics.get("output_tokens_per_s")
    assert ttft.show(0.25) == 250 and ttft.better(0.1, 0.2)
    assert tps.show(3.0) == 3.0 and tps.better(20, 10)
    with pytest.raises(KeyError, match="unknown metric"):
        metrics.get("nope")


def test_itl_per_token_and_per_chunk_are_both_registered():
    per_token, per_chunk = metrics.get("itl_s"), metrics.get("itl_chunk_s")
    assert per_token.pooled and per_chunk.pooled
    assert "usage" in per_token.formula() and "chunk" in per_chunk.formula()
    assert per_chunk.label == "ITL per chunk" and per_token.label == "ITL per token"
    two_per_chunk = record(0)
    two_per_chunk.itl_chunk_s = [0.2] * 4  # 10 tokens in 5 chunks
    s = summarize([two_per_chunk], 2.0, SLOConfig())
    assert s["latency"]["itl_s"]["count"] == 9 and s["latency"]["itl_chunk_s"]["count"] == 4
    assert s["latency"]["itl_chunk_s"]["p50"] == pytest.approx(0.2)


def test_engine_stage_times_sit_beside_the_harness_measure_of_the_same_interval():
    """vLLM's queue time starts when its scheduler queues the request; queue_wait_s at the send."""
    a, b, c = record(0, ttft=0.30, e2e=1.0), record(1, ttft=0.40, e2e=1.2), record(2)
    a.queue_wait_s, b.queue_wait_s = 0.156, 0.080
    a.engine_stats = {"vllm_queue_s": 0.0, "vllm_prefill_s": 0.12, "vllm_decode_s": 0.69}
    b.engine_stats = {"vllm_queue_s": 0.0, "vllm_prefill_s": 0.30, "vllm_decode_s": 0.79}
    stages = summarize([a, b, c], 2.0, SLOConfig())["engine_stages"]
    assert list(stages) == ["vllm_queue_s", "vllm_prefill_s", "vllm_decode_s"]  # c reported none: left out
    queue = stages["vllm_queue_s"]
    assert queue["engine"]["max"] == 0.0 and queue["harness"]["mean"] == pytest.approx(0.118)
    assert "queued_ts → scheduled_ts" in queue["interval"] and "input path" in queue["harness_interval"]
    assert stages["vllm_prefill_s"]["harness"]["mean"] == pytest.approx(((0.30 - 0.156) + (0.40 - 0.080)) / 2)
    assert stages["vllm_decode_s"]["harness"]["mean"] == pytest.approx(((1.0 - 0.3) + (1.2 - 0.4)) / 2)
    ms = metrics.ENGINE_STAGES["llama_t_p_eval_ms"]
    a.engine_stats = {"llama_t_p_eval_ms": 250.0}
    assert ms.engine_values(as_table([a], metrics.ENGINE_STAGES)).tolist() == pytest.approx([0.25])


def test_the_report_names_each_stage_interval(tmp_path):
    from harness.reports.run_report import _engine_stages_html
    from harness.results.schema import RunSummary

    a = record(0, ttft=0.3)
    a.queue_wait_s, a.engine_stats = 0.156, {"vllm_queue_s": 0.0}
    html = _engine_stages_html(RunSummary(**summarize([a], 1.0, SLOConfig())))
    assert "vLLM scheduler queue (vllm_queue_s)" in html and "queue wait (queue_wait_s)" in html
    assert "156.00" in html and "0.00" in html
