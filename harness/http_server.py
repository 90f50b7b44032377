"""A small HTTP/1.1 server on an asyncio protocol, for the reference server.

The reference server is the harness's timing instrument: a request's schedule starts when its
first bytes were read, and its tokens must leave at their deadlines even with 128 streams on
a small machine. A general framework stamps a request when its handler starts, after its own
parsing and routing, and under a burst of requests that start lags the read by tens of
milliseconds. Here each request carries ``arrival``, the ``time.perf_counter()`` of the read
that brought its first bytes, and the per-request path is a few dictionary look-ups.

What it serves: requests with a Content-Length body (no chunked request bodies), keep-alive
and pipelining (one request at a time per connection, in order), ``Expect: 100-continue``,
replies with a Content-Length body, and streamed replies in chunked encoding with flow
control. A closed connection cancels the handler of its request.
"""
from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from http import HTTPStatus
from typing import Any, Awaitable, Callable, Optional, Union

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 256 * 2**20


class Headers(dict):
    """Request headers, looked up without regard to case."""

    def __getitem__(self, name: str) -> str:
        return super().__getitem__(name.lower())

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        return super().get(name.lower(), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and super().__contains__(name.lower())


class Request:
    def __init__(self, method: str, target: str, headers: Headers, body: bytes, arrival: float,
                 transport: asyncio.Transport, keep_alive: bool = True):
        self.method = method
        self.path_qs = target
        self.path = target.split("?", 1)[0]
        self.headers = headers
        self.body = body
        self.arrival = arrival  # perf_counter of the read that brought the request's first bytes
        self.transport = transport
        self.host = headers.get("host", "")
        self.keep_alive = keep_alive
        self._connection: Optional[_Connection] = None

    async def json(self) -> Any:
        """The body as JSON; ValueError when it is not."""
        return json.loads(self.body)


class Response:
    """A whole reply, written with a Content-Length."""

    def __init__(self, status: int = 200, body: Union[bytes, str] = b"", content_type: Optional[str] = None,
                 headers: Optional[dict[str, str]] = None, text: Optional[str] = None):
        self.status = status
        self.body = text if text is not None else body
        if isinstance(self.body, str):
            self.body = self.body.encode()
            content_type = (content_type or "text/plain") + "; charset=utf-8"
        self.headers = dict(headers or {})
        if content_type:
            self.headers["Content-Type"] = content_type


def json_response(data: Any, status: int = 200) -> Response:
    return Response(status, text=json.dumps(data), content_type="application/json")


class StreamResponse:
    """A reply streamed in chunked encoding: ``prepare``, ``write`` … ``write_eof``."""

    def __init__(self, status: int = 200, headers: Optional[dict[str, str]] = None):
        self.status = status
        self.headers = dict(headers or {})
        self._connection: Optional[_Connection] = None
        self.finished = False

    async def prepare(self, request: Request) -> None:
        connection = request._connection
        assert connection is not None
        self._connection = connection
        connection.reply_started = True
        headers = {**self.headers, "Transfer-Encoding": "chunked"}
        connection.write(_head(self.status, headers, connection.keep_alive))

    async def write(self, data: bytes) -> None:
        if not data:
            return
        connection = self._connection
        assert connection is not None, "prepare() first"
        connection.write(b"%x\r\n%b\r\n" % (len(data), data))
        await connection.drain()

    async def write_eof(self) -> None:
        if self.finished:
            return
        self.finished = True
        assert self._connection is not None, "prepare() first"
        self._connection.write(b"0\r\n\r\n")
        await self._connection.drain()


Handler = Callable[[Request], Awaitable[Union[Response, StreamResponse]]]


def _head(status: int, headers: dict[str, str], keep_alive: bool) -> bytes:
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Unknown"
    lines = [f"HTTP/1.1 {status} {reason}"] + [f"{k}: {v}" for k, v in headers.items()]
    if not keep_alive:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class _Connection(asyncio.Protocol):
    def __init__(self, handler: Handler):
        self._handler = handler
        self._transport: Optional[asyncio.Transport] = None
        self._buffer = bytearray()
        self._first_read = 0.0  # when the bytes now at the buffer's start were read
        self._head: Optional[tuple[str, str, Headers, int, bool]] = None  # a parsed head waiting for its body
        self._continued = False
        self._pending: deque[Request] = deque()
        self._task: Optional[asyncio.Task] = None
        self._paused: Optional[asyncio.Future] = None
        self._closed = False
        self.keep_alive = True  # of the request being answered
        self.reply_started = False  # its head is written

    # --- asyncio.Protocol ---

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        if not self._buffer:
            self._first_read = now
        self._buffer += data
        self._parse(now)

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self._closed = True
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self.resume_writing()  # a writer waiting to drain finds the connection closed at its next write

    def pause_writing(self) -> None:
        if self._paused is None or self._paused.done():
            self._paused = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._paused is not None and not self._paused.done():
            self._paused.set_result(None)

    # --- writing, for the replies ---

    def write(self, data: bytes) -> None:
        if self._closed or self._transport is None or self._transport.is_closing():
            raise ConnectionResetError("the client closed the connection")
        self._transport.write(data)

    async def drain(self) -> None:
        if self._paused is not None and not self._paused.done():
            await self._paused
        if self._closed:
            raise ConnectionResetError("the client closed the connection")

    # --- reading requests ---

    def _parse(self, now: float) -> None:
        while self._buffer and not self._closed:
            if self._head is None:
                end = self._buffer.find(b"\r\n\r\n")
                if end < 0:
                    if len(self._buffer) > MAX_HEAD_BYTES:
                        self._refuse(431, "the request head is too large")
                    return
                head = bytes(self._buffer[:end]).decode("latin-1")
                del self._buffer[:end + 4]
                try:
                    self._head = self._read_head(head)
                except ValueError as exc:
                    self._refuse(400, str(exc))
                    return
                self._continued = False
            method, target, headers, length, keep_alive = self._head
            if len(self._buffer) < length:
                if headers.get("expect", "").lower() == "100-continue" and not self._continued:
                    self._continued = True
                    self.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                return
            body = bytes(self._buffer[:length])
            del self._buffer[:length]
            assert self._transport is not None
            request = Request(method, target, headers, body, self._first_read, self._transport, keep_alive)
            request._connection = self
            self._head = None
            self._first_read = now  # what is left in the buffer came with this read
            self._pending.append(request)
            if not keep_alive:
                self._buffer.clear()
                break
        if self._pending and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._serve())

    @staticmethod
    def _read_head(head: str) -> tuple[str, str, Headers, int, bool]:
        lines = head.split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise ValueError(f"not an HTTP/1.x request line: {lines[0][:100]!r}")
        method, target, version = parts
        headers = Headers()
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                raise ValueError(f"a header line without a colon: {line[:100]!r}")
            headers[name.strip().lower()] = value.strip()
        if "chunked" in headers.get("transfer-encoding", "").lower():
            raise ValueError("chunked request bodies are not supported: send a Content-Length")
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            raise ValueError("Content-Length is not a number") from None
        if not 0 <= length <= MAX_BODY_BYTES:
            raise ValueError(f"Content-Length must be 0 … {MAX_BODY_BYTES}")
        connection = headers.get("connection", "").lower()
        keep_alive = "close" not in connection and (version == "HTTP/1.1" or "keep-alive" in connection)
        return method, target, headers, length, keep_alive

    def _refuse(self, status: int, message: str) -> None:
        body = json.dumps({"error": {"message": message, "code": status}}).encode()
        self.keep_alive = False
        self.write(_head(status, {"Content-Type": "application/json", "Content-Length": str(len(body))}, False) + body)
        self._closed = True
        self._buffer.clear()
        assert self._transport is not None
        self._transport.close()

    async def _serve(self) -> None:
        while self._pending and not self._closed:
            request = self._pending.popleft()
            self.keep_alive, self.reply_started = request.keep_alive, False
            try:
                reply = await self._handler(request)
            except (ConnectionError, asyncio.CancelledError):
                return
            except Exception as exc:  # noqa: BLE001 - a handler's bug answers 500, as a framework's would
                if self.reply_started:  # too late for a status: the client sees the stream cut
                    self._transport.abort()  # type: ignore[union-attr]
                    return
                reply = json_response({"error": {"message": f"reference server: {type(exc).__name__}: {exc}",
                                                 "code": 500}}, 500)
            try:
                if isinstance(reply, StreamResponse):
                    await reply.write_eof()
                else:
                    headers = {**reply.headers, "Content-Length": str(len(reply.body))}
                    self.write(_head(reply.status, headers, self.keep_alive) + reply.body)
            except ConnectionError:
                return
            if not self.keep_alive:
                self._closed = True
                self._transport.close()  # type: ignore[union-attr]
                return


async def start_server(handler: Handler, host: str, port: int) -> tuple[asyncio.AbstractServer, int]:
    """Serve ``handler`` on host:port (0: any free port); the server and the port it bound."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Connection(handler), host, port)
    return server, server.sockets[0].getsockname()[1]
