"""Every metric the harness reports: one small function each, formula in the docstring.

Times are seconds from ``time.perf_counter()`` (monotonic), taken in the harness process.
The clock of a request starts just before it is handed to the engine (``send``); a token's
time is when the engine produced it (in-process) or when its chunk was parsed (HTTP).
docs/metrics.md lists the same definitions.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np

from core.sequences import reconcile_counts
from core.text import valid_text

PERCENTILES = (50, 90, 95, 99)


# --- per request ------------------------------------------------------------------------


def ttft(send_t: float, first_token_t: float) -> float:
    """Time to first token (s) = t(first output token) − t(send). Includes queueing and prefill."""
    return first_token_t - send_t


def e2e_latency(send_t: float, last_token_t: float) -> float:
    """End-to-end latency (s) = t(last output token) − t(send)."""
    return last_token_t - send_t


def tpot(e2e_s: float, ttft_s: float, n_out: int) -> Optional[float]:
    """Time per output token (s/token) = (E2E − TTFT) / (n_out − 1); undefined for n_out ≤ 1."""
    if n_out <= 1:
        return None
    return (e2e_s - ttft_s) / (n_out - 1)


def inter_token_latencies(chunks: Sequence[tuple[float, int]]) -> list[float]:
    """ITL per token (s): gaps between consecutive tokens, one per token after the first.

    ``chunks`` are (time, tokens in chunk). A chunk of k tokens arriving g after the previous
    chunk contributes k gaps of g / k, so ITL stays token-weighted and Σ ITL = E2E − TTFT
    even when an engine or server sends several tokens at once.
    """
    gaps: list[float] = []
    first_t, first_n = chunks[0]
    gaps.extend([0.0] * (first_n - 1))  # tokens that arrived together with the first one
    prev_t = first_t
    for t, n in chunks[1:]:
        if n > 0:
            gaps.extend([(t - prev_t) / n] * n)
            prev_t = t
    return gaps


def inter_chunk_latencies(chunks: Sequence[tuple[float, int]]) -> list[float]:
    """ITL per chunk (s): gaps between consecutive chunks that carry tokens, one per chunk
    after the first (what a user sees arrive; vLLM bench's ITL). Σ = E2E − TTFT."""
    times = [t for t, n in chunks if n > 0]
    return [b - a for a, b in zip(times, times[1:])]


def output_tokens_per_second(n_out: int, e2e_s: float) -> Optional[float]:
    """Per-request output rate (tokens/s) = n_out / E2E, as the user sees it."""
    return n_out / e2e_s if e2e_s > 0 else None


def decode_tokens_per_second(tpot_s: Optional[float]) -> Optional[float]:
    """Per-request decode rate (tokens/s) = 1 / TPOT = (n_out − 1) / (E2E − TTFT)."""
    return 1.0 / tpot_s if tpot_s else None


def queue_wait(send_t: float, scheduled_t: Optional[float]) -> Optional[float]:
    """Queue wait (s) = t(engine began work on the request) − t(send), where the engine says."""
    return None if scheduled_t is None else max(0.0, scheduled_t - send_t)


# --- per run ----------------------------------------------------------------------------


def distribution(values: Sequence[float]) -> dict[str, Optional[float]]:
    """mean, std, min, max and p50/p90/p95/p99 (linear interpolation between order statistics)."""
    arr = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    keys = ["count", "mean", "std", "min", "max"] + [f"p{p}" for p in PERCENTILES]
    if arr.size == 0:
        return {k: (0 if k == "count" else None) for k in keys}
    out: dict[str, Optional[float]] = {
        "count": int(arr.size),
        "mean": float(arr.mean()),
        "std": float(arr.std()),
        "min": float(arr.min()),
        "max": float(arr.max()),
    }
    for p, v in zip(PERCENTILES, np.percentile(arr, PERCENTILES)):
        out[f"p{p}"] = float(v)
    return out


def cached_share(cached_tokens: Sequence[Optional[int]], prompt_tokens: Sequence[int]) -> Optional[float]:
    """Prefix-cache share = Σ cached prompt tokens / Σ prompt tokens, over requests whose engine reports it."""
    pairs = [(c, p) for c, p in zip(cached_tokens, prompt_tokens) if c is not None]
    total = sum(p for _, p in pairs)
    return sum(c for c, _ in pairs) / total if pairs and total else None


def request_throughput(n_completed: int, duration_s: float) -> float:
    """Requests/s = completed requests / T, T = wall time of the measured phase."""
    return n_completed / duration_s if duration_s > 0 else 0.0


def output_token_throughput(output_tokens: Sequence[int], duration_s: float) -> float:
    """Output tokens/s = Σ n_out / T over completed requests."""
    return float(sum(output_tokens)) / duration_s if duration_s > 0 else 0.0


def total_token_throughput(prompt_tokens: Sequence[int], output_tokens: Sequence[int], duration_s: float) -> float:
    """Total tokens/s = Σ (n_in + n_out) / T over completed requests."""
    return float(sum(prompt_tokens) + sum(output_tokens)) / duration_s if duration_s > 0 else 0.0


def meets_slo(ttft_s: float, tpot_s: Optional[float], e2e_s: float, slo: Any) -> bool:
    """A request meets the SLO when TTFT ≤ slo.ttft_s, TPOT ≤ slo.tpot_s and E2E ≤ slo.e2e_s (unset = no limit)."""
    if slo.ttft_s is not None and ttft_s > slo.ttft_s:
        return False
    if slo.tpot_s is not None and tpot_s is not None and tpot_s > slo.tpot_s:
        return False
    if slo.e2e_s is not None and e2e_s > slo.e2e_s:
        return False
    return True


def goodput(n_meeting_slo: int, duration_s: float) -> float:
    """Goodput (requests/s) = requests meeting every SLO / T."""
    return n_meeting_slo / duration_s if duration_s > 0 else 0.0


def mean_concurrency(e2e_values: Sequence[float], duration_s: float) -> float:
    """Mean requests in flight (Little's law) = Σ E2E / T."""
    return float(sum(e2e_values)) / duration_s if duration_s > 0 else 0.0


def kv_cache_bytes_per_token(hf_config: dict[str, Any], bytes_per_value: float) -> Optional[int]:
    """KV-cache bytes per token = 2 (K and V) × layers × KV heads × head_dim × bytes per value."""
    cfg = hf_config.get("text_config", hf_config)
    try:
        layers = cfg["num_hidden_layers"]
        heads = cfg["num_attention_heads"]
        kv_heads = cfg.get("num_key_value_heads") or heads
        head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    except KeyError:
        return None
    return int(2 * layers * kv_heads * head_dim * bytes_per_value)


def kv_tokens_in_budget(budget_bytes: float, weights_bytes: float, kv_bytes_per_token: int) -> int:
    """Tokens of KV cache that fit = ⌊(budget − weights) / KV bytes per token⌋ (0 if none)."""
    return max(0, int((budget_bytes - weights_bytes) // kv_bytes_per_token))


# --- one request's record ---------------------------------------------------------------


@dataclass
class RequestRecord:
    """One row of requests.parquet. Times ``*_s`` relative to the measured phase's start."""

    request_id: int
    session_id: int
    turn: int
    prompt_tokens: int
    output_tokens: int
    requested_output_tokens: int
    exact_output_len: bool
    expected_prompt_tokens: Optional[int]
    scheduled_s: Optional[float]  # open loop: when it was due to be sent
    start_s: float  # sent
    end_s: float  # last token, or failure
    ttft_s: Optional[float]
    tpot_s: Optional[float]
    e2e_s: Optional[float]
    itl_s: list[float] = field(default_factory=list)  # per token, n_out − 1 values
    itl_chunk_s: list[float] = field(default_factory=list)  # per chunk, chunks − 1 values
    output_tps: Optional[float] = None
    decode_tps: Optional[float] = None
    queue_wait_s: Optional[float] = None
    cached_tokens: Optional[int] = None  # prompt tokens the engine served from its prefix cache
    delivery_lag_max_s: Optional[float] = None  # harness overhead: receipt − engine stamp, worst token
    finish_reason: Optional[str] = None
    error: Optional[str] = None
    output_text: Optional[str] = None
    engine_stats: dict[str, Any] = field(default_factory=dict)
    # The reply's token ids, for cross-engine agreement (harness/reports/agreement.py). In-process:
    # the ids the engine produced. HTTP: the server's own ids where it sends them (vLLM's
    # ``return_token_ids``), else the reply text re-tokenized after the request;
    # ``engine_stats["output_token_ids_source"]`` says which ("server" or "retokenized").
    output_token_ids: Optional[list[int]] = None
    # Not a column: the text whose tokens are ``output_token_ids``, while they are still to be
    # counted (RequestDone.token_ids_text); the run's writer tokenizes it with the tables.
    ids_text: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.error is None


def build_record(
    *,
    request: Any,
    t0: float,
    send_t: float,
    end_t: float,
    chunks: list[tuple[float, int]],
    output_token_ids: Optional[list[int]],
    scheduled_s: Optional[float],
    expected_prompt_tokens: Optional[int],
    scheduled_t: Optional[float],
    finish_reason: Optional[str],
    error: Optional[str],
    delivery_lag_max_s: Optional[float],
    engine_stats: dict[str, Any],
) -> RequestRecord:
    """Apply the per-request formulas to one request's timestamps.

    Token counts are the engine's own where it reports them (``engine_stats["prompt_tokens"]``,
    ``engine_stats["output_tokens"]``: an HTTP server's usage), else the harness's: the
    rendered prompt's length and the number of streamed ids (``output_token_ids`` None: ids
    still to be counted, so the chunks' own counts). ITL per token spreads each
    chunk's gap over its tokens, the counts reconciled with n_out (:func:`reconcile_counts`);
    ITL per chunk is the chunks' own gaps.
    """
    chunk_counts = [n for _, n in chunks]
    n_streamed = len(output_token_ids) if output_token_ids is not None else sum(chunk_counts)
    n_out = n_streamed
    if error is None:
        error = _bad_count(engine_stats, "output_tokens") or _bad_count(engine_stats, "prompt_tokens")
    if error is None:
        n_out = int(engine_stats.get("output_tokens", n_streamed))
        if n_streamed == 0 or n_out == 0:
            error = "no output tokens"
    ttft_s = e2e_s = tpot_s = None
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
    return RequestRecord(
        request_id=request.request_id,
        session_id=request.session_id,
        turn=request.turn,
        prompt_tokens=len(request.prompt_token_ids) if _bad_count(engine_stats, "prompt_tokens")
        else int(engine_stats.get("prompt_tokens", len(request.prompt_token_ids))),
        output_tokens=n_out,
        requested_output_tokens=request.max_new_tokens,
        exact_output_len=request.exact_output_len,
        expected_prompt_tokens=expected_prompt_tokens,
        scheduled_s=scheduled_s,
        start_s=send_t - t0,
        end_s=end_t - t0,
        ttft_s=ttft_s,
        tpot_s=tpot_s,
        e2e_s=e2e_s,
        itl_s=itl,
        itl_chunk_s=itl_chunk,
        output_tps=output_tokens_per_second(n_out, e2e_s) if e2e_s else None,
        decode_tps=decode_tokens_per_second(tpot_s),
        queue_wait_s=queue_wait(send_t, scheduled_t),
        cached_tokens=engine_stats.get("cached_tokens"),
        delivery_lag_max_s=delivery_lag_max_s,
        finish_reason=valid_text(finish_reason) if finish_reason else finish_reason,
        error=valid_text(error) if error else error,
        engine_stats=engine_stats,
        output_token_ids=None if output_token_ids is None else [int(t) for t in output_token_ids],
    )


def _bad_count(engine_stats: dict[str, Any], key: str) -> Optional[str]:
    """An engine-reported token count that is not a whole number ≥ 0 (a server that lies) → the request's error."""
    if key not in engine_stats:
        return None
    value = engine_stats[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0 or value != int(value):
        return f"the engine reported an invalid {key.replace('_', ' ')} count: {str(value)[:40]!r}"
    return None
