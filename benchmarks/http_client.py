"""The client's HTTP/1.1 layer (backends/http/http1.py) against aiohttp and httpx, on the same streams.

A server process answers every chat completion at once with a prebuilt stream of ``--tokens``
one-token chunks (benchmarks/client_parse_rate.py's server), so the client is the bottleneck.
Each HTTP client runs ``--requests`` streaming POSTs at each number of concurrent streams, on one
event loop, and does with every read what the harness does: stamp it with ``time.perf_counter()``,
cut it into events (backends/http/sse.py, the same parser for all three) and parse each event's
JSON (orjson). Printed per client: streamed tokens per second of wall time, and the client
process's CPU time per streamed token (what a busy machine does not stretch); the server's CPU
is not counted. For ours, also the stamp delay a consumer-side stamp would add: how long after
``data_received`` stamped a read the stream's task got to it (p50 / p99). aiohttp and httpx
hand bytes over to the reading task, which can stamp them only then: this delay is in their
stamps.

- ours: ``HTTPPool.request`` and ``Response.read``, whose bytes are stamped in ``data_received``;
- aiohttp: ``ClientSession.post`` and ``content.iter_any()`` (what `vllm bench serve` uses);
- httpx: ``AsyncClient.stream`` and ``aiter_raw()`` (what the openai package uses).

    .venv/bin/python benchmarks/http_client.py [--streams 1 8 32] [--tokens 2048] [--requests 32] \
        [--page docs/measurements/http-client.md]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import platform
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's packages first
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # the benchmarks' helpers

from client_parse_rate import SERVER
from measurement_page import add_page_option, recording

from backends.http.http1 import HTTPPool
from backends.http.sse import SSEParser
from backends.server.launch import free_port

REPO = Path(__file__).resolve().parents[1]
BODY = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True})
HEADERS = {"Content-Type": "application/json"}


LAGS: list[float] = []  # ours: task's read − data_received's stamp, seconds


async def consume(reads: AsyncIterator[bytes]) -> int:
    """What the client does with a stream's reads: stamp, cut into events, parse; the tokens counted."""
    parser, tokens = SSEParser(), 0
    async for data in reads:
        time.perf_counter()  # the others' stamp (ours took it in data_received)
        for event in parser.feed_data(data):
            if event != "[DONE]":
                chunk = orjson.loads(event)
                tokens += bool(chunk["choices"] and chunk["choices"][0]["delta"].get("content"))
    return tokens


def ours(url: str) -> tuple[Callable[[], Awaitable[int]], Callable[[], Awaitable[None]]]:
    pool = HTTPPool(asyncio.get_running_loop())

    async def one() -> int:
        response = await pool.request("POST", url, HEADERS, BODY)

        async def reads() -> AsyncIterator[bytes]:
            while (got := await response.read()) is not None:
                LAGS.append(time.perf_counter() - got[0])
                yield got[1]

        try:
            return await consume(reads())
        finally:
            response.release(True)

    async def close() -> None:
        pool.close()

    return one, close


def aiohttp_client(url: str) -> tuple[Callable[[], Awaitable[int]], Callable[[], Awaitable[None]]]:
    import aiohttp

    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def one() -> int:
        async with session.post(url, data=BODY, headers=HEADERS) as response:
            return await consume(response.content.iter_any())

    return one, session.close


def httpx_client(url: str) -> tuple[Callable[[], Awaitable[int]], Callable[[], Awaitable[None]]]:
    import httpx

    client = httpx.AsyncClient(limits=httpx.Limits(max_connections=None), timeout=None)

    async def one() -> int:
        async with client.stream("POST", url, content=BODY, headers=HEADERS) as response:
            return await consume(response.aiter_raw())

    return one, client.aclose


async def measure(make, url: str, streams: int, requests: int) -> tuple[float, float]:
    """(tokens per wall second, client CPU µs per token)."""
    one, close = make(url)
    await asyncio.gather(*(one() for _ in range(streams)))  # open the connections first
    queue = list(range(requests))
    tokens = 0

    async def worker() -> None:
        nonlocal tokens
        while queue:
            queue.pop()
            tokens += await one()

    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker() for _ in range(streams)))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    await close()
    return tokens / wall, cpu / tokens * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--requests", type=int, default=32)
    add_page_option(parser)
    args = parser.parse_args()
    with recording(args.page, __doc__):
        run(args)


def run(args: argparse.Namespace) -> None:
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(args.tokens), str(port), str(REPO)])
    clients = {
        "ours (http1.py)": ours,
        f"aiohttp {importlib.metadata.version('aiohttp')}": aiohttp_client,
        f"httpx {importlib.metadata.version('httpx')}": httpx_client,
    }
    try:
        time.sleep(2)
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        print(
            f"{args.tokens} tokens a stream, {args.requests} streams a figure; {platform.machine()}, "
            f"Python {platform.python_version()}"
        )
        print(f"{'client':<18} {'streams':>7} {'tokens/s':>10} {'CPU µs/token':>13} {'stamp delay p50 / p99 µs':>25}")
        for streams in args.streams:
            for name, make in clients.items():
                LAGS.clear()
                rate, cpu = asyncio.run(measure(make, url, streams, args.requests))
                lag = f"{np.percentile(LAGS, 50) * 1e6:.0f} / {np.percentile(LAGS, 99) * 1e6:.0f}" if LAGS else ""
                print(f"{name:<18} {streams:>7} {rate:>10,.0f} {cpu:>13.2f} {lag:>25}")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
