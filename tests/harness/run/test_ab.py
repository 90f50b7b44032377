"""python -m harness.ab: interleaved blocks of real runs against the reference server, the three
verdicts, the A/A noise floor, one-line refusals, and an interrupted experiment."""

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
from harness.history import query
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


def run_ab(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness.ab", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.slow
def test_a_real_slowdown_is_a_regression_with_every_file(tmp_path):
    out = tmp_path / "ab"
    done = run_ab(
        "--blocks",
        "2",
        "--max-blocks",
        "3",
        "--seed",
        "3",
        "--threshold",
        "5",
        "--out",
        str(out),
        "--figures",
        "tpot_s.p50,output_tokens_per_s",
        "--markdown",
        str(tmp_path / "summary.md"),
        "--history",
        str(tmp_path / "history"),
        "--b",
        "backend.itl_ms=6",
        "--",
        *COMMON,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    # decided at the first look (2 blocks) on a quiet machine; a noisy one may need the second (3)
    blocks = 2 if "A/B: REGRESSION after 2 blocks (4 runs in" in done.stdout else 3
    assert f"A/B: REGRESSION after {blocks} blocks ({2 * blocks} runs in" in done.stdout, done.stdout
    exp = json.loads((out / "ab.json").read_text())
    assert exp["status"] == "complete" and exp["verdict"] == "regression" and len(exp["runs"]) == 2 * blocks
    assert all(sorted(order) == ["A", "B"] for order in exp["orders"]) and exp["seed"] == 3
    tpot = next(d for d in exp["looks"][-1]["decisions"] if d["figure"] == "tpot_s.p50")
    assert tpot["verdict"] == "regression" and 0.3 < tpot["change"] < 0.7  # itl 4 → 6 ms: +50 %
    assert tpot["alpha"] == pytest.approx(0.025)  # two planned looks (2 and 3 blocks): α split
    md = (tmp_path / "summary.md").read_text()
    assert md == (out / "ab.md").read_text() and "| TPOT p50 |" in md and "**REGRESSION**" in md
    page = (out / "compare.html").read_text()
    assert "Gate: REGRESSION" in page and "×2" in page  # the decision, and each arm as one side of two runs
    assert len(query.runs(tmp_path / "history")) == 2 * blocks  # every run, and each figure's decision, in the history
    assert sorted(query.decisions(tmp_path / "history").figure) == ["output_tokens_per_s", "tpot_s.p50"]


@pytest.mark.slow
def test_aa_stores_the_noise_floor_and_plans_the_runs(tmp_path):
    out, floors = tmp_path / "aa", tmp_path / "noise"
    done = run_ab(
        "--aa",
        "--blocks",
        "2",
        "--out",
        str(out),
        "--noise-dir",
        str(floors),
        "--precision",
        "5",
        "--",
        *COMMON,
        "backend.run_noise_cv=0.03",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "A/A:" in done.stdout and "noise floor (" in done.stdout and "needs" in done.stdout
    [path] = list(floors.glob("*/*.json"))
    floor = noise.NoiseFloor.from_dict(json.loads(path.read_text()))
    assert floor.figures["tpot_s.p50"].sd_run > 0 and floor.cost_run_s > 0 and floor.cost_request_s > 0
    assert json.loads((out / "ab.json").read_text())["noise_floor"] == str(path)


@pytest.mark.parametrize(
    "args,message",
    [
        (["--", *COMMON], "the arms are the same"),
        (["--blocks", "1", "--b", "backend.itl_ms=5", "--", *COMMON], "--blocks must be >= 2"),
        (["--figures", "speed", "--b", "backend.itl_ms=5", "--", *COMMON], "unknown figure 'speed'"),
        (["--b", "backend.itl_ms=5", "--", *COMMON, "repeat=3"], "set by harness.ab"),
        (["--b-cwd", "/tmp", "--", *COMMON], "not a checkout of the harness"),
        (["--threshold", "nan", "--b", "backend.itl_ms=5", "--", *COMMON], "--threshold"),
        (["--timeout-s", "-1", "--b", "backend.itl_ms=5", "--", *COMMON], "--timeout-s"),
    ],
)
def test_bad_input_is_one_line(args, message, tmp_path):
    assert ab.main(["--out", str(tmp_path / "x"), *args]) == ab.EXIT_BAD_INPUT


def test_bad_input_message(tmp_path, capsys):
    assert ab.main(["--out", str(tmp_path / "x"), "--blocks", "1", "--b", "backend.itl_ms=5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --blocks must be >= 2: a paired interval needs two blocks (got 1)"]


@pytest.mark.slow
def test_a_refused_run_ends_the_experiment_in_one_line(tmp_path):
    done = run_ab("--out", str(tmp_path / "ab"), "--b", "backend.itl_ms=5", "--", *COMMON, "workload.input_len=8")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("error: arm ") and "input_len 8 is too short" in done.stderr


@pytest.mark.slow
def test_sigterm_keeps_what_was_measured_and_leaves_no_process(tmp_path):
    out = tmp_path / "ab"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness.ab",
            "--blocks",
            "3",
            "--out",
            str(out),
            "--b",
            "backend.itl_ms=5",
            "--",
            *COMMON,
            "workload.num_requests=200",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_foreground_job,
    )
    deadline = time.monotonic() + 120
    while not list((out / "runs").glob("block001-*/requests.jsonl")) and time.monotonic() < deadline:
        time.sleep(0.2)
    family = psutil.Process(proc.pid).children(recursive=True)
    assert family, "the run and its server were not started"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == ab.EXIT_INTERRUPTED and "interrupted: the runs so far and ab.json are in" in err
    assert json.loads((out / "ab.json").read_text())["status"] == "interrupted"
    assert list((out / "runs").glob("block001-*/summary.json"))  # the interrupted run kept its measurement
    runs = json.loads((out / "ab.json").read_text())["runs"]
    assert runs[-1]["exit_code"] == 130 and (out / "runs" / Path(runs[-1]["run_dir"]).name / "summary.json").is_file()
    gone, alive = psutil.wait_procs(family, timeout=10)
    assert not alive, [p.cmdline() for p in alive]


@pytest.mark.slow
def test_a_killed_experiment_takes_its_run_with_it(tmp_path):
    """SIGKILL leaves harness.ab no clean-up: its run gets SIGTERM from the kernel, ends
    interrupted with what it measured, and its server goes with it."""
    out = tmp_path / "ab"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness.ab",
            "--blocks",
            "3",
            "--out",
            str(out),
            "--b",
            "backend.itl_ms=5",
            "--",
            *COMMON,
            "workload.num_requests=400",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=as_foreground_job,
    )
    deadline = time.monotonic() + 120
    while not list((out / "runs").glob("block001-*/requests.jsonl")) and time.monotonic() < deadline:
        time.sleep(0.2)
    family = psutil.Process(proc.pid).children(recursive=True)
    assert family, "the run and its server were not started"
    proc.kill()
    proc.wait(timeout=10)
    gone, alive = psutil.wait_procs(family, timeout=30)
    assert not alive, [p.cmdline() for p in alive]
    summaries = [json.loads(p.read_text()) for p in (out / "runs").glob("block001-*/summary.json")]
    assert [s["status"] for s in summaries] == ["interrupted"]
