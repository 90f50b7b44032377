"""Every metric the harness reports, defined once: tag, label, unit, direction and formula.

Two kinds:

- a **request metric** has one value per completed request (or, for ITL, per token gap);
  the run reports its distribution (``summary.json`` → ``latency.<key>``: count, mean, std,
  min, max, p50, p90, p95, p99), and compare bootstraps its per-request values;
- a **run metric** is one number for the whole measured phase (``summary.json`` →
  ``throughput.<key>``). A run metric with a ``source`` (``"gpu"``: NVML's samples, see
  harness/telemetry/gpu_phase.py) is None on runs without that source — a CPU run has no J/token — and
  the console, report, compare and sweep tables leave it out there rather than show a zero.

The summary, the console table, the report, compare (its table, CSV and gate) and the sweep
table iterate over :data:`REQUEST_METRICS` and :data:`RUN_METRICS`. Adding a metric is one
class here, registered with :func:`register`; the per-request formulas it uses live in
``harness/results/formulas.py``. The class docstring is the formula, and docs/metrics.md lists it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Optional, overload

import numpy as np

from harness.results import formulas
from harness.results.kept import STATS_PREFIX, RequestTable, as_table
from harness.results.record import RequestRecord
from harness.telemetry.gpu_phase import GpuPhase

STATS = ("mean", "p50", "p90", "p95", "p99")  # what tables show of a distribution


class Metric:
    """One metric: ``key`` (its tag, as stored), ``label``, display ``unit`` and ``scale``
    (stored SI value × scale = shown value), and ``lower_is_better``."""

    key: ClassVar[str]
    label: ClassVar[str]
    unit: ClassVar[str]
    scale: ClassVar[float] = 1.0
    lower_is_better: ClassVar[bool] = True
    digits: ClassVar[int] = 1  # decimals when shown

    @classmethod
    def formula(cls) -> str:
        return " ".join((cls.__doc__ or "").split())

    @overload
    @classmethod
    def show(cls, value: float) -> float: ...

    @overload
    @classmethod
    def show(cls, value: None) -> None: ...

    @overload
    @classmethod
    def show(cls, value: Optional[float]) -> Optional[float]: ...

    @classmethod
    def show(cls, value: Optional[float]) -> Optional[float]:
        """A stored value in the display unit (None stays None)."""
        return None if value is None else value * cls.scale

    @classmethod
    def better(cls, a: float, b: float) -> bool:
        """Is ``a`` better than ``b``?"""
        return a < b if cls.lower_is_better else a > b


class RequestMetric(Metric):
    """A per-request value; its distribution over completed requests goes into the summary."""

    in_console: ClassVar[bool] = True  # a row of the console and report latency tables
    # a "why" figure (reasoning, the client's wait, HTTP phases): summary.json and the report's
    # detail table where a run has it; not in the console, compare or sweep tables
    detail: ClassVar[bool] = False
    in_compare: ClassVar[bool] = True  # bootstrapped against the baseline by compare
    pooled: ClassVar[bool] = False  # the column holds a list per request, pooled over all of them

    @classmethod
    def value(cls, record: RequestRecord) -> Any:
        return getattr(record, cls.key)

    @classmethod
    def values(cls, ok: RequestTable) -> np.ndarray:
        """The values over completed requests (``ok``), for the run's distribution, as one float
        array (pooled ones: every kept gap of every request)."""
        return ok.gaps(cls.key) if cls.pooled else ok.values(cls.key)

    @classmethod
    def frame_values(cls, ok_requests: Any) -> np.ndarray:
        """The same values from the completed rows of a requests table (pandas)."""
        if ok_requests is None or len(ok_requests) == 0 or cls.key not in ok_requests:
            return np.empty(0)
        column = ok_requests[cls.key]
        if cls.pooled:
            flat = [v for lst in column if lst is not None for v in lst]
        else:
            flat = list(column)
        arr = np.asarray([v for v in flat if v is not None], dtype=float)
        return arr[np.isfinite(arr)]


@dataclass
class RunTotals:
    """What run metrics are computed from: the completed requests, those meeting the SLO, T,
    and the measured phase's GPU figures (None without NVML)."""

    ok: RequestTable  # records are made one (:func:`harness.results.kept.as_table`)
    meeting_slo: int
    duration_s: float
    gpu: Optional[GpuPhase] = None
    usd_per_hour: Optional[float] = None  # cost.*: the machine's price; None when not given

    def __post_init__(self) -> None:
        self.ok = as_table(self.ok, ENGINE_STAGES)

    def tokens(self, *names: str) -> int:
        """Σ of the token columns ``names`` over the completed requests."""
        return int(sum(self.ok.values(name).sum() for name in names))


class RunMetric(Metric):
    """One figure for the whole measured phase."""

    in_console: ClassVar[bool] = True
    source: ClassVar[Optional[str]] = None  # what it needs beyond the requests ("gpu"); absent without it

    @classmethod
    def compute(cls, totals: RunTotals) -> Optional[float]:
        raise NotImplementedError


REQUEST_METRICS: dict[str, type[RequestMetric]] = {}
RUN_METRICS: dict[str, type[RunMetric]] = {}


def register(cls):
    """Class decorator: add a metric to its registry (order of registration = order shown)."""
    table = REQUEST_METRICS if issubclass(cls, RequestMetric) else RUN_METRICS
    if cls.key in REQUEST_METRICS or cls.key in RUN_METRICS:
        raise ValueError(f"metric {cls.key} is defined twice")
    table[cls.key] = cls
    return cls


def get(key: str) -> type[Metric]:
    if key in REQUEST_METRICS:
        return REQUEST_METRICS[key]
    if key in RUN_METRICS:
        return RUN_METRICS[key]
    raise KeyError(f"unknown metric {key!r}: one of {', '.join([*REQUEST_METRICS, *RUN_METRICS])}")


# --- per request --------------------------------------------------------------------------


@register
class TTFT(RequestMetric):
    """TTFT (s) = t(first output token) − t(send). Includes queueing and prefill."""

    key, label, unit, scale = "ttft_s", "TTFT", "ms", 1000.0


@register
class TPOT(RequestMetric):
    """TPOT (s/token) = (E2E − TTFT) / (n_out − 1); undefined for n_out ≤ 1."""

    key, label, unit, scale = "tpot_s", "TPOT", "ms", 1000.0


@register
class ITL(RequestMetric):
    """ITL per token (s) = the gaps between consecutive output tokens, pooled over all requests
    (token-weighted): a chunk of k tokens arriving g after the previous one gives k gaps of g/k,
    the chunks' token counts reconciled with n_out (the server's usage), so each request has
    n_out − 1 gaps, Σ = E2E − TTFT and their mean is TPOT."""

    key, label, unit, scale = "itl_s", "ITL per token", "ms", 1000.0
    pooled = True
    in_compare = False


@register
class ITLChunk(RequestMetric):
    """ITL per chunk (s) = the gaps between consecutive chunks that carry tokens (a server-sent
    event, or an engine step), pooled over all requests: chunks − 1 gaps a request,
    Σ = E2E − TTFT; equal to ITL per token when every chunk is one token (usage = chunks)."""

    key, label, unit, scale = "itl_chunk_s", "ITL per chunk", "ms", 1000.0
    pooled = True
    in_compare = False
    in_console = False  # summary.json and compare.csv; the console tables keep to 120 columns


@register
class E2E(RequestMetric):
    """E2E latency (s) = t(last output token) − t(send)."""

    key, label, unit, scale = "e2e_s", "E2E", "ms", 1000.0


@register
class QueueWait(RequestMetric):
    """Queue wait (s) = t(engine began work on the request) − t(send), where the engine says."""

    key, label, unit, scale = "queue_wait_s", "queue wait", "ms", 1000.0
    in_compare = False


class DetailMetric(RequestMetric):
    """A per-request figure that explains the others: summary.json, and the report's detail table."""

    in_console = False
    in_compare = False
    detail = True


@register
class TTFO(DetailMetric):
    """Time to first output token (s) = t(first chunk of answer text, not reasoning) − t(send);
    equal to TTFT without reasoning. Over HTTP chat streams, which send reasoning apart
    (``reasoning`` or ``reasoning_content`` deltas); empty in-process."""

    key, label, unit, scale = "ttfo_s", "time to first output token", "ms", 1000.0


@register
class TTST(DetailMetric):
    """Time to second token (s) = t(second output token) − t(first output token); 0 when the
    first chunk carries two tokens."""

    key, label, unit, scale = "ttst_s", "time to second token", "ms", 1000.0


@register
class ReasoningTokens(DetailMetric):
    """Reasoning tokens per request = the server's usage.completion_tokens_details.reasoning_tokens,
    else the streamed reasoning text re-tokenized (counted in n_out too)."""

    key, label, unit, digits = "reasoning_tokens", "reasoning tokens", "tokens", 0


@register
class ClientWait(DetailMetric):
    """Client wait (s) = t(send) − t(scheduled), open loop: time a due request waited in the client."""

    key, label, unit, scale = "client_wait_s", "client wait before send", "ms", 1000.0


@register
class TTFTFromScheduled(DetailMetric):
    """TTFT from the scheduled time (s) = client wait + TTFT = t(first token) − t(scheduled), open loop."""

    key, label, unit, scale = "ttft_from_scheduled_s", "TTFT from scheduled", "ms", 1000.0


@register
class E2EFromScheduled(DetailMetric):
    """E2E from the scheduled time (s) = client wait + E2E = t(last token) − t(scheduled), open loop."""

    key, label, unit, scale = "e2e_from_scheduled_s", "E2E from scheduled", "ms", 1000.0


@register
class HTTPConnect(DetailMetric):
    """HTTP connect (s) = t(connection made) − t(connect began), for requests that opened a
    connection (TLS included); requests on a kept connection have none (``http_reused``)."""

    key, label, unit, scale, digits = "http_connect_s", "HTTP connect (new connections)", "ms", 1000.0, 2


@register
class HTTPSent(DetailMetric):
    """HTTP request sent (s) = t(request written to the socket) − t(send): building the body,
    a free or new connection, the write."""

    key, label, unit, scale, digits = "http_sent_s", "HTTP request sent", "ms", 1000.0, 2


@register
class HTTPFirstByte(DetailMetric):
    """HTTP first byte (s) = t(first response byte received) − t(send): the server's head
    (it may precede the first token: servers send headers at once)."""

    key, label, unit, scale = "http_first_byte_s", "HTTP first byte", "ms", 1000.0


@register
class HTTPLastByte(DetailMetric):
    """HTTP last byte (s) = t(last response byte received) − t(send), [DONE] and usage included."""

    key, label, unit, scale = "http_last_byte_s", "HTTP last byte", "ms", 1000.0


@register
class OutputTPS(RequestMetric):
    """Output rate per request (tokens/s) = n_out / E2E, as the user sees it."""

    key, label, unit = "output_tps", "output tok/s per request", "tok/s"
    lower_is_better = False
    in_console = False


@register
class DecodeTPS(RequestMetric):
    """Decode rate per request (tokens/s) = 1 / TPOT = (n_out − 1) / (E2E − TTFT)."""

    key, label, unit = "decode_tps", "decode tok/s per request", "tok/s"
    lower_is_better = False
    in_console = False
    in_compare = False


# --- per run ------------------------------------------------------------------------------


@register
class RequestThroughput(RunMetric):
    """Requests/s = completed requests / T, T = wall time of the measured phase."""

    key, label, unit, digits = "requests_per_s", "requests/s", "req/s", 3
    lower_is_better = False

    @classmethod
    def compute(cls, totals: RunTotals) -> Optional[float]:
        return formulas.request_throughput(len(totals.ok), totals.duration_s)


@register
class OutputThroughput(RunMetric):
    """Output tokens/s = Σ n_out / T over completed requests."""

    key, label, unit = "output_tokens_per_s", "output tokens/s", "tok/s"
    lower_is_better = False

    @classmethod
    def compute(cls, totals: RunTotals) -> Optional[float]:
        return formulas.output_token_throughput(totals.ok.values("output_tokens"), totals.duration_s)


@register
class TotalThroughput(RunMetric):
    """Total tokens/s = Σ (n_in + n_out) / T over completed requests."""

    key, label, unit = "total_tokens_per_s", "total tokens/s", "tok/s"
    lower_is_better = False

    @classmethod
    def compute(cls, totals: RunTotals) -> Optional[float]:
        ok = totals.ok
        return formulas.total_token_throughput(
            ok.values("prompt_tokens"), ok.values("output_tokens"), totals.duration_s
        )


@register
class Goodput(RunMetric):
    """Goodput (requests/s) = requests meeting every SLO (TTFT ≤ slo.ttft_s, TPOT ≤ slo.tpot_s,
    E2E ≤ slo.e2e_s; unset = no limit) / T."""

    key, label, unit, digits = "goodput_requests_per_s", "goodput", "req/s", 3
    lower_is_better = False

    @classmethod
    def compute(cls, totals: RunTotals) -> Optional[float]:
        return formulas.goodput(totals.meeting_slo, totals.duration_s)


@register
class SLOAttainment(RunMetric):
    """SLO attainment (fraction) = requests meeting every SLO / completed requests."""

    key, label, unit, scale = "slo_attainment", "SLO attainment", "%", 100.0
    lower_is_better = False

    @classmethod
    def compute(cls, totals: RunTotals) -> Optional[float]:
        return totals.meeting_slo / len(totals.ok) if totals.ok else None


@register
class MeanConcurrency(RunMetric):
    """Mean requests in flight (Little's law) = Σ E2E / T."""

    key, label, unit, digits = "mean_concurrency", "mean concurrency", "requests", 2
    lower_is_better = False  # not a goal in itself; higher means the engine held more at once

    @classmethod
    def compute(cls, totals: RunTotals) -> Optional[float]:
        return formulas.mean_concurrency(totals.ok.values("e2e_s"), totals.duration_s)


# --- per run, from the GPUs (NVML; absent on runs without it) ----------------------------


@register
class EnergyPerToken(RunMetric):
    """Energy per output token (J/token) = E / Σ n_out over completed requests, E = the GPUs'
    energy over the measured phase, Σ over the visible GPUs: NVML's energy counter at the end
    minus at the start, else ∫ sampled power dt. Whole devices: other work on them counts too."""

    key, label, unit, digits = "energy_per_token_j", "energy per output token", "J/token", 4
    source = "gpu"

    @classmethod
    def compute(cls, totals: RunTotals) -> Optional[float]:
        tokens = totals.tokens("output_tokens")
        energy = totals.gpu.energy_j if totals.gpu else None
        return energy / tokens if energy is not None and tokens > 0 else None


@register
class GpuPower(RunMetric):
    """Mean GPU power (W) = E / T, E the GPUs' energy over the measured phase (Σ over the visible GPUs)."""

    key, label, unit = "gpu_power_w", "mean GPU power", "W"
    source = "gpu"  # lower is better at equal throughput; J/token is the figure that weighs both

    @classmethod
    def compute(cls, totals: RunTotals) -> Optional[float]:
        energy = totals.gpu.energy_j if totals.gpu else None
        return energy / totals.duration_s if energy is not None and totals.duration_s > 0 else None


@register
class GpuUtilisation(RunMetric):
    """Mean GPU utilisation (fraction) = (1/T) ∫ u dt over the measured phase, u = NVML's
    utilization.gpu (share of its sample period in which a kernel ran), mean over the visible GPUs."""

    key, label, unit, scale = "gpu_util", "mean GPU utilisation", "%", 100.0
    lower_is_better = False  # not a goal in itself; higher means the engine kept the GPUs busier
    source = "gpu"

    @classmethod
    def compute(cls, totals: RunTotals) -> Optional[float]:
        return totals.gpu.util if totals.gpu else None


@register
class CostPerMillionOutputTokens(RunMetric):
    """Cost per million output tokens (US$) = P · T / 3600 / Σ n_out · 10⁶, P the machine's price
    per hour (``cost.usd_per_hour``, or ``cost.usd_per_accelerator_hour`` × ``cost.accelerators``),
    T the measured phase: what the run's output would cost at that price, the machine kept as busy."""

    key, label, unit, digits = "usd_per_million_output_tokens", "$ per million output tokens", "$", 3
    source = "cost"

    @classmethod
    def compute(cls, totals: RunTotals) -> Optional[float]:
        tokens = totals.tokens("output_tokens")
        return formulas.cost_per_million(totals.usd_per_hour, totals.duration_s, tokens)


@register
class CostPerMillionTotalTokens(RunMetric):
    """Cost per million total tokens (US$) = P · T / 3600 / Σ (n_in + n_out) · 10⁶ (prompt tokens count too)."""

    key, label, unit, digits = "usd_per_million_total_tokens", "$ per million total tokens", "$", 3
    source = "cost"

    @classmethod
    def compute(cls, totals: RunTotals) -> Optional[float]:
        tokens = totals.tokens("prompt_tokens", "output_tokens")
        return formulas.cost_per_million(totals.usd_per_hour, totals.duration_s, tokens)


# --- per run, from the checks of constrained replies (absent on runs without a constraint) -------


@register
class ValidOutputShare(RunMetric):
    """Valid replies (fraction) = completed requests whose reply satisfied its constraint (JSON
    schema, regex, required tool call; core/structured.py) / completed requests that were checked.
    Beside the speed: an engine that ignores the constraint is fast and wrong."""

    key, label, unit, scale = "valid_output_share", "valid replies", "%", 100.0
    lower_is_better = False
    source = "structured"
    in_console = False  # the console's own structured-output line says it, with the counts

    @classmethod
    def compute(cls, totals: RunTotals) -> Optional[float]:
        checked = totals.ok.values("output_valid")
        return float(checked.sum()) / len(checked) if len(checked) else None


# --- engine-reported stage times, beside the harness's measure of the same interval -----------


@dataclass(frozen=True)
class EngineStage:
    """A time an engine reports per request (a key of ``engine_stats``), named by the interval it
    covers, with the harness's own measure of the nearest interval: an engine's clock starts
    where the engine first sees the request, the harness's at the send, so the two differ by
    the engine's input path (tokenizing, IPC to the engine core) and output path."""

    key: str  # in engine_stats, seconds (or ms with scale 1000)
    engine: str
    label: str
    interval: str  # what the engine's figure covers
    harness_label: str
    harness_interval: str  # what the harness's figure covers
    scale: float = 1.0  # engine value / scale = seconds

    def engine_values(self, t: RequestTable) -> np.ndarray:
        """The engine's figure of each request, in seconds (NaN: not reported)."""
        return t.column(STATS_PREFIX + self.key) / self.scale

    def harness_values(self, t: RequestTable) -> np.ndarray:
        raise NotImplementedError


class _QueueStage(EngineStage):
    def harness_values(self, t: RequestTable) -> np.ndarray:
        """queue_wait_s = t(engine began work) − t(send); none over HTTP, where queue_wait_s is the engine's own."""
        told = np.array([bool(s) for s in t.column("engine_timings_source")], dtype=bool)
        return np.where(told, np.nan, t.column("queue_wait_s"))


class _PrefillStage(EngineStage):
    def harness_values(self, t: RequestTable) -> np.ndarray:
        """TTFT − queue wait = t(first token) − t(engine began work); TTFT where no queue wait is known."""
        return t.column("ttft_s") - np.nan_to_num(t.column("queue_wait_s"), nan=0.0)


class _DecodeStage(EngineStage):
    def harness_values(self, t: RequestTable) -> np.ndarray:
        """E2E − TTFT = t(last token) − t(first token)."""
        return t.column("e2e_s") - t.column("ttft_s")


_QUEUE_H = (
    "queue wait (queue_wait_s)",
    "harness send → the engine's scheduler first schedules it: includes the "
    "engine's input path (vLLM: processing and IPC to the engine core) as well as its scheduler queue",
)
_PREFILL_H = ("TTFT − queue wait", "first scheduled → first token received by the harness")
_DECODE_H = ("E2E − TTFT", "first token → last token, as received by the harness")
ENGINE_STAGES: dict[str, EngineStage] = {
    s.key: s
    for s in (
        _QueueStage(
            "vllm_queue_s",
            "vllm",
            "vLLM scheduler queue (vllm_queue_s)",
            "queued_ts → scheduled_ts: from when vLLM's scheduler queued the request to when it first scheduled it; "
            "time in vLLM's input path before the scheduler queued it is not in it",
            *_QUEUE_H,
        ),
        _PrefillStage(
            "vllm_prefill_s",
            "vllm",
            "vLLM prefill (vllm_prefill_s)",
            "scheduled_ts → first_token_ts, in vLLM's engine core",
            *_PREFILL_H,
        ),
        _DecodeStage(
            "vllm_decode_s",
            "vllm",
            "vLLM decode (vllm_decode_s)",
            "first_token_ts → last_token_ts, in vLLM's engine core",
            *_DECODE_H,
        ),
        _PrefillStage(
            "llama_t_p_eval_ms",
            "llama.cpp",
            "llama.cpp prompt eval (llama_t_p_eval_ms)",
            "llama.cpp's time in llama_decode over the prompt (compute only: no sampling, no queue)",
            *_PREFILL_H,
            scale=1000.0,
        ),
        _DecodeStage(
            "llama_t_eval_ms",
            "llama.cpp",
            "llama.cpp eval (llama_t_eval_ms)",
            "llama.cpp's time in llama_decode for the tokens after the first (compute only)",
            *_DECODE_H,
            scale=1000.0,
        ),
        _PrefillStage(
            "llama_server_prompt_ms",
            "llama-server",
            "llama-server prompt (timings.prompt_ms)",
            "llama-server's prompt processing of the request's slot, up to the first token (no queue)",
            *_PREFILL_H,
            scale=1000.0,
        ),
        _DecodeStage(
            "llama_server_predicted_ms",
            "llama-server",
            "llama-server predicted (timings.predicted_ms)",
            "llama-server's generation of the tokens after the first",
            *_DECODE_H,
            scale=1000.0,
        ),
    )
}


def engine_stage_figures(ok: RequestTable) -> dict[str, dict[str, Any]]:
    """``engine_stages`` of the summary: for each stage time the engine reported, its
    distribution and the harness's measure of the same interval over the same requests."""
    out: dict[str, dict[str, Any]] = {}
    for key, stage in ENGINE_STAGES.items():
        if not ok.has(STATS_PREFIX + key):
            continue
        engine = stage.engine_values(ok)
        told = ~np.isnan(engine)
        if not told.any():
            continue
        out[key] = {
            "label": stage.label,
            "interval": stage.interval,
            "harness_label": stage.harness_label,
            "harness_interval": stage.harness_interval,
            "engine": formulas.distribution(engine[told]),
            "harness": formulas.distribution(stage.harness_values(ok)[told]),
        }
    return out


def shown_run_metrics(throughput: dict[str, Optional[float]]) -> list[str]:
    """The run metrics a table shows for a run: all, less those with a source and no value."""
    return [k for k, m in RUN_METRICS.items() if m.source is None or throughput.get(k) is not None]


def distributions(ok: RequestTable | Sequence[RequestRecord]) -> dict[str, dict[str, Optional[float]]]:
    """``latency`` of the summary: each request metric's distribution over completed requests."""
    table = as_table(ok, ENGINE_STAGES)
    return {key: formulas.distribution(m.values(table)) for key, m in REQUEST_METRICS.items()}


def run_figures(totals: RunTotals) -> dict[str, Optional[float]]:
    """``throughput`` of the summary: each run metric's value."""
    out = {}
    for key, m in RUN_METRICS.items():
        value = m.compute(totals)
        out[key] = None if value is None or (isinstance(value, float) and math.isnan(value)) else value
    return out
