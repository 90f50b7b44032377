"""Sweeps through Hydra's submitit launcher (submitit_local) and its Ray launcher (a local Ray
instance): each point in a process of its own, no engine kept between points, one sweep.json."""

import json
from pathlib import Path

import pytest
from conftest import run_harness_cli

pytestmark = pytest.mark.slow  # a sweep through each launcher: 10-35 s here

# the launchers' part is engine-agnostic: the reference server, started afresh for each point
FAST = [
    "model=tiny-random",
    "backend=reference",
    "backend.ttft_ms=5",
    "backend.itl_ms=1",
    "workload=synthetic",
    "workload.input_len=48",
    "workload.output_len=4",
    "workload.num_requests=4",
    "progress=false",
    "report=false",
]


def check_sweep(root: Path, points: int) -> dict:
    sweeps = sorted(root.glob("sweep-*/sweep.json"))
    assert len(sweeps) == 1, sweeps
    sweep = json.loads(sweeps[0].read_text())
    assert [p["status"] for p in sweep["points"]] == ["complete"] * points
    assert [p["engine_reused"] for p in sweep["points"]] == [False] * points  # isolated points
    assert sweep["engine_loads"] == points
    for p in sweep["points"]:
        assert (Path(p["run_dirs"][0]) / "summary.json").exists()
    assert (sweeps[0].parent / "compare.html").exists()
    return sweep


def test_submitit_local_launcher(tmp_path):
    proc = run_harness_cli(
        "-m",
        "hydra/launcher=submitit_local",
        "hydra.sweeper.max_batch_size=1",
        *FAST,
        "workload.concurrency=1,2",
        f"output_root={tmp_path}",
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    sweep = check_sweep(tmp_path, 2)
    assert sorted((Path(sweep["sweep_dir"]) / ".submitit").iterdir())  # submitit's own job logs
    assert "engine loads: 2 for 2 points" in proc.stdout


def test_ray_launcher(tmp_path):
    proc = run_harness_cli(
        "-m",
        "hydra/launcher=ray",
        "+hydra.launcher.ray.init.num_cpus=1",
        "+hydra.launcher.ray.init.include_dashboard=false",
        *FAST,
        "workload.concurrency=1,2",
        f"output_root={tmp_path}",
        cwd=tmp_path,
        timeout=300,
        env={"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"},
    )
    assert proc.returncode == 0, proc.stderr
    check_sweep(tmp_path, 2)
