"""Every metric the harness reports: one small function each, formula in the docstring.

Times are seconds from ``time.perf_counter()`` (monotonic), taken in the harness process.
The clock of a request starts just before it is handed to the engine (``send``); a token's
time is when the engine produced it (in-process) or when its chunk was parsed (HTTP).
docs/metrics.md lists the same definitions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, Optional

import numpy as np

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


def ttfo(send_t: float, first_answer_t: Optional[float]) -> Optional[float]:
    """Time to first output token (s) = t(first chunk of answer text, not reasoning) − t(send);
    TTFT when the reply has no reasoning. Needs a stream that tells the two apart."""
    return None if first_answer_t is None else first_answer_t - send_t


def ttst(chunks: Iterable[tuple[float, int]]) -> Optional[float]:
    """Time to second token (s) = t(second output token) − t(first output token): 0 when the
    first chunk carries two tokens or more; undefined for fewer than two tokens."""
    first_t: Optional[float] = None
    for t, n in chunks:
        if n <= 0:
            continue
        if first_t is not None:
            return t - first_t
        if n >= 2:
            return 0.0
        first_t = t
    return None


def client_wait(scheduled_s: Optional[float], start_s: float) -> Optional[float]:
    """Client wait (s) = t(send) − t(scheduled): open loop, how long a request waited in the
    client (for the concurrency cap, or a late sender) after it was due. Undefined in closed loop."""
    return None if scheduled_s is None else start_s - scheduled_s


def from_scheduled(wait_s: Optional[float], latency_s: Optional[float]) -> Optional[float]:
    """A latency from the scheduled time (s) = client wait + the latency from the send: what a
    user who arrived on schedule sees, so the coordinated-omission gap is not hidden."""
    return None if wait_s is None or latency_s is None else wait_s + latency_s


def http_phases(send_t: float, phases: Optional[dict[str, float]]) -> dict[str, Any]:
    """The request's HTTP phases from its send (s): ``http_connect_s`` = t(connected) −
    t(connect began), None when a kept connection was reused (``http_reused``);
    ``http_sent_s`` = t(request written) − t(send); ``http_first_byte_s`` and
    ``http_last_byte_s`` = t(first / last response byte received) − t(send)."""
    if not phases:
        return {}

    def since(key: str) -> Optional[float]:
        return phases[key] - send_t if key in phases else None

    connect = phases["connect_end"] - phases["connect_start"] if "connect_start" in phases else None
    return {
        "http_connect_s": connect,
        "http_reused": "connect_start" not in phases,
        "http_sent_s": since("sent"),
        "http_first_byte_s": since("first_byte"),
        "http_last_byte_s": since("last_byte"),
    }


# --- per run ----------------------------------------------------------------------------


def cost_per_million(usd_per_hour: Optional[float], duration_s: float, tokens: int) -> Optional[float]:
    """US$ per million tokens = P · T / 3600 / tokens · 10⁶; None without a price or tokens."""
    if usd_per_hour is None or tokens <= 0 or duration_s <= 0:
        return None
    return usd_per_hour * duration_s / 3600.0 / tokens * 1e6


def distribution(values: Sequence[float] | np.ndarray) -> dict[str, Optional[float]]:
    """mean, std, min, max and p50/p90/p95/p99 (linear interpolation between order statistics)."""
    if isinstance(values, np.ndarray):
        arr = values.astype(float, copy=False)
        arr = arr[~np.isnan(arr)]
    else:
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


def output_token_throughput(output_tokens: Sequence[int] | np.ndarray, duration_s: float) -> float:
    """Output tokens/s = Σ n_out / T over completed requests."""
    return float(sum(output_tokens)) / duration_s if duration_s > 0 else 0.0


def total_token_throughput(
    prompt_tokens: Sequence[int] | np.ndarray, output_tokens: Sequence[int] | np.ndarray, duration_s: float
) -> float:
    """Total tokens/s = Σ (n_in + n_out) / T over completed requests."""
    return float(sum(prompt_tokens) + sum(output_tokens)) / duration_s if duration_s > 0 else 0.0


def meets_slo(ttft_s: Any, tpot_s: Any, e2e_s: Any, slo: Any) -> Any:
    """A request meets the SLO when TTFT ≤ slo.ttft_s, TPOT ≤ slo.tpot_s and E2E ≤ slo.e2e_s (unset = no limit).

    Per request on arrays (one bool each); a TPOT that is None or NaN (one output token) has no limit."""
    met = np.ones(np.shape(ttft_s), dtype=bool)
    for value, limit in ((ttft_s, slo.ttft_s), (tpot_s, slo.tpot_s), (e2e_s, slo.e2e_s)):
        if limit is not None and value is not None:
            met &= ~(np.asarray(value, dtype=float) > limit)
    return met if met.ndim else bool(met)


def goodput(n_meeting_slo: int, duration_s: float) -> float:
    """Goodput (requests/s) = requests meeting every SLO / T."""
    return n_meeting_slo / duration_s if duration_s > 0 else 0.0


def mean_concurrency(e2e_values: Sequence[float] | np.ndarray, duration_s: float) -> float:
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
