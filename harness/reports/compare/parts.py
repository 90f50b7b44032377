"""The parts of runs compare shows a row each: the stages of a time-shaped load, the endpoints of
a run over several, the LoRA adapters of a run's traffic and the agent jobs of workload=agentic
(each part's figures from its summary.json, columns from the metric registry); the page and the
markdown render the same rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.reports.compare.runs import Run
from harness.reports.html import fmt
from harness.reports.part_figures import part_cells, uniform_rows
from harness.results.jobs import job_table


def stages_rows(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """One row per stage of each run that has stages (summary ``stages``), columns from the registry."""
    rows: list[dict[str, Any]] = []
    for run in runs:
        for st in run.summary.stages or []:
            kind = "rate" if "rate" in st else "concurrency"
            load = st.get(kind)
            load_text = f"{load['from']:g} → {load['to']:g}" if isinstance(load, dict) else f"{load:g}"
            req = st.get("requests") or {}
            row: dict[str, Any] = {
                "run": run.label,
                "stage": st.get("index"),
                "s": f"{st.get('start_s', 0):g}–{st.get('end_s', 0):g}",
                "load": f"{load_text} {'req/s' if kind == 'rate' else 'in flight'}",
                "ok / sent": f"{req.get('completed', 0)} / {req.get('sent', 0)}",
            }
            rows.append({**row, **part_cells(st, ("p50", "p99"), compare_only=True)})
    return uniform_rows(rows)


def endpoints_rows(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """One row per endpoint of each run that has several (summary ``endpoints``), columns from the registry."""
    rows: list[dict[str, Any]] = []
    for run in runs:
        for index, ep in (run.summary.endpoints or {}).items():
            row: dict[str, Any] = {
                "run": run.label,
                "endpoint": index,
                "url": ep.get("url") or "–",
                "ok / sent": f"{ep.get('completed', 0)} / {ep.get('requests', 0)}",
                "cached %": fmt(ep.get("cached_share"), 1, 100),
            }
            rows.append({**row, **part_cells(ep, ("p50", "p90"), compare_only=True)})
    return uniform_rows(rows)


def adapters_rows(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """One row per LoRA adapter of each run with LoRA traffic (summary ``adapters``), columns from the registry."""
    rows: list[dict[str, Any]] = []
    for run in runs:
        for name, ad in (run.summary.adapters or {}).items():
            row: dict[str, Any] = {
                "run": run.label,
                "adapter": name,
                "share %": fmt(ad.get("share"), 0, 100),
                "ok / sent": f"{ad.get('completed', 0)} / {ad.get('requests', 0)}",
            }
            rows.append({**row, **part_cells(ad, ("p50", "p90"), compare_only=True)})
    return uniform_rows(rows)


def jobs_rows(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """One row per run with agent jobs (summary ``jobs``): the job figures and the cached share per depth."""
    rows = [{"run": run.label, **dict(job_table(run.summary.jobs))} for run in runs if run.summary.jobs]
    return uniform_rows(rows)
