"""Sweeps: many load points against as few engine loads as possible, and what they leave.

A Hydra multirun (``python -m harness -m workload.concurrency=1,2,4,8``) calls
:func:`run_sweep_point` once per point. Consecutive points whose engine settings match
share one loaded engine (:class:`harness.run.session.SessionCache`); between them the engine's
prefix cache is emptied where the engine allows. A point that fails is recorded as failed,
in one line, and the sweep goes on (after an engine death, the next point reloads).

The sweep folder holds, refreshed after every point (a killed sweep keeps them):

- ``sweep.json`` — one entry per point: overrides, run folder(s), status, load_s, whether
  the engine was reused, key figures (mean and 95 % CI across repeats); ``engine_loads``;
  for an SLO search, the probes and the answer (``slo_max_rate`` / ``slo_max_concurrency``);
- ``compare.html`` (and the CSVs of ``python -m harness.compare``) over the points;
- ``server.log`` in server mode (one server for the points that share it).

``resume=true`` skips a point whose run folder under ``output_root`` finished (complete or
saturated) with the same resolved config (``config_sha256``). ``repeat=N`` runs a point N
times into ``repeat-1/ … repeat-N/`` of its folder.
"""
from __future__ import annotations

import contextlib
import copy
import fcntl
import functools
import json
import logging
import math
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

from core.errors import EngineFailed, HarnessError
from harness.results import metrics as registry
from harness.config import RunConfig, config_sha256
from harness.results.store import (
    COMPLETE, FAILED, FINISHED, INTERRUPTED, SATURATED, RunSummary, holds_run, is_run_dir, load_summary, write_json,
)
from harness.run.point import RunOutcome, run_point
from harness.run.session import SessionCache

log = logging.getLogger("harness")

SWEEP_JSON = "sweep.json"
SKIPPED = "skipped"  # resume: a finished run of the same config exists
# the figures sweep.json keeps per point: (metric key, statistic; None for run metrics)
KEY_FIGURES: tuple[tuple[str, Optional[str]], ...] = (
    ("ttft_s", "p50"), ("ttft_s", "p99"), ("tpot_s", "p50"), ("tpot_s", "p99"), ("itl_s", "p99"), ("e2e_s", "p50"),
    ("output_tokens_per_s", None), ("requests_per_s", None), ("goodput_requests_per_s", None), ("slo_attainment", None),
)

# One engine kept across the points of a sweep run in this process (Hydra's basic launcher
# runs every point here; other launchers run each point in a process of its own).
SESSIONS = SessionCache()


def figure_name(metric: str, stat: Optional[str]) -> str:
    return f"{metric}.{stat}" if stat else metric


def key_figures(summary: RunSummary) -> dict[str, Optional[float]]:
    """KEY_FIGURES, and the run metrics with a source (GPU) where the run has them."""
    figures = {figure_name(m, s): summary.stat(m, s or "") for m, s in KEY_FIGURES}
    for key, metric in registry.RUN_METRICS.items():
        if metric.source and summary.stat(key) is not None:
            figures[key] = summary.stat(key)
    return figures


# --- statistics across repeats -------------------------------------------------------------

# two-sided 95 % quantiles of Student's t for 1…30 degrees of freedom; 1.96 beyond
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def mean_ci95(values: Sequence[Optional[float]]) -> dict[str, Any]:
    """Mean of the repeats and its 95 % confidence interval: mean ± t(0.975, n−1) · s / √n."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    out: dict[str, Any] = {"n": len(vals), "mean": None, "ci_low": None, "ci_high": None, "values": list(values)}
    if not vals:
        return out
    mean = sum(vals) / len(vals)
    out["mean"] = mean
    if len(vals) > 1:
        s = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
        t = _T95[len(vals) - 2] if len(vals) - 1 <= len(_T95) else 1.96
        half = t * s / math.sqrt(len(vals))
        out["ci_low"], out["ci_high"] = mean - half, mean + half
    return out


def combine_repeats(summaries: Sequence[RunSummary]) -> dict[str, Any]:
    """A point's figures: the value of a single run, or mean and 95 % CI over its repeats."""
    per_run = [key_figures(s) for s in summaries]
    if len(per_run) == 1:
        return per_run[0]
    names = list(dict.fromkeys(name for f in per_run for name in f))
    return {name: mean_ci95([f.get(name) for f in per_run]) for name in names}


# --- sweep.json ---------------------------------------------------------------------------


@contextlib.contextmanager
def locked_sweep(sweep_dir: Path) -> Iterator[dict[str, Any]]:
    """sweep.json read, handed out for changes and written back, under a file lock (points
    run by a launcher in other processes update it too)."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    with open(sweep_dir / (SWEEP_JSON + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            path = sweep_dir / SWEEP_JSON
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                data = {"sweep_dir": str(sweep_dir), "started_at": _now(), "engine_loads": 0, "points": []}
            yield data
            data["updated_at"] = _now()
            data["points"].sort(key=lambda p: p.get("index", 0))
            write_json(path, data)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def record_point(sweep_dir: Path, entry: dict[str, Any]) -> None:
    with locked_sweep(sweep_dir) as data:
        data["points"] = [p for p in data["points"] if p.get("index") != entry["index"]] + [entry]


def count_engine_load(sweep_dir: Path) -> None:
    with locked_sweep(sweep_dir) as data:
        data["engine_loads"] = data.get("engine_loads", 0) + 1


def read_sweep(sweep_dir: Path) -> dict[str, Any]:
    return json.loads((Path(sweep_dir) / SWEEP_JSON).read_text())


def point_run_dirs(sweep: dict[str, Any]) -> list[Path]:
    """Every finished run folder of a sweep's points (all repeats), in point order."""
    out = []
    for point in sweep.get("points", []):
        for d in point.get("run_dirs") or []:
            if is_run_dir(Path(d)):
                out.append(Path(d))
    return out


def refresh_compare(sweep_dir: Path) -> Optional[Path]:
    """compare.html (and compare.csv) of the sweep's points so far; a failure costs only the page."""
    try:
        from harness.reports.compare.runs import write_comparison

        runs = point_run_dirs(read_sweep(sweep_dir))
        if len(runs) < 1:
            return None
        return write_comparison(runs, sweep_dir, quiet=True)
    except Exception as exc:  # noqa: BLE001 - the points' own folders are complete regardless
        log.warning("compare.html of the sweep not refreshed (%s: %s)", type(exc).__name__, exc)
        return None


# --- resume -------------------------------------------------------------------------------


def find_finished(output_root: Path, sha: str) -> dict[int, Path]:
    """Finished runs (complete or saturated) of a config under output_root: repeat index → folder."""
    return _finished_index(str(Path(output_root).resolve())).get(sha, {})


@functools.lru_cache(maxsize=4)
def _finished_index(root: str) -> dict[str, dict[int, Path]]:
    """config_sha256 → repeat index → folder, for every finished run under ``root``; read once
    per process (the points a resumed sweep runs have configs of their own)."""
    index: dict[str, dict[int, Path]] = {}
    for pattern in ("*/summary.json", "*/*/summary.json", "*/*/*/summary.json"):
        for path in Path(root).glob(pattern):
            try:
                summary = load_summary(path.parent)
            except (OSError, ValueError):
                continue
            if summary.get("config_sha256") and summary.get("status") in FINISHED:
                repeat = (summary.get("repeat") or {}).get("index", 1)
                index.setdefault(summary["config_sha256"], {}).setdefault(repeat, path.parent)
    return index


def set_aside_unfinished(run_dir: Path) -> Optional[Path]:
    """A sweep resumed into its own folders (``hydra.sweep.dir`` given again): the run a point
    left there unfinished (interrupted, failed, killed) is renamed ``<name>.unfinished-<k>``,
    kept whole, and the point runs again in its place. Returns where it went."""
    run_dir = Path(run_dir)
    if not holds_run(run_dir):
        return None
    k = 1
    while (aside := run_dir.with_name(f"{run_dir.name}.unfinished-{k}")).exists():
        k += 1
    run_dir.rename(aside)
    log.info("resume: the unfinished run in %s is kept as %s; the point runs again", run_dir, aside.name)
    return aside


# --- one point ----------------------------------------------------------------------------


def new_entry(index: int, overrides: Sequence[str], run_dir: Path, **fields: Any) -> dict[str, Any]:
    """A point's entry in sweep.json, as it stands before the point has run (failed until it does)."""
    return {"index": index, "overrides": list(overrides), "run_dir": str(run_dir), "run_dirs": [], "status": FAILED,
            "error": None, "load_s": 0.0, "engine_reused": False, "prefix_cache_reset": None, "figures": {}, **fields}


def run_sweep_point(cfg: RunConfig, run_dir: Path, sweep_dir: Path, index: int, overrides: Sequence[str],
                    single: bool = False, keep_engine: bool = True) -> dict[str, Any]:
    """Run one point of a sweep (all its repeats) and record it in sweep.json; never raises
    for a failed point (KeyboardInterrupt still ends the sweep, after recording the point).

    ``single``: a plain run (no multirun); its session is closed at the end and no sweep.json
    is written unless it has repeats. ``keep_engine=False`` closes the engine after the point
    (a launcher's worker process), as does ``sweep.reuse_engine=false``.
    """
    sha = config_sha256(cfg)
    entry = new_entry(index, overrides, run_dir, config_sha256=sha, repeats=cfg.repeat)
    write_sweep = not single or cfg.repeat > 1
    summaries: list[RunSummary] = []
    done = find_finished(Path(cfg.output_root), sha) if cfg.resume else {}
    try:
        for i in range(1, cfg.repeat + 1):
            rep_dir = run_dir if cfg.repeat == 1 else run_dir / f"repeat-{i}"
            if i in done:
                log.info("resume: point %d%s already finished in %s", index, f" repeat {i}" if cfg.repeat > 1 else "", done[i])
                entry["run_dirs"].append(str(done[i]))
                summaries.append(RunSummary.from_dict(load_summary(done[i])))
                continue
            if cfg.resume:
                set_aside_unfinished(rep_dir)
            outcome = _run_once(cfg, rep_dir, run_dir if single else sweep_dir, sweep_dir if write_sweep else None, entry, i)
            summaries.append(outcome.summary)
            entry["run_dirs"].append(str(rep_dir))
            if write_sweep and i < cfg.repeat:
                record_point(sweep_dir, dict(entry, status="running", figures=combine_repeats(summaries)))
        entry.update(_entry_status(summaries, skipped=len(done) >= cfg.repeat), figures=combine_repeats(summaries))
    except KeyboardInterrupt:
        entry.update(status=INTERRUPTED, error="interrupted by the user (Ctrl-C)")
        raise
    except HarnessError as exc:
        entry.update(status=FAILED, error=str(exc))
        if isinstance(exc, EngineFailed) or SESSIONS.session is None or SESSIONS.session.fatal_error():
            SESSIONS.close()  # the next point loads a fresh engine
        if summaries:
            entry["figures"] = combine_repeats(summaries)
        if single:
            raise  # a plain run ends with its one error line and a non-zero exit
        print(f"error: point {index} ({' '.join(overrides) or 'no overrides'}) failed: {exc}", file=sys.stderr)
    finally:
        if write_sweep:
            record_point(sweep_dir, entry)
            if cfg.sweep.compare_html:
                refresh_compare(sweep_dir)
        if single or not keep_engine or not cfg.sweep.reuse_engine:
            SESSIONS.close()
    return entry


def _run_once(cfg: RunConfig, run_dir: Path, workdir: Path, sweep_dir: Optional[Path], entry: dict[str, Any],
              repeat_index: int) -> RunOutcome:
    """One run of a point on the shared session (loaded here if it is not yet)."""
    session = SESSIONS.get(cfg, workdir, reuse=cfg.sweep.reuse_engine)
    reset = session.reset_prefix_cache() if session.loaded and cfg.sweep.reset_prefix_cache else None
    repeat = {"index": repeat_index, "of": cfg.repeat} if cfg.repeat > 1 else None

    def on_loaded() -> None:
        entry["load_s"] += session.load_s or 0.0
        if sweep_dir is not None:
            count_engine_load(sweep_dir)

    if repeat_index == 1:
        entry["engine_reused"], entry["prefix_cache_reset"] = session.loaded, reset
    outcome = run_point(session, cfg, run_dir, repeat=repeat, prefix_cache_reset=reset, on_loaded=on_loaded,
                        overrides=entry["overrides"])
    if repeat_index == 1:  # a fresh engine's cache is emptied after its warm-up instead
        entry["prefix_cache_reset"] = (outcome.summary.engine or {}).get("prefix_cache_reset", reset)
    return outcome


def _entry_status(summaries: Sequence[RunSummary], skipped: bool) -> dict[str, Any]:
    if skipped:
        return {"status": SKIPPED, "error": None}
    bad = [s for s in summaries if not s.finished]
    if bad:
        return {"status": bad[0].status, "error": bad[0].error}
    return {"status": SATURATED if any(s.status == SATURATED for s in summaries) else COMPLETE, "error": None}


# --- the table printed at the end ---------------------------------------------------------

TABLE_FIGURES = (("ttft_s", "p50"), ("ttft_s", "p99"), ("tpot_s", "p50"), ("output_tokens_per_s", None), ("requests_per_s", None))


def format_sweep(sweep: dict[str, Any]) -> str:
    """One row per point: overrides, status, load, key figures (mean ± CI half-width across repeats)."""
    import pandas as pd

    rows = []
    points = sweep.get("points", [])
    varying = varying_overrides([p.get("overrides") or [] for p in points])
    sourced = [(k, None) for k, m in registry.RUN_METRICS.items()
               if m.source and any(k in (p.get("figures") or {}) for p in points)]
    for p, changed in zip(points, varying):
        row: dict[str, Any] = {"point": p.get("index"), "overrides": " ".join(changed) or "-",
                               "status": p.get("status"), "load s": f"{p.get('load_s') or 0:.1f}",
                               "reused": "yes" if p.get("engine_reused") else "no"}
        for metric, stat in (*TABLE_FIGURES, *sourced):
            m = registry.get(metric)
            label = f"{m.label} {stat}" if stat else m.label
            row[f"{label} ({m.unit})"] = _figure_text(m, (p.get("figures") or {}).get(figure_name(metric, stat)))
        rows.append(row)
    lines = []
    if rows:
        lines.append(pd.DataFrame(rows).set_index("point").to_string())
    lines.append(f"engine loads: {sweep.get('engine_loads', 0)} for {len(rows)} points")
    search = sweep.get("slo_search")
    if search:
        lines.append(search.get("answer_text", ""))
    return "\n".join(lines)


def varying_overrides(overrides: Sequence[Sequence[str]]) -> list[list[str]]:
    """Each point's overrides less those every point shares (what the sweep varies)."""
    common = set.intersection(*(set(o) for o in overrides)) if overrides else set()
    return [[o for o in point if o not in common] for point in overrides]


def _figure_text(metric: type[registry.Metric], value: Any) -> str:
    if isinstance(value, dict):  # repeats: mean ± half-width of the 95 % CI
        mean = value.get("mean")
        if mean is None:
            return "-"
        text = f"{metric.show(mean):.{metric.digits}f}"
        if value.get("ci_high") is not None:
            text += f" ± {metric.show(value['ci_high'] - mean):.{metric.digits}f}"
        return text
    return "-" if value is None else f"{metric.show(value):.{metric.digits}f}"


def _now() -> str:
    return datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")


def with_load(cfg: RunConfig, key: str, value: float) -> RunConfig:
    """A copy of the config at another load (``workload.rate`` or ``workload.concurrency``)."""
    new = copy.deepcopy(cfg)
    setattr(new.workload, key, int(value) if key == "concurrency" else value)
    return new
