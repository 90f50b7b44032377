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

import asyncio
import json
import os
import random
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Optional

from refserver.dialects import DIALECTS, word
from refserver.faults import MID_STREAM_FAULTS
from refserver.http_server import Request, Response, StreamResponse, json_response
from refserver.metrics import ServedMetrics
from refserver.timers import LoopTimer, PreciseTimer

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


# --- Prometheus ---------------------------------------------------------------------------

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

