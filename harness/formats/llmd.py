"""A run folder as an llm-d benchmark report (version 0.2), checked against its published JSON schema.

llm-d-benchmark describes any benchmark run as one report: ``run`` (ids and times), ``scenario``
(the serving ``stack`` and the ``load`` that drove it) and ``results`` (request performance:
counts, latency and throughput statistics with explicit units). Writing ours in that form lets
a harness run sit beside llm-d's, vllm bench's or GuideLLM's in their tooling.

The schema is kept in the repository as published (``schemas/llmd_benchmark_report_v0.2.json``,
from llm-d/llm-d-benchmark ``llmdbenchmark/analysis/benchmark_report/br_v0_2_json_schema.json``
at commit f0dd0ba6ad5c2e44b0e1e5952fa8673089601084, sha256 :data:`SCHEMA_SHA256`), its version
beside the harness's own (harness/results/schema.py ``LLMD_REPORT_VERSION``). Every report is
validated with ``jsonschema`` before it is written. The published schema checks structure, not
the unit of each field (llm-d's pydantic models do); :func:`unit_errors` checks those too.

What goes where (the harness's definitions, docs/metrics.md):

- ``time_to_first_token`` ← TTFT (s); ``time_per_output_token`` ← TPOT = (E2E − TTFT)/(n − 1)
  (s/token; llm-d: "excluding first"); ``inter_token_latency`` ← ITL per token, pooled (s/token);
  ``normalized_time_per_output_token`` ← E2E / n per request (s/token; "including first");
  ``request_latency`` ← E2E (s). Statistics from the per-request values where the run kept them
  (every percentile llm-d names), else the summary's (mean, std, min, max, p50, p90, p95, p99).
- ``requests``: sent, failed, prompt and output lengths (count); ``throughput``: the summary's
  requests/s (queries/s), output and total tokens/s, and input tokens/s = prompt tokens / T.
- ``scenario.load.standardized.tool``: ``llm-harness``, or for a run imported from another
  tool the name llm-d gives that tool (``vllm-benchmark``, ``guidellm``, ``aiperf``).
- ``scenario.stack``: the engine as an ``inference_engine`` where the harness ran it (its version,
  replicas, the accelerators of env.json); a server the harness only reached over HTTP, whose
  engine and hardware it cannot see, as a ``generic`` component.
"""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Optional, TypeGuard

import numpy as np

from harness.formats.definitions import AIPERF, GUIDELLM, VLLM_BENCH
from harness.results.schema import LLMD_REPORT_VERSION, RunResult, completed

SCHEMA_PATH = Path(__file__).with_name("schemas") / "llmd_benchmark_report_v0.2.json"
SCHEMA_SHA256 = "c67e5c4c664ef8e28f8c073d7e0f41d9505e8574aac7be36b173b97eabc6231e"
HARNESS_TOOL = "llm-harness"
LOAD_TOOLS = {VLLM_BENCH: "vllm-benchmark", GUIDELLM: "guidellm", AIPERF: "aiperf"}  # llm-d's names
RANDOM_WORKLOADS = ("synthetic", "shared_prefix", "agentic")  # prompts made of random tokens or words
SAMPLED_WORKLOADS = ("sharegpt", "jsonl", "trace", "chat")  # prompts from data
# llm-d's percentile keys and the percentiles they name
PERCENTILES = {
    "p0p1": 0.1,
    "p1": 1,
    "p5": 5,
    "p10": 10,
    "p25": 25,
    "p50": 50,
    "p75": 75,
    "p90": 90,
    "p95": 95,
    "p99": 99,
    "p99p9": 99.9,
}
# the unit each field takes (llm-d's pydantic validators; the JSON schema does not say)
TIME_UNITS, PER_TOKEN_UNITS = ("ms", "s"), ("ms/token", "s/token")
FIELD_UNITS = {
    "time_to_first_token": TIME_UNITS,
    "request_latency": TIME_UNITS,
    "normalized_time_per_output_token": PER_TOKEN_UNITS,
    "time_per_output_token": PER_TOKEN_UNITS,
    "inter_token_latency": PER_TOKEN_UNITS,
    "input_length": ("count",),
    "output_length": ("count",),
    "input_token_rate": ("tokens/s",),
    "output_token_rate": ("tokens/s",),
    "total_token_rate": ("tokens/s",),
    "request_rate": ("queries/s",),
}


class InvalidReport(ValueError):
    """A report the published schema (or llm-d's unit rules) rejects: where and why, in one line."""


def schema() -> dict[str, Any]:
    """The published JSON schema of the report."""
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def validate(report: dict[str, Any]) -> None:
    """InvalidReport unless ``report`` is valid under the published schema and llm-d's units."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match

    validator = Draft202012Validator(schema(), format_checker=Draft202012Validator.FORMAT_CHECKER)
    error = best_match(validator.iter_errors(report))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path)
        raise InvalidReport(f"not a valid llm-d v{LLMD_REPORT_VERSION} report: at /{where}: {error.message}")
    wrong = unit_errors(report)
    if wrong:
        raise InvalidReport(f"not a valid llm-d v{LLMD_REPORT_VERSION} report: {wrong[0]}")


def unit_errors(report: dict[str, Any]) -> list[str]:
    """Every statistic whose unit is not one its field takes (llm-d's validators)."""
    aggregate = ((report.get("results") or {}).get("request_performance") or {}).get("aggregate") or {}
    out = []
    for group in ("requests", "latency", "throughput"):
        for key, stats in (aggregate.get(group) or {}).items():
            allowed = FIELD_UNITS.get(key)
            if allowed and isinstance(stats, dict) and stats.get("units") not in allowed:
                out.append(f"{group}.{key} has units {stats.get('units')!r}, not one of {', '.join(allowed)}")
    return out


# --- building a report ----------------------------------------------------------------------------


def report_of(
    run: RunResult, experiment: Optional[str] = None, stage: int = 0, harness_version: Optional[str] = None
) -> dict[str, Any]:
    """The llm-d v0.2 report of a loaded run folder. ``experiment``: the id shared by the runs of
    one sweep (``run.eid``); ``stage``: the run's index in it."""
    s = run.summary
    started = _moment(s.started_at)
    time: dict[str, Any] = {"duration": f"PT{max(s.duration_s or 0.0, 0.0):.3f}S"}
    if started is not None:
        time["start"] = started.isoformat()
        time["end"] = (started + timedelta(seconds=s.duration_s or 0.0)).isoformat()
    uid = uuid.uuid5(uuid.NAMESPACE_URL, f"{HARNESS_TOOL}:{run.run_dir.resolve()}:{s.started_at}")
    source = s.source or {}
    keywords = [HARNESS_TOOL, str(s.backend.get("name")), str(source.get("tool") or "harness")]
    return {
        "version": LLMD_REPORT_VERSION,
        "run": {
            "uid": str(uid),
            **({"eid": experiment} if experiment else {}),
            "time": time,
            "description": _description(run),
            "keywords": keywords,
        },
        "scenario": {"stack": [_component(run)], "load": _load(run, stage, harness_version)},
        "results": {"request_performance": {"aggregate": _aggregate(run)}},
    }


def experiment_id(sweep_dir: Path) -> str:
    """The ``eid`` of a sweep's reports: a UUID from its folder."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{HARNESS_TOOL}:sweep:{Path(sweep_dir).resolve()}"))


def _moment(text: Optional[str]) -> Optional[datetime]:
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.astimezone()


def _description(run: RunResult) -> str:
    s = run.summary
    by = f" · measured by {s.source.get('title')} {s.source.get('tool_version') or ''}".rstrip() if s.source else ""
    status = f" · {s.status}" if s.status != "complete" else ""
    return (
        f"{s.backend.get('name')} · {s.model.get('name')} · {s.workload.get('name')}{by}{status} · {run.run_dir.name}"
    )


def _cfg_id(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _component(run: RunResult) -> dict[str, Any]:
    """The serving stack: the engine, seen as the harness saw it."""
    s, env = run.summary, run.env
    backend = s.backend
    engine = str(backend.get("engine") or backend.get("name") or "unknown")
    version = str(backend.get("engine_version") or "unknown")
    info = backend.get("info") or {}
    label = f"{backend.get('name')}-0"
    config = run.config().get("backend")
    native: dict[str, Any] = {"args": {k: v for k, v in info.items() if not isinstance(v, (dict, list))}}
    if config is not None:
        native["config"] = config
    remote = backend.get("mode") == "remote" or s.source is not None
    if remote:  # a server reached over HTTP: its engine and hardware are not the harness's to see
        standardized: dict[str, Any] = {"kind": "generic", "tool": engine, "tool_version": version}
        if info.get("url"):
            standardized["url"] = str(info["url"])
    else:
        gpus = env.get("gpus") or []
        accelerator = str(gpus[0].get("name")) if gpus else str((env.get("cpu") or {}).get("model") or "unknown CPU")
        standardized = {
            "kind": "inference_engine",
            "tool": engine,
            "tool_version": version,
            "role": "replica",
            "replicas": max(1, len(s.endpoints or {}) or int(info.get("replicas") or 1)),
            "model": {"name": str(s.model.get("name"))},
            "accelerator": {
                "model": accelerator,
                "count": len(gpus),
                "parallelism": {"tp": max(1, int(info.get("tensor_parallel_size") or 1))},
            },
        }
    return {
        "metadata": {"schema_version": "0.0.1", "label": label, "cfg_id": s.config_sha256 or _cfg_id(backend)},
        "standardized": standardized,
        "native": native,
    }


def _load(run: RunResult, stage: int, harness_version: Optional[str]) -> dict[str, Any]:
    """The workload generator and what it sent."""
    s = run.summary
    wl = s.workload
    source = s.source or {}
    name = str(wl.get("name") or "")
    if source:
        tool, version = LOAD_TOOLS.get(str(source.get("tool")), str(source.get("tool"))), source.get("tool_version")
    else:
        tool, version = HARNESS_TOOL, harness_version or (run.env.get("harness") or {}).get("version")
    kind = (
        "random"
        if name in RANDOM_WORKLOADS or (source and "synthetic" in name.lower())
        else "sampled"
        if name in SAMPLED_WORKLOADS
        else "unknown"
    )
    ok = completed(run.requests)
    standardized: dict[str, Any] = {
        "tool": tool,
        "tool_version": str(version or "unknown"),
        "parallelism": 1,
        "source": kind,
        "stage": max(0, int(stage)),
        "input_seq_len": _sequence(_column(ok, "prompt_tokens"), s.tokens.get("prompt_mean"), wl.get("input_len")),
    }
    output = _sequence(_column(ok, "output_tokens"), s.tokens.get("output_mean"), wl.get("output_len"))
    if output["value"] or wl.get("output_len") is not None:
        standardized["output_seq_len"] = output
    if wl.get("open_loop") and _positive(wl.get("rate")):
        standardized["rate_qps"] = float(wl["rate"])
    if _positive(wl.get("concurrency")):
        standardized["concurrency"] = int(wl["concurrency"])
    config = run.config()
    native: dict[str, Any] = {"args": {k: v for k, v in wl.items() if not isinstance(v, (dict, list))}}
    if config.get("workload") is not None:
        native["config"] = config.get("workload")
    elif source.get("native"):
        native["config"] = source["native"]
    return {
        "metadata": {
            "schema_version": "0.0.1",
            "cfg_id": str(wl.get("sha256") or s.config_sha256 or _cfg_id(native["args"])),
            "description": f"{name} · concurrency {wl.get('concurrency')}"
            + (f" · rate {wl.get('rate')}/s" if wl.get("open_loop") else ""),
        },
        "standardized": standardized,
        "native": native,
    }


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _sequence(values: np.ndarray, mean: Any, asked: Any) -> dict[str, Any]:
    """A sequence length: fixed when every request had one length, else "other" with its range;
    without per-request values, the summary's mean (else the length asked for)."""
    if values.size:
        low, high = int(values.min()), int(values.max())
        if low == high:
            return {"distribution": "fixed", "value": low}
        out: dict[str, Any] = {"distribution": "other", "value": float(values.mean()), "min": low}
        if high >= 1:
            out["max"] = high
        return out
    value = mean if _positive(mean) else asked if _positive(asked) else 0
    return {"distribution": "other" if value == mean else "fixed", "value": value}


def _column(frame: Any, name: str) -> np.ndarray:
    if frame is None or len(frame) == 0 or name not in frame:
        return np.empty(0)
    arr = np.asarray([v for v in frame[name] if v is not None], dtype=float)
    return arr[np.isfinite(arr)]


def _pooled(frame: Any, name: str) -> np.ndarray:
    if frame is None or len(frame) == 0 or name not in frame:
        return np.empty(0)
    arr = np.asarray([v for lst in frame[name] if lst is not None for v in lst], dtype=float)
    return arr[np.isfinite(arr)]


def _with_first(frame: Any) -> np.ndarray:
    """E2E / n_out of each completed request: the time per output token with the first (llm-d's NTPOT)."""
    if frame is None or len(frame) == 0 or "e2e_s" not in frame:
        return np.empty(0)
    pairs = zip(frame["e2e_s"], frame["output_tokens"])
    return np.asarray([e / n for e, n in pairs if _finite(e) and _finite(n) and n > 0], dtype=float)


def statistics(values: np.ndarray, units: str) -> Optional[dict[str, Any]]:
    """llm-d Statistics of per-request values: mean, stddev, min, max and every percentile it names."""
    if values.size == 0:
        return None
    out: dict[str, Any] = {
        "units": units,
        "mean": float(values.mean()),
        "stddev": float(values.std()),
        "min": float(values.min()),
        "max": float(values.max()),
    }
    for key, p in PERCENTILES.items():
        out[key] = float(np.percentile(values, p))
    return out


def summary_statistics(dist: Optional[dict[str, Any]], units: str) -> Optional[dict[str, Any]]:
    """llm-d Statistics from a summary distribution (mean, std, min, max, p50 … p99); None without a mean."""
    if not dist or not _finite(dist.get("mean")):
        return None
    out: dict[str, Any] = {"units": units, "mean": float(dist["mean"])}
    for ours, theirs in (("std", "stddev"), ("min", "min"), ("max", "max"), ("p50", "p50"), ("p90", "p90")):
        if _finite(dist.get(ours)):
            out[theirs] = float(dist[ours])
    for key in ("p95", "p99"):
        if _finite(dist.get(key)):
            out[key] = float(dist[key])
    return out


def _finite(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _rate(value: Any, units: str) -> Optional[dict[str, Any]]:
    return {"units": units, "mean": float(value)} if _finite(value) else None


def _aggregate(run: RunResult) -> dict[str, Any]:
    """results.request_performance.aggregate: requests, latency and throughput."""
    s = run.summary
    ok = completed(run.requests)

    def request_metric(key: str, units: str, values: Optional[np.ndarray] = None) -> Optional[dict[str, Any]]:
        values = _column(ok, key) if values is None else values
        return statistics(values, units) or summary_statistics(s.latency.get(key), units)

    n_out = _column(ok, "output_tokens")
    latency = {
        "time_to_first_token": request_metric("ttft_s", "s"),
        "normalized_time_per_output_token": statistics(_with_first(ok), "s/token"),
        "time_per_output_token": request_metric("tpot_s", "s/token"),
        "inter_token_latency": statistics(_pooled(ok, "itl_s"), "s/token")
        or summary_statistics(s.latency.get("itl_s"), "s/token"),
        "request_latency": request_metric("e2e_s", "s"),
    }
    duration = s.duration_s or 0.0
    prompt_total = s.tokens.get("prompt_total")
    throughput = {
        "input_token_rate": _rate(prompt_total / duration, "tokens/s")
        if _finite(prompt_total) and duration > 0
        else None,
        "output_token_rate": _rate(s.throughput.get("output_tokens_per_s"), "tokens/s"),
        "total_token_rate": _rate(s.throughput.get("total_tokens_per_s"), "tokens/s"),
        "request_rate": _rate(s.throughput.get("requests_per_s"), "queries/s"),
    }
    requests: dict[str, Any] = {
        "total": int(s.requests.get("sent") or 0),
        "failures": int(s.requests.get("failed") or 0),
        "input_length": statistics(_column(ok, "prompt_tokens"), "count"),
        "output_length": statistics(n_out, "count"),
    }
    if s.status not in ("complete", "saturated"):
        planned = s.workload.get("requests_planned")
        if isinstance(planned, int) and planned > requests["total"]:
            requests["incomplete"] = planned - requests["total"]
    return {
        "requests": _present(requests),
        "latency": _present(latency),
        "throughput": _present(throughput),
    }


def _present(section: dict[str, Any]) -> dict[str, Any]:
    """A section without its absent figures (llm-d leaves out what is unset, never writes 0)."""
    return {k: v for k, v in section.items() if v is not None}
