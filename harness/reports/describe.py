"""One line each about a run, for the pages and the console: backend, engine, model, load, workload, hardware, date."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from harness.reports import html
from harness.results.schema import RunSummary


def backend_text(summary: RunSummary) -> str:
    """``transformers (inprocess · batching=static, device=cpu …)``."""
    b = summary.backend
    info = b.get("info") or {}
    details = ", ".join(f"{k}={v}" for k, v in info.items() if not isinstance(v, (dict, list)))
    return f"{b.get('name')} ({b.get('mode')}{' · ' + details if details else ''})"


def engine_text(summary: RunSummary) -> str:
    b = summary.backend
    return f"{b.get('engine') or '?'} {b.get('engine_version') or ''}".strip()


def model_text(summary: RunSummary) -> str:
    m = summary.model
    source = m.get("source")
    return f"{m.get('name')}" + (f" ({source})" if source and source != m.get("name") else "")


def load_text(summary: RunSummary) -> str:
    """Closed loop with its concurrency, or open loop with its rate; a time-shaped load by its stages."""
    wl = summary.workload
    rate, cap = wl.get("rate"), wl.get("concurrency")
    in_flight = f", at most {cap} in flight" if cap is not None else ""
    schedule = wl.get("schedule")
    if schedule:
        loads = " → ".join(_stage_load(st.get(schedule.get("kind"))) for st in summary.stages or [])
        what = f"rate {loads} req/s" if schedule.get("kind") == "rate" else f"concurrency {loads}"
        loop = "open loop" if wl.get("open_loop") else "closed loop"
        return f"{loop}, {what} over {schedule.get('duration_s', 0):g} s{in_flight if wl.get('open_loop') else ''}"
    if wl.get("open_loop") and rate is None and wl.get("data"):
        return f"open loop at the data's timestamps{in_flight}"
    if wl.get("open_loop"):
        return f"open loop, rate {rate if rate is not None else '?'}/s{in_flight}"
    return f"closed loop, concurrency {cap}"


def _stage_load(load: Any) -> str:
    """One stage's rate or concurrency: a number, or a ramp's from → to."""
    if isinstance(load, dict):
        return f"({load.get('from', '?'):g}↗{load.get('to', '?'):g} {load.get('shape', '')})".replace(" )", ")")
    return f"{load:g}" if isinstance(load, (int, float)) else "?"


def workload_text(summary: RunSummary) -> str:
    wl = summary.workload
    sha = (wl.get("sha256") or "")[:12]
    data = wl.get("data")
    source = (
        f" · data {data.get('path')} ({data.get('format')}, sha256 {str(data.get('sha256'))[:12]}…)" if data else ""
    )
    planned = (
        f" · {wl['requests_planned']} requests in {wl.get('sessions')} sessions"
        if wl.get("requests_planned") is not None
        else ""
    )  # unknown where a killed run left no summary
    return f"{wl.get('name')}{planned} · {load_text(summary)} · sha256 {sha}…{source}"


def hardware_text(env: dict[str, Any]) -> str:
    """CPU model and cores, RAM, GPUs (from env.json)."""
    if not env:
        return "unknown (no env.json)"
    cpu = env.get("cpu") or {}
    parts = [f"{cpu.get('model', '?')} · {cpu.get('logical_cores', '?')} logical cores"]
    if env.get("ram_bytes"):
        parts.append(f"{html.fmt_bytes(env['ram_bytes'])} RAM")
    gpus = env.get("gpus") or []
    parts.append(
        ", ".join(f"{g.get('name')} ({html.fmt_bytes(g.get('memory_bytes'))})" for g in gpus) if gpus else "no GPU"
    )
    return " · ".join(parts)


def run_date(run_dir: Path) -> str:
    """summary.json's ``started_at``; else the folder's name (``YYYYmmdd-HHMMSS-…``); else its mtime."""
    try:
        started = json.loads((run_dir / "summary.json").read_text()).get("started_at")
        if started:
            return datetime.fromisoformat(started).strftime("%Y-%m-%d %H:%M:%S %Z").strip()
    except (OSError, ValueError):
        pass
    match = re.search(r"(\d{8})-(\d{6})", run_dir.name)
    if match:
        try:
            return datetime.strptime("".join(match.groups()), "%Y%m%d%H%M%S").strftime("%Y-%m-%d %H:%M:%S")
        except ValueError:
            pass
    path = run_dir / "summary.json"
    return datetime.fromtimestamp(path.stat().st_mtime).strftime("%Y-%m-%d %H:%M:%S") if path.exists() else "?"
