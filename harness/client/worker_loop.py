"""One client worker's event loop, whatever carries its messages: a pipe to a forked process on
this host (harness/client/workers.py), or Ray to an actor on another host (harness/client/ray_actor.py).

A worker runs its share of a run's sessions on a :class:`~harness.client.driver.Driver` of its
own, on its own loop and connection pool. It is told what to do by messages, handed to
:meth:`WorkerLoop.control` on its loop, and says what happened through ``send``:

- in: ``("go", t0)`` (the measured phase begins at ``t0``, a ``perf_counter`` time of this
  process), ``("session", index)`` (start that session once a slot of its own is free),
  ``("arrivals", [index, …])`` (open loop: more sessions to pace, in arrival order),
  ``("slots", k)`` (k more slots: a lost host's share), ``("end",)`` (no more sessions will
  come) and ``("stop", why)`` (cancel what is in flight and end);
- out: ``("sent", SentRequest)`` (only where asked: a request is on its way, so a driver that
  loses this worker can record it as failed), ``("record", RequestRecord)``, ``("done", index)``
  (a session ended), ``("load", loop lags, CPU seconds)`` and ``("bye",)``, the last message.

**Closed loop**: the worker holds ``share`` slots (a semaphore), so however many sessions it
is handed, at most ``share`` are in flight; the driver hands out sessions in plan order as its
workers report them done. **Open loop**: each session starts at ``t0 + arrival_s``
(:func:`~harness.client.pacing.pace_until`), the initial ones first, then those that arrive.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Optional

from backends.base import RequestStream
from core.types import GenerationRequest
from harness.client.client_load import ClientLoad
from harness.client.driver import Driver
from harness.client.pacing import pace_until
from harness.results.record import CANCELLED, RequestRecord
from workloads.base import SessionSpec, WorkloadPlan
from workloads.prompts import PromptRenderer

# What a worker is told to run: the session at ``index`` (in the plan), its spec and its first request id.
Take = Callable[[int], tuple[SessionSpec, int]]


@dataclass(slots=True)
class SentRequest:
    """A request on its way, as its worker saw it at the send: enough to record it as failed
    (:meth:`failed`) if the worker is lost before its record comes back."""

    index: int  # its session's index in the plan
    request_id: int
    session_id: int
    turn: int
    prompt_tokens: int
    requested_output_tokens: int
    exact_output_len: bool
    expected_prompt_tokens: Optional[int]
    adapter: Optional[str]
    scheduled_s: Optional[float]  # open loop: when it was due, from t0
    start_s: float  # sent, from t0

    def failed(self, error: str, end_s: float) -> RequestRecord:
        """Its record as a failed request: sent at ``start_s``, given up at ``end_s``; no
        latency figures (a failed request has none)."""
        wait = self.start_s - self.scheduled_s if self.scheduled_s is not None else None
        return RequestRecord(
            request_id=self.request_id,
            session_id=self.session_id,
            turn=self.turn,
            prompt_tokens=self.prompt_tokens,
            output_tokens=0,
            requested_output_tokens=self.requested_output_tokens,
            exact_output_len=self.exact_output_len,
            expected_prompt_tokens=self.expected_prompt_tokens,
            scheduled_s=self.scheduled_s,
            start_s=self.start_s,
            end_s=max(self.start_s, end_s),
            ttft_s=None,
            tpot_s=None,
            e2e_s=None,
            client_wait_s=wait,
            adapter=self.adapter,
            error=error,
        )


class WorkerLoop:
    """One worker's sessions, slots and end, on the running event loop (:meth:`run`)."""

    def __init__(
        self,
        client: RequestStream,
        renderer: PromptRenderer,
        plan: WorkloadPlan,
        *,
        open_loop: bool,
        spin: bool,
        share: int,
        initial: Iterable[Any],
        take: Take,
        send: Callable[[tuple], None],
        report_sends: bool = False,
    ):
        self.open_loop, self.spin, self.take, self.send = open_loop, spin, take, send
        self.driver = Driver(client, renderer, plan, on_record=self._send_record, spin=spin)
        if report_sends:
            self.driver.on_send = self._sent
        # closed loop: started at go; open loop: paced first (None once drained)
        self.initial: Optional[Iterator[Any]] = iter(initial)
        self.arrivals: deque[int] = deque()  # open loop: those handed out since
        self.held: list[int] = []  # closed loop: sessions handed out before go
        self.semaphore = asyncio.Semaphore(share) if share else None
        self.tasks: set[asyncio.Task] = set()
        self.ended = False
        self.stopped: Optional[str] = None
        self.t0: Optional[float] = None
        self.wake = asyncio.Event()
        self.index_of: dict[int, int] = {}  # session id → index, of the sessions held (report_sends)

    async def run(self) -> None:
        """From ``go`` to ``bye``; returns at once (after bye) when stopped before go."""
        driver = self.driver
        while self.t0 is None and self.stopped is None:
            await self._wait()
        t0 = self.t0
        if self.stopped is not None or t0 is None:  # (t0 is set when nothing stopped the wait)
            return self._bye()
        driver.t0 = t0
        await pace_until(t0, True)
        load = ClientLoad()
        load.start()
        cpu0 = cpu_s()
        if self.open_loop:
            pacer = asyncio.create_task(self._pace(t0))
            self.tasks.add(pacer)
        else:
            for index in (*(self.initial or ()), *self.held):
                self._start(int(index))
            self.held.clear()
        while self.stopped is None and (self.tasks or not self.ended):
            await self._wait()
        if self.stopped is not None:
            if self.stopped == "saturated":
                driver.saturated = "saturated"  # marks the cancelled records (SATURATED_ERROR)
            elif self.stopped != "interrupted":
                driver.cancel_error = CANCELLED + self.stopped
            for task in list(self.tasks):
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
        load.stop()
        self.send(("load", load.lags, cpu_s() - cpu0))
        self._bye()

    def control(self, msg: tuple) -> None:
        """One message from the driver, on this loop."""
        kind = msg[0]
        if kind == "go":
            self.t0 = msg[1]
        elif kind == "session":
            if self.t0 is None:
                self.held.append(msg[1])  # started at go
            else:
                self._start(msg[1])
        elif kind == "arrivals":
            self.arrivals.extend(msg[1])
        elif kind == "slots":
            if self.semaphore is not None:
                for _ in range(msg[1]):
                    self.semaphore.release()  # an asyncio.Semaphore grows past its start
        elif kind == "end":
            self.ended = True
        elif kind == "stop":
            self.stopped = msg[1]
        self.wake.set()

    def _bye(self) -> None:
        try:
            self.send(("bye",))
        except OSError:
            pass

    async def _wait(self) -> None:
        await self.wake.wait()
        self.wake.clear()

    def _start(self, index: int, spec: Optional[SessionSpec] = None, first_id: Optional[int] = None) -> None:
        if spec is None or first_id is None:
            spec, first_id = self.take(index)
        if self.driver.on_send is not None:
            self.index_of[spec.session_id] = index
        task = asyncio.create_task(self._session(index, spec, first_id))
        self.tasks.add(task)

    async def _session(self, index: int, spec: SessionSpec, first_id: int) -> None:
        try:
            await self.driver.session(spec, first_id, self.semaphore, self.open_loop)
        finally:
            self.tasks.discard(asyncio.current_task())
            self.index_of.pop(spec.session_id, None)
            self.wake.set()
            if self.stopped is None:
                self.send(("done", index))

    async def _next_arrival(self) -> Optional[int]:
        """The next session to pace: the initial ones, then those handed out; None once the
        driver has said ``end`` and none is left."""
        while True:
            if self.initial is not None:
                index = next(self.initial, None)
                if index is not None:
                    return int(index)
                self.initial = None  # drained: the arrivals from here on
            if self.arrivals:
                return self.arrivals.popleft()
            if self.ended:
                return None
            await self._wait()

    async def _pace(self, t0: float) -> None:
        try:
            while self.stopped is None:
                index = await self._next_arrival()
                if index is None:
                    return
                spec, first_id = self.take(index)
                await pace_until(t0 + (spec.arrival_s or 0.0), self.spin)
                self._start(index, spec, first_id)
        finally:
            self.tasks.discard(asyncio.current_task())
            self.wake.set()

    def _send_record(self, record: Any) -> None:
        self.send(("record", record))

    def _sent(self, request: GenerationRequest, scheduled_s: Optional[float], expected: Optional[int]) -> None:
        self.send(
            (
                "sent",
                SentRequest(
                    index=self.index_of.get(request.session_id, -1),
                    request_id=request.request_id,
                    session_id=request.session_id,
                    turn=request.turn,
                    prompt_tokens=len(request.prompt_token_ids),
                    requested_output_tokens=request.max_new_tokens,
                    exact_output_len=request.exact_output_len,
                    expected_prompt_tokens=expected,
                    adapter=request.adapter,
                    scheduled_s=scheduled_s,
                    start_s=time.perf_counter() - self.driver.t0,
                ),
            )
        )


def cpu_s() -> float:
    """This process's CPU seconds, user and system, every thread."""
    t = os.times()
    return t.user + t.system
