"""The load generator across hosts (``client.cluster=ray``: harness/client/ray_pool.py) on a real
Ray cluster of two nodes on this machine, started and stopped here (one for the module), against
the reference server, whose schedule (TTFT, ITL) is the truth:

- a merged run is the same run as on one host: every request once, the concurrency exact, its
  TTFT error against the schedule the one-host run's within noise;
- a clock offset injected on one node (the test hook) is measured and corrected: that host's
  records reach the driver after they ended on the driver's clock, as the other host's do;
- one schedule paced from both hosts against one t0;
- a node lost mid-run (continue) and an actor lost (stop) lose nothing that was measured;
- SIGTERM ends every actor, keeping their records.

The cluster's second node carries the clock hook (its clock reads SHIFT_S more); health checks
are fast so a dead node is found in about a second and a half. A cluster that cannot be reached
is refused in seconds (no cluster needed for that: the first tests)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import numpy as np
import pandas as pd
import psutil
import pytest
from conftest import as_foreground_job, make_config
from records import peak_in_flight

from backends.server.launch import free_port
from core.errors import HarnessError
from harness.client.ray_actor import CLOCK_SHIFT_ENV
from harness.client.ray_connect import FAST_FAIL_ENV, ClusterUnreachable, connect
from harness.client.ray_pool import LOST
from harness.results.store import load_requests, load_summary
from harness.run.point import run_benchmark

SHIFT_S = 2.5
REF = [
    "backend=reference",
    "backend.ttft_ms=50",
    "backend.itl_ms=10",
    "backend.count_prompt_tokens=false",
    "model=tiny-random",
    "machine.enabled=false",
]
SYNTH = ["workload=synthetic", "workload.input_len=48", "workload.output_len=16", "workload.warmup_requests=0"]


# --- no cluster: refused in seconds, in one line ------------------------------------------------


def test_a_cluster_that_cannot_be_reached_is_refused_in_one_line_at_once(monkeypatch, tmp_path):
    pytest.importorskip("ray")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    for key, value in FAST_FAIL_ENV.items():  # set by connect(); the fixture's cluster starts without them
        monkeypatch.setenv(key, value)
    with pytest.raises(ClusterUnreachable, match="needs the cluster's address") as info:
        connect(None)
    assert "\n" not in str(info.value)
    import socket

    with socket.socket() as s:  # a port where nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t = time.perf_counter()
    with pytest.raises(ClusterUnreachable, match=f"no Ray cluster at 127.0.0.1:{port} .*refused") as info:
        connect(f"127.0.0.1:{port}")
    assert time.perf_counter() - t < 5 and "\n" not in str(info.value)
    with pytest.raises(ClusterUnreachable, match="is not a Ray cluster's HOST:PORT"):
        connect("somewhere")
    cfg = make_config(*REF, *SYNTH, "report=false", "client.cluster=ray", f"client.ray_address=127.0.0.1:{port}")
    with pytest.raises(ClusterUnreachable):  # before anything starts: no server, no run folder
        run_benchmark(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_cluster_settings_are_checked_in_one_line():
    for override, message in (
        ("client.cluster=k8s", "client.cluster must be local or ray"),
        ("client.on_host_loss=retry", "client.on_host_loss must be continue or stop"),
        ("client.clock_samples=5", "client.clock_samples must be >= 20"),
        ("client.hosts=0", "client.hosts must be >= 1"),
        ("client.host_timeout_s=0.5", "client.host_timeout_s must be >= 2 seconds"),
        ("client.ray_address=ray://head:10001", "Ray Client addresses"),
    ):
        with pytest.raises(HarnessError, match=message) as info:
            make_config(*REF, *SYNTH, "report=false", override)
        assert "\n" not in str(info.value)
    with pytest.raises(HarnessError, match="client.cluster=ray needs an HTTP backend"):
        make_config("backend=transformers", "model=tiny-random", "client.cluster=ray")


# --- a cluster of two nodes on this machine -------------------------------------------------------


@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    small = {"object_store_memory": 100 * 2**20}
    c = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 2,
            "include_dashboard": False,
            "dashboard_port": free_port(),  # its API server runs anyway: not on Ray's fixed 8265
            "_system_config": {"health_check_period_ms": 500, "health_check_failure_threshold": 3},
            **small,
        },
    )
    try:
        node_b = c.add_node(num_cpus=2, env_vars={CLOCK_SHIFT_ENV: str(SHIFT_S)}, **small)
        c.wait_for_nodes()
        state = SimpleNamespace(cluster=c, node_b=node_b)
        connect(c.address)  # the driver's connection is the module's (and the changes it makes to the process)
        yield state
    finally:
        ray.shutdown()
        c.shutdown()


def ray_config(cluster, *overrides, report=False):
    address = f"client.ray_address={cluster.cluster.address}"
    return make_config(*REF, *SYNTH, "client.cluster=ray", address, f"report={report}", *overrides)


@pytest.mark.slow
def test_a_merged_run_is_a_one_host_run_and_an_injected_offset_is_corrected(tmp_path, cluster):
    load = ["workload.num_requests=40", "workload.concurrency=4"]
    run_benchmark(make_config(*REF, *SYNTH, *load, "client.workers=1", "report=false"), tmp_path / "one")
    run_benchmark(ray_config(cluster, *load, report=True), tmp_path / "ray")
    one, merged = load_requests(tmp_path / "one"), load_requests(tmp_path / "ray")
    assert list(merged.columns) == list(one.columns)  # the same requests.parquet
    assert sorted(merged.request_id) == list(range(40)) and merged.error.isna().all()
    assert peak_in_flight(merged) == 4  # exact across the hosts: never more, and the cap used
    errors = {name: (df.ttft_s - 0.05) * 1e3 for name, df in (("one", one), ("ray", merged))}
    p50 = {name: float(np.median(e)) for name, e in errors.items()}
    assert abs(p50["ray"] - p50["one"]) < 5, p50  # ms, within a loaded machine's noise

    summary = load_summary(tmp_path / "ray")
    hosts = summary["hosts"]
    assert set(hosts) == {"0", "1"} and sum(h["requests"] for h in hosts.values()) == 40
    assert all(h["requests"] > 0 and h["loop_lag_s"]["count"] > 0 and h["cpu_cores"] > 0 for h in hosts.values())
    offsets = {k: h["clock"]["offset_s"] for k, h in hosts.items()}
    shifted = max(offsets, key=offsets.get)
    for key, h in hosts.items():  # the hook's shift measured, to within half a round trip (+ a little)
        expected = SHIFT_S if key == shifted else 0.0
        assert abs(h["clock"]["offset_s"] - expected) <= h["clock"]["uncertainty_s"] + 0.002, h["clock"]
        assert h["clock"]["offset_after_s"] is not None and not h["clock"]["drifted"]
        # corrected: every record reached the driver after it ended, on the driver's clock (uncorrected,
        # the shifted host's would arrive 2.5 s "before" they ended)
        assert h["delivery_s"]["min"] > -(h["clock"]["uncertainty_s"] + 0.002), h["delivery_s"]
    assert summary["harness"]["workers"] == 2 and not any("clock" in w for w in summary["warnings"])
    written = json.loads((tmp_path / "ray" / "hosts.json").read_text())
    assert len(written["workers"]) == 2 and all(len(w["clock_before"]["round_trips"]) == 32 for w in written["workers"])
    report = (tmp_path / "ray" / "report.html").read_text()
    assert "Per client host" in report and "clock offset ms" in report


@pytest.mark.slow
def test_one_open_loop_schedule_is_paced_from_both_hosts(tmp_path, cluster):
    run_benchmark(
        ray_config(cluster, "workload.num_requests=60", "workload.rate=30", "saturation.enabled=false"), tmp_path
    )
    df = load_requests(tmp_path)
    assert sorted(df.request_id) == list(range(60)) and df.error.isna().all()
    late = df.start_s - df.scheduled_s
    assert late.min() >= 0 and late.median() < 0.01  # on time from both hosts, one of them 2.5 s shifted
    hosts = load_summary(tmp_path)["hosts"]
    assert {h["requests"] for h in hosts.values()} == {30}  # dealt round-robin in arrival order


def _records_so_far(run_dir):
    path = run_dir / "requests.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line) for line in lines if line.strip()]


def _when(run_dir, n, then):
    """A thread that calls ``then(records)`` once ``n`` records are in requests.jsonl."""

    def watch():
        deadline = time.time() + 120
        while time.time() < deadline:
            records = _records_so_far(run_dir) if run_dir.exists() else []
            if len(records) >= n:
                then(records)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


@pytest.mark.slow
def test_an_actor_lost_with_on_host_loss_stop_fails_the_run_keeping_every_record(tmp_path, cluster):
    import ray

    seen = {}

    def kill_one(records):
        seen["records"] = records
        names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if "harness-client-" in a["name"]]
        ray.kill(ray.get_actor(sorted(names)[-1], namespace="llm-harness"), no_restart=True)

    load = ["workload.num_requests=60", "workload.concurrency=4", "backend.itl_ms=20", "workload.output_len=30"]
    watcher = _when(tmp_path, 8, kill_one)
    with pytest.raises(HarnessError, match="lost") as info:
        run_benchmark(ray_config(cluster, *load, "client.on_host_loss=stop"), tmp_path)
    watcher.join(5)
    assert "\n" not in str(info.value)
    summary, df = load_summary(tmp_path), load_requests(tmp_path)
    assert summary["status"] == "failed" and "lost" in summary["error"]
    assert df.request_id.is_unique and len(df) < 60
    kept = df.set_index("request_id")
    for r in seen["records"]:  # what was measured before the loss is all there, unchanged
        assert kept.loc[r["request_id"], "end_s"] == pytest.approx(r["end_s"])
    errors = df.error.dropna()
    assert errors.str.startswith(LOST).any()  # the lost actor's requests in flight
    # the other host's were cancelled when the run stopped, saying why
    assert (errors.str.startswith(LOST) | errors.str.startswith("cancelled: the run was stopped")).all()
    assert any("client.on_host_loss=stop" in w for w in summary["warnings"])


@pytest.mark.slow
def test_sigterm_ends_every_actor_and_keeps_their_records(tmp_path, cluster):
    args = [
        *REF,
        *SYNTH,
        "report=false",
        "backend.itl_ms=20",
        "workload.output_len=30",
        "workload.num_requests=200",
        "workload.concurrency=4",
        "client.cluster=ray",
        "progress=false",
        f"output_root={tmp_path}",
    ]
    env = {**__import__("os").environ, "RAY_ADDRESS": cluster.cluster.address}
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_foreground_job,
    )
    deadline, run_dir = time.time() + 180, None
    while time.time() < deadline and proc.poll() is None:
        found = list(tmp_path.glob("*/requests.jsonl"))
        if found and found[0].read_text().count("\n") >= 8:
            run_dir = found[0].parent
            break
        time.sleep(0.1)
    if run_dir is None:
        proc.kill()
        pytest.fail(f"no request finished in time: {proc.communicate()[1][-2000:]}")
    actors = [p for p in psutil.process_iter(["cmdline"]) if "ClientHost" in " ".join(p.info["cmdline"] or [])]
    assert len(actors) >= 2, "an actor on each host"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    summary = load_summary(run_dir)
    df = pd.read_parquet(run_dir / "requests.parquet")
    assert summary["status"] == "interrupted" and 8 <= len(df) < 200 and df.request_id.is_unique
    cancelled = df.error.fillna("").str.startswith("cancelled")
    assert (df.error.isna() | cancelled).all()  # cut off in flight: kept, marked; none lost
    deadline = time.time() + 30
    while time.time() < deadline and any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in actors):
        time.sleep(0.2)
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in actors), "an actor outlived the run"


@pytest.mark.slow
def test_a_node_lost_mid_run_loses_nothing_measured_and_the_run_goes_on(tmp_path, cluster):
    """The module's last test: it takes the cluster's second node away."""
    seen = {}

    def kill_node(records):
        seen["records"] = records
        seen["t"] = time.perf_counter()
        cluster.cluster.remove_node(cluster.node_b, allow_graceful=False)

    load = ["workload.num_requests=60", "workload.concurrency=4", "backend.itl_ms=10", "workload.output_len=30"]
    watcher = _when(tmp_path, 8, kill_node)
    run_benchmark(ray_config(cluster, *load, report=True), tmp_path)
    watcher.join(5)
    summary, df = load_summary(tmp_path), load_requests(tmp_path)
    assert summary["status"] == "complete"
    assert sorted(df.request_id) == list(range(60))  # every request once: none lost, none twice
    kept = df.set_index("request_id")
    for r in seen["records"]:  # what was measured before the loss is all there, unchanged
        assert kept.loc[r["request_id"], "end_s"] == pytest.approx(r["end_s"]) and r["error"] is None
    lost = df[df.error.fillna("").str.startswith(LOST)]
    assert 1 <= len(lost) <= 4 and df.error.isna().sum() == 60 - len(lost)  # its requests in flight, failed
    hosts = summary["hosts"]
    assert sum(1 for h in hosts.values() if h["lost"]) == 1
    assert sum(h["requests"] for h in hosts.values()) == 60
    assert any("was lost" in w for w in summary["warnings"])
    assert "lost: " in (tmp_path / "report.html").read_text()
