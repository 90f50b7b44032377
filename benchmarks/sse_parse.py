"""How fast a server-sent event stream parses: the client's parser (backends/http/sse.py) against
httpx-sse's decoders, the SSE library of the httpx world (``pip install httpx-sse``).

The stream is what an OpenAI-compatible server sends for ``--events`` tokens: one
``data: {chat.completion.chunk}`` event per token, a ``: keepalive`` comment every 50 events,
``[DONE]`` at the end. It is fed in reads of one event each (a server that flushes every token,
the common case) and in reads of 16 KiB (a client that fell behind). Each parser turns the reads
into the events' data; both must give the same list. Best of ``--repeats``, in µs of
CPU time per event (the process's own CPU time: a busy machine stretches wall time, not this).

- ours, ``SSEParser.feed_data`` (what the client calls) and ``SSEParser.feed`` (the general rules);
- httpx-sse: an incremental UTF-8 decoder, its ``SSELineDecoder`` (reads → lines) and its
  ``SSEDecoder`` (lines → events), as its ``EventSource.aiter_sse`` chains them.

    .venv/bin/python benchmarks/sse_parse.py [--events 20000] [--repeats 5] [--page docs/measurements/sse-parse.md]
"""

from __future__ import annotations

import argparse
import codecs
import importlib.metadata
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from measurement_page import add_page_option, recording

from backends.http.sse import SSEParser


def stream(events: int) -> bytes:
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    out = []
    for i in range(events):
        delta = {"content": f" tok{i % 97}"}
        chunk = {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]}
        out.append(b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n")
        if i % 50 == 49:
            out.append(b": keepalive\n\n")
    out.append(b"data: [DONE]\n\n")
    return b"".join(out)


def per_event(body: bytes) -> list[bytes]:
    return [part + b"\n\n" for part in body.split(b"\n\n") if part]


def per_block(body: bytes, size: int = 16 * 1024) -> list[bytes]:
    return [body[i : i + size] for i in range(0, len(body), size)]


def ours_fast(reads: list[bytes]) -> list[str]:
    parser, out = SSEParser(), []
    for read in reads:
        out += parser.feed_data(read)
    return out


def ours_general(reads: list[bytes]) -> list[str]:
    parser, out = SSEParser(), []
    for read in reads:
        out += [e.data for e in parser.feed(read)]
    return out


def httpx_sse(reads: list[bytes]) -> list[str]:
    from httpx_sse._decoders import SSEDecoder, SSELineDecoder

    text, lines, events, out = (
        codecs.getincrementaldecoder("utf-8")(errors="replace"),
        SSELineDecoder(),
        SSEDecoder(),
        [],
    )
    for read in reads:
        for line in lines.decode(text.decode(read)):
            event = events.decode(line)
            if event is not None:
                out.append(event.data)
    return out


def best(parse: Callable[[list[bytes]], list[str]], reads: list[bytes], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.process_time()
        parse(reads)
        times.append(time.process_time() - t)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    add_page_option(parser)
    args = parser.parse_args()
    with recording(args.page, __doc__):
        run(args)


def run(args: argparse.Namespace) -> None:
    body = stream(args.events)
    parsers = {"ours, feed_data": ours_fast, "ours, feed": ours_general}
    try:
        version = importlib.metadata.version("httpx-sse")
        parsers[f"httpx-sse {version}"] = httpx_sse
    except importlib.metadata.PackageNotFoundError:
        print("httpx-sse is not installed (pip install httpx-sse): ours only")
    print(
        f"{args.events} events, {len(body) / 2**20:.1f} MiB; {platform.machine()}, Python {platform.python_version()}"
    )
    print(f"{'parser':<20} {'reads':<14} {'CPU µs/ev':>9} {'same':>5}")
    for reads_name, reads in (("one per event", per_event(body)), ("16 KiB", per_block(body))):
        expected = ours_fast(reads)
        for name, parse in parsers.items():
            seconds = best(parse, reads, args.repeats)
            same = parse(reads) == expected
            print(f"{name:<20} {reads_name:<14} {seconds / len(expected) * 1e6:>9.2f} {same!s:>5}")


if __name__ == "__main__":
    main()
