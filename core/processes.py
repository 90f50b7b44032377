"""This process's descendants: which ones the interpreter itself keeps, and which a part started.

Python's multiprocessing starts its resource tracker (and, where used, its fork server) the first
time anything spawns, and keeps it until the interpreter exits: it belongs to no engine or test,
and waiting for it to end waits until a time-out. A vLLM in-process close waited its whole 30 s
for the tracker before this was known (one close: 31.0 s, 0.4 s for the server, which has none).
"""

from __future__ import annotations

import contextlib

import psutil

# the command lines of the helpers multiprocessing starts once for the interpreter and keeps
INTERPRETER_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def descendants() -> set[int]:
    """The PIDs of this process's descendants now."""
    return {p.pid for p in psutil.Process().children(recursive=True)}


def is_interpreter_helper(command: str) -> bool:
    return any(helper in command for helper in INTERPRETER_HELPERS)


def started_since(before: set[int]) -> list[psutil.Process]:
    """This process's descendants that are not in ``before`` and not an interpreter helper."""
    started = []
    for proc in psutil.Process().children(recursive=True):
        if proc.pid in before:
            continue
        try:
            command = " ".join(proc.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue  # gone already: nothing to wait for
        if not is_interpreter_helper(command):
            started.append(proc)
    return started


def end_processes(procs: list[psutil.Process], grace_s: float) -> None:
    """SIGTERM to each, then SIGKILL to those still alive ``grace_s`` later (gone ones skipped)."""
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=grace_s)
