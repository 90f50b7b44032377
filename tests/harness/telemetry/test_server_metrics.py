"""The /metrics sampler and its deadline, against the real reference server."""

import threading
import time

import pytest
from reference_fixtures import chat_over_http, reference_server

from backends.http.probe import http_get_text
from harness.telemetry import server_metrics as sm


def _scrape(url):
    def scrape(deadline_s):
        status, text = http_get_text(url, deadline_s)
        if status != 200:
            raise OSError(f"HTTP {status}")
        return text

    return scrape


def test_the_sampler_follows_the_load(tmp_path):
    with reference_server(
        tmp_path,
        "--metrics",
        "--ttft-ms",
        "100",
        "--itl-ms",
        "10",
        "--tokens",
        "30",
        "--max-running",
        "2",
        "--kv-capacity-tokens",
        "100",
        "--spec-draft-tokens",
        "2",
        "--spec-acceptance",
        "0.5",
    ) as server:
        sampler = sm.ServerMetricsSampler(sm.DeadlineScrape(_scrape(server.url_root + "/metrics"), 2.0), 0.05)
        t0 = time.perf_counter()
        sampler.start()
        threads = [threading.Thread(target=chat_over_http, args=(server.url_root, 20)) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        time.sleep(0.1)
        sampler.stop()
    figures = sampler.figures()
    assert figures["scrapes"] >= 5 and figures["ok"] == figures["scrapes"] and figures["failed"] == figures["slow"] == 0
    assert figures["requests_running"]["metric"] == "vllm:num_requests_running"
    assert figures["requests_running"]["peak"] == 2
    assert figures["requests_waiting"]["peak"] >= 1  # six requests, two slots
    assert figures["kv_cache_usage"]["peak"] == pytest.approx(0.4)  # two replies of 20 tokens of 100
    assert 0 < figures["requests_running"]["mean"] < 2
    assert figures["spec_acceptance_rate"]["peak"] == pytest.approx(0.5, abs=0.05)
    df = sampler.frame(t0)
    assert list(df.columns) == list(sm.COLUMNS)
    assert (df["t_s"] >= 0).all() and df["t_s"].is_monotonic_increasing
    kinds = dict(zip(df["name"], df["kind"]))
    assert kinds["vllm:prompt_tokens"] == "counter" and kinds["vllm:num_requests_running"] == "gauge"
    assert kinds["requests_waiting"] == "neutral"
    per_pos = df[df["name"] == "vllm:spec_decode_num_accepted_tokens_per_pos"]["labels"]
    assert {"", "position=0", "position=1"} <= set(per_pos)


def test_sglangs_acceptance_gauges_are_the_neutral_series(tmp_path):
    """SGLang keeps gauges of the acceptance, not counters: they are sampled as they are."""
    with reference_server(
        tmp_path,
        "--dialect",
        "sglang",
        "--metrics",
        "--ttft-ms",
        "20",
        "--itl-ms",
        "5",
        "--tokens",
        "12",
        "--spec-draft-tokens",
        "2",
        "--spec-acceptance",
        "0.5",
    ) as server:
        sampler = sm.ServerMetricsSampler(sm.DeadlineScrape(_scrape(server.url_root + "/metrics"), 2.0), 0.05)
        sampler.record(sampler.scraper())  # before any request: the gauges are 0, nothing sampled
        assert not [r for r in sampler.rows if r[1] in (sm.SPEC_RATE, sm.SPEC_LENGTH)]
        chat_over_http(server.url_root, 10)
        sampler.record(sampler.scraper())
    figures = sampler.figures()
    assert figures["spec_acceptance_rate"]["metric"] == "sglang:spec_accept_rate"
    assert figures["spec_acceptance_rate"]["peak"] == pytest.approx(0.5, abs=0.05)
    assert figures["spec_acceptance_length"]["metric"] == "sglang:spec_accept_length"
    assert figures["spec_acceptance_length"]["peak"] == pytest.approx(2.0, abs=0.1)  # 1 + 0.5 × 2 draft tokens


@pytest.mark.slow
def test_a_dripping_metrics_never_holds_the_sampler(tmp_path):
    with reference_server(tmp_path, "--metrics", "--metrics-drip-s", "0.5") as server:
        scraper = sm.DeadlineScrape(_scrape(server.url_root + "/metrics"), 0.5)
        start = time.perf_counter()
        first = scraper()
        assert first.status == sm.SLOW and time.perf_counter() - start < 0.8  # the caller waits the deadline, no more
        sampler = sm.ServerMetricsSampler(scraper, 0.1).start()
        time.sleep(1.5)
        stop = time.perf_counter()
        sampler.stop()
        assert time.perf_counter() - stop < 1.2  # about one deadline
        scraper.wait_idle(3.0)
    figures = sampler.figures()
    assert figures["ok"] == 0 and figures["slow"] >= 1 and figures["scrapes"] == figures["slow"] + figures["skipped"]
    assert sampler.rows == []


def test_a_backend_without_metrics_stops_the_sampler():
    sampler = sm.ServerMetricsSampler(sm.DeadlineScrape(lambda deadline_s: None, 1.0), 0.05).start()
    sampler.stop()
    assert sampler.no_endpoint and sampler.figures()["absent"]


def test_time_weighted_mean():
    assert sm.time_weighted_mean([0.0, 1.0, 3.0], [0.0, 2.0, 2.0]) == pytest.approx((1.0 + 4.0) / 3)
    assert sm.time_weighted_mean([5.0], [0.7]) == 0.7
    assert sm.time_weighted_mean([], []) is None
