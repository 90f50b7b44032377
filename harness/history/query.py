"""Reading the history with DuckDB (in memory: no database file is written anywhere).

Every Parquet file under ``ROOT/runs`` is read at once,
``read_parquet('ROOT/runs/**/*.parquet', hive_partitioning=true, union_by_name=true)``: the
folder names give ``engine`` and ``date``, and files written by older or newer versions (with
fewer or more columns) read together, a missing column as NULL.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Optional

import duckdb
import pandas as pd

from core.errors import HarnessError
from harness.history.store import DECISIONS, RUNS

# what a series carries beside its values (the trend's hover, the alert's text)
SERIES_COLUMNS = ("run_id", "started_at", "git_commit", "engine_version", "tainted", "taint", "batch")


class EmptyHistory(HarnessError):
    """The history holds nothing (yet) under the asked-for folder."""


@dataclass(frozen=True)
class RunFilter:
    engine: Optional[str] = None
    point: Optional[str] = None  # a point id, or its first characters
    since: Optional[date] = None


def parquet_source(root: Path, kind: str = RUNS) -> str:
    folder = Path(root) / kind
    if not any(folder.glob("**/*.parquet")):
        raise EmptyHistory(
            f"the history at {root} holds no {kind} yet (add some: python -m harness.history add {root} RUN…)"
        )
    pattern = str(folder / "**" / "*.parquet").replace("'", "''")
    return f"read_parquet('{pattern}', hive_partitioning=true, union_by_name=true)"


def runs(root: Path, where: RunFilter = RunFilter()) -> pd.DataFrame:
    """Every run in the history (or those the filter keeps), oldest first."""
    clauses, params = [], []
    if where.engine:
        clauses.append("engine = ?")
        params.append(where.engine)
    if where.point:
        clauses.append("starts_with(point, ?)")
        params.append(where.point)
    if where.since:
        clauses.append("started_at >= ?")
        params.append(pd.Timestamp(where.since).to_pydatetime())
    sql = f"SELECT * FROM {parquet_source(root)}"
    if clauses:
        sql += " WHERE " + " AND ".join(clauses)
    sql += " ORDER BY started_at, run_id"
    with duckdb.connect() as con:
        frame = con.execute(sql, params).df()
    frame["date"] = frame["date"].astype(str)  # DuckDB reads the partition as a DATE
    return frame


def decisions(root: Path) -> pd.DataFrame:
    """Every A/B decision in the history, by date."""
    with duckdb.connect() as con:
        return con.execute(f"SELECT * FROM {parquet_source(root, DECISIONS)} ORDER BY date, id").df()


def series(frame: pd.DataFrame, point: str, column: str) -> pd.DataFrame:
    """One point's values of one figure column over time (oldest first), with
    :data:`SERIES_COLUMNS`; runs without the figure are left out."""
    if column not in frame.columns:
        return pd.DataFrame(columns=[*SERIES_COLUMNS, "value"])
    rows = frame[(frame["point"] == point) & frame[column].notna()]
    out = rows[[c for c in SERIES_COLUMNS if c in rows.columns]].copy()
    out["value"] = rows[column].astype(float)
    out["tainted"] = out["tainted"].fillna(False).astype(bool) if "tainted" in out else False
    return out.sort_values(["started_at", "run_id"], kind="stable").reset_index(drop=True)


def points(frame: pd.DataFrame) -> list[tuple[str, str]]:
    """(point id, label) of every point, in the order first seen."""
    seen = frame.drop_duplicates("point")
    return list(zip(seen["point"], seen["point_label"]))
