"""``backend=openai``: any running OpenAI-compatible server; and the streaming client that
every server backend (``backend.mode=server``) uses.

    python -m harness backend=openai backend.url=http://127.0.0.1:8000/v1 backend.api_key_env=MY_KEY

The client streams ``/v1/chat/completions`` (``messages``: the server renders its own chat
template) or ``/v1/completions`` (``prompt``: the harness's rendered prompt, as token ids
where the server takes them, else as text), always with
``stream_options.include_usage``. Timing: a request's clock starts in the runner just
before the request goes out; each chunk is stamped with ``time.perf_counter()`` right after
its server-sent event is parsed (``backends/http/sse.py``). Counting:

- prompt tokens: ``usage.prompt_tokens`` when the server sends usage, else the harness's own
  count of the rendered prompt;
- output tokens: ``usage.completion_tokens``, else the whole streamed text re-tokenized with
  the run's tokenizer (llama_cpp.server sends no usage);
- each chunk's token ids are its text re-tokenized, so a chunk that carries several tokens
  counts as several (ITL stays token-weighted);
- the reply text (chat history, ``output_text``) is the server's text, not a re-decode.

HTTP errors, time-outs and dropped connections raise inside the request's stream: the
runner records them against that request and the run goes on. A wrong API key or an
unreachable URL fails at load, in one line. The key itself is only ever held in memory.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Optional
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import orjson

from backends import backend_registry
from backends.base import Backend, BackendConfig, GenerationRequest, RequestDone, StreamEvent, TokenChunk
from backends.http.http1 import HTTPPool, Response
from backends.http.sse import DEFAULT_MAX_EVENT_CHARS, SSEParser
from core.errors import ConfigError, HarnessError
from core.sequences import reconcile_counts
from core.text import valid_text

log = logging.getLogger("harness")

ExtraBody = Callable[[GenerationRequest], dict[str, Any]]


class HTTPStatusError(Exception):
    """The server answered a request with a status other than 200."""

    def __init__(self, status: int, detail: str):
        super().__init__(f"HTTP {status}: {detail}" if detail else f"HTTP {status}")
        self.status = status


class StreamError(Exception):
    """The stream broke its protocol: an error event, bad JSON, or an end before [DONE]."""


# --- backend=openai -----------------------------------------------------------------------


@dataclass
class OpenAIConfig(BackendConfig):
    name: str = "openai"
    mode: str = "remote"  # a server that is already running; nothing is launched
    url: Optional[str] = None  # the API root, e.g. http://127.0.0.1:8000/v1 (required)
    model_name: Optional[str] = None  # the "model" sent; null: the first id of GET /v1/models
    metrics_url: Optional[str] = None  # Prometheus endpoint to scrape: a URL, or a path such as /metrics
    ignore_eos: bool = False  # send ignore_eos + min_tokens for exact lengths (vLLM, SGLang take them)
    extra_body: Optional[str] = None  # a JSON object merged into every request body, e.g. '{"top_k": 20}'

    def validate(self) -> None:
        if self.mode != "remote":
            raise ConfigError(
                "backend=openai talks to a server that is already running (backend.mode=remote); "
                "to launch an engine's server use backend=<engine> backend.mode=server"
            )
        if not self.url:
            raise ConfigError("backend=openai needs backend.url, the API root (e.g. http://127.0.0.1:8000/v1)")
        if urlsplit(self.url).scheme not in ("http", "https") or not urlsplit(self.url).hostname:
            raise ConfigError(f"backend.url must be an http:// or https:// URL (got {public_url(self.url)!r})")
        for field_name in ("url", "metrics_url"):
            refuse_credentials_in_url(f"backend.{field_name}", getattr(self, field_name))
        self.extra_body_dict()
        self.validate_http()

    def extra_body_dict(self) -> dict[str, Any]:
        if not self.extra_body:
            return {}
        try:
            body = json.loads(self.extra_body)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise ConfigError(f"backend.extra_body must be a JSON object (got {self.extra_body!r})")
        return body


# --- the client ---------------------------------------------------------------------------


class OpenAIClient:
    """Streams completions from one OpenAI-compatible server.

    One pool of HTTP/1.1 connections (backends/http/http1.py; unbounded: the runner's concurrency
    bounds the requests in flight) per event loop; it is closed when its loop shuts down.
    """

    def __init__(
        self,
        base_url: str,
        *,
        model_name: str,
        tokenizer: Any,
        endpoint: str = "chat",
        api_key: Optional[str] = None,
        timeout_s: float = 600.0,
        prompt_token_ids: Optional[bool] = None,
        idle_timeout_s: float = 120.0,
        max_event_chars: int = DEFAULT_MAX_EVENT_CHARS,
    ):
        self.base_url = base_url.rstrip("/")
        self.model_name = model_name
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.max_event_chars = max_event_chars
        self.prompt_token_ids = prompt_token_ids  # None: try ids, fall back to text once refused
        self._tokenizer = tokenizer
        self._fast = getattr(tokenizer, "backend_tokenizer", None)
        self._headers = {"Content-Type": "application/json", "Accept": "text/event-stream",
                         "Accept-Encoding": "identity"}  # a compressed stream would be buffered
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._pool: Optional[HTTPPool] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._closer: Optional[asyncio.Task] = None

    # --- tokens ---

    def server_reply_ids(self, ids: list[int], finish_reason: Optional[str]) -> list[int]:
        """The server's own reply ids, less the end-of-sequence token a stop ends with (which
        no engine here counts as output)."""
        if finish_reason == "stop" and ids:
            special = getattr(self._tokenizer, "all_special_ids", None) or ()
            if ids[-1] in special:
                return ids[:-1]
        return ids

    def encode(self, text: str) -> list[int]:
        if self._fast is not None:
            return self._fast.encode(text, add_special_tokens=False).ids
        return list(self._tokenizer(text, add_special_tokens=False)["input_ids"])

    def request_body(self, request: GenerationRequest, chat: bool, extra: dict[str, Any]) -> dict[str, Any]:
        s = request.sampling
        body: dict[str, Any] = {"model": self.model_name}
        if chat:
            body["messages"] = request.messages
        elif self.prompt_token_ids is False:
            body["prompt"] = self._tokenizer.decode(request.prompt_token_ids, skip_special_tokens=False)
        else:
            body["prompt"] = list(request.prompt_token_ids)
        body.update(max_tokens=request.max_new_tokens, temperature=s.temperature, top_p=s.top_p,
                    stream=True, stream_options={"include_usage": True})
        if s.top_k:
            body["top_k"] = s.top_k
        if s.seed is not None:
            body["seed"] = s.seed
        body.update(extra)
        return body

    # --- HTTP ---

    def _pool_for_loop(self) -> HTTPPool:
        loop = asyncio.get_running_loop()
        if self._pool is None or self._loop is not loop or self._pool.closed:
            self._pool = HTTPPool(loop, connect_timeout_s=min(self.timeout_s, 30.0))
            self._loop = loop
            # held here: the loop keeps only a weak reference to its tasks
            self._closer = loop.create_task(_close_when_loop_ends(self._pool))
        return self._pool

    def _read_timeout(self, deadline: float, grace: Optional[float]) -> float:
        """How long the next read may wait: the idle limit (or ``grace``), within the request's."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError()
        return min(grace if grace is not None else self.idle_timeout_s, left)

    def _timed_out(self) -> TimeoutError:
        return TimeoutError(f"no byte for backend.idle_timeout_s={self.idle_timeout_s:g} s, or no complete reply "
                            f"within backend.request_timeout_s={self.timeout_s:g} s")

    async def stream(self, request: GenerationRequest, extra_body: Optional[dict[str, Any]] = None) -> AsyncIterator[StreamEvent]:
        """One request: TokenChunks stamped on receipt, then a RequestDone with the server's text.

        Every chunk that came in one piece of the body (one ``recv``) is handed over as one
        TokenChunk, stamped when its bytes were received (backends/http/http1.py).
        Without ``messages`` (a bare prompt) a chat client falls back to /v1/completions.
        """
        chat = self.endpoint == "chat" and bool(request.messages)
        body = _json_bytes(self.request_body(request, chat, extra_body or {}))
        url = f"{self.base_url}/{'chat/completions' if chat else 'completions'}"
        state = _StreamState()
        retry_as_text = False
        response: Optional[Response] = None
        reuse = False
        deadline = time.monotonic() + self.timeout_s
        try:
            # no redirects: the API key goes to the configured origin and nowhere else
            response = await self._pool_for_loop().request(
                "POST", url, self._headers, body, timeout=min(self.idle_timeout_s, self.timeout_s))
            if response.status != 200:
                error_body = await response.read_bounded(MAX_ERROR_BODY_BYTES, self._read_timeout(deadline, None))
                detail = _error_detail(error_body.decode("utf-8", "replace"))
                if not chat and self.prompt_token_ids is None and response.status in (400, 422):
                    retry_as_text = True  # this server may want the prompt as text
                else:
                    raise HTTPStatusError(response.status, detail)
            else:
                content_type = response.headers.get("content-type", "")
                if not content_type.startswith("text/event-stream"):
                    state.not_sse_hint = f" (Content-Type {content_type or 'missing'}: not an event stream)"
                parser = SSEParser(self.max_event_chars)
                t = time.perf_counter()
                while True:
                    # once the reply has ended, [DONE] (or usage) may follow, or nothing ever
                    grace = FINISHED_GRACE_S if state.finish_reason is not None else None
                    try:
                        got = await response.read(self._read_timeout(deadline, grace))
                    except TimeoutError:
                        if grace is None or time.monotonic() >= deadline:
                            raise
                        state.done = state.no_done_marker = True
                        break
                    if got is None:
                        break
                    t, data = got  # t: when these bytes were received
                    n = state.take(parser.feed_data(data), chat)
                    if n:
                        yield TokenChunk([], t, n_tokens=n, chunks=n)
                    if state.done:
                        break
                if not state.done:
                    n = state.take([event.data for event in parser.close()], chat)
                    if n:
                        yield TokenChunk([], t, n_tokens=n, chunks=n)
            reuse = True
        except TimeoutError:
            raise self._timed_out() from None
        finally:
            if response is not None:
                response.release(reuse)
        if retry_as_text:
            self.prompt_token_ids = False
            log.info("%s refused a prompt of token ids; sending the prompt as text", public_url(url))
            async for event in self.stream(request, extra_body):
                yield event
            return
        if not state.done and state.finish_reason is None:
            raise StreamError("the stream ended before [DONE]" + state.not_sse_hint)
        if not chat and self.prompt_token_ids is None:
            self.prompt_token_ids = True
        yield state.request_done(self, request.max_new_tokens)


class _StreamState:
    """What one stream has said so far.

    Nothing is tokenized while the stream runs (a tokenizer call per chunk delays every
    stream's stamps): each text chunk counts as one token on arrival, and the counts are
    settled once the stream has ended (:meth:`chunk_token_counts`).
    """

    __slots__ = ("reply", "produced", "usage", "finish_reason", "done", "no_done_marker", "not_sse_hint", "server_ids")

    def __init__(self) -> None:
        self.reply: list[str] = []  # content: the reply text
        self.produced: list[str] = []  # one per text chunk: its content and reasoning
        self.usage: Optional[dict[str, Any]] = None
        self.finish_reason: Optional[str] = None
        self.done = False
        self.no_done_marker = False  # the server ended its reply but never sent [DONE]
        self.not_sse_hint = ""
        self.server_ids: Optional[list[int]] = None  # the reply's ids, where the server sends them (vLLM)

    def take(self, datas: list[str], chat: bool) -> int:
        """Take the events of one read; returns how many of them carried text (each one
        token until :meth:`chunk_token_counts` settles the counts)."""
        produced = self.produced
        reply = self.reply
        loads = orjson.loads
        n = 0
        for data in datas:
            if data == "[DONE]" or self.done:
                self.done = True
                break
            try:
                obj = loads(data)
            except orjson.JSONDecodeError:
                obj = _lenient_json(data)  # e.g. a lone surrogate, which orjson refuses and JSON allows
            if type(obj) is not dict:
                raise StreamError(f"unexpected event in the stream: {data[:120]!r}")
            choices = obj.get("choices")
            if not choices:
                self._without_choices(obj, data)
                continue
            if obj.get("usage"):
                self._take_usage(obj["usage"], data)
            if type(choices) is not list:
                raise StreamError(f"choices is not a list of objects: {data[:120]!r}")
            text = ""
            for choice in choices:
                if type(choice) is not dict:
                    raise StreamError(f"choices is not a list of objects: {data[:120]!r}")
                if chat:
                    delta = choice.get("delta") or {}
                    if type(delta) is not dict:
                        raise StreamError(f"delta is not an object: {data[:120]!r}")
                    content = delta.get("content") or ""
                    reasoning = (delta.get("reasoning_content") or delta.get("reasoning") or "") if len(delta) > 1 else ""
                else:
                    content, reasoning = choice.get("text") or "", ""
                if type(content) is not str or type(reasoning) is not str:
                    raise StreamError(f"the token text is not a string: {data[:120]!r}")
                if reasoning:
                    text += reasoning
                if content:
                    text += content
                    reply.append(content)
                if "token_ids" in choice:
                    self._take_ids(choice["token_ids"])
                reason = choice.get("finish_reason")
                if reason:
                    self.finish_reason = reason if type(reason) is str else str(reason)[:100]
            if text:  # role-only, final or empty chunks carry no token
                produced.append(text)
                n += 1
        return n

    def _take_ids(self, ids: Any) -> None:
        if type(ids) is list:
            if self.server_ids is None:
                self.server_ids = []
            self.server_ids.extend(i for i in ids if type(i) is int)

    def _without_choices(self, obj: dict[str, Any], data: str) -> None:
        """A usage-only chunk, an error event, or an empty one."""
        if obj.get("error"):
            raise StreamError(f"the server reported an error mid-stream: {_error_detail(json.dumps(obj))}")
        usage = obj.get("usage")
        if usage:
            self._take_usage(usage, data)
        return None

    def _take_usage(self, usage: Any, data: str) -> None:
        if type(usage) is not dict:
            raise StreamError(f"usage is not an object: {data[:120]!r}")
        self.usage = usage

    def chunk_token_counts(self, client: OpenAIClient, usage_tokens: Optional[int]) -> tuple[list[int], str]:
        """Each text chunk's tokens, and how they were counted.

        - ``usage``: the server's completion tokens equal the chunks: one token each (the
          common case: vLLM, SGLang, TGI stream one token per chunk);
        - ``retokenized``: each chunk's text tokenized (no usage, or several tokens a chunk);
        - ``reconciled``: those counts scaled (largest remainder, at least 1 each) to sum to
          usage, since text split into chunks can tokenize into more tokens than the server
          produced (" t12" is 3 SmolLM2 tokens where the server counted 1).
        """
        n = len(self.produced)
        if usage_tokens == n:
            return [1] * n, "usage"
        counts = [len(client.encode(text)) for text in self.produced]
        total = sum(counts)
        if usage_tokens is None or total == usage_tokens or usage_tokens < n or total == 0:
            return counts, "retokenized"
        return reconcile_counts(counts, usage_tokens), "reconciled"

    def request_done(self, client: OpenAIClient, max_tokens: int) -> RequestDone:
        produced = "".join(self.produced)
        invalid_text = valid_text(produced) is not produced
        if invalid_text:  # a lone surrogate (JSON lets a server send "\ud800"): U+FFFD in its place
            self.produced = [valid_text(text) for text in self.produced]
            self.reply = [valid_text(text) for text in self.reply]
            produced = "".join(self.produced)
        usage = self.usage or {}
        completion = usage.get("completion_tokens")
        token_ids: Optional[list[int]] = None
        token_ids_text: Optional[str] = None
        stats: dict[str, Any] = {"http_chunks": len(self.produced), "output_token_ids_source": "retokenized"}
        if self.server_ids is not None:
            token_ids = client.server_reply_ids(self.server_ids, self.finish_reason)
            stats["output_token_ids_source"] = "server"
        elif completion is None:
            token_ids = client.encode(produced) if produced else []  # the output count, needed now
        else:
            token_ids_text = produced  # the ids only: tokenized after the run
        if self.no_done_marker:
            stats["no_done_marker"] = True
        if invalid_text:
            stats["invalid_text"] = True
        # counts as sent: a count that is not a whole number >= 0 fails its request (harness/results/formulas.py)
        if usage.get("prompt_tokens") is not None:
            stats["prompt_tokens"] = usage["prompt_tokens"]
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        if isinstance(cached, int) and not isinstance(cached, bool) and cached >= 0:
            stats["cached_tokens"] = cached
        if completion is not None:
            stats["output_tokens"] = completion
            if isinstance(completion, (int, float)) and completion > max_tokens:
                raise StreamError(f"usage.completion_tokens is {completion} for max_tokens {max_tokens}")
            stats["output_tokens_source"] = "usage"
        else:
            stats["output_tokens"] = len(token_ids or ())
            stats["output_tokens_source"] = "server" if self.server_ids is not None else "retokenized"
        usage_tokens = completion if type(completion) is int and completion >= 0 else None
        counts, how = self.chunk_token_counts(client, usage_tokens)
        stats["streamed_tokens"] = sum(counts)
        stats["chunk_tokens_source"] = how
        return RequestDone(self.finish_reason or "stop", engine_stats=stats, text="".join(self.reply),
                           chunk_tokens=counts, token_ids=token_ids, token_ids_text=token_ids_text)


def _lenient_json(data: str) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        raise StreamError(f"not JSON in the stream: {data[:120]!r}") from None


async def _close_when_loop_ends(pool: HTTPPool) -> None:
    """Waits forever; asyncio.run cancels it at the end of its loop, which closes the pool."""
    try:
        await asyncio.Event().wait()
    finally:
        pool.close()


def _json_bytes(body: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(body)
    except TypeError:  # what orjson refuses (an int too large, a key that is not a string): the standard module
        return json.dumps(body).encode()


def _error_detail(text: str) -> str:
    """The server's error message, short, from a JSON error body or plain text."""
    try:
        obj = json.loads(text)
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        message = err.get("message") or err.get("detail") if isinstance(err, dict) else err
        text = str(message if message else obj)
    except ValueError:
        pass
    return " ".join(text.split())[:300]


# --- plain HTTP for load-time checks and scrapes ------------------------------------------


# query parameters that carry a credential (api_key, access_token, X-Amz-Signature, sig, …)
_CREDENTIAL_WORDS = ("key", "token", "secret", "password", "passwd", "pwd", "auth", "credential", "signature", "sig")


def _credential_params(query: str) -> list[str]:
    names = [name for name, _ in parse_qsl(query, keep_blank_values=True)]
    return [n for n in names if any(w in n.lower().replace("-", "_") for w in _CREDENTIAL_WORDS)]


def refuse_credentials_in_url(name: str, url: Optional[str]) -> None:
    """A credential in a URL would be written to the run's config and logs: one line, before anything runs."""
    if not url:
        return
    parts = urlsplit(url)
    found = (["user:password"] if parts.username or parts.password else []) + _credential_params(parts.query)
    if found:
        raise ConfigError(
            f"{name} must not carry credentials ({', '.join(found)}): they would be written to the run's "
            "config and logs; put the key in an environment variable and name it with backend.api_key_env"
        )


def public_url(url: str) -> str:
    """The URL without a user:password part or the values of credential-like query
    parameters, fit for logs and results."""
    parts = urlsplit(url)
    secret_params = set(_credential_params(parts.query))
    if parts.username is None and parts.password is None and not secret_params:
        return url
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    query = urlencode([(k, "REDACTED" if k in secret_params else v)
                       for k, v in parse_qsl(parts.query, keep_blank_values=True)])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


class _SameOriginCredentials(urllib.request.HTTPRedirectHandler):
    """Follows redirects, but a redirect to another origin (scheme, host, port) loses the
    Authorization header: the API key is sent to the configured server alone."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001 - urllib's signature
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


# after a chunk with finish_reason, the stream is taken as ended when nothing more comes for
# this long (a server that never sends [DONE] and keeps the connection open)
FINISHED_GRACE_S = 2.0
# what is read of an error body (HTTP status other than 200): its message is cut to 300
# characters anyway, and a server must not make the client hold megabytes
MAX_ERROR_BODY_BYTES = 64 * 1024


def client_limits(cfg: Any) -> dict[str, Any]:
    """The per-request limits of a backend config, as OpenAIClient keywords."""
    return {"idle_timeout_s": cfg.idle_timeout_s, "max_event_chars": int(cfg.max_event_mib * 2**20)}


def http_get(url: str, headers: Optional[dict[str, str]] = None, timeout_s: float = 10.0,
             method: str = "GET", max_bytes: int = 64 * 2**20) -> tuple[int, str, dict[str, str]]:
    """(status, body, headers) of a GET (or a bodiless ``method``); raises OSError (URLError)
    when nothing answers. The body is cut at ``max_bytes`` (error bodies at MAX_ERROR_BODY_BYTES)."""
    req = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with _opener_for(url).open(req, timeout=timeout_s) as response:
            return response.status, response.read(max_bytes).decode("utf-8", "replace"), dict(response.headers)
    except urllib.error.HTTPError as exc:
        body = exc.read(min(max_bytes, MAX_ERROR_BODY_BYTES)).decode("utf-8", "replace") if exc.fp else ""
        return exc.code, body, dict(exc.headers or {})


def check_server(base_url: str, api_key: Optional[str], api_key_env: Optional[str], timeout_s: float = 10.0) -> tuple[list[str], str]:
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
        hint = (f"check the key in ${api_key_env}" if api_key_env
                else "set backend.api_key_env to the name of the environment variable that holds the key")
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


# --- a backend over HTTP --------------------------------------------------------------------


class HTTPBackend(Backend):
    """A backend that streams from an OpenAI-compatible server through :class:`OpenAIClient`."""

    extra = ""
    client: Optional[OpenAIClient] = None
    metrics_url: Optional[str] = None
    _tokenizer: Any = None

    def get_tokenizer(self) -> Any:
        if self._tokenizer is None:
            self._tokenizer = super().get_tokenizer()
        return self._tokenizer

    def api_key(self) -> Optional[str]:
        env = self.config.api_key_env
        return os.environ.get(env) if env else None

    def extra_body(self, request: GenerationRequest) -> dict[str, Any]:
        return {}

    def stream(self, request: GenerationRequest) -> AsyncIterator[StreamEvent]:
        """The client's own stream, handed on as it is (one async generator less per chunk)."""
        if self.client is None:
            raise RuntimeError("the backend is not loaded")
        return self.client.stream(request, self.extra_body(request))

    def engine_process(self) -> Optional[int]:
        return None  # a server elsewhere (backend=openai); ServerBackend knows the one it launched

    def scrape_metrics(self) -> Optional[str]:
        if not self.metrics_url:
            return None
        status, body, _ = http_get(self.metrics_url, timeout_s=10.0)
        if status != 200:
            raise HarnessError(f"{public_url(self.metrics_url)} answered HTTP {status}")
        return body


@backend_registry.register("openai", OpenAIConfig)
class OpenAIBackend(HTTPBackend):
    """Any OpenAI-compatible server that is already running (nothing is launched or stopped)."""

    config: OpenAIConfig
    _server_header = ""

    def load(self) -> None:
        cfg = self.config
        base = cfg.url.rstrip("/")
        key = self.api_key()
        ids, self._server_header = check_server(base, key, cfg.api_key_env)
        model_name = cfg.model_name or (ids[0] if ids else self.model.name)
        self.client = OpenAIClient(base, model_name=model_name, tokenizer=self.get_tokenizer(),
                                   endpoint=cfg.endpoint, api_key=key, timeout_s=cfg.request_timeout_s,
                                   **client_limits(cfg))
        if cfg.metrics_url:
            root = urlsplit(base)
            self.metrics_url = (cfg.metrics_url if "://" in cfg.metrics_url
                                else urlunsplit((root.scheme, root.netloc, cfg.metrics_url, "", "")))

    def extra_body(self, request: GenerationRequest) -> dict[str, Any]:
        body = self.config.extra_body_dict()
        if self.config.ignore_eos and request.exact_output_len:
            body.update(ignore_eos=True, min_tokens=request.max_new_tokens)
        return body

    @property
    def engine_name(self) -> str:
        return "openai-compatible server"

    @property
    def engine_version(self) -> str:
        return self._server_header or "unknown"

    def engine_info(self) -> dict[str, Any]:
        cfg = self.config
        return {
            "url": public_url(cfg.url or ""),
            "model_name": self.client.model_name if self.client else cfg.model_name,
            "endpoint": cfg.endpoint,
            "api_key_env": cfg.api_key_env,  # the variable's name, never its value
            "metrics_url": public_url(self.metrics_url) if self.metrics_url else None,
        }
