"""The reference server: schedule, lengths, dialects, errors, keys, metrics, exit."""

import http.client
import json
import socket
import time
import urllib.error
import urllib.request

import pytest
from reference_fixtures import reference_server

from harness.telemetry import prometheus
from refserver.dialects import WORDS, word
from workloads.prompts import PromptRenderer

# what urllib raises for a connection that is refused, reset or cut mid-body (IncompleteRead)
DROPPED = (OSError, http.client.HTTPException)


def post(url, body, headers=None, timeout=30):
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def data_events(text):
    """The JSON payloads of a raw SSE body (the tests' own minimal reading)."""
    out = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        lines = [line[5:].lstrip() for line in block.split("\n") if line.startswith("data:")]
        if lines:
            out.append("\n".join(lines))
    return out


CHAT = {"messages": [{"role": "user", "content": "hi"}], "stream": True, "stream_options": {"include_usage": True}}


def test_words_are_single_tokens_for_smollm2(real_tokenizer):
    for w in WORDS:
        assert len(real_tokenizer(" " + w, add_special_tokens=False)["input_ids"]) == 1, w
    text = "".join(word(3, k) for k in range(300))
    assert len(real_tokenizer(text, add_special_tokens=False)["input_ids"]) == 300


def test_lengths_finish_reasons_and_usage(tmp_path):
    with reference_server(tmp_path, "--ttft-ms", "1", "--itl-ms", "1", "--tokens", "5") as srv:
        url = srv.url_root + "/v1/chat/completions"
        for body, n, reason in [
            ({}, 5, "stop"),  # natural length
            ({"max_tokens": 3}, 3, "length"),  # capped
            ({"max_tokens": 9, "ignore_eos": True}, 9, "length"),  # exact
            ({"max_tokens": 7, "min_tokens": 7}, 7, "length"),
        ]:
            status, text = post(url, {**CHAT, **body})
            events = [json.loads(e) for e in data_events(text) if e != "[DONE]"]
            content = "".join((c.get("delta") or {}).get("content") or "" for e in events for c in e["choices"])
            assert status == 200 and len(content.split()) == n
            assert [c["finish_reason"] for e in events for c in e["choices"] if c["finish_reason"]] == [reason]
            assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == n
            assert data_events(text)[-1] == "[DONE]"
        status, text = post(url, {"messages": [{"role": "user", "content": "a b"}], "max_tokens": 4})  # not streamed
        whole = json.loads(text)
        assert whole["usage"]["completion_tokens"] == 4 and len(whole["choices"][0]["message"]["content"].split()) == 4
        status, text = post(
            srv.url_root + "/v1/completions", {"prompt": [5, 6, 7], "max_tokens": 2, "ignore_eos": True}
        )
        assert status == 200 and json.loads(text)["usage"] == {
            "prompt_tokens": 3,
            "completion_tokens": 2,
            "total_tokens": 5,
        }


def test_dialects_stream_like_their_servers(tmp_path):
    with reference_server(tmp_path, "--ttft-ms", "1", "--itl-ms", "1", "--dialect", "openai") as srv:
        text = post(srv.url_root + "/v1/chat/completions", {**CHAT, "max_tokens": 2})[1]
        first, *_ = [json.loads(e) for e in data_events(text)[:-1]]
        assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}  # role chunk first
        assert ": " not in text.split("data:")[0]
    with reference_server(tmp_path, "--ttft-ms", "1", "--itl-ms", "1", "--dialect", "mlx") as srv:
        text = post(srv.url_root + "/v1/chat/completions", {**CHAT, "max_tokens": 2})[1]
        assert text.startswith(": keepalive")
        assert json.loads(data_events(text)[-2])["usage"]["completion_tokens"] == 2
        assert post(srv.url_root + "/v1/completions", {"prompt": [1, 2], "max_tokens": 1})[0] == 422
    with reference_server(
        tmp_path, "--ttft-ms", "1", "--itl-ms", "1", "--dialect", "llamacpp", health_path="/v1/models"
    ) as srv:
        assert get(srv.url_root + "/health")[0] == 404  # llama_cpp.server has none
        text = post(srv.url_root + "/v1/chat/completions", {**CHAT, "max_tokens": 2})[1]
        assert text.startswith(": ping")
        assert "usage" not in text  # even with include_usage
        assert json.loads(data_events(text)[0])["choices"][0]["delta"] == {"role": "assistant"}
    with reference_server(
        tmp_path, "--ttft-ms", "1", "--itl-ms", "1", "--dialect", "sglang", "--chunk-tokens", "2"
    ) as srv:
        text = post(srv.url_root + "/v1/chat/completions", {**CHAT, "max_tokens": 4, "ignore_eos": True})[1]
        events = [json.loads(e) for e in data_events(text)[:-1]]
        assert all("matched_stop" in c for e in events for c in e["choices"])
        assert all("reasoning_content" in c["delta"] for e in events for c in e["choices"])
        contents = [c["delta"]["content"] for e in events for c in e["choices"] if c["delta"].get("content")]
        assert [len(c.split()) for c in contents] == [2, 2]  # two tokens per chunk
        assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 4


def chunks(text):
    return [json.loads(e) for e in data_events(text) if e != "[DONE]"]


def test_the_server_only_engines_dialects(tmp_path, monkeypatch):
    """TGI, trtllm-serve, DeepSpeed-MII and Ollama, as their sources stream (see DIALECTS)."""
    monkeypatch.setenv("REF_KEY", "k")
    fast, key = ("--ttft-ms", "1", "--itl-ms", "1", "--tokens", "3"), {"Authorization": "Bearer k"}
    with reference_server(tmp_path, *fast, "--dialect", "tgi", "--api-key-env", "REF_KEY") as srv:
        text = post(srv.url_root + "/v1/chat/completions", {**CHAT, "max_tokens": 2}, key)[1]
        assert text.startswith(":\n\n")  # axum's keep-alive comment
        events = chunks(text)
        assert all(e["choices"][0]["delta"]["role"] == "assistant" for e in events[:-1])  # role in every delta
        assert events[-2]["choices"][0]["finish_reason"] == "length" and events[-2]["choices"][0]["delta"]["content"]
        assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 2
        text = post(srv.url_root + "/v1/completions", {"prompt": "a b", "max_tokens": 9, "stream": True}, key)[1]
        events = chunks(text)
        assert [e["choices"][0]["finish_reason"] for e in events] == ["", "", "eos_token"]  # ended by itself
        assert events[-1]["usage"]["completion_tokens"] == 3  # on the last chunk, not asked for
        status, body = post(srv.url_root + "/v1/chat/completions", CHAT)  # no key
        assert status == 401 and json.loads(body) == {"error": "invalid API key", "error_type": "authentication_error"}
    with reference_server(tmp_path, *fast, "--dialect", "tensorrt_llm") as srv:
        events = chunks(post(srv.url_root + "/v1/chat/completions", {**CHAT, "max_tokens": 2})[1])
        assert events[0]["choices"] == [{"index": 0, "delta": {"role": "assistant"}}]
        assert events[1]["choices"] == [
            {"index": 0, "delta": {"content": events[1]["choices"][0]["delta"]["content"], "reasoning_content": ""}}
        ]  # no null fields
        assert events[2]["choices"][0]["finish_reason"] == "length"
        assert events[3]["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
        status, text = post(srv.url_root + "/v1/completions", {"prompt": [1, 2], "max_tokens": 1, "stream": True})
        assert status == 200 and chunks(text)[0]["choices"][0]["stop_reason"] is None
        status, body = post(srv.url_root + "/v1/completions", {"max_tokens": 1})
        assert status == 400 and json.loads(body)["object"] == "error"
    with reference_server(tmp_path, *fast, "--dialect", "deepspeed_mii") as srv:
        text = post(srv.url_root + "/v1/chat/completions", {**CHAT, "max_tokens": 2})[1]
        assert "usage" not in text  # even with include_usage
        assert chunks(text)[0]["choices"][0]["delta"] == {"role": "assistant"}
        assert post(srv.url_root + "/v1/completions", {"prompt": [1, 2], "max_tokens": 1})[0] == 422
    with reference_server(tmp_path, *fast, "--dialect", "ollama", health_path="/api/version") as srv:
        assert get(srv.url_root + "/health")[0] == 404
        events = chunks(post(srv.url_root + "/v1/chat/completions", {**CHAT, "max_tokens": 2})[1])
        assert (
            events[0]["choices"][0]["delta"]["role"] == "assistant" and "role" not in events[1]["choices"][0]["delta"]
        )
        assert events[2]["choices"] == [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "length"}]
        assert events[3]["choices"] == [] and events[3]["usage"]["completion_tokens"] == 2
        events = chunks(post(srv.url_root + "/v1/completions", {**CHAT, "prompt": "a", "max_tokens": 2})[1])
        assert [e["usage"]["completion_tokens"] for e in events] == [0, 0, 2]  # zeroed, then the real one
        assert events[1]["choices"][0]["finish_reason"] == "length"


def test_schedule_is_kept_by_the_server(tmp_path):
    """The server's own lateness (write − due) stays small; loose for a busy CI machine."""
    with reference_server(tmp_path, "--ttft-ms", "20", "--itl-ms", "5", "--metrics") as srv:
        t0 = time.perf_counter()
        post(srv.url_root + "/v1/chat/completions", {**CHAT, "max_tokens": 40, "ignore_eos": True})
        elapsed = time.perf_counter() - t0
        fams = prometheus.parse(get(srv.url_root + "/metrics")[1])
    late = prometheus.histogram(fams["reference:token_lateness_seconds"])
    assert late.count == 40
    assert late.quantile(0.5) < 0.005 and late.sum / late.count < 0.01
    assert 0.020 + 39 * 0.005 <= elapsed < 0.020 + 39 * 0.005 + 0.5
    ttft = prometheus.histogram(fams["vllm:time_to_first_token_seconds"])
    assert ttft.count == 1 and 0.020 <= ttft.sum < 0.045


def test_prompt_tokens_counted_with_the_chat_template(tmp_path, real_model, real_tokenizer):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is the capital of France?"},
    ]
    expected = len(PromptRenderer(real_tokenizer).render(messages))
    # the same messages as OpenAI's content parts, as vllm bench serve and GuideLLM send them
    parts = [{**m, "content": [{"type": "text", "text": m["content"]}]} for m in messages]
    with reference_server(tmp_path, "--ttft-ms", "1", "--itl-ms", "1", "--tokenizer", str(real_model.hf_dir)) as srv:
        for sent in (messages, parts):
            text = post(srv.url_root + "/v1/chat/completions", {**CHAT, "messages": sent, "max_tokens": 1})[1]
            assert json.loads(data_events(text)[-2])["usage"]["prompt_tokens"] == expected


def test_the_schedule_is_told(tmp_path):
    """GET /reference/schedule: the truth a client's figures are checked against (python -m harness.crosscheck)."""
    with reference_server(tmp_path, "--ttft-ms", "40", "--itl-ms", "7", "--chunk-tokens", "2") as srv:
        status, text = get(srv.url_root + "/reference/schedule")
    schedule = json.loads(text)
    assert status == 200
    assert schedule["ttft_ms"] == 40 and schedule["itl_ms"] == 7 and schedule["chunk_tokens"] == 2
    assert schedule["dialect"] == "openai" and schedule["role_chunk"] == "empty"


def test_injected_errors_and_dropped_connections(tmp_path):
    with reference_server(tmp_path, "--ttft-ms", "1", "--itl-ms", "1", "--error-rate", "1") as srv:
        status, text = post(srv.url_root + "/v1/chat/completions", CHAT)
        assert status == 500 and "injected" in text
    with reference_server(
        tmp_path, "--ttft-ms", "1", "--itl-ms", "1", "--error-rate", "1", "--error-kind", "drop"
    ) as srv:
        with pytest.raises(DROPPED):  # the chunked body never completes
            post(srv.url_root + "/v1/chat/completions", {**CHAT, "max_tokens": 10, "ignore_eos": True})


def test_api_key_is_required_when_configured(tmp_path):
    env = {"REF_TEST_KEY": "s3cret-value"}
    with reference_server(tmp_path, "--api-key-env", "REF_TEST_KEY", env=env) as srv:
        assert get(srv.url_root + "/health")[0] == 200  # health needs no key
        assert post(srv.url_root + "/v1/chat/completions", CHAT)[0] == 401
        assert post(srv.url_root + "/v1/chat/completions", CHAT, {"Authorization": "Bearer wrong"})[0] == 401
        ok = post(
            srv.url_root + "/v1/chat/completions", {**CHAT, "max_tokens": 1}, {"Authorization": "Bearer s3cret-value"}
        )
        assert ok[0] == 200
    assert "s3cret-value" not in srv.log_path.read_text()


def test_exit_after_n_requests(tmp_path):
    with reference_server(tmp_path, "--ttft-ms", "1", "--itl-ms", "1", "--exit-after", "2") as srv:
        for _ in range(2):
            assert post(srv.url_root + "/v1/chat/completions", {**CHAT, "max_tokens": 1})[0] == 200
        with pytest.raises(DROPPED):  # the server has exited
            post(srv.url_root + "/v1/chat/completions", {**CHAT, "max_tokens": 1})
        deadline = time.time() + 10
        while srv.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        assert srv.poll() == 3
        assert "exiting at request 3" in srv.log_path.read_text()


@pytest.mark.slow
def test_startup_delay_keeps_health_at_503(tmp_path):
    with reference_server(tmp_path, "--startup-delay-s", "1.5") as srv:
        pass  # wait_healthy returned: health turned 200 after the delay
    text = srv.log_path.read_text()
    assert "listening on" in text


def test_port_in_use_fails_in_one_line(tmp_path):
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "harness.reference_server", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 1 and "address already in use" in proc.stderr.lower()


@pytest.mark.slow
def test_jitter_moves_tokens_around_an_absolute_schedule(tmp_path, tiny_model):
    """With jitter the gaps vary, but the deadlines do not drift: the last token still comes
    at ttft + (n − 1) · itl ± jitter after arrival."""
    import asyncio

    import numpy as np
    from reference_fixtures import chat_request, collect
    from transformers import AutoTokenizer

    from backends.http.client import OpenAIClient

    tokenizer = AutoTokenizer.from_pretrained(tiny_model.hf_dir)
    with reference_server(tmp_path, "--ttft-ms", "20", "--itl-ms", "5", "--jitter-ms", "2", "--seed", "1") as srv:
        client = OpenAIClient(srv.url_root + "/v1", model_name="r", tokenizer=tokenizer)
        chunks, _ = asyncio.run(collect(client.stream(chat_request(0, 60), {"ignore_eos": True})))
    t = np.array([c.t for c in chunks])
    gaps = np.diff(t)
    assert gaps.std() > 0.0005  # the jitter shows
    assert abs((t[-1] - t[0]) - 59 * 0.005) < 0.004 + 0.025  # ± 2 × jitter, + CI slack; no drift


def test_batch_itl_slows_a_request_by_the_requests_running():
    """--batch-itl-ms: a request's ITL grows with the requests already running when its
    schedule starts (a batched engine: more at once, each slower), the search's trade-off."""
    from refserver.app import ReferenceServer, Settings

    server = ReferenceServer(Settings(ttft_ms=20, itl_ms=5, batch_itl_ms=2))
    assert server._schedule(0.0, 3) == pytest.approx([0.020, 0.025, 0.030])
    server.metrics.running = 3
    assert server._schedule(0.0, 3) == pytest.approx([0.020, 0.031, 0.042])
