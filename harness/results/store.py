"""The run folder: its schema, its writer, and the typed result it loads back into.

This module alone knows the files of a run folder:

- ``requests.jsonl`` — one line per finished request, flushed as it lands (survives a crash)
- ``requests.parquet`` — the same rows, written when the run ends (also on error or Ctrl-C)
- ``summary.json`` — the run's figures (:class:`RunSummary`); ``status`` says how it ended
- ``config.yaml`` — the resolved config; ``env.json`` — harness, libraries, hardware
- ``workload.json`` — the generated workload (text, token ids) and its sha256; for a data workload
  the prompts' ids and lengths and the data file's sha256, not the data
- ``memory.parquet`` — the RSS samples over time
- ``gpu.parquet`` — NVML's samples of each visible GPU over time (only where NVML runs)
- ``report.html`` — written by harness/reports/run_report.py from the loaded :class:`RunResult`

:func:`load_run` returns a :class:`RunResult`; report and compare render it and never
recompute what the summary holds.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np
import orjson
import pandas as pd

from core.text import valid_text
from harness.results.formulas import RequestRecord

SUMMARY = "summary.json"
REQUESTS_PARQUET = "requests.parquet"
REQUESTS_JSONL = "requests.jsonl"
CONFIG = "config.yaml"
ENV = "env.json"
WORKLOAD = "workload.json"
MEMORY = "memory.parquet"
GPU = "gpu.parquet"
GPU_TABLE_COLUMNS = ("t_s", "device", "used_bytes", "process_used_bytes", "util_pct", "power_w", "energy_j")
REPORT = "report.html"

REQUEST_COLUMNS = (
    "request_id", "session_id", "turn", "prompt_tokens", "output_tokens", "requested_output_tokens",
    "exact_output_len", "expected_prompt_tokens", "scheduled_s", "start_s", "end_s", "ttft_s", "tpot_s",
    "e2e_s", "itl_s", "itl_chunk_s", "output_tps", "decode_tps", "queue_wait_s", "cached_tokens", "delivery_lag_max_s", "finish_reason",
    "error", "output_text", "engine_stats", "output_token_ids",
)

TEXT_COLUMNS = ("finish_reason", "error", "output_text")


def clean_text(value: Any) -> Optional[str]:
    """None, or a string that encodes as UTF-8 (lone surrogates replaced by U+FFFD)."""
    if value is None:
        return None
    return valid_text(value if isinstance(value, str) else str(value))


# How a run ended. A saturated point was stopped early on purpose (its queue kept growing);
# what it measured before that is kept.
COMPLETE, SATURATED, INTERRUPTED, FAILED = "complete", "saturated", "interrupted", "failed"
FINISHED = (COMPLETE, SATURATED)  # nothing to redo: a resumed sweep skips these


@dataclass
class RunSummary:
    """summary.json, typed. Sections that are tables of figures stay dicts:
    ``latency[metric]`` is a distribution (count, mean, std, min, max, p50…p99) and
    ``throughput[metric]`` a number, keyed by the metric registry (harness/results/metrics.py)."""

    status: str = FAILED
    error: Optional[str] = None
    started_at: Optional[str] = None
    backend: dict[str, Any] = field(default_factory=dict)  # name, mode, engine, engine_version, info
    model: dict[str, Any] = field(default_factory=dict)
    # name, sha256 (prompts + arrivals), prompts_sha256 (without arrivals), requests_planned,
    # sessions, open_loop, concurrency, rate, exact_output_len
    workload: dict[str, Any] = field(default_factory=dict)
    seed: Optional[int] = None
    requests: dict[str, int] = field(default_factory=lambda: {"sent": 0, "completed": 0, "failed": 0})
    duration_s: float = 0.0
    latency: dict[str, dict[str, Optional[float]]] = field(default_factory=dict)
    throughput: dict[str, Optional[float]] = field(default_factory=dict)
    prefix_cache: dict[str, Any] = field(default_factory=dict)
    tokens: dict[str, Any] = field(default_factory=dict)
    per_turn: list[dict[str, Any]] = field(default_factory=list)
    # each stage time the engine reported (metric_registry.ENGINE_STAGES), named by the interval
    # it covers, with the harness's measure of the same interval beside it
    engine_stages: dict[str, dict[str, Any]] = field(default_factory=dict)
    harness: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    memory: dict[str, Any] = field(default_factory=dict)
    load_s: float = 0.0  # engine load time paid by this run (0 when it reused a loaded engine)
    # the engine session: reused (loaded for an earlier point), session_load_s, points_served
    engine: dict[str, Any] = field(default_factory=dict)
    config_sha256: Optional[str] = None  # the point's resolved config (what resume matches on)
    repeat: Optional[dict[str, int]] = None  # {"index": i, "of": n} when the point is repeated
    saturated: Optional[str] = None  # why an open-loop point was stopped as over-saturated
    server_metrics: Optional[dict[str, Any]] = None
    # the GPUs through NVML (harness/telemetry/gpu_phase.py): devices, energy, scope, notes; absent without NVML
    gpu: Optional[dict[str, Any]] = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("server_metrics", "gpu"):
            if out[key] is None:
                del out[key]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunSummary":
        """From summary.json; keys this version does not know are dropped, missing ones default."""
        known = {f.name for f in dataclasses.fields(cls)}
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

    @property
    def name(self) -> str:
        return self.run_dir.name

    @property
    def completed(self) -> pd.DataFrame:
        return completed(self.requests)

    def values(self, metric: str) -> np.ndarray:
        """A request metric's per-request values over completed requests (ITL pooled)."""
        from harness.results.metrics import REQUEST_METRICS

        return REQUEST_METRICS[metric].frame_values(self.completed)

    def config(self) -> dict[str, Any]:
        """config.yaml as a dict ({} when missing or unreadable)."""
        if not self.config_text:
            return {}
        try:
            from omegaconf import OmegaConf

            return OmegaConf.to_container(OmegaConf.create(self.config_text)) or {}
        except Exception:  # noqa: BLE001 - a damaged config.yaml must not stop a report
            return {}


# --- writing ------------------------------------------------------------------------------


class RunWriter:
    def __init__(self, run_dir: Path, save_output_text: bool = True,
                 tokenize: Optional[Callable[[list[str]], list[list[int]]]] = None):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        # the model's tokenizer over a batch of texts: the ids of HTTP replies that came
        # without them (RequestRecord.ids_text), counted here, off the event loop
        self.tokenize = tokenize

        self.save_output_text = save_output_text
        self.records: list[RequestRecord] = []
        self._jsonl = None

    def write_json(self, name: str, data: Any) -> None:
        write_json(self.run_dir / name, data)

    def write_text(self, name: str, text: str) -> None:
        (self.run_dir / name).write_text(text, encoding="utf-8", errors="replace")

    def write_summary(self, summary: RunSummary) -> None:
        self.write_json(SUMMARY, summary.to_dict())

    def append(self, record: RequestRecord) -> None:
        """Keep a finished request; its row reaches disk at once."""
        self.records.append(record)
        if self._jsonl is None:
            self._jsonl = open(self.run_dir / REQUESTS_JSONL, "a", encoding="utf-8")
        # on the event loop, while other streams are being read: orjson, no deep copy (about
        # 8 ms a request with 2048 output tokens before, through asdict and _jsonable)
        self._jsonl.write(orjson.dumps(self._row(record), default=_json_default, option=_ORJSON_OPTIONS).decode() + "\n")
        self._jsonl.flush()

    def _row(self, record: RequestRecord) -> dict[str, Any]:
        # shallow: asdict would deep-copy every element of the per-token lists
        row = {name: getattr(record, name) for name in REQUEST_COLUMNS}
        if not self.save_output_text:  # the ids are the text too
            row["output_text"] = row["output_token_ids"] = None
        for key in TEXT_COLUMNS:  # whatever a server sent: text, and valid UTF-8, or the table is lost
            row[key] = clean_text(row[key])
        row["engine_stats"] = json.dumps(_jsonable(row["engine_stats"]), sort_keys=True)
        return row

    def write_tables(self, memory_samples: Sequence[tuple[float, int]], t0: float,
                     gpu_samples: Sequence[tuple] = ()) -> None:
        """requests.parquet, memory.parquet and (with NVML samples) gpu.parquet; times from ``t0``."""
        if self._jsonl is not None:
            self._jsonl.close()
            self._jsonl = None
        self._count_pending_ids()
        rows = [self._row(r) for r in sorted(self.records, key=lambda r: r.request_id)]
        frame = pd.DataFrame(rows, columns=list(REQUEST_COLUMNS))
        frame.to_parquet(self.run_dir / REQUESTS_PARQUET, index=False)
        if memory_samples:
            mem = pd.DataFrame(list(memory_samples), columns=["t", "rss_bytes"])
            mem["t_s"] = mem.pop("t") - t0
            mem[["t_s", "rss_bytes"]].to_parquet(self.run_dir / MEMORY, index=False)
        if gpu_samples:
            from harness.telemetry.gpu_phase import frame

            gpu = frame(gpu_samples).sort_values(["t", "device"], kind="stable")
            gpu["t_s"] = gpu.pop("t") - t0
            # floats throughout (NaN: not read): bytes stay exact below 2**53
            gpu = gpu.astype({c: float for c in GPU_TABLE_COLUMNS[2:]})
            gpu[list(GPU_TABLE_COLUMNS)].to_parquet(self.run_dir / GPU, index=False)

    def _count_pending_ids(self) -> None:
        """Tokenize, in one batch, the replies whose ids were left to count after the run."""
        pending = [r for r in self.records if r.output_token_ids is None and r.ids_text is not None]
        if not pending or self.tokenize is None:
            return
        for record, ids in zip(pending, self.tokenize([r.ids_text for r in pending])):
            record.output_token_ids = list(ids)
            record.ids_text = None


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (a reader never sees half a file)."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(_jsonable(data), indent=2, sort_keys=False) + "\n")
    tmp.replace(path)


CLAIM = ".claimed"


def holds_run(run_dir: Path) -> bool:
    """A run has begun in this folder: claimed, or with rows or a summary written."""
    return any((Path(run_dir) / name).exists() for name in (REQUESTS_JSONL, SUMMARY, CLAIM))


def check_run_dir_free(run_dir: Path) -> None:
    """Claim the run folder for this run, atomically: two runs started in the same second (or
    given the same ``hydra.run.dir``) must not write into one folder."""
    from core.errors import HarnessError

    run_dir = Path(run_dir)
    taken = f"{run_dir} already holds a run; start the new run again in a second, or give it another hydra.run.dir"
    if holds_run(run_dir):
        raise HarnessError(taken)
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(run_dir / CLAIM, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        raise HarnessError(taken) from None
    os.write(fd, f"{os.getpid()}\n".encode())
    os.close(fd)


# --- reading ------------------------------------------------------------------------------


def is_run_dir(path: Path) -> bool:
    """A finished run folder (summary.json); a killed run with only requests.jsonl is one for
    :func:`load_run`, not for the listing of a sweep."""
    return (Path(path) / SUMMARY).is_file()


def load_requests(run_dir: Path) -> pd.DataFrame:
    """A run's requests as a DataFrame: from requests.parquet, or the .jsonl of a run that died
    (a last line cut off mid-write is left out)."""
    run_dir = Path(run_dir)
    parquet = run_dir / REQUESTS_PARQUET
    if parquet.exists():
        return pd.read_parquet(parquet)
    return pd.DataFrame(read_jsonl_rows(run_dir / REQUESTS_JSONL), columns=list(REQUEST_COLUMNS))


def read_jsonl_rows(path: Path) -> list[dict[str, Any]]:
    """The complete rows of requests.jsonl; a line that does not parse (a write cut short) is skipped."""
    rows = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows


def summary_from_jsonl(run_dir: Path) -> RunSummary:
    """What a killed run's requests.jsonl still says, when it left no summary.json (SIGKILL,
    power loss): the figures of the requests that finished. No SLO is known here."""
    from harness.config import SLOConfig
    from harness.results.summary import summarize

    fields = {f.name for f in dataclasses.fields(RequestRecord)}
    records = []
    for row in read_jsonl_rows(Path(run_dir) / REQUESTS_JSONL):
        stats = row.get("engine_stats")
        row["engine_stats"] = json.loads(stats) if isinstance(stats, str) else (stats or {})
        try:
            records.append(RequestRecord(**{k: v for k, v in row.items() if k in fields}))
        except TypeError:
            continue
    duration = max((r.end_s for r in records), default=0.0)
    figures = summarize(records, duration, SLOConfig())
    return RunSummary(status="incomplete", error="the run left no summary.json (killed?); figures rebuilt from requests.jsonl",
                      **figures)



def load_summary(run_dir: Path) -> dict[str, Any]:
    """summary.json as plain JSON (for pandas users); :func:`load_run` gives the typed one."""
    return json.loads((Path(run_dir) / SUMMARY).read_text())


def load_run(run_dir: Path, with_workload: bool = True) -> RunResult:
    """Load a run folder; only summary.json and the requests are required."""
    run_dir = Path(run_dir)
    if (run_dir / SUMMARY).exists():
        summary = RunSummary.from_dict(load_summary(run_dir))
    elif (run_dir / REQUESTS_JSONL).exists():
        summary = summary_from_jsonl(run_dir)
    else:
        from core.errors import HarnessError

        raise HarnessError(f"{run_dir} is not a run folder: it has neither summary.json nor requests.jsonl")
    try:
        requests = load_requests(run_dir)
    except (FileNotFoundError, ValueError):
        requests = pd.DataFrame()
    for column in REQUEST_COLUMNS:
        if column not in requests.columns:
            requests[column] = pd.Series([None] * len(requests), dtype=object)
    config = run_dir / CONFIG
    memory = pd.read_parquet(run_dir / MEMORY) if (run_dir / MEMORY).exists() else None
    gpu = pd.read_parquet(run_dir / GPU) if (run_dir / GPU).exists() else None
    return RunResult(
        run_dir, summary, requests, read_json(run_dir / ENV) or {},
        config.read_text() if config.exists() else None,
        read_json(run_dir / WORKLOAD) if with_workload else None, memory, gpu,
    )


def completed(df: pd.DataFrame) -> pd.DataFrame:
    """The requests that finished without an error (the only ones in latency figures)."""
    if df.empty:
        return df
    err = df["error"]
    return df[err.isna() | (err.astype(str) == "")]


def read_json(path: Path) -> Optional[dict[str, Any]]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# NaN and infinity become null, as in _jsonable; numpy scalars and arrays are numbers and lists
_ORJSON_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def _json_default(value: Any) -> Any:
    """What orjson cannot write itself: paths, and any other object with a numpy-style ``item``."""
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item") and callable(value.item):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return value.item()
    return value
