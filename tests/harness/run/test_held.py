"""harness.ab --keep-loaded: one engine per arm (python -m harness.held), loaded once and kept for
all its runs, against the reference server; its endings leave no process, and an A/A stores its
noise floor apart from fresh engines'."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import REPO, as_foreground_job

from harness.gate import noise
from harness.run import ab

COMMON = [
    "backend=reference",
    "backend.ttft_ms=20",
    "backend.itl_ms=4",
    "model=tiny-random",
    "workload=synthetic",
    "workload.num_requests=12",
    "workload.concurrency=4",
    "workload.output_len=12",
    "workload.input_len=40",
    "report=false",
    "machine.enabled=false",
    "backend.count_prompt_tokens=false",
    "workload.warmup_requests=0",
]


def start_ab(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "harness.ab", "--keep-loaded", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_foreground_job,
    )


def summary(run_dir) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


@pytest.mark.slow
def test_each_arm_loads_once_and_a_slowdown_is_still_found(tmp_path):
    out = tmp_path / "ab"
    proc = start_ab(
        "--blocks",
        "2",
        "--max-blocks",
        "3",
        "--seed",
        "3",
        "--out",
        str(out),
        "--figures",
        "tpot_s.p50",
        "--b",
        "backend.itl_ms=6",
        "--",
        *COMMON,
    )
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == ab.EXIT_REGRESSION, stdout + stderr
    assert "engines kept loaded, started 2×" in stdout
    exp = json.loads((out / "ab.json").read_text())
    assert exp["keep_loaded"] and exp["engine_starts"] == {"A": 1, "B": 1} and exp["verdict"] == "regression"
    for arm in "AB":
        runs = sorted((out / "runs").glob(f"block*-{arm}"))
        assert len(runs) >= 2 and all(r.is_dir() for r in runs)
        engines = [summary(r)["engine"] for r in runs]
        assert [e["reused"] for e in engines] == [False] + [True] * (len(runs) - 1)
        assert engines[-1]["points_served"] == len(runs)
        log = (out / "runs" / f"{runs[-1].name}.log").read_text()
        assert "TTFT" in log and f"results: {runs[-1]}" in log  # the console summary a plain run prints
        assert (runs[-1] / "harness.log").is_file()
    assert "**REGRESSION**" in (out / "ab.md").read_text() and "kept loaded" in (out / "ab.md").read_text()


@pytest.mark.slow
def test_an_aa_stores_a_noise_floor_of_held_engines(tmp_path):
    out, floors = tmp_path / "aa", tmp_path / "noise"
    proc = start_ab("--aa", "--blocks", "2", "--out", str(out), "--noise-dir", str(floors), "--", *COMMON)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stdout + stderr
    [path] = list(floors.glob("*/*.json"))
    assert path.name.endswith(".held.json") and "engines kept loaded" in stdout
    floor = noise.NoiseFloor.from_dict(json.loads(path.read_text()))
    assert floor.engine == "held" and floor.figures["tpot_s.p50"].sd_run >= 0
    assert noise.load(floors, floor.config_sha256, floor.hardware) is None  # fresh engines' floor is not this one
    assert noise.load(floors, floor.config_sha256, floor.hardware, "held") is not None


@pytest.mark.slow
def test_a_refused_arm_is_one_line(tmp_path):
    proc = start_ab("--out", str(tmp_path / "ab"), "--b", "workload.input_len=8", "--", *COMMON)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == ab.EXIT_BAD_INPUT, stdout + stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("error: arm B was refused") and "input_len 8 is too short" in last


def test_two_held_servers_cannot_share_a_port(tmp_path, capsys):
    code = ab.main(
        ["--keep-loaded", "--out", str(tmp_path / "x"), "--b", "backend.itl_ms=5", "--", *COMMON, "backend.port=8123"]
    )
    assert code == ab.EXIT_BAD_INPUT and "cannot share backend.port=8123" in capsys.readouterr().err


def start_long_experiment(tmp_path) -> tuple[subprocess.Popen, Path, list[psutil.Process]]:
    """An experiment whose first run is under way: its process, folder and process family."""
    out = tmp_path / "ab"
    proc = start_ab(
        "--blocks", "3", "--out", str(out), "--b", "backend.itl_ms=5", "--", *COMMON, "workload.num_requests=300"
    )
    deadline = time.monotonic() + 120
    while not list((out / "runs").glob("block001-*/requests.jsonl")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert list((out / "runs").glob("block001-*/requests.jsonl")), "the first run did not start"
    return proc, out, psutil.Process(proc.pid).children(recursive=True)


@pytest.mark.slow
def test_sigterm_keeps_the_run_and_stops_every_held_engine(tmp_path):
    proc, out, family = start_long_experiment(tmp_path)
    assert any("harness.held" in " ".join(p.cmdline()) for p in family)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == ab.EXIT_INTERRUPTED and "interrupted: the runs so far and ab.json are in" in err
    assert json.loads((out / "ab.json").read_text())["status"] == "interrupted"
    [run] = list((out / "runs").glob("block001-*/summary.json"))
    assert json.loads(run.read_text())["status"] == "interrupted"  # the run in progress kept its measurement
    _, alive = psutil.wait_procs(family, timeout=10)
    assert not alive, [p.cmdline() for p in alive]


@pytest.mark.slow
def test_a_killed_experiment_leaves_no_engine_loaded(tmp_path):
    proc, out, family = start_long_experiment(tmp_path)
    proc.kill()  # SIGKILL: no handler runs in harness.ab; the held process is told by the kernel
    proc.communicate(timeout=30)
    _, alive = psutil.wait_procs(family, timeout=60)
    assert not alive, [p.cmdline() for p in alive]
    [run] = list((out / "runs").glob("block001-*/summary.json"))
    assert json.loads(run.read_text())["status"] == "interrupted"
