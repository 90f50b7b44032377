"""Small data files the data-workload tests write themselves, and a plan builder."""

from __future__ import annotations

import json
from pathlib import Path

from workloads import workload_registry


def build(parts, name: str, seed: int = 0, max_context=None, **overrides):
    """The plan of workload ``name`` with these config fields (validated first)."""
    entry = workload_registry.get(name)
    cfg = entry.config_cls(**overrides)
    cfg.validate()
    renderer, corpus = parts
    renderer.max_context = max_context
    return entry.cls(cfg).build(renderer, corpus, seed)


def conversation(*texts: str, system: str | None = None, **extra) -> dict:
    """A ShareGPT record: texts alternate human, gpt, human, gpt…"""
    msgs = [{"from": "system", "value": system}] if system else []
    msgs += [{"from": "human" if i % 2 == 0 else "gpt", "value": t} for i, t in enumerate(texts)]
    return {"conversations": msgs, **extra}


def write_json(path: Path, records: list) -> Path:
    path.write_text(json.dumps(records))
    return path


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


# End-to-end runs: the real engine here (llama.cpp in-process) on the real small model, kept small.
E2E = ["backend=llamacpp", "model=smollm2-135m", "progress=false", "report=false", "workload.warmup_requests=0"]


def run_e2e(tmp_path: Path, *args: str):
    """``python -m harness`` with these overrides → (process, run folder, summary.json, requests rows)."""
    import pandas as pd
    from conftest import run_harness_cli

    proc = run_harness_cli(*E2E, *args, f"output_root={tmp_path / 'results'}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = Path(proc.stdout.strip().splitlines()[-1].removeprefix("results: "))
    summary = json.loads((run_dir / "summary.json").read_text())
    return proc, run_dir, summary, pd.read_parquet(run_dir / "requests.parquet")
