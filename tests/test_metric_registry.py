"""Every metric defined once: tag, label, unit, direction and formula; the summary follows the registry."""
import pytest

from harness import metric_registry as registry
from harness.config import SLOConfig
from harness.summary import summarize
from test_summary import record


def test_every_metric_is_fully_defined():
    for key, metric in {**registry.REQUEST_METRICS, **registry.RUN_METRICS}.items():
        assert metric.key == key and metric.label and metric.unit
        assert "=" in metric.formula(), f"{key}: the docstring is its formula"
        assert isinstance(metric.lower_is_better, bool)


def test_summary_sections_follow_the_registry():
    s = summarize([record(0), record(1, ttft=0.3)], 2.0, SLOConfig(ttft_s=0.2))
    assert list(s["latency"]) == list(registry.REQUEST_METRICS)
    assert list(s["throughput"]) == list(registry.RUN_METRICS)
    assert s["throughput"]["slo_attainment"] == pytest.approx(0.5)


def test_a_metric_cannot_be_defined_twice():
    with pytest.raises(ValueError, match="defined twice"):
        @registry.register
        class AnotherTTFT(registry.RequestMetric):
            """TTFT again = no."""
            key, label, unit = "ttft_s", "TTFT", "ms"


def test_display_and_direction():
    ttft, tps = registry.get("ttft_s"), registry.get("output_tokens_per_s")
    assert ttft.show(0.25) == 250 and ttft.better(0.1, 0.2)
    assert tps.show(3.0) == 3.0 and tps.better(20, 10)
    with pytest.raises(KeyError, match="unknown metric"):
        registry.get("nope")


def test_itl_per_token_and_per_chunk_are_both_registered():
    per_token, per_chunk = registry.get("itl_s"), registry.get("itl_chunk_s")
    assert per_token.pooled and per_chunk.pooled
    assert "usage" in per_token.formula() and "chunk" in per_chunk.formula()
    assert per_chunk.label == "ITL per chunk" and per_token.label == "ITL per token"
    two_per_chunk = record(0)
    two_per_chunk.itl_chunk_s = [0.2] * 4  # 10 tokens in 5 chunks
    s = summarize([two_per_chunk], 2.0, SLOConfig())
    assert s["latency"]["itl_s"]["count"] == 9 and s["latency"]["itl_chunk_s"]["count"] == 4
    assert s["latency"]["itl_chunk_s"]["p50"] == pytest.approx(0.2)
