"""Helpers to run the reference server (refserver/app.py) inside tests."""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

from backends.base import GenerationRequest
from backends.server.launch import free_port
from backends.server.process import ManagedServer
from core.types import RequestDone, SamplingParams, TokenChunk
from workloads.prompts import PromptRenderer


@contextmanager
def reference_server(
    log_dir: Path, *args: str, env: Optional[dict[str, str]] = None, health_path: str = "/health"
) -> Iterator[ManagedServer]:
    """A reference server on a free port, healthy, stopped (with its process group) after."""
    port = free_port()
    argv = [sys.executable, "-m", "refserver", "--port", str(port), *args]
    server = ManagedServer(
        argv,
        port=port,
        log_path=Path(log_dir) / f"reference-{port}.log",
        env=env,
        health_path=health_path,
        name="reference",
        stop_grace_s=5,
    )
    server.start()
    try:
        server.wait_healthy(60)
        yield server
    finally:
        server.stop()


# the peers' result files in tests/fixtures/peers were made of this run: the reference server at
# 50 ms to the first token and 10 ms a token after, its model named "m"
PEER_SERVER_ARGS = ("--ttft-ms", "50", "--itl-ms", "10", "--model-name", "m")


def peer_run_overrides(server: ManagedServer) -> list[str]:
    """The harness's overrides for that run against ``server`` (started with PEER_SERVER_ARGS)."""
    return [
        "backend=openai",
        f"backend.url={server.url_root}/v1",
        "backend.model_name=m",
        "model=smollm2-135m",
        "workload=synthetic",
        "workload.num_requests=6",
        "workload.concurrency=2",
        "workload.output_len=8",
        "backend.ignore_eos=true",
        "report=false",
    ]


def chat_request(
    i: int, n: int, exact: bool = True, text: str = "hello there", prompt_ids: Optional[list[int]] = None
) -> GenerationRequest:
    return GenerationRequest(
        request_id=i,
        prompt_token_ids=prompt_ids or [1, 2, 3],
        max_new_tokens=n,
        exact_output_len=exact,
        sampling=SamplingParams(),
        messages=[{"role": "user", "content": text}],
    )


async def collect(stream) -> tuple[list[TokenChunk], Optional[RequestDone]]:
    chunks, done = [], None
    async for event in stream:
        if isinstance(event, TokenChunk):
            chunks.extend(event.split())  # one per server chunk
        else:
            done = event
    return chunks, done


def reply_ids(done: RequestDone, tokenizer: Any) -> list[int]:
    """The reply's ids as the run records them: the server's, or its text tokenized (as the
    run's writer does after the run, when the stream left them to count)."""
    if done.token_ids is not None:
        return list(done.token_ids)
    return PromptRenderer(tokenizer).encode_batch([done.token_ids_text])[0]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def chat_over_http(url: str, tokens: int) -> None:
    """One streamed chat request of exactly ``tokens`` tokens, read to its end (plain urllib)."""
    body = {
        "model": "reference",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": tokens,
        "ignore_eos": True,
        "stream": True,
    }
    req = urllib.request.Request(
        f"{url}/v1/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        r.read()
