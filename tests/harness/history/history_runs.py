"""Run folders made up for the history's tests: a summary.json and an env.json, nothing measured."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

START = datetime(2026, 3, 1, 2, 0, tzinfo=timezone.utc)


@dataclass(frozen=True)
class FakeRun:
    """What a made-up run's summary.json and env.json say."""

    ttft_s: float = 0.1
    itl_s: float = 0.01  # and the TPOT
    tokens_per_s: float = 500.0
    engine: str = "vllm"
    engine_version: str = "0.11.0"
    taint: Sequence[str] = ()
    status: str = "complete"
    commit: str = "a" * 40
    concurrency: int = 4
    cpu: str = "Test CPU"  # the hardware fingerprint's CPU model


def fake_run(folder: Path, day: float, run: FakeRun = FakeRun()) -> Path:
    """A finished run ``day`` days after START (one nightly a day)."""
    folder.mkdir(parents=True, exist_ok=True)
    started = (START + timedelta(days=day)).isoformat()

    def dist(v: float) -> dict[str, float]:
        return {"count": 10, "mean": v, "p50": v, "p90": v * 1.1, "p99": v * 1.3}

    summary = {
        "status": run.status,
        "started_at": started,
        "config_sha256": "c" * 64,
        "duration_s": 10.0,
        "backend": {
            "name": run.engine,
            "mode": "inprocess",
            "engine": run.engine,
            "engine_version": run.engine_version,
        },
        "model": {"name": "tiny"},
        "workload": {
            "name": "synthetic",
            "sha256": "w" * 64,
            "prompts_sha256": "p" * 64,
            "concurrency": run.concurrency,
            "rate": None,
            "open_loop": False,
        },
        "requests": {"sent": 10, "completed": 10, "failed": 0},
        "latency": {"ttft_s": dist(run.ttft_s), "tpot_s": dist(run.itl_s), "itl_s": dist(run.itl_s)},
        "throughput": {"output_tokens_per_s": run.tokens_per_s, "requests_per_s": 2.0, "energy_per_token_j": None},
        "taint": list(run.taint),
    }
    env = {
        "harness": {"version": "0.1.0", "git": {"sha": run.commit, "dirty": False}},
        "cpu": {"model": run.cpu, "logical_cores": 2},
        "gpus": [{"name": "Test GPU"}],
    }
    (folder / "summary.json").write_text(json.dumps(summary))
    (folder / "env.json").write_text(json.dumps(env))
    return folder


def nightly(root: Path, itl: Sequence[float], run: FakeRun = FakeRun()) -> list[Path]:
    """One run a day with these ITLs (and TPOTs), in folders run-000, run-001 … under ``root``."""
    return [fake_run(root / f"run-{i:03d}", i, replace(run, itl_s=v)) for i, v in enumerate(itl)]


def fake_sweep(folder: Path, day: int, itl_by_point: dict[int, Sequence[float]], run: FakeRun = FakeRun()) -> Path:
    """A nightly sweep: for each concurrency, its repeats' ITLs (one run each, a minute apart), and
    the sweep.json that makes them one batch."""
    points = []
    for index, (concurrency, values) in enumerate(itl_by_point.items()):
        point_dir = folder / f"{index}-c{concurrency}"
        dirs = [
            fake_run(
                point_dir / f"repeat-{r}", day + (index * 10 + r) / 1440, replace(run, itl_s=v, concurrency=concurrency)
            )
            for r, v in enumerate(values)
        ]
        points.append(
            {
                "index": index,
                "overrides": [f"workload.concurrency={concurrency}"],
                "run_dir": str(point_dir),
                "run_dirs": [str(d) for d in dirs],
                "status": "complete",
            }
        )
    started = (START + timedelta(days=day)).isoformat()
    (folder / "sweep.json").write_text(json.dumps({"sweep_dir": str(folder), "started_at": started, "points": points}))
    return folder
