"""The fault-injection suite: every ending and every misbehaving server keeps what was measured.

- A server that misbehaves: the reference server's ``--error-kind`` modes
  (``refserver/app.py: FAULTS``), each run end to end through ``backend=reference``.
- Secrets: the API key against a server that redirects to another origin.
- Signal drills: Ctrl-C, SIGTERM, SIGHUP (and SIGKILL in server mode) on a run in progress.
- An engine that dies mid-run; two runs started together on one folder.
"""

import json
import math
import signal
import subprocess
import sys
import time
import urllib.request

import pandas as pd
import psutil
import pytest
from conftest import as_foreground_job, make_config, run_harness_cli
from reference_fixtures import chat_request, collect, reference_server, run

from backends.http.client import HTTPStatusError, OpenAIClient
from backends.http.probe import check_server
from core.errors import HarnessError
from harness.results.store import load_requests, load_summary
from harness.run.point import run_benchmark
from refserver.faults import FAULTS

FAST = ["model=tiny-random", "workload=synthetic", "workload.input_len=48", "workload.output_len=4", "progress=false"]
REF = ["backend=reference", "backend.ttft_ms=2", "backend.itl_ms=1", "backend.count_prompt_tokens=false"]

# fault → what a faulted request's row says: an error (a regex on it), or None (the request
# counts) with a check of its row
N_REQUESTS, OUTPUT_LEN = 8, 8
ERRORS = {
    "status": r"^HTTPStatusError: HTTP 500: reference server: injected error",
    "drop": r"^ServerDisconnected: the server closed the connection in the middle of its response",
    "stall": r"^TimeoutError: no byte for backend.idle_timeout_s=1 s",
    "negative-usage": r"^the engine reported an invalid output tokens count: '-8'",
    "absurd-usage": r"^StreamError: usage.completion_tokens is 1000000000000000 for max_tokens 8",
    "fractional-usage": r"^the engine reported an invalid prompt tokens count: '3.5'",
    "bad-unicode": r"^HTTPStatusError: HTTP 500: injected \ufffd error",
    "huge-event": r"^SSETooLarge: a server-sent event over",
    "huge-error-body": r"^HTTPStatusError: HTTP 500: x{300}$",
    "bad-json": r"^StreamError: not JSON in the stream",
    "wrong-types": r"^StreamError: the token text is not a string",
    "error-event": r"^StreamError: the server reported an error mid-stream: engine error: out of memory",
    "not-sse": r"^StreamError: the stream ended before \[DONE\] \(Content-Type text/html; charset=utf-8: not an event stream\)",
    "redirect": r"^HTTPStatusError: HTTP 307",
}
COUNTED = {  # the request counts; its row shows what was odd
    "no-done": lambda row: json.loads(row.engine_stats).get("no_done_marker") is True,
    "finish-reason-object": lambda row: row.finish_reason == "{'type': 'length', 'matched': None}",
    "surrogate-text": lambda row: "\ufffd" in row.output_text and json.loads(row.engine_stats).get("invalid_text"),
    "byte-drip": lambda row: json.loads(row.engine_stats)["http_chunks"] == OUTPUT_LEN,
}


def test_every_fault_has_a_case():
    assert set(ERRORS) | set(COUNTED) == set(FAULTS)


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.slow
def test_a_misbehaving_server_never_loses_the_run(tmp_path, fault):
    cfg = make_config(
        *REF,
        *FAST,
        f"backend.error_kind={fault}",
        "backend.error_rate=0.5",
        "backend.seed=4",
        "backend.idle_timeout_s=1",
        "backend.request_timeout_s=60",
        "backend.max_event_mib=1",
        "backend.fault_size_mib=4",
        f"workload.num_requests={N_REQUESTS}",
        "workload.concurrency=4",
        f"workload.output_len={OUTPUT_LEN}",
        "workload.warmup_requests=0",
        "report=true",
    )
    outcome = run_benchmark(cfg, tmp_path)
    for name in ("summary.json", "requests.parquet", "report.html", "config.yaml"):
        assert (tmp_path / name).is_file(), name
    df = load_requests(tmp_path)
    summary = load_summary(tmp_path)
    assert len(df) == N_REQUESTS and summary["status"] == "complete"
    assert summary["requests"]["failed"] == df.error.notna().sum() == outcome.summary.requests["failed"]
    ok = df[df.error.isna()]
    assert (ok.output_tokens >= 0).all() and (ok.prompt_tokens >= 0).all()
    for key, value in summary["throughput"].items():
        assert value is None or (math.isfinite(value) and value >= 0), key
    if fault in ERRORS:
        failed = df[df.error.notna()]
        assert 0 < len(failed) < N_REQUESTS, df.error.tolist()
        assert failed.error.str.contains(ERRORS[fault], regex=True).all(), failed.error.tolist()
        assert (ok.output_tokens == OUTPUT_LEN).all()
    else:
        assert df.error.isna().all(), df.error.tolist()
        assert (df.output_tokens == OUTPUT_LEN).all()
        assert sum(COUNTED[fault](row) for row in df.itertuples()) > 0


def _received(srv):
    no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with no_proxy.open(srv.url_root + "/reference/requests", timeout=10) as r:
        return json.loads(r.read())


def test_the_api_key_never_follows_a_redirect_to_another_origin(tmp_path, tiny_model, monkeypatch):
    """/v1/models and the completions answer 307 to the same server as localhost: another origin."""
    from transformers import AutoTokenizer

    env = {"REF_FAULT_KEY": "sk-fault-secret"}
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # loopback must not go through it
    with reference_server(
        tmp_path,
        "--ttft-ms",
        "1",
        "--itl-ms",
        "1",
        "--error-kind",
        "redirect",
        "--error-rate",
        "1",
        "--api-key-env",
        "REF_FAULT_KEY",
        env=env,
    ) as srv:
        base = srv.url_root + "/v1"
        with pytest.raises(HarnessError, match="refused the API key"):  # the redirected GET came without it
            check_server(base, "sk-fault-secret", "REF_FAULT_KEY")
        client = OpenAIClient(
            base, model_name="m", api_key="sk-fault-secret", tokenizer=AutoTokenizer.from_pretrained(tiny_model.hf_dir)
        )
        with pytest.raises(HTTPStatusError, match="HTTP 307"):  # a streaming POST follows no redirect
            run(collect(client.stream(chat_request(0, 4))))
        seen = _received(srv)
    assert [(r["method"], r["host"].split(":")[0], r["authorization"]) for r in seen] == [
        ("GET", "127.0.0.1", True),
        ("GET", "localhost", False),
        ("POST", "127.0.0.1", True),
    ]
    assert "sk-fault-secret" not in srv.log_path.read_text()


# --- signals ------------------------------------------------------------------------------


def _start_and_wait_for_rows(tmp_path, args, rows, preexec_fn=None):
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=preexec_fn or as_foreground_job,
    )
    deadline = time.time() + 120
    while time.time() < deadline:
        found = list(tmp_path.glob("*/requests.jsonl"))
        if found and found[0].read_text().count("\n") >= rows:
            return proc, found[0].parent
        time.sleep(0.1)
    proc.kill()
    pytest.fail("no request finished in time")


def _gone(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _as_background_job():
    """What a non-interactive shell does to `cmd &`: SIGINT ignored, inherited through exec."""
    as_foreground_job()
    signal.signal(signal.SIGINT, signal.SIG_IGN)


# the harness's own handlers, the same in both modes: SIGHUP and SIGTERM to a foreground job
# are the server-mode drill's (below); in-process, Ctrl-C, and SIGTERM to a background job
# (SIGINT ignored), the harder case
@pytest.mark.parametrize("sig,started", [(signal.SIGINT, "foreground"), (signal.SIGTERM, "background")])
@pytest.mark.engine
def test_in_process_run_keeps_what_was_measured(tmp_path, sig, started):
    """A background job of a script (CI steps, batch scripts) inherits SIGINT ignored: SIGTERM
    must still end the run and keep what it measured."""
    # llama.cpp in-process: an engine in the harness's own process that starts in about a second
    # (transformers' import alone is 5 s)
    args = [
        "backend=llamacpp",
        "backend.n_ctx=256",
        "workload=synthetic",
        "workload.num_requests=400",
        "workload.input_len=48",
        "workload.output_len=16",
        "progress=false",
        f"output_root={tmp_path}",
    ]
    proc, run_dir = _start_and_wait_for_rows(tmp_path, args, 3, _as_background_job if started == "background" else None)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    df = pd.read_parquet(run_dir / "requests.parquet")
    assert 3 <= len(df) < 400
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    assert summary["requests"]["completed"] == len(df[df.error.isna()])
    assert "interrupted" in err
    assert (run_dir / "report.html").exists()


def _ignores_sigint(pid: int) -> bool:
    with open(f"/proc/{pid}/status") as status:
        mask = next(line.split()[1] for line in status if line.startswith("SigIgn:"))
    return bool(int(mask, 16) & (1 << (signal.SIGINT - 1)))


def test_a_ctrl_c_while_the_harness_starts_is_not_lost(tmp_path):
    """A background job starts with SIGINT ignored; the harness takes it back before its imports,
    so a SIGINT during them ends the command at once (it was ignored until the config was checked,
    and a run went on to its end). The bad value shows where it stopped: the check never ran."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", *REF, *FAST, "workload.num_requests=abc", f"output_root={tmp_path}"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_as_background_job,
    )
    deadline = time.monotonic() + 60
    while proc.poll() is None and _ignores_sigint(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.002)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == ["interrupted before the run started: nothing was measured"]
    assert list(tmp_path.iterdir()) == []


# python -m harness, with a SIGINT sent the moment the event loop's runner sets its Ctrl-C handler
# (ours, or asyncio.Runner's), before the loop runs the requests
CTRL_C_AS_THE_LOOP_STARTS = """
import os, runpy, signal, sys
real = signal.signal
def set_then_press(signum, handler):
    previous = real(signum, handler)
    module = getattr(getattr(handler, "func", handler), "__module__", "")
    if signum == signal.SIGINT and module in ("harness.client.event_loops", "asyncio.runners"):
        signal.signal = real
        os.kill(os.getpid(), signal.SIGINT)
    return previous
signal.signal = set_then_press
sys.argv = ["harness", *sys.argv[1:]]
runpy.run_module("harness", run_name="__main__", alter_sys=True)
"""


@pytest.mark.slow
def test_a_ctrl_c_as_the_event_loop_starts_ends_the_run_as_interrupted(tmp_path):
    """asyncio.Runner forgot a Ctrl-C landing just after it set its handler: the run ended
    "failed", exit 1, with a CancelledError's traceback (harness/client/event_loops.py)."""
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            CTRL_C_AS_THE_LOOP_STARTS,
            *REF,
            *FAST,
            "workload.num_requests=4",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=as_foreground_job,
    )
    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr and f"interrupted: what was measured is in {run_dir}" in proc.stderr
    assert load_summary(run_dir)["status"] == "interrupted"


@pytest.mark.slow
def test_an_interrupted_timed_run_measures_its_stages_and_window_over_the_time_it_ran(tmp_path):
    """Stages and the steady-state window end where the run ended, not where the schedule would
    have: a stage's throughput over the schedule's 30 s read a third of the real rate."""
    args = [
        *REF,
        *FAST,
        "workload.stages=[{duration_s: 1, rate: 10}, {duration_s: 30, rate: 10}]",
        "workload.warmup_s=0.5",
        "workload.cooldown_s=1",
        f"output_root={tmp_path}",
    ]
    proc, run_dir = _start_and_wait_for_rows(tmp_path, args, 22)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    summary = load_summary(run_dir)
    ran = summary["duration_s"]
    assert summary["status"] == "interrupted" and 2 < ran < 20
    first, second = summary["stages"]
    assert first["end_s"] == 1 and "planned_end_s" not in first
    assert second["end_s"] == pytest.approx(ran) and second["planned_end_s"] == 31
    assert summary["window"]["end_s"] == pytest.approx(ran)
    for figures in (second, summary):  # 10 requests a second, over the time the run ran
        assert 5 < figures["throughput"]["requests_per_s"] < 15


@pytest.mark.slow
def test_an_interrupted_slo_search_gives_no_answer(tmp_path):
    """What the probes so far say is kept apart (best_so_far): a search stopped after its first
    probe passed must not read as the highest load that meets the SLO."""
    args = [
        *REF,
        "backend.itl_ms=10",
        *FAST,
        "workload.output_len=20",
        "workload.num_requests=10",  # a probe is 2 runs of 2 s; the next probe, stopped, would be as long
        "slo_search.enabled=true",
        "slo_search.over=concurrency",
        "slo_search.low=1",
        "slo.e2e_s=10",
        f"hydra.run.dir={tmp_path / 'search'}",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_foreground_job,
    )

    def probes_written() -> int:
        try:
            return len(json.loads((tmp_path / "search" / "sweep.json").read_text())["slo_search"]["probes"])
        except (OSError, ValueError, KeyError):
            return 0

    deadline = time.time() + 120
    while not probes_written() and time.time() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    sweep = json.loads((tmp_path / "search" / "sweep.json").read_text())
    search = sweep["slo_search"]
    assert not search["finished"] and sweep["slo_max_concurrency"] is None and search["slo_max_concurrency"] is None
    assert search["best_so_far"] == 1 and search["answer_text"].startswith("no answer: the search did not finish")


@pytest.mark.slow
def test_ctrl_c_while_the_engine_loads_says_nothing_was_measured(tmp_path):
    slow = "backend.server_command=['{python}','-m','refserver','--port','{port}','--startup-delay-s','60']"
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", *REF, *FAST, "workload.num_requests=4", slow, f"output_root={tmp_path}"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_foreground_job,
    )
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob("*/server.log")) and time.monotonic() < deadline:
        time.sleep(0.05)
    family = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    (run_dir,) = tmp_path.iterdir()
    assert (
        err.strip().splitlines()[-1]
        == f"interrupted before the run started: nothing was measured (the engine's log is kept in {run_dir})"
    )
    assert not list(run_dir.glob("requests.*")) and not (run_dir / "summary.json").exists()
    gone, alive = psutil.wait_procs(family, timeout=10)
    assert not alive, [p.cmdline() for p in alive]


@pytest.mark.slow
def test_a_sweep_stopped_by_sigterm_lists_the_interrupted_point_with_its_figures(tmp_path):
    sweep = tmp_path / "sweep"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness",
            "-m",
            *REF,
            "backend.itl_ms=20",
            *FAST,
            "workload.output_len=20",
            "workload.num_requests=100",
            "workload.concurrency=25,1",  # the first point done in 4 waves (2 s); the second would take 40 s
            f"hydra.sweep.dir={sweep}",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_foreground_job,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        rows = list(sweep.glob("1-*/requests.jsonl"))
        if rows and rows[0].read_text().count("\n") >= 2:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    points = json.loads((sweep / "sweep.json").read_text())["points"]
    assert [p["status"] for p in points] == ["complete", "interrupted"]
    interrupted = points[1]
    assert interrupted["run_dirs"] == [str(rows[0].parent)] and interrupted["figures"]
    assert interrupted["error"] == "interrupted (Ctrl-C, SIGTERM or SIGHUP)"


@pytest.mark.slow
def test_a_run_interrupted_while_nothing_is_in_flight_runs_to_the_interrupt(tmp_path):
    """Chats in their think time when Ctrl-C comes: T runs to the interrupt, not to the last
    request's end (which read a throughput many times the real one)."""
    args = [
        *REF,
        "model=tiny-random",
        "workload=chat",
        "workload.output_len=4",
        "workload.sessions=2",
        "workload.turns=3",
        "workload.concurrency=2",
        "workload.think_time_s=30",
        "workload.warmup_requests=0",
        "progress=false",
        f"output_root={tmp_path}",
    ]
    proc, run_dir = _start_and_wait_for_rows(tmp_path, args, 2)
    time.sleep(2.0)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    summary = load_summary(run_dir)
    last_end = pd.read_parquet(run_dir / "requests.parquet").end_s.max()
    assert summary["status"] == "interrupted" and summary["duration_s"] > last_end + 1.5
    assert summary["throughput"]["requests_per_s"] < 2 / (last_end + 1.5)


def _under_nohup():
    as_foreground_job()
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


@pytest.mark.slow
def test_a_run_under_nohup_outlives_a_hangup(tmp_path):
    """nohup starts the harness with SIGHUP ignored: a closed terminal must not end the run
    (SIGTERM still does)."""
    args = [
        *REF,
        "backend.itl_ms=20",
        *FAST,
        "workload.output_len=50",
        "workload.num_requests=200",
        f"output_root={tmp_path}",
    ]
    proc, run_dir = _start_and_wait_for_rows(tmp_path, args, 2, _under_nohup)
    proc.send_signal(signal.SIGHUP)
    time.sleep(2)
    assert proc.poll() is None, "a hangup ended a run started under nohup"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert load_summary(run_dir)["status"] == "interrupted"


@pytest.mark.parametrize(
    "sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 130), (signal.SIGHUP, 130), (signal.SIGKILL, -9)]
)
@pytest.mark.slow
def test_server_run_stops_its_server(tmp_path, sig, code):
    """SIGKILL runs no clean-up in the harness: the server's watchdog stops it."""
    args = [
        *REF,
        "backend.itl_ms=20",
        *FAST,
        "workload.output_len=50",
        "workload.num_requests=200",
        f"output_root={tmp_path}",
    ]
    proc, run_dir = _start_and_wait_for_rows(tmp_path, args, 2)
    children = psutil.Process(proc.pid).children(recursive=True)
    assert children, "the server should be a child of the harness"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    if sig == signal.SIGKILL:
        deadline = time.time() + 20  # the watchdog notices within 0.25 s; SIGTERM, then SIGKILL after the grace
        while time.time() < deadline and not all(_gone(c.pid) for c in children):
            time.sleep(0.1)
        assert [c.pid for c in children if not _gone(c.pid)] == [], "outlived the harness"
        assert load_requests(run_dir).shape[0] >= 2  # requests.jsonl, written row by row, survives
        return
    summary = load_summary(run_dir)
    assert summary["status"] == "interrupted"
    assert 2 <= summary["requests"]["sent"] < 200
    for child in children:
        assert _gone(child.pid)
    assert "stopped (exit code" in (run_dir / "server.log").read_text()


# --- an engine that dies, runs that collide ----------------------------------------------


@pytest.mark.slow
def test_a_server_that_dies_mid_run(tmp_path):
    proc = run_harness_cli(
        *REF,
        *FAST,
        "backend.exit_after=3",
        "workload.warmup_requests=0",
        "workload.num_requests=8",
        "workload.concurrency=1",
        f"output_root={tmp_path}",
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1
    assert (
        "the reference server exited with code 3" in lines[0] and "during the run; 5 of 8 requests failed" in lines[0]
    )
    run_dir = next(tmp_path.iterdir())
    assert str(run_dir) in lines[0]
    df = load_requests(run_dir)
    assert len(df) == 8 and df.error.isna().sum() == 3
    assert df[df.error.notna()].error.str.startswith("ServerExited: the reference server exited with code 3").all()
    summary = load_summary(run_dir)
    assert summary["status"] == "failed" and summary["requests"] == {"sent": 8, "completed": 3, "failed": 5}
    assert "exited with code 3" in summary["error"]


@pytest.mark.slow
def test_two_runs_started_together_do_not_share_a_folder(tmp_path):
    import yaml

    same = tmp_path / "same"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "harness",
                *REF,
                *FAST,
                "workload.num_requests=3",
                f"seed={seed}",
                f"hydra.run.dir={same}",
            ],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in (1, 2)
    ]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    assert sorted(code for code, _ in results) == [0, 2], results
    refused = next(err for code, err in results if code == 2).strip().splitlines()
    assert len(refused) == 1 and refused[0].endswith("give it another hydra.run.dir"), refused
    assert len(pd.read_parquet(same / "requests.parquet")) == 3  # one run's rows, not both
    # the folder's config and command line are those of the run that measured, written after its claim
    seed = yaml.safe_load((same / "config.yaml").read_text())["seed"]
    assert f"seed={seed}" in yaml.safe_load((same / "overrides.yaml").read_text())
    assert not (same / ".hydra").exists()
