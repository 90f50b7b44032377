"""report.html: written by every run, self-contained, drawn without errors in Chromium, escaped."""

import json
import os
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from browser import screenshot_dir
from conftest import loads_engine, make_config, run_harness_cli
from pages import PAYLOAD, assert_renders

from harness.reports import run_report as report
from harness.run import point
from harness.run.point import run_benchmark

# every test runs backend=transformers (the default) on tiny-random, or reads such a run
pytestmark = pytest.mark.engine

# machine.enabled=false: a report's content, not the machine's state (a busy one taints the run)
FAST = [
    "machine.enabled=false",
    "model=tiny-random",
    "workload=synthetic",
    "workload.input_len=48",
    "workload.output_len=6",
]
SINGLE_RUN_PLOTS = ["latency-cdf", "itl", "timeline", "throughput-time", "memory"]
PLOT_ORDER = ["latency-cdf", "itl", "timeline", "throughput-time", "memory", "gpu", "ttft-turn"]


def plot_ids(html: str) -> list[str]:
    return re.findall(r'<div class="figure" data-plot="([^"]+)"', html)


def with_gpu(run_dir: Path, plots: list[str]) -> list[str]:
    """The plots expected of a run: on a machine where NVML samples a GPU, the GPU plot too."""
    gpu = (run_dir / "gpu.parquet").exists()
    return [p for p in PLOT_ORDER if p in plots or (p == "gpu" and gpu)]


@pytest.fixture(scope="module")
@loads_engine
def cli_run(tmp_path_factory):
    """A synthetic run through `python -m harness`, as a user runs it."""
    root = tmp_path_factory.mktemp("cli")
    proc = run_harness_cli(
        *FAST, "workload.num_requests=6", "workload.concurrency=2", "progress=false", f"output_root={root}", cwd=root
    )
    assert proc.returncode == 0, proc.stderr
    return proc, Path(proc.stdout.strip().splitlines()[-1].removeprefix("results: "))


@pytest.fixture(scope="module")
@loads_engine
def chat_run(tmp_path_factory):
    """A chat run whose system prompt is a script, with an output and an error that are scripts too."""
    run_dir = tmp_path_factory.mktemp("chat")
    cfg = make_config(
        "model=tiny-random",
        "workload=chat",
        "workload.sessions=2",
        "workload.turns=3",
        "workload.user_len=16",
        "workload.output_len=5",
        "workload.concurrency=2",
    )
    cfg.workload.system_prompt = PAYLOAD
    run_benchmark(cfg, run_dir)
    return run_dir


def test_every_run_writes_a_self_contained_report(cli_run):
    proc, run_dir = cli_run
    assert proc.stdout.strip().splitlines()[-1] == f"results: {run_dir}"  # still the last line
    html = (run_dir / "report.html").read_text()
    assert html.count("Plotly.newPlot(") == len(with_gpu(run_dir, SINGLE_RUN_PLOTS))
    assert html.count("* plotly.js v") == 1  # the library, embedded once
    assert not re.search(r"<script[^>]+src=", html) and "<link" not in html  # nothing to fetch
    assert plot_ids(html) == with_gpu(run_dir, SINGLE_RUN_PLOTS)
    summary = json.loads((run_dir / "summary.json").read_text())
    for text in ("transformers 5.", "tiny-random", summary["workload"]["sha256"][:12], "logical cores", "Summary"):
        assert text in html, text


def test_report_renders_in_chromium(cli_run, chromium, tmp_path):
    _, run_dir = cli_run
    page = assert_renders(
        chromium,
        run_dir / "report.html",
        screenshot_dir(tmp_path) / "report-synthetic.png",
        with_gpu(run_dir, SINGLE_RUN_PLOTS),
    )
    assert page.title == f"Report · {run_dir.name}"


def test_chat_report_has_turn_plots_and_escapes_run_text(chat_run, chromium, tmp_path):
    # an output and an error carrying markup, as an engine or a model could return them
    df = pd.read_parquet(chat_run / "requests.parquet")
    df.loc[0, "output_text"] = PAYLOAD
    df.loc[1, ["error", "ttft_s", "e2e_s", "tpot_s"]] = [f"RuntimeError: {PAYLOAD}", None, None, None]
    df.to_parquet(chat_run / "requests.parquet", index=False)
    summary = json.loads((chat_run / "summary.json").read_text())
    summary["warnings"].append(f"1 of 6 requests failed (RuntimeError: {PAYLOAD})")
    (chat_run / "summary.json").write_text(json.dumps(summary))
    html = (report.write_report(chat_run)).read_text()
    assert "<script>window.__pwned" not in html and "<img src=x" not in html
    assert "&lt;script&gt;window.__pwned" in html  # shown, as text
    assert plot_ids(html) == with_gpu(chat_run, SINGLE_RUN_PLOTS + ["ttft-turn"])

    page = assert_renders(
        chromium,
        chat_run / "report.html",
        screenshot_dir(tmp_path) / "report-chat.png",
        with_gpu(chat_run, SINGLE_RUN_PLOTS + ["ttft-turn"]),
    )
    assert "pwned" not in page.title
    text = page.values["text"]
    assert '<script>window.__pwned = 1; document.title = "pwned"' in text  # the prompt, the output, the error
    assert text.count("window.__pwned = 1") >= 3


def test_runs_with_failed_requests(monkeypatch, tmp_path, chromium):
    from backends.engines.transformers import TransformersBackend

    real_stream = TransformersBackend.stream

    async def failing_stream(self, request):
        if request.request_id % 3 == 1:
            raise RuntimeError(f"engine refused {PAYLOAD}")
        async for event in real_stream(self, request):
            yield event

    monkeypatch.setattr(TransformersBackend, "stream", failing_stream)
    outcome = run_benchmark(make_config(*FAST, "workload.num_requests=6", "workload.concurrency=2"), tmp_path)
    assert outcome.summary.requests["failed"] == 2
    html = (tmp_path / "report.html").read_text()
    assert "2 of 6 requests failed" in html and "Failed requests (2" in html
    assert "<script>window.__pwned" not in html
    page = assert_renders(
        chromium, tmp_path / "report.html", tmp_path / "failed.png", with_gpu(tmp_path, SINGLE_RUN_PLOTS)
    )
    assert "engine refused <script>window.__pwned" in page.values["text"]


def test_run_where_every_request_failed(monkeypatch, tmp_path, chromium):
    from backends.engines.transformers import TransformersBackend

    async def always_fails(self, request):
        raise RuntimeError("out of memory")
        yield  # an async generator

    monkeypatch.setattr(TransformersBackend, "stream", always_fails)
    run_benchmark(make_config(*FAST, "workload.num_requests=3", "workload.warmup_requests=0"), tmp_path)
    html = (tmp_path / "report.html").read_text()
    assert "No request completed" in html and "3 of 3 requests failed (RuntimeError: out of memory)" in html
    assert plot_ids(html) == with_gpu(tmp_path, ["timeline", "memory"])  # the failures on the timeline; memory
    assert_renders(
        chromium, tmp_path / "report.html", tmp_path / "all-failed.png", with_gpu(tmp_path, ["timeline", "memory"])
    )


def test_interrupted_run_still_gets_its_report(monkeypatch, tmp_path):
    real = point._with_progress

    def interrupt_after_three(append, plan, override, enabled):
        on_record, close = real(append, plan, False, False)

        def record_then_interrupt(record):
            on_record(record)
            if record.request_id >= 2:
                raise KeyboardInterrupt

        return record_then_interrupt, close

    monkeypatch.setattr(point, "_with_progress", interrupt_after_three)
    with pytest.raises(KeyboardInterrupt):
        run_benchmark(make_config(*FAST, "workload.num_requests=20"), tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    html = (tmp_path / "report.html").read_text()
    assert "The run was interrupted" in html and "of 20 planned requests completed" in html


def test_report_from_what_a_dead_run_leaves(cli_run, tmp_path, chromium):
    """Only requests.jsonl (no parquet), no memory.parquet, no env.json, no workload.json."""
    _, source = cli_run
    run_dir = tmp_path / "dead-run"
    shutil.copytree(source, run_dir)
    for name in ("requests.parquet", "memory.parquet", "gpu.parquet", "env.json", "workload.json", "report.html"):
        (run_dir / name).unlink(missing_ok=True)
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["status"] = "failed"
    summary["error"] = f"RuntimeError: {PAYLOAD}"
    (run_dir / "summary.json").write_text(json.dumps(summary))
    html = report.write_report(run_dir).read_text()
    assert "failed: RuntimeError: &lt;script&gt;" in html and "unknown (no env.json)" in html
    assert plot_ids(html) == ["latency-cdf", "itl", "timeline", "throughput-time"]
    assert_renders(
        chromium, run_dir / "report.html", tmp_path / "dead.png", ["latency-cdf", "itl", "timeline", "throughput-time"]
    )


def test_report_of_a_killed_run_and_of_a_run_still_going(cli_run, tmp_path):
    """No summary.json: the figures from requests.jsonl, the names from config.yaml, and the
    claim's pid says whether the run was killed or is still going."""
    _, source = cli_run
    run_dir = tmp_path / "no-summary"
    shutil.copytree(source, run_dir)
    backend = json.loads((run_dir / "summary.json").read_text())["backend"]
    (run_dir / "summary.json").unlink()
    (run_dir / ".claimed").write_text("999999999")  # no such process: killed
    html = report.write_report(run_dir).read_text()
    assert "the run left no summary.json (killed?)" in html and "still going" not in html
    assert f"{backend['name']} ({backend['mode']})" in html and "None requests" not in html
    (run_dir / ".claimed").write_text(str(os.getppid()))  # a live process: a run in progress
    html = report.write_report(run_dir).read_text()
    assert f"the run is still going (pid {os.getppid()})" in html and "killed?" not in html


def test_a_run_with_no_request_at_all(tmp_path, cli_run):
    _, source = cli_run
    run_dir = tmp_path / "empty"
    run_dir.mkdir()
    shutil.copy(source / "summary.json", run_dir)
    pd.read_parquet(source / "requests.parquet").head(0).to_parquet(run_dir / "requests.parquet", index=False)
    html = report.write_report(run_dir).read_text()
    assert plot_ids(html) == [] and "No request was recorded" in html


def test_a_failing_report_costs_only_the_report(monkeypatch, tmp_path, caplog):
    def broken(run_dir):
        raise ValueError("plotting exploded\nsecond line")

    monkeypatch.setattr(point, "write_report", broken)  # as the point calls it
    with caplog.at_level("WARNING", logger="harness"):
        outcome = run_benchmark(make_config(*FAST, "workload.num_requests=2"), tmp_path)
    assert outcome.summary.status == "complete"
    assert (tmp_path / "summary.json").exists() and (tmp_path / "requests.parquet").exists()
    assert not (tmp_path / "report.html").exists()
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert "report.html not written (ValueError: plotting exploded)" in warnings[0]


def test_report_false_writes_none(tmp_path):
    run_benchmark(make_config(*FAST, "workload.num_requests=2", "report=false"), tmp_path)
    assert (tmp_path / "summary.json").exists() and not (tmp_path / "report.html").exists()


def test_rebuild_from_the_command_line(cli_run, tmp_path):
    import subprocess
    import sys

    from conftest import REPO

    _, source = cli_run
    run_dir = tmp_path / "again"
    shutil.copytree(source, run_dir)
    (run_dir / "report.html").unlink()
    proc = subprocess.run(
        [sys.executable, "-m", "harness.report", str(run_dir)], capture_output=True, text=True, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr
    assert (run_dir / "report.html").exists() and "MiB" in proc.stdout


def client_section(html: str) -> str:
    match = re.search(r"<section><h2>The client</h2>.*?</section>", html, re.S)
    assert match, "no client section"
    return match.group(0)


def test_report_shows_the_clients_own_state(cli_run):
    _, run_dir = cli_run
    summary = json.loads((run_dir / "summary.json").read_text())
    lag, cores = summary["harness"]["loop_lag_s"], summary["harness"]["cpu_cores"]
    section = client_section((run_dir / "report.html").read_text())
    assert f"{lag['p99'] * 1000:,.1f}" in section and "event-loop lag p99 (ms)" in section
    assert f"{cores * 100:,.0f} %" in section and "client CPU (% of a core)" in section
    assert f"({lag['count']} samples)" in section and "in-process engine runs in this process" in section


def test_report_warns_when_the_client_may_be_the_bottleneck(cli_run, tmp_path):
    _, run_dir = cli_run
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    summary = json.loads((copy / "summary.json").read_text())
    summary["backend"]["mode"] = "remote"  # an HTTP client: its CPU is the client's alone
    summary["harness"]["loop_lag_s"].update(p50=0.004, p99=0.042, max=0.08)
    summary["harness"]["cpu_cores"] = 0.97
    (copy / "summary.json").write_text(json.dumps(summary))
    section = client_section(report.write_report(copy).read_text())
    assert "The client may be the bottleneck" in section
    assert "its event loop ran 42 ms late (p99)" in section and "it used 97% of a core" in section
    assert "42.0" in section and "97 %" in section and "The client kept up" not in section
    assert "in-process engine" not in section


def test_report_of_a_run_without_client_figures_has_no_client_section(cli_run, tmp_path):
    _, run_dir = cli_run
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    summary = json.loads((copy / "summary.json").read_text())
    summary["harness"].pop("loop_lag_s"), summary["harness"].pop("cpu_cores")  # a run from before they existed
    (copy / "summary.json").write_text(json.dumps(summary))
    assert "<h2>The client</h2>" not in report.write_report(copy).read_text()
