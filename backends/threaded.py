"""Engines driven from one worker thread (transformers, llama.cpp, MLX in-process).

``stream()`` hands each request to the engine thread through a queue and relays the
engine's events back to the runner's event loop. The engine thread stamps each token with
``time.perf_counter()`` the moment it exists, so the hop back to the event loop is not
counted in the token's time (it is measured apart, as delivery lag).
"""
from __future__ import annotations

import asyncio
import collections
import queue
import threading
from abc import abstractmethod
from typing import Any, AsyncIterator, Optional

from backends.base import Backend, GenerationRequest, RequestDone, StreamEvent


class Job:
    """A request inside the engine, and the way back to the runner's event loop."""

    def __init__(self, request: GenerationRequest, loop: asyncio.AbstractEventLoop):
        self.request = request
        self.loop = loop
        self.events: asyncio.Queue = asyncio.Queue()
        self.produced = 0
        self.finished = False
        self.cancelled = False  # the reader went away (Ctrl-C, or an error elsewhere)

    def emit(self, event: Any) -> None:
        self.loop.call_soon_threadsafe(self.events.put_nowait, event)

    def finish(self, event: Any) -> None:
        """Close the stream with a RequestDone, or with an exception to raise in the reader."""
        if not self.finished:
            self.finished = True
            self.emit(event)


class ThreadedBackend(Backend):
    """A Backend whose engine runs in one thread started by ``start_engine_thread``."""

    _thread: Optional[threading.Thread] = None

    def start_engine_thread(self, name: str) -> None:
        self._jobs: queue.Queue = queue.Queue()
        self._deferred: collections.deque = collections.deque()
        self._thread = threading.Thread(target=self._run_engine, name=name, daemon=True)
        self._thread.start()

    def stop_engine_thread(self) -> None:
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join(timeout=60)
            self._thread = None

    def next_job(self, block: bool = True, timeout: Optional[float] = None) -> Optional[Job]:
        """The next request (deferred ones first); None means shut down. queue.Empty if none."""
        if self._deferred:
            return self._deferred.popleft()
        if not block:
            return self._jobs.get_nowait()
        return self._jobs.get(timeout=timeout)

    def defer(self, jobs: list) -> None:
        """Put jobs back at the head of the line, in order (None included: a shutdown)."""
        self._deferred.extendleft(reversed(jobs))

    async def stream(self, request: GenerationRequest) -> AsyncIterator[StreamEvent]:
        job = Job(request, asyncio.get_running_loop())
        self._jobs.put(job)
        try:
            while True:
                event = await job.events.get()
                if isinstance(event, BaseException):
                    raise event
                yield event
                if isinstance(event, RequestDone):
                    return
        finally:
            job.cancelled = True  # stops the engine working for a reader that went away

    def _run_engine(self) -> None:
        try:
            self.engine_loop()
        except BaseException as exc:  # noqa: BLE001 - no request may hang on a dead engine
            self._fail_pending(exc)
            raise

    def _fail_pending(self, exc: BaseException) -> None:
        while True:
            try:
                job = self.next_job(block=False)
            except queue.Empty:
                return
            if job is not None:
                job.finish(RuntimeError(f"engine thread died: {exc}"))

    @abstractmethod
    def engine_loop(self) -> None:
        """Serve jobs from ``next_job()`` until it returns None."""
