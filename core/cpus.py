"""The cores this process may run on."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """The cores in this process's affinity (Linux), else every core the machine has."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
