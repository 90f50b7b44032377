"""Which processes are the engine's: what per-process GPU memory (harness/telemetry/gpu.py) adds up.

- in-process engine: the harness's own process and its descendants (engines such as vLLM
  run their engine core and workers as child processes);
- a launched server (backends/server/backend.py): its process, its descendants and every member of
  its process group (the server leads a group of its own, which a worker that forked twice
  leaves the process tree but stays in);
- a remote server (``backend=openai``): none; only whole-device figures exist then.
"""

from __future__ import annotations

import os

import psutil


def engine_pids(root: int) -> frozenset[int]:
    """``root``, its descendants and, when ``root`` leads a process group other than ours, the
    group's members. Listing them reads /proc: call it about once a second, not per sample."""
    pids = {root}
    try:
        pids.update(p.pid for p in psutil.Process(root).children(recursive=True))
    except psutil.Error:
        pass
    if root != os.getpid() and _leads_group(root):
        pids.update(group_members(root))
    return frozenset(pids)


def group_members(pgid: int) -> list[int]:
    members = []
    for pid in psutil.pids():
        try:
            if os.getpgid(pid) == pgid:
                members.append(pid)
        except OSError:  # gone meanwhile
            continue
    return members


def _leads_group(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except OSError:
        return False
