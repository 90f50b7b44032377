"""GuideLLM's ``benchmarks.json`` (report format version 2, GuideLLM 0.8) as imported runs.

The file holds ``metadata`` (``guidellm_version``), ``config`` (the run's arguments: backend
target and model, profile, data), and one entry of ``benchmarks`` per strategy it ran (a sweep
of rates is several): each with its window (``start_time``, ``end_time``, ``duration``, epoch
seconds), ``metrics`` (each figure as distributions by request status: ``successful``,
``errored``, ``incomplete``, ``total``, each with mean, median, std_dev, min, max, count and
``percentiles`` p001 … p999) and ``requests`` (per status, the kept requests: all by default, a
sample with ``sample_size``). Each benchmark becomes a run.

A request keeps its TTFT, its ITL (one value: the mean gap after the first token, the harness's
TPOT) and its TPOT (the first token included), not the gaps between chunks; its stamps
(``info.timings``, wall clock) give the harness's E2E, to the last token.
"""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

from harness.formats.definitions import GUIDELLM
from harness.formats.imported import ImportedRun, empty_row, finish_row, stats_seconds

FORMAT = "GuideLLM benchmarks.json"
# GuideLLM's percentile keys → the p-names of its figures (p001 is the 0.1th)
_PERCENTILES = {
    "p001": "p0.1",
    "p01": "p1",
    "p05": "p5",
    "p10": "p10",
    "p25": "p25",
    "p50": "p50",
    "p75": "p75",
    "p90": "p90",
    "p95": "p95",
    "p99": "p99",
    "p999": "p99.9",
}
# GuideLLM's name of a figure → (its metrics key, its unit)
_FIGURES = {
    "TTFT": ("time_to_first_token_ms", "ms"),
    "ITL": ("inter_token_latency_ms", "ms"),
    "TPOT": ("time_per_output_token_ms", "ms"),
    "request latency": ("request_latency", "s"),
    "requests/s": ("requests_per_second", "requests/s"),
    "output tokens/s": ("output_tokens_per_second", "tokens/s"),
    "total tokens/s": ("tokens_per_second", "tokens/s"),
}
_STATUSES = ("successful", "errored", "incomplete")


def looks_like(data: Any) -> bool:
    """Whether a parsed JSON value is a GuideLLM benchmarks report."""
    return (
        isinstance(data, dict)
        and isinstance(data.get("benchmarks"), list)
        and "guidellm_version" in (data.get("metadata") or {})
    )


def read(data: dict[str, Any], path: Path, tool_version: Optional[str] = None) -> list[ImportedRun]:
    """One run per benchmark of the report."""
    version = (data.get("metadata") or {}).get("guidellm_version") or tool_version
    spec = (data.get("config") or {}).get("spec") or {}
    benchmarks = [b for b in data["benchmarks"] if isinstance(b, dict)]
    return [_benchmark(b, spec, path, version, len(benchmarks) > 1) for b in benchmarks]


def _benchmark(
    bench: dict[str, Any], spec: dict[str, Any], path: Path, version: Optional[str], several: bool
) -> ImportedRun:
    backend = spec.get("backend") or {}
    strategy = (bench.get("config") or {}).get("strategy") or {}
    kind = strategy.get("type_")
    rate = strategy.get("rate") if kind in ("constant", "poisson", "async") else None
    streams = strategy.get("streams") or strategy.get("max_concurrency")
    label = f"{kind}@{rate if rate is not None else streams}" if kind else ""
    items = spec.get("data") or []
    data = items[0] if items and isinstance(items[0], dict) else {}
    metrics = bench.get("metrics") or {}
    totals = metrics.get("request_totals") or {}
    completed = int(totals.get("successful") or 0)
    failed = int(totals.get("errored") or 0) + int(totals.get("incomplete") or 0)
    start = _number(bench.get("start_time"))
    run = ImportedRun(
        tool=GUIDELLM,
        tool_version=version,
        file_format=FORMAT,
        files=[path],
        label=label if several else "",
        started_at=datetime.fromtimestamp(start).astimezone().isoformat(timespec="seconds") if start else None,
        duration_s=_number(bench.get("duration")),
        model=backend.get("model"),
        url=backend.get("target"),
        workload={
            "name": "GuideLLM "
            + (str(data.get("kind")) if data.get("kind") else "data")
            + (f" {label}" if label else ""),
            "requests_planned": int(totals.get("total") or completed + failed),
            "concurrency": streams if kind in ("concurrent", "synchronous") else strategy.get("max_concurrency"),
            "rate": rate,
            "open_loop": rate is not None,
            "input_len": data.get("prompt_tokens"),
            "output_len": data.get("output_tokens"),
        },
        requests={"sent": completed + failed, "completed": completed, "failed": failed},
        native={"spec": spec, "strategy": strategy},
    )
    run.figures = {  # a distribution of no request (count 0) is absent, not a row of zeros
        name: {"field": key, "unit": unit, "stats": _stats(((metrics.get(key) or {}).get("successful")) or {})}
        for name, (key, unit) in _FIGURES.items()
        if ((metrics.get(key) or {}).get("successful") or {}).get("count")
    }
    scale = {"ms": 1e-3, "s": 1.0}
    for name, concept in (("TTFT", "ttft_s"), ("ITL", "tpot_s")):
        figure = run.figures.get(name)
        if figure:
            run.latency[concept] = stats_seconds({**figure["stats"], "count": completed}, scale[figure["unit"]])
    itl = run.figures.get("ITL", {}).get("stats", {}).get("mean")
    if itl is not None:  # token-weighted: the mean gap between tokens, the harness's ITL-per-token mean
        run.latency["itl_s"] = {**stats_seconds({}, 1.0), "mean": itl * 1e-3}
    run.throughput = {
        "requests_per_s": run.figures.get("requests/s", {}).get("stats", {}).get("mean"),
        "output_tokens_per_s": run.figures.get("output tokens/s", {}).get("stats", {}).get("mean"),
        "total_tokens_per_s": run.figures.get("total tokens/s", {}).get("stats", {}).get("mean"),
    }
    requests = bench.get("requests") or {}
    kept = [(status, r) for status in _STATUSES for r in requests.get(status) or [] if isinstance(r, dict)]
    if kept:
        run.rows = _rows(kept, start)
        if len(kept) < completed + failed:
            run.notes.append(
                f"GuideLLM kept {len(kept)} of {completed + failed} requests (its sample_size): the "
                "distributions are of those it kept"
            )
    else:
        run.notes.append(
            "GuideLLM kept no per-request records: the distributions are its own statistics, and only those it reported"
        )
    return run


def _stats(dist: dict[str, Any]) -> dict[str, Optional[float]]:
    """A GuideLLM distribution as {mean, std, min, max, pNN} in its unit."""
    out = {"mean": dist.get("mean"), "std": dist.get("std_dev"), "min": dist.get("min"), "max": dist.get("max")}
    if dist.get("count") is not None:
        out["count"] = dist["count"]
    for key, name in _PERCENTILES.items():
        out[name] = (dist.get("percentiles") or {}).get(key)
    return {k: float(v) for k, v in out.items() if isinstance(v, (int, float)) and math.isfinite(v)}


def _rows(kept: list[tuple[str, dict[str, Any]]], t0: Optional[float]) -> list[dict[str, Any]]:
    """One row per kept request, ordered by start: GuideLLM's own per-request values."""
    kept.sort(key=lambda item: _number(item[1].get("request_start_time")) or 0.0)
    starts = [_number(r.get("request_start_time")) for _, r in kept]
    t0 = t0 if t0 is not None else min((s for s in starts if s is not None), default=0.0)
    rows = []
    for i, (status, req) in enumerate(kept):
        row = empty_row(i)
        info = req.get("info") or {}
        timings = info.get("timings") or {}
        start = _number(timings.get("request_start")) or _number(req.get("request_start_time"))
        last = _number(timings.get("last_token_iteration"))
        end = _number(req.get("request_end_time")) or _number(timings.get("request_end"))
        ok = status == "successful"
        error = None if ok else str(info.get("error") or status)
        ttft = _number(req.get("time_to_first_token_ms"))
        itl = _number(req.get("inter_token_latency_ms"))
        row.update(
            prompt_tokens=_int(req.get("prompt_tokens")),
            output_tokens=_int(req.get("output_tokens")) or 0,
            start_s=(start - t0) if start is not None else 0.0,
            end_s=(end - t0) if end is not None else 0.0,
            ttft_s=ttft * 1e-3 if ttft is not None else None,
            tpot_s=itl * 1e-3 if itl is not None else None,
            e2e_s=(last - start) if last is not None and start is not None else None,
            error=error,
            output_text=req.get("output"),
            finish_reason=None,
        )
        row["requested_output_tokens"] = row["output_tokens"]
        rows.append(finish_row(row))
    return rows


def _number(value: Any) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _int(value: Any) -> Optional[int]:
    return int(value) if isinstance(value, (int, float)) and math.isfinite(value) else None
