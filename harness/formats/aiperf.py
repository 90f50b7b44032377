"""AIPerf's exports (``profile_export_aiperf.json`` and ``profile_export.jsonl``, AIPerf 0.13) as an imported run.

The summary file (``schema_version`` 1.4 in 0.13) names ``aiperf_version``, holds the resolved
``input_config`` (models, endpoint URLs, phases with their concurrency or rate, datasets with
their input and output lengths), ``start_time``/``end_time``, ``error_summary``, and one key per
metric tag: ``{unit, avg, p1 … p99, min, max, std, count, sum}`` in display units (ms for times).
The records file has one line per request: ``metadata`` (``benchmark_phase`` warmup or
profiling, ``request_start_ns``/``request_end_ns`` wall clock) and ``metrics`` (``{tag: {value,
unit}}``), with ``error`` on a failed one. Only profiling records are read.

AIPerf's ITL is the harness's TPOT ((latency − TTFT) / (OSL − 1)); its ICL (inter-chunk
latency, stamped per socket read) is the harness's ITL per chunk.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

from harness.formats.definitions import AIPERF
from harness.formats.imported import ImportedRun, empty_row, finish_row, stats_seconds

FORMAT = "AIPerf profile_export_aiperf.json"
SUMMARY_NAME, RECORDS_NAME = "profile_export_aiperf.json", "profile_export.jsonl"
# AIPerf's name of a figure → its metric tag
_FIGURES = {
    "TTFT": "time_to_first_token",
    "TTST": "time_to_second_token",
    "ITL": "inter_token_latency",
    "ICL": "inter_chunk_latency",
    "request latency": "request_latency",
    "request throughput": "request_throughput",
    "output token throughput": "output_token_throughput",
    "total token throughput": "total_token_throughput",
}
_CONCEPTS = {"TTFT": "ttft_s", "ITL": "tpot_s", "ICL": "itl_chunk_s", "request latency": "e2e_s", "TTST": "ttst_s"}
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "sec": 1.0, "s": 1.0}


def looks_like(data: Any) -> bool:
    """Whether a parsed JSON value is AIPerf's summary export."""
    return isinstance(data, dict) and "aiperf_version" in data


def records_beside(summary: Path) -> Optional[Path]:
    """The records file next to a summary file: ``profile_export.jsonl``, or ``<prefix>.jsonl``
    for ``--profile-export-prefix``."""
    for name in (RECORDS_NAME, summary.with_suffix(".jsonl").name, summary.stem.removesuffix("_aiperf") + ".jsonl"):
        candidate = summary.with_name(name)
        if candidate.is_file():
            return candidate
    return None


def read(data: dict[str, Any], path: Path, tool_version: Optional[str] = None) -> list[ImportedRun]:
    config = data.get("input_config") or {}
    phase = _profiling_phase(config.get("phases"))
    models = (config.get("models") or {}).get("items") or [] if isinstance(config.get("models"), dict) else []
    urls = (config.get("endpoint") or {}).get("urls") or []
    datasets = [d for d in config.get("datasets") or [] if isinstance(d, dict)]
    dataset = datasets[0] if datasets else {}
    prompts = dataset.get("prompts") or {}
    count = _avg(data, "request_count")
    errors = _avg(data, "error_request_count") or 0.0
    completed = int(count or 0)
    records_path = records_beside(path)
    rate = phase.get("rate") if isinstance(phase.get("rate"), (int, float)) else None
    run = ImportedRun(
        tool=AIPERF,
        tool_version=data.get("aiperf_version") or tool_version,
        file_format=FORMAT + (f" and {records_path.name} (per request)" if records_path else ""),
        files=[path] + ([records_path] if records_path else []),
        started_at=_iso(data.get("start_time")),
        duration_s=_avg(data, "benchmark_duration", seconds=True),
        model=models[0].get("name") if models and isinstance(models[0], dict) else None,
        url=urls[0] if urls else None,
        workload={
            "name": f"AIPerf {dataset.get('type', 'dataset')}",
            "requests_planned": phase.get("requests") or completed + int(errors),
            "concurrency": phase.get("concurrency"),
            "rate": rate,
            "open_loop": rate is not None,
            "input_len": (prompts.get("isl") or {}).get("mean"),
            "output_len": (prompts.get("osl") or {}).get("mean"),
        },
        requests={"sent": completed + int(errors), "completed": completed, "failed": int(errors)},
        native={"input_config": config, "run_info": data.get("run_info")},
    )
    run.figures = {
        name: {"field": tag, "unit": data[tag].get("unit"), "stats": _stats(data[tag])}
        for name, tag in _FIGURES.items()
        if isinstance(data.get(tag), dict)
    }
    for name, concept in _CONCEPTS.items():
        figure = run.figures.get(name)
        scale = _UNIT_SECONDS.get(str((figure or {}).get("unit")))
        if figure and scale:
            run.latency[concept] = stats_seconds(figure["stats"], scale)
    run.throughput = {
        "requests_per_s": _avg(data, "request_throughput"),
        "output_tokens_per_s": _avg(data, "output_token_throughput"),
        "total_tokens_per_s": _avg(data, "total_token_throughput"),
    }
    if records_path is not None:
        run.rows = _rows(records_path)
    else:
        run.notes.append(
            f"no {RECORDS_NAME} beside the summary: the distributions are AIPerf's own statistics, and only those it reported"
        )
    return [run]


def _profiling_phase(phases: Any) -> dict[str, Any]:
    """The profiling phase's settings (0.13 writes a list of phases; a mapping by name is read too)."""
    items = list(phases.values()) if isinstance(phases, dict) else phases if isinstance(phases, list) else []
    items = [p for p in items if isinstance(p, dict)]
    return next((p for p in items if p.get("kind") == "profiling"), items[-1] if items else {})


def _stats(result: dict[str, Any]) -> dict[str, float]:
    """An AIPerf metric result as {mean, std, min, max, pNN, count} in its display unit."""
    names = {"avg": "mean", "std": "std", "min": "min", "max": "max", "count": "count"}
    names.update({f"p{p}": f"p{p}" for p in (1, 5, 10, 25, 50, 75, 90, 95, 99)})
    return {
        name: float(result[key])
        for key, name in names.items()
        if isinstance(result.get(key), (int, float)) and math.isfinite(result[key])
    }


def _avg(data: dict[str, Any], tag: str, seconds: bool = False) -> Optional[float]:
    result = data.get(tag)
    if not isinstance(result, dict) or not isinstance(result.get("avg"), (int, float)):
        return None
    scale = _UNIT_SECONDS.get(str(result.get("unit")), 1.0) if seconds else 1.0
    return float(result["avg"]) * scale


def _iso(value: Any) -> Optional[str]:
    """AIPerf's start_time (naive local time in 0.13) as ISO 8601 with this machine's offset."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment.astimezone().isoformat(timespec="seconds")


def _value(metrics: dict[str, Any], tag: str) -> Any:
    entry = metrics.get(tag)
    return entry.get("value") if isinstance(entry, dict) else None


def _seconds(metrics: dict[str, Any], tag: str) -> Any:
    """A timing metric of a record in seconds (a list stays a list); None where absent."""
    entry = metrics.get(tag)
    if not isinstance(entry, dict):
        return None
    scale = _UNIT_SECONDS.get(str(entry.get("unit")), 1e-3)
    value = entry.get("value")
    if isinstance(value, list):
        return [float(v) * scale for v in value]
    return float(value) * scale if isinstance(value, (int, float)) else None


def _rows(path: Path) -> list[dict[str, Any]]:
    """One row per profiling record, ordered by start: AIPerf's own per-request values."""
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        if (record.get("metadata") or {}).get("benchmark_phase", "profiling") == "profiling":
            records.append(record)
    records.sort(key=lambda r: (r.get("metadata") or {}).get("request_start_ns") or 0)
    starts = [(r.get("metadata") or {}).get("request_start_ns") for r in records]
    t0 = min((s for s in starts if isinstance(s, int)), default=0)
    rows = []
    for i, record in enumerate(records):
        meta, metrics = record.get("metadata") or {}, record.get("metrics") or {}
        error = record.get("error")
        row = empty_row(i)
        start, end = meta.get("request_start_ns"), meta.get("request_end_ns")
        prompt = _value(metrics, "usage_prompt_tokens") or _value(metrics, "input_sequence_length")
        output = _value(metrics, "output_sequence_length") or _value(metrics, "output_token_count") or 0
        row.update(
            prompt_tokens=int(prompt) if isinstance(prompt, (int, float)) else None,
            output_tokens=int(output),
            requested_output_tokens=int(output),
            start_s=(start - t0) / 1e9 if isinstance(start, int) else 0.0,
            end_s=(end - t0) / 1e9 if isinstance(end, int) else 0.0,
            ttft_s=_seconds(metrics, "time_to_first_token"),
            ttst_s=_seconds(metrics, "time_to_second_token"),
            tpot_s=_seconds(metrics, "inter_token_latency"),
            e2e_s=_seconds(metrics, "request_latency"),
            itl_chunk_s=_seconds(metrics, "inter_chunk_latency"),
            error=_error_text(error) if error else None,
        )
        rows.append(finish_row(row))
    return rows


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        return " ".join(str(error.get(k)) for k in ("code", "type", "message") if error.get(k) is not None) or "error"
    return str(error)
