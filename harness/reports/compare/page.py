"""compare.html: the runs, their figures, the differences with their CIs, token agreement, and the charts."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from harness.gate.verdicts import INCONCLUSIVE, PASS, REGRESSION
from harness.reports import agreement, figures, html, pareto
from harness.reports.compare import stats
from harness.reports.compare.comparison import Comparison
from harness.reports.compare.differences import gate_passed_text, pct_text
from harness.reports.compare.parts import adapters_rows, endpoints_rows, jobs_rows, stages_rows
from harness.reports.compare.runs import (
    LOAD_KEYS,
    Run,
    column,
    figure_label,
    fit_label,
    label_parts,
    shown,
    sourced_figures,
)
from harness.reports.compare.token_agreement import AGREEMENT_HEADS, AGREEMENT_NOTE, agreement_cells
from harness.reports.describe import backend_text, engine_text, hardware_text, load_text, model_text, run_date
from harness.reports.gate_text import decision_lines
from harness.reports.html import esc, fmt
from harness.reports.run_report import REPORT_NAME, SERVER_PANELS, server_panels
from harness.results import metrics


def _agreement_html(agreements: Sequence[agreement.Agreement]) -> str:
    rows = []
    for a in agreements:
        cells = dict(zip(AGREEMENT_HEADS, agreement_cells(a)))
        cells["baseline text"] = a.first.baseline_text if a.first else ""
        cells["this run's text"] = a.first.text if a.first else ""
        cells["notes"] = "; ".join(a.problems)
        rows.append(cells)
    return html.table(
        rows,
        list(rows[0]),
        text_columns=["run", "dtype", "quantization", "first divergence", "notes"],
        excerpt_columns=["baseline text", "this run's text"],
    )


def build_compare_html(result: Comparison) -> tuple[str, list[str]]:
    """compare.html and the ids of its figures."""
    runs, baseline, table, diffs, comp = result.runs, result.baseline, result.table, result.diffs, result.comparability
    metric, stat, gate, agreements = result.metric, result.stat, result.gate, result.agreements
    charts = [
        f
        for f in (
            _cdf_overlay(runs),
            _latency_vs_throughput(runs),
            _pareto(runs),
            _throughput_bars(runs),
            _server_overlay(runs),
            _per_turn(runs),
            _differences_figure(diffs),
        )
        if f is not None
    ]
    parts = []
    if comp.problems:
        parts.append(
            html.banner(
                comp.problems,
                "WARNING: these runs are not comparable — differences below may not be the engine's",
                "error",
            )
        )
    parts.append(_decisions_banner(result))
    if gate is not None:
        pct, lines = gate
        if lines:
            parts.append(
                html.banner(lines, f"Regression beyond {pct:g}% in {metrics.get(metric).label} {stat}", "error")
            )
        else:
            passed = gate_passed_text(metric, stat, pct)
            parts.append(html.banner([passed[0].upper() + passed[1:] + "."], "Regression gate: no regression", "ok"))
    parts.append(html.banner(comp.notes, "What differs between the runs", "info"))
    parts.append(
        html.section("Runs", _runs_html(runs, table, result.out_dir), "Latencies in ms (from each run's summary.json).")
    )
    stage_rows = stages_rows(runs)
    if stage_rows:
        parts.append(
            html.section(
                "Per stage",
                html.table(stage_rows, list(stage_rows[0]), text_columns=["run"]),
                "The runs with a time-shaped load (workload.stages, workload.ramp, workload.duration_s): "
                "each stage's figures from its summary.json (requests in the stage they started in; "
                "throughputs over the stage's length). Request metrics: p50 / p99.",
            )
        )
    endpoint_rows = endpoints_rows(runs)
    if endpoint_rows:
        parts.append(
            html.section(
                "Per endpoint",
                html.table(endpoint_rows, list(endpoint_rows[0]), text_columns=["run", "url"]),
                "The runs over several endpoints (backend.urls, backend.replicas): each endpoint's "
                "figures from its summary.json (throughputs over the run's duration). Request metrics: p50 / p90.",
            )
        )
    adapter_rows = adapters_rows(runs)
    if adapter_rows:
        parts.append(
            html.section(
                "Per adapter",
                html.table(adapter_rows, list(adapter_rows[0]), text_columns=["run", "adapter"]),
                "The runs with LoRA traffic (workload.lora.adapters): each adapter's figures from its "
                "summary.json (base: requests without an adapter; throughputs over the run's duration). "
                "Request metrics: p50 / p90.",
            )
        )
    job_rows = jobs_rows(runs)
    if job_rows:
        parts.append(
            html.section(
                "Agent jobs",
                html.table(job_rows, list(job_rows[0]), text_columns=list(job_rows[0])),
                "The runs of workload=agentic: job completion time, the critical path and the cached "
                "share per depth of the agent tree, from each run's summary.json.",
            )
        )
    if diffs:
        parts.append(
            html.section(
                "Differences against the baseline",
                _diffs_html(diffs),
                f"Change of the {stat} of per-request values against the baseline ({baseline.label}), with a 95% confidence "
                "interval from the runs: runs resampled, then requests within runs. One run against one run gives a within-run "
                "interval only (no noise between runs in it): it claims no difference unless the noise floor is known "
                "(python -m harness.ab --aa). No significant difference when the interval contains 0.",
            )
        )
    if agreements:
        parts.append(html.section("Token agreement with the baseline", _agreement_html(agreements), AGREEMENT_NOTE))
    plot_ids = []
    for div_id, title, fig, note in charts:
        plot_ids.append(div_id)
        parts.append(html.section(title, figures.figure_div(fig, div_id), note))
    page = html.page(
        "compare.html.j2",
        f"Comparison · {len(runs)} runs",
        runs=len(runs),
        date=datetime.now().strftime("%Y-%m-%d %H:%M:%S"),
        baseline=baseline.label,
        sections=html.safe(parts),
    )
    return page, plot_ids


HTML_FIGURES = (
    ("ttft_s", "p50"),
    ("ttft_s", "p90"),
    ("ttft_s", "p99"),
    ("tpot_s", "p50"),
    ("tpot_s", "p90"),
    ("itl_s", "p50"),
    ("e2e_s", "p50"),
    ("e2e_s", "p90"),
    ("output_tokens_per_s", None),
    ("requests_per_s", None),
    ("goodput_requests_per_s", None),
)


def _runs_html(runs: Sequence[Run], table: pd.DataFrame, out_dir: Path) -> str:
    """Two tables: the figures of each run, then what each run was (setup, hardware, date)."""
    rows, setups = [], []
    shown_figures = [*HTML_FIGURES, *sourced_figures(table)]
    for run, row in zip(runs, table.to_dict("records")):
        report = run.path / REPORT_NAME
        href: str | tuple[str, str] = ""  # a link: (its target, its text)
        if report.exists():
            rel = os.path.relpath(report.resolve(), out_dir.resolve())
            href = (rel if rel.startswith((".", "/")) else "./" + rel, "report")
        rows.append(
            {
                "run": row["run"],
                "status": row["status"],
                "ok": row["ok"],
                "failed": row["failed"],
                **{figure_label(m, s): fmt(row[column(m, s)], metrics.get(m).digits) for m, s in shown_figures},
                "report": href,
            }
        )
        setups.append(
            {
                "run": row["run"],
                "backend": row["backend"],
                "engine": row["engine"],
                "model": row["model"],
                "workload": f"{row['workload']} · {load_text(run.summary)}",
                "hardware": hardware_text(run.data.env),
                "date": run_date(run.path),
                "folder": str(run.path),
            }
        )
    return (
        html.table(rows, list(rows[0]), text_columns=["run", "status"], link_columns=["report"])
        + html.note("What each run was:")
        + html.table(setups, list(setups[0]), text_columns=list(setups[0]))
    )


def _verdict_class(v: str) -> str:
    if v.startswith(stats.NOT_FASTER):  # faster with invalid replies: shown as the loss it is
        return "slower"
    return {
        stats.FASTER: "faster",
        stats.SLOWER: "slower",
        stats.NO_DIFFERENCE: "nodiff",
        stats.WITHIN_RUN_ONLY: "nodiff",
    }.get(v, "nodata")


def _decisions_banner(result: Comparison) -> str:
    """An A/B experiment's decisions, when the comparison shows one."""
    if not result.decisions:
        return ""
    found = {d.verdict for d in result.decisions}
    kind = "error" if REGRESSION in found else ("ok" if found == {PASS} else "warning")
    overall = REGRESSION if REGRESSION in found else (PASS if found == {PASS} else INCONCLUSIVE)
    return html.banner(decision_lines(result.decisions), f"Gate: {overall.upper()}", kind)


def _diffs_html(diffs: Sequence[dict[str, Any]]) -> str:
    rows = [
        {
            "run": r["run"],
            "metric": f"{r['label']} {r['stat']}",
            "baseline": fmt(r["baseline_value"], 2, unit=f" {r['unit']}"),
            "this run": fmt(r["value"], 2, unit=f" {r['unit']}"),
            "change": pct_text(r["change_pct"]),
            "95% CI": f"[{pct_text(r['ci_low_pct'])}, {pct_text(r['ci_high_pct'])}]"
            if r["ci_low_pct"] is not None
            else "–",
            "runs": f"{r['baseline_runs']} / {r['runs']}",
            "requests": f"{r['n_baseline']} / {r['n']}",
            "verdict": r["verdict"],
        }
        for r in diffs
    ]
    return html.table(rows, list(rows[0]), text_columns=["run", "metric"], classes={"verdict": _verdict_class})


def _cdf_overlay(runs: Sequence[Run]):
    fig = figures.latency_cdfs([(esc(run.label), run.data.values) for run in runs])
    if fig is None:
        return None
    return (
        "cdf",
        "Latency distributions (CDFs overlaid)",
        fig,
        "Fraction of completed requests at or below each latency, one line per run.",
    )


def setup_key(run: Run) -> str:
    """What a sweep keeps fixed: backend, engine, model and the prompts (their sha256 without arrivals)."""
    s = run.summary
    shape = run.prompts_sha256 or s.workload.get("sha256")
    return json.dumps([backend_text(s), engine_text(s), model_text(s), shape], sort_keys=True)


def _load_order(run: Run) -> tuple[float, float]:
    wl = run.summary.workload
    rate = wl.get("rate")
    return (float(rate) if wl.get("open_loop") and rate is not None else -1.0, float(wl.get("concurrency") or 0))


def _point_label(run: Run) -> str:
    wl = run.summary.workload
    return f"r={wl.get('rate')}/s" if wl.get("open_loop") else f"c={wl.get('concurrency')}"


def _latency_vs_throughput(runs: Sequence[Run]):
    """y: TTFT p50 and TPOT p50; x: output tokens/s; one line per setup, points sorted by load."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        if run.summary.stat("output_tokens_per_s") is not None and run.summary.stat("ttft_s", "p50") is not None:
            groups.setdefault(setup_key(run), []).append(run)
    if not groups:
        return None
    fig = figures.figure(
        1, 2, ["TTFT p50 (ms) against output tokens/s", "TPOT p50 (ms) against output tokens/s"], height=400
    )
    names = setup_names([g[0] for g in groups.values()])
    for i, members in enumerate(groups.values()):
        members = sorted(members, key=_load_order)
        name = names[i]
        x = [m.summary.stat("output_tokens_per_s") for m in members]
        texts = [esc(_point_label(m)) for m in members]
        for j, metric in enumerate(("ttft_s", "tpot_s"), start=1):
            y = [shown(m.summary, metric, "p50") for m in members]
            fig.add_trace(
                figures.trace(
                    "scatter",
                    x=x,
                    y=y,
                    mode="lines+markers+text",
                    text=texts,
                    textposition="top center",
                    name=esc(name),
                    legendgroup=f"g{i}",
                    showlegend=j == 1,
                    line=dict(color=figures.color(i)),
                    marker=dict(size=9),
                    hovertext=[esc(f"{m.label} · {_point_label(m)}") for m in members],
                    hovertemplate="%{hovertext}<br>%{x:.1f} tok/s, %{y:.1f} ms<extra></extra>",
                ),
                1,
                j,
            )
    for j, metric in enumerate(("ttft_s", "tpot_s"), start=1):
        fig.update_xaxes(title_text="output tokens/s (whole run)", row=1, col=j)
        ys = [v for g in groups.values() for v in (shown(m.summary, metric, "p50") for m in g) if v and v > 0]
        if ys and max(ys) / min(ys) > 100:  # points spread over decades: a log axis keeps them apart
            fig.update_yaxes(type="log", row=1, col=j)
    return (
        "latency-throughput",
        "Latency against throughput",
        fig,
        "One point per run; runs of the same setup that differ only in concurrency or rate are joined, in order of load (c: concurrency, r: rate).",
    )


def _pareto(runs: Sequence[Run]):
    """Per-user speed against the instance's throughput, a point per run and the front (harness/reports/pareto.py)."""
    points = [pareto.Point.of(run.summary, run.label, [load_text(run.summary), run.path.name]) for run in runs]
    fig = pareto.pareto_figure(points)
    if fig is None:
        return None
    return (
        "pareto",
        "Capacity: per user against per instance (Pareto front)",
        fig,
        "One point per run: the median of its requests' output tokens/s (what a user sees) against the run's "
        "output tokens/s (what the instance serves). Orange: on the front, no other run is faster on both; the line "
        "is the front's edge. With a machine price (cost.usd_per_hour), $ per million output tokens against per user.",
    )


def setup_names(firsts: Sequence[Run]) -> list[str]:
    """Each setup named like a run's label less its index and load: the backend and the settings that differ."""
    return [fit_label(parts) for parts in label_parts(firsts, leave_out=LOAD_KEYS)]


def _throughput_bars(runs: Sequence[Run]):
    labels = [esc(r.label) for r in runs]
    out_tps = [r.summary.stat("output_tokens_per_s") for r in runs]
    req_s = [r.summary.stat("requests_per_s") for r in runs]
    if not any(html.is_num(v) and v for v in out_tps):
        return None
    fig = figures.figure(1, 2, ["output tokens/s", "requests/s"], height=max(300, 120 + 36 * len(runs)))
    colors = [figures.color(i) for i in range(len(runs))]
    fig.add_trace(
        figures.trace(
            "bar",
            y=labels,
            x=out_tps,
            orientation="h",
            marker=dict(color=colors),
            showlegend=False,
            hovertemplate="%{y}: %{x:.1f} tok/s<extra></extra>",
        ),
        1,
        1,
    )
    fig.add_trace(
        figures.trace(
            "bar",
            y=labels,
            x=req_s,
            orientation="h",
            marker=dict(color=colors),
            showlegend=False,
            hovertemplate="%{y}: %{x:.3f} req/s<extra></extra>",
        ),
        1,
        2,
    )
    fig.update_yaxes(autorange="reversed")
    fig.update_yaxes(showticklabels=False, row=1, col=2)
    return (
        "throughput",
        "Throughput",
        fig,
        "Whole-run throughput: completed requests and their output tokens over the measured time.",
    )


def _server_overlay(runs: Sequence[Run]):
    """Each run's server state over its measured phase (server_metrics.parquet), one line per run."""
    drawn = [
        (i, run, {name: (scale, rows) for name, _, scale, rows in server_panels(run.data.server_series)})
        for i, run in enumerate(runs)
    ]
    drawn = [d for d in drawn if d[2]]
    if not drawn:
        return None
    panels = [(name, title) for name, title, _ in SERVER_PANELS if any(name in d[2] for d in drawn)]
    fig = figures.figure(len(panels), 1, [t for _, t in panels], height=170 * len(panels) + 110, shared_xaxes=True)
    for i, run, series in drawn:
        legend = True
        for row, (name, _) in enumerate(panels, start=1):
            if name not in series:
                continue
            scale, rows = series[name]
            fig.add_trace(
                figures.trace(
                    "scatter",
                    x=rows["t_s"].to_numpy(float),
                    y=rows["value"].to_numpy(float) * scale,
                    mode="lines",
                    line=dict(color=figures.color(i)),
                    name=esc(run.label),
                    legendgroup=f"run{i}",
                    showlegend=legend,
                    hovertemplate=f"{esc(run.label)}: %{{y:.3g}} at t=%{{x:.2f}} s<extra></extra>",
                ),
                row,
                1,
            )
            legend = False
        fig.update_yaxes(rangemode="tozero")
    fig.update_xaxes(title_text="time since the measured phase began (s)", row=len(panels), col=1)
    with_series = {id(d[1]) for d in drawn}
    missing = [r.label for r in runs if id(r) not in with_series]
    note = "The server's own /metrics, sampled during each run's measured phase, one line per run." + (
        f" No server series: {', '.join(missing)}." if missing else ""
    )
    return ("server-time", "Server state over time", fig, note)


def _per_turn(runs: Sequence[Run]):
    chat = [(i, r) for i, r in enumerate(runs) if len(r.summary.per_turn) > 1]
    if not chat:
        return None
    fig = figures.figure(1, 2, ["TTFT p50 by turn (ms)", "TTFT p50 against context length (ms)"], height=380)
    for i, run in chat:
        turns = run.summary.per_turn
        y = [v * 1000 if html.is_num(v := t.get("ttft_p50_s")) else None for t in turns]
        for j, x in enumerate(([t.get("turn") for t in turns], [t.get("prompt_tokens_mean") for t in turns]), start=1):
            fig.add_trace(
                figures.trace(
                    "scatter",
                    x=x,
                    y=y,
                    mode="lines+markers",
                    name=esc(run.label),
                    legendgroup=f"run{i}",
                    showlegend=j == 1,
                    line=dict(color=figures.color(i)),
                ),
                1,
                j,
            )
    fig.update_xaxes(title_text="turn", dtick=1, row=1, col=1)
    fig.update_xaxes(title_text="mean context length (prompt tokens)", row=1, col=2)
    return ("per-turn", "Chat: TTFT per turn", fig, "Median TTFT of each turn; later turns re-send a longer history.")


def _differences_figure(diffs: Sequence[dict[str, Any]]):
    usable = [r for r in diffs if r["change_pct"] is not None and r["ci_low_pct"] is not None]
    if not usable:
        return None
    keys = list(dict.fromkeys(r["metric"] for r in usable))
    fig = figures.figure(
        1,
        len(keys),
        [f"{metrics.get(m).label} change (%)" for m in keys],
        height=max(300, 130 + 40 * len({r["run"] for r in usable})),
        shared_yaxes=True,
    )
    verdict_colors = {
        stats.FASTER: "#59a14f",
        stats.SLOWER: "#e15759",
        stats.NO_DIFFERENCE: "#7b8794",
        stats.WITHIN_RUN_ONLY: "#b0b8c4",
    }
    for j, metric in enumerate(keys, start=1):
        rows = [r for r in usable if r["metric"] == metric]
        for verdict, colr in verdict_colors.items():
            sel = [r for r in rows if r["verdict"] == verdict]
            if not sel:
                continue
            fig.add_trace(
                figures.trace(
                    "scatter",
                    x=[r["change_pct"] for r in sel],
                    y=[esc(r["run"]) for r in sel],
                    mode="markers",
                    name=verdict,
                    legendgroup=verdict,
                    showlegend=not any(t.get("legendgroup") == verdict for t in fig.data),
                    marker=dict(color=colr, size=10),
                    error_x=dict(
                        type="data",
                        symmetric=False,
                        array=[r["ci_high_pct"] - r["change_pct"] for r in sel],
                        arrayminus=[r["change_pct"] - r["ci_low_pct"] for r in sel],
                        color=colr,
                        thickness=2,
                    ),
                    hovertemplate="%{y}<br>%{x:+.1f}%<extra>" + esc(metrics.get(metric).label) + "</extra>",
                ),
                1,
                j,
            )
        fig.add_vline(x=0, line=dict(color="#1f2933", width=1), row=1, col=j)
    fig.update_yaxes(autorange="reversed", type="category")
    return (
        "differences",
        "Differences against the baseline (95% CI)",
        fig,
        "Relative change of each run against the baseline; bars: bootstrap 95% confidence interval. Green: faster, red: slower, grey: no significant difference; light grey: within-run only (one run each: no claim).",
    )
