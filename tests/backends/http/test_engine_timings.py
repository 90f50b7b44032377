"""The server's own per-request figures, reasoning and HTTP phases, parsed from the stream
(backends/http/engine_timings.py, backends/http/client.py), against the reference server's dialects."""

import asyncio

import pytest
from reference_fixtures import chat_request, collect, reference_server, run

from backends.http.client import OpenAIClient
from backends.http.engine_timings import LLAMA_SERVER_SOURCE, VLLM_SOURCE, EngineTimings


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model.hf_dir)


def client_for(server, tokenizer):
    return OpenAIClient(server.url_root + "/v1", model_name="reference", tokenizer=tokenizer)


def test_vllm_metrics_become_the_in_process_keys():
    timings = EngineTimings()
    timings.take(
        {
            "choices": [],
            "metrics": {
                "queue_time_ms": 5.0,
                "time_to_first_token_ms": 20.0,
                "generation_time_ms": 300.0,
                "mean_itl_ms": 10.0,
                "speculative_decoding": {
                    "mean_acceptance_length": 2.5,
                    "draft_acceptance_rate": 0.6,
                    "num_spec_steps": 4,
                    "num_draft_tokens": 10,
                    "num_accepted_draft_tokens": 6,
                },
            },
        }
    )
    s = timings.stats
    assert s["engine_timings_source"] == VLLM_SOURCE
    assert (s["vllm_queue_s"], s["vllm_prefill_s"], s["vllm_decode_s"]) == (0.005, 0.02, 0.3)
    assert s["queue_s"] == 0.005 and s["spec_mean_acceptance_length"] == 2.5 and s["spec_acceptance_rate"] == 0.6
    assert (s["spec_num_drafts"], s["spec_num_draft_tokens"], s["spec_num_accepted_tokens"]) == (4, 10, 6)


def test_llama_server_timings_and_lies():
    timings = EngineTimings()
    timings.take(
        {
            "timings": {
                "prompt_n": 12,
                "prompt_ms": 40.5,
                "cache_n": 4,
                "predicted_n": 8,
                "predicted_ms": -3,
                "draft_n": 10,
                "draft_n_accepted": 7,
            }
        }
    )
    s = timings.stats
    assert s["engine_timings_source"] == LLAMA_SERVER_SOURCE
    assert s["llama_server_prompt_ms"] == 40.5 and s["llama_server_cache_n"] == 4
    assert "llama_server_predicted_ms" not in s and s["engine_timings_invalid"] == 1  # a negative time is left out
    assert s["spec_acceptance_rate"] == pytest.approx(0.7)


def test_reasoning_vllm_metrics_and_http_phases_over_the_stream(tmp_path, tokenizer):
    with reference_server(
        tmp_path, "--ttft-ms", "20", "--itl-ms", "5", "--reasoning-tokens", "3", "--per-request-metrics"
    ) as srv:
        client = client_for(srv, tokenizer)

        async def two():
            first = await collect(client.stream(chat_request(0, 8), {"ignore_eos": True}))
            await asyncio.sleep(0.2)  # the body's end after [DONE] hands the connection back to the pool
            return [first, await collect(client.stream(chat_request(1, 8), {"ignore_eos": True}))]

        (chunks, done), (_, done2) = run(two())
    assert done.first_answer_chunk == 3 and done.reasoning_tokens == 3
    assert len(done.text.split()) == 5  # the answer: the reasoning is not in the reply text
    assert done.engine_stats["engine_timings_source"] == VLLM_SOURCE
    assert 0.015 < done.engine_stats["vllm_prefill_s"] < 0.5 and done.engine_stats["vllm_decode_s"] > 0.02
    phases = done.http_phases
    assert {"connect_start", "connect_end", "sent", "first_byte", "last_byte"} <= set(phases)
    assert phases["connect_start"] <= phases["connect_end"] <= phases["sent"] <= phases["first_byte"] <= chunks[0].t
    assert phases["last_byte"] >= chunks[-1].t
    assert "connect_start" not in done2.http_phases  # the second request reused the connection


def test_llama_server_dialect_timings_with_and_without_usage(tmp_path, tokenizer):
    with reference_server(
        tmp_path,
        "--ttft-ms",
        "10",
        "--itl-ms",
        "2",
        "--dialect",
        "llama-server",
        "--reasoning-tokens",
        "2",
        "--spec-draft-tokens",
        "4",
        "--spec-acceptance",
        "0.5",
    ) as srv:
        client = client_for(srv, tokenizer)
        _, done = run(collect(client.stream(chat_request(0, 6), {"ignore_eos": True})))
    s = done.engine_stats
    assert s["engine_timings_source"] == LLAMA_SERVER_SOURCE and s["llama_server_predicted_n"] == 6
    assert s["llama_server_prompt_ms"] > 5 and s["cached_tokens"] == 0
    assert s["spec_num_draft_tokens"] == 24 and s["spec_acceptance_rate"] == 0.5
    assert done.first_answer_chunk == 2 and done.reasoning_tokens == 2


def test_a_run_records_the_why_columns(tmp_path):
    """Open loop with a concurrency cap: requests wait in the client, and the latency from the
    scheduled time shows it; reasoning splits TTFT from the first answer token."""
    from conftest import make_config

    from harness.results.store import load_requests, load_summary
    from harness.run.point import run_benchmark

    cfg = make_config(
        "model=tiny-random",
        "backend=reference",
        "backend.ttft_ms=30",
        "backend.itl_ms=2",
        "backend.reasoning_tokens=4",
        "backend.per_request_metrics=true",
        "workload=synthetic",
        "workload.num_requests=12",
        "workload.rate=200",
        "workload.concurrency=2",
        "workload.warmup_requests=0",
        "workload.output_len=8",
        "workload.input_len=48",
    )
    run_benchmark(cfg, tmp_path / "run")
    df = load_requests(tmp_path / "run")
    ok = df[df.error.isna()]
    assert len(ok) == 12
    # the reasoning deltas come first; one read may bring them with the first answer token (one stamp)
    assert (ok.ttfo_s >= ok.ttft_s).all() and (ok.ttfo_s > ok.ttft_s).any() and (ok.reasoning_tokens == 4).all()
    assert (ok.ttst_s >= 0).all() and ok.client_wait_s.max() > 0.02  # the cap held due requests back
    assert (ok.ttft_from_scheduled_s - ok.ttft_s - ok.client_wait_s).abs().max() < 1e-9
    assert (ok.engine_timings_source == VLLM_SOURCE).all() and ok.queue_wait_s.notna().all()
    assert ok.http_first_byte_s.notna().all() and ok.http_reused.notna().all()
    summary = load_summary(tmp_path / "run")
    assert summary["latency"]["ttfo_s"]["count"] == 12
    assert "vllm_prefill_s" in summary["engine_stages"]
