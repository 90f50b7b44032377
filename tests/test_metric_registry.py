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
