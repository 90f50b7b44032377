"""One streamed reply, as a server of the chosen dialect sends it, each token at its due time.

The events, in order: the dialect's comment (keep-alive, ping) and role chunk; the tokens,
``--chunk-tokens`` at a time, each chunk written at the due time of its last token; the
finish (on the last token's chunk, or a chunk of its own); the usage chunk where asked for;
``[DONE]``. A fault (``refserver/faults.py``) changes one step.

With ``--reasoning-tokens N`` the first N tokens of a chat reply go out in the dialect's
reasoning field (vLLM's ``reasoning``, the others' ``reasoning_content``), the rest as
``content``. The engine's own figures per request, from the server's clock: vLLM's ``metrics``
on the usage chunk (``--per-request-metrics``: queue = slot − arrival, first token from the
slot, generation = first → last token written) and llama-server's ``timings`` on the last chunk.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, Optional

from refserver import faults
from refserver.constrained import ConstrainedReply
from refserver.dialects import Dialect, word
from refserver.http11 import Request, StreamResponse
from refserver.metrics import ServedMetrics


@dataclass
class Job:
    """One request as the server answers it: what was asked, the reply's length and finish, and
    when each of its tokens is due."""

    body: dict[str, Any]  # the request's JSON
    chat: bool  # /v1/chat/completions, else /v1/completions
    index: int  # the request's number at this server, from 1: it picks the reply's words
    n: int  # tokens in the reply
    finish: str  # the finish reason before the dialect's spelling ("stop", "length", "tool_calls")
    due: list[float]  # when each token is due (time.perf_counter)
    prompt_tokens: asyncio.Future  # the prompt's length in tokens, counted off the event loop
    arrival: float  # when the schedule starts: the arrival, or when a slot freed (--max-running)
    fault: Optional[str] = None  # the fault this reply shows (refserver/faults.py), None: none
    queued: Optional[float] = None  # when the request arrived, before any wait for a slot
    # a constrained reply (refserver/constrained.py): its pieces are the tokens
    constrained: Optional[ConstrainedReply] = None


class StreamedReply:
    """The events of one reply to ``job`` in ``dialect`` (already the endpoint's: ``Dialect.on(chat)``)."""

    def __init__(
        self,
        dialect: Dialect,
        job: Job,
        model_name: str,
        *,
        reasoning_tokens: int = 0,
        per_request_metrics: bool = False,
        spec: tuple[int, float] = (0, 0.0),
    ):
        chat, body, fault, finish = job.chat, job.body, job.fault, job.finish
        self.job = job
        self.dialect, self.chat, self.n, self.fault = dialect, chat, job.n, fault
        # a constrained reply's tool call goes out as delta.tool_calls arguments, the first with
        # the call's id and function name
        self.constrained = job.constrained
        self.tool = job.constrained.tool if job.constrained is not None and chat else None
        self.tool_started = False
        self.reasoning_tokens = reasoning_tokens if chat else 0
        self.per_request_metrics = per_request_metrics
        self.spec = spec
        self.queued = job.queued  # when the request arrived, before any wait for a slot
        self.arrival: Optional[float] = None
        self.first_t: Optional[float] = None  # when the first token was written
        self.chunks_written = 0
        self.base: dict[str, Any] = {
            "id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:16]}",
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()),
            "model": body.get("model") or model_name,
        }
        self.include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        self.messages = len(body.get("messages") or [])
        self.trtllm = dialect.extras == "stop_reason"
        self.finish = faults.corrupt_finish_reason(fault, dialect.stop_finish if finish == "stop" else finish)
        self.last_t: Optional[float] = None  # when the last token was written
        # with a zeroed usage on every chunk before the real one (Ollama's completions)
        self.zeroed = (
            {"usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}
            if self.include_usage and dialect.usage == "zeroed"
            else {}
        )

    # --- events -----------------------------------------------------------------------------

    def event(self, choices: list, **extra: Any) -> bytes:
        return (
            b"data: " + json.dumps({**self.base, "choices": choices, **extra}, separators=(",", ":")).encode() + b"\n\n"
        )

    def choice(self, text: Optional[str], reason: Any, role: bool = False, reasoning: bool = False) -> dict[str, Any]:
        if not self.chat:
            c: dict[str, Any] = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": reason}
            if self.trtllm:
                c.update(token_ids=None, stop_reason=None, avg_decoded_tokens_per_iter=None)
            return c
        extras = self.dialect.extras
        delta: dict[str, Any] = {}
        if role:
            delta["role"] = "assistant"
        if reasoning:
            delta[self.dialect.reasoning_field] = text
        elif text and self.tool is not None:  # a role chunk's empty text stays content
            delta["tool_calls"] = [self.tool_delta(text)]
        elif text is not None:
            delta["content"] = text
        if extras == "matched_stop" and not reasoning:
            delta["reasoning_content"] = None
        elif self.trtllm and text is not None and not reasoning:
            delta["reasoning_content"] = ""
        c = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
        if extras == "matched_stop":
            c["matched_stop"] = (2 if reason == "stop" else None) if reason else None
        if self.trtllm:  # its chat chunks are dumped with exclude_none
            c = {k: v for k, v in c.items() if v is not None}
        return c

    def tool_delta(self, arguments: str) -> dict[str, Any]:
        """One piece of the tool call: the first names the function (OpenAI's streaming form)."""
        if self.tool_started:
            return {"index": 0, "function": {"arguments": arguments}}
        self.tool_started = True
        return {
            "index": 0,
            "id": f"call_{self.base['id'][-8:]}",
            "type": "function",
            "function": {"name": self.tool, "arguments": arguments},
        }

    def token_text(self, index: int, group: list[int]) -> str:
        """The text of the tokens ``group``: the constrained reply's pieces, else the words."""
        if self.constrained is not None:
            return "".join(self.constrained.pieces[k] for k in group)
        return "".join(word(index, k) for k in group)

    def usage(self, n_prompt: int) -> dict[str, Any]:
        usage: dict[str, Any] = {
            "prompt_tokens": n_prompt,
            "completion_tokens": self.n,
            "total_tokens": n_prompt + self.n,
        }
        if self.trtllm:
            usage["prompt_tokens_details"] = {"cached_tokens": 0}
        return faults.lie_about_usage(self.fault, usage)

    def token_event(self, text: str) -> bytes:
        return self.event([self.choice(text, None)])

    def role_here(self, first: bool) -> bool:
        """Whether this chunk's delta carries the role: in every delta, or in the first token's."""
        role_chunk = self.dialect.role_chunk
        return self.chat and (role_chunk == "every" or (role_chunk == "first" and first))

    # --- the stream -------------------------------------------------------------------------

    async def send(
        self,
        request: Request,
        response: StreamResponse,
        chunk_tokens: int,
        timer: Any,
        size_mib: float,
        metrics: ServedMetrics,
    ) -> bool:
        """Write the reply; False when a fault cut it short (the stream ends with the fault).
        ``last_t`` is then when the last token was written (None: no token)."""
        index, due, prompt_tokens, arrival = self.job.index, self.job.due, self.job.prompt_tokens, self.job.arrival
        self.arrival = arrival
        await self._preamble(response)
        groups = [list(range(i, min(i + chunk_tokens, self.n))) for i in range(0, self.n, chunk_tokens)]
        finish_apart = not self.dialect.finish_on_last_token or not groups or self.fault == "finish-reason-object"
        prev_t: Optional[float] = None
        injected = False
        for gi, group in enumerate(groups):
            last = group[-1]
            if self.fault in faults.MID_STREAM_FAULTS and last >= self.n // 2 and not injected:
                injected = True
                await timer.sleep_until(due[last])
                if await faults.mid_stream(self.fault, request, response, size_mib, self.token_event):
                    return False
            text = faults.corrupt_text(self.fault, self.token_text(index, group), first=gi == 0)
            final = gi == len(groups) - 1 and not finish_apart
            extra = dict(self.zeroed)
            if final and self.dialect.usage == "final":
                extra["usage"] = self.usage(await prompt_tokens)
            reason = self.finish if final else self.dialect.open_finish
            if final and self.dialect.timings and not self.include_usage:
                extra["timings"] = self.timings(await prompt_tokens, due[last])
            choice = self.choice(text, reason, role=self.role_here(gi == 0), reasoning=group[0] < self.reasoning_tokens)
            payload = self.event([choice], **extra)  # ready before its due time
            await timer.sleep_until(due[last])
            await faults.write(response, payload, self.fault)
            t = time.perf_counter()
            metrics.observe_chunk(t, due[last], prev_t, arrival, len(group))
            if prev_t is None:
                self.first_t = t
            self.chunks_written += 1
            prev_t = self.last_t = t
        n_prompt = await prompt_tokens
        await self._finish(response, n_prompt, finish_apart, bool(groups))
        await faults.hold_before_done(self.fault)
        await faults.write(response, b"data: [DONE]\n\n", self.fault)
        await response.write_eof()
        return True

    async def _preamble(self, response: StreamResponse) -> None:
        """The dialect's comment line, and its role chunk."""
        comment = self.dialect.comment
        if comment == "keepalive":
            await faults.write(response, f": keepalive 0/{self.messages}\n\n".encode(), self.fault)
        elif comment == "ping":
            await faults.write(response, f": ping - {time.strftime('%Y-%m-%d %H:%M:%S')}\n\n".encode(), self.fault)
        elif comment == "empty":
            await faults.write(response, b":\n\n", self.fault)
        if self.chat and self.dialect.role_chunk == "empty":
            await faults.write(response, self.event([self.choice("", None, role=True)]), self.fault)
        elif self.chat and self.dialect.role_chunk == "bare":
            await faults.write(response, self.event([self.choice(None, None, role=True)]), self.fault)

    async def _finish(self, response: StreamResponse, n_prompt: int, apart: bool, had_tokens: bool) -> None:
        """The finish in a chunk of its own where the dialect sends it so, and the usage chunk."""
        if apart:
            extra: dict[str, Any] = (
                {"usage": self.usage(n_prompt)} if self.dialect.usage == "final" else dict(self.zeroed)
            )
            if self.dialect.timings and not self.include_usage:
                extra["timings"] = self.timings(n_prompt)
            choice = self.choice(None if self.chat else "", self.finish, role=self.role_here(not had_tokens))
            await faults.write(response, self.event([choice], **extra), self.fault)
        if self.include_usage and self.dialect.usage in ("chunk", "zeroed"):
            extra = {}
            if self.dialect.timings:
                extra["timings"] = self.timings(n_prompt)
            elif self.per_request_metrics:
                extra["metrics"] = self.vllm_metrics()
            await faults.write(response, self.event([], usage=self.usage(n_prompt), **extra), self.fault)

    # --- the engine's own figures -------------------------------------------------------------

    def _spans(self, last_t: Optional[float] = None) -> tuple[float, float, float]:
        """(queued → started, started → first token, first → last token) in ms, on this server's clock."""
        start = self.arrival if self.arrival is not None else time.perf_counter()
        queued = self.queued if self.queued is not None else start
        first = self.first_t if self.first_t is not None else start
        last = last_t if last_t is not None else (self.last_t if self.last_t is not None else first)
        return (max(0.0, start - queued) * 1e3, max(0.0, first - start) * 1e3, max(0.0, last - first) * 1e3)

    def vllm_metrics(self) -> dict[str, Any]:
        """vLLM's per-request ``metrics`` object (--enable-per-request-metrics)."""
        queue_ms, first_ms, generation_ms = self._spans()
        return {
            "queue_time_ms": round(queue_ms, 3),
            "time_to_first_token_ms": round(first_ms, 3),
            "generation_time_ms": round(generation_ms, 3),
            "mean_itl_ms": round(generation_ms / (self.n - 1), 3) if self.n > 1 else 0.0,
            "tokens_per_second": round(self.n / ((first_ms + generation_ms) / 1e3), 3)
            if first_ms + generation_ms
            else 0.0,
        }

    def timings(self, n_prompt: int, last_due: Optional[float] = None) -> dict[str, Any]:
        """llama-server's ``timings`` (its slot has no queue: the prompt's time is from the slot)."""
        _, prompt_ms, predicted_ms = self._spans(last_due)
        out: dict[str, Any] = {
            "cache_n": 0,
            "prompt_n": n_prompt,
            "prompt_ms": round(prompt_ms, 3),
            "prompt_per_token_ms": round(prompt_ms / n_prompt, 3) if n_prompt else 0.0,
            "predicted_n": self.n,
            "predicted_ms": round(predicted_ms, 3),
            "predicted_per_token_ms": round(predicted_ms / self.n, 3) if self.n else 0.0,
        }
        k, p = self.spec
        if k:
            drafted = k * max(self.chunks_written, 1)
            out.update(draft_n=drafted, draft_n_accepted=int(p * drafted + 1e-9))
        return out
