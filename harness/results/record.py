"""One request's record (a row of requests.parquet), built from its stamps with the formulas of :mod:`harness.results.formulas`."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional

from core.sequences import reconcile_counts
from core.structured import check_reply
from core.text import valid_text
from core.types import GenerationRequest, RequestDone
from harness.results.formulas import (
    client_wait,
    decode_tokens_per_second,
    e2e_latency,
    from_scheduled,
    http_phases,
    inter_chunk_latencies,
    inter_token_latencies,
    output_tokens_per_second,
    queue_wait,
    tpot,
    ttfo,
    ttft,
    ttst,
)

# the start of the error of a request the client cancelled when its run ended early
CANCELLED = "cancelled: "


class RequestOutcome:
    """How a request ended, from its ``error``: for a record and for a kept request's view
    (:class:`harness.results.kept.KeptRecord`)."""

    __slots__ = ()
    error: Optional[str]

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def cancelled(self) -> bool:
        """Cut short by the run's end (an interrupt, a saturated point), not failed by the engine."""
        return (self.error or "").startswith(CANCELLED)


@dataclass(slots=True)  # a request's record lives until its row is written: no __dict__
class RequestRecord(RequestOutcome):
    """One row of requests.parquet. Times ``*_s`` relative to the measured phase's start."""

    request_id: int  # the request's index in the plan, from 0
    session_id: int  # its session (a chat's conversation, an agent's thread)
    turn: int  # its turn in the session, from 0
    # prompt tokens as the engine saw them (after the chat template; a server's usage where it sends one)
    prompt_tokens: int
    output_tokens: int  # tokens produced (a server's usage where it sends one, else the reply re-tokenized)
    requested_output_tokens: int  # the output length the workload asked for
    exact_output_len: bool  # whether that length was asked for exactly (end-of-sequence suppressed)
    expected_prompt_tokens: Optional[int]  # a prompt fixed in advance: its length, to check prompt_tokens against
    scheduled_s: Optional[float]  # open loop: when it was due to be sent
    start_s: float  # sent
    end_s: float  # last token, or failure
    ttft_s: Optional[float]  # first output token − send; null for a failed request
    tpot_s: Optional[float]  # (E2E − TTFT) / (n_out − 1); null when n_out ≤ 1
    e2e_s: Optional[float]  # last output token − send
    itl_s: list[float] = field(default_factory=list)  # per token, n_out − 1 values
    itl_chunk_s: list[float] = field(default_factory=list)  # per chunk, chunks − 1 values
    output_tps: Optional[float] = None  # n_out / E2E
    decode_tps: Optional[float] = None  # (n_out − 1) / (E2E − TTFT)
    queue_wait_s: Optional[float] = None  # the engine began work − send, where the engine says
    cached_tokens: Optional[int] = None  # prompt tokens the engine served from its prefix cache
    delivery_lag_max_s: Optional[float] = None  # harness overhead: receipt − engine stamp, worst token
    ttfo_s: Optional[float] = None  # first answer (not reasoning) token; streams that tell them apart
    ttst_s: Optional[float] = None  # second token − first token
    # output tokens of reasoning (a server's usage, else the reasoning text re-tokenized)
    reasoning_tokens: Optional[int] = None
    client_wait_s: Optional[float] = None  # open loop: send − scheduled
    ttft_from_scheduled_s: Optional[float] = None  # open loop: client wait + TTFT
    e2e_from_scheduled_s: Optional[float] = None  # open loop: client wait + E2E
    stage: Optional[int] = None  # a time-shaped load: the stage in which it started (workloads/schedule.py)
    # Agent jobs (workload=agentic): the job, the agent's depth in its tree (0: the main loop) and,
    # for a sub-agent's request, the request its agent forked after (harness/results/jobs.py)
    job_id: Optional[int] = None
    depth: Optional[int] = None
    parent_request_id: Optional[int] = None
    engine_timings_source: Optional[str] = None  # where the engine's own per-request figures came from
    http_connect_s: Optional[float] = None  # None: no new connection (reused, or in-process)
    http_reused: Optional[bool] = None  # the request went on a kept connection
    http_sent_s: Optional[float] = None  # request written to the socket − send
    http_first_byte_s: Optional[float] = None  # first response byte received − send
    http_last_byte_s: Optional[float] = None  # last response byte received − send
    # several endpoints (backend.urls, backend.replicas): the index of the one that served it, or
    # on which it failed (backends/http/router.py); None with one endpoint
    endpoint: Optional[int] = None
    adapter: Optional[str] = None  # the LoRA adapter that served it (workload.lora.adapters); None: the base model
    # Structured output (workload.response_format, workload.tools; core/structured.py): what the
    # reply was checked as (json_schema, json_object, regex, tool_call), whether it was valid and why not;
    # None for a request without a constraint or one that failed
    output_check: Optional[str] = None
    output_valid: Optional[bool] = None
    output_invalid_reason: Optional[str] = None
    # the tool calls a server returned, as JSON text ([{"name", "arguments"}]); None where none came
    tool_calls: Optional[str] = None
    finish_reason: Optional[str] = None  # why the reply ended, as the engine says (stop, length…)
    # why the request failed (null: it completed); failed requests have no TTFT, TPOT or E2E
    error: Optional[str] = None
    output_text: Optional[str] = None  # the reply's text (null with save_output_text=false, as output_token_ids)
    # the engine's own figures for the request (engine timings, batch size, token sources…)
    engine_stats: dict[str, Any] = field(default_factory=dict)
    # The reply's token ids, for cross-engine agreement (harness/reports/agreement.py). In-process:
    # the ids the engine produced. HTTP: the server's own ids where it sends them (vLLM's
    # ``return_token_ids``), else the reply text re-tokenized after the request;
    # ``engine_stats["output_token_ids_source"]`` says which ("server" or "retokenized").
    output_token_ids: Optional[list[int]] = None
    # Not a column: the text whose tokens are ``output_token_ids``, while they are still to be
    # counted (RequestDone.token_ids_text); the run's writer tokenizes it with the tables.
    ids_text: Optional[str] = None


@dataclass
class RequestTiming:
    """One request as the client saw it: stamps on its clock (``perf_counter`` seconds) and what
    the workload expected of it."""

    t0: float  # the measured phase began
    send_t: float  # the request was handed to the engine
    end_t: float = 0.0  # the stream ended, or failed
    chunks: list[tuple[float, int]] = field(default_factory=list)  # (stamp, tokens) of each chunk received
    scheduled_s: Optional[float] = None  # open loop: when it was due to be sent, from t0
    expected_prompt_tokens: Optional[int] = None  # a prompt fixed in advance: its length
    delivery_lag_max_s: Optional[float] = None  # the worst token's hand-over from the engine to the client


def build_record(
    request: GenerationRequest,
    timing: RequestTiming,
    done: Optional[RequestDone],
    output_token_ids: Optional[list[int]] = None,
    error: Optional[str] = None,
    error_stats: Optional[dict[str, Any]] = None,
) -> RequestRecord:
    """Apply the per-request formulas to one request's timestamps.

    Token counts are the engine's own where it reports them (``engine_stats["prompt_tokens"]``,
    ``engine_stats["output_tokens"]``: an HTTP server's usage), else the harness's: the
    rendered prompt's length and the number of streamed ids (``output_token_ids`` None: ids
    still to be counted, so the chunks' own counts). ``done`` is the engine's last event, None
    when the stream failed before it. ITL per token spreads each
    chunk's gap over its tokens, the counts reconciled with n_out (:func:`reconcile_counts`);
    ITL per chunk is the chunks' own gaps.
    """
    chunks, send_t, end_t = timing.chunks, timing.send_t, timing.end_t
    # a stream that failed before its last event: what its exception said of the request
    engine_stats = done.engine_stats if done is not None else dict(error_stats or {})
    finish_reason = done.finish_reason if done is not None else None
    chunk_counts = [n for _, n in chunks]
    n_streamed = len(output_token_ids) if output_token_ids is not None else sum(chunk_counts)
    n_out = n_streamed
    if error is None:
        error = _bad_count(engine_stats, "output_tokens") or _bad_count(engine_stats, "prompt_tokens")
    if error is None:
        n_out = int(engine_stats.get("output_tokens", n_streamed))
        if n_streamed == 0 or n_out == 0:
            error = "no output tokens"
    ttft_s = e2e_s = tpot_s = ttfo_s = ttst_s = None
    itl: list[float] = []
    itl_chunk: list[float] = []
    if error is None:
        ttft_s = ttft(send_t, chunks[0][0])
        e2e_s = e2e_latency(send_t, chunks[-1][0])
        tpot_s = tpot(e2e_s, ttft_s, n_out)
        counts = reconcile_counts(chunk_counts, n_out)
        itl_chunk = inter_chunk_latencies(chunks)
        if counts.count(1) == len(counts):  # a token a chunk (most engines): the same gaps
            itl = list(itl_chunk)
        else:
            itl = inter_token_latencies([(t, k) for (t, _), k in zip(chunks, counts)])
        end_t = chunks[-1][0]
        answer = done.first_answer_chunk if done is not None else None
        ttfo_s = ttfo(send_t, chunks[answer][0] if answer is not None and answer < len(chunks) else None)
        ttst_s = ttst(zip((t for t, _ in chunks), counts))  # lazy: it stops at the second token
    start_s = send_t - timing.t0
    wait_s = client_wait(timing.scheduled_s, start_s)
    phases = http_phases(send_t, done.http_phases if done is not None else None)
    return RequestRecord(
        request_id=request.request_id,
        session_id=request.session_id,
        turn=request.turn,
        prompt_tokens=len(request.prompt_token_ids)
        if _bad_count(engine_stats, "prompt_tokens")
        else int(engine_stats.get("prompt_tokens", len(request.prompt_token_ids))),
        output_tokens=n_out,
        requested_output_tokens=request.max_new_tokens,
        exact_output_len=request.exact_output_len,
        expected_prompt_tokens=timing.expected_prompt_tokens,
        scheduled_s=timing.scheduled_s,
        start_s=start_s,
        end_s=end_t - timing.t0,
        ttft_s=ttft_s,
        tpot_s=tpot_s,
        e2e_s=e2e_s,
        itl_s=itl,
        itl_chunk_s=itl_chunk,
        output_tps=output_tokens_per_second(n_out, e2e_s) if e2e_s else None,
        decode_tps=decode_tokens_per_second(tpot_s),
        queue_wait_s=_queue_wait(send_t, done, engine_stats),
        cached_tokens=engine_stats.get("cached_tokens"),
        delivery_lag_max_s=timing.delivery_lag_max_s,
        ttfo_s=ttfo_s,
        ttst_s=ttst_s,
        reasoning_tokens=done.reasoning_tokens if done is not None and error is None else None,
        client_wait_s=wait_s,
        ttft_from_scheduled_s=from_scheduled(wait_s, ttft_s),
        e2e_from_scheduled_s=from_scheduled(wait_s, e2e_s),
        engine_timings_source=engine_stats.get("engine_timings_source"),
        **phases,
        endpoint=_endpoint(engine_stats),
        adapter=request.adapter,
        finish_reason=valid_text(finish_reason) if finish_reason else finish_reason,
        error=valid_text(error) if error else error,
        engine_stats=engine_stats,
        output_token_ids=None if output_token_ids is None else [int(t) for t in output_token_ids],
    )


def check_output(record: RequestRecord, request: GenerationRequest) -> None:
    """Check a completed reply against its request's constraint (core/structured.py) and set
    ``output_check``, ``output_valid`` and ``output_invalid_reason``; after the request, off its
    timing. Failed requests and requests without a constraint stay unchecked (None)."""
    if not record.ok or (request.response_format is None and not request.tools):
        return
    calls = json.loads(record.tool_calls) if record.tool_calls is not None else None
    result = check_reply(
        record.output_text, calls, request.response_format, request.tools, request.tool_choice, record.finish_reason
    )
    if result is not None:
        record.output_check, record.output_valid = result.kind, result.valid
        record.output_invalid_reason = result.reason


def _endpoint(engine_stats: dict[str, Any]) -> Optional[int]:
    """The endpoint a router sent the request to (``engine_stats["endpoint"]``: its last event's,
    or the failing stream's exception's)."""
    told = engine_stats.get("endpoint")
    return told if isinstance(told, int) and not isinstance(told, bool) else None


def _queue_wait(send_t: float, done: Optional[RequestDone], engine_stats: dict[str, Any]) -> Optional[float]:
    """The harness's queue wait where the engine's start is on its clock (in-process); else the
    engine's own queue time where an HTTP server reports it (``engine_stats["queue_s"]``, vLLM)."""
    wait = queue_wait(send_t, done.scheduled_t if done is not None else None)
    if wait is None:
        told = engine_stats.get("queue_s")
        wait = float(told) if isinstance(told, (int, float)) and not isinstance(told, bool) else None
    return wait


def _bad_count(engine_stats: dict[str, Any], key: str) -> Optional[str]:
    """An engine-reported token count that is not a whole number ≥ 0 (a server that lies) → the request's error."""
    if key not in engine_stats:
        return None
    value = engine_stats[key]
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or value != value
        or value < 0
        or value != int(value)
    ):
        return f"the engine reported an invalid {key.replace('_', ' ')} count: {str(value)[:40]!r}"
    return None
