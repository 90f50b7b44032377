"""The runs of a comparison: found from paths, globs and sweep folders, loaded, labelled short,
checked for comparability, and tabled (compare.csv and the console's table)."""

from __future__ import annotations

import glob
import json
import re
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional
from urllib.parse import urlsplit

import pandas as pd

from harness.reports import html
from harness.reports.describe import backend_text, engine_text, load_text, model_text
from harness.reports.html import fmt
from harness.reports.source import client_short, client_text
from harness.reports.tables import header_lines, text_table, wrap
from harness.results import metrics
from harness.results.schema import CONFIG, REQUESTS_JSONL, WORKLOAD_PARTS, RunResult, RunSummary
from harness.results.store import is_run_dir, load_run
from harness.results.sweep_file import point_run_dirs

TABLE_STATS = ("p50", "p90", "p99")  # of each request metric shown in the console, in compare.csv
LOAD_KEYS = ("concurrency", "rate")  # what a sweep varies; the rest of the workload is its shape


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
            elif (path / REQUESTS_JSONL).is_file() or (path / CONFIG).is_file():
                raise CompareError(
                    f"{path} has no summary.json: its run did not end (killed, or still going); "
                    f"python -m harness.report {path} shows what it measured, compare takes runs that ended"
                )
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
        try:
            return point_run_dirs(json.loads(sweep.read_text()))
        except ValueError:
            pass
    return [p.parent for p in sorted(folder.glob("*/summary.json")) + sorted(folder.glob("*/*/summary.json"))]


def load_runs(paths: Sequence[Path]) -> list[Run]:
    """The runs, loaded; their hashes in the current form (an older run's migrated, its prompts'
    hash taken from its workload.json where its summary has none: harness/results/migrations.py)."""
    loaded = [load_run(path, with_workload=False) for path in paths]
    runs = [Run(data, data.summary.workload.get("prompts_sha256")) for data in loaded]
    assign_labels(runs)
    return runs


def describe(run: Run) -> dict[str, str]:
    """The settings a run can differ in, as text (the notes of what differs between runs)."""
    s = run.summary
    b = s.backend
    wl = s.workload
    info = b.get("info") or {}
    out = {
        "client": client_text(s),  # who measured: the harness, or a tool whose files were imported
        "backend": str(b.get("name")),
        "mode": str(b.get("mode")),
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
SHORT_KEYS = {
    "concurrency": "c",
    "rate": "r",
    "max_batch_size": "bs",
    "tensor_parallel_size": "tp",
    "threads": "thr",
    "n_threads": "thr",
    "quantize_bits": "q",
    "enforce_eager": "eager",
}


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
    head = text[: limit - 1]
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
    out.update(
        {
            "concurrency": f"c={wl.get('concurrency')}",
            "model": clip(str(s.model.get("name")), PART_MAX),
            "workload": clip(str(wl.get("name")), PART_MAX),
            "mode": str(b.get("mode")),
            "engine": f"v{b['engine_version']}" if b.get("engine_version") else str(b.get("engine")),
            **{k: short_setting(k, v) for k, v in info.items() if not isinstance(v, (dict, list)) and v is not None},
        }
    )
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
    """Per run: its backend (for a run imported from another tool: the tool) and the settings of
    :func:`label_keys` (less ``leave_out``); runs those do not tell apart get their folder name too."""
    backends = [client_short(r.summary) if r.summary.source else str(r.summary.backend.get("name")) for r in runs]
    settings = [{k: v for k, v in short_settings(r).items() if k not in leave_out} for r in runs]
    parts = [
        [clip(b, PART_MAX), *(s[k] for k in label_keys(backends, settings, i))]
        for i, (b, s) in enumerate(zip(backends, settings))
    ]
    texts = [" ".join(p) for p in parts]
    for run, part, text in zip(runs, parts, texts):
        if texts.count(text) > 1:
            part.append(clip(run.path.name, PART_MAX))
    return parts


def assign_labels(runs: list[Run]) -> None:
    """Short labels: the run's index (from 1), its backend and the settings that differ
    (``2 vllm c=8``), at most LABEL_MAX characters. The runs table has the full description."""
    # runs imported from other tools each name their own prompts: the tool in the label says it
    leave_out = ("workload",) if any(r.summary.source for r in runs) else ()
    for i, (run, parts) in enumerate(zip(runs, label_parts(runs, leave_out)), start=1):
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
    # a run imported from another tool knows the model's name, not where its weights came from
    sourced = [r for r in runs if r.summary.model.get("source") is not None]
    model = _differs(runs, lambda r: str(r.summary.model.get("name"))) or _differs(
        sourced, lambda r: f"{r.summary.model.get('name')} ({r.summary.model.get('source')})"
    )
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
    for key, what in WORKLOAD_PARTS:  # the sha256 differs too: say which part
        differs = _differs(runs, lambda r, key=key: r.summary.workload.get(key) or "none")
        if differs:
            result.problems.append(f"different {what}: {differs}")
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
    m = metrics.get(metric)
    if stat is None:
        return metric if m.unit != "%" else f"{metric}_pct"
    return f"{metric.removesuffix('_s')}_{stat}_{m.unit.replace('/', '_per_')}"


def table_figures() -> list[tuple[str, Optional[str]]]:
    """The (metric, statistic) pairs of the table: each console request metric's p50/p90/p99, then every run metric."""
    figures: list[tuple[str, Optional[str]]] = [
        (key, stat) for key, m in metrics.REQUEST_METRICS.items() if m.in_console for stat in TABLE_STATS
    ]
    return figures + [(key, None) for key in metrics.RUN_METRICS]


def shown(summary: RunSummary, metric: str, stat: Optional[str]) -> Optional[float]:
    """A figure of the summary in its display unit."""
    return metrics.get(metric).show(summary.stat(metric, stat or ""))


def runs_table(runs: Sequence[Run]) -> pd.DataFrame:
    """One row per run: what ran, then every figure of :func:`table_figures` (from summary.json)."""
    rows = []
    for run in runs:
        s = run.summary
        wl = s.workload
        row = {
            "run": run.label,
            "backend": backend_text(s),
            "engine": engine_text(s),
            "model": model_text(s),
            "workload": wl.get("name"),
            "concurrency": wl.get("concurrency"),
            "rate": wl.get("rate") if wl.get("open_loop") else None,
            "status": s.status,
            "ok": s.requests.get("completed"),
            "failed": s.requests.get("failed"),
        }
        for metric, stat in table_figures():
            row[column(metric, stat)] = shown(s, metric, stat)
        row["folder"] = str(run.path)
        rows.append(row)
    table = pd.DataFrame(rows)
    # a figure with a source (GPU) that no run has is left out, not shown as empty
    absent = [
        column(k, None) for k, m in metrics.RUN_METRICS.items() if m.source and table[column(k, None)].isna().all()
    ]
    return table.drop(columns=absent)


def sourced_figures(table: pd.DataFrame) -> list[tuple[str, Optional[str]]]:
    """The run metrics with a source (GPU) that some run of the table has."""
    return [(k, None) for k, m in metrics.RUN_METRICS.items() if m.source and column(k, None) in table.columns]


CONSOLE_STATS = ("p50", "p90")  # of each console request metric in the printed and markdown tables


def console_figures() -> list[list[tuple[str, Optional[str]]]]:
    """The printed (and markdown) figures in two tables: each console request metric's
    CONSOLE_STATS, then every console run metric."""
    latency: list[tuple[str, Optional[str]]] = [
        (k, st) for k, m in metrics.REQUEST_METRICS.items() if m.in_console for st in CONSOLE_STATS
    ]
    whole_run: list[tuple[str, Optional[str]]] = [(k, None) for k, m in metrics.RUN_METRICS.items() if m.in_console]
    return [latency, whole_run]


def present_figures(table: pd.DataFrame) -> list[list[tuple[str, Optional[str]]]]:
    """:func:`console_figures` less those no run has (queue wait where no engine reports it)."""
    return [
        [f for f in group if column(*f) in table.columns and table[column(*f)].notna().any()]
        for group in console_figures()
    ]


def figure_label(metric: str, stat: Optional[str]) -> str:
    m = metrics.get(metric)
    if stat:
        return f"{m.label} {stat}"
    return f"{m.label} ({m.unit})" if getattr(m, "source", None) else m.label


def figure_text(row: Mapping[Hashable, Any], metric: str, stat: Optional[str]) -> str:
    return fmt(row[column(metric, stat)], metrics.get(metric).digits)


def count_text(value: Any) -> str:
    return str(int(value)) if html.is_num(value) else "–"


def figure_rows(table: pd.DataFrame, figures: Sequence[tuple[str, Optional[str]]], counts: bool) -> list[list[str]]:
    """One row of cells per run: its label, ok and failed requests when ``counts``, then the figures."""
    return [
        [
            row["run"],
            *([count_text(row["ok"]), count_text(row["failed"])] if counts else []),
            *(figure_text(row, m, st) for m, st in figures),
        ]
        for row in table.to_dict("records")
    ]


def format_runs_table(table: pd.DataFrame) -> str:
    """The figures of each run: latencies, then requests and throughputs (fits 120 columns)."""
    latency, whole_run = present_figures(table)
    heads = [header_lines(figure_label(m, st), metrics.get(m).unit) for m, st in latency]
    lines = text_table([["run"], *heads], figure_rows(table, latency, counts=False))
    heads = [["ok"], ["failed"], *(header_lines(figure_label(m, st), metrics.get(m).unit) for m, st in whole_run)]
    lines += [""] + text_table([["run"], *heads], figure_rows(table, whole_run, counts=True))
    return "\n".join(lines)


def run_description(run: Run) -> dict[str, str]:
    """What a run was, in full: the label's long form."""
    s = run.summary
    return {
        "backend": backend_text(s) + (f" · measured by {client_text(s)}" if s.source else ""),
        "engine": engine_text(s),
        "model": model_text(s),
        "workload": str(s.workload.get("name")),
        "load": load_text(s),
        "status": str(s.status),
        "folder": str(run.path),
    }


def format_runs_list(runs: Sequence[Run]) -> str:
    """Each label and what its run was, wrapped to 120 columns; the first run is the baseline."""
    width = max(len(r.label) for r in runs)
    lines = ["runs (the first is the baseline):"]
    for run in runs:
        first = f"  {run.label.ljust(width)}  "
        lines += wrap(" · ".join(run_description(run).values()), " " * len(first), first=first)
    return "\n".join(lines)


# --- token agreement (computed in harness/reports/agreement.py) ------------------------------------

# --- the page -----------------------------------------------------------------------------
