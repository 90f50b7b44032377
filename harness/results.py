"""The run folder: requests written as they finish, then tables and the summary.

Files:
- ``requests.jsonl`` — one line per finished request, flushed as it lands (survives a crash)
- ``requests.parquet`` — the same rows, written when the run ends (also on error or Ctrl-C)
- ``summary.json`` — per-run figures; written last, its ``status`` says whether the run completed
- ``config.yaml`` — the resolved config; ``env.json`` — harness, libraries, hardware
- ``workload.json`` — the generated workload (text, token ids) and its sha256
- ``memory.parquet`` — the RSS (and GPU) samples over time
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional

import pandas as pd

from harness.metrics import RequestRecord

REQUEST_COLUMNS = (
    "request_id", "session_id", "turn", "prompt_tokens", "output_tokens", "requested_output_tokens",
    "exact_output_len", "expected_prompt_tokens", "scheduled_s", "start_s", "end_s", "ttft_s", "tpot_s",
    "e2e_s", "itl_s", "output_tps", "decode_tps", "queue_wait_s", "cached_tokens", "delivery_lag_max_s", "finish_reason",
    "error", "output_text", "engine_stats",
)


class RunWriter:
    def __init__(self, run_dir: Path, save_output_text: bool = True):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)

        self.save_output_text = save_output_text
        self.records: list[RequestRecord] = []
        self._jsonl = None

    def write_json(self, name: str, data: Any) -> None:
        path = self.run_dir / name
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(_jsonable(data), indent=2, sort_keys=False) + "\n")
        tmp.replace(path)

    def write_text(self, name: str, text: str) -> None:
        (self.run_dir / name).write_text(text)

    def append(self, record: RequestRecord) -> None:
        """Keep a finished request; its row reaches disk at once."""
        self.records.append(record)
        if self._jsonl is None:
            self._jsonl = open(self.run_dir / "requests.jsonl", "a", encoding="utf-8")
        self._jsonl.write(json.dumps(_jsonable(self._row(record))) + "\n")
        self._jsonl.flush()

    def _row(self, record: RequestRecord) -> dict[str, Any]:
        row = asdict(record)
        if not self.save_output_text:
            row["output_text"] = None
        row["engine_stats"] = json.dumps(_jsonable(row["engine_stats"]), sort_keys=True)
        return row

    def write_tables(self, memory_samples: list[tuple[float, int, Optional[int]]], t0: float) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
            self._jsonl = None
        rows = [self._row(r) for r in sorted(self.records, key=lambda r: r.request_id)]
        frame = pd.DataFrame(rows, columns=list(REQUEST_COLUMNS))
        frame.to_parquet(self.run_dir / "requests.parquet", index=False)
        if memory_samples:
            mem = pd.DataFrame(memory_samples, columns=["t", "rss_bytes", "gpu_used_bytes"])
            mem["t_s"] = mem.pop("t") - t0
            mem[["t_s", "rss_bytes", "gpu_used_bytes"]].to_parquet(self.run_dir / "memory.parquet", index=False)


def check_run_dir_free(run_dir: Path) -> None:
    """Two runs must not share a folder (they are named by the second)."""
    if (Path(run_dir) / "requests.jsonl").exists() or (Path(run_dir) / "summary.json").exists():
        from harness.errors import HarnessError

        raise HarnessError(f"{run_dir} already holds a run; start the new run again in a second")


def load_requests(run_dir: Path) -> pd.DataFrame:
    """A run's requests as a DataFrame: from requests.parquet, or the .jsonl of a run that died."""
    run_dir = Path(run_dir)
    parquet = run_dir / "requests.parquet"
    if parquet.exists():
        return pd.read_parquet(parquet)
    return pd.read_json(run_dir / "requests.jsonl", lines=True)


def load_summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((Path(run_dir) / "summary.json").read_text())


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
