"""The run folder's schema: its files, the columns of requests.parquet, how a run ended, and the
typed :class:`RunSummary` (summary.json) and :class:`RunResult` (a folder loaded).

This module alone names the files of a run folder:

- ``requests.jsonl`` — one line per finished request, flushed as it lands (survives a crash)
- ``requests.parquet`` — the same rows, written when the run ends (also on error or Ctrl-C)
- ``summary.json`` — the run's figures (:class:`RunSummary`); ``status`` says how it ended
- ``config.yaml`` — the resolved config; ``env.json`` — harness, libraries, hardware
- ``workload.json`` — the generated workload (text, token ids) and its sha256; for a data workload
  the prompts' ids and lengths and the data file's sha256, not the data
- ``memory.parquet`` — the RSS samples over time
- ``gpu.parquet`` — NVML's samples of each visible GPU over time (only where NVML runs)
- ``server_metrics.parquet`` — a server's ``/metrics`` sampled during the measured phase, long
  format (``t_s``, ``name``, ``labels``, ``kind``, ``value``; harness/telemetry/server_metrics.py);
  absent without a ``/metrics`` or with ``server_metrics.enabled=false``
- ``metrics_before.txt``, ``metrics_after.txt`` — the raw scrapes around the measured phase
- ``hosts.json`` — ``client.cluster=ray``: each client worker, the host it ran on and both
  measurements of its clock's offset, with their round trips (harness/client/ray_pool.py)
- ``machine.json`` — the machine's state before and during the run (CPU frequency and governor,
  load, other busy processes; GPU clocks, clocks-event reasons, temperature, modes, other GPU
  processes) and why the run is tainted (harness/telemetry/machine_state.py); absent with
  ``machine.enabled=false``
- ``report.html`` — written by harness/reports/run_report.py from the loaded :class:`RunResult`
- ``.claimed`` — the id of the process that claimed the folder for its run
- ``imported/`` — a run imported from another tool's files (``python -m harness.import``,
  harness/formats/): a copy of those files, as read; ``summary.json``'s ``source`` names the tool

Writing and reading them is :mod:`harness.results.store`'s job; report and compare render a
loaded :class:`RunResult` and never recompute what the summary holds.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pandas as pd

from core.hash_versions import HASH_VERSION, UNRECORDED
from harness.results.metrics import REQUEST_METRICS

SUMMARY = "summary.json"

# summary.json's layout, "major.minor", written into every summary.json (``schema_version``). A
# reader takes any minor of its own major or an older one: keys it does not know are dropped and
# missing ones take their defaults (RunSummary.from_dict). A newer major may mean other things by
# the same keys, so it is refused in one line (harness/results/store.py load_summary). A file
# written before the version was recorded reads as UNVERSIONED_SCHEMA.
#   1.0  the layout before versions were recorded
#   1.1  schema_version, and hash_version (the form of its hashes: core/hash_versions.py)
#   1.2  hosts (client.cluster=ray: each client host's requests, CPU, loop lag and clock)
#   1.3  source: a run imported from another benchmark tool's files (harness/formats/imported.py)
SCHEMA_VERSION = "1.3"
UNVERSIONED_SCHEMA = "1.0"

# The llm-d benchmark report version that ``python -m harness.export --format llmd`` writes, kept
# beside the harness's own: its published JSON schema is harness/formats/schemas/ (harness/formats/llmd.py).
LLMD_REPORT_VERSION = "0.2"

REQUESTS_PARQUET = "requests.parquet"

REQUESTS_JSONL = "requests.jsonl"

CONFIG = "config.yaml"

ENV = "env.json"

MACHINE = "machine.json"

HOSTS = "hosts.json"

WORKLOAD = "workload.json"

# Parts of a workload that summary.json's workload section describes in a few words with a
# fingerprint (the workload's sha256 covers them all): runs that differ in one are told which.
WORKLOAD_PARTS = (
    ("constraint", "reply constraint (response_format, tools)"),  # other constraints decode other tokens
    ("lora", "LoRA traffic (workload.lora.adapters)"),  # other adapters, other shares
    ("tree", "agent tree (workload=agentic)"),  # other jobs, fan-out, depth or tool gaps
)

MEMORY = "memory.parquet"

GPU = "gpu.parquet"

GPU_TABLE_COLUMNS = ("t_s", "device", "used_bytes", "process_used_bytes", "util_pct", "power_w", "energy_j")

SERVER_METRICS = "server_metrics.parquet"

SERVER_METRICS_COLUMNS = ("t_s", "name", "labels", "kind", "value")

METRICS_BEFORE, METRICS_AFTER = "metrics_before.txt", "metrics_after.txt"

REPORT = "report.html"

IMPORTED = "imported"  # a folder: the files an imported run was read from

REQUEST_COLUMNS = (
    "request_id",
    "session_id",
    "turn",
    "prompt_tokens",
    "output_tokens",
    "requested_output_tokens",
    "exact_output_len",
    "expected_prompt_tokens",
    "scheduled_s",
    "start_s",
    "end_s",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "itl_s",
    "itl_chunk_s",
    "output_tps",
    "decode_tps",
    "queue_wait_s",
    "cached_tokens",
    "delivery_lag_max_s",
    "ttfo_s",
    "ttst_s",
    "reasoning_tokens",
    "client_wait_s",
    "ttft_from_scheduled_s",
    "e2e_from_scheduled_s",
    "stage",
    "engine_timings_source",
    "http_connect_s",
    "http_reused",
    "http_sent_s",
    "http_first_byte_s",
    "http_last_byte_s",
    "endpoint",
    "adapter",
    "job_id",
    "depth",
    "parent_request_id",
    "output_check",
    "output_valid",
    "output_invalid_reason",
    "tool_calls",
    "finish_reason",
    "error",
    "output_text",
    "engine_stats",
    "output_token_ids",
)

TEXT_COLUMNS = ("finish_reason", "error", "output_text", "output_invalid_reason", "tool_calls")

# How a run ended. A saturated point was stopped early on purpose (its queue kept growing);
# what it measured before that is kept.
COMPLETE, SATURATED, INTERRUPTED, FAILED = "complete", "saturated", "interrupted", "failed"

FINISHED = (COMPLETE, SATURATED)  # nothing to redo: a resumed sweep skips these
INTERRUPTED_ERROR = "interrupted (Ctrl-C, SIGTERM or SIGHUP)"  # the error of a run or a point stopped so


@dataclass
class RunSummary:
    """summary.json, typed. Sections that are tables of figures stay dicts:
    ``latency[metric]`` is a distribution (count, mean, std, min, max, p50…p99) and
    ``throughput[metric]`` a number, keyed by the metric registry (harness/results/metrics.py)."""

    schema_version: str = SCHEMA_VERSION  # this file's layout (UNVERSIONED_SCHEMA for one written before)
    status: str = FAILED  # how the run ended: complete, saturated, interrupted or failed
    error: Optional[str] = None  # why it failed or was interrupted, in one line
    started_at: Optional[str] = None  # when the run began (ISO 8601, with the machine's UTC offset)
    backend: dict[str, Any] = field(default_factory=dict)  # name, mode, engine, engine_version, info
    model: dict[str, Any] = field(default_factory=dict)  # name, source and files of the model
    # name, sha256 (prompts + arrivals), prompts_sha256 (without arrivals), requests_planned,
    # plan_s (building the plan), sessions, open_loop, concurrency, rate, exact_output_len
    workload: dict[str, Any] = field(default_factory=dict)
    seed: Optional[int] = None  # the run's seed
    # sent, completed and failed (the whole run's, also with a window)
    requests: dict[str, int] = field(default_factory=lambda: {"sent": 0, "completed": 0, "failed": 0})
    duration_s: float = 0.0  # T: the measured phase's wall time (the window's with one)
    # each request metric's distribution: count, mean, std, min, max, p50, p90, p95, p99
    latency: dict[str, dict[str, Optional[float]]] = field(default_factory=dict)
    # each run metric: requests/s, tokens/s, goodput, SLO attainment, energy…
    throughput: dict[str, Optional[float]] = field(default_factory=dict)
    # cached prompt tokens: the share served from the engine's cache
    prefix_cache: dict[str, Any] = field(default_factory=dict)
    # prompt and output tokens of the completed requests: totals and means
    tokens: dict[str, Any] = field(default_factory=dict)
    # chat: per turn number, requests, context length, TTFT and E2E
    per_turn: list[dict[str, Any]] = field(default_factory=list)
    # each stage time the engine reported (harness/results/metrics.py ENGINE_STAGES), named by the interval
    # it covers, with the harness's measure of the same interval beside it
    engine_stages: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the client's own figures: delivery lag, send lag, event-loop lag, CPU, workers
    harness: dict[str, Any] = field(default_factory=dict)
    # what to distrust: failed requests, lengths other than asked for, a busy client
    warnings: list[str] = field(default_factory=list)
    # RSS, torch allocator and NVML peaks, weights, KV cache per token
    memory: dict[str, Any] = field(default_factory=dict)
    load_s: float = 0.0  # engine load time paid by this run (0 when it reused a loaded engine)
    # the engine session: reused (loaded for an earlier point), session_load_s, points_served
    engine: dict[str, Any] = field(default_factory=dict)
    config_sha256: Optional[str] = None  # the point's resolved config (what resume matches on)
    # the form of config_sha256 and the workload's hashes this run was made with (core/hash_versions.py;
    # UNRECORDED before runs recorded it); a loaded summary holds its hashes in the current form
    hash_version: int = HASH_VERSION
    repeat: Optional[dict[str, int]] = None  # {"index": i, "of": n} when the point is repeated
    saturated: Optional[str] = None  # why an open-loop point was stopped as over-saturated
    server_metrics: Optional[dict[str, Any]] = None
    # the GPUs through NVML (harness/telemetry/gpu_phase.py): devices, energy, scope, notes; absent without NVML
    gpu: Optional[dict[str, Any]] = None
    # why the machine was not fit to measure on (harness/telemetry/machine_state.py): one sentence
    # each; a tainted run is rerun or left out of a decision, never averaged in. [] when clean
    taint: list[str] = field(default_factory=list)
    # The steady-state window (workload.warmup_s, cooldown_s; docs/metrics.md): its bounds and
    # request counts; latency and throughput above are then the window's, and whole_run keeps
    # the whole run's (requests, duration_s, latency, throughput). Absent without a window.
    window: Optional[dict[str, Any]] = None
    whole_run: Optional[dict[str, Any]] = None
    # A time-shaped load: one entry per stage (index, start_s, end_s, rate | concurrency,
    # requests, latency, throughput over the stage's length). Absent for a run of a count.
    stages: Optional[list[dict[str, Any]]] = None
    # Several endpoints (backend.urls, backend.replicas): {index: {url, requests, completed, failed,
    # latency, throughput, cached_share}} (harness/results/summary.py endpoints). Absent with one.
    endpoints: Optional[dict[str, dict[str, Any]]] = None
    # LoRA traffic (workload.lora.adapters): {name: {share, requests, completed, failed, latency,
    # throughput}}, "base" for requests without an adapter (harness/results/summary.py adapters). Absent without.
    adapters: Optional[dict[str, dict[str, Any]]] = None
    # Structured output (workload.response_format, workload.tools): {checked, valid, valid_share,
    # by_kind, examples, validator} (harness/results/summary.py structured). Absent without a constraint.
    structured: Optional[dict[str, Any]] = None
    # Agent jobs (workload=agentic): {count, completed, failed, slo_job_s, job_s, critical_path_s,
    # critical_path_requests, critical_path_share, job_cached_share (distributions over completed
    # jobs), jobs_per_s, job_goodput_share, job_goodput_per_s, by_depth} (harness/results/jobs.py).
    # Absent without agent jobs.
    jobs: Optional[dict[str, Any]] = None
    # The client's hosts on a Ray cluster (client.cluster=ray): {index: {hostname, ip, node_id,
    # workers, requests, completed, failed, cpu_cores, loop_lag_s, rss_peak_bytes, clock
    # {offset_s, rtt_s, offset_after_s, drift_s, drifted…}, delivery_s, lost}}
    # (harness/client/ray_pool.py). Absent with a local client.
    hosts: Optional[dict[str, dict[str, Any]]] = None
    # A run another tool measured, imported from its files (python -m harness.import): {tool, title,
    # tool_version, format, label, files, imported_at, per_request, figures (its own, in its units),
    # definitions (its own, by name), absent (harness figures it lacks), native (its configuration)}.
    # Absent for the harness's own runs.
    source: Optional[dict[str, Any]] = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in (
            "server_metrics",
            "gpu",
            "window",
            "whole_run",
            "stages",
            "endpoints",
            "adapters",
            "structured",
            "jobs",
            "hosts",
            "source",
        ):
            if out[key] is None:
                del out[key]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSummary:
        """From summary.json; keys this version does not know are dropped, missing ones default
        (a file that records no versions was written before they were recorded)."""
        known = {f.name for f in dataclasses.fields(cls)}
        data = {"schema_version": UNVERSIONED_SCHEMA, "hash_version": UNRECORDED, **data}
        return cls(**{k: v for k, v in data.items() if k in known})

    def stat(self, metric: str, stat: str = "p50") -> Optional[float]:
        """A figure in SI units: ``latency[metric][stat]`` for request metrics, else ``throughput[metric]``."""
        if metric in self.latency:
            value = (self.latency.get(metric) or {}).get(stat)
        else:
            value = self.throughput.get(metric)
        return value if isinstance(value, (int, float)) and math.isfinite(value) else None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED


@dataclass
class RunResult:
    """A run folder loaded: the typed summary, the requests, and the optional files (None when missing)."""

    run_dir: Path
    summary: RunSummary
    requests: pd.DataFrame
    env: dict[str, Any]
    config_text: Optional[str]
    workload: Optional[dict[str, Any]]
    memory: Optional[pd.DataFrame]
    gpu: Optional[pd.DataFrame] = None  # gpu.parquet: one row per device per sample
    server_series: Optional[pd.DataFrame] = None  # server_metrics.parquet: the server's /metrics over time

    @property
    def name(self) -> str:
        return self.run_dir.name

    @property
    def completed(self) -> pd.DataFrame:
        return completed(self.requests)

    def values(self, metric: str) -> np.ndarray:
        """A request metric's per-request values over completed requests (ITL pooled)."""
        return REQUEST_METRICS[metric].frame_values(self.completed)

    def config(self) -> dict[str, Any]:
        """config.yaml as a dict ({} when missing or unreadable)."""
        if not self.config_text:
            return {}
        try:
            from omegaconf import OmegaConf

            config = OmegaConf.to_container(OmegaConf.create(self.config_text))
            return {str(key): value for key, value in config.items()} if isinstance(config, dict) else {}
        except Exception:  # noqa: BLE001 - a damaged config.yaml must not stop a report
            return {}


CLAIM = ".claimed"


def schema_major(version: Any) -> int:
    """The major of a ``schema_version`` ("1.1" → 1; a bare integer is a major); ValueError for
    anything else."""
    if isinstance(version, bool):
        raise ValueError(f"not a schema version: {version!r}")
    if isinstance(version, int):
        return version
    major, dot, minor = str(version).partition(".")
    if not major.isdigit() or (dot and not minor.isdigit()):
        raise ValueError(f"not a schema version: {version!r}")
    return int(major)


def completed(df: pd.DataFrame) -> pd.DataFrame:
    """The requests that finished without an error (the only ones in latency figures)."""
    if df.empty:
        return df
    err = df["error"]
    return df[err.isna() | (err.astype(str) == "")]
