"""A reference OpenAI-compatible streaming server that emits tokens on a known schedule.

It checks the harness itself: the client's timing against a schedule known in advance,
the harness's own overhead, and the HTTP path of every server preset (``--dialect``
imitates the stream of vLLM/OpenAI, SGLang, mlx_lm.server, llama_cpp.server, TGI,
trtllm-serve, DeepSpeed-MII and Ollama: see :data:`DIALECTS`).

    python -m harness.reference_server --port 8000 --ttft-ms 50 --itl-ms 10 --tokens 64

The schedule of a request that arrives at t₀ (when the kernel received its first bytes, as
the HTTP layer, refserver/http11.py, stamps it: not when the server got round to it), in
seconds:

    due(k) = t₀ + ttft + k · itl + jitter(k),   k = 0 … n − 1,   jitter(k) ~ U(−j, +j)

With ``--batch-itl-ms b``, itl = ``--itl-ms`` + b × (the requests already running when the
schedule starts): a batched engine's trade-off, more requests at once for a slower stream each.

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
Authorization header came), never a key; ``GET /reference/schedule`` says the schedule it keeps
(ttft, itl, jitter, tokens per chunk, dialect): the truth a client's figures are checked against
(``python -m harness.crosscheck``).

``--metrics`` serves ``/metrics`` in Prometheus text with vLLM-style histograms of what it
served (``sglang:`` names for ``--dialect sglang``), plus
``reference:token_lateness_seconds`` (write time − due time: the server's own error).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Optional

from core.tokenizer import load_tokenizer
from refserver import faults
from refserver.constrained import constrained_reply
from refserver.dialects import DIALECTS, word
from refserver.http11 import Request, Response, StreamResponse, json_response
from refserver.metrics import ServedMetrics
from refserver.stream import Job, StreamedReply
from refserver.timers import LoopTimer, PreciseTimer


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
    max_running: int = 0  # requests served at once; more wait for a slot (0: no limit)
    # a batched engine's decode step slows as its batch grows: a request's ITL is itl_ms plus this
    # for each other request running when its schedule starts (0: every request alone)
    batch_itl_ms: float = 0.0
    kv_capacity_tokens: int = 16384  # the KV-use gauge: reserved reply tokens ÷ this
    metrics_drip_s: float = 0.0  # /metrics written one byte every this many seconds (0: at once)
    spec_draft_tokens: int = 0  # speculative-decoding counters: K draft tokens per chunk (0: none)
    spec_acceptance: float = 0.0  # the share of draft tokens accepted
    reasoning_tokens: int = 0  # the first N tokens of a chat reply are reasoning (the dialect's delta field)
    per_request_metrics: bool = False  # vLLM's --enable-per-request-metrics: a metrics object on the usage chunk
    lora_adapters: tuple[str, ...] = ()  # --lora-modules: the adapters it serves (ReferenceServer.adapter)
    # structured output (refserver/constrained.py): a reply that satisfies the request's JSON
    # schema, regex or required tool call; True: a lying engine that ignores them all
    ignore_constraints: bool = False


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
        self.metrics = ServedMetrics(
            self.dialect.metrics_prefix,
            settings.kv_capacity_tokens,
            settings.spec_draft_tokens,
            settings.spec_acceptance,
        )
        self._slots = asyncio.Semaphore(settings.max_running) if settings.max_running > 0 else None
        self.timer: Any = None
        self._tokenizer = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reference-tokenizer")
        self._expected_key = os.environ.get(settings.api_key_env, "") if settings.api_key_env else None
        self.received: list[dict[str, Any]] = []  # GET /reference/requests
        self._routes = self.routes()
        if settings.tokenizer:
            self._tokenizer = load_tokenizer(settings.tokenizer)

    def routes(self) -> dict[str, tuple[str, Any]]:
        """Path → (method, handler)."""
        routes: dict[str, tuple[str, Any]] = {
            "/v1/models": ("GET", self.models),
            "/reference/requests": ("GET", self.requests_received),
            "/reference/schedule": ("GET", self.schedule),
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
            redirect = faults.redirect(request)
            if redirect is not None:
                return redirect
        if not self._authorized(request):
            return self._error(401, "invalid API key", "authentication_error")
        return json_response(
            {"object": "list", "data": [{"id": self.s.model_name, "object": "model", "owned_by": "reference"}]}
        )

    async def requests_received(self, request: Request) -> Response:
        return json_response(self.received)

    async def schedule(self, request: Request) -> Response:
        """The schedule its tokens keep (the truth a client's figures are checked against)."""
        s = self.s
        return json_response(
            {
                "ttft_ms": s.ttft_ms,
                "itl_ms": s.itl_ms,
                "jitter_ms": s.jitter_ms,
                "chunk_tokens": s.chunk_tokens,
                "tokens": s.tokens,
                "dialect": s.dialect,
                "role_chunk": self.dialect.role_chunk,
                "max_running": s.max_running,
                "model_name": s.model_name,
            }
        )

    def _log(self, request: Request) -> None:
        self.received.append(
            {
                "method": request.method,
                "path": request.path,
                "host": request.host,
                "authorization": "Authorization" in request.headers,
            }
        )

    async def prometheus(self, request: Request) -> Any:
        if self.s.metrics_drip_s > 0:
            return await faults.drip(request, self.metrics.render().encode(), self.s.metrics_drip_s)
        return Response(text=self.metrics.render(), content_type="text/plain")

    async def chat(self, request: Request) -> Response | StreamResponse:
        return await self._generate(request, chat=True)

    async def completions(self, request: Request) -> Response | StreamResponse:
        return await self._generate(request, chat=False)

    # --- one request ---

    async def _generate(self, request: Request, chat: bool) -> Response | StreamResponse:
        arrival = request.arrival  # when the kernel received its first bytes
        self._log(request)
        logged = self.received[-1]
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
        adapter, unknown = self.adapter(body)
        if unknown is not None:
            return self._error(404, unknown, "NotFoundError")
        logged["adapter"] = adapter
        fault = self.s.error_kind if self.s.error_rate > 0 and self.rng.random() < self.s.error_rate else None
        refused = faults.refusal(fault, self.s.fault_size_mib, request, self._error)
        if refused is not None:
            return refused
        n = self._length(body)
        constrained = None if self.s.ignore_constraints else constrained_reply(body, index)
        finish = self._finish_reason(body, n)
        if constrained is not None:  # the reply is the constrained text, cut at max_tokens
            cap = body.get("max_tokens", body.get("max_completion_tokens"))
            n = len(constrained.pieces) if cap is None else min(len(constrained.pieces), int(cap))
            finish = "length" if n < len(constrained.pieces) else "tool_calls" if constrained.tool else "stop"
        due = self._schedule(arrival, n)
        if self._tokenizer is not None:  # a chat template takes milliseconds: off the event loop
            prompt_tokens = asyncio.get_running_loop().run_in_executor(self._pool, self._count_prompt, body, chat)
        else:
            prompt_tokens = asyncio.get_running_loop().create_future()
            prompt_tokens.set_result(self._count_prompt(body, chat))
        if self._slots is not None:  # --max-running: wait for a slot; the schedule starts when one frees
            arrival = await self._wait_for_slot(arrival)
            due = self._schedule(arrival, n)
        job = Job(body, chat, index, n, finish, due, prompt_tokens, arrival, fault, request.arrival, constrained)
        self.metrics.running += 1
        self.metrics.kv_tokens += n
        try:
            if body.get("stream"):
                return await self._stream(request, job)
            return await self._whole(job)
        finally:
            self.metrics.running -= 1
            self.metrics.kv_tokens -= n
            if self._slots is not None:
                self._slots.release()

    def adapter(self, body: dict) -> tuple[Optional[str], Optional[str]]:
        """The LoRA adapter a request asks for, and why it is unknown (else None): ``lora_path``
        (SGLang), ``lora`` ([{id, scale}] by --lora-modules position, the first with a scale
        other than 0: llama-server), or ``model`` naming an adapter (vLLM, TGI). With adapters
        served, a model that is neither the served name nor an adapter is unknown (vLLM's 404);
        without, any model name is taken (as before)."""
        served = self.s.lora_adapters
        if body.get("lora_path") is not None:
            name = body["lora_path"]
            return (name, None) if name in served else (None, f"LoRA adapter {name!r} is not loaded")
        if isinstance(body.get("lora"), list):
            for entry in body["lora"]:
                i = entry.get("id") if isinstance(entry, dict) else None
                if not isinstance(i, int) or not 0 <= i < len(served):
                    return None, f"invalid adapter id {i!r}"
                if entry.get("scale", 1.0):
                    return served[i], None
            return None, None
        model = body.get("model")
        if model in served:
            return model, None
        if served and model not in (None, "", self.s.model_name):
            return None, f"The model `{model}` does not exist."
        return None, None

    async def _wait_for_slot(self, arrival: float) -> float:
        """Hold a request while --max-running others run (the waiting gauge counts it); when it got its slot."""
        assert self._slots is not None
        self.metrics.waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self.metrics.waiting -= 1
        return max(arrival, time.perf_counter())

    def _length(self, body: dict) -> int:
        cap = body.get("max_tokens", body.get("max_completion_tokens"))
        exact = bool(body.get("ignore_eos")) or bool(body.get("min_tokens"))
        if cap is None:
            return self.s.tokens
        return int(cap) if exact else min(int(cap), self.s.tokens)

    def _schedule(self, arrival: float, n: int) -> list[float]:
        """Absolute due times: arrival + ttft + k·itl + U(−jitter, +jitter), never decreasing (itl
        grows by --batch-itl-ms for each request running now)."""
        ttft, jitter = self.s.ttft_ms / 1e3, self.s.jitter_ms / 1e3
        itl = (self.s.itl_ms + self.s.batch_itl_ms * self.metrics.running) / 1e3
        due, last = [], arrival
        for k in range(n):
            t = arrival + ttft + k * itl + (self.rng.uniform(-jitter, jitter) if jitter else 0.0)
            last = max(last, t)
            due.append(last)
        return due

    def _count_prompt(self, body: dict, chat: bool) -> int:
        tok = self._tokenizer
        if chat:
            messages = [_text_message(m) for m in body["messages"]]
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

    async def _stream(self, request: Request, job: Job) -> StreamResponse:
        response = StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        reply = StreamedReply(
            self.dialect.on(job.chat),
            job,
            self.s.model_name,
            reasoning_tokens=self.s.reasoning_tokens,
            per_request_metrics=self.s.per_request_metrics,
            spec=(self.s.spec_draft_tokens, self.s.spec_acceptance),
        )
        if await reply.send(request, response, self.s.chunk_tokens, self.timer, self.s.fault_size_mib, self.metrics):
            self.metrics.served(job.arrival, reply.last_t, await job.prompt_tokens, job.n)
        return response

    async def _whole(self, job: Job) -> Response:
        body, chat, index, n, finish, constrained = job.body, job.chat, job.index, job.n, job.finish, job.constrained
        if job.due:
            await self.timer.sleep_until(job.due[-1])
        text = "".join(constrained.pieces[:n] if constrained else (word(index, k) for k in range(n)))
        n_prompt = await job.prompt_tokens
        if chat and constrained is not None and constrained.tool:
            call = {
                "id": f"call_{index}",
                "type": "function",
                "function": {"name": constrained.tool, "arguments": text},
            }
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                "finish_reason": finish,
            }
        elif chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text, "finish_reason": finish}
        t = time.perf_counter()
        self.metrics.served(job.arrival, t if n else None, n_prompt, n)
        return json_response(
            {
                "id": f"cmpl-{uuid.uuid4().hex[:16]}",
                "object": "chat.completion" if chat else "text_completion",
                "created": int(time.time()),
                "model": body.get("model") or self.s.model_name,
                "choices": [choice],
                "usage": {"prompt_tokens": n_prompt, "completion_tokens": n, "total_tokens": n_prompt + n},
            }
        )

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


def _text_message(message: Any) -> Any:
    """A chat message whose content is OpenAI's list of parts (``[{"type": "text", "text": …}]``, as
    vllm bench serve and GuideLLM send) with its text parts joined: chat templates take a string."""
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        return message
    parts = [p.get("text", "") for p in message["content"] if isinstance(p, dict) and p.get("type") == "text"]
    return {**message, "content": "".join(str(p) for p in parts)}
