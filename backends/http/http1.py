"""A streaming HTTP/1.1 client on asyncio's Protocol: what the OpenAI-compatible client sends
its requests with.

Why not aiohttp (the harness used it before) or httpx: the stamp. Here the bytes of a
response body are stamped in ``data_received``, the transport's callback, before any task
runs. When many streams turn readable in one turn of the event loop, each stamp waits only
for the other streams' ``recv`` calls, not for their parsing and their consumers; and a
request goes out as one ``write`` of prebuilt bytes. Those libraries hand the bytes to the
reading task, which can stamp them only when it runs. ``benchmarks/http_client.py`` (prebuilt
2,048-token streams, the client the bottleneck, the same SSE parsing for all; four runs on a
busy machine), 2026-12-05, 2-core x86_64, Python 3.11: how long after ``data_received`` the
stream's task got its bytes, the delay a task-side stamp carries, p50 / p99: 1 stream 39–67 µs
/ 0.3–1.8 ms, 8 streams 3.2–5.7 / 9.5–20 ms, 32 streams 9.3–16 / 30–47 ms. Not the CPU: per
streamed token ours costs what aiohttp 3.14 costs (1 stream 1.3–1.9 against 1.3–1.4 µs, 32
streams 39–43 against 41–45 µs); httpx 0.29 costs 2.3–2.5 times that at 32 streams.
benchmarks/four_clients.py measures the TTFT error against a known schedule beside vllm bench
(aiohttp), GuideLLM and AIPerf.

What it does, and no more:

- POST and GET with a body of bytes, HTTP/1.1 keep-alive, a pool of connections per event
  loop (:class:`HTTPPool`), https through the ssl module's default context;
- response bodies framed by chunked transfer coding, by Content-Length, or by the end of the
  connection; 1xx responses skipped; redirects never followed (the caller sees the 3xx);
  no compression asked for;
- limits: the response head (64 KiB); connect and read timeouts; a consumer that falls
  behind pauses the socket's reading rather than buffering without end.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from typing import Optional
from urllib.parse import urlsplit

MAX_HEAD_BYTES = 64 * 1024
MAX_CHUNK_LINE_BYTES = 4096
PAUSE_ABOVE_BYTES = 8 * 2**20  # body bytes held for a slow consumer before reading pauses
RESUME_BELOW_BYTES = 2 * 2**20
DRAIN_AFTER_RELEASE_S = 2.0  # a released response may finish arriving this long, and its connection is reused


class HTTPError(Exception):
    """A response the client cannot read."""


class ProtocolError(HTTPError):
    """A server that does not speak HTTP/1.1 as it must (a bad status line, a bad chunk)."""


class ServerDisconnected(HTTPError):
    """The connection ended before the response did."""


class Response:
    """One response: its head, then its body as (receipt stamp, bytes) pieces."""

    def __init__(self, connection: _Connection):
        self._connection = connection
        self.status = 0
        self.reason = ""
        self.headers: dict[str, str] = {}  # names lower-case; a repeated header joined with ", "
        self.keep_alive = True
        self._head_done = False
        self._pieces: deque[tuple[float, bytes]] = deque()
        self._buffered = 0
        self._complete = False
        self._error: Optional[BaseException] = None
        self._waiter: Optional[asyncio.Future] = None
        self._released = False
        # the request's phases (``perf_counter``): a new connection's set-up (None when a kept
        # one was reused), the request written, the response's first and last bytes received
        self.connect_start: Optional[float] = None
        self.connect_end: Optional[float] = None
        self.sent_t: Optional[float] = None
        self.first_byte_t: Optional[float] = None
        self.last_byte_t: Optional[float] = None

    # --- fed by the connection ---

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _set_head(self, status: int, reason: str, headers: dict[str, str], keep_alive: bool) -> None:
        self.status, self.reason, self.headers, self.keep_alive = status, reason, headers, keep_alive
        self._head_done = True
        self._wake()

    def _feed(self, t: float, piece: bytes) -> None:
        if self._released:
            return  # nobody reads it any more: dropped while the connection finishes the response
        self._pieces.append((t, piece))
        self._buffered += len(piece)
        if self._buffered > PAUSE_ABOVE_BYTES:
            self._connection.pause()
        self._wake()

    def _finish(self) -> None:
        self._complete = True
        self.last_byte_t = time.perf_counter()
        self._wake()

    def _fail(self, error: BaseException) -> None:
        if not self._complete and self._error is None:
            self._error = error
            self._wake()

    # --- read by the caller ---

    async def _wait(self, timeout: Optional[float]) -> None:
        loop = self._connection.loop
        self._waiter = waiter = loop.create_future()
        timer = loop.call_later(timeout, _time_out, waiter) if timeout is not None else None
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    async def wait_head(self, timeout: Optional[float]) -> None:
        while not self._head_done:
            if self._error is not None:
                raise self._error
            await self._wait(timeout)

    async def read(self, timeout: Optional[float] = None) -> Optional[tuple[float, bytes]]:
        """The next piece of the body and the ``time.perf_counter()`` at which its bytes were
        received; None at the body's end. Raises what ended the body early, after the pieces
        that came before it; ``TimeoutError`` when nothing comes within ``timeout`` s."""
        while not self._pieces:
            if self._error is not None:
                raise self._error
            if self._complete:
                return None
            await self._wait(timeout)
        t, piece = self._pieces.popleft()
        self._buffered -= len(piece)
        if self._buffered < RESUME_BELOW_BYTES:
            self._connection.resume()
        return t, piece

    async def read_bounded(self, limit: int, timeout: Optional[float] = None) -> bytes:
        """Up to ``limit`` bytes of the body (the rest is never read)."""
        data = bytearray()
        while len(data) < limit:
            got = await self.read(timeout)
            if got is None:
                break
            data += got[1]
        return bytes(data[:limit])

    def release(self, reuse: bool) -> None:
        """Done with the response. ``reuse``: its connection may serve another request once
        the rest of the body has arrived (dropped unread); otherwise it is closed now, and
        the server sees the client leave (what cancels a request in every engine)."""
        if self._released:
            return
        self._released = True
        self._pieces.clear()
        self._buffered = 0
        self._connection.resume()
        if self._complete and self._error is None:
            return  # the connection went back to its pool when the body ended
        if reuse and self._error is None and self.keep_alive:
            self._connection.drain_then_reuse()
        else:
            self._connection.close()


def _time_out(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


# framing of a response body
_LENGTH, _CHUNKED, _UNTIL_CLOSE = "length", "chunked", "until-close"


class _Connection(asyncio.Protocol):
    """One connection: a response at a time (no pipelining)."""

    def __init__(self, pool: HTTPPool, origin: tuple[str, str, int]):
        self.pool = pool
        self.loop = pool.loop
        self.origin = origin
        self.transport: Optional[asyncio.Transport] = None
        self.lost = False
        self.received_any = False  # bytes of the current response
        self.response: Optional[Response] = None
        self._head = bytearray()
        self._framing = _UNTIL_CLOSE
        self._left = 0  # Content-Length bytes to come, or the current chunk's
        self._chunk_buffer = b""  # an unfinished chunk-size line or CRLF
        self._need_crlf = False
        self._in_trailer = False
        self._paused = False
        self._drain_timer: Optional[asyncio.TimerHandle] = None

    # --- asyncio.Protocol ---

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream's transport is a Transport; asyncio types the hook with the base class

    def data_received(self, data: bytes) -> None:
        t = time.perf_counter()  # the stamp of every body byte in ``data``
        response = self.response
        if response is None:  # bytes nobody asked for: the connection is not fit for reuse
            self.close()
            return
        if not self.received_any:
            self.received_any = True
            response.first_byte_t = t
        try:
            if not response._head_done:
                data = self._read_head(response, data)
                if not data or self.response is None:
                    return
            self._read_body(response, t, data)
        except HTTPError as exc:
            response._fail(exc)
            self.close()

    def eof_received(self) -> None:
        return None  # the transport closes itself: connection_lost follows

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self.lost = True
        self.pool._forget(self)
        if self._drain_timer is not None:
            self._drain_timer.cancel()
        response, self.response = self.response, None
        if response is None:
            return
        if response._head_done and self._framing == _UNTIL_CLOSE:
            response._finish()  # the end of the connection is the end of this body
        elif response._head_done:
            response._fail(ServerDisconnected("the server closed the connection in the middle of its response"))
        else:
            response._fail(ServerDisconnected("the server closed the connection before its response"))

    # --- the response head ---

    def _read_head(self, response: Response, data: bytes) -> bytes:
        """Take head bytes; returns the body bytes that came after the head."""
        self._head += data
        while True:
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                if len(self._head) > MAX_HEAD_BYTES:
                    raise ProtocolError(f"a response head over {MAX_HEAD_BYTES // 1024} KiB")
                return b""
            head, rest = bytes(self._head[:end]), bytes(self._head[end + 4 :])
            self._head.clear()
            status, reason, headers, version = _parse_head(head)
            if 100 <= status < 200:  # an interim response (100 Continue): the real one follows
                self._head += rest
                continue
            keep_alive = "close" not in headers.get("connection", "").lower() and (
                version != "HTTP/1.0" or "keep-alive" in headers.get("connection", "").lower()
            )
            self._begin_body(headers)
            response._set_head(status, reason, headers, keep_alive)
            if self._framing == _LENGTH and self._left == 0:
                self._end_response(response)
                return b""
            return rest

    def _begin_body(self, headers: dict[str, str]) -> None:
        self._need_crlf = self._in_trailer = False
        self._chunk_buffer = b""
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._framing, self._left = _CHUNKED, 0
        elif "content-length" in headers:
            try:
                self._left = int(headers["content-length"])
            except ValueError:
                raise ProtocolError(f"a bad Content-Length: {headers['content-length'][:40]!r}") from None
            if self._left < 0:
                raise ProtocolError(f"a bad Content-Length: {self._left}")
            self._framing = _LENGTH
        else:
            self._framing = _UNTIL_CLOSE

    # --- the response body ---

    def _read_body(self, response: Response, t: float, data: bytes) -> None:
        if self._framing == _CHUNKED:
            self._read_chunked(response, t, data)
        elif self._framing == _LENGTH:
            piece = data[: self._left]
            self._left -= len(piece)
            if piece:
                response._feed(t, piece)
            if self._left == 0:
                self._end_response(response)
        else:
            response._feed(t, data)

    def _read_chunked(self, response: Response, t: float, data: bytes) -> None:
        buf = self._chunk_buffer + data if self._chunk_buffer else data
        self._chunk_buffer = b""
        pieces: list[bytes] = []
        pos, size = 0, len(buf)
        while pos < size:
            if self._left:
                piece = buf[pos : pos + self._left]
                pieces.append(piece)
                pos += len(piece)
                self._left -= len(piece)
                self._need_crlf = self._left == 0
                continue
            if self._need_crlf:
                if size - pos < 2:
                    break
                if buf[pos : pos + 2] != b"\r\n":
                    raise ProtocolError("a chunk not followed by CRLF")
                pos += 2
                self._need_crlf = False
                continue
            line_end = buf.find(b"\r\n", pos)
            if line_end < 0:
                if size - pos > MAX_CHUNK_LINE_BYTES:
                    raise ProtocolError("a chunk-size line over 4 KiB")
                break
            line = buf[pos:line_end]
            pos = line_end + 2
            if self._in_trailer:
                if not line:  # the blank line after the last chunk: the body is complete
                    if pieces:
                        response._feed(t, b"".join(pieces))
                    self._end_response(response)
                    return
                continue
            try:
                chunk_size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise ProtocolError(f"a bad chunk size: {bytes(line[:40])!r}") from None
            if chunk_size < 0:
                raise ProtocolError(f"a bad chunk size: {bytes(line[:40])!r}")
            if chunk_size == 0:
                self._in_trailer = True
            else:
                self._left = chunk_size
        if pos < size:
            self._chunk_buffer = buf[pos:]
        if pieces:
            response._feed(t, pieces[0] if len(pieces) == 1 else b"".join(pieces))

    def _end_response(self, response: Response) -> None:
        self.response = None
        response._finish()
        if self._drain_timer is not None:
            self._drain_timer.cancel()
            self._drain_timer = None
        if response.keep_alive and not self.lost:
            self.pool._idle_again(self)
        else:
            self.close()

    # --- for the pool and the response ---

    def send(self, request: bytes) -> Response:
        self.response = response = Response(self)
        self.received_any = False
        self._head.clear()
        assert self.transport is not None
        self.transport.write(request)
        response.sent_t = time.perf_counter()
        return response

    def pause(self) -> None:
        if not self._paused and self.transport is not None and not self.lost:
            self._paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self._paused and self.transport is not None and not self.lost:
            self._paused = False
            self.transport.resume_reading()

    def drain_then_reuse(self) -> None:
        """The caller is done but the body is not: let it finish arriving for a while."""
        self._drain_timer = self.loop.call_later(DRAIN_AFTER_RELEASE_S, self.close)

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
        self.lost = True
        self.pool._forget(self)

    @property
    def usable(self) -> bool:
        return not self.lost and self.transport is not None and not self.transport.is_closing()


def _parse_head(head: bytes) -> tuple[int, str, dict[str, str], str]:
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code, _, reason = rest.partition(" ")
    if not version.startswith("HTTP/1.") or not code.isdigit() or len(code) != 3:
        raise ProtocolError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon:
            raise ProtocolError(f"a header line without a colon: {line[:80]!r}")
        name, value = name.strip().lower(), value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return int(code), reason, headers, version


class HTTPPool:
    """Connections to any origin, for one event loop; idle ones are kept for reuse."""

    def __init__(self, loop: asyncio.AbstractEventLoop, connect_timeout_s: float = 30.0):
        self.loop = loop
        self.connect_timeout_s = connect_timeout_s
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._all: set[_Connection] = set()
        self._ssl: Optional[ssl.SSLContext] = None
        self.closed = False

    async def request(
        self, method: str, url: str, headers: dict[str, str], body: bytes = b"", timeout: Optional[float] = None
    ) -> Response:
        """Send a request; returns once the response's head has arrived (within ``timeout`` s)."""
        scheme, host, port, target = _split(url)
        origin = (scheme, host, port)
        host_header = host if port == (443 if scheme == "https" else 80) else f"{host}:{port}"
        request = _request_bytes(method, target, host_header, headers, body)
        while True:
            connection = self._idle_connection(origin)
            reused = connection is not None
            connect_start = connect_end = None
            if connection is None:
                connect_start = time.perf_counter()
                connection = await self._connect(origin)
                connect_end = time.perf_counter()
            response = connection.send(request)
            response.connect_start, response.connect_end = connect_start, connect_end
            try:
                await response.wait_head(timeout)
                return response
            except ServerDisconnected:
                # a kept connection the server had closed while it was idle: once more, on a new one
                if reused and not connection.received_any:
                    continue
                raise
            except BaseException:
                connection.close()
                raise

    def _idle_connection(self, origin: tuple[str, str, int]) -> Optional[_Connection]:
        idle = self._idle.get(origin)
        while idle:
            connection = idle.pop()
            if connection.usable:
                return connection
        return None

    async def _connect(self, origin: tuple[str, str, int]) -> _Connection:
        if self.closed:
            raise RuntimeError("the HTTP pool is closed")
        scheme, host, port = origin
        ssl_context = None
        if scheme == "https":
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            ssl_context = self._ssl
        connection = _Connection(self, origin)
        try:
            await asyncio.wait_for(
                self.loop.create_connection(
                    lambda: connection,
                    host.strip("[]"),
                    port,
                    ssl=ssl_context,
                    server_hostname=host.strip("[]") if ssl_context else None,
                ),
                self.connect_timeout_s,
            )
        except asyncio.TimeoutError:  # the builtin one, on Python 3.10 too
            raise TimeoutError(f"no connection to {host}:{port} within {self.connect_timeout_s:g} s") from None
        self._all.add(connection)
        return connection

    def _idle_again(self, connection: _Connection) -> None:
        if self.closed:
            connection.close()
        else:
            self._idle.setdefault(connection.origin, []).append(connection)

    def _forget(self, connection: _Connection) -> None:
        self._all.discard(connection)
        idle = self._idle.get(connection.origin)
        if idle and connection in idle:
            idle.remove(connection)

    def close(self) -> None:
        """Close every connection, idle or busy."""
        self.closed = True
        for connection in list(self._all):
            connection.close()
        self._idle.clear()


def _split(url: str) -> tuple[str, str, int, str]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    host = parts.hostname
    if ":" in host:
        host = f"[{host}]"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.scheme, host, port, target


def _request_bytes(method: str, target: str, host: str, headers: dict[str, str], body: bytes) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    for name, value in headers.items():
        if any(c in name or c in value for c in "\r\n"):
            raise ValueError(f"a line break in the header {name!r}")
        lines.append(f"{name}: {value}")
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
