"""A finished run folder as one flat row of the history (its keys and its figures).

Figures are copied from summary.json, never recomputed: ``latency[metric][stat]`` becomes the
column ``<metric>_<stat>`` (``ttft_s_p50``) for the statistics in :data:`STATS`, and
``throughput[metric]`` the column ``<metric>`` (``output_tokens_per_s``).

Keys:

- ``run_id`` — sha256(started_at + config_sha256 + run folder name)[:16]: the same run added
  twice has the same id (the second add is a no-op);
- ``point`` — what makes two runs the same benchmark point over time: sha256 of backend name
  and mode, model, the workload's prompts (``prompts_sha256``), the load (concurrency, rate,
  open or closed loop) and the hardware fingerprint, [:12]. Engine version, harness commit and
  engine settings are not in it: a change there is what the history is to show. (Two runs at
  one load that differ only in engine settings share a point: keep such sweeps in histories
  of their own.) ``point_label`` says the same in words;
- ``hardware`` — the machine class of env.json (CPU model, logical cores, GPU names; the
  fingerprint of harness.telemetry.environment, which the noise floor is keyed by too);
- ``config_sha256``, ``workload_sha256``, ``prompts_sha256``, ``model``, ``backend``,
  ``backend_mode``, ``engine``, ``engine_version``, ``git_commit``, ``git_dirty``,
  ``started_at`` (UTC timestamp) and ``date`` (its day, the partition);
- ``client`` — who measured: ``harness``, or the tool an imported run came from (``vllm-bench``,
  ``guidellm``, ``aiperf``; harness/formats/), with ``client_version``; a tool's runs are points
  of their own (the client is in ``point`` when it is not the harness, so existing points keep their ids);
- ``taint`` — why the run's machine state makes its figures suspect (summary.json's list,
  written by the machine-state guard), and ``tainted`` (the list is not empty);
- ``batch`` — the runs made together, one after another: a sweep's runs (all its points and
  repeats) share one, sha256(sweep folder name + its start)[:16]; a run added alone is a batch of
  its own (its ``run_id``). A nightly is a batch: the gate against the history takes one value a
  batch (harness/history/nightly.py), since the repeats of one batch share the machine's state.
"""

from __future__ import annotations

import hashlib
import json
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

from harness.results.schema import RunResult
from harness.results.store import load_run, load_summary
from harness.telemetry.environment import hardware_fingerprint

STATS = ("mean", "p50", "p90", "p99")  # of each request metric's distribution
HARNESS_CLIENT = "harness"  # the client of the harness's own runs; an imported run names its tool


def short_hash(*parts: Any, length: int = 16) -> str:
    body = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(body.encode()).hexdigest()[:length]


def figure_column(metric: str, stat: Optional[str] = None) -> str:
    """The history's column of a figure: ``ttft_s_p50``, or a run metric's key."""
    return f"{metric}_{stat}" if stat else metric


def started_at_utc(text: Optional[str]) -> Optional[datetime]:
    """summary.json's ``started_at`` (ISO 8601 with its offset) as a UTC time, naive for Parquet."""
    if not text:
        return None
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc).replace(tzinfo=None)
    return moment


def point_key(row: dict[str, Any]) -> tuple[str, str]:
    """(point id, label) of a row holding the key columns."""
    parts: tuple[Any, ...] = (
        row["backend"],
        row["backend_mode"],
        row["model"],
        row["prompts_sha256"],
        row["concurrency"],
        row["rate"],
        row["open_loop"],
        row["hardware"],
    )
    if row.get("client") not in (None, HARNESS_CLIENT):  # another tool measured it: another point
        parts = (*parts, row["client"])
    load = f"rate {row['rate']}/s" if row["open_loop"] else f"concurrency {row['concurrency'] or 1}"
    prompts = (row["prompts_sha256"] or "")[:8]
    client = f" · by {row['client']}" if row.get("client") not in (None, HARNESS_CLIENT) else ""
    label = (
        f"{row['backend']}/{row['backend_mode']}{client} · {row['model']} · {row['workload']} {prompts} · {load} · "
        f"hw {row['hardware'][:6]}"
    )
    return short_hash(*parts, length=12), label


def run_row(run_dir: Path, batch: Optional[str] = None) -> dict[str, Any]:
    """The history row of a finished run folder (``batch``: the sweep it was made in, if any)."""
    return row_of(load_run(Path(run_dir), with_workload=False), batch)


def sweep_batch(sweep_dir: Path, started_at: Optional[str]) -> str:
    """The batch of a sweep's runs: its folder's name and its start."""
    return short_hash(Path(sweep_dir).name, started_at or "")


def row_of(run: RunResult, batch: Optional[str] = None) -> dict[str, Any]:
    summary, env = run.summary, run.env
    git = (env.get("harness") or {}).get("git") or {}
    started = started_at_utc(summary.started_at)
    taint = [str(t) for t in (getattr(summary, "taint", None) or run_taint(run.run_dir))]
    row: dict[str, Any] = {
        "run_id": short_hash(summary.started_at, summary.config_sha256, run.run_dir.name),
        "started_at": started,
        "date": started.date().isoformat() if started else None,
        "status": summary.status,
        "run_dir": str(run.run_dir.resolve()),
        "config_sha256": summary.config_sha256,
        "workload": summary.workload.get("name"),
        "workload_sha256": summary.workload.get("sha256"),
        "prompts_sha256": summary.workload.get("prompts_sha256"),
        "concurrency": summary.workload.get("concurrency"),
        "rate": summary.workload.get("rate"),
        "open_loop": bool(summary.workload.get("open_loop")),
        "model": summary.model.get("name"),
        "client": (summary.source or {}).get("tool") or HARNESS_CLIENT,
        "client_version": (summary.source or {}).get("tool_version"),
        "backend": summary.backend.get("name"),
        "backend_mode": summary.backend.get("mode"),
        "engine": summary.backend.get("engine") or summary.backend.get("name"),
        "engine_version": summary.backend.get("engine_version"),
        "hardware": hardware_fingerprint(env),
        "cpu_model": (env.get("cpu") or {}).get("model"),
        "gpus": [str(g.get("name")) for g in env.get("gpus") or [] if isinstance(g, dict)],
        "harness_version": (env.get("harness") or {}).get("version"),
        "git_commit": git.get("sha"),
        "git_dirty": git.get("dirty"),
        "repeat_index": (summary.repeat or {}).get("index"),
        "requests_completed": summary.requests.get("completed"),
        "requests_failed": summary.requests.get("failed"),
        "duration_s": summary.duration_s,
        "taint": taint,
        "tainted": bool(taint),
    }
    row["batch"] = batch or row["run_id"]
    row["point"], row["point_label"] = point_key(row)
    for metric, distribution in summary.latency.items():
        for stat in STATS:
            row[figure_column(metric, stat)] = number((distribution or {}).get(stat))
    for metric, value in summary.throughput.items():
        row[figure_column(metric)] = number(value)
    return row


def run_taint(run_dir: Path) -> list[str]:
    """summary.json's ``taint`` list read raw (a RunSummary that predates the field drops it)."""
    try:
        taint = load_summary(run_dir).get("taint")
    except (OSError, ValueError):
        return []
    return list(taint) if isinstance(taint, list) else []


def number(value: Any) -> Optional[float]:
    """A finite figure as a float; anything else (None, NaN, text) as None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)
