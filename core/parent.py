"""A child process's tie to its parent: a signal from the kernel when the parent dies (Linux)."""
from __future__ import annotations

import signal
import sys


def signal_when_parent_dies(sig: signal.Signals) -> None:
    """PR_SET_PDEATHSIG: the kernel sends ``sig`` to this process when the thread that started it
    ends (its process killed, even by SIGKILL). Nothing on other systems."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, sig)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
