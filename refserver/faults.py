"""How a failing request misbehaves (``--error-kind``): one way each, run by the fault-injection suite.

The faults come in families, one function each: refusals (an error status or a page that is no
event stream, in place of the reply), usage that lies, corrupted text or finish_reason, a
stream broken half-way, and delivery (byte by byte, or no ``[DONE]``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Optional

from refserver.http11 import Request, Response, StreamResponse

# --error-kind: how a failing request misbehaves (the fault-injection suite runs each)
FAULTS: dict[str, str] = {
    "status": "HTTP 500 at once",
    "drop": "the connection closes half-way through the stream",
    "stall": "half-way through, no byte ever again, the connection open",
    "no-done": "finish_reason and usage sent, then the connection stays open without [DONE]",
    "finish-reason-object": "finish_reason is a JSON object, not a string",
    "negative-usage": "usage.completion_tokens is negative",
    "absurd-usage": "usage.completion_tokens is 10^15",
    "fractional-usage": "usage.prompt_tokens is 3.5",
    "bad-unicode": "HTTP 500 whose JSON error body holds a lone surrogate (\\ud800)",
    "surrogate-text": "a token's text holds a lone surrogate (\\ud800)",
    "huge-event": "half-way through, one event of --fault-size-mib MiB",
    "huge-error-body": "HTTP 500 with a body of --fault-size-mib MiB",
    "bad-json": "half-way through, an event that is not JSON",
    "wrong-types": "half-way through, delta.content is a number",
    "error-event": "half-way through, an error event (as vLLM sends on an engine error)",
    "not-sse": "HTTP 200 with an HTML page instead of an event stream",
    "byte-drip": "every event written one byte at a time",
    "redirect": "/v1/models and the completions answer 307 to the same server under another origin (localhost)",
}

MID_STREAM_FAULTS = {"drop", "stall", "huge-event", "bad-json", "wrong-types", "error-event"}

# the faults that answer in place of the stream: an error status, or a page that is no stream
REFUSALS = {"status", "bad-unicode", "huge-error-body", "not-sse", "redirect"}
# the faults that lie in usage
USAGE_LIES = {"negative-usage", "absurd-usage", "fractional-usage"}
FOREVER_S = 3600.0  # "never" for a stalled or held stream: the client's time-out ends it first


def refusal(
    fault: Optional[str], size_mib: float, request: Request, error: Callable[[int, str, str], Response]
) -> Optional[Response]:
    """The answer of a refusing fault instead of the reply; None when the fault is of another family
    (or the redirect already came to the other origin)."""
    if fault == "status":
        return error(500, "reference server: injected error (--error-rate)", "server_error")
    if fault == "bad-unicode":  # json.dumps would escape it validly: written by hand
        body = '{"error": {"message": "injected \\ud800 error", "type": "server_error", "code": 500}}'
        return Response(status=500, text=body, content_type="application/json")
    if fault == "huge-error-body":
        return Response(status=500, body=b"x" * int(size_mib * 2**20), content_type="text/plain")
    if fault == "not-sse":
        return Response(status=200, text="<html><body>502 Bad Gateway</body></html>", content_type="text/html")
    if fault == "redirect":
        return redirect(request)
    return None


def redirect(request: Request) -> Optional[Response]:
    """307 to this server under the other loopback name: the same server, another origin."""
    host, _, port = request.host.rpartition(":")
    if host != "127.0.0.1":  # already under the other name: served
        return None
    return Response(status=307, headers={"Location": f"http://localhost:{port}{request.path_qs}"})


def lie_about_usage(fault: Optional[str], usage: dict[str, Any]) -> dict[str, Any]:
    """The usage as a lying server reports it: negative, absurd or fractional counts."""
    if fault == "negative-usage":
        usage["completion_tokens"] = -usage["completion_tokens"]
    elif fault == "absurd-usage":
        usage["completion_tokens"] = 10**15
    elif fault == "fractional-usage":
        usage["prompt_tokens"] = 3.5
    return usage


def corrupt_text(fault: Optional[str], text: str, first: bool) -> str:
    """A first token with a lone surrogate (surrogate-text)."""
    return text + "\ud800" if fault == "surrogate-text" and first else text


def corrupt_finish_reason(fault: Optional[str], finish: Any) -> Any:
    """finish_reason as a JSON object (finish-reason-object)."""
    return {"type": finish, "matched": None} if fault == "finish-reason-object" else finish


async def write(response: StreamResponse, data: bytes, fault: Optional[str]) -> None:
    """Write an event at once, or one byte at a time (byte-drip)."""
    if fault == "byte-drip":
        for i in range(len(data)):
            await response.write(data[i : i + 1])
    else:
        await response.write(data)


async def hold_before_done(fault: Optional[str]) -> None:
    """The reply has ended; no-done never sends [DONE] and holds the connection open."""
    if fault == "no-done":
        await asyncio.sleep(FOREVER_S)


async def mid_stream(
    fault: str, request: Request, response: StreamResponse, size_mib: float, event: Callable[[str], bytes]
) -> bool:
    """One mid-stream fault, half-way through the reply; True when the stream ends with it.
    ``event(text)`` is a token event of the stream's dialect."""
    if fault == "drop":
        request.transport.abort()  # the connection drops mid-stream
        return True
    if fault == "stall":
        await asyncio.sleep(FOREVER_S)
        return True
    if fault == "huge-event":
        await response.write(event("x" * int(size_mib * 2**20)))
        return False
    if fault == "bad-json":
        await response.write(b'data: {"choices": [{"delta": {"content": "a"\n\n')
        return False
    if fault == "wrong-types":
        await response.write(b'data: {"choices": [{"index": 0, "delta": {"content": 42}}]}\n\n')
        return False
    if fault == "error-event":
        await response.write(b'data: {"error": {"message": "engine error: out of memory", "code": 500}}\n\n')
        return True
    return False


async def drip(request: Request, body: bytes, interval_s: float, content_type: str = "text/plain") -> StreamResponse:
    """A reply written one byte every ``interval_s`` seconds (``--metrics-drip-s``: a ``/metrics``
    that holds a reader which only sets a per-read timeout). A reader that hangs up ends it."""
    response = StreamResponse(headers={"Content-Type": content_type})
    await response.prepare(request)
    try:
        for i in range(len(body)):
            if request.transport.is_closing():
                return response
            await response.write(body[i : i + 1])
            await asyncio.sleep(interval_s)
        await response.write_eof()
    except ConnectionError:  # the reader gave up
        pass
    return response
