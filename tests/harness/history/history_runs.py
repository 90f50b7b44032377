"""Run folders made up for the history's tests: a summary.json and an env.json, nothing measured."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path

START = datetime(2026, 3, 1, 2, 0, tzinfo=timezone.utc)


def fake_run(
    folder: Path,
    day: int,
    ttft_s: float = 0.1,
    itl_s: float = 0.01,
    tokens_per_s: float = 500.0,
    engine: str = "vllm",
    engine_version: str = "0.11.0",
    taint: Sequence[str] = (),
    status: str = "complete",
    commit: str = "a" * 40,
    concurrency: int = 4,
) -> Path:
    """A finished run ``day`` days after START (one nightly a day)."""
    folder.mkdir(parents=True, exist_ok=True)
    started = (START + timedelta(days=day)).isoformat()
    dist = lambda v: {"count": 10, "mean": v, "p50": v, "p90": v * 1.1, "p99": v * 1.3}  # noqa: E731
    summary = {
        "status": status,
        "started_at": started,
        "config_sha256": "c" * 64,
        "duration_s": 10.0,
        "backend": {"name": engine, "mode": "inprocess", "engine": engine, "engine_version": engine_version},
        "model": {"name": "tiny"},
        "workload": {
            "name": "synthetic",
            "sha256": "w" * 64,
            "prompts_sha256": "p" * 64,
            "concurrency": concurrency,
            "rate": None,
            "open_loop": False,
        },
        "requests": {"sent": 10, "completed": 10, "failed": 0},
        "latency": {"ttft_s": dist(ttft_s), "tpot_s": dist(itl_s), "itl_s": dist(itl_s)},
        "throughput": {"output_tokens_per_s": tokens_per_s, "requests_per_s": 2.0, "energy_per_token_j": None},
        "taint": list(taint),
    }
    env = {
        "harness": {"version": "0.1.0", "git": {"sha": commit, "dirty": False}},
        "cpu": {"model": "Test CPU", "logical_cores": 2},
        "gpus": [{"name": "Test GPU"}],
    }
    (folder / "summary.json").write_text(json.dumps(summary))
    (folder / "env.json").write_text(json.dumps(env))
    return folder


def nightly(root: Path, itl: Sequence[float], **kwargs) -> list[Path]:
    """One run a day with these ITLs (and TPOTs), in folders run-000, run-001 … under ``root``."""
    return [fake_run(root / f"run-{i:03d}", i, itl_s=v, **kwargs) for i, v in enumerate(itl)]
