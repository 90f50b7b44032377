"""Engines driven from one worker thread (transformers, llama.cpp, MLX in-process).

``stream()`` hands each request to the engine thread through a queue and relays the
engine's events back to the runner's event loop. The engine thread stamps each token with
``time.perf_counter()`` the moment it exists, so the hop back to the event loop is not
counted in the token's time (it is measured apart, as delivery lag).

Waking the event loop costs the engine thread the GIL, which matters for fast engines
(llama.cpp decodes a token every few milliseconds here). So tokens are handed over in
batches: the first token of a request at once, later ones at most every
``DELIVERY_INTERVAL_S``, and whatever is left when the request ends. Stamps are unaffected.
"""

from __future__ import annotations

import asyncio
import collections
import queue
import threading
import time
from abc import abstractmethod
from collections.abc import AsyncIterator
from typing import Any, Optional

from backends.base import Backend, ConfigT, GenerationRequest, StreamEvent
from core.types import RequestDone, TokenChunk

DELIVERY_INTERVAL_S = 0.02


class Job:
    """A request inside the engine, and the way back to the runner's event loop."""

    def __init__(self, request: GenerationRequest, loop: asyncio.AbstractEventLoop):
        self.request = request
        self.loop = loop
        self.events: asyncio.Queue = asyncio.Queue()
        self.produced = 0
        self.finished = False
        self.cancelled = False  # the reader went away (Ctrl-C, or an error elsewhere)
        self._pending: list[Any] = []
        self._delivered_t: Optional[float] = None

    def emit(self, event: Any) -> None:
        """Queue an event (a TokenChunk) for the reader; hand the queue over when it is due."""
        self._pending.append(event)
        now = time.perf_counter()
        if self._delivered_t is None or now - self._delivered_t >= DELIVERY_INTERVAL_S:
            self._deliver(now)

    def finish(self, event: Any) -> None:
        """Close the stream with a RequestDone, or with an exception to raise in the reader."""
        if not self.finished:
            self.finished = True
            self._pending.append(event)
            self._deliver(time.perf_counter())

    def _deliver(self, now: float) -> None:
        events, self._pending = self._pending, []
        self._delivered_t = now
        for event in events:
            if type(event) is TokenChunk:
                event.handed_t = now  # delivery lag counts from here: batching is not overhead
        try:
            self.loop.call_soon_threadsafe(self._put_all, events)
        except RuntimeError:  # the run's event loop is closed (Ctrl-C): nobody is reading
            self.cancelled = True

    def _put_all(self, events: list[Any]) -> None:
        for event in events:
            self.events.put_nowait(event)


class ThreadedBackend(Backend[ConfigT]):
    """A Backend whose engine runs in one thread started by ``start_engine_thread``."""

    _thread: Optional[threading.Thread] = None
    _died: Optional[BaseException] = None

    def start_engine_thread(self, name: str) -> None:
        self._jobs: queue.Queue = queue.Queue()
        self._deferred: collections.deque = collections.deque()
        self._taken: list[Job] = []  # handed to the engine and maybe not finished yet
        self._thread = threading.Thread(target=self._run_engine, name=name, daemon=True)
        self._thread.start()

    def stop_engine_thread(self) -> bool:
        """Stop the engine thread; False if it did not end (native state must then stay)."""
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join(timeout=60)
            if self._thread.is_alive():
                return False
            self._thread = None
        return True

    def fatal_error(self) -> Optional[str]:
        return f"the {self.engine_name} engine thread died: {self._died}" if self._died else None

    def next_job(self, block: bool = True, timeout: Optional[float] = None) -> Optional[Job]:
        """The next request (deferred ones first); None means shut down. queue.Empty if none."""
        if self._deferred:
            job = self._deferred.popleft()
        elif not block:
            job = self._jobs.get_nowait()
        else:
            job = self._jobs.get(timeout=timeout)
        if job is not None:
            self._taken = [j for j in self._taken if not j.finished]
            self._taken.append(job)
        return job

    def defer(self, jobs: list) -> None:
        """Put jobs back at the head of the line, in order (None included: a shutdown)."""
        self._deferred.extendleft(reversed(jobs))

    async def stream(self, request: GenerationRequest) -> AsyncIterator[StreamEvent]:
        if self._died is not None:
            raise RuntimeError(f"the engine thread died: {self._died}")
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
        except BaseException as exc:  # no request may hang on a dead engine
            self._died = exc
            self._fail_all(exc)
            raise

    def _fail_all(self, exc: BaseException) -> None:
        """Every request the engine took or still holds in its queue ends with the error."""
        error = RuntimeError(f"the engine thread died: {type(exc).__name__}: {exc}")
        for taken in self._taken:
            taken.finish(error)
        while True:
            try:
                job = self.next_job(block=False)
            except queue.Empty:
                return
            if job is not None:
                job.finish(error)

    @abstractmethod
    def engine_loop(self) -> None:
        """Serve jobs from ``next_job()`` until it returns None."""
