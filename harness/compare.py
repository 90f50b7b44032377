"""``python -m harness.compare RUN… --out DIR``: compare run folders, side by side and with statistics.

Writes into ``--out`` (default ``results/compare-<date>-<time>``):

- ``compare.csv`` — one row per run: what ran, key percentiles (ms) and throughputs; the
  same table is printed;
- ``differences.csv`` — each run against the baseline (``--baseline``, default the first run):
  for TTFT, TPOT, E2E and per-request output tokens/s, the change of a statistic (median by
  default) with a bootstrap 95 % confidence interval and a verdict: faster, slower or no
  significant difference (harness/stats.py has the formula);
- ``compare.html`` — self-contained charts: the CDFs overlaid, latency against throughput
  (one line per setup across the runs that differ only in concurrency or rate: the curve of a
  sweep), per-turn TTFT for chat runs, throughputs, and the differences with their CIs.

Runs are comparable when they ran the same model, the same workload (sha256 of its
prompts; a different arrival schedule alone is only noted) on the same hardware (CPU model
and GPUs). Otherwise the comparison warns loudly (WARNING lines and a banner), or with
``--strict`` refuses (exit 2). Backend and engine differences are listed: they are usually
the point. ``--fail-on-regression PCT`` exits 1 when ``--metric`` got worse than the baseline
by more than PCT % and the CI excludes no change.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Optional, Sequence

import pandas as pd

from harness import metric_registry as registry
from harness import plots, stats
from harness.plots import esc, fmt
from harness.report import REPORT_NAME, backend_text, engine_text, hardware_text, load_text, model_text, run_date
from harness.results import WORKLOAD, RunResult, RunSummary, read_json, is_run_dir, load_run

# request metrics compared with bootstrap CIs; the gate may use any request metric not pooled
DIFF_METRICS = tuple(k for k, m in registry.REQUEST_METRICS.items() if m.in_compare)
GATE_METRICS = tuple(k for k, m in registry.REQUEST_METRICS.items() if not m.pooled)
TABLE_STATS = ("p50", "p90", "p99")  # of each request metric shown in the console, in compare.csv
LOAD_KEYS = ("concurrency", "rate")  # what a sweep varies; the rest of the workload is its shape
EXIT_REGRESSION = 1
EXIT_REFUSED = 2


class CompareError(Exception):
    """Bad input: printed as one ``error:`` line, exit 2."""


@dataclass
class Run:
    """A run folder loaded for comparison, with a short label unique among the runs compared."""

    data: RunResult
    prompts_sha256: Optional[str]
    label: str = ""

    @property
    def summary(self) -> RunSummary:
        return self.data.summary

    @property
    def path(self) -> Path:
        return self.data.run_dir


@dataclass
class Comparability:
    """``problems`` make the numbers incomparable; ``notes`` are differences worth knowing."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# --- finding and loading runs -------------------------------------------------------------


def expand_runs(args: Sequence[str]) -> list[Path]:
    """Run folders from paths and globs; a sweep folder (sweep.json, or folders of runs, repeats
    included) gives its runs."""
    out: list[Path] = []
    for arg in args:
        matches = sorted(glob.glob(arg)) if any(ch in arg for ch in "*?[") else [arg]
        if not matches:
            raise CompareError(f"no run folder matches {arg}")
        for match in matches:
            path = Path(match)
            if is_run_dir(path):
                out.append(path)
            elif path.is_dir() and (found := _runs_below(path)):
                out.extend(found)
            elif any(ch in arg for ch in "*?[") and path.is_file():
                continue
            else:
                raise CompareError(f"not a run folder (no summary.json): {path}")
    seen, unique = set(), []
    for p in out:
        key = p.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(p)
    return unique


def _runs_below(folder: Path) -> list[Path]:
    """The runs of a sweep folder: its sweep.json's points in order, else run folders one or two levels down."""
    sweep = folder / "sweep.json"
    if sweep.is_file():
        from harness.sweep import point_run_dirs

        try:
            return point_run_dirs(json.loads(sweep.read_text()))
        except ValueError:
            pass
    return [p.parent for p in sorted(folder.glob("*/summary.json")) + sorted(folder.glob("*/*/summary.json"))]


def prompts_sha256(run: RunResult) -> Optional[str]:
    """The summary's sha256 of the prompts without arrival times; older runs: from workload.json."""
    sha = run.summary.workload.get("prompts_sha256")
    if sha:
        return sha
    workload = read_json(run.run_dir / WORKLOAD)
    if not workload or "sessions" not in workload:
        return None
    from workloads.base import WorkloadPlan

    return WorkloadPlan.prompts_hash(workload)


def load_runs(paths: Sequence[Path]) -> list[Run]:
    runs = [Run(data, prompts_sha256(data)) for data in (load_run(path, with_workload=False) for path in paths)]
    assign_labels(runs)
    return runs


def describe(run: Run) -> dict[str, str]:
    """The settings a run can differ in, as short text (used for labels and the table)."""
    s = run.summary
    b = s.backend
    wl = s.workload
    info = b.get("info") or {}
    out = {
        "backend": str(b.get("name")), "mode": str(b.get("mode")),
        "engine": engine_text(s),
        **{k: f"{k}={v}" for k, v in info.items() if not isinstance(v, (dict, list))},
        "model": str(s.model.get("name")),
        "workload": str(wl.get("name")),
        "concurrency": f"c={wl.get('concurrency')}",
    }
    if wl.get("open_loop"):
        out["rate"] = f"rate={wl.get('rate')}/s"
    if s.repeat:
        out["repeat"] = f"repeat {s.repeat.get('index')}"
    return out


def assign_labels(runs: list[Run]) -> None:
    """Each run's label: the settings that differ between the runs, else its folder name."""
    described = [describe(r) for r in runs]
    keys: list[str] = []
    for d in described:
        keys.extend(k for k in d if k not in keys)
    differing = [k for k in keys if len({d.get(k, "") for d in described}) > 1]
    for run, d in zip(runs, described):
        run.label = " · ".join(d[k] for k in differing if d.get(k)) or run.path.name
    counts: dict[str, int] = {}
    for run in runs:
        counts[run.label] = counts.get(run.label, 0) + 1
    for i, run in enumerate(runs):
        if counts[run.label] > 1 or len(run.label) > 80:
            run.label = f"{run.label[:60]} [{i + 1}: {run.path.name}]" if run.label != run.path.name else f"{i + 1}: {run.path.name}"


# --- comparability ------------------------------------------------------------------------


def _hardware(run: Run) -> str:
    env = run.data.env
    if not env:
        return "unknown"
    gpus = ", ".join(str(g.get("name")) for g in env.get("gpus") or []) or "no GPU"
    return f"{(env.get('cpu') or {}).get('model', '?')} · {gpus}"


def _differs(runs: Sequence[Run], value) -> Optional[str]:
    vals = [value(r) for r in runs]
    if len(set(vals)) <= 1:
        return None
    return "; ".join(f"{r.label}: {v}" for r, v in zip(runs, vals))


def check_comparable(runs: Sequence[Run]) -> Comparability:
    """Same model, workload and hardware → comparable; backend/engine/load differences are notes."""
    result = Comparability()
    model = _differs(runs, lambda r: f"{r.summary.model.get('name')} ({r.summary.model.get('source')})")
    if model:
        result.problems.append(f"different model: {model}")
    sha = _differs(runs, lambda r: (r.summary.workload.get("sha256") or "?")[:12])
    if sha:
        prompts = [r.prompts_sha256 for r in runs]
        if None not in prompts and len(set(prompts)) == 1:
            result.notes.append(f"same prompts, different arrival schedule (workload sha256 {sha})")
        else:
            result.problems.append(f"different workload (sha256): {sha}")
    hardware = _differs(runs, _hardware)
    if hardware:
        result.problems.append(f"different hardware: {hardware}")
    described = [describe(r) for r in runs]
    keys = list(dict.fromkeys(k for d in described for k in d if k not in ("model", "workload", "repeat")))
    for key in keys:
        seen = list(dict.fromkeys(d.get(key, "–") for d in described))
        if len(seen) > 1:
            result.notes.append(f"{key} differs: {' | '.join(seen)}")
    bad = [r.label for r in runs if r.summary.status != "complete"]
    if bad:
        result.notes.append(f"not complete (interrupted or failed): {', '.join(bad)}")
    return result


# --- tables -------------------------------------------------------------------------------


def column(metric: str, stat: Optional[str]) -> str:
    """compare.csv's column for a figure, in the metric's display unit: ``ttft_p50_ms``, ``output_tokens_per_s``."""
    m = registry.get(metric)
    if stat is None:
        return metric if m.unit != "%" else f"{metric}_pct"
    return f"{metric.removesuffix('_s')}_{stat}_{m.unit.replace('/', '_per_')}"


def table_figures() -> list[tuple[str, Optional[str]]]:
    """The (metric, statistic) pairs of the table: each console request metric's p50/p90/p99, then every run metric."""
    figures: list[tuple[str, Optional[str]]] = [
        (key, stat) for key, m in registry.REQUEST_METRICS.items() if m.in_console for stat in TABLE_STATS
    ]
    return figures + [(key, None) for key in registry.RUN_METRICS]


def shown(summary: RunSummary, metric: str, stat: Optional[str]) -> Optional[float]:
    """A figure of the summary in its display unit."""
    return registry.get(metric).show(summary.stat(metric, stat or ""))


def runs_table(runs: Sequence[Run]) -> pd.DataFrame:
    """One row per run: what ran, then every figure of :func:`table_figures` (from summary.json)."""
    rows = []
    for run in runs:
        s = run.summary
        wl = s.workload
        row = {
            "run": run.label,
            "backend": backend_text(s), "engine": engine_text(s), "model": model_text(s),
            "workload": wl.get("name"), "concurrency": wl.get("concurrency"),
            "rate": wl.get("rate") if wl.get("open_loop") else None,
            "status": s.status, "ok": s.requests.get("completed"), "failed": s.requests.get("failed"),
        }
        for metric, stat in table_figures():
            row[column(metric, stat)] = shown(s, metric, stat)
        row["folder"] = str(run.path)
        rows.append(row)
    table = pd.DataFrame(rows)
    # a figure with a source (GPU) that no run has is left out, not shown as empty
    absent = [column(k, None) for k, m in registry.RUN_METRICS.items() if m.source and table[column(k, None)].isna().all()]
    return table.drop(columns=absent)


def sourced_figures(table: pd.DataFrame) -> list[tuple[str, Optional[str]]]:
    """The run metrics with a source (GPU) that some run of the table has."""
    return [(k, None) for k, m in registry.RUN_METRICS.items() if m.source and column(k, None) in table.columns]


PRINT_FIGURES = (("ttft_s", "p50"), ("ttft_s", "p90"), ("tpot_s", "p50"), ("itl_s", "p50"), ("e2e_s", "p50"),
                 ("e2e_s", "p90"), ("output_tokens_per_s", None), ("requests_per_s", None))


def _figure_label(metric: str, stat: Optional[str]) -> str:
    m = registry.get(metric)
    if stat:
        return f"{m.label} {stat}"
    return f"{m.label} ({m.unit})" if getattr(m, "source", None) else m.label


def format_runs_table(table: pd.DataFrame) -> str:
    figures = [*PRINT_FIGURES, *sourced_figures(table)]
    columns = {"ok": "ok", "failed": "failed", **{column(m, s): _figure_label(m, s) for m, s in figures}}
    view = table.set_index("run")[list(columns)].rename(columns=columns)
    view.index.name = "run (latencies in ms)"
    return view.to_string(float_format=lambda v: f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}", na_rep="-")


def differences(runs: Sequence[Run], baseline: Run, metrics: Sequence[str], stat: str,
                resamples: int = stats.DEFAULT_RESAMPLES, seed: int = 0) -> list[dict[str, Any]]:
    """Every other run against the baseline, per metric: change, bootstrap 95 % CI, verdict."""
    rows = []
    base_values = {m: baseline.data.values(m) for m in metrics}
    for run in runs:
        if run is baseline:
            continue
        for metric in metrics:
            m = registry.REQUEST_METRICS[metric]
            label, lower_better, scale, unit = m.label, m.lower_is_better, m.scale, m.unit
            d = stats.bootstrap_difference(base_values[metric], run.data.values(metric), stat, resamples, seed=seed)
            rows.append({
                "run": run.label, "baseline": baseline.label, "metric": metric, "label": label, "stat": stat, "unit": unit,
                "baseline_value": _scaled(d.baseline, scale), "value": _scaled(d.candidate, scale),
                "diff": _scaled(d.diff, scale), "ci_low": _scaled(d.ci_low, scale), "ci_high": _scaled(d.ci_high, scale),
                "change_pct": _pct(d.rel), "ci_low_pct": _pct(d.rel_ci_low), "ci_high_pct": _pct(d.rel_ci_high),
                "verdict": stats.verdict(d, lower_better),
                "n_baseline": d.n_baseline, "n": d.n_candidate, "lower_is_better": lower_better,
                "_difference": d,
            })
    return rows


def _scaled(v: Optional[float], scale: float) -> Optional[float]:
    return None if v is None else v * scale


def _pct(v: Optional[float]) -> Optional[float]:
    return None if v is None else v * 100


def differences_frame(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame([{k: v for k, v in r.items() if not k.startswith("_")} for r in rows])


def format_differences(rows: Sequence[dict[str, Any]]) -> str:
    if not rows:
        return ""
    lines = []
    for r in rows:
        lines.append({
            "run": r["run"], "metric": f"{r['label']} {r['stat']} ({r['unit']})",
            "baseline": fmt(r["baseline_value"], 2), "this run": fmt(r["value"], 2),
            "change": _pct_text(r["change_pct"]),
            "95% CI": f"[{_pct_text(r['ci_low_pct'])}, {_pct_text(r['ci_high_pct'])}]" if r["ci_low_pct"] is not None else "-",
            "verdict": r["verdict"],
        })
    return pd.DataFrame(lines).set_index("run").to_string()


def _pct_text(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:+.1f}%"


def regressions(rows: Sequence[dict[str, Any]], metric: str, pct: float) -> list[str]:
    """Lines for the runs whose ``metric`` is worse than the baseline by > pct % beyond noise."""
    out = []
    for r in rows:
        if r["metric"] == metric and stats.is_regression(r["_difference"], pct, r["lower_is_better"]):
            out.append(
                f"REGRESSION: {r['run']}: {r['label']} {r['stat']} {fmt(r['value'], 2)} {r['unit']} vs "
                f"{fmt(r['baseline_value'], 2)} (baseline {r['baseline']}): {_pct_text(r['change_pct'])}, "
                f"95% CI [{_pct_text(r['ci_low_pct'])}, {_pct_text(r['ci_high_pct'])}], worse than the {pct:g}% allowed"
            )
    return out


# --- the page -----------------------------------------------------------------------------


def build_compare_html(runs: Sequence[Run], baseline: Run, table: pd.DataFrame, diffs: Sequence[dict[str, Any]],
                       comp: Comparability, out_dir: Path, metric: str, stat: str,
                       gate: Optional[tuple[float, list[str]]] = None) -> tuple[str, list[str]]:
    """compare.html and the ids of its plots."""
    figures = [f for f in (_cdf_overlay(runs), _latency_vs_throughput(runs), _throughput_bars(runs),
                           _per_turn(runs), _differences_figure(diffs)) if f is not None]
    parts = [
        f"<h1>Comparison of {len(runs)} runs</h1>",
        f'<p class="sub">LLM inference benchmark comparison · {esc(datetime.now().strftime("%Y-%m-%d %H:%M:%S"))} · '
        f"baseline: {esc(baseline.label)}</p>",
    ]
    if comp.problems:
        parts.append(plots.banner(comp.problems, "WARNING: these runs are not comparable — differences below may not be the engine's", "error"))
    if gate is not None:
        pct, lines = gate
        if lines:
            parts.append(plots.banner(lines, f"Regression beyond {pct:g}% in {registry.get(metric).label} {stat}", "error"))
        else:
            parts.append(plots.banner([f"No run is worse than the baseline by more than {pct:g}% in {registry.get(metric).label} {stat} beyond noise."],
                                      "Regression gate passed", "ok"))
    parts.append(plots.banner(comp.notes, "What differs between the runs", "info"))
    parts.append(plots.section("Runs", _runs_html(runs, table, out_dir), "Latencies in ms (from each run's summary.json)."))
    if diffs:
        parts.append(plots.section(
            "Differences against the baseline", _diffs_html(diffs),
            f"Change of the {stat} of per-request values against the baseline ({baseline.label}), with a bootstrap 95% confidence "
            "interval (requests resampled with replacement). No significant difference when the interval contains 0.",
        ))
    plot_ids = []
    for div_id, title, fig, note in figures:
        plot_ids.append(div_id)
        parts.append(plots.section(title, plots.figure_div(fig, div_id), note))
    return plots.page(f"Comparison · {len(runs)} runs", "\n".join(p for p in parts if p)), plot_ids


HTML_FIGURES = (("ttft_s", "p50"), ("ttft_s", "p90"), ("ttft_s", "p99"), ("tpot_s", "p50"), ("tpot_s", "p90"),
                ("itl_s", "p50"), ("e2e_s", "p50"), ("e2e_s", "p90"), ("output_tokens_per_s", None),
                ("requests_per_s", None), ("goodput_requests_per_s", None))


def _runs_html(runs: Sequence[Run], table: pd.DataFrame, out_dir: Path) -> str:
    """Two tables: the figures of each run, then what each run was (setup, hardware, date)."""
    figures, setups = [], []
    shown_figures = [*HTML_FIGURES, *sourced_figures(table)]
    for run, row in zip(runs, table.to_dict("records")):
        report = run.path / REPORT_NAME
        href = ""
        if report.exists():
            rel = os.path.relpath(report.resolve(), out_dir.resolve())
            href = (rel if rel.startswith((".", "/")) else "./" + rel, "report")
        figures.append({
            "run": row["run"], "status": row["status"], "ok": row["ok"], "failed": row["failed"],
            **{_figure_label(m, s): fmt(row[column(m, s)], registry.get(m).digits) for m, s in shown_figures},
            "report": href,
        })
        setups.append({
            "run": row["run"], "backend": row["backend"], "engine": row["engine"], "model": row["model"],
            "workload": f"{row['workload']} · {load_text(run.summary)}",
            "hardware": hardware_text(run.data.env), "date": run_date(run.path), "folder": str(run.path),
        })
    return (
        plots.table(figures, list(figures[0]), text_columns=["run", "status"], link_columns=["report"])
        + '<p class="note">What each run was:</p>'
        + plots.table(setups, list(setups[0]), text_columns=list(setups[0]))
    )


def _verdict_class(v: str) -> str:
    return {stats.FASTER: "faster", stats.SLOWER: "slower", stats.NO_DIFFERENCE: "nodiff"}.get(v, "nodata")


def _diffs_html(diffs: Sequence[dict[str, Any]]) -> str:
    rows = [{
        "run": r["run"], "metric": f"{r['label']} {r['stat']}", "baseline": fmt(r["baseline_value"], 2, unit=f" {r['unit']}"),
        "this run": fmt(r["value"], 2, unit=f" {r['unit']}"), "change": _pct_text(r["change_pct"]),
        "95% CI": f"[{_pct_text(r['ci_low_pct'])}, {_pct_text(r['ci_high_pct'])}]" if r["ci_low_pct"] is not None else "–",
        "requests": f"{r['n_baseline']} / {r['n']}", "verdict": r["verdict"],
    } for r in diffs]
    return plots.table(rows, list(rows[0]), text_columns=["run", "metric"], classes={"verdict": _verdict_class})


def _cdf_overlay(runs: Sequence[Run]):
    import plotly.graph_objects as go

    panels = [("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E")]
    fig = plots.figure(1, 3, [f"{label} (ms)" for _, label in panels], height=380)
    drawn = False
    for i, run in enumerate(runs):
        for j, (key, label) in enumerate(panels, start=1):
            x, y = plots.cdf_points(run.data.values(key) * 1000)
            if x.size == 0:
                continue
            drawn = True
            fig.add_trace(go.Scatter(x=x, y=y, mode="lines", line=dict(color=plots.color(i), shape="hv"), name=esc(run.label),
                                     legendgroup=f"run{i}", showlegend=j == 1,
                                     hovertemplate=f"{esc(run.label)}<br>{label} %{{x:.1f}} ms, fraction ≤ %{{y:.3f}}<extra></extra>"), 1, j)
            fig.update_xaxes(title_text="ms", row=1, col=j)
    if not drawn:
        return None
    fig.update_yaxes(title_text="fraction of requests", range=[0, 1.02], row=1, col=1)
    return ("cdf", "Latency distributions (CDFs overlaid)", fig, "Fraction of completed requests at or below each latency, one line per run.")


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
    import plotly.graph_objects as go

    groups: dict[str, list[Run]] = {}
    for run in runs:
        if run.summary.stat("output_tokens_per_s") is not None and run.summary.stat("ttft_s", "p50") is not None:
            groups.setdefault(setup_key(run), []).append(run)
    if not groups:
        return None
    fig = plots.figure(1, 2, ["TTFT p50 (ms) against output tokens/s", "TPOT p50 (ms) against output tokens/s"], height=400)
    names = setup_names([g[0] for g in groups.values()])
    for i, members in enumerate(groups.values()):
        members = sorted(members, key=_load_order)
        name = names[i]
        x = [m.summary.stat("output_tokens_per_s") for m in members]
        texts = [esc(_point_label(m)) for m in members]
        for j, metric in enumerate(("ttft_s", "tpot_s"), start=1):
            y = [shown(m.summary, metric, "p50") for m in members]
            fig.add_trace(go.Scatter(
                x=x, y=y, mode="lines+markers+text", text=texts, textposition="top center", name=esc(name),
                legendgroup=f"g{i}", showlegend=j == 1, line=dict(color=plots.color(i)), marker=dict(size=9),
                hovertext=[esc(f"{m.label} · {_point_label(m)}") for m in members],
                hovertemplate="%{hovertext}<br>%{x:.1f} tok/s, %{y:.1f} ms<extra></extra>",
            ), 1, j)
    for j, metric in enumerate(("ttft_s", "tpot_s"), start=1):
        fig.update_xaxes(title_text="output tokens/s (whole run)", row=1, col=j)
        ys = [v for g in groups.values() for v in (shown(m.summary, metric, "p50") for m in g) if v and v > 0]
        if ys and max(ys) / min(ys) > 100:  # points spread over decades: a log axis keeps them apart
            fig.update_yaxes(type="log", row=1, col=j)
    return ("latency-throughput", "Latency against throughput", fig,
            "One point per run; runs of the same setup that differ only in concurrency or rate are joined, in order of load (c: concurrency, r: rate).")


def setup_names(firsts: Sequence[Run]) -> list[str]:
    """Each setup named by the settings that differ between setups (load keys left out)."""
    described = [{k: v for k, v in describe(r).items() if k not in LOAD_KEYS} for r in firsts]
    keys = list(dict.fromkeys(k for d in described for k in d))
    differing = [k for k in keys if len({d.get(k, "") for d in described}) > 1]
    return [" · ".join(d[k] for k in differing if d.get(k)) or f"{d['backend']} · {d['model']} · {d['workload']}"
            for d in described]


def _throughput_bars(runs: Sequence[Run]):
    import plotly.graph_objects as go

    labels = [esc(r.label) for r in runs]
    out_tps = [r.summary.stat("output_tokens_per_s") for r in runs]
    req_s = [r.summary.stat("requests_per_s") for r in runs]
    if not any(plots.is_num(v) and v for v in out_tps):
        return None
    fig = plots.figure(1, 2, ["output tokens/s", "requests/s"], height=max(300, 120 + 36 * len(runs)))
    colors = [plots.color(i) for i in range(len(runs))]
    fig.add_trace(go.Bar(y=labels, x=out_tps, orientation="h", marker_color=colors, showlegend=False,
                         hovertemplate="%{y}: %{x:.1f} tok/s<extra></extra>"), 1, 1)
    fig.add_trace(go.Bar(y=labels, x=req_s, orientation="h", marker_color=colors, showlegend=False,
                         hovertemplate="%{y}: %{x:.3f} req/s<extra></extra>"), 1, 2)
    fig.update_yaxes(autorange="reversed")
    fig.update_yaxes(showticklabels=False, row=1, col=2)
    return ("throughput", "Throughput", fig, "Whole-run throughput: completed requests and their output tokens over the measured time.")


def _per_turn(runs: Sequence[Run]):
    import plotly.graph_objects as go

    chat = [(i, r) for i, r in enumerate(runs) if len(r.summary.per_turn) > 1]
    if not chat:
        return None
    fig = plots.figure(1, 2, ["TTFT p50 by turn (ms)", "TTFT p50 against context length (ms)"], height=380)
    for i, run in chat:
        turns = run.summary.per_turn
        y = [t.get("ttft_p50_s") * 1000 if plots.is_num(t.get("ttft_p50_s")) else None for t in turns]
        for j, x in enumerate(([t.get("turn") for t in turns], [t.get("prompt_tokens_mean") for t in turns]), start=1):
            fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=esc(run.label), legendgroup=f"run{i}", showlegend=j == 1,
                                     line=dict(color=plots.color(i))), 1, j)
    fig.update_xaxes(title_text="turn", dtick=1, row=1, col=1)
    fig.update_xaxes(title_text="mean context length (prompt tokens)", row=1, col=2)
    return ("per-turn", "Chat: TTFT per turn", fig, "Median TTFT of each turn; later turns re-send a longer history.")


def _differences_figure(diffs: Sequence[dict[str, Any]]):
    import plotly.graph_objects as go

    usable = [r for r in diffs if r["change_pct"] is not None and r["ci_low_pct"] is not None]
    if not usable:
        return None
    metrics = list(dict.fromkeys(r["metric"] for r in usable))
    fig = plots.figure(1, len(metrics), [f"{registry.get(m).label} change (%)" for m in metrics],
                       height=max(300, 130 + 40 * len({r["run"] for r in usable})), shared_yaxes=True)
    verdict_colors = {stats.FASTER: "#59a14f", stats.SLOWER: "#e15759", stats.NO_DIFFERENCE: "#7b8794"}
    for j, metric in enumerate(metrics, start=1):
        rows = [r for r in usable if r["metric"] == metric]
        for verdict, colr in verdict_colors.items():
            sel = [r for r in rows if r["verdict"] == verdict]
            if not sel:
                continue
            fig.add_trace(go.Scatter(
                x=[r["change_pct"] for r in sel], y=[esc(r["run"]) for r in sel], mode="markers", name=verdict,
                legendgroup=verdict, showlegend=not any(t.legendgroup == verdict for t in fig.data),
                marker=dict(color=colr, size=10),
                error_x=dict(type="data", symmetric=False, array=[r["ci_high_pct"] - r["change_pct"] for r in sel],
                             arrayminus=[r["change_pct"] - r["ci_low_pct"] for r in sel], color=colr, thickness=2),
                hovertemplate="%{y}<br>%{x:+.1f}%<extra>" + esc(registry.get(metric).label) + "</extra>",
            ), 1, j)
        fig.add_vline(x=0, line=dict(color="#1f2933", width=1), row=1, col=j)
    fig.update_yaxes(autorange="reversed", type="category")
    return ("differences", "Differences against the baseline (95% CI)", fig,
            "Relative change of each run against the baseline; bars: bootstrap 95% confidence interval. Green: faster, red: slower, grey: no significant difference.")


# --- the command --------------------------------------------------------------------------


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m harness.compare",
        description="Compare benchmark run folders: a table, compare.html, and bootstrap CIs against a baseline.",
    )
    parser.add_argument("runs", nargs="+", help="run folders, globs (quoted), or folders of runs (a sweep)")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: results/compare-<date>-<time>)")
    parser.add_argument("--baseline", default=None, help="the run the others are compared with (default: the first)")
    parser.add_argument("--metric", default="ttft_s", choices=sorted(GATE_METRICS), help="metric for the regression gate (default: ttft_s)")
    parser.add_argument("--stat", default="median", help="statistic of per-request values: median (default), mean or pNN, e.g. p90")
    parser.add_argument("--fail-on-regression", type=float, default=None, metavar="PCT",
                        help="exit 1 when --metric is worse than the baseline by more than PCT%% and the 95%% CI excludes 0")
    parser.add_argument("--strict", action="store_true", help="refuse (exit 2) when the runs are not comparable")
    parser.add_argument("--resamples", type=int, default=stats.DEFAULT_RESAMPLES, help="bootstrap resamples (default: 2000)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default: 0)")
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    try:
        return run_compare(args)
    except CompareError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_REFUSED


@dataclass
class Comparison:
    """What one comparison produced (its files are in ``out_dir``)."""

    runs: list[Run]
    comparability: Comparability
    table: pd.DataFrame
    diffs: list[dict[str, Any]]
    regression_lines: list[str]
    out_dir: Path

    @property
    def baseline(self) -> Run:
        return self.runs[0]


def compare_runs(paths: Sequence[Path], out_dir: Path, *, metric: str = "ttft_s", stat: str = "median",
                 resamples: int = stats.DEFAULT_RESAMPLES, seed: int = 0, fail_pct: Optional[float] = None,
                 strict: bool = False) -> Comparison:
    """Load the runs (the first is the baseline), compare them, and write compare.csv,
    differences.csv and compare.html into ``out_dir``; ``strict``: refuse incomparable runs
    (CompareError) before writing anything."""
    runs = load_runs(paths)
    baseline = runs[0]
    comp = check_comparable(runs)
    if comp.problems and strict:
        raise CompareError("runs are not comparable (--strict): " + " | ".join(comp.problems))
    table = runs_table(runs)
    diffs = differences(runs, baseline, list(dict.fromkeys([metric, *DIFF_METRICS])), stat, resamples, seed)
    regression_lines = regressions(diffs, metric, fail_pct) if fail_pct is not None else []
    out_dir.mkdir(parents=True, exist_ok=True)
    table.to_csv(out_dir / "compare.csv", index=False)
    differences_frame(diffs).to_csv(out_dir / "differences.csv", index=False)
    gate = (fail_pct, regression_lines) if fail_pct is not None else None
    html, _ = build_compare_html(runs, baseline, table, diffs, comp, out_dir, metric, stat, gate)
    tmp = out_dir / "compare.html.tmp"
    tmp.write_text(html, encoding="utf-8", errors="replace")  # a lone surrogate a server sent must not cost the page
    tmp.replace(out_dir / "compare.html")
    return Comparison(runs, comp, table, diffs, regression_lines, out_dir)


def write_comparison(paths: Sequence[Path], out_dir: Path, quiet: bool = True) -> Path:
    """compare.html (and the CSVs) of a sweep's points, baseline the first; for sweep.json's folder."""
    result = compare_runs(paths, out_dir, resamples=500)
    if not quiet:
        print(format_runs_table(result.table))
    return out_dir / "compare.html"


def run_compare(args: argparse.Namespace) -> int:
    try:
        stats.stat_function(args.stat)
    except ValueError as exc:
        raise CompareError(str(exc)) from None
    if args.fail_on_regression is not None and args.fail_on_regression < 0:
        raise CompareError("--fail-on-regression must be >= 0")
    paths = expand_runs(args.runs)
    if args.baseline:
        base_path = expand_runs([args.baseline])
        if len(base_path) != 1:
            raise CompareError(f"--baseline must be one run folder (got {len(base_path)})")
        paths = base_path + [p for p in paths if p.resolve() != base_path[0].resolve()]
    if len(paths) < 2:
        raise CompareError(f"need at least two run folders to compare (got {len(paths)})")
    out_dir = args.out or Path("results") / f"compare-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    result = compare_runs(paths, out_dir, metric=args.metric, stat=args.stat, resamples=args.resamples,
                          seed=args.seed, fail_pct=args.fail_on_regression, strict=args.strict)
    comp = result.comparability
    for problem in comp.problems:
        print(f"WARNING: runs are not comparable: {problem}", file=sys.stderr)
    for note in comp.notes:
        print(f"note: {note}")
    print(format_runs_table(result.table))
    print(f"\nagainst the baseline ({result.baseline.label}), {args.stat} of per-request values, bootstrap 95% CI:")
    print(format_differences(result.diffs))
    for line in result.regression_lines:
        print(line)
    if args.fail_on_regression is not None and not result.regression_lines:
        print(f"no regression: no run is worse than the baseline by more than {args.fail_on_regression:g}% in "
              f"{registry.get(args.metric).label} {args.stat} beyond noise")
    print(f"compare: {out_dir / 'compare.html'}", flush=True)
    return EXIT_REGRESSION if result.regression_lines else 0


if __name__ == "__main__":
    sys.exit(main())
