"""Waking at absolute ``perf_counter`` deadlines: a timer thread (sub-millisecond), or the event loop's own."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
import time


class PreciseTimer:
    """Wakes coroutines at absolute ``perf_counter`` deadlines, to ~0.1 ms.

    asyncio's timers wake up to 1 ms late (epoll's timeout is whole milliseconds, rounded
    up). Here one thread sleeps on a condition variable with a sub-millisecond timeout and
    wakes the loop through ``call_soon_threadsafe``.

    Waking an idle loop takes time of its own (the self-pipe, epoll, a thread switch: about
    0.5 ms on a small machine), so the thread hands each deadline over that much early — the
    loop's recent hand-over delay, a moving median-like estimate capped at ``MAX_LEAD_S`` — and
    the loop waits out what is left by checking the clock between its other callbacks (never
    by spinning, which would hold up the other streams). A busy loop takes its callbacks late
    anyway, and then nothing is left to wait.
    """

    MAX_LEAD_S = 0.001

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._heap: list[tuple[float, int, asyncio.Future]] = []
        self._seq = itertools.count()
        self._cv = threading.Condition()
        self._lead_s = 0.0  # how early deadlines are handed to the loop (its recent hand-over delay)
        threading.Thread(target=self._run, name="reference-timer", daemon=True).start()

    async def sleep_until(self, deadline: float) -> None:
        if deadline <= time.perf_counter():
            return
        future = self._loop.create_future()
        with self._cv:
            heapq.heappush(self._heap, (deadline, next(self._seq), future))
            if self._heap[0][2] is future:  # a later deadline: the thread's own wait covers it
                self._cv.notify()
        await future

    def _run(self) -> None:
        with self._cv:
            while True:
                if not self._heap:
                    self._cv.wait()
                    continue
                now = time.perf_counter()
                delay = self._heap[0][0] - self._lead_s - now
                if delay > 0:
                    self._cv.wait(delay)
                    continue
                # every deadline due by now goes in one hand-over: streams started together
                # share deadlines, and each wake-up of the loop costs a self-pipe write
                due = []
                while self._heap and self._heap[0][0] - self._lead_s <= now:
                    deadline, _, future = heapq.heappop(self._heap)
                    due.append((future, deadline))
                self._loop.call_soon_threadsafe(self._wake, due, now)

    def _wake(self, due: list[tuple[asyncio.Future, float]], handed_at: float) -> None:
        now = time.perf_counter()
        # step the estimate a tenth of the way: one slow hand-over does not move it much
        delay = min(now - handed_at, self.MAX_LEAD_S)
        self._lead_s += (delay - self._lead_s) * 0.1
        for future, deadline in due:
            self._due(future, deadline)

    def _due(self, future: asyncio.Future, deadline: float) -> None:
        if time.perf_counter() < deadline:  # woken early on purpose: check again after the loop's other work
            self._loop.call_soon(self._due, future, deadline)
        elif not future.done():
            future.set_result(None)


class LoopTimer:
    """The event loop's own timers (for comparison: up to 1 ms late)."""

    async def sleep_until(self, deadline: float) -> None:
        delay = deadline - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
