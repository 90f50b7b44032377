"""The last step of a benchmark job, run always: no engine process, container or GPU memory left.

    python scripts/ci/teardown.py            # find, stop, and fail loudly if anything was left
    python scripts/ci/teardown.py --dry-run  # only report

What it looks for, among this user's processes (never itself or its parents):
- engine servers and the harness: the command lines in ENGINE_PATTERNS;
- containers named ``harness-*`` (the container form of the server presets), if docker is here;
- processes holding GPU memory (``nvidia-smi --query-compute-apps``), if nvidia-smi is here.

Each one found is printed, stopped (SIGTERM, then SIGKILL after a grace), and the exit code is
1: a job that leaks an engine fails even when its benchmark passed, so the next job on this
runner does not measure a GPU that is already busy. Nothing found: exit 0.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Optional

import psutil

# command-line fragments of the processes a benchmark job starts
ENGINE_PATTERNS = (
    "-m refserver",
    "harness.reference_server",
    "-m harness",
    "vllm.entrypoints",
    "vllm serve",
    "sglang.launch_server",
    "llama_cpp.server",
    "mlx_lm.server",
    "transformers serve",
    "text-generation-launcher",
    "text-generation-router",
    "trtllm-serve",
    "mii.entrypoints",
    "ollama serve",
    "ollama runner",
)
CONTAINER_PREFIX = "harness-"
GRACE_S = 10.0


def _protected() -> set[int]:
    me = psutil.Process()
    return {me.pid, *(p.pid for p in me.parents())}


def leftover_processes(patterns: Sequence[str] = ENGINE_PATTERNS, only: str = "") -> list[psutil.Process]:
    protected, user = _protected(), psutil.Process().username()
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "username", "status"]):
        if proc.pid in protected or proc.info["username"] != user or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        cmdline = " ".join(proc.info["cmdline"] or [])
        if any(p in cmdline for p in patterns) and only in cmdline:
            found.append(proc)
    return found


def gpu_processes() -> Optional[list[tuple[int, str, str]]]:
    """(pid, name, used memory) of each process on a GPU; None where nvidia-smi is absent."""
    if shutil.which("nvidia-smi") is None:
        return None
    out = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    rows = []
    for line in out.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and parts[0].isdigit():
            rows.append((int(parts[0]), parts[1], parts[2]))
    return rows


def leftover_containers() -> Optional[list[str]]:
    """Names of running harness-* containers; None where docker is absent or not answering."""
    if shutil.which("docker") is None:
        return None
    out = subprocess.run(
        ["docker", "ps", "--filter", f"name=^{CONTAINER_PREFIX}", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if out.returncode != 0:
        return None
    return [n for n in out.stdout.split() if n.startswith(CONTAINER_PREFIX)]


def _running(proc: psutil.Process) -> bool:
    """Still running: a zombie (exited, its parent has not reaped it yet) is not."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_gone(processes: Sequence[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Those of ``processes`` still running after ``timeout_s``. (psutil.wait_procs waits for a
    zombie that is not our child until the time-out.)"""
    deadline = time.monotonic() + timeout_s
    alive = [p for p in processes if _running(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [p for p in alive if _running(p)]
    return alive


def stop(processes: Sequence[psutil.Process]) -> None:
    for proc in processes:
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            pass
    for proc in _wait_gone(processes, GRACE_S):
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    _wait_gone(processes, GRACE_S)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dry-run", action="store_true", help="report only; stop nothing")
    p.add_argument(
        "--only",
        default="",
        help="consider only processes and containers whose command line or "
        "name holds this text (a shared machine: only this job's)",
    )
    a = p.parse_args(argv)
    problems: list[str] = []

    procs = leftover_processes(only=a.only)
    for proc in procs:
        problems.append(f"engine process left running: pid {proc.pid}: {' '.join(proc.info['cmdline'] or [])[:200]}")

    containers = leftover_containers()
    if containers is None:
        print("teardown: no docker here: containers not checked")
    containers = [n for n in containers or [] if a.only in n]
    for name in containers:
        problems.append(f"container left running: {name}")

    gpu = gpu_processes() if not a.only else []
    if gpu is None:
        print("teardown: no nvidia-smi here: GPU memory not checked")
    known = {proc.pid for proc in procs}
    gpu_procs = []
    for pid, name, used in gpu or []:
        problems.append(f"GPU memory held: pid {pid} ({name}): {used}")
        if pid not in known and psutil.pid_exists(pid):
            try:
                proc = psutil.Process(pid)
                if proc.username() == psutil.Process().username() and pid not in _protected():
                    gpu_procs.append(proc)
            except psutil.Error:
                pass

    if not problems:
        print("teardown: clean: no engine process, container or GPU memory left")
        return 0
    for line in problems:
        print(f"::error::teardown: {line}", file=sys.stderr)
    if not a.dry_run:
        stop([*procs, *gpu_procs])
        for name in containers:
            subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=120)
        time.sleep(0.5)
        still = [pr.pid for pr in [*procs, *gpu_procs] if _running(pr)]
        print(f"teardown: stopped what was left{'; still running: ' + str(still) if still else ''}", file=sys.stderr)
    print(f"teardown: FAILED: {len(problems)} thing(s) outlived the job (see above)", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
