"""report.html: one self-contained, offline HTML page per run folder.

``write_report(run_dir)`` reads what the run left (summary.json, requests.parquet or the
.jsonl of a run that died, config.yaml, env.json, workload.json, memory.parquet, gpu.parquet —
any of the last five may be missing) and writes ``report.html`` next to them:

- a header (backend and mode, engine version, model, workload, hardware, date), a banner when
  the run is tainted (``summary.taint``: the machine was not fit to measure on, machine.json),
  and the run's warnings at the top (failed requests, lengths that differ from the requested
  ones, a large harness overhead, an interrupted or failed run);
- the summary table and key throughputs; the client's own state (event-loop lag, CPU use,
  and whether it may have been the bottleneck);
- TTFT, TPOT and E2E CDFs; inter-token latency; a per-request timeline (queue wait,
  prefill until the first token, decode until the last); output tokens/s and requests in
  flight over time; memory over time; GPU utilisation and power over time (where NVML
  sampled them); for chat runs, TTFT against turn and context length;
- the failed and the slowest requests with excerpts of their prompts and outputs, and the
  run's config and environment. Every piece of text from the run is HTML-escaped.

``python -m harness.report RUN_DIR…`` (re)builds the report of existing run folders.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pandas as pd

from core.errors import HarnessError
from harness.client.client_load import INTERVAL_S
from harness.reports import figures, html
from harness.reports.describe import backend_text, engine_text, hardware_text, model_text, run_date, workload_text
from harness.reports.html import esc, fmt
from harness.reports.part_figures import part_cells
from harness.reports.source import figures_html, header_item
from harness.results import metrics
from harness.results.jobs import job_table
from harness.results.schema import REPORT, RunResult, RunSummary
from harness.results.store import load_run
from harness.results.summary import (
    CLIENT_CPU_WARN_CORES,
    LOOP_LAG_WARN_S,
    cache_hit_figures,
    client_warnings,
    structured_line,
)

REPORT_NAME = REPORT
PHASE_COLORS = {"queue": "#c3cad3", "prefill": "#f28e2b", "decode": "#4e79a7", "failed": "#e15759"}


# --- text about the run -------------------------------------------------------------------


# --- the page -----------------------------------------------------------------------------


def write_report(run_dir: Path) -> Path:
    """Build ``report.html`` in the run folder and return its path."""
    run_dir = Path(run_dir)
    page, _ = build_report(load_run(run_dir))
    path = run_dir / REPORT_NAME
    tmp = path.with_suffix(".html.tmp")
    tmp.write_text(page, encoding="utf-8", errors="replace")  # a lone surrogate a server sent must not cost the page
    tmp.replace(path)
    return path


def build_report(run: RunResult) -> tuple[str, list[str]]:
    """The report's HTML and the ids of the plots in it."""
    summary = run.summary
    charts: list[tuple[str, str, Any, str]] = []  # (id, title, figure, note)
    for make in (
        _latency_cdfs,
        _itl_figure,
        _timeline,
        _throughput_over_time,
        _server_over_time,
        _memory_over_time,
        _gpu_over_time,
        _chat_figures,
    ):
        made = make(run)
        if made is not None:
            charts.append(made)

    sections = [html.section("Summary", _summary_html(summary)), _client_html(summary)]
    if summary.source:  # a run another tool measured: its own figures and what it means by them
        sections.append(html.section(f"Measured by {summary.source.get('title')}", figures_html(summary)))
    plot_ids = []
    for div_id, title, fig, note in charts:
        if fig is None:  # a panel that is absent: the line that says why
            sections.append(html.section(title, "", note))
            continue
        plot_ids.append(div_id)
        sections.append(html.section(title, figures.figure_div(fig, div_id), note))
    if not charts:
        sections.append(html.section("Charts", html.note("No completed request: nothing to plot.")))
    sections.append(_requests_html(run))
    sections.append(_details_html(run))
    page = html.page(
        "report.html.j2",
        f"Report · {run.name}",
        name=run.name,
        status=summary.status or "?",
        date=run_date(run.run_dir),
        taint=summary.taint,
        warnings=summary.warnings,
        header=_header_items(run),
        sections=html.safe(sections),
    )
    return page, plot_ids


def _header_items(run: RunResult) -> list[tuple[str, str]]:
    s, env = run.summary, run.env
    git = (env.get("harness") or {}).get("git") or {}
    sha = (git.get("sha") or "?")[:10] + (" (uncommitted changes)" if git.get("dirty") else "")
    engine = engine_text(s)
    if s.engine.get("reused"):
        engine += f" · engine reused (loaded once in {fmt(s.engine.get('session_load_s'), 1, unit=' s')} for {s.engine.get('points_served')} points so far)"
    items = [
        ("backend", backend_text(s)),
        ("engine", engine),
        ("model", model_text(s)),
        ("workload", workload_text(s)),
        ("hardware", hardware_text(env)),
        ("date", run_date(run.run_dir)),
        (
            "harness",
            f"{(env.get('harness') or {}).get('version', '?')} @ {sha} · Python {env.get('python', '?')} · seed {s.seed}",
        ),
        ("folder", str(run.run_dir)),
    ]
    if s.repeat:
        items.insert(4, ("repeat", f"{s.repeat.get('index')} of {s.repeat.get('of')}"))
    measured_by = header_item(s)
    if measured_by is not None:
        items.insert(0, measured_by)
    if s.error:
        items.insert(0, ("error", f"{s.status}: {s.error}"))
    return items


def _detail_html(summary: RunSummary) -> str:
    """The "why" figures a run has (reasoning, the client's wait, HTTP phases): one table, or nothing."""
    rows = []
    for key, metric in metrics.REQUEST_METRICS.items():
        d = summary.latency.get(key) or {}
        if metric.detail and d.get("count"):
            row = {"figure": f"{metric.label} ({metric.unit})", "count": d.get("count", 0)}
            for c in (*metrics.STATS, "max"):
                row[c] = fmt(d.get(c), metric.digits, metric.scale)
            rows.append(row)
    if not rows:
        return ""
    return html.heading("Details") + html.table(
        rows, ["figure", "count", *metrics.STATS, "max"], text_columns=["figure"]
    )


def _summary_html(summary: RunSummary) -> str:
    rows = []
    for key, metric in metrics.REQUEST_METRICS.items():
        if not metric.in_console:
            continue
        d = summary.latency.get(key) or {}
        row = {"metric": f"{metric.label} ({metric.unit})", "count": d.get("count", 0)}
        for c in (*metrics.STATS, "max"):
            row[c] = fmt(d.get(c), metric.digits, metric.scale)
        rows.append(row)
    table = html.table(rows, ["metric", "count", *metrics.STATS, "max"], text_columns=["metric"])
    req = summary.requests
    items = [
        ("requests ok / sent", f"{req.get('completed', 0)} / {req.get('sent', 0)}"),
        ("failed", str(req.get("failed", 0))),
        ("duration", fmt(summary.duration_s, 2, unit=" s")),
    ]
    for key in metrics.shown_run_metrics(summary.throughput):
        run_metric = metrics.RUN_METRICS[key]
        unit = " %" if run_metric.unit == "%" else (f" {run_metric.unit}" if run_metric.source else "")
        items.append((run_metric.label, fmt(summary.throughput.get(key), run_metric.digits, run_metric.scale, unit)))
    for key, metric in metrics.REQUEST_METRICS.items():
        if not metric.in_console and not metric.detail:  # per-request rates: their mean as a card
            items.append(
                (
                    f"{metric.label} (mean)",
                    fmt((summary.latency.get(key) or {}).get("mean"), metric.digits, metric.scale),
                )
            )
    cache = summary.prefix_cache
    if cache.get("reported_by_engine"):
        items.append(("prompt tokens from prefix cache", fmt(cache.get("cached_share"), 1, 100, " %")))
    hit = cache_hit_figures(summary)
    if hit is not None:
        if hit["target"] is not None:
            items.append(("prefix-cache hit: target", fmt(hit["target"], 1, 100, " %")))
        items.append(("prefix-cache hit: theoretical", fmt(hit["theoretical"], 1, 100, " %")))
    mem = summary.memory
    for key, label in (
        ("rss_peak_bytes", "peak RSS"),
        ("gpu_peak_allocated_bytes", "GPU peak allocated"),
        ("gpu_nvml_peak_used_bytes", "GPU used (NVML)"),
        ("gpu_nvml_peak_process_used_bytes", "GPU used by the engine (NVML)"),
        ("weights_bytes", "weights"),
    ):
        if mem.get(key):
            items.append((label, html.fmt_bytes(mem[key])))
    page = html.cards(items) + table + _detail_html(summary)
    checked = structured_line(summary.structured)
    if checked:  # workload.response_format / workload.tools: how many replies kept their constraint
        page += html.note(f"{checked} (JSON schemas checked with {(summary.structured or {}).get('validator')})")
    turns = summary.per_turn
    if len(turns) > 1:
        cached = cache.get("reported_by_engine")
        turn_rows = [
            {
                "turn": t.get("turn"),
                "requests": t.get("requests"),
                "context tokens (mean)": fmt(t.get("prompt_tokens_mean"), 1),
                **({"cached %": fmt(t.get("cached_share"), 1, 100)} if cached else {}),
                "TTFT mean ms": fmt(t.get("ttft_mean_s"), 1, 1000),
                "TTFT p50 ms": fmt(t.get("ttft_p50_s"), 1, 1000),
                "TTFT p90 ms": fmt(t.get("ttft_p90_s"), 1, 1000),
                "E2E mean ms": fmt(t.get("e2e_mean_s"), 1, 1000),
            }
            for t in turns
        ]
        page += html.note("Per turn (chat):") + html.table(turn_rows, list(turn_rows[0]))
    return (
        page
        + jobs_html(summary)
        + _engine_stages_html(summary)
        + endpoints_html(summary)
        + adapters_html(summary)
        + stages_html(summary)
    )


def jobs_html(summary: RunSummary) -> str:
    """Agent jobs (workload=agentic): the summary's ``jobs`` figures (harness/results/jobs.py) as a table."""
    rows = [{"figure": k, "value": v} for k, v in job_table(summary.jobs)]
    if not rows:
        return ""
    return html.note(
        "Agent jobs (JCT: first send → last token of a job; critical path: the chain of "
        "dependent requests that ends the job):"
    ) + html.table(rows, ["figure", "value"], text_columns=["figure", "value"])


def stages_html(summary: RunSummary) -> str:
    """The steady-state window (a note) and one row per stage of a time-shaped load: the summary's
    ``window`` and ``stages`` figures as they are (request metrics p50 / p99, run metrics over
    the stage's length)."""
    out = ""
    window, whole = summary.window, summary.whole_run
    if window:
        out += html.note(
            f"Steady-state window: the figures above count the {window['requests'].get('completed', 0)} "
            f"completed requests that started in [{fmt(window.get('start_s'), 2)}, {fmt(window.get('end_s'), 2)}] s "
            f"(throughput over {fmt(window.get('duration_s'), 2)} s); the whole run had "
            f"{(whole or {}).get('requests', {}).get('completed', 0)} (summary.json: whole_run)."
        )
    if not summary.stages:
        return out
    rows = []
    for st in summary.stages:
        kind = "rate" if "rate" in st else "concurrency"
        load = st.get(kind)
        load_text = f"{load['from']:g} → {load['to']:g} ({load['shape']})" if isinstance(load, dict) else f"{load:g}"
        req = st.get("requests") or {}
        row = {
            "stage": st.get("index"),
            "from–to (s)": f"{st.get('start_s', 0):g}–{st.get('end_s', 0):g}",
            "rate (req/s)" if kind == "rate" else "concurrency": load_text,
            "ok / sent": f"{req.get('completed', 0)} / {req.get('sent', 0)}",
        }
        rows.append({**row, **part_cells(st, ("p50", "p99"))})
    return out + (
        html.note("Per stage (each request in the stage it started in; throughputs over the stage's length):")
        + html.table(rows, list(rows[0]))
    )


STAGE_FILLS = ("#9fb3c8", "#f0b429")  # alternate stages
WINDOW_FILL = "#52606d"  # outside the steady-state window


def shade_time(fig: Any, summary: RunSummary, row: Optional[int] = None, col: Optional[int] = None) -> None:
    """Shade an over-time figure: each stage of a time-shaped load (alternating, labelled), and
    the warm-up and cool-down outside the steady-state window (darker) — from the summary."""
    for st in summary.stages or []:
        i = int(st.get("index", 0))
        fig.add_vrect(st["start_s"], st["end_s"], STAGE_FILLS[i % 2], 0.10, row, col, f"stage {i}")
    window = summary.window
    if window:
        if window.get("start_s", 0) > 0:
            fig.add_vrect(0.0, window["start_s"], WINDOW_FILL, 0.18, row, col, "warm-up")
        end = max(float(summary.duration_s or 0.0), window["end_s"])
        if end > window["end_s"]:
            fig.add_vrect(window["end_s"], end, WINDOW_FILL, 0.18, row, col, "cool-down")


def endpoints_html(summary: RunSummary) -> str:
    """One row per endpoint (backend.urls, backend.replicas): the summary's ``endpoints`` figures,
    request metrics as p50 / p90, run metrics over the run's duration; nothing with one endpoint."""
    if not summary.endpoints:
        return ""
    rows = []
    for index, ep in summary.endpoints.items():
        row = {
            "endpoint": index,
            "url": ep.get("url") or "–",
            "ok / sent": f"{ep.get('completed', 0)} / {ep.get('requests', 0)}",
            "failed": str(ep.get("failed", 0)),
            "cached %": fmt(ep.get("cached_share"), 1, 100),
        }
        rows.append({**row, **part_cells(ep, ("p50", "p90"))})
    return html.note(
        "Per endpoint (requests routed by backend.routing; throughputs over the whole run's "
        "duration, so they add up to the run's):"
    ) + html.table(rows, list(rows[0]), text_columns=["url"])


def adapters_html(summary: RunSummary) -> str:
    """One row per LoRA adapter (workload.lora.adapters; "base": no adapter): the summary's
    ``adapters`` figures, request metrics as p50 / p90, run metrics over the run's duration."""
    if not summary.adapters:
        return ""
    rows = []
    for name, ad in summary.adapters.items():
        row = {
            "adapter": name,
            "share %": fmt(ad.get("share"), 1, 100),
            "ok / sent": f"{ad.get('completed', 0)} / {ad.get('requests', 0)}",
            "failed": str(ad.get("failed", 0)),
        }
        rows.append({**row, **part_cells(ad, ("p50", "p90"))})
    return html.note(
        'Per LoRA adapter (workload.lora.adapters; "base": the base model; throughputs over '
        "the whole run's duration, so they add up to the run's):"
    ) + html.table(rows, list(rows[0]), text_columns=["adapter"])


def _engine_stages_html(summary: RunSummary) -> str:
    """Each stage time the engine reported, named by the interval it covers, beside the
    harness's measure of the same interval (an engine's clock starts only where it first sees
    the request, so its queue time can read 0 while requests waited)."""
    rows = []
    for stage in summary.engine_stages.values():
        for who, label, interval in (
            ("engine", stage["label"], stage["interval"]),
            ("harness", stage["harness_label"], stage["harness_interval"]),
        ):
            d = stage.get(who) or {}
            rows.append(
                {
                    "measured by": who,
                    "stage time": label,
                    "interval it covers": interval,
                    "mean ms": fmt(d.get("mean"), 2, 1000),
                    "p50 ms": fmt(d.get("p50"), 2, 1000),
                    "p90 ms": fmt(d.get("p90"), 2, 1000),
                    "max ms": fmt(d.get("max"), 2, 1000),
                }
            )
    if not rows:
        why = ((summary.backend.get("info") or {}).get("notes") or {}).get("engine_timings")
        if summary.backend.get("mode") == "server" and why:
            return html.note(f"No stage times from the engine: {why}.")
        return ""
    return html.note(
        "Stage times the engine reported, each beside the harness's measure of the same interval:"
    ) + html.table(rows, list(rows[0]), text_columns=["measured by", "stage time", "interval it covers"])


def _client_html(summary: RunSummary) -> str:
    """The client's own state through the measured phase (harness/client/client_load.py) and, when it
    may have been the bottleneck, why; empty for runs that did not record it."""
    lag, cores = summary.harness.get("loop_lag_s") or {}, summary.harness.get("cpu_cores")
    if not lag.get("count") and not html.is_num(cores):
        return ""
    items = [(f"event-loop lag {k} (ms)", fmt(lag.get(k), 1, 1000)) for k in ("p50", "p99", "max")]
    items.append(("client CPU (% of a core)", fmt(cores, 0, 100, " %")))
    found = client_warnings(summary)
    verdict = (
        html.banner(found, "The client may be the bottleneck", "warning")
        if found
        else html.note("The client kept up: its event loop was not held back and it did not use up its core.")
    )
    inside = (
        " (an in-process engine runs in this process: its work counts too)"
        if summary.backend.get("mode") == "inprocess"
        else ""
    )
    note = (
        f"Event-loop lag: every {INTERVAL_S * 1000:.0f} ms a task asks to wake at t and records woken − t "
        f"({lag.get('count', 0)} samples); chunk stamps wait as long, and about 1 ms is asyncio's own floor. "
        f"Client CPU: this process's CPU time over the phase's wall time{inside}; one event loop can use one core. "
        f"Warning beyond an event-loop lag p99 of {LOOP_LAG_WARN_S * 1000:.0f} ms, or "
        f"{CLIENT_CPU_WARN_CORES:.0%} of a core while the loop lags."
    )
    return html.section("The client", html.cards(items) + verdict + hosts_html(summary), note)


def hosts_html(summary: RunSummary) -> str:
    """One row per client host (``client.cluster=ray``): the summary's ``hosts`` figures, its
    clock's offset, drift and round trip, and whether it was lost; nothing for a local client."""
    if not summary.hosts:
        return ""
    rows = []
    for index, h in summary.hosts.items():
        clock = h.get("clock") or {}
        lag = h.get("loop_lag_s") or {}
        drift = clock.get("drift_s")
        rows.append(
            {
                "host": index,
                "name": f"{h.get('hostname') or '?'} ({h.get('ip') or '?'})",
                "workers": str(h.get("workers", 0)),
                "ok / sent": f"{h.get('completed', 0)} / {h.get('requests', 0)}",
                "failed": str(h.get("failed", 0)),
                "client CPU %": fmt(h.get("cpu_cores"), 0, 100),
                "loop lag p99 ms": fmt(lag.get("p99"), 1, 1000),
                "peak RSS": html.fmt_bytes(h["rss_peak_bytes"]) if h.get("rss_peak_bytes") else "–",
                "clock offset ms": fmt(clock.get("offset_s"), 3, 1000),
                "± ms": fmt(clock.get("uncertainty_s"), 3, 1000),
                "drift ms": (fmt(drift, 3, 1000) + (" (beyond the bound)" if clock.get("drifted") else ""))
                if drift is not None
                else "–",
                "status": f"lost: {h['lost']}" if h.get("lost") else "ok",
            }
        )
    return html.note(
        "Per client host (client.cluster=ray): its requests, its workers' CPU (% of a core, all of them "
        "together) and event-loop lag, and its clock's offset to this host's (its stamps are corrected by it; "
        "± half the fastest round trip), measured before the run and again after it (drift):"
    ) + html.table(rows, list(rows[0]), text_columns=["name", "drift ms", "status"])


# --- figures: each returns (div id, title, figure, note) or None when there is nothing to draw


def _latency_cdfs(run: RunResult):
    fig = figures.latency_cdfs([("completed requests", run.values)], height=340)
    if fig is None:
        return None
    fig.update_layout(showlegend=False)
    return (
        "latency-cdf",
        "Latency distributions (CDF)",
        fig,
        "Fraction of completed requests at or below each latency. TTFT includes queueing and prefill.",
    )


def _itl_figure(run: RunResult):
    ok = run.completed
    gaps = run.values("itl_s")
    if gaps.size == 0:
        return None
    fig = figures.figure(1, 2, ["ITL histogram (ms)", "ITL by position in the output (ms)"], height=340)
    fig.add_trace(
        figures.trace(
            "histogram",
            x=gaps * 1000,
            nbinsx=60,
            marker=dict(color=figures.color(0)),
            name="ITL",
            hovertemplate="%{x} ms: %{y} gaps<extra></extra>",
        ),
        1,
        1,
    )
    fig.update_xaxes(title_text="ms", row=1, col=1)
    fig.update_yaxes(title_text="token gaps", row=1, col=1)
    lists = [np.asarray(lst, dtype=float) for lst in ok["itl_s"] if lst is not None and len(lst)]
    longest = max(len(a) for a in lists)
    padded = np.full((len(lists), longest), np.nan)
    for i, a in enumerate(lists):
        padded[i, : len(a)] = a
    pos = np.arange(2, longest + 2)  # the gap before output token k (k ≥ 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # positions no request reached
        p50 = np.nanpercentile(padded, 50, axis=0) * 1000
        p90 = np.nanpercentile(padded, 90, axis=0) * 1000
    fig.add_trace(
        figures.trace("scatter", x=pos, y=p50, mode="lines", name="p50", line=dict(color=figures.color(0))), 1, 2
    )
    fig.add_trace(
        figures.trace("scatter", x=pos, y=p90, mode="lines", name="p90", line=dict(color=figures.color(1), dash="dot")),
        1,
        2,
    )
    fig.update_xaxes(title_text="output token", row=1, col=2)
    return (
        "itl",
        "Inter-token latency",
        fig,
        "Gaps between consecutive output tokens, pooled over all requests (token-weighted); right: median and p90 of the gap before each output token.",
    )


def _timeline(run: RunResult):
    df = run.requests
    if df.empty or df["start_s"].isna().all():
        return None
    df = df.sort_values(["start_s", "request_id"]).reset_index(drop=True)
    ok_mask = df["error"].isna() | (df["error"].astype(str) == "")
    start = pd.to_numeric(df["start_s"], errors="coerce").to_numpy(float)
    end = pd.to_numeric(df["end_s"], errors="coerce").to_numpy(float)
    ttft = pd.to_numeric(df["ttft_s"], errors="coerce").to_numpy(float)
    queue = np.nan_to_num(pd.to_numeric(df["queue_wait_s"], errors="coerce").to_numpy(float), nan=0.0)
    queue = np.minimum(queue, np.where(np.isnan(ttft), queue, ttft))
    y = np.arange(len(df))
    # hover figures as numbers (compact in the page), the few error texts as escaped text
    custom = np.column_stack(
        [
            pd.to_numeric(df[c], errors="coerce").to_numpy(float) * k
            for c, k in (
                ("request_id", 1),
                ("session_id", 1),
                ("turn", 1),
                ("prompt_tokens", 1),
                ("output_tokens", 1),
                ("start_s", 1),
                ("queue_wait_s", 1000),
                ("ttft_s", 1000),
                ("e2e_s", 1000),
            )
        ]
    ).astype(np.float32)
    template = (
        "request %{customdata[0]} · session %{customdata[1]} · turn %{customdata[2]}<br>"
        "%{customdata[3]} prompt → %{customdata[4]} output tokens<br>start %{customdata[5]:.3f} s · "
        "queue %{customdata[6]:.1f} ms · TTFT %{customdata[7]:.1f} ms · E2E %{customdata[8]:.1f} ms<extra></extra>"
    )
    errors = np.asarray([esc("error: " + html.excerpt(e, 200)) for e in df["error"]], dtype=object)
    segments = [
        ("queue wait", "queue", start, queue, ok_mask),
        ("prefill (to first token)", "prefill", start + queue, ttft - queue, ok_mask),
        ("decode (to last token)", "decode", start + ttft, end - start - ttft, ok_mask),
        ("failed", "failed", start, end - start, ~ok_mask),
    ]
    fig = figures.figure(height=int(min(900, max(320, 160 + 3 * len(df)))))
    for label, key, base, width, mask in segments:
        mask = np.asarray(mask) & np.isfinite(base) & np.isfinite(width)
        if not mask.any():
            continue
        hover = (
            dict(hovertext=errors[mask], hovertemplate=template.replace("<extra>", "<br>%{hovertext}<extra>"))
            if key == "failed"
            else dict(hovertemplate=template)
        )
        fig.add_trace(
            figures.trace(
                "bar",
                y=y[mask],
                x=np.maximum(width[mask], 0),
                base=base[mask],
                orientation="h",
                name=label,
                marker=dict(color=PHASE_COLORS[key], line=dict(width=0)),
                customdata=custom[mask],
                **hover,
            )
        )
    sched = pd.to_numeric(df["scheduled_s"], errors="coerce").to_numpy(float)
    if np.isfinite(sched).any():
        m = np.isfinite(sched)
        fig.add_trace(
            figures.trace(
                "scatter",
                x=sched[m],
                y=y[m],
                mode="markers",
                name="scheduled (open loop)",
                marker=dict(symbol="line-ns-open", size=6, color="#52606d"),
                hoverinfo="skip",
            )
        )
    fig.update_layout(barmode="overlay", bargap=0.15)
    shade_time(fig, run.summary)
    fig.update_xaxes(title_text="time since the measured phase began (s)")
    fig.update_yaxes(title_text="request (by send time)", autorange="reversed")
    return (
        "timeline",
        "Per-request timeline",
        fig,
        "Each row is a request: grey while it waited for the engine, orange until its first token, blue until its last; red: failed.",
    )


def token_times(ok: pd.DataFrame) -> np.ndarray:
    """When each output token arrived: start + TTFT, then + each inter-token gap."""
    out = []
    for start, ttft, itl in zip(ok["start_s"], ok["ttft_s"], ok["itl_s"]):
        if not (html.is_num(start) and html.is_num(ttft)):
            continue
        first = start + ttft
        gaps = np.asarray(itl if itl is not None else [], dtype=float)
        out.append(np.concatenate([[first], first + np.cumsum(gaps)]))
    return np.concatenate(out) if out else np.empty(0)


def _throughput_over_time(run: RunResult):
    ok = run.completed
    times = token_times(ok) if not ok.empty else np.empty(0)
    if times.size == 0:
        return None
    span = max(float(times.max()), 1e-3)
    width = max(figures.nice_bin(span), 0.01)
    edges = np.arange(0, span + width, width)
    if edges.size < 2:
        edges = np.array([0.0, width])
    counts, _ = np.histogram(times, bins=edges)
    mids = (edges[:-1] + edges[1:]) / 2
    fig = figures.figure(height=340, secondary_y=True)
    fig.add_trace(
        figures.trace(
            "bar",
            x=mids,
            y=counts / width,
            width=width * 0.95,
            name=f"output tokens/s ({width:g} s bins)",
            marker=dict(color=figures.color(0)),
            hovertemplate="t=%{x:.2f} s: %{y:.1f} tok/s<extra></extra>",
        ),
        secondary_y=False,
    )
    inflight = mean_in_flight(run.requests, edges)
    if inflight is not None:
        fig.add_trace(
            figures.trace(
                "scatter",
                x=edges,
                y=np.append(inflight, inflight[-1]),
                mode="lines",
                line=dict(shape="hv", color=figures.color(1)),
                name="requests in flight (mean per bin)",
                hovertemplate="from t=%{x:.2f} s: %{y:.2f} in flight<extra></extra>",
            ),
            secondary_y=True,
        )
    shade_time(fig, run.summary)
    fig.update_xaxes(title_text="time since the measured phase began (s)")
    fig.update_yaxes(title_text="output tokens/s", secondary_y=False)
    fig.update_yaxes(
        title_text="requests in flight",
        secondary_y=True,
        rangemode="tozero",
        showgrid=False,
        **({"dtick": 1} if inflight is not None and inflight.max() <= 12 else {}),
    )
    return (
        "throughput-time",
        "Output tokens/s over time",
        fig,
        "Tokens delivered per time bin (every output token at its own time), and the number of requests in flight.",
    )


def mean_in_flight(df: pd.DataFrame, edges: np.ndarray) -> Optional[np.ndarray]:
    """Time-weighted mean number of requests in flight in each bin: Σ overlap([start, end], bin) / width."""
    start = pd.to_numeric(df["start_s"], errors="coerce").to_numpy(float)
    end = pd.to_numeric(df["end_s"], errors="coerce").to_numpy(float)
    keep = np.isfinite(start) & np.isfinite(end)
    if not keep.any():
        return None
    lo, hi = edges[:-1], edges[1:]
    overlap = np.clip(np.minimum(end[keep, None], hi) - np.maximum(start[keep, None], lo), 0, None)
    return overlap.sum(axis=0) / (hi - lo)


# the server's neutral series drawn (server_metrics.parquet, kind "neutral"): name, panel title, scale
SERVER_PANELS = (
    ("kv_cache_usage", "KV-cache use (%)", 100.0),
    ("requests_running", "requests running", 1.0),
    ("requests_waiting", "requests waiting", 1.0),
    ("spec_acceptance_rate", "speculative acceptance rate (%, per scrape interval)", 100.0),
)


def server_panels(series: Optional[pd.DataFrame]) -> list[tuple[str, str, float, pd.DataFrame]]:
    """(name, title, scale, rows sorted by t_s) of each neutral server series the run has."""
    if series is None or series.empty or "kind" not in series:
        return []
    neutral = series[series["kind"] == "neutral"]
    return [
        (name, title, scale, neutral[neutral["name"] == name].sort_values("t_s"))
        for name, title, scale in SERVER_PANELS
        if (neutral["name"] == name).any()
    ]


def endpoint_series(series: Optional[pd.DataFrame], metric: str) -> list[tuple[str, pd.DataFrame]]:
    """(endpoint index, rows sorted by t_s) of the engine metric's series per endpoint, for a run
    over several (``labels`` ``endpoint=i``); empty otherwise."""
    if series is None:
        return []
    mine = series[(series["name"] == metric) & series["labels"].str.startswith("endpoint=")]
    groups = [(str(label).removeprefix("endpoint="), rows.sort_values("t_s")) for label, rows in mine.groupby("labels")]
    return sorted(groups, key=lambda g: int(g[0]) if g[0].isdigit() else 0) if len(groups) > 1 else []


def _server_over_time(run: RunResult):
    """The server's own state over the measured phase (its /metrics, sampled), on the x axis of
    the throughput figure above; or one line saying why there is none."""
    title = "Server state over time"
    sampled = (run.summary.server_metrics or {}).get("sampled")
    panels = server_panels(run.server_series)
    if not panels:
        if sampled is None:  # a run from before the sampler, or no measured phase
            return None
        why = sampled.get("absent") or (
            "no scrape answered in time"
            if not sampled.get("ok")
            else "its /metrics has none of the KV-use, running or waiting gauges the harness knows "
            "(server_metrics.parquet keeps every gauge and counter)"
        )
        return ("server-time", title, None, f"No server-state panel: {why}.")
    fig = figures.figure(len(panels), 1, [t for _, t, _, _ in panels], height=170 * len(panels) + 90, shared_xaxes=True)
    t_max = float(run.summary.duration_s or 0.0)
    for row, (name, _title, scale, rows) in enumerate(panels, start=1):
        metric = str(rows["labels"].iloc[0] or name)
        t = rows["t_s"].to_numpy(float)
        t_max = max(t_max, float(t.max()))
        fig.add_trace(
            figures.trace(
                "scatter",
                x=t,
                y=rows["value"].to_numpy(float) * scale,
                mode="lines+markers",
                marker=dict(size=4),
                line=dict(color=figures.color(row - 1)),
                name=esc(metric),
                hovertemplate=f"{esc(metric)}: %{{y:.3g}} at t=%{{x:.2f}} s<extra></extra>",
            ),
            row,
            1,
        )
        for i, part in endpoint_series(run.server_series, metric):  # a run over several endpoints: each one
            fig.add_trace(
                figures.trace(
                    "scatter",
                    x=part["t_s"].to_numpy(float),
                    y=part["value"].to_numpy(float) * scale,
                    mode="lines",
                    line=dict(color=figures.color(row - 1), dash="dot", width=1),
                    name=f"endpoint {esc(i)}",
                    hovertemplate=f"endpoint {esc(i)}: %{{y:.3g}} at t=%{{x:.2f}} s<extra></extra>",
                ),
                row,
                1,
            )
        fig.update_yaxes(rangemode="tozero", row=row, col=1)
    shade_time(fig, run.summary)
    fig.update_xaxes(range=[0, t_max])
    fig.update_xaxes(title_text="time since the measured phase began (s)", row=len(panels), col=1)
    return ("server-time", title, fig, _server_note(run.summary.server_metrics or {}))


def _server_note(server_metrics: dict[str, Any]) -> str:
    s = server_metrics.get("sampled") or {}
    parts = [
        f"The server's /metrics, scraped every {fmt(s.get('interval_s'), 2)} s during the measured phase "
        f"({s.get('scrapes', 0)} scrapes: {s.get('ok', 0)} answered, {s.get('failed', 0)} failed, "
        f"{s.get('slow', 0)} slower than {fmt(s.get('timeout_s'), 2)} s, {s.get('skipped', 0)} skipped)."
    ]
    for name, label, scale in SERVER_PANELS:
        d = s.get(name)
        if d:
            unit = " %" if scale == 100.0 else ""
            per = "".join(
                f"; endpoint {i}: peak {fmt(e.get('peak'), 2, scale, unit)}, mean {fmt(e.get('mean'), 2, scale, unit)}"
                for i, e in (d.get("endpoints") or {}).items()
            )
            parts.append(
                f"{label.split(' (')[0]} ({d.get('metric') or name}): peak {fmt(d.get('peak'), 2, scale, unit)}, "
                f"time-weighted mean {fmt(d.get('mean'), 2, scale, unit)}{per}."
            )
    spec = server_metrics.get("speculative")
    if spec:
        parts.append(
            f"Speculative decoding over the phase (counters): acceptance rate "
            f"{fmt(spec.get('acceptance_rate'), 1, 100, ' %')}, mean acceptance length "
            f"{fmt(spec.get('mean_acceptance_length'), 2)}."
        )
    return " ".join(parts)


def _memory_over_time(run: RunResult):
    mem = run.memory
    if mem is None or mem.empty or "t_s" not in mem:
        return None
    fig = figures.figure(height=320)
    t = pd.to_numeric(mem["t_s"], errors="coerce")
    fig.add_trace(
        figures.trace(
            "scatter",
            x=t,
            y=pd.to_numeric(mem["rss_bytes"], errors="coerce") / 2**20,
            mode="lines",
            name="RSS (MiB)",
            line=dict(color=figures.color(0)),
        )
    )
    gpu = pd.to_numeric(mem["gpu_used_bytes"], errors="coerce") if "gpu_used_bytes" in mem else None
    if gpu is not None and gpu.notna().any():  # runs from before gpu.parquet
        fig.add_trace(
            figures.trace(
                "scatter", x=t, y=gpu / 2**20, mode="lines", name="GPU used (MiB)", line=dict(color=figures.color(2))
            )
        )
    for i, (name, gt, values) in enumerate(gpu_memory_series(run.gpu)):
        fig.add_trace(
            figures.trace(
                "scatter",
                x=gt,
                y=values / 2**20,
                mode="lines",
                name=f"{name} (MiB)",
                line=dict(color=figures.color(2 + i)),
            )
        )
    fig.add_vline(x=0, line=dict(color="#52606d", dash="dash", width=1), annotation_text="measured phase")
    fig.update_xaxes(title_text="time since the measured phase began (s); negative: loading and warm-up")
    fig.update_yaxes(title_text="MiB", rangemode="tozero")
    return (
        "memory",
        "Memory over time",
        fig,
        "Resident memory of the harness process and its children; where NVML sampled the GPUs, their memory used "
        "(Σ over the visible GPUs) and the part held by the engine's processes.",
    )


def gpu_memory_series(gpu: Optional[pd.DataFrame]) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(name, t, bytes) of GPU memory over time, Σ over devices: all used, and the engine's processes'."""
    if gpu is None or gpu.empty:
        return []
    out = []
    for key, name in (("used_bytes", "GPU used"), ("process_used_bytes", "GPU used by the engine")):
        rows = gpu[["t_s", key]].dropna()
        if not rows.empty:
            total = rows.groupby("t_s")[key].sum()
            out.append((name, total.index.to_numpy(float), total.to_numpy(float)))
    return out


def _gpu_over_time(run: RunResult):
    """Utilisation and power of each visible GPU over the run."""
    gpu = run.gpu
    if gpu is None or gpu.empty or not gpu[["util_pct", "power_w"]].notna().any().any():
        return None
    fig = figures.figure(
        2, 1, ["GPU utilisation (%)", "GPU power (W)"], height=520, shared_xaxes=True, vertical_spacing=0.12
    )
    names = {d.get("index"): d.get("name") for d in (run.summary.gpu or {}).get("devices") or []}
    for i, (device, rows) in enumerate(gpu.sort_values("t_s").groupby("device")):
        label = esc(f"GPU {int(device)}" + (f" ({names[device]})" if names.get(device) else ""))
        drawn = False
        for row, key, unit in ((1, "util_pct", "%"), (2, "power_w", "W")):
            values = pd.to_numeric(rows[key], errors="coerce")
            if values.notna().any():
                fig.add_trace(
                    figures.trace(
                        "scatter",
                        x=rows["t_s"],
                        y=values,
                        mode="lines",
                        name=label,
                        legendgroup=f"gpu{i}",
                        showlegend=not drawn,
                        line=dict(color=figures.color(i)),
                        hovertemplate=f"{label}: %{{y:.1f}} {unit} at t=%{{x:.2f}} s<extra></extra>",
                    ),
                    row,
                    1,
                )
                drawn = True
    for row in (1, 2):
        fig.add_vline(x=0, line=dict(color="#52606d", dash="dash", width=1), row=row, col=1)
    fig.update_yaxes(rangemode="tozero")
    fig.update_xaxes(title_text="time since the measured phase began (s); negative: loading and warm-up", row=2, col=1)
    section = run.summary.gpu or {}
    source = {
        "nvml_energy_counter": "from NVML's energy counter",
        "sampled_power": "from the sampled power",
        "mixed": "from NVML's energy counter where a GPU has one, else from its sampled power",
    }.get(section.get("energy_source") or "", "")
    note = (
        f"NVML's samples of each visible GPU, every {fmt(section.get('sample_interval_s'), 2)} s. Energy over the "
        f"measured phase: {fmt(section.get('energy_j'), 1, unit=' J')} {source}. "
        + " ".join(section.get("notes") or [])
    )
    return ("gpu", "GPU utilisation and power", fig, note)


def _chat_figures(run: RunResult):
    ok = run.completed
    if ok.empty or pd.to_numeric(ok["turn"], errors="coerce").max() < 1:
        return None
    ok = ok[pd.to_numeric(ok["ttft_s"], errors="coerce").notna()]
    fig = figures.figure(1, 2, ["TTFT by turn (ms)", "TTFT against context length (ms)"], height=360)
    turns = sorted(int(t) for t in ok["turn"].unique())
    for i, turn in enumerate(turns):
        rows = ok[ok["turn"] == turn]
        ttft_ms = rows["ttft_s"].astype(float) * 1000
        fig.add_trace(
            figures.trace(
                "box",
                x=[turn] * len(rows),
                y=ttft_ms,
                name=f"turn {turn}",
                marker=dict(color=figures.color(i)),
                boxpoints="all",
                jitter=0.3,
                pointpos=0,
                showlegend=False,
            ),
            1,
            1,
        )
        fig.add_trace(
            figures.trace(
                "scatter",
                x=rows["prompt_tokens"],
                y=ttft_ms,
                mode="markers",
                name=f"turn {turn}",
                marker=dict(color=figures.color(i), size=7),
                hovertemplate="%{x} context tokens: TTFT %{y:.1f} ms<extra>turn " + str(turn) + "</extra>",
            ),
            1,
            2,
        )
    med = ok.groupby("turn")["ttft_s"].median() * 1000
    fig.add_trace(
        figures.trace(
            "scatter", x=med.index, y=med.values, mode="lines+markers", name="median", line=dict(color="#1f2933")
        ),
        1,
        1,
    )
    fig.update_xaxes(title_text="turn", dtick=1, row=1, col=1)
    fig.update_xaxes(title_text="context length (prompt tokens)", row=1, col=2)
    return (
        "ttft-turn",
        "Chat: TTFT against turn and context length",
        fig,
        "Each turn re-sends the whole conversation, so the context grows with the turn number.",
    )


# --- requests and details -----------------------------------------------------------------


def _prompts(workload: Optional[dict[str, Any]]) -> dict[tuple[object, object], str]:
    """(session id, turn) → the user's message of that turn (with the system prompt of the session)."""
    out: dict[tuple[object, object], str] = {}
    for s in (workload or {}).get("sessions") or []:
        for t, turn in enumerate(s.get("turns") or []):
            text = turn.get("user") or ""
            if t == 0 and s.get("system"):
                text = f"[system] {s['system']}\n[user] {text}"
            out[(s.get("session_id"), t)] = text
    return out


def _request_rows(df: pd.DataFrame, prompts: dict[tuple[object, object], str]) -> list[dict[str, Any]]:
    rows = []
    for r in df.itertuples():
        rows.append(
            {
                "request": r.request_id,
                "session": r.session_id,
                "turn": r.turn,
                "prompt tok": r.prompt_tokens,
                "output tok": r.output_tokens,
                "TTFT ms": fmt(r.ttft_s, 1, 1000),
                "E2E ms": fmt(r.e2e_s, 1, 1000),
                "finish": "" if r.finish_reason is None else r.finish_reason,
                "error": html.excerpt(r.error, 400),
                "prompt": html.excerpt(prompts.get((r.session_id, r.turn)), 300),
                "output": html.excerpt(r.output_text, 300),
            }
        )
    return rows


def _requests_html(run: RunResult, limit: int = 10) -> str:
    df = run.requests
    if df.empty:
        return html.section("Requests", html.note("No request was recorded."))
    prompts = _prompts(run.workload)
    parts = []
    failed = df[~df.index.isin(run.completed.index)]
    if not failed.empty:
        parts.append(html.note(f"Failed requests ({len(failed)}; the first {min(len(failed), 2 * limit)}):"))
        parts.append(
            html.table(
                _request_rows(failed.head(2 * limit), prompts),
                ["request", "session", "turn", "prompt tok", "error", "prompt"],
                text_columns=["error"],
                excerpt_columns=["prompt"],
            )
        )
    ok = run.completed
    if not ok.empty:
        slow = ok.sort_values("e2e_s", ascending=False).head(limit)
        parts.append(html.note(f"The {len(slow)} slowest completed requests (by E2E):"))
        parts.append(
            html.table(
                _request_rows(slow, prompts),
                [
                    "request",
                    "session",
                    "turn",
                    "prompt tok",
                    "output tok",
                    "TTFT ms",
                    "E2E ms",
                    "finish",
                    "prompt",
                    "output",
                ],
                text_columns=["finish"],
                excerpt_columns=["prompt", "output"],
            )
        )
    return html.section("Requests", "".join(parts))


def _details_html(run: RunResult) -> str:
    parts = []
    if run.config_text:
        parts.append(html.details("config.yaml", run.config_text))
    if run.env:
        parts.append(html.details("env.json", json.dumps(run.env, indent=2)))
    memory = run.summary.memory
    if memory:
        parts.append(html.details("memory (summary.json)", json.dumps(memory, indent=2)))
    if run.summary.gpu:
        parts.append(html.details("GPUs (summary.json)", json.dumps(run.summary.gpu, indent=2)))
    return html.section("Run details", "".join(parts)) if parts else ""


def main(argv: Optional[list[str]] = None) -> int:
    """``python -m harness.report RUN_DIR…``: (re)build report.html in each run folder."""
    parser = argparse.ArgumentParser(
        prog="python -m harness.report",
        description="(Re)build report.html in each run folder, from its summary.json and requests.",
    )
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="run folders")
    args = parser.parse_args(argv)
    for run_dir in args.runs:
        t0 = time.perf_counter()
        try:
            path = write_report(run_dir)
        except (HarnessError, OSError) as exc:  # an OSError names its path
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(f"{path} ({path.stat().st_size / 2**20:.1f} MiB, {time.perf_counter() - t0:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
