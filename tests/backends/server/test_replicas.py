"""Managed replicas (backend.replicas=N): N servers launched, routed over, all stopped; one that
dies is counted against its requests, not fatal unless all are gone; bad configs in one line."""

import os
import signal

import pandas as pd
import psutil
import pytest
from conftest import make_config
from reference_fixtures import chat_request, collect, run

from backends.factory import create_backend
from backends.http.router import EndpointError
from core.errors import ConfigError
from harness.reports.compare.page import endpoints_rows
from harness.reports.compare.runs import Run
from harness.reports.run_report import build_report
from harness.results.store import load_requests, load_run, load_summary
from harness.run.point import run_benchmark

FAST = [
    "backend=reference",
    "backend.ttft_ms=2",
    "backend.itl_ms=1",
    "model=tiny-random",
    "workload=synthetic",
    "workload.input_len=48",
    "workload.output_len=4",
    "progress=false",
]


def gone(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_two_replicas_run_route_and_stop(tmp_path):
    cfg = make_config(
        *FAST,
        "backend.replicas=2",
        "backend.routing=least_outstanding",
        "workload.num_requests=8",
        "workload.concurrency=4",
        "backend.replica_env=[{HARNESS_REPLICA: a},{HARNESS_REPLICA: b}]",
        f"backend.replica_cpus=[[{min(os.sched_getaffinity(0))}],[{max(os.sched_getaffinity(0))}]]",
    )
    run_benchmark(cfg, tmp_path)
    summary = load_summary(tmp_path)
    assert summary["status"] == "complete" and summary["requests"]["completed"] == 8
    replicas = summary["backend"]["info"]["replicas"]
    assert len(replicas) == 2 and replicas[0]["url"] != replicas[1]["url"]
    assert all(gone(r["pid"]) for r in replicas)  # both servers and their groups are gone
    assert "stopped (exit code 0)" in (tmp_path / "server.log").read_text()
    assert "stopped (exit code 0)" in (tmp_path / "server-1.log").read_text()
    eps = summary["endpoints"]
    assert set(eps) == {"0", "1"} and sum(e["requests"] for e in eps.values()) == 8
    assert eps["0"]["url"].endswith("/v1") and all(e["failed"] == 0 and e["completed"] > 0 for e in eps.values())
    assert sorted(load_requests(tmp_path).endpoint.unique()) == [0, 1]
    page, _ = build_report(load_run(tmp_path))
    assert "Per endpoint" in page and eps["1"]["url"] in page
    rows = endpoints_rows([Run(load_run(tmp_path), None, label="two")])
    assert [r["endpoint"] for r in rows] == ["0", "1"] and rows[1]["url"] == eps["1"]["url"]
    # every replica's /metrics, each sample labelled with its replica; the gauges per replica and whole
    after = (tmp_path / "metrics_after.txt").read_text()
    assert 'vllm:num_requests_running{endpoint="0"' in after and 'vllm:num_requests_running{endpoint="1"' in after
    series = pd.read_parquet(tmp_path / "server_metrics.parquet")
    kv = series[series.name == "vllm:kv_cache_usage_perc"]
    assert set(kv.labels) == {"", "endpoint=0", "endpoint=1"}
    sampled = summary["server_metrics"]["sampled"]
    assert set(sampled["kv_cache_usage"]["endpoints"]) == {"0", "1"}
    whole = series[(series.name == "kv_cache_usage") & (series.kind == "neutral")]
    assert (whole.value <= 1.0).all()  # a share of capacity: the replicas' mean, never their sum
    page, _ = build_report(load_run(tmp_path))
    assert "endpoint 1: peak" in page


def test_a_replica_that_dies_fails_its_requests_and_all_dead_is_fatal(tmp_path, tiny_model):
    cfg = make_config(*FAST, "backend.replicas=2").backend
    backend = create_backend(cfg, tiny_model)
    backend.run_dir = tmp_path
    backend.begin_load()
    pids = [s.pid for s in backend.servers]
    try:
        backend.load()
        os.killpg(pids[1], signal.SIGKILL)
        backend.servers[1].proc.wait(10)

        async def send(n):
            out = []
            for i in range(n):
                try:
                    _, done = await collect(backend.stream(chat_request(i, 3)))
                    out.append(done.engine_stats["endpoint"])
                except EndpointError as exc:
                    out.append(str(exc))
            return out

        got = run(send(4))
        assert got == [0, 0, 0, 0]  # the dead replica is left out
        assert backend.fatal_error() is None
        os.killpg(pids[0], signal.SIGKILL)
        backend.servers[0].proc.wait(10)
        assert "all 2 replicas" in backend.fatal_error()
        assert "exited with code" in run(send(1))[0]
    finally:
        backend.close()
    assert all(gone(p) for p in pids)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["backend=openai", "backend.urls=[]"], "at least one"),
        (["backend=openai", "backend.urls=[http://a/v1,http://b/v1]", "backend.routing=random"], "backend.routing"),
        (["backend=reference", "backend.replicas=0"], "replicas must be >= 1"),
        (["backend=reference", "backend.replicas=1000"], "at most 64 .got 1000.; for more endpoints"),
        (["backend=openai", "backend.urls=[http://a/v1]", "backend.replicas=2"], "give backend.urls"),
        (["backend=reference", "backend.replicas=2", "backend.replica_gpus=[[0]]"], "one entry per replica"),
        (["backend=openai", "backend.url=http://127.0.0.1:99999/v1"], "backend.url has a bad port"),
        (["backend=openai", "backend.urls=[http://a/v1,http://b:x/v1]"], r"backend.urls\[1\] has a bad port"),
    ],
)
def test_bad_endpoint_configs_are_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message):
        make_config("model=tiny-random", *overrides)
