"""``backend=openai``: any running OpenAI-compatible server; and the streaming client that
every server backend (``backend.mode=server``) uses.

    python -m harness backend=openai backend.url=http://127.0.0.1:8000/v1 backend.api_key_env=MY_KEY

The client streams ``/v1/chat/completions`` (``messages``: the server renders its own chat
template) or ``/v1/completions`` (``prompt``: the harness's rendered prompt, as token ids
where the server takes them, else as text), always with
``stream_options.include_usage``. Timing: a request's clock starts in the runner just
before the request goes out; each chunk is stamped with the ``time.perf_counter()`` at which
the bytes that carry it were received, in the connection's ``data_received`` callback
(``backends/http/http1.py``), before its server-sent events are parsed (``backends/http/sse.py``).
Counting:

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

Why our own and not the ``openai`` package's client: that one streams through httpx, whose
bytes are stamped only when the reading task runs (30–47 ms late at p99 with 32 streams here)
and which costs 2.3–2.5 times our CPU per streamed token at 32 streams
(``benchmarks/http_client.py``; the figures are in backends/http/http1.py's docstring); and it
builds a pydantic model of each event, where the timing path needs one ``orjson.loads``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Optional

import orjson

from backends.base import GenerationRequest, StreamEvent
from backends.http.engine_timings import EngineTimings
from backends.http.http1 import HTTPPool, Response
from backends.http.probe import MAX_ERROR_BODY_BYTES
from backends.http.sse import DEFAULT_MAX_EVENT_CHARS, SSEParser
from backends.http.urls import public_url
from core.sequences import reconcile_counts
from core.text import valid_text
from core.types import RequestDone, TokenChunk

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
        self._headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
            "Accept-Encoding": "identity",
        }  # a compressed stream would be buffered
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._pool: Optional[HTTPPool] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._closer: Optional[asyncio.Task] = None

    def __getstate__(self) -> dict[str, Any]:
        """A copy or a pickle (a client on another host) leaves the connection pool behind: it is
        bound to this process's event loop, and the copy opens its own on its loop."""
        state = dict(self.__dict__)
        state.update(_pool=None, _loop=None, _closer=None)
        return state

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
        body.update(
            max_tokens=request.max_new_tokens,
            temperature=s.temperature,
            top_p=s.top_p,
            stream=True,
            stream_options={"include_usage": True},
        )
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
        return TimeoutError(
            f"no byte for backend.idle_timeout_s={self.idle_timeout_s:g} s, or no complete reply "
            f"within backend.request_timeout_s={self.timeout_s:g} s"
        )

    async def stream(
        self, request: GenerationRequest, extra_body: Optional[dict[str, Any]] = None
    ) -> AsyncIterator[StreamEvent]:
        """One request: TokenChunks stamped on receipt, then a RequestDone with the server's text.

        Every chunk that came in one piece of the body (one ``recv``) is handed over as one
        TokenChunk, stamped when its bytes were received (backends/http/http1.py).
        Without ``messages`` (a bare prompt) a chat client falls back to /v1/completions.
        """
        chat = self.endpoint == "chat" and bool(request.messages)
        body = _json_bytes(self.request_body(request, chat, extra_body or {}))
        url = f"{self.base_url}/{'chat/completions' if chat else 'completions'}"
        state = _StreamState()
        state.tools_sent = chat and bool(request.tools)
        retry_as_text = False
        response: Optional[Response] = None
        reuse = False
        deadline = time.monotonic() + self.timeout_s
        try:
            # no redirects: the API key goes to the configured origin and nowhere else
            response = await self._pool_for_loop().request(
                "POST", url, self._headers, body, timeout=min(self.idle_timeout_s, self.timeout_s)
            )
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
                state.phases = _phases(response, t)
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

    __slots__ = (
        "reply",
        "produced",
        "usage",
        "finish_reason",
        "done",
        "no_done_marker",
        "not_sse_hint",
        "server_ids",
        "reasoning",
        "first_answer",
        "engine",
        "phases",
        "tool_calls",
        "tools_sent",
    )

    def __init__(self) -> None:
        self.reply: list[str] = []  # content: the reply text
        self.produced: list[str] = []  # one per text chunk: its content and reasoning
        self.usage: Optional[dict[str, Any]] = None
        self.finish_reason: Optional[str] = None
        self.done = False
        self.no_done_marker = False  # the server ended its reply but never sent [DONE]
        self.not_sse_hint = ""
        self.server_ids: Optional[list[int]] = None  # the reply's ids, where the server sends them (vLLM)
        self.reasoning: list[str] = []  # reasoning deltas (``reasoning``, ``reasoning_content``)
        self.first_answer: Optional[int] = None  # index in ``produced`` of the first chunk with answer text
        self.engine = EngineTimings()  # the server's own per-request figures (vLLM metrics, llama-server timings)
        self.phases: Optional[dict[str, float]] = None
        # streamed tool calls (delta.tool_calls), by their index: {"name", "arguments": [pieces]}
        self.tool_calls: dict[int, dict[str, Any]] = {}
        self.tools_sent = False  # the request defined tools: the reply's calls go into RequestDone

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
                    reasoning = (
                        (delta.get("reasoning_content") or delta.get("reasoning") or "")
                        if len(delta) > 1 or not content
                        else ""
                    )
                    if not content and delta.get("tool_calls"):  # a tool call's pieces: output tokens, not text
                        text += self._take_tool_calls(delta["tool_calls"], data)
                else:
                    content, reasoning = choice.get("text") or "", ""
                if type(content) is not str or type(reasoning) is not str:
                    raise StreamError(f"the token text is not a string: {data[:120]!r}")
                if reasoning:
                    text += reasoning
                    self.reasoning.append(reasoning)
                if content:
                    text += content
                    reply.append(content)
                    if self.first_answer is None:
                        self.first_answer = len(produced)
                if "token_ids" in choice:
                    self._take_ids(choice["token_ids"])
                reason = choice.get("finish_reason")
                if reason:
                    self.finish_reason = reason if type(reason) is str else str(reason)[:100]
            if self.finish_reason is not None:  # llama-server: timings on the finish chunk without usage
                self.engine.take(obj)
            if text:  # role-only, final or empty chunks carry no token
                produced.append(text)
                n += 1
        return n

    def _take_tool_calls(self, calls: Any, data: str) -> str:
        """Collect streamed tool-call deltas (OpenAI's form: the first of a call carries its id and
        function name, the rest pieces of its arguments); returns the text they carried."""
        if type(calls) is not list:
            raise StreamError(f"tool_calls is not a list: {data[:120]!r}")
        text = ""
        for call in calls:
            if type(call) is not dict:
                raise StreamError(f"a tool call is not an object: {data[:120]!r}")
            index = call.get("index", len(self.tool_calls))
            entry = self.tool_calls.setdefault(
                index if type(index) is int else len(self.tool_calls), {"name": None, "arguments": []}
            )
            function = call.get("function") or {}
            if type(function) is not dict:
                raise StreamError(f"a tool call's function is not an object: {data[:120]!r}")
            if function.get("name"):
                entry["name"] = str(function["name"])
                text += entry["name"] if not entry["arguments"] else ""
            piece = function.get("arguments")
            if piece:
                piece = piece if type(piece) is str else json.dumps(piece)  # some servers send an object
                entry["arguments"].append(piece)
                text += piece
        return text

    def calls(self) -> Optional[list[dict[str, Any]]]:
        """The reply's tool calls ([{name, arguments}], arguments the JSON text) where the request
        defined tools, [] when none came; None without tools."""
        if not self.tools_sent:
            return None
        return [{"name": c["name"], "arguments": "".join(c["arguments"])} for _, c in sorted(self.tool_calls.items())]

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
        self.engine.take(obj)  # vLLM's metrics, llama-server's timings: on the last chunk
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
        stats.update(self.engine.stats)
        if "cached_tokens" not in stats and "llama_server_cache_n" in stats:
            stats["cached_tokens"] = stats["llama_server_cache_n"]
        return RequestDone(
            self.finish_reason or "stop",
            engine_stats=stats,
            text="".join(self.reply),
            chunk_tokens=counts,
            token_ids=token_ids,
            token_ids_text=token_ids_text,
            first_answer_chunk=self.first_answer,
            reasoning_tokens=self.reasoning_tokens(client, usage),
            http_phases=self.phases,
            tool_calls=self.calls(),
        )

    def reasoning_tokens(self, client: OpenAIClient, usage: dict[str, Any]) -> Optional[int]:
        """The server's ``usage.completion_tokens_details.reasoning_tokens``, else the reasoning
        text re-tokenized; 0 when the stream sent no reasoning."""
        details = usage.get("completion_tokens_details")
        told = details.get("reasoning_tokens") if isinstance(details, dict) else None
        if isinstance(told, int) and not isinstance(told, bool) and told >= 0 and (told or not self.reasoning):
            return told
        return len(client.encode("".join(self.reasoning))) if self.reasoning else 0


def _phases(response: Response, last_t: float) -> dict[str, float]:
    """The request's HTTP phases (``RequestDone.http_phases``); ``last_t``: the last piece read,
    where the client stopped reading before the body's end (after ``[DONE]``)."""
    phases = {"sent": response.sent_t, "first_byte": response.first_byte_t, "last_byte": response.last_byte_t or last_t}
    if response.connect_start is not None:
        phases["connect_start"], phases["connect_end"] = response.connect_start, response.connect_end
    return {k: v for k, v in phases.items() if v is not None}


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


# after a chunk with finish_reason, the stream is taken as ended when nothing more comes for
# this long (a server that never sends [DONE] and keeps the connection open)
FINISHED_GRACE_S = 2.0


def client_limits(cfg: Any) -> dict[str, Any]:
    """The per-request limits of a backend config, as OpenAIClient keywords."""
    return {"idle_timeout_s": cfg.idle_timeout_s, "max_event_chars": int(cfg.max_event_mib * 2**20)}


# --- a backend over HTTP --------------------------------------------------------------------
