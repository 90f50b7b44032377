"""Ctrl-C held off while a step that must finish runs (the last writes of a run, ending workers),
and an entry module ended by it while it starts."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn


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


def exit_interrupted_at_start(message: str) -> NoReturn:
    """End an entry module (``python -m harness…``) that Ctrl-C stopped during its imports: one
    line, exit 130. Not ``sys.exit``: a Ctrl-C that lands in a string ``exec`` during the imports
    (dataclasses make their methods so) is marked unhandled, caught or not, and under ``-m`` the
    interpreter then ends itself by SIGINT (exit -2, not 130; seen in CI). Nothing is open yet to close."""
    print(message, file=sys.stderr, flush=True)
    os._exit(130)
