"""The process state that one test can leave behind for the next, checked around every test.

Signal handlers and the signal mask decide whether a later test's Ctrl-C or SIGTERM does what it
should; CPU affinity decides how many workers a plan or a client starts; the environment, the
working directory and child processes left alive change what later tests see and measure. The
autouse fixture :func:`unchanged_process_state` takes a snapshot after the wider-scoped fixtures
are set up and compares it with the state after the test's own fixtures are torn down. A test
that changed anything fails at teardown, naming what it left behind, and the state is put back,
so that one leak is reported once and does not break the tests that follow.

Wider-scoped fixtures (an engine loaded for a module, the session's browser) are set up before
the snapshot and torn down after the check, so what they hold is not counted against a test.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

import psutil
import pytest

from core.processes import is_interpreter_helper

# signals whose handler can be read and set (SIGKILL and SIGSTOP cannot be caught)
SIGNALS = sorted(s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP))
# how long a child the test has just ended may take to exit before it counts as left alive
CHILD_EXIT_GRACE_S = 5.0
# variables pytest itself sets for each phase of a test
PYTEST_VARIABLES = ("PYTEST_CURRENT_TEST",)
# variables a library sets once, when it is first imported, and then relies on: not a leak of
# the test that happened to import it first (transformers' model classes import torch's inductor,
# which sets its cache folder; Ray says whether it is a Ray Client)
SET_BY_FIRST_IMPORT = ("TORCHINDUCTOR_CACHE_DIR", "RAY_CLIENT_MODE")


@dataclass
class ProcessState:
    handlers: dict[int, Any]
    mask: frozenset[int]
    wakeup_fd: int
    affinity: Optional[frozenset[int]]
    environ: dict[str, str]
    cwd: str
    children: dict[int, str] = field(default_factory=dict)  # pid: command line, alive ones only


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _handler_name(handler: Any) -> str:
    if handler is signal.SIG_DFL:
        return "SIG_DFL"
    if handler is signal.SIG_IGN:
        return "SIG_IGN"
    if handler is signal.default_int_handler:
        return "Python's default_int_handler"
    if handler is None:
        return "a handler not set from Python"
    return f"{getattr(handler, '__module__', '?')}.{getattr(handler, '__qualname__', repr(handler))}"


def _wakeup_fd() -> int:
    previous = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(previous)
    return previous


def _alive_children() -> dict[int, str]:
    found = {}
    for child in psutil.Process().children():
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            command = " ".join(child.cmdline())[:160]
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if not is_interpreter_helper(command):  # kept for the whole interpreter, not owned by any test
            found[child.pid] = command
    return found


def snapshot() -> ProcessState:
    return ProcessState(
        handlers={s: signal.getsignal(s) for s in SIGNALS},
        mask=frozenset(signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        wakeup_fd=_wakeup_fd(),
        affinity=frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        environ={k: v for k, v in os.environ.items() if k not in PYTEST_VARIABLES},
        cwd=os.getcwd(),
        children=_alive_children(),
    )


def _children_left(before: ProcessState) -> dict[int, str]:
    """Children started since ``before`` and still alive after a grace for those exiting."""
    new = {pid: cmd for pid, cmd in _alive_children().items() if pid not in before.children}
    procs = []
    for pid in new:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=CHILD_EXIT_GRACE_S) if procs else ([], [])
    alive_pids = {p.pid for p in alive}
    return {pid: cmd for pid, cmd in new.items() if pid in alive_pids and _alive(pid)}


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _pytest_timeouts(before: Any, after: Any) -> bool:
    """Both SIGALRM handlers are pytest-timeout's, or its own reset to SIG_DFL: SIGALRM is its.

    pytest-timeout (``timeout_method = "signal"``, pyproject.toml) sets a new handler of its own
    around each test and puts SIG_DFL back when it cancels the alarm, which it does at the test's
    end and also as soon as a test fails (its pytest_exception_interact hook), before teardown.
    Neither is a test's doing; a handler a test sets itself, while pytest-timeout owns SIGALRM,
    is still found."""
    ours = [getattr(h, "__module__", None) == "pytest_timeout" for h in (before, after)]
    return any(ours) and all(o or h is signal.SIG_DFL for o, h in zip(ours, (before, after)))


def differences(before: ProcessState, after: ProcessState) -> list[tuple[str, Callable[[], None]]]:
    """What changed from ``before`` to ``after``: one line each, with what puts it back."""
    found: list[tuple[str, Callable[[], None]]] = []
    for s in SIGNALS:
        if s == signal.SIGALRM and _pytest_timeouts(before.handlers[s], after.handlers[s]):
            continue
        if after.handlers[s] is not before.handlers[s] and before.handlers[s] is not None:
            found.append(
                (
                    f"the {_signal_name(s)} handler: {_handler_name(before.handlers[s])} became "
                    f"{_handler_name(after.handlers[s])}",
                    lambda s=s: signal.signal(s, before.handlers[s]),
                )
            )
    if after.mask != before.mask:
        blocked = sorted(_signal_name(s) for s in after.mask - before.mask)
        unblocked = sorted(_signal_name(s) for s in before.mask - after.mask)
        found.append(
            (
                f"the signal mask: blocked {blocked or 'none'}, unblocked {unblocked or 'none'}",
                lambda: signal.pthread_sigmask(signal.SIG_SETMASK, before.mask),
            )
        )
    if after.wakeup_fd != before.wakeup_fd:
        found.append(
            (
                f"the signal wake-up fd: {before.wakeup_fd} became {after.wakeup_fd}",
                lambda: signal.set_wakeup_fd(before.wakeup_fd),
            )
        )
    if after.affinity != before.affinity and before.affinity is not None:
        found.append(
            (
                f"the CPU affinity: {sorted(before.affinity)} became {sorted(after.affinity or ())}",
                lambda: os.sched_setaffinity(0, before.affinity),
            )
        )  # type: ignore[arg-type]  # checked not None above
    changed = sorted(
        k
        for k in before.environ.keys() | after.environ.keys()
        if before.environ.get(k) != after.environ.get(k) and not (k in SET_BY_FIRST_IMPORT and k not in before.environ)
    )
    if changed:  # names only: a value may be a secret
        found.append(
            (
                f"the environment: {', '.join(changed)} changed",
                lambda: _restore_environ(before.environ),
            )
        )
    if after.cwd != before.cwd:
        found.append((f"the working directory: {before.cwd} became {after.cwd}", lambda: os.chdir(before.cwd)))
    return found


def _restore_environ(environ: dict[str, str]) -> None:
    for name in set(os.environ) - set(environ) - set(PYTEST_VARIABLES) - set(SET_BY_FIRST_IMPORT):
        del os.environ[name]
    os.environ.update(environ)


def _kill(pids: dict[int, str]) -> None:
    procs = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            proc.kill()
            procs.append(proc)
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=5)


# what the wider-scoped fixtures changed between one test's end and the next test's start:
# (the test that followed, what changed), for the session's summary (tests/conftest.py)
changed_between_tests: list[tuple[str, str]] = []
_last_seen: Optional[ProcessState] = None


@pytest.fixture(autouse=True)
def unchanged_process_state(request):
    """Fails a test that leaves the process state changed (see the module docstring)."""
    global _last_seen
    if threading.current_thread() is not threading.main_thread():  # signals are the main thread's
        yield
        return
    before = snapshot()
    if _last_seen is not None:
        for line, _ in differences(_last_seen, before):
            changed_between_tests.append((request.node.nodeid, line))
        started = {pid: cmd for pid, cmd in before.children.items() if pid not in _last_seen.children}
        for pid, cmd in started.items():
            changed_between_tests.append((request.node.nodeid, f"child process started: {pid} ({cmd})"))
    yield
    after = snapshot()
    left = differences(before, after)
    children = _children_left(before)
    if children:
        left.append(
            (
                "child processes still alive: " + "; ".join(f"{pid} ({cmd})" for pid, cmd in children.items()),
                lambda: _kill(children),
            )
        )
    for _, put_back in left:
        put_back()
    _last_seen = snapshot() if left else after
    if left:
        pytest.fail("the test left the process changed:\n  " + "\n  ".join(line for line, _ in left), pytrace=False)
