"""Several endpoints in one run (backends/http/router.py): routing policies against two reference
servers, an endpoint that refuses or fails, the endpoint in each record and the summary's figures."""

import asyncio
from dataclasses import replace

import pytest
from reference_fixtures import chat_request, collect, reference_server, run

from backends.http.client import OpenAIClient
from backends.http.router import EndpointError, Router, endpoint_of_error
from backends.server.launch import free_port
from core.types import RequestDone
from harness.config import SLOConfig
from harness.results.record import RequestTiming, build_record
from harness.results.summary import summarize

FAST = ("--ttft-ms", "2", "--itl-ms", "1")


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model.hf_dir)


@pytest.fixture(scope="module")
def two_servers(tmp_path_factory):
    logs = tmp_path_factory.mktemp("router")
    with reference_server(logs, *FAST) as a, reference_server(logs, *FAST, "--ttft-ms", "150") as b:
        yield a, b


def router_for(urls, tokenizer, policy, **kwargs):
    clients = [OpenAIClient(u, model_name="reference", tokenizer=tokenizer) for u in urls]
    return Router(clients, policy, **kwargs)


def request(i, session=0, turn=0):
    return replace(chat_request(i, 3), session_id=session, turn=turn)


async def send_all(router, requests, concurrent=True):
    async def one(r):
        try:
            _, done = await collect(router.stream(r))
            return done.engine_stats["endpoint"]
        except EndpointError as exc:
            return exc

    if concurrent:
        return await asyncio.gather(*(one(r) for r in requests))
    return [await one(r) for r in requests]


@pytest.mark.slow
def test_round_robin_least_outstanding_and_session_affinity(two_servers, tokenizer):
    urls = [s.url_root + "/v1" for s in two_servers]
    rr = router_for(urls, tokenizer, "round_robin")
    assert run(send_all(rr, [request(i) for i in range(6)], concurrent=False)) == [0, 1, 0, 1, 0, 1]
    # endpoint 1 answers 150 ms late: while its request is in flight, endpoint 0 takes the others
    lo = router_for(urls, tokenizer, "least_outstanding")

    async def staggered():
        slow = asyncio.create_task(send_all(lo, [request(0), request(1)]))
        await asyncio.sleep(0.06)  # both in flight: endpoint 0's is done, endpoint 1's is not
        rest = await send_all(lo, [request(i) for i in range(2, 5)], concurrent=False)
        return await slow, rest

    first, rest = run(staggered())
    assert first == [0, 1] and rest == [0, 0, 0]
    assert lo.outstanding == [0, 0]
    # a session stays where its first turn went, whatever else is in flight
    sa = router_for(urls, tokenizer, "session_affinity")
    turns = [request(10 * s + t, session=s, turn=t) for t in range(3) for s in range(4)]
    got = run(send_all(sa, turns, concurrent=False))
    by_session = {}
    for r, endpoint in zip(turns, got):
        by_session.setdefault(r.session_id, set()).add(endpoint)
    assert all(len(v) == 1 for v in by_session.values())
    assert {next(iter(v)) for v in by_session.values()} == {0, 1}  # spread over both


def test_an_endpoint_that_refuses_or_fails_fails_only_its_requests(two_servers, tokenizer, tmp_path):
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    router = router_for([two_servers[0].url_root + "/v1", dead], tokenizer, "round_robin")
    got = run(send_all(router, [request(i) for i in range(5)], concurrent=False))
    assert got[0] == 0 and isinstance(got[1], EndpointError) and got[2:] == [0, 0, 0]  # left out once refused
    error = f"{type(got[1]).__name__}: {got[1]}"
    assert endpoint_of_error(error) == 1 and "ConnectionRefusedError" in error and dead in error
    # a server that answers 500 to every request, and one that exits at its second request
    with (
        reference_server(tmp_path, *FAST, "--error-rate", "1") as failing,
        reference_server(tmp_path, *FAST, "--exit-after", "1") as dying,
    ):
        router = router_for(
            [failing.url_root + "/v1", dying.url_root + "/v1"],
            tokenizer,
            "round_robin",
            exited=lambda i: "ServerExited: gone" if i == 1 and dying.poll() is not None else None,
        )
        got = run(send_all(router, [request(i) for i in range(6)], concurrent=False))
        assert [type(g) for g in got] == [
            EndpointError,
            int,
            EndpointError,
            EndpointError,
            EndpointError,
            EndpointError,
        ]
        assert "HTTP 500" in str(got[0]) and "ServerExited: gone" in str(got[3])
        assert got[1] == 1 and dying.poll() is not None
        assert all(g.endpoint == 0 for g in got[4:])  # the exited one is sent nothing more


def test_records_carry_the_endpoint_and_the_summary_splits_by_it():
    req = chat_request(0, 2)
    ok = build_record(
        req,
        RequestTiming(t0=0.0, send_t=0.0, end_t=0.2, chunks=[(0.1, 1), (0.2, 1)]),
        RequestDone("length", engine_stats={"endpoint": 1}),
    )
    failed = build_record(
        req,
        RequestTiming(t0=0.0, send_t=0.0, end_t=0.1),
        None,
        error="EndpointError: endpoint 0 (http://h:1/v1): HTTPStatusError: HTTP 500",
        error_stats=EndpointError(0, "http://h:1/v1", RuntimeError("HTTP 500")).engine_stats,
    )
    assert (ok.endpoint, failed.endpoint) == (1, 0)
    s = summarize([ok, failed], 1.0, SLOConfig(), endpoint_urls=["http://h:1/v1", "http://h:2/v1"])
    eps = s["endpoints"]
    assert eps["0"]["url"] == "http://h:1/v1" and (eps["0"]["requests"], eps["0"]["failed"]) == (1, 1)
    assert eps["1"]["completed"] == 1 and eps["1"]["latency"]["ttft_s"]["p50"] == pytest.approx(0.1)
    assert eps["1"]["throughput"]["requests_per_s"] == pytest.approx(1.0)
    assert "endpoints" not in summarize([ok], 1.0, SLOConfig())


def test_backend_openai_with_urls_routes_over_them(two_servers, tiny_model):
    from conftest import make_config

    from backends.factory import create_backend

    urls = [s.url_root + "/v1" for s in two_servers]
    cfg = make_config("model=tiny-random", "backend=openai", f"backend.urls=[{urls[0]},{urls[1]}]").backend
    backend = create_backend(cfg, tiny_model)
    backend.load()
    assert backend.engine_info()["endpoints"] == urls and backend.engine_info()["routing"] == "round_robin"
    got = run(send_all(backend.worker_client(), [request(i) for i in range(3)], concurrent=False))
    assert got == [0, 1, 0]
