"""refserver/http11.py: the reference server's HTTP/1.1 layer."""

from __future__ import annotations

import asyncio
import sys
import time
import urllib.request

import pytest

from refserver.http11 import Request, Response, StreamResponse, json_response, start_server


async def _serve(handler):
    server, port = await start_server(handler, "127.0.0.1", 0)
    return server, port


async def _exchange(port: int, data: bytes, until: bytes, timeout: float = 5.0) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    got = b""
    while until not in got:
        piece = await asyncio.wait_for(reader.read(65536), timeout)
        if not piece:
            break
        got += piece
    writer.close()
    return got


def _answer(handler, request_bytes: bytes, until: bytes) -> bytes:
    """What a server with ``handler`` sends back for ``request_bytes`` (read until ``until`` or the close)."""

    async def main():
        server, port = await _serve(handler)
        got = await _exchange(port, request_bytes, until)
        server.close()
        return got

    return asyncio.run(main())


def _arrival_against_send(send) -> float:
    """Serve one request that ``send(writer)`` writes (returning its send time): arrival − send."""
    seen: list[float] = []

    async def handler(request: Request):
        seen.append(request.arrival)
        return json_response({"ok": True})

    async def main():
        server, port = await _serve(handler)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        sent = await send(writer)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        writer.close()
        server.close()
        assert head.startswith(b"HTTP/1.1 200 OK")
        return sent

    sent = asyncio.run(main())
    return seen[0] - sent


def test_arrival_is_when_the_first_bytes_were_read_not_when_the_handler_ran():
    async def head_then_body(writer) -> float:
        sent = time.perf_counter()
        writer.write(b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\n")  # the head alone,
        await asyncio.sleep(0.2)  # as httpx sends it; the body comes 200 ms later
        writer.write(b"{  }")
        return sent

    assert 0 <= _arrival_against_send(head_then_body) < 0.1  # the head's read, not the body's


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the kernel's receive stamps (SO_TIMESTAMPNS) are Linux's"
)
def test_arrival_is_the_kernels_receive_time_even_when_the_server_was_busy():
    async def then_block(writer) -> float:
        writer.write(b"GET /x HTTP/1.1\r\nHost: h\r\n\r\n")  # into the kernel at once
        sent = time.perf_counter()
        time.sleep(0.2)  # the server shares this loop: it cannot read for 200 ms
        return sent

    lag = _arrival_against_send(then_block)
    assert abs(lag) < 0.1, lag  # not 200 ms later, when the server read it


def test_keep_alive_and_pipelined_requests_are_answered_in_order():
    async def handler(request: Request):
        if request.path == "/slow":
            await asyncio.sleep(0.05)
        return Response(text=request.path)

    got = _answer(handler, b"GET /slow HTTP/1.1\r\nHost: h\r\n\r\nGET /fast HTTP/1.1\r\nHost: h\r\n\r\n", b"/fast")
    assert got.index(b"/slow") < got.index(b"/fast")
    assert got.count(b"HTTP/1.1 200 OK") == 2 and b"Content-Length: 5" in got


def test_a_streamed_reply_is_chunked_and_read_whole_by_a_standard_client():
    async def handler(request: Request):
        response = StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for k in range(3):
            await response.write(f"data: {k}\n\n".encode())
        await response.write_eof()
        return response

    async def main():
        server, port = await _serve(handler)
        loop = asyncio.get_running_loop()
        body = await loop.run_in_executor(
            None,
            lambda: urllib.request.urlopen(
                urllib.request.Request(f"http://127.0.0.1:{port}/s", data=b"{}"), timeout=5
            ).read(),
        )
        server.close()
        return body

    assert asyncio.run(main()) == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"


def test_an_http10_client_gets_a_streamed_reply_unchunked_and_ended_by_the_close():
    async def handler(request: Request):
        response = StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"data: 0\n\n")
        return response

    got = _answer(handler, b"GET /s HTTP/1.0\r\n\r\n", b"never: read to the close")
    assert got.endswith(b"\r\n\r\ndata: 0\n\n") and b"chunked" not in got and b"Connection: close" in got


@pytest.mark.parametrize(
    "request_bytes, status, words",
    [
        (b"NONSENSE\r\n\r\n", b"400", b"not an HTTP/1.x request line"),
        (b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", b"400", b"send a Content-Length"),
        (b"POST /x HTTP/1.1\r\nContent-Length: many\r\n\r\n", b"400", b"Content-Length is not a number"),
    ],
)
def test_a_malformed_request_gets_one_clear_error_and_the_connection_closes(request_bytes, status, words):
    async def handler(request: Request):
        return Response(text="should not run")

    got = _answer(handler, request_bytes, b"}")
    assert got.startswith(b"HTTP/1.1 " + status) and words in got and b"Connection: close" in got


def test_expect_continue_is_answered_before_the_body():
    async def handler(request: Request):
        return Response(body=request.body)

    async def main():
        server, port = await _serve(handler)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /x HTTP/1.1\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n")
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        writer.write(b"abc")
        final = await asyncio.wait_for(reader.readuntil(b"abc"), 5)
        writer.close()
        server.close()
        return interim, final

    interim, final = asyncio.run(main())
    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n" and final.startswith(b"HTTP/1.1 200 OK")


def test_a_closed_connection_cancels_its_handler():
    state: dict[str, asyncio.Event] = {}

    async def handler(request: Request):
        response = StreamResponse()
        await response.prepare(request)
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            state["cancelled"].set()
            raise
        return response

    async def main():
        state["cancelled"] = asyncio.Event()
        server, port = await _serve(handler)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /x HTTP/1.1\r\n\r\n")
        await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        writer.close()
        await asyncio.wait_for(state["cancelled"].wait(), 5)
        server.close()

    asyncio.run(main())


def test_a_handler_that_fails_before_its_reply_answers_500():
    async def handler(request: Request):
        raise RuntimeError("boom")

    got = _answer(handler, b"GET /x HTTP/1.1\r\n\r\n", b"}")
    assert got.startswith(b"HTTP/1.1 500") and b"RuntimeError: boom" in got
