"""The CI: workflows checked by actionlint, the Pythons requires-python claims all tested, and
the benchmark job's scripts (scripts/ci/) run end to end here, with the reference server as the
engine: sweep, baseline absent and found, the gate passing and failing, the job summary, the
teardown."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest
import yaml
from conftest import REPO
from packaging.specifiers import SpecifierSet

CI = REPO / "scripts" / "ci"
BIN = Path(sys.executable).parent
# the reference server as the engine: a known TTFT, so a slower "engine" is a sure regression
# two repeats a point: the gate's interval comes from the runs
SWEEP = [
    "model=tiny-random",
    "backend.count_prompt_tokens=false",
    "backend.itl_ms=2",
    "workload.num_requests=4",
    "repeat=2",
    "machine.enabled=false",
    "workload.warmup_requests=0",
]


def env_with(**extra):
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "HARNESS_PYTHON": sys.executable}
    env.pop("GITHUB_OUTPUT", None)
    env.pop("GITHUB_STEP_SUMMARY", None)
    return {**env, **extra}


def script(*args, env=None, cwd=REPO, timeout=600):
    return subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env or env_with(), capture_output=True, text=True, timeout=timeout
    )


def test_workflows_pass_actionlint():
    actionlint = shutil.which("actionlint", path=str(BIN))
    assert actionlint, "actionlint is in the test extra (pip install -e '.[test]')"
    proc = subprocess.run([actionlint, "-no-color"], cwd=REPO, env=env_with(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert shutil.which("shellcheck", path=str(BIN)), "shellcheck checks the workflows' scripts"
    assert sorted(p.name for p in (REPO / ".github" / "workflows").glob("*.yml")) == ["ci.yml", "gpu-benchmark.yml"]


def test_ci_tests_every_python_that_requires_python_claims():
    """pyproject.toml's requires-python is exactly the fast job's matrix: a Python the package
    installs on that CI never tests fails here, and so does one CI tests that it refuses."""
    claim = re.search(r'^requires-python = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M)
    assert claim, "pyproject.toml states requires-python"
    admitted = [f"3.{minor}" for minor in range(6, 30) if f"3.{minor}.0" in SpecifierSet(claim.group(1))]
    fast = yaml.safe_load((REPO / ".github" / "workflows" / "ci.yml").read_text())["jobs"]["fast"]
    assert fast["strategy"]["matrix"]["python"] == admitted
    assert fast["steps"][-1]["run"].startswith('python -m pytest -m "not engine and not slow"')


def test_shell_scripts_pass_shellcheck():
    proc = subprocess.run(
        [
            shutil.which("shellcheck", path=str(BIN)),
            *sorted(CI.glob("*.sh")),
            REPO / "scripts" / "setup.sh",
            REPO / "scripts" / "test.sh",
            REPO / "scripts" / "lint.sh",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout


@pytest.mark.slow
def test_engine_availability(tmp_path):
    out = tmp_path / "github_output"
    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    no_docker = {"PATH": f"{fakebin}:/usr/bin:/bin", "GITHUB_OUTPUT": str(out), "HARNESS_CONTAINER_IMAGE": ""}
    proc = script(sys.executable, CI / "engine_available.py", "tgi", env=env_with(**no_docker))
    assert proc.returncode == 0 and "not on this runner" in proc.stdout
    (fakebin / "text-generation-launcher").write_text("#!/bin/sh\n")
    (fakebin / "text-generation-launcher").chmod(0o755)
    proc = script(sys.executable, CI / "engine_available.py", "tgi", env=env_with(**no_docker))
    assert proc.returncode == 0 and "tgi: available" in proc.stdout
    assert out.read_text().splitlines() == ["available=false", "available=true"]


def fake_gh(tmp_path, baseline_dir=None):
    """A `gh` on PATH: `run list` finds one run when there is a baseline, `run download` copies it."""
    fakebin = tmp_path / "fakebin"
    fakebin.mkdir(exist_ok=True)
    run_id = "4242" if baseline_dir else ""
    (fakebin / "gh").write_text(f"""#!/usr/bin/env bash
echo "$@" >> {tmp_path}/gh_calls
case "$1 $2" in
  "run list") echo "{run_id}" ;;
  "run download")
    dir=""; while [ $# -gt 0 ]; do [ "$1" = --dir ] && dir=$2; shift; done
    cp -r "{baseline_dir}/." "$dir/" ;;
esac
""")
    (fakebin / "gh").chmod(0o755)
    return env_with(PATH=f"{fakebin}{os.pathsep}{BIN}{os.pathsep}{os.environ['PATH']}", BRANCH="main")


def sweep(out, ttft_ms):
    proc = script(CI / "run-sweep.sh", "reference", "ci-smoke", out, *SWEEP, f"backend.ttft_ms={ttft_ms}")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    points = json.loads((out / "sweep.json").read_text())["points"]
    assert [p["status"] for p in points] == ["complete", "complete"]
    assert [p["overrides"][0] for p in points] == ["workload.concurrency=1", "workload.concurrency=4"]
    return out


def gate(tmp_path, current, baseline, name, noise_dir=None):
    summary = tmp_path / f"summary-{name}.md"
    proc = script(
        sys.executable,
        CI / "gate.py",
        "--current",
        current,
        "--baseline",
        baseline,
        "--out",
        tmp_path / f"compare-{name}",
        "--fail-on-regression",
        "25",
        "--summary",
        summary,
        *(["--noise-dir", noise_dir] if noise_dir else []),
    )
    return proc, summary.read_text() if summary.exists() else ""


def point_verdicts(summary):
    """The verdict column of the summary's table, one per point."""
    rows = [line for line in summary.splitlines() if line.startswith("| reference/server")]
    return [r.rstrip(" |").rsplit("| ", 1)[1] for r in rows]


def noise_floors(folder, sweep_dir, sd_apart):
    """A stored noise floor (as python -m harness.ab --aa writes one) for each point of a sweep."""
    from harness.gate.noise import FigureNoise, NoiseFloor, save
    from harness.results.store import load_run
    from harness.telemetry.environment import hardware_fingerprint

    for point in json.loads((sweep_dir / "sweep.json").read_text())["points"]:
        run = load_run(Path(point["run_dirs"][0]), with_workload=False)
        figures = {"ttft_s.p50": FigureNoise(sd_apart / 2, None, 10, 12, sd_run_apart=sd_apart)}
        save(folder, NoiseFloor(run.summary.config_sha256, hardware_fingerprint(run.env), figures, 1.0, 0.05))
    return folder


@pytest.fixture(scope="module")
def smoke_sweeps(tmp_path_factory):
    """The ci-smoke sweep three times: a baseline, the same again, and a 4× slower TTFT."""
    root = tmp_path_factory.mktemp("sweeps")
    return {name: sweep(root / name, ttft_ms=ttft) for name, ttft in (("base", 60), ("same", 60), ("slower", 240))}


@pytest.mark.slow
def test_the_benchmark_job_baseline_absent_then_found_gate_passing_then_failing(tmp_path, smoke_sweeps):
    base = smoke_sweeps["base"]

    # the first run: no baseline, no gate, and the summary says so
    proc = script(CI / "fetch-baseline.sh", "results-reference-ci-smoke", tmp_path / "baseline", env=fake_gh(tmp_path))
    assert proc.returncode == 0 and "no baseline" in proc.stdout and not (tmp_path / "baseline").exists()
    proc, summary = gate(tmp_path, base, tmp_path / "baseline", "first")
    assert proc.returncode == 0, proc.stderr
    assert "**No baseline**" in summary and "no gate this time" in summary

    # the next run finds the baseline: the latest successful run on the default branch
    env = fake_gh(tmp_path, baseline_dir=base)
    proc = script(CI / "fetch-baseline.sh", "results-reference-ci-smoke", tmp_path / "baseline", env=env)
    assert proc.returncode == 0 and "baseline: results-reference-ci-smoke of run 4242" in proc.stdout
    assert (tmp_path / "baseline" / "sweep.json").is_file()
    calls = (tmp_path / "gh_calls").read_text()
    assert "--branch main --status success" in calls and "run download 4242" in calls

    # without the noise between sweeps made apart, nothing decides: inconclusive, never a regression
    proc, summary = gate(tmp_path, smoke_sweeps["slower"], tmp_path / "baseline", "no-floor")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert point_verdicts(summary) == ["inconclusive", "inconclusive"], summary
    assert "no noise floor with σ_apart" in summary and "python -m harness.ab" in summary

    # with a noise floor (σ_apart 5 %): the same sweep passes, a 4× slower TTFT regresses
    floors = noise_floors(tmp_path / "noise", base, 0.05)
    proc, summary = gate(tmp_path, smoke_sweeps["same"], tmp_path / "baseline", "same", floors)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert point_verdicts(summary) == ["pass", "pass"], summary
    assert "Gate against the baseline: no regression" in summary

    proc, summary = gate(tmp_path, smoke_sweeps["slower"], tmp_path / "baseline", "slower", floors)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert point_verdicts(summary) == ["REGRESSION", "REGRESSION"], summary
    assert "Gate against the baseline: 2 regression(s)" in summary
    assert (tmp_path / "compare-slower").is_dir() and list((tmp_path / "compare-slower").glob("*/compare.html"))


@pytest.mark.slow
def test_gate_without_a_sweep_is_one_line(tmp_path):
    proc = script(sys.executable, CI / "gate.py", "--current", tmp_path, "--out", tmp_path / "c")
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"error: no sweep.json under {tmp_path}: did the sweep run?"
    ]


@pytest.mark.parametrize("module", ["refserver", "harness.reference_server"])
@pytest.mark.slow
def test_teardown_finds_stops_and_fails_on_a_leftover_engine(tmp_path, module):
    marker = f"teardown-{uuid.uuid4().hex[:8]}"
    proc = script(sys.executable, CI / "teardown.py", "--only", marker)
    assert proc.returncode == 0 and "clean" in proc.stdout
    stray = subprocess.Popen(
        [sys.executable, "-m", module, "--port", "0", "--model-name", marker],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        time.sleep(1)
        proc = script(sys.executable, CI / "teardown.py", "--only", marker)
        assert proc.returncode == 1
        assert f"engine process left running: pid {stray.pid}" in proc.stderr and "FAILED" in proc.stderr
        stray.wait(timeout=30)  # stopped by the teardown
    finally:
        if stray.poll() is None:
            stray.kill()
    assert not psutil.pid_exists(stray.pid) or psutil.Process(stray.pid).status() == psutil.STATUS_ZOMBIE


@pytest.mark.slow
def test_the_pull_request_ab_gate_interleaves_two_checkouts(tmp_path):
    summary = tmp_path / "summary.md"
    proc = script(
        CI / "ab-gate.sh",
        "reference",
        REPO,
        REPO,
        tmp_path / "ab",
        "workload=synthetic",
        *SWEEP[:4],
        "machine.enabled=false",
        "workload.concurrency=2",
        "workload.warmup_requests=0",
        env=env_with(AB_BLOCKS="2", AB_MAX_BLOCKS="2", GITHUB_STEP_SUMMARY=str(summary), NOISE_DIR=str(tmp_path)),
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]  # the same code: never a regression
    exp = json.loads((tmp_path / "ab" / "ab.json").read_text())
    assert exp["arms"]["A"]["cwd"] == str(REPO) and len(exp["runs"]) == 4 and exp["verdict"] in ("pass", "inconclusive")
    assert summary.read_text().startswith("### A/B: **") and "| TTFT p50 |" in summary.read_text()


@pytest.mark.slow
def test_the_nightly_history_lives_on_a_data_branch(tmp_path, smoke_sweeps):
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", remote], check=True)
    work = tmp_path / "checkout"
    subprocess.run(["git", "init", "-q", work], check=True)
    git = ["git", "-C", work, "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "main"], check=True)
    subprocess.run([*git, "remote", "add", "origin", remote], check=True)
    env = env_with(HISTORY_PUSH="1", GITHUB_STEP_SUMMARY=str(tmp_path / "summary.md"))
    for n, results in enumerate([smoke_sweeps["base"], smoke_sweeps["same"]], start=1):
        proc = subprocess.run(
            ["bash", CI / "history.sh", results, tmp_path / f"history{n}", tmp_path / f"trend{n}.html"],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]  # no change: no alert
        assert (tmp_path / f"trend{n}.html").is_file()
    files = subprocess.run(
        ["git", "--git-dir", remote, "ls-tree", "-r", "--name-only", "bench-history"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    run_files = [f for f in files if f.startswith("history/runs/engine=")]
    verdicts = [f for f in files if f.startswith("history/decisions/")]
    assert len(run_files) == 2 * 2 * 2 and all(f.endswith(".parquet") for f in files)
    assert len(verdicts) == 2 * 2 * 4  # the nightly gate's: two nights × two points × four figures
    log = subprocess.run(
        ["git", "--git-dir", remote, "log", "--oneline", "bench-history"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert len(log) == 2  # one commit a night, appended: nothing rewritten
    summary = (tmp_path / "summary.md").read_text()
    assert "history" in summary.lower() and "### Nightly gate: no regression" in summary
    assert "no noise to judge by: 1 earlier nightly" in summary  # the second night: inconclusive, said why
