"""A small HTTP/1.1 server on raw non-blocking sockets, for the reference server.

The reference server is the harness's timing instrument: a request's schedule starts when it
reached the server, and its tokens must leave at their deadlines even with 128 streams on a
small machine. A general framework stamps a request when its handler starts, after its own
parsing and routing; under a burst of requests that lags the arrival by tens of milliseconds,
and every client's TTFT error carries the wait. Here each request carries ``arrival``: when
the kernel received the bytes of the read that brought its first bytes (``SO_TIMESTAMPNS``,
on the ``time.perf_counter()`` clock), so a server busy with other requests does not move
it; where the kernel gives no stamp, the ``time.perf_counter()`` of that read.

What it serves: requests with a Content-Length body (no chunked request bodies), keep-alive
and pipelining (one request at a time per connection, in order), ``Expect: 100-continue``,
replies with a Content-Length body, and streamed replies in chunked encoding with flow
control. A closed connection cancels the handler of its request.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any, Optional, Union

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 256 * 2**20
READ_BYTES = 256 * 1024
HIGH_WATER_BYTES = 64 * 1024  # unsent bytes above which a streamed write waits to drain
LOW_WATER_BYTES = 16 * 1024
LINGER_S = 2.0  # after a refusal, how long the client's further bytes are read and dropped
ACCEPT_RETRY_S = 1.0  # after accept() failed (no file descriptors left)
# Linux: the kernel's receive time of each read (a struct timespec on CLOCK_REALTIME)
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35) if sys.platform.startswith("linux") else None
STAMP_SPACE = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0


class Headers(dict):
    """Request headers, looked up without regard to case."""

    def __getitem__(self, name: str) -> str:
        return super().__getitem__(name.lower())

    def get(self, name: str, default: Any = None) -> Any:
        return super().get(name.lower(), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and super().__contains__(name.lower())


class Request:
    def __init__(
        self,
        method: str,
        target: str,
        headers: Headers,
        body: bytes,
        arrival: float,
        transport: _Socket,
        keep_alive: bool = True,
        version: str = "HTTP/1.1",
    ):
        self.method = method
        self.path_qs = target
        self.path = target.split("?", 1)[0]
        self.headers = headers
        self.body = body
        self.arrival = arrival  # when the read that brought its first bytes was received (perf_counter clock)
        self.transport = transport
        self.host = headers.get("host", "")
        self.keep_alive = keep_alive
        self.version = version
        self._connection: Optional[_Connection] = None

    async def json(self) -> Any:
        """The body as JSON; ValueError when it is not."""
        return json.loads(self.body)


class Response:
    """A whole reply, written with a Content-Length."""

    def __init__(
        self,
        status: int = 200,
        body: Union[bytes, str] = b"",
        content_type: Optional[str] = None,
        headers: Optional[dict[str, str]] = None,
        text: Optional[str] = None,
    ):
        self.status = status
        content = text if text is not None else body
        if isinstance(content, str):
            content = content.encode()
            content_type = (content_type or "text/plain") + "; charset=utf-8"
        self.body: bytes = content
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
        self._chunked = True
        self.finished = False

    async def prepare(self, request: Request) -> None:
        connection = request._connection
        assert connection is not None
        self._connection = connection
        connection.reply_started = True
        self._chunked = request.version != "HTTP/1.0"  # HTTP/1.0 knows no chunks: the end is the close
        if self._chunked:
            headers = {**self.headers, "Transfer-Encoding": "chunked"}
        else:
            headers, connection.keep_alive = dict(self.headers), False
        connection.write(_head(self.status, headers, connection.keep_alive))

    async def write(self, data: bytes) -> None:
        if not data:
            return
        connection = self._connection
        assert connection is not None, "prepare() first"
        connection.write(b"%x\r\n%b\r\n" % (len(data), data) if self._chunked else data)
        await connection.drain()

    async def write_eof(self) -> None:
        if self.finished:
            return
        self.finished = True
        assert self._connection is not None, "prepare() first"
        if self._chunked:
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


class _Socket:
    """One accepted connection's socket, read with the kernel's receive stamps: the transport
    under a :class:`_Connection` (``write``, ``close`` once written, ``abort``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, protocol: _Connection):
        self._loop, self._sock, self._protocol = loop, sock, protocol
        self._fd = sock.fileno()
        self._out = bytearray()  # what the kernel has not taken yet
        self._paused = self._closing = self._closed = self._lingering = False
        sock.setblocking(False)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # each event leaves at once
        self._stamped = False
        if SO_TIMESTAMPNS is not None and STAMP_SPACE:
            try:
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
                self._stamped = True
            except OSError:
                pass
        protocol.connection_made(self)
        loop.add_reader(self._fd, self._read)

    def _read(self) -> None:
        try:
            if self._stamped and self._protocol.between_requests:
                # a read's stamp is its last TCP segment's: a request's first segment is peeked alone
                _, ancillary, _, _ = self._sock.recvmsg(1, STAMP_SPACE, socket.MSG_PEEK)
                data = self._sock.recv(READ_BYTES)
            elif self._stamped:
                data, ancillary, _, _ = self._sock.recvmsg(READ_BYTES, STAMP_SPACE)
            else:
                data, ancillary = self._sock.recv(READ_BYTES), []
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._finish()
            return
        if not data:  # the client closed its side
            self._finish()
            return
        if self._lingering:  # a refused request's rest: read and dropped, so the client gets the reply
            return
        self._protocol.data_received(data, _received_at(ancillary))

    def write(self, data: bytes) -> None:
        if self._closing or self._closed:
            raise ConnectionResetError("the client closed the connection")
        if not self._out:
            try:
                sent = self._sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                self._finish()
                raise ConnectionResetError("the client closed the connection") from None
            if sent == len(data):
                return
            data = data[sent:]
            self._loop.add_writer(self._fd, self._flush)
        self._out += data
        if not self._paused and len(self._out) > HIGH_WATER_BYTES:
            self._paused = True
            self._protocol.pause_writing()

    def _flush(self) -> None:
        try:
            sent = self._sock.send(self._out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._finish()
            return
        del self._out[:sent]
        if self._paused and len(self._out) <= LOW_WATER_BYTES:
            self._paused = False
            self._protocol.resume_writing()
        if not self._out:
            self._loop.remove_writer(self._fd)
            if self._closing:
                self._finish_or_linger()

    def is_closing(self) -> bool:
        return self._closing or self._closed

    def close(self, linger: bool = False) -> None:
        """Close once what is queued has been sent. ``linger``: then send FIN and drop what the
        client still sends, for up to ``LINGER_S``, so that a client still sending its request
        reads the reply before the connection closes (closing with unread bytes sends RST)."""
        if self._closing or self._closed:
            return
        self._closing, self._lingering = True, linger
        if not linger:
            self._loop.remove_reader(self._fd)
        if not self._out:
            self._finish_or_linger()

    def _finish_or_linger(self) -> None:
        if not self._lingering:
            self._finish()
            return
        try:
            self._sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._finish()
            return
        self._loop.call_later(LINGER_S, self._finish)

    def abort(self) -> None:
        """Close now, dropping what is queued (a connection that drops mid-stream)."""
        self._finish()

    def _finish(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._loop.remove_reader(self._fd)
        self._loop.remove_writer(self._fd)
        self._sock.close()
        self._loop.call_soon(self._protocol.connection_lost, None)


def _received_at(ancillary: list) -> float:
    """The kernel's receive time of a read, on the ``time.perf_counter()`` clock; else now."""
    wall_ns, now = time.time_ns(), time.perf_counter()
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
            seconds, nanoseconds = struct.unpack_from("@qq", data)
            age = (wall_ns - seconds * 1_000_000_000 - nanoseconds) / 1e9
            if 0.0 <= age < 1.0:  # else the wall clock stepped: this read's own time
                return now - age
    return now


class _Connection:
    """One client connection: reads requests, answers them one at a time, in order."""

    def __init__(self, handler: Handler):
        self._handler = handler
        self._transport: Optional[_Socket] = None
        self._buffer = bytearray()
        self._first_read = 0.0  # when the bytes now at the buffer's start were received
        self._head: Optional[tuple[str, str, Headers, int, bool, str]] = None  # a parsed head waiting for its body
        self._continued = False
        self._pending: deque[Request] = deque()
        self._task: Optional[asyncio.Task] = None
        self._paused: Optional[asyncio.Future] = None
        self.keep_alive = True  # of the request being answered
        self.reply_started = False  # its head is written

    # --- from the socket ---

    def connection_made(self, transport: _Socket) -> None:
        self._transport = transport

    @property
    def _closed(self) -> bool:
        return self._transport is None or self._transport.is_closing()

    @property
    def between_requests(self) -> bool:
        """The next bytes start a request (nothing of one is buffered or half-parsed)."""
        return not self._buffer and self._head is None

    def data_received(self, data: bytes, received_at: float) -> None:
        if self.between_requests:
            self._first_read = received_at
        self._buffer += data
        self._parse(received_at)

    def connection_lost(self, exc: Optional[Exception]) -> None:
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
        assert self._transport is not None
        self._transport.write(data)  # ConnectionResetError once closed

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
                del self._buffer[: end + 4]
                try:
                    self._head = self._read_head(head)
                except ValueError as exc:
                    self._refuse(400, str(exc))
                    return
                self._continued = False
            method, target, headers, length, keep_alive, version = self._head
            if len(self._buffer) < length:
                if (
                    headers.get("expect", "").lower() == "100-continue" and not self._continued and not self._answering
                ):  # never inside the reply to an earlier request
                    self._continued = True
                    self.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                return
            body = bytes(self._buffer[:length])
            del self._buffer[:length]
            assert self._transport is not None
            request = Request(method, target, headers, body, self._first_read, self._transport, keep_alive, version)
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
    def _read_head(head: str) -> tuple[str, str, Headers, int, bool, str]:
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
        return method, target, headers, length, keep_alive, version

    @property
    def _answering(self) -> bool:
        return bool(self._pending) or (self._task is not None and not self._task.done())

    def _refuse(self, status: int, message: str) -> None:
        assert self._transport is not None
        self._buffer.clear()
        if self._answering:  # an earlier request's reply is under way: a status here would land inside it
            self._transport.abort()
            return
        body = json.dumps({"error": {"message": message, "code": status}}).encode()
        self.keep_alive = False
        self.write(_head(status, {"Content-Type": "application/json", "Content-Length": str(len(body))}, False) + body)
        self._transport.close(linger=True)

    async def _serve(self) -> None:
        transport = self._transport
        assert transport is not None  # requests come only after connection_made
        while self._pending and not self._closed:
            request = self._pending.popleft()
            self.keep_alive, self.reply_started = request.keep_alive, False
            try:
                reply = await self._handler(request)
            except (ConnectionError, asyncio.CancelledError):
                transport.abort()  # (already closed, or the client waits in vain)
                return
            except Exception as exc:  # noqa: BLE001 - a handler's bug answers 500, as a framework's would
                if self.reply_started:  # too late for a status: the client sees the stream cut
                    transport.abort()
                    return
                reply = json_response(
                    {"error": {"message": f"reference server: {type(exc).__name__}: {exc}", "code": 500}}, 500
                )
            try:
                if isinstance(reply, StreamResponse):
                    await reply.write_eof()
                else:
                    headers = {**reply.headers, "Content-Length": str(len(reply.body))}
                    self.write(_head(reply.status, headers, self.keep_alive) + reply.body)
            except ConnectionError:
                return
            if not self.keep_alive:
                transport.close()
                return


class Server:
    """The listening socket: each connection it accepts is served by ``handler``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, handler: Handler):
        self._loop, self._sock, self._handler = loop, sock, handler
        self.port: int = sock.getsockname()[1]
        sock.setblocking(False)
        if SO_TIMESTAMPNS is not None:
            # on from the start: the kernel stamps packets only while some socket asks, and a
            # new connection's first request may arrive before the connection is accepted
            try:
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            except OSError:
                pass
        self._watch()

    def _watch(self) -> None:
        if self._sock.fileno() >= 0:
            self._loop.add_reader(self._sock.fileno(), self._accept)

    def _accept(self) -> None:
        for _ in range(128):  # a burst of connections is taken in one wake-up
            try:
                sock, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # e.g. out of file descriptors: the connection waits in the backlog
                print(
                    f"http server: accept failed ({exc}); trying again in {ACCEPT_RETRY_S:g} s",
                    file=sys.stderr,
                    flush=True,
                )
                self._loop.remove_reader(self._sock.fileno())
                self._loop.call_later(ACCEPT_RETRY_S, self._watch)
                return
            _Socket(self._loop, sock, _Connection(self._handler))

    def close(self) -> None:
        """Stop accepting; connections already open go on."""
        if self._sock.fileno() >= 0:
            self._loop.remove_reader(self._sock.fileno())
            self._sock.close()


async def start_server(handler: Handler, host: str, port: int) -> tuple[Server, int]:
    """Serve ``handler`` on host:port (0: any free port); the server and the port it bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host.strip("[]"), port), family=family, backlog=1024)
    server = Server(asyncio.get_running_loop(), sock, handler)
    return server, server.port
