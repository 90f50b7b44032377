"""Two real runs against the reference server, added to a history and read back through DuckDB."""

from __future__ import annotations

import pytest
from conftest import run_harness_cli

from harness.history.cli import main
from harness.history.query import runs
from harness.results.sweep_file import point_run_dirs, read_sweep

pytestmark = pytest.mark.slow  # a sweep and a run of python -m harness, added to a history: 2-5 s each here

ARGS = [
    "model=tiny-random",
    "backend=reference",
    "backend.ttft_ms=5",
    "backend.itl_ms=2",
    "workload=synthetic",
    "workload.input_len=32",
    "workload.output_len=4",
    "workload.num_requests=4",
    "workload.warmup_requests=0",
    "progress=false",
    "report=false",
]


def test_a_real_sweep_goes_into_the_history(tmp_path, capsys):
    proc = run_harness_cli(
        "-m", *ARGS, "workload.concurrency=1,2", f"output_root={tmp_path / 'out'}", cwd=tmp_path, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    sweep = next((tmp_path / "out").glob("sweep-*"))
    run_dirs = point_run_dirs(read_sweep(sweep))
    assert len(run_dirs) == 2
    assert main(["add", str(tmp_path / "h"), str(sweep)]) == 0
    assert capsys.readouterr().out.count("added: ") == 2
    frame = runs(tmp_path / "h")
    assert len(frame) == 2
    assert set(frame["engine"]) == {"reference"} and frame["point"].nunique() == 2  # two loads, two points
    assert sorted(frame["concurrency"]) == [1, 2]
    assert frame["ttft_s_p50"].between(0.004, 1.0).all() and frame["output_tokens_per_s"].gt(0).all()
    assert frame["git_commit"].notna().all() and frame["engine_version"].notna().all()
    assert {str(p.resolve()) for p in run_dirs} == set(frame["run_dir"])
    assert main(["add", str(tmp_path / "h"), str(sweep)]) == 0  # again: nothing new
    assert capsys.readouterr().out.count("already there: ") == 2


def test_history_on_the_command_line_adds_each_run_as_it_finishes(tmp_path):
    proc = run_harness_cli(
        *ARGS, f"history={tmp_path / 'h'}", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert "history: added: " in proc.stdout
    frame = runs(tmp_path / "h")
    assert list(frame["run_dir"]) == [str((tmp_path / "run").resolve())]
