"""The client's event loops: asyncio's own, or uvloop's (``client.event_loop``), and the runner
that runs a session's coroutines on one of them, a Ctrl-C cancelling what runs.

Why not ``asyncio.Runner`` (CPython 3.11 to 3.13), in two windows a Ctrl-C can land in:

- its ``run`` installs its SIGINT handler, then sets its count of presses to 0: a Ctrl-C in
  between cancels the coroutine and is forgotten, ``run`` raises CancelledError, and the run
  ended as "failed" with exit 1 instead of "interrupted" with 130;
- a Ctrl-C once the coroutine is done is raised inside the loop, which leaves the loop's stop
  queued: the ``close`` that follows fails ("Event loop stopped before Future completed").

Together they were 2 of the 4 failures in 150 tries of tests/test_faults.py's interrupted SLO
search (docs/internals/testing.md); ``tests/harness/client/test_event_loops.py`` sends the
SIGINT into each window, against this runner and against asyncio.Runner. Python 3.10 has no
Runner at all. :class:`LoopRunner` does the same on every version without either window.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, Optional, TypeVar

from core.errors import ConfigError

T = TypeVar("T")


def new_loop(kind: str) -> asyncio.AbstractEventLoop:
    """A new event loop of ``client.event_loop``'s kind."""
    if kind == "uvloop":
        try:
            import uvloop
        except ImportError:
            raise ConfigError(
                "client.event_loop=uvloop needs uvloop, which is not installed: "
                "pip install -e '.[client]' (or pip install uvloop)"
            ) from None
        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


class LoopRunner:
    """One event loop for many ``run`` calls (vLLM's AsyncLLM and the HTTP pools bind to the
    loop they first run in).

    In the main thread, the first Ctrl-C during ``run`` cancels the coroutine, which unwinds
    (the requests in flight are recorded as cancelled), and ``run`` then raises
    KeyboardInterrupt; a second Ctrl-C raises KeyboardInterrupt at once, as asyncio.Runner does.
    A first Ctrl-C that lands once the coroutine is done is raised when the loop has returned:
    raised inside the loop, as asyncio.Runner does, it left the loop's stop queued, and the
    close that followed failed ("Event loop stopped before Future completed").
    """

    def __init__(self, kind: str = "asyncio") -> None:
        self.loop = new_loop(kind)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        task = self.loop.create_task(coro)
        presses = [0]  # counted here, before the handler can be called: no press is forgotten
        with _ctrl_c_cancels(task, presses):
            try:
                result = self._complete(task)
            except asyncio.CancelledError:
                # the Ctrl-C's cancel alone, not one of the coroutine's own (uncancel: Python ≥ 3.11)
                uncancel = getattr(task, "uncancel", None)
                if presses[0] and (uncancel is None or uncancel() == 0):
                    raise KeyboardInterrupt from None
                raise
        if presses[0]:  # pressed as the coroutine ended, or it finished although cancelled
            raise KeyboardInterrupt
        return result

    def _complete(self, future: asyncio.Future[T]) -> T:
        """``run_until_complete``, past a stop left queued by a run a second Ctrl-C cut short (the
        loop's "stop when the task is done" callback, still in its queue: RuntimeError "Event loop
        stopped before Future completed")."""
        while True:
            try:
                return self.loop.run_until_complete(future)
            except RuntimeError as exc:
                if future.done() or "stopped before Future completed" not in str(exc):
                    raise

    def close(self) -> None:
        """Cancel what is still pending (after a second Ctrl-C), then close the loop."""
        if self.loop.is_closed():
            return
        try:
            pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
            for t in pending:
                t.cancel()
            if pending:
                self._complete(asyncio.gather(*pending, return_exceptions=True))
            self._complete(asyncio.ensure_future(self.loop.shutdown_asyncgens(), loop=self.loop))
            self._complete(asyncio.ensure_future(self.loop.shutdown_default_executor(), loop=self.loop))
        finally:
            self.loop.close()


@contextmanager
def _ctrl_c_cancels(task: asyncio.Task[Any], presses: list[int]) -> Iterator[None]:
    """SIGINT cancels ``task`` (once; then it raises KeyboardInterrupt) while the block runs.

    Only where SIGINT has Python's own handler, in the main thread: a handler someone else
    installed, or SIGINT ignored, is left as it is."""
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    loop = task.get_loop()

    def on_ctrl_c(signum: int, frame: Optional[FrameType]) -> None:
        presses[0] += 1
        if presses[0] > 1:
            raise KeyboardInterrupt
        if not task.done():  # done: the loop returns as it would, and run() raises the interrupt
            task.cancel()
            loop.call_soon_threadsafe(lambda: None)  # wake a select() that waits long

    signal.signal(signal.SIGINT, on_ctrl_c)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGINT) is on_ctrl_c:
            signal.signal(signal.SIGINT, signal.default_int_handler)
