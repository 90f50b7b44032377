"""A peer tool's benchmark as a run folder: what every importer returns, and the folder written from it.

An importer (vllm_bench.py, guidellm.py, aiperf.py) reads a tool's files into an
:class:`ImportedRun`: the tool and its version, its own figures under its own names and units,
and — where the tool kept them — one row per request in the harness's columns. Each column
holds the tool's value of the harness metric with the *same definition*
(harness/formats/definitions.py); a figure the tool does not have stays empty (null, never 0).

:func:`write_run` makes the run folder compare, report and history read:

- ``requests.parquet`` — the tool's requests (absent when it kept none);
- ``summary.json`` — the harness's summary: its distributions computed from the tool's
  per-request values (or taken from the tool's own aggregates where it kept no requests: then
  only the statistics it reported), its throughputs as the tool reported them, and a ``source``
  section naming the tool, its version, its files, its figures as it reported them and its own
  definitions of them (``source.definitions``), and what it lacks (``source.absent``);
- ``imported/`` — a copy of the tool's files, as read.

Nothing here re-measures anything: the figures are the tool's, and only where a definition
matches is one put in a harness column.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional, TypeGuard

import pyarrow as pa
import pyarrow.parquet as pq

from harness.config import SLOConfig
from harness.formats import definitions
from harness.results import formulas, metrics
from harness.results.record import RequestRecord
from harness.results.schema import COMPLETE, ENV, IMPORTED, REQUESTS_PARQUET, RunSummary
from harness.results.store import requests_arrow_schema, write_json
from harness.results.summary import summarize

# the run metrics a peer tool's own figures fill; every other run metric of an imported run is absent
TOOL_RUN_METRICS = ("requests_per_s", "output_tokens_per_s", "total_tokens_per_s")
# the request metrics every tool is asked for: one it lacks is named in source.absent
CORE_REQUEST_METRICS = ("ttft_s", "tpot_s", "itl_s", "itl_chunk_s", "e2e_s")
# derived from the tool's per-request values by the harness's formula (docstrings in harness/results/metrics.py)
DERIVED_RUN_METRICS = ("mean_concurrency",)


@dataclass
class ImportedRun:
    """One benchmark of a peer tool's file(s), read but not yet written as a run folder."""

    tool: str  # definitions.VLLM_BENCH, GUIDELLM or AIPERF
    tool_version: Optional[str]  # None: the file does not say (vllm bench serve's never does)
    file_format: str  # what was read, in words
    files: list[Path]
    label: str = ""  # which benchmark of the file, where it holds several ("concurrent@2")
    started_at: Optional[str] = None  # ISO 8601
    duration_s: Optional[float] = None  # the tool's measured duration
    model: Optional[str] = None  # the model name the tool sent
    url: Optional[str] = None  # the server it measured, where the file says
    # name, concurrency, rate, open_loop, requests_planned, input_len, output_len (where the file says)
    workload: dict[str, Any] = field(default_factory=dict)
    requests: dict[str, int] = field(default_factory=lambda: {"sent": 0, "completed": 0, "failed": 0})
    rows: Optional[list[dict[str, Any]]] = None  # one per request (harness columns); None: none kept
    # the tool's own figures by its own name: {"field", "unit", "stats": {mean, p50, …}} in its unit
    figures: dict[str, dict[str, Any]] = field(default_factory=dict)
    throughput: dict[str, Optional[float]] = field(default_factory=dict)  # harness run metric key → SI
    # harness request metric → distribution (SI) from the tool's aggregates: used where no row has it
    latency: dict[str, dict[str, Optional[float]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what to know about this import (warnings)
    native: dict[str, Any] = field(default_factory=dict)  # the tool's own configuration, as it wrote it

    @property
    def title(self) -> str:
        return definitions.TITLES[self.tool]


def empty_row(request_id: int) -> dict[str, Any]:
    """A request's row with every column absent but its id (the importers fill what their tool has)."""
    row: dict[str, Any] = {f.name: None for f in dataclasses.fields(RequestRecord) if f.name != "ids_text"}
    row.update(request_id=request_id, session_id=request_id, turn=0, exact_output_len=False, engine_stats={})
    return row


def finish_row(row: dict[str, Any]) -> dict[str, Any]:
    """The per-request figures the harness derives from a row's own values, by its formulas:
    TPOT where the tool gave none, output and decode tokens/s; ITL per token from the chunk gaps
    where each chunk was one token (n_out − 1 gaps)."""
    ttft, e2e, n = row.get("ttft_s"), row.get("e2e_s"), row.get("output_tokens")
    if row.get("error"):
        for key in ("ttft_s", "tpot_s", "e2e_s", "itl_s", "itl_chunk_s", "ttst_s"):
            row[key] = None
        return row
    if row.get("tpot_s") is None and ttft is not None and e2e is not None and n:
        row["tpot_s"] = formulas.tpot(e2e, ttft, int(n))
    if e2e is not None and n:
        row["output_tps"] = formulas.output_tokens_per_second(int(n), e2e)
    row["decode_tps"] = formulas.decode_tokens_per_second(row.get("tpot_s"))
    chunks = row.get("itl_chunk_s")
    if row.get("itl_s") is None and chunks is not None and n and len(chunks) == int(n) - 1:
        row["itl_s"] = list(chunks)
    return row


def stats_seconds(stats: dict[str, Any], scale: float) -> dict[str, Optional[float]]:
    """A tool's aggregate statistics as a harness distribution in seconds (× ``scale``); a
    statistic the tool did not report is None, never 0."""
    out: dict[str, Optional[float]] = {"count": None}
    for key in ("mean", "std", "min", "max", *(f"p{p}" for p in formulas.PERCENTILES)):
        value = stats.get(key)
        out[key] = float(value) * scale if _finite(value) else None
    if _finite(stats.get("count")):
        out["count"] = int(stats["count"])
    return out


def _finite(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def write_run(
    imported: ImportedRun, run_dir: Path, model_name: Optional[str] = None, env: Optional[dict[str, Any]] = None
) -> Path:
    """Write ``imported`` as a run folder at ``run_dir`` (created; it must not hold a run).
    ``model_name``: the model as the harness names it (else the name the tool sent). ``env``:
    the machine the tool ran on (env.json), when it is known — a file alone does not say."""
    run_dir = Path(run_dir)
    if (run_dir / "summary.json").exists():
        raise FileExistsError(f"{run_dir} already holds a run")
    run_dir.mkdir(parents=True, exist_ok=True)
    copies = run_dir / IMPORTED
    copies.mkdir(exist_ok=True)
    for path in imported.files:
        shutil.copyfile(path, copies / path.name)
    if imported.rows is not None:
        schema = requests_arrow_schema()
        table = pa.Table.from_pylist([_parquet_row(row, schema.names) for row in imported.rows], schema=schema)
        pq.write_table(table, run_dir / REQUESTS_PARQUET)
    if env is not None:
        write_json(run_dir / ENV, env)
    write_json(run_dir / "summary.json", summary_of(imported, model_name).to_dict())
    return run_dir


def _parquet_row(row: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """A row as requests.parquet holds it: the engine's stats as JSON text."""
    out = {k: v for k, v in row.items() if k in names}
    out["engine_stats"] = json.dumps(row.get("engine_stats") or {}, sort_keys=True)
    return out


def _record(row: dict[str, Any]) -> RequestRecord:
    """A row as a record for the summary (an absent gap list is an empty one there)."""
    return RequestRecord(**{**row, "itl_s": row.get("itl_s") or [], "itl_chunk_s": row.get("itl_chunk_s") or []})


def summary_of(imported: ImportedRun, model_name: Optional[str] = None) -> RunSummary:
    """The harness's summary of an imported benchmark (see the module's docstring)."""
    duration = imported.duration_s or 0.0
    figures: dict[str, Any]
    if imported.rows:
        records = [_record(row) for row in imported.rows]
        figures = summarize(records, duration, SLOConfig())
        figures["requests"] = dict(imported.requests)
    else:
        figures = {
            "requests": dict(imported.requests),
            "latency": {key: formulas.distribution([]) for key in metrics.REQUEST_METRICS},
            "throughput": {},
            "tokens": {},
            "warnings": [],
        }
    computed = figures["latency"]
    for key, dist in imported.latency.items():  # the tool's aggregates where no row has the metric
        if not (computed.get(key) or {}).get("count"):
            computed[key] = dist
    throughput: dict[str, Optional[float]] = {key: None for key in metrics.RUN_METRICS}
    for key in DERIVED_RUN_METRICS:
        throughput[key] = (figures.get("throughput") or {}).get(key) if imported.rows else None
    throughput.update({k: v for k, v in imported.throughput.items() if k in TOOL_RUN_METRICS})
    figures["throughput"] = throughput
    figures["warnings"] = [*imported.notes, *figures.get("warnings", [])]
    figures.pop("harness", None)  # the harness's own client figures: another client ran
    figures.pop("engine_stages", None)
    workload = {
        "name": imported.workload.get("name") or f"{imported.tool} import",
        "sha256": None,  # the tool's prompts are not in the harness's form: unknown
        "prompts_sha256": None,
        "requests_planned": imported.workload.get("requests_planned"),
        "sessions": imported.workload.get("requests_planned"),
        "open_loop": bool(imported.workload.get("open_loop")),
        "concurrency": imported.workload.get("concurrency"),
        "rate": imported.workload.get("rate"),
        **{k: v for k, v in imported.workload.items() if k in ("input_len", "output_len")},
    }
    return RunSummary(
        status=COMPLETE,
        started_at=imported.started_at,
        backend={
            "name": "openai",
            "mode": "remote",
            "engine": "openai-compatible server",
            "engine_version": None,
            "info": {"url": imported.url} if imported.url else {},
        },
        model={"name": model_name or imported.model, "source": None},  # the file says the name sent, not the weights
        workload=workload,
        duration_s=duration,
        config_sha256=None,
        source=source_section(imported, figures["latency"], throughput),
        **{
            k: v
            for k, v in figures.items()
            if k in ("requests", "latency", "throughput", "prefix_cache", "tokens", "per_turn", "warnings")
        },
    )


def source_section(
    imported: ImportedRun, latency: dict[str, dict[str, Any]], throughput: dict[str, Optional[float]]
) -> dict[str, Any]:
    """summary.json's ``source``: who measured, with what, and what each of its figures means."""
    absent = [key for key in CORE_REQUEST_METRICS if not _has_figure(latency.get(key))]
    absent += [key for key in TOOL_RUN_METRICS if throughput.get(key) is None]
    return {
        "tool": imported.tool,
        "title": imported.title,
        "tool_version": imported.tool_version,
        "format": imported.file_format,
        "label": imported.label or None,
        "files": [
            {"name": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()} for path in imported.files
        ],
        "imported_at": datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds"),
        "per_request": imported.rows is not None,
        "figures": imported.figures,
        "definitions": definitions.definitions_of(imported.tool),
        "absent": absent,
        "native": imported.native,
    }


def _has_figure(dist: Optional[dict[str, Any]]) -> bool:
    return bool(dist) and any(_finite(v) for k, v in (dist or {}).items() if k != "count")
