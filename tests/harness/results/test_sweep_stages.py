"""A time-shaped point in a sweep: its stages' figures in sweep.json and a row each in the table."""

from __future__ import annotations

from harness.reports.console import format_sweep
from harness.results.schema import RunSummary
from harness.results.sweep_file import combine_stages, key_figures, stage_load


def _stage(index: int, ttft: float, load: dict) -> dict:
    return {
        "index": index,
        "start_s": 10.0 * index,
        "end_s": 10.0 * (index + 1),
        **load,
        "requests": {"sent": 5, "completed": 5, "failed": 0},
        "latency": {"ttft_s": {"p50": ttft, "p99": 2 * ttft}, "tpot_s": {"p50": 0.01}},
        "throughput": {"output_tokens_per_s": 100.0 * (index + 1), "requests_per_s": 1.0 + index},
    }


def _summary(scale: float = 1.0) -> RunSummary:
    return RunSummary(
        latency={"ttft_s": {"p50": 0.2}},
        throughput={"output_tokens_per_s": 150.0},
        stages=[
            _stage(0, 0.1 * scale, {"rate": 1.0}),
            _stage(1, 0.3 * scale, {"rate": {"from": 1.0, "to": 4.0, "shape": "linear"}}),
        ],
    )


def test_a_stage_says_its_load_in_words():
    assert stage_load({"rate": 2.0}) == "2 req/s"
    assert stage_load({"concurrency": 8}) == "concurrency 8"
    assert stage_load({"rate": {"from": 1, "to": 8}}) == "1→8 req/s"


def test_each_stage_gets_the_key_figures_of_its_own_summary():
    stages = combine_stages([_summary()])
    assert [s["load"] for s in stages] == ["1 req/s", "1→4 req/s"]
    assert stages[1]["figures"]["ttft_s.p50"] == 0.3 and stages[1]["figures"]["output_tokens_per_s"] == 200.0
    assert combine_stages([RunSummary()]) == []


def test_repeats_give_each_stage_a_mean_and_interval():
    stages = combine_stages([_summary(1.0), _summary(2.0)])
    ttft = stages[0]["figures"]["ttft_s.p50"]
    assert ttft["n"] == 2 and abs(ttft["mean"] - 0.15) < 1e-12 and ttft["ci_low"] < 0.15 < ttft["ci_high"]


def test_the_sweep_table_has_a_row_per_stage_under_its_point():
    point = {
        "index": 3,
        "overrides": ["workload.stages=…"],
        "status": "complete",
        "figures": key_figures(_summary()),
        "stages": combine_stages([_summary()]),
    }
    table = format_sweep({"points": [point, {"index": 4, "overrides": [], "status": "complete", "figures": {}}]})
    lines = table.splitlines()
    rows = [line.split()[0] for line in lines[2:-1]]
    assert rows == ["3", "3.0", "3.1", "4"]
    assert "stage 1: 1→4 req/s" in table and "300.0" in table  # stage 1's TTFT p50 in ms


def test_compare_markdown_has_the_stage_rows_of_compare_html(tmp_path):
    import pandas as pd

    from harness.reports.compare.markdown import _md_parts
    from harness.reports.compare.runs import Run
    from harness.results.schema import RunResult

    run = Run(RunResult(tmp_path, _summary(), pd.DataFrame(), {}, None, None, None), None, label="staged")
    text = _md_parts([run])
    assert text.startswith("### Per stage") and "| staged | 1 |" in text and "1 → 4 req/s" in text
    assert "Per endpoint" not in text
