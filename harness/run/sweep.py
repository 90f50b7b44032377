"""Sweeps: many load points against as few engine loads as possible, and what they leave.

A Hydra multirun (``python -m harness -m workload.concurrency=1,2,4,8``) calls
:func:`run_sweep_point` once per point. Consecutive points whose engine settings match
share one loaded engine (:class:`harness.run.session.SessionCache`); between them the engine's
prefix cache is emptied where the engine allows. A point that fails is recorded as failed,
in one line, and the sweep goes on (after an engine death, the next point reloads).

The sweep folder holds, refreshed after every point (a killed sweep keeps them):

- ``sweep.json`` — one entry per point: overrides, run folder(s), status, load_s, whether
  the engine was reused, key figures (mean and 95 % CI across repeats); ``engine_loads``;
  for an SLO search, the probes with their runs and verdicts and the answer (``capacity_low`` –
  ``capacity_high``; ``slo_max_rate`` / ``slo_max_concurrency`` = capacity_low);
- ``compare.html`` (and the CSVs of ``python -m harness.compare``) over the points;
- ``server.log`` in server mode (one server for the points that share it).

``resume=true`` skips a point whose run folder under ``output_root`` finished (complete or
saturated) with the same resolved config (``config_sha256``). ``repeat=N`` runs a point N
times into ``repeat-1/ … repeat-N/`` of its folder.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from core.errors import DiskFull, EngineFailed, HarnessError
from core.interrupts import interrupts_kept
from harness.config import RunConfig, config_sha256
from harness.history.store import add_run
from harness.reports.compare.outputs import write_comparison
from harness.results.schema import COMPLETE, FAILED, FINISHED, INTERRUPTED, INTERRUPTED_ERROR, SATURATED, RunSummary
from harness.results.store import holds_run, is_run_dir, load_summary
from harness.results.sweep_file import (
    SKIPPED,
    combine_repeats,
    combine_stages,
    count_engine_load,
    new_entry,
    point_run_dirs,
    read_sweep,
    record_point,
)
from harness.run.point import RunOutcome, run_point
from harness.run.session import SessionCache

log = logging.getLogger("harness")

# One engine kept across the points of a sweep run in this process (Hydra's basic launcher
# runs every point here; other launchers run each point in a process of its own).
SESSIONS = SessionCache()


# --- statistics across repeats -------------------------------------------------------------

# --- sweep.json ---------------------------------------------------------------------------


def refresh_compare(sweep_dir: Path) -> Optional[Path]:
    """compare.html (and compare.csv) of the sweep's points so far; a failure costs only the page."""
    try:
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
    reopen_log_files(run_dir)
    log.info("resume: the unfinished run in %s is kept as %s; the point runs again", run_dir, aside.name)
    return aside


def reopen_log_files(folder: Path) -> None:
    """The log files open in ``folder`` (Hydra's harness.log for this point) opened again at
    their path, after the folder was renamed: the new run's lines go to its own folder."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename).parent == folder.absolute():
            handler.acquire()
            try:
                folder.mkdir(parents=True, exist_ok=True)
                old = handler.stream
                handler.stream = open(handler.baseFilename, "a", encoding=handler.encoding)
                if old is not None:
                    old.close()
            finally:
                handler.release()


# --- one point ----------------------------------------------------------------------------


def add_to_history(root: Path, run_dirs: list[str]) -> None:
    """The point's finished runs into the history; a failure costs a warning, never the run."""
    for run_dir in run_dirs:
        try:
            stored = add_run(root, Path(run_dir))
            print(f"history: {stored.status}: {stored.path}", flush=True)
        except Exception as exc:  # noqa: BLE001 - the measurement is on disk already
            print(f"warning: {run_dir} not added to the history {root}: {exc}", file=sys.stderr)


def run_sweep_point(
    cfg: RunConfig,
    run_dir: Path,
    sweep_dir: Path,
    index: int,
    overrides: Sequence[str],
    single: bool = False,
    keep_engine: bool = True,
) -> dict[str, Any]:
    """Run one point of a sweep (all its repeats) and record it in sweep.json; never raises
    for a failed point (KeyboardInterrupt still ends the sweep, after recording the point; a
    full disk ends it too, with nothing more written).

    ``single``: a plain run (no multirun): no sweep.json is written unless it has repeats, and
    its error is raised. ``keep_engine=False`` closes the engine after the point (a plain run, a
    launcher's worker process), as does ``sweep.reuse_engine=false``; a held engine
    (harness/run/held.py) keeps it for the next run.
    """
    sha = config_sha256(cfg)
    entry = new_entry(index, overrides, run_dir, config_sha256=sha, repeats=cfg.repeat)
    write_sweep = not single or cfg.repeat > 1
    summaries: list[RunSummary] = []
    done = find_finished(Path(cfg.output_root), sha) if cfg.resume else {}
    disk_full = False
    rep_dir: Optional[Path] = None
    try:
        with interrupts_kept():
            for i in range(1, cfg.repeat + 1):
                rep_dir = run_dir if cfg.repeat == 1 else run_dir / f"repeat-{i}"
                if i in done:
                    log.info(
                        "resume: point %d%s already finished in %s",
                        index,
                        f" repeat {i}" if cfg.repeat > 1 else "",
                        done[i],
                    )
                    entry["run_dirs"].append(str(done[i]))
                    summaries.append(RunSummary.from_dict(load_summary(done[i])))
                    continue
                if cfg.resume:
                    set_aside_unfinished(rep_dir)
                outcome = _run_once(
                    cfg, rep_dir, run_dir if single else sweep_dir, sweep_dir if write_sweep else None, entry, i
                )
                summaries.append(outcome.summary)
                entry["run_dirs"].append(str(rep_dir))
                if write_sweep and i < cfg.repeat:
                    record_point(sweep_dir, dict(entry, status="running", figures=combine_repeats(summaries)))
            entry.update(_entry_status(summaries, skipped=len(done) >= cfg.repeat), figures=combine_repeats(summaries))
            if any(s.stages for s in summaries):
                entry["stages"] = combine_stages(summaries)
    except KeyboardInterrupt:
        entry.update(status=INTERRUPTED, error=INTERRUPTED_ERROR)
        if rep_dir is not None and str(rep_dir) not in entry["run_dirs"] and is_run_dir(rep_dir):
            with contextlib.suppress(OSError, ValueError):  # the interrupted run's own summary, when it wrote one
                summaries.append(RunSummary.from_dict(load_summary(rep_dir)))
                entry["run_dirs"].append(str(rep_dir))
        if summaries:
            entry["figures"] = combine_repeats(summaries)
        raise
    except HarnessError as exc:
        entry.update(status=FAILED, error=str(exc))
        if isinstance(exc, DiskFull):
            disk_full = True
            SESSIONS.close()
            raise  # no later point could write its folder either, nor sweep.json
        if isinstance(exc, EngineFailed) or SESSIONS.session is None or SESSIONS.session.fatal_error():
            SESSIONS.close()  # the next point loads a fresh engine
        if summaries:
            entry["figures"] = combine_repeats(summaries)
        if single:
            raise  # a plain run ends with its one error line and a non-zero exit
        print(f"error: point {index} ({' '.join(overrides) or 'no overrides'}) failed: {exc}", file=sys.stderr)
    finally:
        if cfg.history:
            add_to_history(Path(cfg.history), entry.get("run_dirs") or [])
        if write_sweep and not disk_full:
            record_point(sweep_dir, entry)
            if cfg.sweep.compare_html:
                refresh_compare(sweep_dir)
        if not keep_engine or not cfg.sweep.reuse_engine:
            SESSIONS.close()
    return entry


def _run_once(
    cfg: RunConfig, run_dir: Path, workdir: Path, sweep_dir: Optional[Path], entry: dict[str, Any], repeat_index: int
) -> RunOutcome:
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
    outcome = run_point(
        session,
        cfg,
        run_dir,
        repeat=repeat,
        prefix_cache_reset=reset,
        on_loaded=on_loaded,
        overrides=entry["overrides"],
    )
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


def with_load(cfg: RunConfig, key: str, value: float) -> RunConfig:
    """A copy of the config at another load (``workload.rate`` or ``workload.concurrency``)."""
    new = copy.deepcopy(cfg)
    setattr(new.workload, key, int(value) if key == "concurrency" else value)
    return new
