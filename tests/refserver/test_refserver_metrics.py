"""The reference server's /metrics: gauges that move with the load, speculative-decoding counters,
and the fault that drips /metrics one byte at a time."""

import threading
import time

import pytest
from reference_fixtures import chat_over_http, reference_server

from backends.http.probe import http_get_text
from harness.telemetry import prometheus


def _gauges(url: str) -> dict[str, float]:
    status, text = http_get_text(f"{url}/metrics", 5.0)
    assert status == 200
    return {
        name: sum(s.value for s in f.samples)
        for name, f in prometheus.parse(text).items()
        if f.type in ("gauge", "counter")
    }


def test_running_waiting_and_kv_use_move_with_the_load(tmp_path):
    with reference_server(
        tmp_path,
        "--metrics",
        "--ttft-ms",
        "300",
        "--itl-ms",
        "10",
        "--tokens",
        "20",
        "--max-running",
        "2",
        "--kv-capacity-tokens",
        "100",
    ) as server:
        url = server.url_root
        idle = _gauges(url)
        assert (
            idle["vllm:num_requests_running"]
            == idle["vllm:num_requests_waiting"]
            == idle["vllm:kv_cache_usage_perc"]
            == 0
        )
        threads = [threading.Thread(target=chat_over_http, args=(url, 10)) for _ in range(5)]
        for t in threads:
            t.start()
        time.sleep(0.15)
        busy = _gauges(url)
        for t in threads:
            t.join()
        after = _gauges(url)
    assert busy["vllm:num_requests_running"] == 2  # --max-running 2: the other three wait
    assert busy["vllm:num_requests_waiting"] == 3
    assert busy["vllm:kv_cache_usage_perc"] == pytest.approx(2 * 10 / 100)  # two replies of 10 tokens reserved
    assert (
        after["vllm:num_requests_running"]
        == after["vllm:num_requests_waiting"]
        == after["vllm:kv_cache_usage_perc"]
        == 0
    )


def test_sglang_dialect_names_its_gauges_as_sglang_does(tmp_path):
    with reference_server(tmp_path, "--metrics", "--dialect", "sglang") as server:
        names = set(_gauges(server.url_root))
    assert {"sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage"} <= names


def test_spec_counters_accept_the_share_asked_for(tmp_path):
    with reference_server(
        tmp_path, "--metrics", "--ttft-ms", "1", "--itl-ms", "1", "--spec-draft-tokens", "4", "--spec-acceptance", "0.5"
    ) as server:
        chat_over_http(server.url_root, 20)
        status, text = http_get_text(f"{server.url_root}/metrics", 5.0)
    spec = prometheus.speculative({}, prometheus.parse(text))
    assert spec["drafts"] == 20 and spec["draft_tokens"] == 80 and spec["accepted_tokens"] == 40
    assert spec["acceptance_rate"] == 0.5 and spec["mean_acceptance_length"] == 3.0
    assert spec["acceptance_per_position"] == [1.0, 1.0, 0.0, 0.0]  # two accepted each time, at the first positions


def test_a_dripping_metrics_is_given_up_at_the_deadline(tmp_path):
    with reference_server(tmp_path, "--metrics", "--metrics-drip-s", "0.2") as server:
        start = time.perf_counter()
        with pytest.raises(TimeoutError):
            http_get_text(f"{server.url_root}/metrics", 1.0)
        took = time.perf_counter() - start
        assert took < 3.0  # about the deadline (one read may wait 0.2 s more), never the drip's length
        assert server.poll() is None  # the server goes on after the reader hung up
        status, _ = http_get_text(f"{server.url_root}/health", 2.0)
        assert status == 200
