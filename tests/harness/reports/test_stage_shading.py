"""The report's per-stage table and the shading of the stages and the steady-state window: from the summary alone."""

from harness.reports import figures
from harness.reports.run_report import shade_time, stages_html
from harness.results.schema import RunSummary

STAGE = {
    "requests": {"sent": 3, "completed": 3, "failed": 0},
    "latency": {"ttft_s": {"p50": 0.05, "p99": 0.08}},
    "throughput": {"requests_per_s": 0.6},
}


def _summary():
    return RunSummary(
        status="complete",
        duration_s=12.0,
        stages=[
            {"index": 0, "start_s": 0.0, "end_s": 5.0, "rate": 1.0, **STAGE},
            {"index": 1, "start_s": 5.0, "end_s": 10.0, "rate": {"from": 1, "to": 4, "shape": "linear"}, **STAGE},
        ],
        window={"start_s": 1.0, "end_s": 9.0, "duration_s": 8.0, "requests": {"sent": 4, "completed": 4, "failed": 0}},
        whole_run={"requests": {"sent": 6, "completed": 6, "failed": 0}},
    )


def test_the_stage_table_shows_the_summarys_figures():
    page = stages_html(_summary())
    assert "Per stage" in page and "1 → 4 (linear)" in page and "50.0 / 80.0" in page
    assert "Steady-state window" in page and "[1.00, 9.00]" in page
    assert stages_html(RunSummary()) == ""


def test_over_time_figures_shade_stages_warm_up_and_cool_down():
    fig = figures.figure(height=300)
    shade_time(fig, _summary())
    rects = [(s["x0"], s["x1"]) for s in fig.layout["shapes"]]
    assert rects == [(0.0, 5.0), (5.0, 10.0), (0.0, 1.0), (9.0, 12.0)]
    assert [a["text"] for a in fig.layout["annotations"]] == ["stage 0", "stage 1", "warm-up", "cool-down"]
    plain = figures.figure(height=300)
    shade_time(plain, RunSummary())
    assert "shapes" not in plain.layout
