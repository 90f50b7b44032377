"""Plain HTTP for load-time checks and scrapes: GET with a bounded body, and the check that a URL is
an OpenAI API root. A redirect to another origin loses the API key; loopback never goes through a proxy."""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from typing import Optional
from urllib.parse import urlsplit

from backends.http.urls import public_url
from core.errors import HarnessError

log = logging.getLogger("harness")


class _SameOriginCredentials(urllib.request.HTTPRedirectHandler):
    """Follows redirects, but a redirect to another origin (scheme, host, port) loses the
    Authorization header: the API key is sent to the configured server alone."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # urllib's signature, unannotated
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and _origin(newurl) != _origin(req.full_url):
            new.remove_header("Authorization")
        return new


def _origin(url: str) -> tuple[str, str, Optional[int]]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or {"http": 80, "https": 443}.get(parts.scheme)


# loopback never goes through a proxy from the environment; other hosts follow the environment
_LOOPBACK_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _SameOriginCredentials())

_OPENER = urllib.request.build_opener(_SameOriginCredentials())


def _opener_for(url: str) -> urllib.request.OpenerDirector:
    host = (urlsplit(url).hostname or "").lower()
    loopback = host == "localhost" or host.startswith("127.") or host == "::1"
    return _LOOPBACK_OPENER if loopback else _OPENER


# what is read of an error body (HTTP status other than 200): its message is cut to 300
# characters anyway, and a server must not make the client hold megabytes
MAX_ERROR_BODY_BYTES = 64 * 1024


def http_get(
    url: str,
    headers: Optional[dict[str, str]] = None,
    timeout_s: float = 10.0,
    method: str = "GET",
    max_bytes: int = 64 * 2**20,
) -> tuple[int, str, dict[str, str]]:
    """(status, body, headers) of a GET (or a bodiless ``method``); raises OSError (URLError)
    when nothing answers. The body is cut at ``max_bytes`` (error bodies at MAX_ERROR_BODY_BYTES)."""
    req = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with _opener_for(url).open(req, timeout=timeout_s) as response:
            return response.status, response.read(max_bytes).decode("utf-8", "replace"), dict(response.headers)
    except urllib.error.HTTPError as exc:
        body = exc.read(min(max_bytes, MAX_ERROR_BODY_BYTES)).decode("utf-8", "replace") if exc.fp else ""
        return exc.code, body, dict(exc.headers or {})


def http_get_text(url: str, deadline_s: float, max_bytes: int = 64 * 2**20) -> tuple[int, str]:
    """(status, body) of a GET that gives up at ``deadline_s`` after it began: the body is read
    in pieces with the clock checked after each, so a server that drips one byte a second is
    dropped at the deadline (urllib's timeout is per read, and a drip never trips it). Each read
    itself waits at most ``deadline_s``, so the call returns or raises (TimeoutError past the
    deadline, OSError when nothing answers) within about twice ``deadline_s`` — a caller that
    must not wait past the deadline itself runs it on a thread (harness/telemetry/server_metrics.py).
    Blocking: call it off the event loop."""
    start = time.monotonic()

    def left() -> float:
        remaining = deadline_s - (time.monotonic() - start)
        if remaining <= 0:
            raise TimeoutError(f"no complete answer within {deadline_s:g} s")
        return remaining

    req = urllib.request.Request(url, method="GET")
    try:
        response = _opener_for(url).open(req, timeout=left())
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    with response:
        pieces: list[bytes] = []
        size = 0
        while size < max_bytes:
            piece = response.read1(min(65536, max_bytes - size))
            left()
            if not piece:
                break
            pieces.append(piece)
            size += len(piece)
    return response.status, b"".join(pieces).decode("utf-8", "replace")


def check_server(
    base_url: str, api_key: Optional[str], api_key_env: Optional[str], timeout_s: float = 10.0
) -> tuple[list[str], str]:
    """GET {base_url}/models once: the model ids and the Server header; one-line errors.

    HTTP 401/403 → the key is missing or wrong; nothing answering → cannot reach; 404 → not
    an OpenAI API root. Other statuses (some servers list no models) give an empty list.
    """
    shown = public_url(base_url)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        status, body, response_headers = http_get(f"{base_url}/models", headers, timeout_s)
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise HarnessError(f"cannot reach {shown} ({reason})") from None
    if status in (401, 403):
        hint = (
            f"check the key in ${api_key_env}"
            if api_key_env
            else "set backend.api_key_env to the name of the environment variable that holds the key"
        )
        raise HarnessError(f"{shown} refused the API key (HTTP {status}): {hint}")
    if status == 404:
        raise HarnessError(f"{shown}/models answered HTTP 404: is backend.url the API root (ending in /v1)?")
    server = response_headers.get("Server", "") or response_headers.get("server", "")
    if status != 200:
        log.warning("%s/models answered HTTP %d; using the configured model name", shown, status)
        return [], server
    try:
        data = json.loads(body).get("data") or []
        return [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m], server
    except (ValueError, AttributeError):
        return [], server
