"""A child process's tie to its parent: a signal from the kernel when the parent dies (Linux), the
signals a forked child leaves to its parent, and forking with a tokenizer loaded."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager


def take_back_ctrl_c() -> None:
    """A background job of a script (``cmd &``) starts with SIGINT ignored, and Python keeps it
    ignored: take Ctrl-C (and ``kill -INT``) back, as a command's first step."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


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


def die_with(parent_pid: int, sig: signal.Signals = signal.SIGTERM) -> Callable[[], None]:
    """A ``preexec_fn`` for a child that must not outlive ``parent_pid`` (this process): ``sig``
    when it dies, even by SIGKILL, and at once when it died before the child was told."""

    def preexec() -> None:
        signal_when_parent_dies(sig)
        if os.getppid() != parent_pid:
            os.kill(os.getpid(), sig)

    return preexec


def follow_the_parent(parent_pid: int, ignored: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGHUP)) -> None:
    """In a forked child of ``parent_pid``: die with the parent (even when it is killed outright),
    leave ``ignored`` to the parent (Ctrl-C and a hang-up reach the whole process group; the
    parent decides when its children stop), and stop writing to the parent's wake-up fd (an
    asyncio loop's pipe, which the fork shares).

    A parent killed between the fork and this call sends no signal (the kernel sends it only to
    children that asked before the parent died): the child then has another parent already, and
    ends itself (the flake hunt saw a plan worker outlive its killed parent so, once in 30)."""
    signal_when_parent_dies(signal.SIGKILL)
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGKILL)
    for sig in ignored:
        signal.signal(sig, signal.SIG_IGN)
    try:
        signal.set_wakeup_fd(-1)
    except (ValueError, OSError):
        pass


@contextmanager
def tokenizers_single_threaded() -> Iterator[None]:
    """TOKENIZERS_PARALLELISM=false while children are forked (and so in them): HF tokenizers'
    thread pool does not survive a fork, so a child that tokenizes would warn, or deadlock, with
    it on. The parent's setting is restored after."""
    before = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = before
