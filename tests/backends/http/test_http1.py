"""The streaming HTTP/1.1 client: framing, stamps, reuse and the ways a response can end, against
scripted servers (asyncio.start_server) that write exactly the bytes each case needs."""

import asyncio
import time

import pytest

from backends.http.http1 import HTTPPool, ProtocolError, ServerDisconnected


async def scripted(script):
    """A server on a free port: ``script(reader, writer)`` answers each connection."""
    server = await asyncio.start_server(script, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/x"


async def read_request(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    length = int([line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")][0].split(b":")[1])
    return head, await reader.readexactly(length)


async def body_of(response):
    pieces = []
    while (got := await response.read(5)) is not None:
        pieces.append(got)
    return pieces


def chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def run_case(case):
    async def main():
        pool = HTTPPool(asyncio.get_running_loop())
        try:
            return await case(pool)
        finally:
            pool.close()

    return asyncio.run(main())


@pytest.mark.parametrize("step", [1, 2, 3, 7, 1000])
def test_chunked_body_split_anywhere(step):
    wire = HEAD + chunked(b"data: one\n\n", b"data: two\n\n", b"x" * 300)

    async def case(pool):
        async def script(reader, writer):
            await read_request(reader)
            for i in range(0, len(wire), step):
                writer.write(wire[i : i + step])
                await writer.drain()
            await reader.read()  # keep the connection open

        server, url = await scripted(script)
        response = await pool.request("POST", url, {"Content-Type": "application/json"}, b"{}", timeout=5)
        assert response.status == 200 and response.headers["content-type"] == "text/event-stream"
        body = b"".join(p for _, p in await body_of(response))
        response.release(True)
        server.close()
        return body

    assert run_case(case) == b"data: one\n\ndata: two\n\n" + b"x" * 300


def test_each_piece_is_stamped_when_received():
    async def case(pool):
        async def script(reader, writer):
            await read_request(reader)
            writer.write(HEAD + b"5\r\nfirst\r\n")
            await writer.drain()
            await asyncio.sleep(0.2)
            writer.write(b"6\r\nsecond\r\n0\r\n\r\n")
            await writer.drain()
            await reader.read()

        server, url = await scripted(script)
        response = await pool.request("POST", url, {}, b"", timeout=5)
        await asyncio.sleep(0.4)  # both pieces arrive while nobody reads
        t_read = time.perf_counter()
        pieces = await body_of(response)
        server.close()
        return pieces, t_read

    ((t1, a), (t2, b)), t_read = run_case(case)
    assert (a, b) == (b"first", b"second")
    assert 0.15 < t2 - t1 < 0.3 and t_read - t2 > 0.05  # each stamped on receipt, not when it was read


def test_content_length_and_connection_end_framing_and_keep_alive_reuse():
    async def case(pool):
        connections = []

        async def script(reader, writer):
            connections.append(writer)
            _, body = await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
            _, body = await read_request(reader)  # the same connection, reused
            writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + body * 2)
            await writer.drain()
            writer.close()

        server, url = await scripted(script)
        first = await pool.request("POST", url, {}, b"hello", timeout=5)
        one = b"".join(p for _, p in await body_of(first))
        second = await pool.request("POST", url, {}, b"again", timeout=5)
        two = b"".join(p for _, p in await body_of(second))
        server.close()
        return one, two, len(connections)

    assert run_case(case) == (b"hello", b"againagain", 1)


def test_interim_responses_are_skipped():
    async def case(pool):
        async def script(reader, writer):
            await read_request(reader)
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
            await reader.read()

        server, url = await scripted(script)
        response = await pool.request("POST", url, {}, b"", timeout=5)
        body = b"".join(p for _, p in await body_of(response))
        server.close()
        return response.status, body

    assert run_case(case) == (201, b"ok")


@pytest.mark.parametrize(
    "wire, error, match",
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", ProtocolError, "not an HTTP/1.x status line"),
        (b"HTTP/1.1 200 OK\r\n" + b"X-Big: " + b"y" * 70_000, ProtocolError, "a response head over 64 KiB"),
        (HEAD + b"zz\r\n", ProtocolError, "a bad chunk size"),
        (HEAD + b"5\r\nabc", ServerDisconnected, "in the middle of its response"),
        (b"", ServerDisconnected, "before its response"),
    ],
)
def test_a_broken_response_raises_one_clear_error(wire, error, match):
    async def case(pool):
        async def script(reader, writer):
            await read_request(reader)
            writer.write(wire)
            await writer.drain()
            writer.close()

        server, url = await scripted(script)
        try:
            response = await pool.request("POST", url, {}, b"", timeout=5)
            await body_of(response)
        finally:
            server.close()

    with pytest.raises(error, match=match):
        run_case(case)


def test_a_kept_connection_closed_while_idle_is_replaced():
    async def case(pool):
        count = []

        async def script(reader, writer):
            count.append(1)
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.close()  # keep-alive was promised, then the server closes the idle connection

        server, url = await scripted(script)
        for _ in range(3):
            response = await pool.request("POST", url, {}, b"", timeout=5)
            assert b"".join(p for _, p in await body_of(response)) == b"ok"
            await asyncio.sleep(0.1)
        server.close()
        return len(count)

    assert run_case(case) == 3


def test_a_silent_server_times_out_and_a_released_response_closes_its_connection():
    async def case(pool):
        closed = asyncio.Event()

        async def script(reader, writer):
            await read_request(reader)
            writer.write(HEAD + b"5\r\nfirst\r\n")
            await writer.drain()
            await reader.read()  # until the client goes
            closed.set()

        server, url = await scripted(script)
        response = await pool.request("POST", url, {}, b"", timeout=5)
        assert (await response.read(1))[1] == b"first"
        with pytest.raises(TimeoutError):
            await response.read(0.2)
        response.release(False)  # not done with it: the server must see the client leave
        await asyncio.wait_for(closed.wait(), 5)
        server.close()
        return True

    assert run_case(case)


def test_a_slow_reader_pauses_the_socket():
    from backends.http import http1

    async def case(pool):
        async def script(reader, writer):
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (24 * 2**20))
            for _ in range(24):
                writer.write(b"z" * 2**20)
                await writer.drain()

        server, url = await scripted(script)
        response = await pool.request("POST", url, {}, b"", timeout=5)
        await asyncio.sleep(1.0)
        held = response._buffered
        total = 0
        while (got := await response.read(5)) is not None:
            total += len(got[1])
        server.close()
        return held, total

    held, total = run_case(case)
    assert held <= http1.PAUSE_ABOVE_BYTES + 2 * 2**20  # the limit, and what one recv brought past it
    assert total == 24 * 2**20  # and reading resumed
