"""A run whose folder's disk fills ends in one line that names the folder and the rows kept,
stops the engine, and leaves what was written readable."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_harness_cli

pytestmark = pytest.mark.slow  # python -m harness runs onto a disk that fills: 2-5 s each here

RUN = [
    "model=tiny-random",
    "backend=reference",
    "backend.ttft_ms=1",
    "backend.itl_ms=1",
    "workload=synthetic",
    "workload.input_len=48",
    "workload.output_len=48",
    "workload.num_requests=300",
    "workload.concurrency=8",
    "workload.warmup_requests=0",
    "progress=false",
    "report=false",
]


def _one_line_end(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "is full" in lines[0], proc.stderr[-3000:]
    return lines[0]


def _run_dir(root: Path) -> Path:
    return next(p for p in root.iterdir() if (p / "config.yaml").exists())


def test_rows_that_cannot_reach_the_disk_end_the_run_in_one_line(tmp_path):
    """requests.jsonl on /dev/full: the first row fails with ENOSPC."""
    script = tmp_path / "run.py"
    script.write_text(
        "import sys\nfrom pathlib import Path\nfrom harness.results.store import RunWriter\n"
        "init = RunWriter.__init__\n"
        "def patched(self, run_dir, *a, **k):\n"
        "    init(self, run_dir, *a, **k)\n"
        "    (Path(run_dir) / 'requests.jsonl').symlink_to('/dev/full')\n"
        "RunWriter.__init__ = patched\n"
        "from harness.cli import main\nsys.argv = ['harness', *sys.argv[1:]]\nmain()\n"
    )
    proc = subprocess.run(
        [sys.executable, str(script), *RUN, f"output_root={tmp_path / 'out'}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ},
    )
    line = _one_line_end(proc)
    run_dir = _run_dir(tmp_path / "out")
    assert str(run_dir) in line and "0 finished requests" in line
    assert json.loads((run_dir / "workload.json").read_text())  # what was written before stays readable


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root (CI here runs as root)")
def test_a_disk_that_fills_mid_run_keeps_every_whole_row(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=640k", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"no tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        proc = run_harness_cli(*RUN, f"output_root={disk}", cwd=tmp_path, timeout=300)
        line = _one_line_end(proc)
        run_dir = _run_dir(disk)
        rows = [json.loads(row) for row in (run_dir / "requests.jsonl").read_text().splitlines()]
        assert 0 < len(rows) < 300 and f"{len(rows)} finished requests" in line and str(run_dir) in line
        assert all(row["error"] is None for row in rows)
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
