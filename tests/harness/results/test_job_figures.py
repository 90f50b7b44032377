"""Job-level figures of agent jobs from made-up records: JCT, goodput under slo.job_s, the
cached share per job and per depth, and the critical path."""

import pytest

from harness.results.jobs import JOB_METRICS, critical_path, job_figures, job_table, jobs_line
from harness.results.record import RequestRecord


def rec(rid, session, turn, start, end, job=0, depth=0, parent=None, cached=None, error=None):
    return RequestRecord(
        request_id=rid,
        session_id=session,
        turn=turn,
        prompt_tokens=100,
        output_tokens=4,
        requested_output_tokens=4,
        exact_output_len=True,
        expected_prompt_tokens=None,
        scheduled_s=None,
        start_s=start,
        end_s=end,
        ttft_s=0.01,
        tpot_s=0.01,
        e2e_s=end - start,
        cached_tokens=cached,
        error=error,
        job_id=job,
        depth=depth,
        parent_request_id=parent,
    )


def job0():
    """Main loop: calls 0 (0–1 s), 1 (1.5–2 s, after a 0.5 s tool gap), then two sub-agents forked
    after call 1 — A: 2.0–2.5, 2.5–4.0; B: 2.0–3.0 — and call 2 once both are back (4.0–5.0)."""
    return [
        rec(0, 0, 0, 0.0, 1.0, cached=0),
        rec(1, 0, 1, 1.5, 2.0, cached=80),
        rec(2, 0, 2, 4.0, 5.0, cached=90),
        rec(3, 1, 0, 2.0, 2.5, depth=1, parent=1, cached=60),
        rec(4, 1, 1, 2.5, 4.0, depth=1, parent=1, cached=70),
        rec(5, 2, 0, 2.0, 3.0, depth=1, parent=1, cached=60),
    ]


def test_the_critical_path_follows_the_dependency_that_finished_last():
    path = critical_path(job0())
    assert [r.request_id for r in path] == [0, 1, 3, 4, 2]  # through sub-agent A, the slower one
    figures = job_figures(job0(), duration_s=5.0, slo_job_s=None)
    assert figures["critical_path_requests"]["mean"] == 5
    assert figures["critical_path_s"]["mean"] == pytest.approx(1.0 + 0.5 + 0.5 + 1.5 + 1.0)
    assert figures["critical_path_share"]["mean"] == pytest.approx(4.5 / 5.0)  # the 0.5 s tool gap is off it


def test_jct_goodput_and_cached_shares():
    second = [rec(10, 3, 0, 5.0, 6.0, job=1, cached=None), rec(11, 3, 1, 6.0, 8.0, job=1, cached=None)]
    failed = [rec(20, 4, 0, 5.0, 5.5, job=2), rec(21, 4, 1, 5.5, 6.0, job=2, error="boom")]
    figures = job_figures(job0() + second + failed, duration_s=10.0, slo_job_s=4.0)
    assert (figures["count"], figures["completed"], figures["failed"]) == (3, 2, 1)
    assert figures["job_s"]["count"] == 2 and sorted([figures["job_s"]["min"], figures["job_s"]["max"]]) == [3.0, 5.0]
    assert figures["jobs_per_s"] == pytest.approx(0.2)
    assert figures["job_goodput_share"] == pytest.approx(1 / 3)  # job 1 (3 s) only: job 0 took 5 s, job 2 failed
    assert figures["job_goodput_per_s"] == pytest.approx(0.1)
    assert figures["job_cached_share"]["count"] == 1  # job 1's engine reported nothing
    assert figures["job_cached_share"]["mean"] == pytest.approx(360 / 600)
    depth = figures["by_depth"]
    assert depth["0"]["requests"] == 6 and depth["0"]["cached_share"] == pytest.approx(170 / 300)
    assert depth["1"]["cached_share"] == pytest.approx(190 / 300)
    assert figures["reported_by_engine"] is True


def test_a_job_cut_short_is_unfinished_not_completed_or_failed():
    """A run interrupted in a tool gap: the job's sent calls all completed, but its plan held more."""
    in_gap = [rec(10, 3, 0, 0.0, 0.3, job=1)]  # 1 of its 8 planned calls
    cancelled = [
        rec(20, 4, 0, 0.0, 0.3, job=2),
        rec(21, 4, 1, 0.5, 0.6, job=2, error="cancelled: the run was interrupted"),
    ]
    failed = [rec(30, 5, 0, 0.0, 0.3, job=3, error="boom")]
    figures = job_figures(
        job0() + in_gap + cancelled + failed, duration_s=6.0, slo_job_s=None, planned={0: 6, 1: 8, 2: 8, 3: 8}
    )
    assert (figures["count"], figures["completed"], figures["failed"], figures["unfinished"]) == (4, 1, 1, 2)
    assert figures["job_s"]["count"] == 1 and figures["jobs_per_s"] == pytest.approx(1 / 6)
    assert dict(job_table(figures))["jobs completed"] == "1/4, 2 unfinished (the run was cut short)"
    # without the plan's counts, a job whose sent calls all completed counts as completed
    assert job_figures(in_gap, duration_s=1.0, slo_job_s=None)["completed"] == 1


def test_no_jobs_no_section_and_the_text_forms():
    plain = rec(0, 0, 0, 0.0, 1.0, job=None, depth=None)
    assert job_figures([plain], 1.0, None) is None and jobs_line(None) is None and job_table(None) == []
    figures = job_figures(job0(), duration_s=5.0, slo_job_s=6.0)
    line = jobs_line(figures)
    assert line.startswith("jobs: 1/1 completed") and "JCT p50 5.00 s" in line and "within slo.job_s=6 s" in line
    labels = [label for label, _ in job_table(figures)]
    assert "Job completion time (s)" in labels and "depth 1" in labels


def test_every_job_metric_says_its_unit_direction_and_formula():
    for key, metric in JOB_METRICS.items():
        assert metric.key == key and metric.unit and metric.formula()
    assert JOB_METRICS["job_s"].lower_is_better and not JOB_METRICS["job_goodput_share"].lower_is_better


def test_the_console_and_the_report_show_the_jobs():
    from harness.reports.console import format_summary
    from harness.reports.run_report import jobs_html
    from harness.results.schema import RunSummary

    summary = RunSummary.from_dict(
        {
            "status": "complete",
            "jobs": job_figures(job0(), 5.0, 6.0),
            "requests": {"sent": 6, "completed": 6, "failed": 0},
        }
    )
    assert summary.to_dict()["jobs"]["completed"] == 1 and "jobs" not in RunSummary().to_dict()
    page = jobs_html(summary)
    assert "Job completion time (s)" in page and "p50 5.00" in page and "depth 1" in page
    assert "jobs: 1/1 completed" in format_summary(summary)
    assert jobs_html(RunSummary()) == ""
