"""``python -m harness.compare RUN… --out DIR``: compare run folders, side by side and with statistics.

Writes into ``--out`` (default ``results/compare-<date>-<time>``):

- ``compare.csv`` — one row per run: what ran, key percentiles (ms) and throughputs; the
  console prints a selection within 120 columns;
- ``differences.csv`` — each run against the baseline (``--baseline``, default the first run):
  for TTFT, TPOT, E2E and per-request output tokens/s, the change of a statistic (median by
  default) with a bootstrap 95 % confidence interval and a verdict: faster, slower or no
  significant difference (harness/reports/compare/stats.py has the formula);
- ``agreement.csv`` — for greedy runs that recorded their output token ids: each run's token
  agreement with the baseline (harness/reports/agreement.py): identical requests, mean common prefix,
  the first divergence with both texts, and the run's dtype and quantization;
- ``compare.html`` — self-contained charts: the CDFs overlaid, latency against throughput
  (one line per setup across the runs that differ only in concurrency or rate: the curve of a
  sweep), per-turn TTFT for chat runs, throughputs, and the differences with their CIs.

Runs are comparable when they ran the same model, the same workload (sha256 of its
prompts; a different arrival schedule alone is only noted) on the same hardware (CPU model
and GPUs). Otherwise the comparison warns loudly (WARNING lines and a banner), or with
``--strict`` refuses (exit 2). Backend and engine differences are listed: they are usually
the point. ``--fail-on-regression PCT`` exits 1 when ``--metric`` got worse than the baseline
by more than PCT % and the CI excludes no change. ``--markdown FILE`` appends the comparison
as GitHub markdown to FILE (``-``: stdout), for a job summary or a pull-request comment.

Runs are labelled short (``2 vllm c=8``: index, backend, the settings that differ; see
:func:`assign_labels`); every output also lists what each label stands for in full.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Optional, Sequence, TextIO
from urllib.parse import urlsplit

import pandas as pd

from harness.reports import agreement as agree
from harness.results import metrics as registry
from harness.reports import figures as plots
from harness.reports.compare import stats
from harness.reports.figures import esc, fmt
from harness.reports.run_report import REPORT_NAME, backend_text, engine_text, hardware_text, load_text, model_text, run_date
from harness.reports.tables import header_lines, md_table, md_text, text_table, wrap
from harness.results.store import WORKLOAD, RunResult, RunSummary, read_json, is_run_dir, load_run

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
        from harness.run.sweep import point_run_dirs

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
    """The settings a run can differ in, as text (the notes of what differs between runs)."""
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


LABEL_MAX = 28  # characters of a run's label: the console table's first column, plot legends and axes
PART_MAX = 12  # characters of one setting in a label
RUN_KEYS = ("model", "workload", "concurrency", "rate", "repeat")  # settings of the run, not of its backend
SHORT_KEYS = {"concurrency": "c", "rate": "r", "max_batch_size": "bs", "tensor_parallel_size": "tp",
              "threads": "thr", "n_threads": "thr", "quantize_bits": "q", "enforce_eager": "eager"}


def short_key(key: str) -> str:
    """A setting's name in a label: a known abbreviation; a long compound name's initials
    (``gpu_memory_utilization`` → ``gmu``); a long word's first letters; else the name."""
    if key in SHORT_KEYS:
        return SHORT_KEYS[key]
    if len(key) <= 8:
        return key
    words = [w for w in re.split(r"[_\-\s]+", key) if w]
    return "".join(w[0] for w in words) if len(words) > 1 else key[:4]


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters at a separator (space - _ /, not the dot of a number), with an ellipsis."""
    if len(text) <= limit:
        return text
    head = text[:limit - 1]
    cut = max(head.rfind(ch) for ch in " -_/")
    return (head[:cut] if cut > 0 else head).rstrip() + "…"


def short_setting(key: str, value: Any) -> str:
    """A backend setting in a label: a word value alone (``static``), else ``key=value`` (``bs=8``, ``eager=on``)."""
    text = ("on" if value else "off") if isinstance(value, bool) else str(value)
    if "://" in text:  # a URL: its host and port
        text = urlsplit(text).netloc or text
    elif "/" in text.rstrip("/"):  # a path: its last part
        text = text.rstrip("/").rsplit("/", 1)[-1]
    if not isinstance(value, bool) and re.fullmatch(r"[A-Za-z][\w.+-]*", text):
        return clip(text, PART_MAX)
    return f"{short_key(key)}={clip(text, PART_MAX)}"


def short_settings(run: Run) -> dict[str, str]:
    """The settings a run can differ in, each as the few characters a label shows of it; in the
    order labels show them, which is also the order kept when a label is too long."""
    s = run.summary
    b = s.backend
    wl = s.workload
    info = b.get("info") or {}
    out = {"rate": f"r={wl.get('rate')}/s"} if wl.get("open_loop") else {}  # open loop: the concurrency only bounds it
    out.update({
        "concurrency": f"c={wl.get('concurrency')}",
        "model": clip(str(s.model.get("name")), PART_MAX),
        "workload": clip(str(wl.get("name")), PART_MAX),
        "mode": str(b.get("mode")),
        "engine": f"v{b['engine_version']}" if b.get("engine_version") else str(b.get("engine")),
        **{k: short_setting(k, v) for k, v in info.items() if not isinstance(v, (dict, list)) and v is not None},
    })
    if s.repeat:  # last: the index tells repeats apart anyway
        out["repeat"] = f"#{s.repeat.get('index')}"
    return out


def label_keys(backends: Sequence[str], settings: Sequence[dict[str, str]], i: int) -> list[str]:
    """The settings worth a place in run ``i``'s label: a run setting that differs between the
    runs, a backend setting that differs between the runs of its backend (between backends, the
    backend's name says it)."""
    same_backend = [j for j, b in enumerate(backends) if b == backends[i]]

    def differs(key: str) -> bool:
        group = range(len(settings)) if key in RUN_KEYS else same_backend
        return len({settings[j].get(key, "") for j in group}) > 1

    return [k for k in settings[i] if differs(k)]


def fit_label(parts: Sequence[str], limit: int = LABEL_MAX) -> str:
    """Parts joined by spaces; the parts that do not fit in ``limit`` characters become an ellipsis."""
    label = parts[0]
    for i, part in enumerate(parts[1:], start=1):
        more = i + 1 < len(parts)
        if len(label) + 1 + len(part) + (2 if more else 0) > limit:
            return label + " …"
        label += " " + part
    return label


def label_parts(runs: Sequence[Run], leave_out: Sequence[str] = ()) -> list[list[str]]:
    """Per run: its backend and the settings of :func:`label_keys` (less ``leave_out``); runs
    those do not tell apart get their folder name too."""
    backends = [str(r.summary.backend.get("name")) for r in runs]
    settings = [{k: v for k, v in short_settings(r).items() if k not in leave_out} for r in runs]
    parts = [[clip(b, PART_MAX), *(s[k] for k in label_keys(backends, settings, i))]
             for i, (b, s) in enumerate(zip(backends, settings))]
    texts = [" ".join(p) for p in parts]
    for run, part, text in zip(runs, parts, texts):
        if texts.count(text) > 1:
            part.append(clip(run.path.name, PART_MAX))
    return parts


def assign_labels(runs: list[Run]) -> None:
    """Short labels: the run's index (from 1), its backend and the settings that differ
    (``2 vllm c=8``), at most LABEL_MAX characters. The runs table has the full description."""
    for i, (run, parts) in enumerate(zip(runs, label_parts(runs)), start=1):
        run.label = fit_label([str(i), *parts])


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


CONSOLE_STATS = ("p50", "p90")  # of each console request metric in the printed and markdown tables


def console_figures() -> list[list[tuple[str, Optional[str]]]]:
    """The printed (and markdown) figures in two tables: each console request metric's
    CONSOLE_STATS, then every console run metric."""
    latency = [(k, st) for k, m in registry.REQUEST_METRICS.items() if m.in_console for st in CONSOLE_STATS]
    whole_run = [(k, None) for k, m in registry.RUN_METRICS.items() if m.in_console]
    return [latency, whole_run]


def present_figures(table: pd.DataFrame) -> list[list[tuple[str, Optional[str]]]]:
    """:func:`console_figures` less those no run has (queue wait where no engine reports it)."""
    return [[f for f in group if column(*f) in table.columns and table[column(*f)].notna().any()]
            for group in console_figures()]


def _figure_label(metric: str, stat: Optional[str]) -> str:
    m = registry.get(metric)
    if stat:
        return f"{m.label} {stat}"
    return f"{m.label} ({m.unit})" if getattr(m, "source", None) else m.label


def figure_text(row: dict[str, Any], metric: str, stat: Optional[str]) -> str:
    return fmt(row[column(metric, stat)], registry.get(metric).digits)


def count_text(value: Any) -> str:
    return str(int(value)) if plots.is_num(value) else "–"


def figure_rows(table: pd.DataFrame, figures: Sequence[tuple[str, Optional[str]]], counts: bool) -> list[list[str]]:
    """One row of cells per run: its label, ok and failed requests when ``counts``, then the figures."""
    return [[row["run"], *([count_text(row["ok"]), count_text(row["failed"])] if counts else []),
             *(figure_text(row, m, st) for m, st in figures)] for row in table.to_dict("records")]


def format_runs_table(table: pd.DataFrame) -> str:
    """The figures of each run: latencies, then requests and throughputs (fits 120 columns)."""
    latency, whole_run = present_figures(table)
    heads = [header_lines(_figure_label(m, st), registry.get(m).unit) for m, st in latency]
    lines = text_table([["run"], *heads], figure_rows(table, latency, counts=False))
    heads = [["ok"], ["failed"], *(header_lines(_figure_label(m, st), registry.get(m).unit) for m, st in whole_run)]
    lines += [""] + text_table([["run"], *heads], figure_rows(table, whole_run, counts=True))
    return "\n".join(lines)


def run_description(run: Run) -> dict[str, str]:
    """What a run was, in full: the label's long form."""
    s = run.summary
    return {"backend": backend_text(s), "engine": engine_text(s), "model": model_text(s),
            "workload": str(s.workload.get("name")), "load": load_text(s), "status": str(s.status),
            "folder": str(run.path)}


def format_runs_list(runs: Sequence[Run]) -> str:
    """Each label and what its run was, wrapped to 120 columns; the first run is the baseline."""
    width = max(len(r.label) for r in runs)
    lines = ["runs (the first is the baseline):"]
    for run in runs:
        first = f"  {run.label.ljust(width)}  "
        lines += wrap(" · ".join(run_description(run).values()), " " * len(first), first=first)
    return "\n".join(lines)


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
    """Per metric: the baseline's value, then each run's value, change, 95% CI and verdict."""
    lines: list[str] = []
    for group in by_metric(rows):
        first = group[0]
        lines.append(f"{first['label']} {first['stat']} ({first['unit']}): baseline {fmt(first['baseline_value'], 2)}")
        cells = [[r["run"], fmt(r["value"], 2), _pct_text(r["change_pct"]), ci_text(r), r["verdict"]] for r in group]
        lines += text_table([["run"], ["this run"], ["change"], ["95% CI"], ["verdict"]], cells, align="lrrrl", indent="  ")
    return "\n".join(lines)


def by_metric(rows: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The difference rows grouped by metric, in the order the metrics first appear."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r["metric"], []).append(r)
    return list(groups.values())


def _pct_text(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:+.1f}%"


def ci_text(r: dict[str, Any]) -> str:
    return f"[{_pct_text(r['ci_low_pct'])}, {_pct_text(r['ci_high_pct'])}]" if r["ci_low_pct"] is not None else "-"


def gate_results(rows: Sequence[dict[str, Any]], metric: str, pct: float) -> list[tuple[dict[str, Any], bool]]:
    """Each run's difference in the gate's ``metric`` and whether it fails the gate: worse than
    the baseline by more than ``pct`` % beyond noise."""
    return [(r, stats.is_regression(r["_difference"], pct, r["lower_is_better"])) for r in rows if r["metric"] == metric]


def regressions(rows: Sequence[dict[str, Any]], metric: str, pct: float) -> list[str]:
    """Lines for the runs whose ``metric`` is worse than the baseline by > pct % beyond noise."""
    return [
        f"REGRESSION: {r['run']}: {r['label']} {r['stat']} {fmt(r['value'], 2)} {r['unit']} vs "
        f"{fmt(r['baseline_value'], 2)} (baseline {r['baseline']}): {_pct_text(r['change_pct'])}, "
        f"95% CI {ci_text(r)}, worse than the {pct:g}% allowed"
        for r, failed in gate_results(rows, metric, pct) if failed
    ]


def gate_passed_text(metric: str, stat: str, pct: float) -> str:
    return f"no run is worse than the baseline by more than {pct:g}% in {registry.get(metric).label} {stat} beyond noise"


# --- token agreement (computed in harness/reports/agreement.py) ------------------------------------

AGREEMENT_NOTE = (
    "Greedy replies compared token for token with the baseline's, over the requests both completed. "
    "Numerics (bf16 against fp32, a quantized GGUF, other kernels or batch shapes) make replies part after a "
    "while; a reply that differs from the first token, or in every request, points at other work "
    "(template, BOS, EOS set, weights).")
AGREEMENT_HEADS = ["run", "dtype", "quantization", "identical", "mean common prefix", "prefix share", "first divergence"]
AGREEMENT_CONSOLE_HEADS = [["run"], ["dtype"], ["quantization"], ["identical"], ["mean common", "prefix"], ["prefix", "share"],
                           ["first", "divergence"]]


def token_agreement(runs: Sequence[Run]) -> list[agree.Agreement]:
    """Each run against the baseline, when the runs recorded output ids (else none)."""
    if len(runs) < 2 or not any(agree.any_ids(r.data) for r in runs):
        return []
    return agree.against_baseline([r.data for r in runs], [r.label for r in runs])


def _numerics_text(value: Optional[str]) -> str:
    return value if value else "–"


def agreement_cells(a: agree.Agreement) -> list[str]:
    share = a.identical_share
    first = f"request {a.first.request_id}, token {a.first.position}" if a.first else ("none" if a.compared else "–")
    return [a.run, _numerics_text(a.dtype), _numerics_text(a.quantization),
            f"{a.identical}/{a.compared} ({share:.0%})" if share is not None else "–",
            f"{a.mean_common_prefix:.1f} tokens" if a.mean_common_prefix is not None else "–",
            f"{a.prefix_share:.0%}" if a.prefix_share is not None else "–", first]


def divergence_lines(a: agree.Agreement) -> list[str]:
    """The first divergence's two texts, and why the figures may not mean much."""
    lines = [f"{a.run}: {p}" for p in a.problems]
    if a.first:
        lines.append(f"{a.run}, request {a.first.request_id} parts at token {a.first.position}: "
                     f"baseline {a.first.baseline_text!r} · this run {a.first.text!r}")
    return lines


def format_agreement(agreements: Sequence[agree.Agreement]) -> list[str]:
    a0 = agreements[0]
    lines = wrap(f"token agreement with the baseline ({a0.baseline}: dtype {_numerics_text(a0.baseline_dtype)}, "
                 f"quantization {_numerics_text(a0.baseline_quantization)}), greedy replies token for token:")
    lines += text_table(AGREEMENT_CONSOLE_HEADS, [agreement_cells(a) for a in agreements], align="lllrrrl")
    lines += [line for a in agreements for text in divergence_lines(a) for line in wrap(text, first="  ", indent="    ")]
    return lines


def _agreement_html(agreements: Sequence[agree.Agreement]) -> str:
    rows = []
    for a in agreements:
        cells = dict(zip(AGREEMENT_HEADS, agreement_cells(a)))
        cells["baseline text"] = a.first.baseline_text if a.first else ""
        cells["this run's text"] = a.first.text if a.first else ""
        cells["notes"] = "; ".join(a.problems)
        rows.append(cells)
    return plots.table(rows, list(rows[0]), text_columns=["run", "dtype", "quantization", "first divergence", "notes"],
                       excerpt_columns=["baseline text", "this run's text"])


# --- the page -----------------------------------------------------------------------------


def build_compare_html(runs: Sequence[Run], baseline: Run, table: pd.DataFrame, diffs: Sequence[dict[str, Any]],
                       comp: Comparability, out_dir: Path, metric: str, stat: str,
                       gate: Optional[tuple[float, list[str]]] = None,
                       agreements: Sequence[agree.Agreement] = ()) -> tuple[str, list[str]]:
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
            passed = gate_passed_text(metric, stat, pct)
            parts.append(plots.banner([passed[0].upper() + passed[1:] + "."], "Regression gate passed", "ok"))
    parts.append(plots.banner(comp.notes, "What differs between the runs", "info"))
    parts.append(plots.section("Runs", _runs_html(runs, table, out_dir), "Latencies in ms (from each run's summary.json)."))
    if diffs:
        parts.append(plots.section(
            "Differences against the baseline", _diffs_html(diffs),
            f"Change of the {stat} of per-request values against the baseline ({baseline.label}), with a bootstrap 95% confidence "
            "interval (requests resampled with replacement). No significant difference when the interval contains 0.",
        ))
    if agreements:
        parts.append(plots.section("Token agreement with the baseline", _agreement_html(agreements), AGREEMENT_NOTE))
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
    panels = [("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E")]
    fig = plots.figure(1, 3, [f"{label} (ms)" for _, label in panels], height=380)
    drawn = False
    for i, run in enumerate(runs):
        for j, (key, label) in enumerate(panels, start=1):
            x, y = plots.cdf_points(run.data.values(key) * 1000)
            if x.size == 0:
                continue
            drawn = True
            fig.add_trace(plots.trace("scatter", x=x, y=y, mode="lines", line=dict(color=plots.color(i), shape="hv"), name=esc(run.label),
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
            fig.add_trace(plots.trace("scatter",
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
    """Each setup named like a run's label less its index and load: the backend and the settings that differ."""
    return [fit_label(parts) for parts in label_parts(firsts, leave_out=LOAD_KEYS)]


def _throughput_bars(runs: Sequence[Run]):
    labels = [esc(r.label) for r in runs]
    out_tps = [r.summary.stat("output_tokens_per_s") for r in runs]
    req_s = [r.summary.stat("requests_per_s") for r in runs]
    if not any(plots.is_num(v) and v for v in out_tps):
        return None
    fig = plots.figure(1, 2, ["output tokens/s", "requests/s"], height=max(300, 120 + 36 * len(runs)))
    colors = [plots.color(i) for i in range(len(runs))]
    fig.add_trace(plots.trace("bar", y=labels, x=out_tps, orientation="h", marker=dict(color=colors), showlegend=False,
                         hovertemplate="%{y}: %{x:.1f} tok/s<extra></extra>"), 1, 1)
    fig.add_trace(plots.trace("bar", y=labels, x=req_s, orientation="h", marker=dict(color=colors), showlegend=False,
                         hovertemplate="%{y}: %{x:.3f} req/s<extra></extra>"), 1, 2)
    fig.update_yaxes(autorange="reversed")
    fig.update_yaxes(showticklabels=False, row=1, col=2)
    return ("throughput", "Throughput", fig, "Whole-run throughput: completed requests and their output tokens over the measured time.")


def _per_turn(runs: Sequence[Run]):
    chat = [(i, r) for i, r in enumerate(runs) if len(r.summary.per_turn) > 1]
    if not chat:
        return None
    fig = plots.figure(1, 2, ["TTFT p50 by turn (ms)", "TTFT p50 against context length (ms)"], height=380)
    for i, run in chat:
        turns = run.summary.per_turn
        y = [t.get("ttft_p50_s") * 1000 if plots.is_num(t.get("ttft_p50_s")) else None for t in turns]
        for j, x in enumerate(([t.get("turn") for t in turns], [t.get("prompt_tokens_mean") for t in turns]), start=1):
            fig.add_trace(plots.trace("scatter", x=x, y=y, mode="lines+markers", name=esc(run.label), legendgroup=f"run{i}", showlegend=j == 1,
                                     line=dict(color=plots.color(i))), 1, j)
    fig.update_xaxes(title_text="turn", dtick=1, row=1, col=1)
    fig.update_xaxes(title_text="mean context length (prompt tokens)", row=1, col=2)
    return ("per-turn", "Chat: TTFT per turn", fig, "Median TTFT of each turn; later turns re-send a longer history.")


def _differences_figure(diffs: Sequence[dict[str, Any]]):
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
            fig.add_trace(plots.trace("scatter",
                x=[r["change_pct"] for r in sel], y=[esc(r["run"]) for r in sel], mode="markers", name=verdict,
                legendgroup=verdict, showlegend=not any(t.get("legendgroup") == verdict for t in fig.data),
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
    parser.add_argument("--markdown", default=None, metavar="FILE",
                        help="also write the comparison as markdown, appended to FILE (e.g. $GITHUB_STEP_SUMMARY); "
                             "'-': to stdout, the console output then goes to stderr")
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
    metric: str = "ttft_s"  # of the regression gate
    stat: str = "median"  # of per-request values, in the differences
    fail_pct: Optional[float] = None  # the gate's threshold; None: no gate
    agreements: list[agree.Agreement] = field(default_factory=list)  # token agreement with the baseline

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
    agreements = token_agreement(runs)
    out_dir.mkdir(parents=True, exist_ok=True)
    table.to_csv(out_dir / "compare.csv", index=False)
    differences_frame(diffs).to_csv(out_dir / "differences.csv", index=False)
    if agreements:
        pd.DataFrame([a.row() for a in agreements]).to_csv(out_dir / "agreement.csv", index=False)
    gate = (fail_pct, regression_lines) if fail_pct is not None else None
    html, _ = build_compare_html(runs, baseline, table, diffs, comp, out_dir, metric, stat, gate, agreements)
    tmp = out_dir / "compare.html.tmp"
    tmp.write_text(html, encoding="utf-8", errors="replace")  # a lone surrogate a server sent must not cost the page
    tmp.replace(out_dir / "compare.html")
    return Comparison(runs, comp, table, diffs, regression_lines, out_dir, metric, stat, fail_pct, agreements)


def write_comparison(paths: Sequence[Path], out_dir: Path, quiet: bool = True) -> Path:
    """compare.html (and the CSVs) of a sweep's points, baseline the first; for sweep.json's folder."""
    result = compare_runs(paths, out_dir, resamples=500)
    if not quiet:
        print(format_runs_list(result.runs))
        print(format_runs_table(result.table))
    return out_dir / "compare.html"


def run_compare(args: argparse.Namespace) -> int:
    try:
        stats.stat_function(args.stat)
    except ValueError as exc:
        raise CompareError(str(exc)) from None
    if args.fail_on_regression is not None and args.fail_on_regression < 0:
        raise CompareError("--fail-on-regression must be >= 0")
    if args.markdown == "":
        raise CompareError("--markdown got an empty file name (is $GITHUB_STEP_SUMMARY set?)")
    if args.markdown not in (None, "-") and Path(args.markdown).is_dir():
        raise CompareError(f"--markdown must be a file, not a folder: {args.markdown}")
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
    console = sys.stderr if args.markdown == "-" else sys.stdout
    print_comparison(result, console)
    if args.markdown:
        write_markdown(comparison_markdown(result), args.markdown)
    print(f"compare: {out_dir / 'compare.html'}", file=console, flush=True)
    return EXIT_REGRESSION if result.regression_lines else 0


def print_comparison(result: Comparison, console: TextIO) -> None:
    """Warnings (stderr), notes, the runs, their figures, the differences and the gate's result;
    every line within 120 columns but for a path longer than that."""
    comp = result.comparability
    for problem in comp.problems:
        print("\n".join(wrap(f"WARNING: runs are not comparable: {problem}")), file=sys.stderr)
    lines = [line for note in comp.notes for line in wrap(f"note: {note}")]
    lines += [format_runs_list(result.runs), "", format_runs_table(result.table), "",
              f"against the baseline ({result.baseline.label}): {result.stat} of per-request values, bootstrap 95% CI",
              format_differences(result.diffs)]
    if result.agreements:
        lines += ["", *format_agreement(result.agreements)]
    lines += [line for r in result.regression_lines for line in wrap(r)]
    if result.fail_pct is not None and not result.regression_lines:
        lines += wrap("no regression: " + gate_passed_text(result.metric, result.stat, result.fail_pct))
    print("\n".join(lines), file=console)


# --- markdown -----------------------------------------------------------------------------


def comparison_markdown(result: Comparison) -> str:
    """The comparison for a GitHub job summary or pull-request comment: no HTML, cells escaped."""
    sections = [_md_head(result), _md_problems(result.comparability), _md_gate(result), _md_runs(result.runs),
                _md_figures(result.table), _md_differences(result), _md_agreement(result), _md_notes(result.comparability)]
    return "\n\n".join(s for s in sections if s) + "\n"


def _md_head(result: Comparison) -> str:
    return (f"## Comparison of {len(result.runs)} runs\n\n"
            f"Baseline: **{md_text(result.baseline.label)}**. Changes of the {md_text(result.stat)} of per-request "
            "values against it, with bootstrap 95% confidence intervals.")


def _md_problems(comp: Comparability) -> str:
    if not comp.problems:
        return ""
    items = "\n".join(f"> - {md_text(p)}" for p in comp.problems)
    return f"> [!WARNING]\n> **These runs are not comparable**: the differences may not be the engine's.\n{items}"


def _md_gate(result: Comparison) -> str:
    if result.fail_pct is None:
        return ""
    pct, m = result.fail_pct, registry.get(result.metric)
    rows = gate_results(result.diffs, result.metric, pct)
    verdict = "FAILED" if any(failed for _, failed in rows) else "passed"
    what = f"{m.label} {result.stat}"
    cells = [[r["run"], fmt(r["value"], 2), _pct_text(r["change_pct"]), ci_text(r), "FAIL" if failed else "pass"]
             for r, failed in rows]
    return (f"### Regression gate: {verdict}\n\n"
            f"A run fails when its {md_text(what)} is worse than the baseline's by more than {pct:g}% and the 95% CI "
            "excludes no change.\n\n"
            + md_table(["run", f"{what} ({m.unit})", "change", "95% CI", "result"], cells, align="lrrrl"))


def _md_runs(runs: Sequence[Run]) -> str:
    rows = [[run.label, *run_description(run).values()] for run in runs]
    return "### Runs\n\n" + md_table(["run", *run_description(runs[0])], rows, align="l" * len(rows[0]))


def _md_figures(table: pd.DataFrame) -> str:
    latency, whole_run = present_figures(table)
    heads = [f"{_figure_label(m, st)} ({registry.get(m).unit})" for m, st in latency]
    parts = ["### Figures", md_table(["run", *heads], figure_rows(table, latency, counts=False))]
    heads = ["ok", "failed", *(f"{_figure_label(m, st)} ({registry.get(m).unit})" for m, st in whole_run)]
    parts.append(md_table(["run", *heads], figure_rows(table, whole_run, counts=True)))
    return "\n\n".join(parts)


def _md_differences(result: Comparison) -> str:
    if not result.diffs:
        return ""
    cells = [[r["run"], f"{r['label']} {r['stat']} ({r['unit']})", fmt(r["baseline_value"], 2), fmt(r["value"], 2),
              _pct_text(r["change_pct"]), ci_text(r), r["verdict"]] for r in result.diffs]
    return ("### Against the baseline\n\n"
            + md_table(["run", "metric", "baseline", "this run", "change", "95% CI", "verdict"], cells, align="llrrrrl"))


def _md_agreement(result: Comparison) -> str:
    if not result.agreements:
        return ""
    rows = [agreement_cells(a) for a in result.agreements]
    texts = [f"- {md_text(line)}" for a in result.agreements for line in divergence_lines(a)]
    return ("### Token agreement with the baseline\n\n" + md_text(AGREEMENT_NOTE) + "\n\n"
            + md_table(AGREEMENT_HEADS, rows, align="lllrrrl") + ("\n\n" + "\n".join(texts) if texts else ""))


def _md_notes(comp: Comparability) -> str:
    if not comp.notes:
        return ""
    return "### What differs\n\n" + "\n".join(f"- {md_text(n)}" for n in comp.notes)


def write_markdown(text: str, dest: str) -> None:
    """Append ``text`` to the file ``dest`` (a job summary collects several), after a blank line
    when it has content; ``-``: to stdout."""
    if dest == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    path = Path(dest)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        gap = "\n" if path.exists() and path.stat().st_size else ""
        with path.open("a", encoding="utf-8", errors="replace") as f:
            f.write(gap + text)
    except OSError as exc:
        raise CompareError(f"cannot write --markdown {dest}: {exc.strerror or exc}") from None


if __name__ == "__main__":
    sys.exit(main())
