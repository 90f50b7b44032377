"""Ctrl-C held off while a step that must finish runs (the last writes of a run, ending workers)."""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator


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
