"""Per-adapter figures in the summary, the console and the report."""

from __future__ import annotations

from records import record

from harness.config import SLOConfig
from harness.reports.console import format_summary
from harness.reports.run_report import adapters_html
from harness.results.schema import RunSummary
from harness.results.summary import summarize

LORA = [{"name": "a0", "path": "store:adapter-0", "share": 3.0}, {"name": "base", "path": None, "share": 1.0}]


def records():
    out = []
    for i in range(8):
        r = record(i, ttft=0.1 if i < 6 else 0.3, error="boom" if i == 5 else None)
        r.adapter = "a0" if i < 6 else None
        out.append(r)
    return out


def test_figures_per_adapter_add_up_to_the_run():
    figures = summarize(records(), 2.0, SLOConfig(), lora=LORA)
    ad = figures["adapters"]
    assert list(ad) == ["a0", "base"]
    assert ad["a0"]["share"] == 0.75 and ad["base"]["share"] == 0.25
    assert (ad["a0"]["requests"], ad["a0"]["completed"], ad["a0"]["failed"]) == (6, 5, 1)
    assert ad["base"]["latency"]["ttft_s"]["p50"] == 0.3 and ad["a0"]["latency"]["ttft_s"]["p50"] == 0.1
    total = figures["throughput"]["output_tokens_per_s"]
    assert abs(sum(a["throughput"]["output_tokens_per_s"] for a in ad.values()) - total) < 1e-9
    assert "adapters" not in summarize([record(0)], 1.0, SLOConfig())


def test_console_and_report_show_a_row_per_adapter():
    summary = RunSummary(status="complete", backend={"name": "x"}, **summarize(records(), 2.0, SLOConfig(), lora=LORA))
    text = format_summary(summary)
    assert "per LoRA adapter:" in text and "a0" in text.split("per LoRA adapter:")[1]
    page = adapters_html(summary)
    assert "Per LoRA adapter" in page and "a0" in page and "base" in page and "75.0" in page
    assert adapters_html(RunSummary()) == ""
