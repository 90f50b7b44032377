"""core/parent.py: a forked child dies with its parent, even one that died before the child asked."""

from __future__ import annotations

import os
import signal

from core.parent import follow_the_parent


def _forked(child) -> int:
    """The signal that ended a forked child running ``child()`` (0: it exited)."""
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        try:
            child()
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0


def test_a_child_of_a_parent_already_gone_ends_itself():
    """The parent killed between the fork and the child's PR_SET_PDEATHSIG: the kernel sends
    nothing, so the child sees another parent and ends itself. Here the pid it is told is not its
    parent's, as it would be after the parent died."""
    assert _forked(lambda: follow_the_parent(os.getppid() + 1)) == signal.SIGKILL


def test_a_child_of_a_living_parent_goes_on():
    parent = os.getpid()
    assert _forked(lambda: follow_the_parent(parent)) == 0
