"""A reference OpenAI-compatible streaming server that emits tokens on a known schedule.

It checks the harness itself: the client's timing against a schedule known in advance,
the harness's own overhead, and the HTTP path of every server preset (``--dialect``
imitates the stream of vLLM/OpenAI, SGLang, mlx_lm.server, llama_cpp.server, TGI,
trtllm-serve, DeepSpeed-MII and Ollama: see :data:`DIALECTS`).

    python -m harness.reference_server --port 8000 --ttft-ms 50 --itl-ms 10 --tokens 64

The schedule of a request that arrives at t₀ (when the kernel received its first bytes, as
the HTTP layer, refserver/http_server.py, stamps it: not when the server got round to it), in
seconds:

    due(k) = t₀ + ttft + k · itl + jitter(k),   k = 0 … n − 1,   jitter(k) ~ U(−j, +j)

Each token is sent at its absolute deadline (never by sleeping fixed amounts one after
another, which would accumulate the wake-up delays), by a timer thread that wakes the event
loop with sub-millisecond precision, and written at once (TCP_NODELAY, one chunk per event).
With ``--chunk-tokens K`` tokens go out K at a time, at the deadline of the last one.

Length: ``--tokens`` is the natural length of a reply (it ends with finish_reason "stop",
like a model emitting end-of-sequence); ``max_tokens`` caps it (finish_reason "length"),
and ``ignore_eos`` or ``min_tokens`` in the request make it exactly ``max_tokens``. The
token text is common English words, each a single token (with its leading space) for
SmolLM2's tokenizer and other GPT-2-style BPE vocabularies, so re-tokenizing the reply
gives the count back. With ``--tokenizer DIR`` the prompt is counted with that tokenizer
(and its chat template for chat requests); without it, prompt token counts are estimates.

Faults (``--error-kind``, on a share ``--error-rate`` of the requests, seeded) imitate a
server that misbehaves, one way each (see :data:`FAULTS`); the fault-injection suite
(tests/test_faults.py) runs the harness against every one of them.
``GET /reference/requests`` lists what the server received (path, Host, whether an
Authorization header came), never a key.

``--metrics`` serves ``/metrics`` in Prometheus text with vLLM-style histograms of what it
served (``sglang:`` names for ``--dialect sglang``), plus
``reference:token_lateness_seconds`` (write time − due time: the server's own error).
"""
from __future__ import annotations

import argparse
import asyncio
import heapq
import itertools
import json
import os
import random
import signal
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Optional

from refserver.http_server import Request, Response, StreamResponse, json_response, start_server



@dataclass(frozen=True)
class Dialect:
    """How one server family streams (what a client has to cope with)."""

    # chat: "empty" (a first chunk of role + "" content) | "bare" (a first chunk of role only) |
    # "every" (role in every delta) | "first" (role in the first token's delta) | None
    role_chunk: Optional[str]
    # "chunk": a chunk with choices [] when stream_options.include_usage | "final": on the
    # finish chunk, always | "zeroed": zeros on every chunk, then the "chunk" one | None: never
    usage: Optional[str]
    finish_on_last_token: bool  # finish_reason rides on the last token's chunk (else an empty final chunk)
    comment: Optional[str]  # "keepalive" (": keepalive 0/N" first) | "ping" (": ping - <time>") | "empty" (":") | None
    health: Optional[str]  # the health path (None: clients poll /v1/models)
    # more fields: "matched_stop" (SGLang: matched_stop, reasoning_content null) | "stop_reason"
    # (trtllm-serve: stop_reason and more, null fields dropped in chat, reasoning_content "", cached_tokens)
    extras: Optional[str]
    metrics_prefix: str
    token_id_prompts: bool  # /v1/completions takes a list of token ids (else HTTP 422)
    stop_finish: str = "stop"  # finish_reason of a reply that ended by itself
    open_finish: Optional[str] = None  # finish_reason of the chunks before the last
    errors: str = "openai"  # {"error": {message, type, code}} | "flat": {"error": message, "error_type"} |
    #                         "object": {"object": "error", message, type, code} (FastChat, old vLLM)
    completions: tuple[tuple[str, Any], ...] = ()  # fields that differ on /v1/completions

    def on(self, chat: bool) -> "Dialect":
        """The dialect of one endpoint."""
        return self if chat or not self.completions else replace(self, **dict(self.completions))


DIALECTS: dict[str, Dialect] = {
    # vLLM and OpenAI
    "openai": Dialect("empty", "chunk", True, None, "/health", None, "vllm", True),
    "sglang": Dialect("empty", "chunk", False, None, "/health", "matched_stop", "sglang", True),
    # mlx_lm.server: keep-alive comments while the prompt is processed
    "mlx": Dialect(None, "chunk", False, "keepalive", "/health", None, "vllm", False),
    # llama_cpp.server: no usage, no /health, text prompts only
    "llamacpp": Dialect("bare", None, False, "ping", None, None, "vllm", False),
    # TGI's router (router/src/chat.rs, server.rs): role in every delta, axum's ":" keep-alives,
    # errors {"error": "…", "error_type": "…"}; /v1/completions: finish_reason "" until the last
    # chunk, which carries "eos_token" (or "length") and the usage, asked for or not
    "tgi": Dialect("every", "chunk", True, "empty", "/health", None, "vllm", False, errors="flat",
                   completions=(("usage", "final"), ("stop_finish", "eos_token"), ("open_finish", ""))),
    # trtllm-serve (tensorrt_llm/serve/postprocess_handlers.py): a role-only first chunk, chat
    # choices without null fields, reasoning_content "" in each delta, stop_reason, cached_tokens
    "tensorrt_llm": Dialect("bare", "chunk", True, None, "/health", "stop_reason", "vllm", True, errors="object"),
    # DeepSpeed-MII's openai_api_server (FastChat's): a role-only first chunk, never any usage
    "deepspeed_mii": Dialect("bare", None, True, None, "/health", None, "vllm", False, errors="object"),
    # Ollama's OpenAI layer (openai/openai.go, middleware/openai.go): role in the first token's
    # delta, finish_reason in a chunk of its own with delta {}; /v1/completions: finish_reason on
    # the last token, and a zeroed usage on every chunk before the real one
    "ollama": Dialect("first", "chunk", False, None, "/api/version", None, "vllm", False,
                      completions=(("finish_on_last_token", True), ("usage", "zeroed"))),
}

# Each is one token, with its leading space, for SmolLM2's tokenizer (tests check this).
WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there one all we their been has when who will more if no "
    "out so said what up its about into than them can only other new some could time these two "
    "may then do first any my now such like our over man me even most made after also did many "
    "before must through back years where much your way well down should because each just those "
    "people how too little state good very make world still own see men work long get here "
    "between both life being under never day same another know while last might us great old "
    "year off come since against go came right used take three"
).split()


def word(request_index: int, k: int) -> str:
    """The k-th token's text of a request: deterministic, so replies are reproducible."""
    return " " + WORDS[(request_index * 31 + k * 7) % len(WORDS)]


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
FOREVER_S = 3600.0


@dataclass
class Settings:
    ttft_ms: float = 50.0
    itl_ms: float = 10.0
    tokens: int = 64
    jitter_ms: float = 0.0
    error_rate: float = 0.0
    error_kind: str = "status"  # one of FAULTS
    fault_size_mib: float = 32.0  # huge-event, huge-error-body
    seed: int = 0
    dialect: str = "openai"
    metrics: bool = False
    exit_after: Optional[int] = None  # exit (code 3) when request exit_after + 1 arrives
    chunk_tokens: int = 1
    model_name: str = "reference"
    api_key_env: Optional[str] = None  # require "Authorization: Bearer $VAR" on /v1/*
    startup_delay_s: float = 0.0  # /health answers 503 for this long
    tokenizer: Optional[str] = None
    timer: str = "thread"  # thread: sub-millisecond wake-ups | asyncio: the event loop's own timers


# --- timing -----------------------------------------------------------------------------


class PreciseTimer:
    """Wakes coroutines at absolute ``perf_counter`` deadlines, to ~0.1 ms.

    asyncio's timers wake up to 1 ms late (epoll's timeout is whole milliseconds, rounded
    up). Here one thread sleeps on a condition variable with a sub-millisecond timeout and
    wakes the loop through ``call_soon_threadsafe``.

    Waking an idle loop takes time of its own (the self-pipe, epoll, a thread switch: about
    0.5 ms on a small machine), so the thread hands each deadline over that much early — the
    loop's recent hand-over delay, a moving median-like estimate capped at ``MAX_LEAD_S`` — and
    the loop waits out what is left by checking the clock between its other callbacks (never
    by spinning, which would hold up the other streams). A busy loop takes its callbacks late
    anyway, and then nothing is left to wait.
    """

    MAX_LEAD_S = 0.001

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._heap: list[tuple[float, int, asyncio.Future]] = []
        self._seq = itertools.count()
        self._cv = threading.Condition()
        self._lead_s = 0.0  # how early deadlines are handed to the loop (its recent hand-over delay)
        threading.Thread(target=self._run, name="reference-timer", daemon=True).start()

    async def sleep_until(self, deadline: float) -> None:
        if deadline <= time.perf_counter():
            return
        future = self._loop.create_future()
        with self._cv:
            heapq.heappush(self._heap, (deadline, next(self._seq), future))
            if self._heap[0][2] is future:  # a later deadline: the thread's own wait covers it
                self._cv.notify()
        await future

    def _run(self) -> None:
        with self._cv:
            while True:
                if not self._heap:
                    self._cv.wait()
                    continue
                now = time.perf_counter()
                delay = self._heap[0][0] - self._lead_s - now
                if delay > 0:
                    self._cv.wait(delay)
                    continue
                # every deadline due by now goes in one hand-over: streams started together
                # share deadlines, and each wake-up of the loop costs a self-pipe write
                due = []
                while self._heap and self._heap[0][0] - self._lead_s <= now:
                    deadline, _, future = heapq.heappop(self._heap)
                    due.append((future, deadline))
                self._loop.call_soon_threadsafe(self._wake, due, now)

    def _wake(self, due: list[tuple[asyncio.Future, float]], handed_at: float) -> None:
        now = time.perf_counter()
        # step the estimate a tenth of the way: one slow hand-over does not move it much
        delay = min(now - handed_at, self.MAX_LEAD_S)
        self._lead_s += (delay - self._lead_s) * 0.1
        for future, deadline in due:
            self._due(future, deadline)

    def _due(self, future: asyncio.Future, deadline: float) -> None:
        if time.perf_counter() < deadline:  # woken early on purpose: check again after the loop's other work
            self._loop.call_soon(self._due, future, deadline)
        elif not future.done():
            future.set_result(None)


class LoopTimer:
    """The event loop's own timers (for comparison: up to 1 ms late)."""

    async def sleep_until(self, deadline: float) -> None:
        delay = deadline - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)


# --- Prometheus ---------------------------------------------------------------------------

TTFT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.02, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0)
E2E_BUCKETS = (0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 30.0, 60.0)
LATENESS_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1)


class PromHistogram:
    def __init__(self, name: str, help_text: str, bounds: tuple[float, ...]):
        self.name, self.help, self.bounds = name, help_text, bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float, times: int = 1) -> None:
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += times
                break
        else:
            self.counts[-1] += times
        self.sum += value * times
        self.count += times

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        cumulative = 0
        for bound, n in zip(self.bounds, self.counts):
            cumulative += n
            lines.append(f'{self.name}_bucket{{le="{bound}",model_name="reference"}} {cumulative}')
        lines.append(f'{self.name}_bucket{{le="+Inf",model_name="reference"}} {self.count}')
        lines.append(f'{self.name}_sum{{model_name="reference"}} {self.sum!r}')
        lines.append(f'{self.name}_count{{model_name="reference"}} {self.count}')
        return lines


class ServedMetrics:
    """What the server served, in the names vLLM (or SGLang) uses."""

    def __init__(self, prefix: str):
        p = prefix
        self.ttft = PromHistogram(f"{p}:time_to_first_token_seconds", "Time to first token (server side)", TTFT_BUCKETS)
        self.itl = PromHistogram(f"{p}:inter_token_latency_seconds", "Gap between tokens written", ITL_BUCKETS)
        self.e2e = PromHistogram(f"{p}:e2e_request_latency_seconds", "Arrival to last token", E2E_BUCKETS)
        self.queue = PromHistogram(f"{p}:request_queue_time_seconds", "Time queued (always 0 here)", TTFT_BUCKETS)
        self.lateness = PromHistogram("reference:token_lateness_seconds", "Write time minus due time", LATENESS_BUCKETS)
        self.prefix = p
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.requests_ok = 0
        self.running = 0

    def render(self) -> str:
        p = self.prefix
        lines: list[str] = []
        for h in (self.ttft, self.itl, self.e2e, self.queue, self.lateness):
            lines += h.render()
        for name, value in ((f"{p}:prompt_tokens", self.prompt_tokens), (f"{p}:generation_tokens", self.generation_tokens),
                            (f"{p}:request_success", self.requests_ok)):
            lines += [f"# TYPE {name} counter", f'{name}_total{{model_name="reference"}} {value}']
        lines += [f"# TYPE {p}:num_requests_running gauge", f'{p}:num_requests_running{{model_name="reference"}} {self.running}']
        return "\n".join(lines) + "\n"


# --- the server ---------------------------------------------------------------------------


class ReferenceServer:
    def __init__(self, settings: Settings):
        self.s = settings
        self.rng = random.Random(settings.seed)
        self.requests = 0
        self.started = time.perf_counter()
        self.dialect = DIALECTS[settings.dialect]
        self.metrics = ServedMetrics(self.dialect.metrics_prefix)
        self.timer: Any = None
        self._tokenizer = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reference-tokenizer")
        self._expected_key = os.environ.get(settings.api_key_env, "") if settings.api_key_env else None
        self.received: list[dict[str, Any]] = []  # GET /reference/requests
        self._routes = self.routes()
        if settings.tokenizer:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(settings.tokenizer)

    def routes(self) -> dict[str, tuple[str, Any]]:
        """Path → (method, handler)."""
        routes: dict[str, tuple[str, Any]] = {
            "/v1/models": ("GET", self.models),
            "/reference/requests": ("GET", self.requests_received),
            "/v1/chat/completions": ("POST", self.chat),
            "/v1/completions": ("POST", self.completions),
        }
        if self.dialect.health:
            routes[self.dialect.health] = ("GET", self.health)
        if self.s.metrics:
            routes["/metrics"] = ("GET", self.prometheus)
        return routes

    def start_timer(self) -> None:
        self.timer = PreciseTimer(asyncio.get_running_loop()) if self.s.timer == "thread" else LoopTimer()

    async def handle(self, request: Request) -> Any:
        route = self._routes.get(request.path)
        if route is None:
            return Response(status=404, text="404: Not Found")
        method, handler = route
        if request.method != method:
            return Response(status=405, text="405: Method Not Allowed", headers={"Allow": method})
        return await handler(request)

    # --- endpoints ---

    async def health(self, request: Request) -> Response:
        if time.perf_counter() - self.started < self.s.startup_delay_s:
            return json_response({"status": "starting"}, status=503)
        return Response(text="ok")

    async def models(self, request: Request) -> Response:
        self._log(request)
        if time.perf_counter() - self.started < self.s.startup_delay_s:
            return self._error(503, "starting", "server_error")
        if self.s.error_kind == "redirect" and self.s.error_rate > 0:
            redirect = self._redirect(request)
            if redirect is not None:
                return redirect
        if not self._authorized(request):
            return self._error(401, "invalid API key", "authentication_error")
        return json_response(
            {"object": "list", "data": [{"id": self.s.model_name, "object": "model", "owned_by": "reference"}]}
        )

    async def requests_received(self, request: Request) -> Response:
        return json_response(self.received)

    def _log(self, request: Request) -> None:
        self.received.append({"method": request.method, "path": request.path, "host": request.host,
                              "authorization": "Authorization" in request.headers})

    @staticmethod
    def _redirect(request: Request) -> Optional[Response]:
        """307 to this server under the other loopback name: the same server, another origin."""
        host, _, port = request.host.rpartition(":")
        if host != "127.0.0.1":  # already under the other name: served
            return None
        return Response(status=307, headers={"Location": f"http://localhost:{port}{request.path_qs}"})

    async def prometheus(self, request: Request) -> Response:
        return Response(text=self.metrics.render(), content_type="text/plain")

    async def chat(self, request: Request) -> StreamResponse:
        return await self._generate(request, chat=True)

    async def completions(self, request: Request) -> StreamResponse:
        return await self._generate(request, chat=False)

    # --- one request ---

    async def _generate(self, request: Request, chat: bool) -> StreamResponse:
        arrival = request.arrival  # when the kernel received its first bytes
        self._log(request)
        self.requests += 1
        index = self.requests
        if self.s.exit_after is not None and index > self.s.exit_after:
            print(f"reference server: exiting at request {index} (--exit-after {self.s.exit_after})", flush=True)
            os._exit(3)
        if not self._authorized(request):
            return self._error(401, "invalid API key", "authentication_error")
        try:
            body = await request.json()
        except ValueError:
            return self._error(400, "the body is not JSON", "invalid_request_error")
        if chat and not isinstance(body.get("messages"), list):
            return self._error(400, "messages is required", "invalid_request_error")
        if not chat and "prompt" not in body:
            return self._error(400, "prompt is required", "invalid_request_error")
        if not chat and not self.dialect.token_id_prompts and not isinstance(body["prompt"], str):
            return self._error(422, "prompt must be a string", "invalid_request_error")
        fault = self.s.error_kind if self.s.error_rate > 0 and self.rng.random() < self.s.error_rate else None
        if fault == "status":
            return self._error(500, "reference server: injected error (--error-rate)", "server_error")
        if fault == "bad-unicode":  # json.dumps would escape it validly: written by hand
            body = '{"error": {"message": "injected \\ud800 error", "type": "server_error", "code": 500}}'
            return Response(status=500, text=body, content_type="application/json")
        if fault == "huge-error-body":
            return Response(status=500, body=b"x" * int(self.s.fault_size_mib * 2**20), content_type="text/plain")
        if fault == "not-sse":
            return Response(status=200, text="<html><body>502 Bad Gateway</body></html>", content_type="text/html")
        if fault == "redirect":
            redirect = self._redirect(request)
            if redirect is not None:
                return redirect
        n = self._length(body)
        due = self._schedule(arrival, n)
        if self._tokenizer is not None:  # a chat template takes milliseconds: off the event loop
            prompt_tokens = asyncio.get_running_loop().run_in_executor(self._pool, self._count_prompt, body, chat)
        else:
            prompt_tokens = asyncio.get_running_loop().create_future()
            prompt_tokens.set_result(self._count_prompt(body, chat))
        self.metrics.running += 1
        try:
            if body.get("stream"):
                return await self._stream(request, body, chat, index, n, due, prompt_tokens, arrival, fault)
            return await self._whole(body, chat, index, n, due, prompt_tokens, arrival)
        finally:
            self.metrics.running -= 1

    def _length(self, body: dict) -> int:
        cap = body.get("max_tokens", body.get("max_completion_tokens"))
        exact = bool(body.get("ignore_eos")) or bool(body.get("min_tokens"))
        if cap is None:
            return self.s.tokens
        return int(cap) if exact else min(int(cap), self.s.tokens)

    def _schedule(self, arrival: float, n: int) -> list[float]:
        """Absolute due times: arrival + ttft + k·itl + U(−jitter, +jitter), never decreasing."""
        ttft, itl, jitter = self.s.ttft_ms / 1e3, self.s.itl_ms / 1e3, self.s.jitter_ms / 1e3
        due, last = [], arrival
        for k in range(n):
            t = arrival + ttft + k * itl + (self.rng.uniform(-jitter, jitter) if jitter else 0.0)
            last = max(last, t)
            due.append(last)
        return due

    def _count_prompt(self, body: dict, chat: bool) -> int:
        tok = self._tokenizer
        if chat:
            messages = body["messages"]
            if tok is not None:
                text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
                return len(tok(text, add_special_tokens=False)["input_ids"])
            return sum(len(str(m.get("content", "")).split()) for m in messages)
        prompt = body["prompt"]
        if isinstance(prompt, list) and (not prompt or isinstance(prompt[0], int)):
            return len(prompt)
        if isinstance(prompt, list):
            prompt = prompt[0]
        if tok is not None:
            return len(tok(prompt, add_special_tokens=False)["input_ids"])
        return len(str(prompt).split())

    def _finish_reason(self, body: dict, n: int) -> str:
        return "stop" if n == self.s.tokens and n != body.get("max_tokens") else "length"

    async def _stream(self, request, body, chat, index, n, due, prompt_tokens, arrival, fault) -> StreamResponse:
        dialect = self.dialect.on(chat)
        response = StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:16]}"
        created = int(time.time())
        base = {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion",
                "created": created, "model": body.get("model") or self.s.model_name}
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        finish: Any = self._finish_reason(body, n)
        if finish == "stop":
            finish = dialect.stop_finish
        trtllm = dialect.extras == "stop_reason"

        def event(choices: list, **extra: Any) -> bytes:
            return b"data: " + json.dumps({**base, "choices": choices, **extra}, separators=(",", ":")).encode() + b"\n\n"

        async def write(data: bytes) -> None:
            if fault == "byte-drip":
                for i in range(len(data)):
                    await response.write(data[i:i + 1])
            else:
                await response.write(data)

        def choice(text: Optional[str], reason: Optional[str], role: bool = False) -> dict:
            if not chat:
                c: dict[str, Any] = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": reason}
                if trtllm:
                    c.update(token_ids=None, stop_reason=None, avg_decoded_tokens_per_iter=None)
                return c
            delta: dict[str, Any] = {}
            if role:
                delta["role"] = "assistant"
            if text is not None:
                delta["content"] = text
            if dialect.extras == "matched_stop":
                delta["reasoning_content"] = None
            elif trtllm and text is not None:
                delta["reasoning_content"] = ""
            c = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
            if dialect.extras == "matched_stop":
                c["matched_stop"] = (2 if reason == "stop" else None) if reason else None
            if trtllm:  # its chat chunks are dumped with exclude_none
                c = {k: v for k, v in c.items() if v is not None}
            return c

        def usage_of(n_prompt: int) -> dict[str, Any]:
            usage: dict[str, Any] = {"prompt_tokens": n_prompt, "completion_tokens": n, "total_tokens": n_prompt + n}
            if trtllm:
                usage["prompt_tokens_details"] = {"cached_tokens": 0}
            if fault == "negative-usage":
                usage["completion_tokens"] = -n
            elif fault == "absurd-usage":
                usage["completion_tokens"] = 10**15
            elif fault == "fractional-usage":
                usage["prompt_tokens"] = 3.5
            return usage

        zeroed = {"usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}} \
            if include_usage and dialect.usage == "zeroed" else {}
        if dialect.comment == "keepalive":
            await write(f": keepalive 0/{len(body.get('messages') or [])}\n\n".encode())
        elif dialect.comment == "ping":
            await write(f": ping - {time.strftime('%Y-%m-%d %H:%M:%S')}\n\n".encode())
        elif dialect.comment == "empty":
            await write(b":\n\n")
        if chat and dialect.role_chunk == "empty":
            await write(event([choice("", None, role=True)]))
        elif chat and dialect.role_chunk == "bare":
            await write(event([choice(None, None, role=True)]))

        k_per = self.s.chunk_tokens
        groups = [list(range(i, min(i + k_per, n))) for i in range(0, n, k_per)]
        prev_t: Optional[float] = None
        injected = False
        if fault == "finish-reason-object":
            finish = {"type": finish, "matched": None}
        finish_apart = not dialect.finish_on_last_token or not groups or fault == "finish-reason-object"
        for gi, group in enumerate(groups):
            last = group[-1]
            if fault in MID_STREAM_FAULTS and last >= n // 2 and not injected:
                injected = True
                await self.timer.sleep_until(due[last])
                if await self._mid_stream(fault, request, response, event, choice):
                    return response
            text = "".join(word(index, k) for k in group)
            if fault == "surrogate-text" and gi == 0:
                text += "\ud800"
            final = gi == len(groups) - 1 and not finish_apart
            role = chat and (dialect.role_chunk == "every" or (dialect.role_chunk == "first" and gi == 0))
            extra = dict(zeroed)
            if final and dialect.usage == "final":
                extra["usage"] = usage_of(await prompt_tokens)
            payload = event([choice(text, finish if final else dialect.open_finish, role=role)], **extra)  # ready before its due time
            await self.timer.sleep_until(due[last])
            await write(payload)
            t = time.perf_counter()
            self.metrics.lateness.observe(t - due[last])
            if prev_t is None:
                self.metrics.ttft.observe(t - arrival)
                if len(group) > 1:
                    self.metrics.itl.observe(0.0, len(group) - 1)
            else:
                self.metrics.itl.observe((t - prev_t) / len(group), len(group))
            prev_t = t
        n_prompt = await prompt_tokens
        if finish_apart:
            extra = {"usage": usage_of(n_prompt)} if dialect.usage == "final" else dict(zeroed)
            role = chat and (dialect.role_chunk == "every" or (dialect.role_chunk == "first" and not groups))
            await write(event([choice(None if chat else "", finish, role=role)], **extra))
        if include_usage and dialect.usage in ("chunk", "zeroed"):
            await write(event([], usage=usage_of(n_prompt)))
        if fault == "no-done":
            await asyncio.sleep(FOREVER_S)
        await write(b"data: [DONE]\n\n")
        await response.write_eof()
        self._served(arrival, prev_t, n_prompt, n)
        return response

    async def _mid_stream(self, fault: str, request: Request, response: StreamResponse,
                          event: Any, choice: Any) -> bool:
        """One mid-stream fault; True when the stream ends with it."""
        if fault == "drop":
            request.transport.abort()  # the connection drops mid-stream
            return True
        if fault == "stall":
            await asyncio.sleep(FOREVER_S)
            return True
        if fault == "huge-event":
            await response.write(event([choice("x" * int(self.s.fault_size_mib * 2**20), None)]))
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

    async def _whole(self, body, chat, index, n, due, prompt_tokens, arrival) -> Response:
        if due:
            await self.timer.sleep_until(due[-1])
        text = "".join(word(index, k) for k in range(n))
        n_prompt = await prompt_tokens
        finish = self._finish_reason(body, n)
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text, "finish_reason": finish}
        t = time.perf_counter()
        self._served(arrival, t if n else None, n_prompt, n)
        return json_response({
            "id": f"cmpl-{uuid.uuid4().hex[:16]}", "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()), "model": body.get("model") or self.s.model_name, "choices": [choice],
            "usage": {"prompt_tokens": n_prompt, "completion_tokens": n, "total_tokens": n_prompt + n},
        })

    def _served(self, arrival: float, last_t: Optional[float], n_prompt: int, n: int) -> None:
        self.metrics.queue.observe(0.0)
        if last_t is not None:
            self.metrics.e2e.observe(last_t - arrival)
        self.metrics.prompt_tokens += n_prompt
        self.metrics.generation_tokens += n
        self.metrics.requests_ok += 1

    def _error(self, status: int, message: str, kind: str) -> Response:
        """An error body in the dialect's form."""
        if self.dialect.errors == "flat":
            body: dict[str, Any] = {"error": message, "error_type": kind}
        elif self.dialect.errors == "object":
            body = {"object": "error", "message": message, "type": kind, "param": None, "code": status}
        else:
            body = {"error": {"message": message, "type": kind, "code": status}}
        return json_response(body, status=status)

    def _authorized(self, request: Request) -> bool:
        if self._expected_key is None:
            return True
        return request.headers.get("Authorization", "") == f"Bearer {self._expected_key}"


MID_STREAM_FAULTS = {"drop", "stall", "huge-event", "bad-json", "wrong-types", "error-event"}


# --- command line -------------------------------------------------------------------------


def parse_args(argv: Optional[list[str]] = None) -> tuple[str, int, Settings]:
    p = argparse.ArgumentParser(prog="python -m harness.reference_server", description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0: any free port (printed)")
    p.add_argument("--ttft-ms", type=float, default=50.0)
    p.add_argument("--itl-ms", type=float, default=10.0)
    p.add_argument("--tokens", type=int, default=64, help="natural reply length; max_tokens caps it")
    p.add_argument("--jitter-ms", type=float, default=0.0, help="each due time moves by U(-j, +j)")
    p.add_argument("--error-rate", type=float, default=0.0, help="fraction of requests that fail")
    p.add_argument("--error-kind", choices=FAULTS, default="status",
                   help="how a failing request misbehaves: " + "; ".join(f"{k}: {v}" for k, v in FAULTS.items()))
    p.add_argument("--fault-size-mib", type=float, default=32.0, help="size of huge-event and huge-error-body")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dialect", choices=DIALECTS, default="openai")
    p.add_argument("--metrics", action="store_true", help="serve /metrics (Prometheus text)")
    p.add_argument("--exit-after", type=int, default=None, help="exit with code 3 when request N+1 arrives")
    p.add_argument("--chunk-tokens", type=int, default=1, help="tokens per streamed chunk")
    p.add_argument("--model-name", default="reference")
    p.add_argument("--api-key-env", default=None, help="require the key held by this environment variable")
    p.add_argument("--startup-delay-s", type=float, default=0.0, help="/health answers 503 this long")
    p.add_argument("--tokenizer", default=None, help="HF tokenizer folder to count prompt tokens exactly")
    p.add_argument("--timer", choices=("thread", "asyncio"), default="thread")
    a = p.parse_args(argv)
    if a.tokens < 0 or a.ttft_ms < 0 or a.itl_ms < 0 or a.jitter_ms < 0 or a.chunk_tokens < 1:
        p.error("--tokens, --ttft-ms, --itl-ms and --jitter-ms must be >= 0, --chunk-tokens >= 1")
    if not 0 <= a.error_rate <= 1:
        p.error("--error-rate must be in [0, 1]")
    settings = Settings(
        ttft_ms=a.ttft_ms, itl_ms=a.itl_ms, tokens=a.tokens, jitter_ms=a.jitter_ms, error_rate=a.error_rate,
        error_kind=a.error_kind, fault_size_mib=a.fault_size_mib, seed=a.seed, dialect=a.dialect, metrics=a.metrics, exit_after=a.exit_after,
        chunk_tokens=a.chunk_tokens, model_name=a.model_name, api_key_env=a.api_key_env,
        startup_delay_s=a.startup_delay_s, tokenizer=a.tokenizer, timer=a.timer,
    )
    return a.host, a.port, settings


async def serve(host: str, port: int, settings: Settings) -> None:
    server = ReferenceServer(settings)
    server.start_timer()
    _listener, bound = await start_server(server.handle, host, port)
    s = settings
    print(f"reference server ({s.dialect}) listening on http://{host}:{bound} · ttft {s.ttft_ms} ms · "
          f"itl {s.itl_ms} ms · tokens {s.tokens} · jitter {s.jitter_ms} ms · errors {s.error_rate}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    print("reference server: stopping", flush=True)


def main(argv: Optional[list[str]] = None) -> None:
    host, port, settings = parse_args(argv)
    sys.setswitchinterval(0.0005)  # the timer thread gets the GIL back within 0.5 ms
    try:
        asyncio.run(serve(host, port, settings))
    except OSError as exc:  # e.g. the port is in use
        print(f"reference server: {exc}", file=sys.stderr, flush=True)
        sys.exit(1)
    sys.stdout.flush()
    os._exit(0)  # streams still open are dropped at once, as a killed server's would be


if __name__ == "__main__":
    main()
