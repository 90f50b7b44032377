"""scripts/pytest_halves.py: the suite as two pytest processes side by side, the engine tests and
the rest, tried on a small project of its own (one test in each half)."""

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import pytest_halves  # noqa: E402 - a script, found on the path added above

RUNNER = REPO / "scripts" / "pytest_halves.py"
PROJECT = """
[tool.pytest.ini_options]
markers = ["engine: loads an engine"]
"""


def project(folder: Path, engine_body: str = "assert True", rest_body: str = "assert True") -> Path:
    (folder / "pyproject.toml").write_text(PROJECT)
    (folder / "test_rest.py").write_text(f"import os, pathlib, time\n\ndef test_rest():\n    {rest_body}\n")
    (folder / "test_engine.py").write_text(
        f"import os, pathlib, time\nimport pytest\n\n@pytest.mark.engine\ndef test_engine():\n    {engine_body}\n"
    )
    return folder


def run(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(RUNNER), "-p", "no:cacheprovider", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_marker_given_narrows_both_halves():
    assert pytest_halves.split_marker(["-x", "-m", "slow", "--durations=5"]) == ("slow", ["-x", "--durations=5"])
    assert pytest_halves.split_marker(["-mslow", "-m", "fast"]) == ("fast", [])  # the last one, as pytest
    assert pytest_halves.split_marker(["--maxfail=2"]) == (None, ["--maxfail=2"])
    command = pytest_halves.half_command("engine", "engine", "not slow", ["-x"])
    assert command[1:] == [
        "-m",
        "pytest",
        "-m",
        "(not slow) and (engine)",
        "-o",
        "cache_dir=.pytest_cache/engine",
        "-x",
    ]
    assert pytest_halves.half_command("rest", "not engine", None, [])[3:] == ["-m", "not engine"]


def test_a_folder_or_report_given_is_split_between_the_halves():
    args = ["--basetemp", "/t/b", "--junitxml=out/r.xml", "-x"]
    assert pytest_halves.own_paths("engine", args) == ["--basetemp=/t/b/engine", "--junitxml=out/r.engine.xml", "-x"]
    assert pytest_halves.own_paths("rest", ["--junit-xml", "r.xml"]) == ["--junit-xml=r.rest.xml"]


def test_the_status_is_the_first_failing_halfs_and_an_empty_half_passes():
    assert pytest_halves.status({"rest": 0, "engine": 0}) == 0
    assert pytest_halves.status({"rest": 0, "engine": 5}) == 0  # the selection left the engine half empty
    assert pytest_halves.status({"rest": 5, "engine": 5}) == 5
    assert pytest_halves.status({"rest": 0, "engine": 1}) == 1
    assert pytest_halves.status({"rest": 2, "engine": 1}) == 2


def test_each_half_runs_its_tests_and_a_failure_in_either_fails_the_whole(tmp_path):
    folder = project(tmp_path, engine_body="assert False, 'the engine half failed'")
    proc = run(folder)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert "1 passed, 1 deselected" in out and "the engine half failed" in out
    assert re.search(r"^\[halves\] engine: status 1, 1 failed, 1 deselected.* in [0-9.]+s$", out, re.M)
    assert "[halves] rest: status 0" in out and "[halves] both halves side by side:" in out

    narrowed = run(folder, "-m", "not engine")  # the engine half has nothing to run: status 5, a pass
    assert narrowed.returncode == 0, narrowed.stdout
    assert "[halves] engine: status 5" in narrowed.stdout


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_reaches_both_halves_and_their_output_is_kept(tmp_path, sig):
    # each test says it started (its pid in a file), then waits far longer than the test does
    wait = "pathlib.Path('{}').write_text(str(os.getpid())); time.sleep(60)"
    folder = project(
        tmp_path, engine_body=wait.format(tmp_path / "engine.pid"), rest_body=wait.format(tmp_path / "rest.pid")
    )
    runner = subprocess.Popen(
        [sys.executable, str(RUNNER), "-p", "no:cacheprovider"],
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    pids = [tmp_path / "engine.pid", tmp_path / "rest.pid"]
    deadline = time.monotonic() + 60
    while not all(p.is_file() and p.read_text() for p in pids):  # both halves are inside their test
        assert runner.poll() is None and time.monotonic() < deadline, "a half never started its test"
        time.sleep(0.05)
    runner.send_signal(sig)
    out, _ = runner.communicate(timeout=60)
    status = 2 if sig == signal.SIGINT else 128 + signal.SIGTERM  # pytest's "interrupted"; killed by SIGTERM
    assert runner.returncode == status, out
    assert f"[halves] engine: status {status}" in out and f"[halves] rest: status {status}" in out
    if sig == signal.SIGINT:  # each pytest took it as Ctrl-C: its own ending, printed
        assert out.count("KeyboardInterrupt") >= 2
    assert not [pid for pid in (int(p.read_text()) for p in pids) if psutil.pid_exists(pid)]
