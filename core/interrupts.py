"""Ctrl-C held off while a step that must finish runs (the last writes of a run, ending workers),
never lost where Python swallows it or a library turns it into another error, and an entry
module ended by it while it starts."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NoReturn, Optional, TypeVar

T = TypeVar("T")
# how often the waiting thread wakes: the longest a Ctrl-C waits to be raised there
WAIT_STEP_S = 0.1


@contextmanager
def interrupts_held() -> Iterator[list[int]]:
    """SIGINT while the block runs is recorded, not raised: the yielded list gets one entry a
    press, for the caller to act on after the block. Outside the main thread (where no handler
    can be set) nothing changes and the list stays empty."""
    pressed: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield pressed
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pressed.append(signum))
    try:
        yield pressed
    finally:
        signal.signal(signal.SIGINT, previous)


def interrupt_behind(exc: BaseException) -> Optional[KeyboardInterrupt]:
    """The KeyboardInterrupt ``exc`` was raised while unwinding from, if any: the first one in its
    chain of causes and contexts."""
    seen: set[int] = set()
    link: Optional[BaseException] = exc
    while link is not None and id(link) not in seen:
        if isinstance(link, KeyboardInterrupt):
            return link
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return None


@contextmanager
def interrupts_kept() -> Iterator[None]:
    """A Ctrl-C stays a Ctrl-C: an error raised while a KeyboardInterrupt unwound is raised as
    that KeyboardInterrupt (from the error, so both tracebacks stay).

    A KeyboardInterrupt can land at any bytecode, and code that is not written for it turns it
    into another error: OmegaConf's ``finally`` reads a variable its ``try`` never set
    (UnboundLocalError), or an object half made (AttributeError), in about 1 % of the places a
    Ctrl-C can land while it makes a structured config; asyncio.Runner's close fails on the stop
    a Ctrl-C left queued. Such an error would end an interrupted run as "failed", exit 1."""
    try:
        yield
    except Exception as exc:
        interrupt = interrupt_behind(exc)
        if interrupt is None:
            raise
        raise type(interrupt)(*interrupt.args) from exc


def interruptible(build: Callable[[], T], on_interrupt: Callable[[], None], name: str) -> T:
    """``build()`` run in a thread of its own while this thread waits for it, so that Ctrl-C is
    raised here within :data:`WAIT_STEP_S`.

    A call that blocks in C on another process's answer never sees Ctrl-C: vLLM's engine
    constructor polls a ZeroMQ socket for its engine core's "ready" for up to 600 s
    (``VLLM_ENGINE_READY_TIMEOUT_S``), and a Ctrl-C during a load left ``python -m harness
    backend=vllm`` waiting there, its engine core already dead (seen: still waiting 60 s after
    the press). On KeyboardInterrupt, ``on_interrupt()`` ends what the call waits on (the
    engine's processes) and the interrupt goes on; the thread, a daemon, is left to its wait.
    An exception of ``build()`` is raised here."""
    outcome: list[T] = []
    failure: list[BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            outcome.append(build())
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread, which raises it
            failure.append(exc)
        finally:
            done.set()

    try:  # Thread.start waits for the thread to run: a Ctrl-C may come there too
        threading.Thread(target=run, name=name, daemon=True).start()
        while not done.wait(WAIT_STEP_S):
            pass
    except KeyboardInterrupt:
        on_interrupt()
        raise
    if failure:
        raise failure[0]
    return outcome[0]


# how long the re-sent SIGINT waits, so that it lands after the swallowing callback has returned
REDELIVERY_DELAY_S = 0.01


def keep_every_interrupt() -> None:
    """Re-send a Ctrl-C that Python swallowed.

    A SIGINT whose handler runs while the main thread is inside a weakref callback, a ``__del__``
    or a garbage-collector callback raises KeyboardInterrupt there, and Python reports it as
    "Exception ignored in …" and goes on: the press is lost (seen in CI: a harness waiting for a
    server to start kept waiting after Ctrl-C, its KeyboardInterrupt ignored in
    ``_get_module_lock.<locals>.cb``). This hook, installed once by each entry module, takes
    such a KeyboardInterrupt and sends SIGINT to the process again from a thread, a moment later
    (:data:`REDELIVERY_DELAY_S`), when the callback has returned; were that one swallowed too, it
    is sent again. Every other unraisable exception goes to the hook that was there before."""
    previous = sys.unraisablehook
    if getattr(previous, "keeps_interrupts", False):
        return

    def hook(unraisable: sys.UnraisableHookArgs) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            threading.Thread(target=_send_sigint_soon, name="ctrl-c-again", daemon=True).start()
            return
        previous(unraisable)

    hook.keeps_interrupts = True  # type: ignore[attr-defined]  # a marker, so the hook is installed once
    sys.unraisablehook = hook


def _send_sigint_soon() -> None:
    time.sleep(REDELIVERY_DELAY_S)
    os.kill(os.getpid(), signal.SIGINT)


def exit_interrupted_at_start(message: str) -> NoReturn:
    """End an entry module (``python -m harness…``) that Ctrl-C stopped during its imports: one
    line, exit 130. Not ``sys.exit``: a Ctrl-C that lands in a string ``exec`` during the imports
    (dataclasses make their methods so) is marked unhandled, caught or not, and under ``-m`` the
    interpreter then ends itself by SIGINT (exit -2, not 130; seen in CI). Nothing is open yet to close."""
    print(message, file=sys.stderr, flush=True)
    os._exit(130)
