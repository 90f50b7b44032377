"""Replays a workload plan against a backend: arrivals, concurrency, sessions, timing.

The driver never serializes requests on the engine's behalf: every session in flight has
its own request in the engine at once, and the engine decides how to batch them.

:class:`Driver` runs a plan in this process, on one event loop. :class:`harness.client.workers.WorkerPool`
runs it in several client processes (``client.workers``); it drives a Driver through the
public methods marked *worker side* below, and each worker process runs its sessions with a
Driver of its own. Which one runs a point is the point's choice (harness/run/point.py).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import gc
import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any, Optional

from backends.base import RequestStream
from core.structured import tool_choice_for
from core.types import GenerationRequest, RequestDone, SamplingParams, TokenChunk
from harness.client.pacing import pace_until
from harness.client.saturation import SaturationDetector
from harness.results.record import CANCELLED, RequestRecord, RequestTiming, build_record, check_output
from workloads.base import (
    Forks,
    SessionSpec,
    WorkloadPlan,
    arrival_order,
    first_request_ids,
    fork_table,
    sorted_arrivals,
)
from workloads.prompts import PromptRenderer, chat_messages
from workloads.schedule import LoadSchedule

log = logging.getLogger("harness")

# The error of a request cancelled because its open-loop point was stopped as over-saturated.
SATURATED_ERROR = CANCELLED + "over-saturated, the point was stopped"


async def execute(
    backend: RequestStream,
    request: GenerationRequest,
    t0: float,
    scheduled_s: Optional[float] = None,
    expected_prompt_tokens: Optional[int] = None,
    on_cancel: Optional[Callable[[RequestRecord], None]] = None,
) -> tuple[RequestRecord, list[int]]:
    """Send one request and time it; an engine error is recorded, not raised.

    Returns the record (with ``output_text`` set when the engine sent its reply as text)
    and the streamed output token ids. A request cut off by Ctrl-C is handed to
    ``on_cancel`` as a failed record, so what it had measured stays in the results.
    """
    timing = RequestTiming(
        t0=t0, send_t=time.perf_counter(), scheduled_s=scheduled_s, expected_prompt_tokens=expected_prompt_tokens
    )
    chunks = timing.chunks
    output_ids: list[int] = []
    ids_text: Optional[str] = None  # the reply's ids are this text's tokens, counted after the run
    lag_max = 0.0
    done: Optional[RequestDone] = None
    error = None
    error_stats: Optional[dict] = None  # what a failed stream's exception says of the request (e.g. its endpoint)

    def record_now() -> RequestRecord:
        timing.end_t = time.perf_counter()
        timing.delivery_lag_max_s = lag_max if chunks else None
        return build_record(request, timing, done, output_ids if ids_text is None else None, error, error_stats)

    try:
        async for event in backend.stream(request):
            if isinstance(event, TokenChunk):
                lag = time.perf_counter() - (event.handed_t or event.t)
                if lag > lag_max:
                    lag_max = lag
                if event.chunks == 1:
                    chunks.append((event.t, len(event.token_ids) if event.n_tokens is None else event.n_tokens))
                    output_ids.extend(event.token_ids)
                else:  # several chunks of one HTTP read: one provisional token each
                    chunks.extend([(event.t, 1)] * event.chunks)
            else:
                done = event
                if (
                    done.chunk_tokens is not None
                    and len(done.chunk_tokens) == len(chunks)
                    and done.chunk_tokens != [n for _, n in chunks]
                ):
                    chunks[:] = [(t, n) for (t, _), n in zip(chunks, done.chunk_tokens)]
                if done.token_ids is not None:
                    output_ids = list(done.token_ids)
                elif done.token_ids_text is not None:
                    ids_text = done.token_ids_text
    except asyncio.CancelledError:
        if on_cancel is not None:
            error = CANCELLED + "the run was interrupted"
            on_cancel(record_now())
        raise
    except Exception as exc:  # noqa: BLE001 - one request's failure must not stop the run
        error = f"{type(exc).__name__}: {exc}".strip()[:500]
        error_stats = getattr(exc, "engine_stats", None)
    record = record_now()
    record.ids_text = ids_text
    if done is not None and done.text is not None:
        record.output_text = done.text  # the reply as the engine's server sent it
    if done is not None and done.tool_calls is not None:  # a server with a tool-call field: what it called
        record.tool_calls = json.dumps(done.tool_calls)
    return record, output_ids


class Driver:
    def __init__(
        self,
        backend: RequestStream,
        renderer: PromptRenderer,
        plan: WorkloadPlan,
        on_record: Callable[[RequestRecord], None],
        saturation: Optional[SaturationDetector] = None,
        spin: bool = True,
        schedule: Optional[LoadSchedule] = None,
    ):
        self.backend = backend
        self.renderer = renderer
        self.plan = plan
        self.on_record = on_record
        self.sampling = SamplingParams(**plan.sampling)
        self.t0 = 0.0
        # Open loop only: watches backlog and TTFT, and stops the point when it is
        # over-saturated (one detector per run). ``saturated`` is then the reason, one line.
        self.saturation = saturation
        self.saturated: Optional[str] = None
        self.cancel_error: Optional[str] = None  # a request cut off in flight: why, where not Ctrl-C's
        self.monitoring = False  # this run's saturation is watched here
        self.sessions_done = 0
        self.spin = spin  # open-loop pacing: spin to the due time (harness/client/pacing.py), or asyncio's timer
        # A time-shaped load (workloads/schedule.py): each record gets the stage it started in;
        # closed loop, the cap follows the schedule and no session starts after its end.
        self.schedule = schedule
        # Agent jobs (workload=agentic): the sub-agents each (session, turn) forks; {} otherwise
        self.forks: Forks = {}
        # Told of each request as it is sent (request, scheduled_s, expected prompt tokens): a
        # worker on another host reports it, so its requests in flight are known if it is lost
        self.on_send: Optional[Callable[[GenerationRequest, Optional[float], Optional[int]], None]] = None

    def _constraint_for(self, request_id: int) -> dict[str, Any]:
        """The reply's constraint (workload.response_format, workload.tools) as GenerationRequest
        keywords; which requests must call a tool follows the request id (core/structured.py)."""
        structured = getattr(self.plan, "structured", None)
        if not structured:
            return {}
        tools = structured.get("tools")
        share = structured.get("tool_choice_share") or 0.0
        return {
            "response_format": structured.get("response_format"),
            "tools": tools,
            "tool_choice": tool_choice_for(request_id, share) if tools else None,
        }

    def _sampling_for(self, request_id: int) -> SamplingParams:
        """Sampled decoding gets a seed per request (the run's seed + request id): reproducible."""
        if self.sampling.greedy or self.plan.seed is None:
            return self.sampling
        return replace(self.sampling, seed=self.plan.seed + request_id)

    async def run(self, sessions: Sequence[SessionSpec], open_loop: bool) -> float:
        """Run the sessions in this process; returns the measured wall time T (first send to last finish).

        Open loop with a saturation detector: a monitor task samples the backlog every
        ``sample_interval_s``; when the detector reports over-saturation, ``self.saturated``
        is set to its reason, nothing more is sent, the requests in flight are cancelled
        (recorded with ``SATURATED_ERROR``) and T is returned up to that point.
        """
        self.begin(open_loop)
        with collector_frozen():
            return await self._run(sessions, open_loop)

    async def _run(self, sessions: Sequence[SessionSpec], open_loop: bool) -> float:
        cap = self.cap(open_loop)
        timed = None if open_loop else self.schedule  # a closed loop's cap follows its schedule
        scheduled_cap = ScheduledCap(timed.cap_steps(), timed.duration_s) if timed is not None else None
        semaphore: Any = scheduled_cap if scheduled_cap is not None else asyncio.Semaphore(cap) if cap else None
        first_ids = first_request_ids(sessions)
        self.forks = fork_table(sessions, first_ids)
        if self.forks:  # agent jobs: sub-agents start from their parent's turn (_turns), not here
            roots = [(s, i) for s, i in zip(sessions, first_ids) if s.parent is None]
            sessions, first_ids = [s for s, _ in roots], [i for _, i in roots]
        session = self._counted_session if self.monitoring else self.session
        self.t0 = time.perf_counter()
        tasks: list[asyncio.Task[Any]]
        if open_loop:
            tasks = [asyncio.create_task(self._dispatch(sessions, first_ids, semaphore, session))]
        else:
            # one task a slot (not a task a session: a long plan's are millions), each taking the
            # next session in plan order once the cap lets it in
            slots = int(timed.peak) if timed is not None else cap
            queue = zip(sessions, first_ids)
            tasks = [
                asyncio.create_task(self._take_turns(queue, semaphore, self._turns))
                for _ in range(min(len(sessions), slots or 1))
            ]
        monitor = asyncio.create_task(self.monitor(sessions)) if self.monitoring else None
        follower = asyncio.create_task(scheduled_cap.follow(self.t0, self.spin)) if scheduled_cap is not None else None
        try:
            if monitor is None:
                await asyncio.gather(*tasks)
            else:
                await self._until_done_or_saturated(tasks, monitor)
        finally:
            if monitor is not None:
                monitor.cancel()
                tasks.append(monitor)
            if follower is not None:
                if not follower.done() and timed is not None:
                    log.warning(
                        "the plan's %d sessions ran out %.1f s into a closed loop of %g s: raise the "
                        "workload's count (num_requests, sessions) for a run that lasts",
                        len(sessions),
                        time.perf_counter() - self.t0,
                        timed.duration_s,
                    )
                follower.cancel()
                tasks.append(follower)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return time.perf_counter() - self.t0

    # --- worker side: what harness.client.workers.WorkerPool uses -------------------------

    def begin(self, open_loop: bool) -> None:
        """A run starts: no saturation yet, no session done; an open loop with a detector is watched."""
        self.saturated = None
        self.monitoring = open_loop and self.saturation is not None
        self.sessions_done = 0

    def cap(self, open_loop: bool) -> Optional[int]:
        """Sessions in flight at most: the plan's concurrency (closed loop: 1 when unset)."""
        return self.plan.concurrency or (None if open_loop else 1)

    def take_record(self, record: RequestRecord) -> None:
        """A finished request: kept (``on_record``), and its TTFT shown to the saturation detector."""
        self.stamp_stage(record)
        self.on_record(record)
        if self.monitoring and record.ok and record.ttft_s is not None:  # (a reply of no token has no TTFT)
            assert self.saturation is not None
            # TTFT as the user sees it in an open loop: from the scheduled arrival (so it
            # includes waiting for the concurrency cap) to the first token.
            wait = record.start_s - record.scheduled_s if record.scheduled_s is not None else 0.0
            self.saturation.observe_ttft(time.perf_counter() - self.t0, wait + record.ttft_s)

    def stamp_stage(self, record: RequestRecord) -> None:
        """The stage of the schedule in which the request started (None without a schedule)."""
        if self.schedule is not None:
            record.stage = self.schedule.stage_of(record.start_s)

    def session_finished(self) -> None:
        self.sessions_done += 1

    async def monitor(self, sessions: Sequence[SessionSpec]) -> str:
        """Sample the backlog every interval and ask the detector; returns its reason."""
        detector = self.saturation
        assert detector is not None
        interval = detector.cfg.sample_interval_s
        arrivals = sorted_arrivals(sessions)
        while True:
            await asyncio.sleep(interval)
            now = time.perf_counter() - self.t0
            # Backlog: sessions whose arrival has passed (bisect) and that have not finished,
            # including those waiting for the concurrency cap.
            backlog = max(0, bisect.bisect_right(arrivals, now) - self.sessions_done)
            detector.observe_backlog(now, backlog)
            reason = detector.check(now)
            if reason:
                return reason

    async def session(
        self, session: SessionSpec, first_id: int, semaphore: Optional[asyncio.Semaphore], open_loop: bool
    ) -> None:
        """One session, turn after turn, once ``semaphore`` (the concurrency cap) lets it in."""
        if semaphore is not None:
            async with semaphore:
                if getattr(semaphore, "closed", False):
                    return  # a timed closed loop has ended: no new session
                await self._turns(session, first_id, open_loop)
        else:
            await self._turns(session, first_id, open_loop)

    # --- this process -----------------------------------------------------------------------

    @staticmethod
    async def _take_turns(queue: Iterator[tuple[SessionSpec, int]], semaphore: Any, turns: Callable) -> None:
        """Closed loop: once the cap lets this slot in, the queue's next session, until the queue is
        empty or a timed loop has ended. The slot is taken before the session, so sessions start
        in plan order whichever slot the cap lets in (a slot above a lower limit holds none)."""
        while True:
            async with semaphore:
                if getattr(semaphore, "closed", False):
                    return
                taken = next(queue, None)
                if taken is None:
                    return
                await turns(*taken, False)

    async def _dispatch(
        self,
        sessions: Sequence[SessionSpec],
        first_ids: Sequence[int],
        semaphore: Optional[asyncio.Semaphore],
        session: Callable,
    ) -> None:
        """Open loop: start each session at its arrival (``pace_until``), in arrival order;
        one task paces them all, so at most one task spins at a time. A session's task is
        let go once it has ended well (one that failed is kept, and its error raised below)."""
        children: set[asyncio.Task] = set()

        def forget(task: asyncio.Task) -> None:
            if task.cancelled() or task.exception() is None:
                children.discard(task)

        try:
            for index in arrival_order(sessions):
                spec = sessions[index]
                await pace_until(self.t0 + (spec.arrival_s or 0.0), self.spin)
                child = asyncio.create_task(session(spec, first_ids[index], semaphore, True))
                children.add(child)
                child.add_done_callback(forget)
            await asyncio.gather(*children)
        finally:
            for child in children:
                child.cancel()
            await asyncio.gather(*children, return_exceptions=True)

    async def _until_done_or_saturated(self, tasks: list[asyncio.Task], monitor: asyncio.Task) -> None:
        """Wait for every session, or for the monitor to find the point over-saturated."""
        all_done = asyncio.gather(*tasks)
        # Its outcome is read below, or (when stopped) it ends cancelled: never leave it unread.
        all_done.add_done_callback(lambda f: f.cancelled() or f.exception())
        await asyncio.wait({all_done, monitor}, return_when=asyncio.FIRST_COMPLETED)
        if all_done.done():
            all_done.result()  # a session's exception propagates, as with a plain gather
            return
        self.saturated = monitor.result()  # set before the sessions are cancelled (_on_cancel)

    async def _counted_session(
        self, session: SessionSpec, first_id: int, semaphore: Optional[asyncio.Semaphore], open_loop: bool
    ) -> None:
        try:
            await self.session(session, first_id, semaphore, open_loop)
        finally:
            self.session_finished()

    def _on_cancel(self, record: RequestRecord) -> None:
        """A request cut off in flight: by Ctrl-C, or because the point was stopped as saturated."""
        if self.saturated is not None:
            record.error = SATURATED_ERROR
        elif self.cancel_error is not None:
            record.error = self.cancel_error
        self.stamp_stage(record)
        self.on_record(record)

    async def _turns(
        self, session: SessionSpec, first_id: int, open_loop: bool, parent_request: Optional[int] = None
    ) -> None:
        """The session's turns in order; an agent's sub-agents (``self.forks``) run after the turn
        that forks them, in parallel, and its next turn waits for them all."""
        job = session.job_id is not None
        on_cancel = (
            self._on_cancel if not job else (lambda r, s=session, p=parent_request: self._on_cancel(tag_job(r, s, p)))
        )
        history: list[dict[str, str]] = list(session.history or [])
        for turn_index, turn in enumerate(session.turns):
            if turn.think_time_s > 0:
                await asyncio.sleep(turn.think_time_s)
            history.append({"role": "user", "content": turn.user})
            messages = chat_messages(session.system, history)
            # Stage 1, intake: the prompt as the model's chat template renders it.
            prompt_ids = turn.prompt_token_ids or self.renderer.render(messages)
            request = GenerationRequest(
                request_id=first_id + turn_index,
                prompt_token_ids=prompt_ids,
                max_new_tokens=turn.output_len,
                exact_output_len=self.plan.exact_output_len,
                sampling=self._sampling_for(first_id + turn_index),
                messages=messages,
                session_id=session.session_id,
                turn=turn_index,
                adapter=session.adapter,
                **self._constraint_for(first_id + turn_index),
            )
            scheduled = session.arrival_s if open_loop and turn_index == 0 else None
            expected = len(turn.prompt_token_ids) if turn.prompt_token_ids else None
            if self.on_send is not None:
                self.on_send(request, scheduled, expected)
            record, output_ids = await execute(
                self.backend, request, self.t0, scheduled, expected_prompt_tokens=expected, on_cancel=on_cancel
            )
            if job:
                tag_job(record, session, parent_request)
            # Stage 5, post-processing: the reply as text, which the next turn re-sends
            # (a server's own reply text when it sent one, else the output ids decoded).
            if record.output_text is None:
                record.output_text = self.renderer.decode(output_ids) if output_ids else ""
            check_output(record, request)
            self.take_record(record)
            if not record.ok:
                return  # a conversation cannot go on without its reply
            # the dataset's reply when the workload replays the dataset's history, else the engine's
            history.append({"role": "assistant", "content": record.output_text if turn.reply is None else turn.reply})
            children = self.forks.get((session.session_id, turn_index)) if self.forks else None
            if children:
                await asyncio.gather(
                    *(self._turns(child, child_first, open_loop, request.request_id) for child, child_first in children)
                )


def tag_job(record: RequestRecord, session: SessionSpec, parent_request: Optional[int]) -> RequestRecord:
    """An agent job's request: its job, its depth in the tree, and the request its agent forked after."""
    record.job_id, record.depth, record.parent_request_id = session.job_id, session.depth, parent_request
    return record


class ScheduledCap:
    """A concurrency cap whose limit follows a schedule: ``async with`` it as a semaphore.

    ``steps`` are (time from t0, cap), as ``LoadSchedule.cap_steps()`` gives them; :meth:`follow`
    sets each limit at its time and closes the cap at ``end_s``, the schedule's end. A lower
    limit lets the sessions in flight finish and starts none until fewer are in flight; a
    higher one starts waiting sessions at once. Once closed, waiters get in and see
    ``closed`` (the driver then returns without sending), so none is left waiting."""

    def __init__(self, steps: list[tuple[float, int]], end_s: Optional[float] = None):
        self.steps = steps
        self.end_s = end_s
        self.limit = steps[0][1]
        self.in_flight = 0
        self.closed = False
        self.changes: list[tuple[float, int]] = []  # (time from t0, limit) as set: what was followed
        self._cond = asyncio.Condition()

    async def __aenter__(self) -> ScheduledCap:
        async with self._cond:
            await self._cond.wait_for(lambda: self.closed or self.in_flight < self.limit)
            self.in_flight += 1
        return self

    async def __aexit__(self, *exc: Any) -> None:
        async with self._cond:
            self.in_flight -= 1
            self._cond.notify()

    async def set_limit(self, limit: int, t_s: float) -> None:
        async with self._cond:
            self.limit = limit
            self.changes.append((t_s, limit))
            self._cond.notify_all()

    async def close(self) -> None:
        async with self._cond:
            self.closed = True
            self._cond.notify_all()

    async def follow(self, t0: float, spin: bool = True) -> None:
        """Set each step's limit at its time (from t0), then close at the end."""
        for t, limit in self.steps:
            await pace_until(t0 + t, spin)
            await self.set_limit(limit, time.perf_counter() - t0)
        if self.end_s is not None:
            await pace_until(t0 + self.end_s, spin)
            await self.close()


@contextlib.contextmanager
def collector_frozen() -> Iterator[None]:
    """Everything alive now (engine, tokenizer, transformers: a million objects) is left out of
    the collector's passes until the point ends: a full pass over it stops the loop for up to
    ~0.3 s on a small machine, and every stream's stamps with it."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
