"""The history on disk: one immutable Parquet file per run, and per A/B decision.

    ROOT/runs/engine=<engine>/date=<YYYY-MM-DD>/<run_id>.parquet
    ROOT/decisions/date=<YYYY-MM-DD>/<decision_id>.parquet

A file is written under a hidden temporary name in its final folder, then linked to its name
(``os.link`` fails when the name exists, so a file is never overwritten, and a reader never
sees half of one: ``**/*.parquet`` does not match the temporary name). No database file is
written: parallel CI jobs each add their own files, and DuckDB reads them all
(:mod:`harness.history.query`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

import pyarrow as pa
import pyarrow.parquet as pq

from core.errors import HarnessError
from harness.history.record import run_row, short_hash, sweep_batch
from harness.results.schema import FINISHED, SUMMARY
from harness.results.store import is_run_dir
from harness.results.sweep_file import SWEEP_JSON, point_run_dirs, read_sweep

RUNS = "runs"
DECISIONS = "decisions"
ADDED, ALREADY_THERE, SKIPPED = "added", "already there", "skipped"


@dataclass(frozen=True)
class Stored:
    """What an add did: ``status`` is "added", "already there" or "skipped: …" (a run that did not
    finish; nothing written); ``path`` is the file."""

    id: str
    path: Path
    status: str


def partition_value(value: Any) -> str:
    """A value safe as a folder name (letters, digits, ``.``, ``_``, ``-``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(value or "unknown")) or "unknown"


def run_path(root: Path, row: Mapping[str, Any]) -> Path:
    return (
        Path(root)
        / RUNS
        / f"engine={partition_value(row['engine'])}"
        / f"date={partition_value(row['date'])}"
        / f"{row['run_id']}.parquet"
    )


def add_run(root: Path, run_dir: Path, batch: Optional[str] = None) -> Stored:
    """Append a finished run to the history at ``root`` (a no-op when it is already there, or
    when the run failed or was interrupted); ``batch``: the sweep it was made in."""
    run_dir = Path(run_dir)
    if not is_run_dir(run_dir):
        raise HarnessError(f"{run_dir} is not a finished run folder (no summary.json)")
    row = run_row(run_dir, batch)
    if row["status"] not in FINISHED:  # its figures are not a measurement of the point
        return Stored(row["run_id"], run_path(root, row), f"{SKIPPED}: it ended {row['status']}")
    return write_once(run_path(root, row), row["run_id"], row)


def add_decision(root: Path, decision: Mapping[str, Any]) -> Stored:
    """Append an A/B decision: any flat dict of scalars and lists (a nested dict is flattened
    with ``_``). Its id is ``decision["id"]`` or a hash of its contents; its date
    ``decision["date"]``, else the day of ``decision["started_at"]``, else today (UTC)."""
    row = flatten(decision)
    decision_id = partition_value(row.get("id") or short_hash(row))
    row["id"] = decision_id
    day = row.get("date") or str(row.get("started_at") or "")[:10] or datetime.now(timezone.utc).date().isoformat()
    row["date"] = str(day)
    path = Path(root) / DECISIONS / f"date={partition_value(day)}" / f"{decision_id}.parquet"
    return write_once(path, decision_id, row)


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{name}_"))
        elif isinstance(value, tuple):
            out[name] = list(value)
        elif isinstance(value, Path):
            out[name] = str(value)
        else:
            out[name] = value
    return out


def write_once(path: Path, item_id: str, row: Mapping[str, Any]) -> Stored:
    """Write ``row`` as a one-row Parquet file at ``path`` unless a file is already there."""
    if path.exists():
        return Stored(item_id, path, ALREADY_THERE)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.stem}.{os.getpid()}.tmp"
    try:
        pq.write_table(one_row_table(row), tmp)
        try:
            os.link(tmp, path)
        except FileExistsError:  # another process added the same run meanwhile
            return Stored(item_id, path, ALREADY_THERE)
    finally:
        tmp.unlink(missing_ok=True)
    return Stored(item_id, path, ADDED)


def one_row_table(row: Mapping[str, Any]) -> pa.Table:
    columns = {}
    for key, value in row.items():
        if isinstance(value, list):  # a list column; empty lists of text stay typed
            kind = pa.list_(pa.string()) if not value or all(isinstance(v, str) for v in value) else None
            columns[key] = pa.array([value], type=kind)
        else:
            columns[key] = pa.array([value])
    return pa.table(columns)


def run_dirs_in(path: Path) -> list[Path]:
    """The runs a path names: a run folder; a sweep folder's points (sweep.json); else every
    run folder one or two levels below."""
    return [run_dir for run_dir, _ in batched_run_dirs_in(path)]


def batched_run_dirs_in(path: Path) -> list[tuple[Path, Optional[str]]]:
    """:func:`run_dirs_in`, each run with its batch: a sweep's, or None (a batch of its own)."""
    path = Path(path)
    if is_run_dir(path):
        return [(path, None)]
    if not path.is_dir():
        raise HarnessError(f"{path} is not a folder: give a run folder, a sweep folder or a folder of runs")
    if (path / SWEEP_JSON).is_file():
        try:
            sweep = read_sweep(path)
        except ValueError:
            pass
        else:
            batch = sweep_batch(path, sweep.get("started_at"))
            return [(run_dir, batch) for run_dir in point_run_dirs(sweep)]
    found = sorted(path.glob(f"*/{SUMMARY}")) + sorted(path.glob(f"*/*/{SUMMARY}"))
    if not found:
        raise HarnessError(f"{path} holds no run folder (no summary.json in it or one or two levels below)")
    return [(p.parent, None) for p in found]


def add_runs(root: Path, paths: Iterable[Path]) -> list[Stored]:
    """:func:`add_run` for every run the paths name (see :func:`run_dirs_in`)."""
    return [add_run(root, run_dir, batch) for path in paths for run_dir, batch in batched_run_dirs_in(path)]


def rows_in(path: Path) -> list[dict[str, Any]]:
    """The history rows of the finished runs a path names (a sweep's share its batch), not stored."""
    rows = [run_row(run_dir, batch) for run_dir, batch in batched_run_dirs_in(path)]
    return [r for r in rows if r["status"] in FINISHED]
