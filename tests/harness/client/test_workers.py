"""The multi-process load generator (harness/client/workers.py) and open-loop pacing (harness/client/pacing.py),
against the reference server: the same requests and the exact concurrency with 1 or 3 worker
processes, the plan's schedule, chat history kept in one worker, and an ending that keeps
every record and leaves no worker behind."""

import asyncio
import json
import signal
import subprocess
import sys
import time

import pandas as pd
import psutil
import pytest
from conftest import as_foreground_job, make_config
from records import peak_in_flight

import workloads.base
from core.errors import ConfigError
from harness.client.pacing import pace_until
from harness.client.workers import WorkerPool, auto_workers, resolve_workers, slots
from harness.results.store import load_requests, load_summary
from harness.run.point import run_benchmark

REF = [
    "backend=reference",
    "backend.ttft_ms=5",
    "backend.itl_ms=5",
    "backend.count_prompt_tokens=false",
    "model=tiny-random",
    "report=false",
]
SYNTH = ["workload=synthetic", "workload.input_len=48", "workload.output_len=8", "workload.warmup_requests=0"]


# --- settings --------------------------------------------------------------------------------


def test_the_default_is_one_worker_up_to_32_streams_then_one_per_32_leaving_a_core():
    assert auto_workers(None) == 1 and auto_workers(32, cores=16) == 1
    assert auto_workers(33, cores=16) == 2 and auto_workers(128, cores=16) == 4
    assert auto_workers(128, cores=2) == 1  # a core stays free for the driver and a local server
    assert auto_workers(10_000, cores=64) == 8
    assert resolve_workers(None, forkable=False, concurrency=512) == 1  # in-process engines: one process


def test_slots_split_the_cap_exactly():
    assert slots(7, 3) == [3, 2, 2] and sum(slots(128, 5)) == 128


@pytest.mark.parametrize(
    "override,message",
    [
        ("client.workers=0", "client.workers must be >= 1"),
        ("client.event_loop=trio", "client.event_loop must be asyncio or uvloop"),
        ("client.pacing=busy", "client.pacing must be spin or sleep"),
    ],
)
def test_bad_client_settings_are_one_line(override, message):
    with pytest.raises(ConfigError, match=message) as info:
        make_config(*REF, *SYNTH, override)
    assert "\n" not in str(info.value)


def test_workers_need_an_http_backend():
    with pytest.raises(ConfigError, match="client.workers=2 needs an HTTP backend"):
        make_config("backend=transformers", "model=tiny-random", "client.workers=2")


def test_uvloop_missing_is_one_line(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "uvloop" else real(name, *a))
    with pytest.raises(ConfigError, match=r"needs uvloop, which is not installed: pip install -e '.\[client\]'"):
        make_config(*REF, *SYNTH, "client.event_loop=uvloop")


# --- pacing ----------------------------------------------------------------------------------


def test_pace_until_is_never_early():
    async def errors(spin):
        out = []
        base = time.perf_counter() + 0.01
        for i in range(40):
            due = base + i * 0.0023
            await pace_until(due, spin)
            out.append(time.perf_counter() - due)
        return out

    for spin in (True, False):
        errs = asyncio.run(errors(spin))
        assert min(errs) >= (0.0 if spin else -0.001)
        assert sorted(errs)[len(errs) // 2] < 0.05  # loose: the machine may be busy


# --- runs against the reference server ---------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 3])
def test_closed_loop_concurrency_is_exact_across_workers(tmp_path, workers):
    cfg = make_config(*REF, *SYNTH, "workload.num_requests=30", "workload.concurrency=5", f"client.workers={workers}")
    run_benchmark(cfg, tmp_path)
    df = load_requests(tmp_path)
    summary = load_summary(tmp_path)
    assert len(df) == 30 and df.error.isna().all() and sorted(df.request_id) == list(range(30))
    assert peak_in_flight(df) == 5  # never more than the cap, and the cap is used
    assert summary["harness"]["workers"] == workers
    assert summary["harness"]["loop_lag_s"]["count"] > 0


def test_open_loop_follows_the_schedule_with_workers_and_uvloop(tmp_path):
    cfg = make_config(
        *REF,
        *SYNTH,
        "workload.num_requests=60",
        "workload.rate=100",
        "client.workers=2",
        "client.event_loop=uvloop",
        "saturation.enabled=false",
    )
    run_benchmark(cfg, tmp_path)
    df = load_requests(tmp_path)
    assert len(df) == 60 and df.error.isna().all() and df.scheduled_s.notna().all()
    late = df.start_s - df.scheduled_s
    assert late.min() >= 0  # pacing spins to the due time on the run's one clock: never early
    assert late.median() < 0.05  # loose: behaviour, not speed (a shared machine)
    assert load_summary(tmp_path)["harness"]["workers"] == 2


@pytest.mark.parametrize(
    "load",
    [
        ["workload.concurrency=4", "client.workers=1"],
        ["workload.concurrency=4", "client.workers=2"],
        ["workload.rate=200", "client.workers=1"],  # the saturation watch reads it too
        ["workload.rate=200", "client.workers=2", "saturation.enabled=false"],
    ],
    ids=["closed-1", "closed-2", "open-1", "open-2"],
)
def test_a_plan_kept_on_disk_runs_every_request_once(tmp_path, monkeypatch, load):
    monkeypatch.setattr(workloads.base, "SPILL_AT", 10)  # workloads/session_file.py beyond 10 sessions
    cfg = make_config(*REF, *SYNTH, "workload.num_requests=40", *load)
    run_benchmark(cfg, tmp_path)
    df = load_requests(tmp_path)
    assert len(df) == 40 and df.error.isna().all() and sorted(df.request_id) == list(range(40))
    assert sorted(df.session_id) == list(range(40))
    if load[0] == "workload.rate=200":
        assert (df.start_s >= df.scheduled_s).all()
    else:
        assert peak_in_flight(df) == 4


def test_chat_sessions_keep_their_history_in_one_worker(tmp_path):
    cfg = make_config(
        "backend=reference",
        "backend.ttft_ms=2",
        # each request ~0.12 s, each worker's two sessions ~0.7 s: the three overlap even when one
        # worker starts late on a busy machine (at 2 ms a token, ~0.1 s late was enough to miss)
        "backend.itl_ms=20",
        "model=tiny-random",
        "report=false",
        "workload=chat",
        "workload.sessions=6",
        "workload.turns=3",
        "workload.output_len=6",
        "workload.user_len=16",
        "workload.concurrency=3",
        "workload.warmup_requests=0",
        "client.workers=3",
    )
    run_benchmark(cfg, tmp_path)
    df = load_requests(tmp_path).sort_values(["session_id", "turn"])
    assert len(df) == 18 and df.error.isna().all()
    for _, turns in df.groupby("session_id"):
        rows = list(turns.itertuples())
        assert [r.turn for r in rows] == [0, 1, 2]
        for before, after in zip(rows, rows[1:]):
            assert after.start_s >= before.end_s  # one after the other
            # the server counted the reply of the turn before in this turn's prompt: the history
            assert after.prompt_tokens > before.prompt_tokens + before.output_tokens
    assert peak_in_flight(df) == 3


def _children(pid):
    return psutil.Process(pid).children(recursive=True)


def _gone(proc):
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.slow
def test_a_signal_keeps_every_record_and_leaves_no_worker(tmp_path, sig):
    args = [
        *REF,
        "backend.itl_ms=20",
        *SYNTH,
        "workload.output_len=30",
        "workload.num_requests=300",
        "workload.concurrency=6",
        "client.workers=3",
        "progress=false",
        f"output_root={tmp_path}",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_foreground_job,
    )
    deadline, run_dir = time.time() + 120, None
    while time.time() < deadline:
        found = list(tmp_path.glob("*/requests.jsonl"))
        if found and found[0].read_text().count("\n") >= 6:
            run_dir = found[0].parent
            break
        time.sleep(0.1)
    if run_dir is None:
        proc.kill()
        pytest.fail("no request finished in time")
    children = _children(proc.pid)
    assert len(children) >= 4, "the server and three client workers"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    summary = load_summary(run_dir)
    assert summary["status"] == "interrupted"
    lines = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    df = pd.read_parquet(run_dir / "requests.parquet")
    assert len(df) == len(lines) == summary["requests"]["sent"] and 6 <= len(df) < 300
    assert len(set(df.request_id)) == len(df)
    # the requests cut off in flight are kept too, marked; none was lost between the processes
    cancelled = df.error.fillna("").str.startswith("cancelled")
    assert cancelled.sum() <= 6 and (df.error.isna() | cancelled).all()
    time.sleep(0.5)
    assert [c.pid for c in children if not _gone(c)] == [], "outlived the harness"


def test_an_over_saturated_open_loop_stops_every_worker():
    """The driver's process watches the backlog and the TTFTs the workers report; on
    over-saturation every worker cancels what it has in flight, and those records say why."""
    from test_saturation import FAST, NoRenderer, OneAtATime, open_loop_plan

    from harness.client.driver import SATURATED_ERROR, Driver
    from harness.client.saturation import SaturationDetector

    plan = open_loop_plan(200.0, 2000)  # 200 sessions/s against ~20/s per worker
    records = []
    backend = OneAtATime()
    driver = Driver(backend, NoRenderer(), plan, on_record=records.append, saturation=SaturationDetector(FAST))
    pool = WorkerPool(driver, backend, workers=2)
    t = time.perf_counter()
    duration = asyncio.run(pool.run(plan.sessions, True))
    assert driver.saturated and driver.saturated.startswith("over-saturated")
    assert duration < 4.0 and time.perf_counter() - t < 15.0
    assert len(pool.worker_loads) == 2
    cancelled = [r for r in records if not r.ok]
    assert cancelled and all(r.error == SATURATED_ERROR for r in cancelled)
    assert sum(r.ok for r in records) >= 10 and len({r.request_id for r in records}) == len(records)
