"""Writing and reading a run folder (its files: :mod:`harness.results.schema`).

- :class:`RunWriter` — each finished request's row to ``requests.jsonl`` as it lands (a crash
  keeps it), and in memory only what the summary reads (:class:`harness.results.kept.KeptRequests`);
  the tables when the run ends (also on error or Ctrl-C), requests.parquet from requests.jsonl in
  row groups, so a long run's end holds one group at a time; JSON written atomically;
- :func:`check_run_dir_free` — claims the folder for one run;
- :func:`load_summary` — summary.json: an older schema version read as it is, a newer major
  refused in one line, the hashes in the current form (harness/results/migrations.py);
- :func:`load_run` — a folder back as a :class:`RunResult`, also a killed run's (its figures
  rebuilt from ``requests.jsonl`` when it left no ``summary.json``). Report and compare render
  it and never recompute what the summary holds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import math
import os
import typing
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Optional, TextIO

import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from core.errors import DiskFull, HarnessError
from core.text import valid_text
from harness.config import SLOConfig
from harness.results.kept import KeptRequests
from harness.results.metrics import ENGINE_STAGES
from harness.results.migrations import current_hashes
from harness.results.record import RequestRecord
from harness.results.schema import (
    CLAIM,
    CONFIG,
    ENV,
    GPU,
    GPU_TABLE_COLUMNS,
    MEMORY,
    REQUEST_COLUMNS,
    REQUESTS_JSONL,
    REQUESTS_PARQUET,
    SCHEMA_VERSION,
    SERVER_METRICS,
    SERVER_METRICS_COLUMNS,
    SUMMARY,
    TEXT_COLUMNS,
    UNVERSIONED_SCHEMA,
    WORKLOAD,
    RunResult,
    RunSummary,
    schema_major,
)
from harness.results.summary import summarize
from harness.telemetry import gpu_phase


def clean_text(value: Any) -> Optional[str]:
    """None, or a string that encodes as UTF-8 (lone surrogates replaced by U+FFFD)."""
    if value is None:
        return None
    return valid_text(value if isinstance(value, str) else str(value))


# --- writing ------------------------------------------------------------------------------


class RunWriter:
    def __init__(
        self,
        run_dir: Path,
        save_output_text: bool = True,
        tokenize: Optional[Callable[[list[str]], list[list[int]]]] = None,
    ):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        # the model's tokenizer over a batch of texts: the ids of HTTP replies that came
        # without them (RequestRecord.ids_text), counted here, off the event loop
        self.tokenize = tokenize

        self.save_output_text = save_output_text
        self.records = KeptRequests(stat_keys=ENGINE_STAGES)
        self._jsonl: Optional[TextIO] = None  # requests.jsonl, opened at the first row
        self.disk_full = False  # the folder's disk filled: rows are kept in memory only, nothing more is written

    def write_json(self, name: str, data: Any) -> None:
        with self._full_disk_ends_the_run():
            write_json(self.run_dir / name, data)

    def write_chunks(self, name: str, chunks: Iterable[str]) -> None:
        """A file written piece by piece (a long run's workload.json), atomically."""
        with self._full_disk_ends_the_run():
            path = self.run_dir / name
            tmp = path.with_suffix(path.suffix + ".tmp")
            try:
                with open(tmp, "w", encoding="utf-8") as f:
                    for chunk in chunks:
                        f.write(chunk)
            except OSError:
                tmp.unlink(missing_ok=True)  # half a file would hold the space a full disk lacks
                raise
            tmp.replace(path)

    def write_text(self, name: str, text: str) -> None:
        with self._full_disk_ends_the_run():
            (self.run_dir / name).write_text(text, encoding="utf-8", errors="replace")

    @contextlib.contextmanager
    def _full_disk_ends_the_run(self) -> Iterator[None]:
        """A file of the run folder that does not fit on its disk: :class:`DiskFull`, in one line."""
        try:
            yield
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or self.disk_full:
                raise
            raise self._disk_filled(exc) from None

    def write_summary(self, summary: RunSummary) -> None:
        self.write_json(SUMMARY, summary.to_dict())

    def append(self, record: RequestRecord) -> None:
        """A finished request: its row reaches disk at once, its summary inputs stay in memory
        (``records``). A full disk raises :class:`DiskFull` once (the run ends in that line);
        after it only the summary inputs are kept."""
        self.records.add(record)
        if self.disk_full:
            return
        with self._full_disk_ends_the_run():
            if self._jsonl is None:
                self._jsonl = open(self.run_dir / REQUESTS_JSONL, "a", encoding="utf-8")
            row = self._row(record)
            if record.output_token_ids is None and record.ids_text is not None and self.save_output_text:
                row[PENDING_IDS_TEXT] = record.ids_text  # tokenized with the tables, off the event loop
            # on the event loop, while other streams are being read: orjson, no deep copy (about
            # 8 ms a request with 2048 output tokens before, through asdict and _jsonable)
            self._jsonl.write(orjson.dumps(row, default=_json_default, option=_ORJSON_OPTIONS).decode() + "\n")
            self._jsonl.flush()

    def _disk_filled(self, exc: OSError) -> DiskFull:
        """Stop writing; cut requests.jsonl back to its last whole row, so it stays readable."""
        self.disk_full = True
        jsonl, self._jsonl = self._jsonl, None
        if jsonl is not None:
            try:
                jsonl.close()  # its buffer cannot reach the disk either
            except OSError:
                pass
        path = self.run_dir / REQUESTS_JSONL
        kept = 0
        try:
            if not path.is_file():  # e.g. a device: nothing to cut back
                raise OSError(errno.EINVAL, "not a regular file")
            with open(path, "r+b") as f:
                data = f.read()
                end = data.rfind(b"\n") + 1
                f.truncate(end)  # a partial row would make the file unreadable; truncating needs no space
                kept = data.count(b"\n", 0, end)
        except OSError:
            pass
        return DiskFull(
            f"the disk holding {self.run_dir} is full ({exc.strerror or exc}): {kept} finished requests "
            f"are kept in {path.name}, readable; free space, then run again"
        )

    def _row(self, record: RequestRecord) -> dict[str, Any]:
        # shallow: asdict would deep-copy every element of the per-token lists
        row = {name: getattr(record, name) for name in REQUEST_COLUMNS}
        if not self.save_output_text:  # the ids are the text too
            row["output_text"] = row["output_token_ids"] = None
        for key in TEXT_COLUMNS:  # whatever a server sent: text, and valid UTF-8, or the table is lost
            row[key] = clean_text(row[key])
        row["engine_stats"] = json.dumps(_jsonable(row["engine_stats"]), sort_keys=True)
        return row

    def write_tables(
        self, memory_samples: Sequence[tuple[float, int]], t0: float, gpu_samples: Sequence[tuple] = ()
    ) -> None:
        """requests.parquet, memory.parquet and (with NVML samples) gpu.parquet; times from ``t0``."""
        if self._jsonl is not None:
            self._jsonl.close()
            self._jsonl = None
        self._write_requests_table()
        if memory_samples:
            mem = pd.DataFrame(list(memory_samples), columns=["t", "rss_bytes"])
            mem["t_s"] = mem.pop("t") - t0
            mem[["t_s", "rss_bytes"]].to_parquet(self.run_dir / MEMORY, index=False)
        if gpu_samples:
            gpu = gpu_phase.frame(gpu_samples).sort_values(["t", "device"], kind="stable")
            gpu["t_s"] = gpu.pop("t") - t0
            # floats throughout (NaN: not read): bytes stay exact below 2**53
            gpu = gpu.astype({c: float for c in GPU_TABLE_COLUMNS[2:]})
            gpu[list(GPU_TABLE_COLUMNS)].to_parquet(self.run_dir / GPU, index=False)

    def write_server_metrics(self, frame: pd.DataFrame) -> None:
        """server_metrics.parquet: the sampled /metrics series (columns SERVER_METRICS_COLUMNS)."""
        frame[list(SERVER_METRICS_COLUMNS)].to_parquet(self.run_dir / SERVER_METRICS, index=False)

    def _write_requests_table(self) -> None:
        """requests.parquet from requests.jsonl, :data:`ROW_GROUP` rows at a time, each group in
        request-id order; the replies whose ids were left to count are tokenized a group at a
        time (one batch each)."""
        jsonl, parquet = self.run_dir / REQUESTS_JSONL, self.run_dir / REQUESTS_PARQUET
        schema = requests_arrow_schema()
        with pq.ParquetWriter(parquet, schema) as out:
            wrote = False
            for rows in _row_groups(jsonl, ROW_GROUP):
                self._count_pending_ids(rows)
                rows.sort(key=lambda row: row.get("request_id", 0))
                out.write_table(pa.Table.from_pylist(rows, schema=schema))
                wrote = True
            if not wrote:
                out.write_table(schema.empty_table())

    def _count_pending_ids(self, rows: list[dict[str, Any]]) -> None:
        """Tokenize, in one batch, the replies of ``rows`` whose ids were left to count after the run."""
        pending = [row for row in rows if row.get(PENDING_IDS_TEXT) is not None]
        if pending and self.tokenize is not None:
            for row, ids in zip(pending, self.tokenize([row[PENDING_IDS_TEXT] for row in pending])):
                row["output_token_ids"] = [int(t) for t in ids]
        for row in pending:
            row.pop(PENDING_IDS_TEXT, None)


# requests.jsonl: the text whose tokens are a reply's ids, in the rows of replies whose ids were
# left to count; not a column of requests.parquet
PENDING_IDS_TEXT = "ids_text"
# rows of requests.parquet read, tokenized and written together: as Python rows a group costs
# about 18 KB a request (64-token replies; measured with tracemalloc), so the end of a run's peak
# holds 2,000 of them (~40 MB), not a run's first 10,000 (benchmarks/long_run_memory.py)
ROW_GROUP = 2_000


def _row_groups(jsonl: Path, size: int) -> Iterator[list[dict[str, Any]]]:
    """The complete rows of requests.jsonl, ``size`` at a time (a line cut short is skipped)."""
    if not jsonl.is_file():
        return
    rows: list[dict[str, Any]] = []
    with open(jsonl, "rb") as f:
        for line in f:
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(row, dict):
                rows.append(row)
            if len(rows) >= size:
                yield rows
                rows = []
    if rows:
        yield rows


def requests_arrow_schema() -> pa.Schema:
    """requests.parquet's columns (:data:`REQUEST_COLUMNS`) typed from :class:`RequestRecord`'s
    fields: whole numbers int64, times float64, lists of either, flags bool, text (and the
    engine's stats, as JSON) string; every column nullable."""
    hints = typing.get_type_hints(RequestRecord)
    return pa.schema([pa.field(name, _arrow_type(hints.get(name, str))) for name in REQUEST_COLUMNS])


def _arrow_type(hint: Any) -> pa.DataType:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) is typing.Union and len(args) == 1:
        return _arrow_type(args[0])
    if typing.get_origin(hint) is list:
        return pa.list_(_arrow_type(args[0]) if args else pa.float64())
    scalars = {bool: pa.bool_(), int: pa.int64(), float: pa.float64()}
    return scalars.get(hint, pa.string())


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (a reader never sees half a file)."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(_jsonable(data), indent=2, sort_keys=False) + "\n")
    tmp.replace(path)


def holds_run(run_dir: Path) -> bool:
    """A run has begun in this folder: claimed, or with rows or a summary written."""
    return any((Path(run_dir) / name).exists() for name in (REQUESTS_JSONL, SUMMARY, CLAIM))


def check_run_dir_free(run_dir: Path) -> None:
    """Claim the run folder for this run, atomically: two runs started in the same second (or
    given the same ``hydra.run.dir``) must not write into one folder."""
    run_dir = Path(run_dir)
    taken = f"{run_dir} already holds a run; start the new run again in a second, or give it another hydra.run.dir"
    if holds_run(run_dir):
        raise HarnessError(taken)
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(run_dir / CLAIM, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        raise HarnessError(taken) from None
    os.write(fd, f"{os.getpid()}\n".encode())
    os.close(fd)


# --- reading ------------------------------------------------------------------------------


def is_run_dir(path: Path) -> bool:
    """A finished run folder (summary.json); a killed run with only requests.jsonl is one for
    :func:`load_run`, not for the listing of a sweep."""
    return (Path(path) / SUMMARY).is_file()


def load_requests(run_dir: Path) -> pd.DataFrame:
    """A run's requests as a DataFrame: from requests.parquet, or the .jsonl of a run that died
    (a last line cut off mid-write is left out)."""
    run_dir = Path(run_dir)
    parquet = run_dir / REQUESTS_PARQUET
    if parquet.exists():
        frame = pd.read_parquet(parquet)
        if not frame["request_id"].is_monotonic_increasing:  # row groups of a long run: each in order
            frame = frame.sort_values("request_id", kind="stable", ignore_index=True)
        return frame
    return pd.DataFrame(read_jsonl_rows(run_dir / REQUESTS_JSONL), columns=list(REQUEST_COLUMNS))


def read_jsonl_rows(path: Path) -> list[dict[str, Any]]:
    """The complete rows of requests.jsonl; a line that does not parse (a write cut short) is skipped."""
    rows = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows


def summary_from_jsonl(run_dir: Path) -> RunSummary:
    """What a killed run's requests.jsonl still says, when it left no summary.json (SIGKILL,
    power loss): the figures of the requests that finished. No SLO is known here."""
    fields = {f.name for f in dataclasses.fields(RequestRecord)}
    records = []
    for row in read_jsonl_rows(Path(run_dir) / REQUESTS_JSONL):
        stats = row.get("engine_stats")
        row["engine_stats"] = json.loads(stats) if isinstance(stats, str) else (stats or {})
        try:
            records.append(RequestRecord(**{k: v for k, v in row.items() if k in fields}))
        except TypeError:
            continue
    duration = max((r.end_s for r in records), default=0.0)
    figures = summarize(records, duration, SLOConfig())
    owner = running_owner(Path(run_dir))
    error = (
        f"the run is still going (pid {owner}): the figures of its requests so far, from requests.jsonl"
        if owner
        else "the run left no summary.json (killed?); figures rebuilt from requests.jsonl"
    )
    names = config_names(Path(run_dir))
    return RunSummary(
        status="running" if owner else "incomplete",
        error=error,
        backend=names.get("backend", {}),
        model=names.get("model", {}),
        workload=names.get("workload", {}),
        **figures,
    )


def running_owner(run_dir: Path) -> Optional[int]:
    """The pid of the harness still running in ``run_dir`` (its claim), or None."""
    try:
        pid = int((run_dir / CLAIM).read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid if pid != os.getpid() else None


CONFIG_KEYS = {"backend": ("name", "mode"), "model": ("name",), "workload": ("name", "concurrency", "rate")}


def config_names(run_dir: Path) -> dict[str, dict[str, Any]]:
    """What the run's config.yaml (written when the engine was up) says of its backend, model and
    workload, for a summary rebuilt without summary.json; {} when it is missing or unreadable."""
    try:
        config = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
        return {
            section: {key: (config.get(section) or {}).get(key) for key in keys}
            for section, keys in CONFIG_KEYS.items()
        }
    except (OSError, yaml.YAMLError, AttributeError):
        return {}


class UnreadableSummary(HarnessError, ValueError):
    """A summary.json that is not JSON, or not a run's summary (a ValueError too, for the callers
    that skip what they cannot read)."""


class NewerSummary(HarnessError):
    """A summary.json of a newer major schema version than this harness reads: its keys may mean
    other things, so it is not read at all (not a ValueError: the callers that skip a damaged
    summary must not skip this one without a word)."""


def load_summary(run_dir: Path) -> dict[str, Any]:
    """summary.json as plain JSON (for pandas users); :func:`load_run` gives the typed one. A
    file of an older schema version reads as it is (a newer major is refused: :class:`NewerSummary`);
    its hashes come back in the current form (:func:`harness.results.migrations.current_hashes`)."""
    path = Path(run_dir) / SUMMARY
    try:
        summary = json.loads(path.read_text())
    except ValueError as exc:  # not JSON, or not UTF-8
        raise UnreadableSummary(
            f"{path} is not JSON ({exc}); move it aside and the run reads as killed "
            "(its figures rebuilt from requests.jsonl)"
        ) from None
    if not isinstance(summary, dict) or "status" not in summary:
        raise UnreadableSummary(
            f"{path} is not a run's summary (it has no status); move it aside and the run "
            "reads as killed (its figures rebuilt from requests.jsonl)"
        )
    check_schema_version(summary, path)
    return current_hashes(summary, Path(run_dir))


def check_schema_version(summary: dict[str, Any], path: Path) -> None:
    """Refuse, in one line, a summary.json of a newer major schema version than SCHEMA_VERSION's."""
    found = summary.get("schema_version", UNVERSIONED_SCHEMA)
    try:
        major = schema_major(found)
    except ValueError:
        raise UnreadableSummary(f"{path} has no readable schema_version ({found!r})") from None
    if major > schema_major(SCHEMA_VERSION):
        raise NewerSummary(
            f"{path} has schema version {found}, newer than this harness reads (major "
            f"{schema_major(SCHEMA_VERSION)}, it writes {SCHEMA_VERSION}): read it with a newer harness"
        )


def load_run(run_dir: Path, with_workload: bool = True) -> RunResult:
    """Load a run folder; only summary.json and the requests are required."""
    run_dir = Path(run_dir)
    if (run_dir / SUMMARY).exists():
        summary = RunSummary.from_dict(load_summary(run_dir))
    elif (run_dir / REQUESTS_JSONL).exists():
        summary = summary_from_jsonl(run_dir)
    else:
        raise HarnessError(f"{run_dir} is not a run folder: it has neither summary.json nor requests.jsonl")
    try:
        requests = load_requests(run_dir)
    except (FileNotFoundError, ValueError):
        requests = pd.DataFrame()
    for column in REQUEST_COLUMNS:
        if column not in requests.columns:
            requests[column] = pd.Series([None] * len(requests), dtype=object)
    config = run_dir / CONFIG
    memory = pd.read_parquet(run_dir / MEMORY) if (run_dir / MEMORY).exists() else None
    gpu = pd.read_parquet(run_dir / GPU) if (run_dir / GPU).exists() else None
    server_series = pd.read_parquet(run_dir / SERVER_METRICS) if (run_dir / SERVER_METRICS).exists() else None
    return RunResult(
        run_dir,
        summary,
        requests,
        read_json(run_dir / ENV) or {},
        config.read_text() if config.exists() else None,
        read_json(run_dir / WORKLOAD) if with_workload else None,
        memory,
        gpu,
        server_series,
    )


def read_json(path: Path) -> Optional[dict[str, Any]]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# NaN and infinity become null, as in _jsonable; numpy scalars and arrays are numbers and lists
_ORJSON_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def _json_default(value: Any) -> Any:
    """What orjson cannot write itself: paths, and any other object with a numpy-style ``item``."""
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item") and callable(value.item):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return value.item()
    return value
