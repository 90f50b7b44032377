"""The types that cross the Backend interface: a request in, a stream of events out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 means greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 means no top-k
    seed: Optional[int] = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass
class GenerationRequest:
    """One request as every engine receives it: chat-templated prompt ids and a length."""

    request_id: int
    prompt_token_ids: list[int]
    max_new_tokens: int
    exact_output_len: bool  # suppress end-of-sequence so exactly max_new_tokens come out
    sampling: SamplingParams = field(default_factory=SamplingParams)
    messages: list[dict[str, str]] = field(default_factory=list)
    session_id: int = 0
    turn: int = 0
    # Structured output (core/structured.py): the reply's constraint, None for free text.
    # ``response_format``: {"type": "json_schema", "schema": {...}} or {"type": "regex", "pattern": "..."};
    # ``tools``: OpenAI tool definitions; ``tool_choice``: "required" or "auto" (None without tools).
    response_format: Optional[dict[str, Any]] = None
    tools: Optional[list[dict[str, Any]]] = None
    tool_choice: Optional[str] = None
    # the LoRA adapter that serves it (a name of workload.lora.adapters); None: the base model
    adapter: Optional[str] = None


@dataclass(slots=True)
class TokenChunk:
    """Tokens the engine produced, stamped with ``time.perf_counter()``: in-process when the engine
    produced them, over HTTP when the bytes that carry them were received (backends/http/http1.py)."""

    token_ids: list[int]
    t: float
    handed_t: Optional[float] = None  # when an engine thread handed it to the event loop
    # Tokens in the chunk when ``token_ids`` is not known on arrival (an HTTP stream: counted
    # provisionally, then reconciled in RequestDone.chunk_tokens); None: len(token_ids)
    n_tokens: Optional[int] = None
    # The server's chunks this event stands for: an HTTP client hands over every chunk of one
    # read at once, all stamped ``t`` (when that read's bytes were received), one provisional token each
    # (then ``n_tokens == chunks``). In-process engines send one event per chunk.
    chunks: int = 1

    def split(self) -> list[TokenChunk]:
        """One event per server chunk."""
        if self.chunks == 1:
            return [self]
        return [TokenChunk([], self.t, self.handed_t, 1) for _ in range(self.chunks)]


@dataclass
class RequestDone:
    """The last event of a request's stream."""

    finish_reason: str  # "length", "stop" or "cancelled"
    scheduled_t: Optional[float] = None  # perf_counter time the engine began work on it
    # The engine's own figures. Two keys override the harness's counts in the record:
    # "prompt_tokens" (e.g. an HTTP server's usage.prompt_tokens) and "output_tokens"
    # (usage.completion_tokens, or the streamed text re-tokenized as a whole).
    engine_stats: dict[str, Any] = field(default_factory=dict)
    # The reply as the engine returned it (HTTP servers); when set, the runner uses it as the
    # request's output text and chat history instead of decoding the streamed token ids.
    text: Optional[str] = None
    # Set after an HTTP stream, where counting on arrival would slow every stream's stamps:
    # each chunk's token count (replacing the provisional ones, reconciled with usage) and the
    # reply's token ids (the server's own, or its text re-tokenized once).
    chunk_tokens: Optional[list[int]] = None
    token_ids: Optional[list[int]] = None
    # Instead of ``token_ids``, when nothing needs them before the run ends: the text whose
    # tokens they are, tokenized by whoever keeps the ids (the run's writer does it as it
    # writes the tables), not on the event loop, where 2048 tokens cost ~3 ms of every stream.
    token_ids_text: Optional[str] = None
    # Reasoning (HTTP streams that send it apart: ``reasoning`` or ``reasoning_content`` deltas):
    # the index of the first chunk that carried answer text, and the reasoning's token count.
    # None where the engine does not tell the two apart (in-process) or no answer came.
    first_answer_chunk: Optional[int] = None
    reasoning_tokens: Optional[int] = None
    # HTTP: the request's phases on the harness's clock (``perf_counter``): "connect_start",
    # "connect_end" (absent when a kept connection was reused), "sent", "first_byte", "last_byte"
    http_phases: Optional[dict[str, float]] = None
    # The reply's tool calls as a server returned them ([{"name", "arguments"}], arguments the
    # JSON text as streamed); None where the engine has no tool-call field (in-process engines).
    tool_calls: Optional[list[dict[str, Any]]] = None


StreamEvent = Union[TokenChunk, RequestDone]
