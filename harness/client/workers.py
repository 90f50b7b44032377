"""The multi-process load generator for HTTP backends (``client.workers`` > 1).

One event loop parses every stream of a run; at high concurrency its work delays every
chunk's stamp. Here the driver (this process) forks N worker processes, each with its own
event loop (``client.event_loop``) and its own connection pool, and assigns them sessions:

- **Sessions stay in one worker.** A session's turns carry its chat history, so the session,
  not the request, is what is assigned.
- **Closed loop: the concurrency is exact.** The cap C is split into slots, worker w holding
  ``C // N`` (+1 for the first ``C % N``); a worker starts a session only on a free slot of
  its own, so at most C sessions are in flight. Sessions are handed out in plan order as
  slots free (each worker holds one spare so a freed slot starts at once): the order is the
  single-process one, and a slow worker gets fewer sessions.
- **Open loop: the schedule is the plan's.** Sessions are dealt round-robin in arrival
  order; each worker paces its own at ``t0 + arrival_s`` (harness/client/pacing.py). A cap in an
  open loop is split into slots the same way (in flight never exceeds it; a session may wait
  for its own worker's slot while another worker has one free).
- **One clock.** ``time.perf_counter`` is CLOCK_MONOTONIC on Linux (``time.get_clock_info``
  says so; :func:`check_shared_clock` checks it before forking): one system-wide clock, so
  the driver picks t0, sends it to every worker, and every stamp in every record is relative
  to it, whichever process took it.
- **Exact merge.** Each finished request's record is sent to the driver as it completes and
  written there (``requests.jsonl``, one row each), as in one process; nothing is averaged.
  The workers' loop-lag samples and CPU seconds come back at the end and are pooled.
- **The ending.** Workers ignore SIGINT and SIGHUP: the driver decides. On Ctrl-C/SIGTERM
  (or an over-saturated open loop) it sends ``stop``; each worker cancels its requests in
  flight, sends their records (marked cancelled) and says ``bye``. The driver reads until
  every worker has said bye (at most ``STOP_GRACE_S``), then joins them and kills any left.
  A worker whose driver vanished sees its pipe close and exits; on Linux the kernel also
  kills it with the driver (PR_SET_PDEATHSIG).

A worker runs :class:`~harness.client.worker_loop.WorkerLoop` (its messages on the pipe); the same
loop runs on other hosts as Ray actors (``client.cluster=ray``: harness/client/ray_pool.py).
Workers are forked, not spawned: they inherit the loaded backend, the tokenizer and the plan
at no cost (a spawned worker would import transformers again). They stream through the
backend's ``worker_client()`` (its HTTP client alone), never its server handle.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import multiprocessing
import os
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

import numpy as np

from backends.base import RequestStream
from core.cpus import usable_cores
from core.errors import ConfigError, HarnessError
from core.parent import follow_the_parent, tokenizers_single_threaded
from harness.client.driver import Driver, collector_frozen
from harness.client.event_loops import new_loop
from harness.client.worker_loop import WorkerLoop
from workloads.base import SessionSpec, WorkloadPlan, arrival_order, first_request_ids
from workloads.prompts import PromptRenderer

# session indices: a list, or an array slice for a plan on disk (workloads.base.arrival_order)
Indices = Union[Sequence[int], np.ndarray]

log = logging.getLogger("harness")

# up to this many streams in flight one event loop keeps up (issue 12: TTFT error p50 ~2 ms
# at 32 streams on one loop, ~10 ms at 128); beyond, one worker per this many streams
STREAMS_PER_WORKER = 32
MAX_AUTO_WORKERS = 8
READY_TIMEOUT_S = 60.0
START_LEAD_S = 0.02  # t0 is this far after "go" is sent: every worker is waiting for it by then
STOP_GRACE_S = 10.0  # after "stop", how long the workers may take to send what they have


def auto_workers(concurrency: Optional[int], cores: Optional[int] = None) -> int:
    """``client.workers=null``: 1 up to ``STREAMS_PER_WORKER`` streams in flight (one loop
    keeps up, and a process more only costs start-up), else one per ``STREAMS_PER_WORKER``
    streams, leaving a core to the driver and the rest of the machine (a local server):
    ``min(cores - 1, ceil(streams / 32), 8)``, at least 1. An open loop without a cap has no
    known number of streams: 1 (set ``client.workers`` for high rates)."""
    if not concurrency or concurrency <= STREAMS_PER_WORKER:
        return 1
    cores = usable_cores() if cores is None else cores
    return max(1, min(cores - 1, -(-concurrency // STREAMS_PER_WORKER), MAX_AUTO_WORKERS))


def resolve_workers(requested: Optional[int], forkable: bool, concurrency: Optional[int]) -> int:
    """The workers a run uses: 1 for a backend that cannot be driven from other processes (an
    in-process engine: ``worker_client()`` is None); else the setting, or the default."""
    if not forkable:
        if requested is not None and requested > 1:
            raise ConfigError(
                f"client.workers={requested} needs an HTTP backend (backend.mode=server or "
                "backend=openai): an in-process engine runs in the harness's own process"
            )
        return 1
    return requested if requested is not None else auto_workers(concurrency)


def check_shared_clock() -> None:
    """Stamps from several processes are comparable only on one system-wide monotonic clock."""
    info = time.get_clock_info("perf_counter")
    if sys.platform.startswith("linux") and "CLOCK_MONOTONIC" in info.implementation:
        return
    if sys.platform == "darwin" and "mach_absolute_time" in info.implementation:
        return  # system-wide too
    raise ConfigError(
        f"client.workers > 1 needs a system-wide monotonic perf_counter; here it is "
        f"{info.implementation}: set client.workers=1"
    )


def slots(cap: int, workers: int) -> list[int]:
    """The cap split over the workers: ``cap // workers`` each, one more for the first ``cap % workers``."""
    return [cap // workers + (1 if w < cap % workers else 0) for w in range(workers)]


# --- the driver's side ----------------------------------------------------------------------


class _Worker:
    def __init__(self, index: int, process: Any, conn: Any, slots: int):
        self.index, self.process, self.conn, self.slots = index, process, conn, slots
        self.ready = False
        self.gone = False  # said bye, or its pipe closed


class WorkerPool:
    """Runs a Driver's sessions in ``workers`` forked client processes, each streaming through
    ``client`` (the backend's :meth:`~backends.base.Backend.worker_client`) on a loop of
    ``event_loop``'s kind. The driver keeps its records, its saturation watch and ``t0``;
    ``worker_loads`` holds each worker's (loop lags, CPU seconds) once the run is over."""

    def __init__(self, driver: Driver, client: RequestStream, workers: int, event_loop: str = "asyncio"):
        self.driver = driver
        self.client = client
        self.workers = workers
        self.event_loop = event_loop
        self.worker_loads: list[tuple[list[float], float]] = []

    async def run(self, sessions: Sequence[SessionSpec], open_loop: bool) -> float:
        """Run ``sessions`` in the worker processes; returns T as :meth:`Driver.run` does."""
        driver = self.driver
        driver.begin(open_loop)
        with collector_frozen():
            return await self._run(sessions, open_loop)

    async def _run(self, sessions: Sequence[SessionSpec], open_loop: bool) -> float:
        driver = self.driver
        check_shared_clock()
        cap = driver.cap(open_loop)
        n = min(self.workers, len(sessions), cap or len(sessions))  # each worker has a session and a slot
        if n < self.workers:
            log.info(
                "client.workers=%d: %d are enough for %d sessions at concurrency %s",
                self.workers,
                n,
                len(sessions),
                cap,
            )
        shares = slots(cap, n) if cap else [0] * n
        if open_loop:
            order = arrival_order(sessions)
            initial: list[Indices] = [order[w::n] for w in range(n)]
            queue = _Pending(0)
        else:
            queue = _Pending(len(sessions))
            initial = [[queue.popleft() for _ in range(min(share + 1, len(queue)))] for share in shares]
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()
        job = _Job(
            driver.renderer,
            driver.plan,
            self.client,
            sessions,
            first_request_ids(sessions),
            open_loop,
            driver.spin,
            self.event_loop,
        )
        workers = _fork(job, initial, shares, loop, events)
        log.info("client: %d worker processes (%s loop)", n, self.event_loop)
        try:
            await _wait_ready(workers, events)
            driver.t0 = time.perf_counter() + START_LEAD_S
            for w in workers:
                w.conn.send(("go", driver.t0))
                if not queue:
                    w.conn.send(("end",))
            monitor = asyncio.create_task(driver.monitor(sessions)) if driver.monitoring else None
            try:
                await self._serve(workers, events, queue, monitor)
            finally:
                if monitor is not None:
                    monitor.cancel()
        except asyncio.CancelledError:
            await self._stop(workers, events, "interrupted")
            raise
        finally:
            _reap(workers, loop)
        return time.perf_counter() - driver.t0

    async def _serve(
        self, workers: list[_Worker], events: asyncio.Queue, queue: _Pending, monitor: Optional[asyncio.Task]
    ) -> None:
        """Forward records, hand out sessions as slots free, until every worker said bye."""
        driver = self.driver
        waiter: Optional[asyncio.Task] = None
        try:
            while not all(w.gone for w in workers):
                waiter = waiter or asyncio.create_task(events.get())
                wait_for = {waiter} if monitor is None else {waiter, monitor}
                await asyncio.wait(wait_for, return_when=asyncio.FIRST_COMPLETED)
                if monitor is not None and monitor.done() and driver.saturated is None:
                    driver.saturated = monitor.result()
                    await self._stop(workers, events, "saturated")
                    return
                if not waiter.done():
                    continue
                worker, msg = waiter.result()
                waiter = None
                self._handle(worker, msg)
                if msg[0] == "done":
                    driver.session_finished()
                    if queue:
                        worker.conn.send(("session", queue.popleft()))
                        if not queue:
                            for w in workers:
                                if not w.gone:
                                    w.conn.send(("end",))
        finally:
            if waiter is not None:
                waiter.cancel()

    def _handle(self, worker: _Worker, msg: tuple) -> None:
        kind = msg[0]
        if kind == "record":
            self.driver.take_record(msg[1])
        elif kind == "load":
            self.worker_loads.append((msg[1], msg[2]))
        elif kind == "bye":
            worker.gone = True
        elif kind == "eof":
            if not worker.gone:
                worker.gone = True
                log.warning(
                    "client worker %d exited (code %s) before it finished: its requests in flight are not recorded",
                    worker.index,
                    worker.process.exitcode,
                )
        elif kind == "error":
            raise HarnessError(f"client worker {worker.index} failed: {msg[1]}")

    async def _stop(self, workers: list[_Worker], events: asyncio.Queue, why: str) -> None:
        """Ask every worker to cancel what is in flight, and keep what they send, within STOP_GRACE_S."""
        for w in workers:
            if not w.gone:
                try:
                    w.conn.send(("stop", why))
                except OSError:
                    w.gone = True
        deadline = time.perf_counter() + STOP_GRACE_S
        while not all(w.gone for w in workers):
            try:
                worker, msg = await asyncio.wait_for(events.get(), max(0.0, deadline - time.perf_counter()))
            except asyncio.TimeoutError:
                log.warning("client workers did not finish within %g s of stop", STOP_GRACE_S)
                return
            if msg[0] != "done":
                self._handle(worker, msg)


class _Pending:
    """The sessions not yet handed out, by index in plan order: a range, not a list (a long
    plan's sessions are millions)."""

    def __init__(self, end: int):
        self.next, self.end = 0, end

    def __len__(self) -> int:
        return self.end - self.next

    def popleft(self) -> int:
        index = self.next
        self.next += 1
        return index


@dataclass
class _Job:
    """What every forked worker inherits: the plan and its sessions, and how to send them."""

    renderer: PromptRenderer
    plan: WorkloadPlan
    client: RequestStream
    sessions: Sequence[SessionSpec]
    first_ids: Sequence[int]  # each session's first request id
    open_loop: bool
    spin: bool
    event_loop: str


def _fork(
    job: _Job, initial: list[Indices], shares: list[int], loop: asyncio.AbstractEventLoop, events: asyncio.Queue
) -> list[_Worker]:
    ctx = multiprocessing.get_context("fork")
    workers: list[_Worker] = []
    with tokenizers_single_threaded():
        _fork_each(ctx, job, initial, shares, loop, events, workers)
    return workers


def _fork_each(
    ctx: Any,
    job: _Job,
    initial: list[Indices],
    shares: list[int],
    loop: asyncio.AbstractEventLoop,
    events: asyncio.Queue,
    workers: list[_Worker],
) -> None:
    for index, share in enumerate(shares):
        mine, theirs = ctx.Pipe(duplex=True)
        inherited = [w.conn for w in workers] + [mine]  # driver ends the worker must not hold
        process = ctx.Process(
            target=_worker_main,
            name=f"harness-client-{index}",
            daemon=True,
            args=(job, initial[index], share, theirs, inherited, os.getpid()),
        )
        # Python >= 3.12 warns of any fork with threads running; a worker takes no lock those
        # threads use (its own loop, the HTTP client, the tokenizer with parallelism off)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            process.start()
        theirs.close()
        worker = _Worker(index, process, mine, share)
        loop.add_reader(mine.fileno(), _on_readable, worker, events)
        workers.append(worker)


def _on_readable(worker: _Worker, events: asyncio.Queue) -> None:
    try:
        while worker.conn.poll():
            events.put_nowait((worker, worker.conn.recv()))
    except (EOFError, OSError):
        asyncio.get_running_loop().remove_reader(worker.conn.fileno())
        events.put_nowait((worker, ("eof",)))


async def _wait_ready(workers: list[_Worker], events: asyncio.Queue) -> None:
    deadline = time.perf_counter() + READY_TIMEOUT_S
    while not all(w.ready for w in workers):
        try:
            worker, msg = await asyncio.wait_for(events.get(), max(0.0, deadline - time.perf_counter()))
        except asyncio.TimeoutError:
            raise HarnessError(f"client workers not ready within {READY_TIMEOUT_S:g} s") from None
        if msg[0] == "ready":
            worker.ready = True
        elif msg[0] == "eof":
            raise HarnessError(f"client worker {worker.index} exited at start (code {worker.process.exitcode})")


def _reap(workers: list[_Worker], loop: asyncio.AbstractEventLoop) -> None:
    """No worker outlives the run: join each, kill what is left."""
    for w in workers:
        try:
            loop.remove_reader(w.conn.fileno())
        except (OSError, ValueError):
            pass
    deadline = time.perf_counter() + 2.0
    for w in workers:
        w.process.join(max(0.0, deadline - time.perf_counter()))
    for w in workers:
        if w.process.is_alive():
            w.process.kill()
            w.process.join(5.0)
        w.conn.close()


# --- a worker -------------------------------------------------------------------------------


def _worker_main(job: _Job, initial: Indices, share: int, conn: Any, inherited: list[Any], driver_pid: int) -> None:
    for other in inherited:
        other.close()  # else a worker's pipe would not close when the driver dies
    # The forked heap (tokenizer, engine libraries: hundreds of MB) is never collected here:
    # a full GC pass over it would stall this loop for tens of ms and copy every page it touches.
    gc.freeze()
    follow_the_parent(driver_pid)  # the driver decides when to stop
    loop = new_loop(job.event_loop)
    try:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(_run_on_pipe(job, initial, share, conn))
    except BaseException as exc:  # noqa: BLE001 - the driver must hear why
        try:
            conn.send(("error", f"{type(exc).__name__}: {exc}"[:300]))
        except OSError:
            pass
    finally:
        conn.close()


def _run_on_pipe(job: _Job, initial: Indices, share: int, conn: Any) -> Any:
    """The worker loop (harness/client/worker_loop.py) with its messages on the pipe: what comes in is
    handed to it as it is readable, what it sends is written out at once."""
    work = WorkerLoop(
        job.client,
        job.renderer,
        job.plan,
        open_loop=job.open_loop,
        spin=job.spin,
        share=share,
        initial=initial,
        take=lambda index: (job.sessions[index], int(job.first_ids[index])),
        send=conn.send,
    )

    def on_control() -> None:
        try:
            while conn.poll():
                work.control(conn.recv())
        except (EOFError, OSError):  # the driver is gone: nobody to send records to
            asyncio.get_running_loop().remove_reader(conn.fileno())
            os._exit(1)

    async def run() -> None:
        asyncio.get_running_loop().add_reader(conn.fileno(), on_control)
        conn.send(("ready",))
        await work.run()

    return run()
