"""The load generator across hosts (``client.cluster=ray``): a run's sessions on client workers
that are Ray actors on several machines, one clock, and an exact merge.

It does for a cluster what :class:`harness.client.workers.WorkerPool` does for one host, with
the same rules, and the driver (this process) keeps the records, the saturation watch and t0:

- **Closed loop: the concurrency is exact across hosts.** The cap C is split over the N workers
  (``C // N``, one more for the first ``C % N``); a worker starts a session only on a free slot
  of its own. Sessions are handed out in plan order as workers report them done; each worker
  holds :func:`spare` sessions beyond its slots, so a freed slot starts at once while the
  driver's next hand-out is on its way.
- **Open loop: one schedule, one t0.** Sessions are dealt round-robin in arrival order, fed to
  each worker :data:`FEED_AHEAD_S` before they are due (memory: the rate × that, not the plan);
  each worker paces its own against ``t0 + arrival_s``.
- **One clock.** t0 is this process's; each worker gets ``t0 + offset`` on its own clock
  (harness/client/clock.py), its offset measured again just before the run and once after it;
  every stamp it takes is relative to that, so its records are on this process's timeline.
  As a check, each record's arrival here is compared with its end: ``delivery = received − end``
  is ≥ 0 on a right clock, and a host whose delivery reads below −(its uncertainty + the drift
  bound) is named in the warnings (its offset is wrong).
- **Exact merge.** Each record comes back as its request ends (batched by the worker's stream,
  read here as it comes, bounded: harness/client/ray_actor.py) and is kept as in one process:
  the same requests.parquet, nothing averaged. Each host's figures (requests, CPU, loop lag,
  peak RSS, clock) go into the summary's ``hosts`` and hosts.json.
- **A host lost** (its actor or its node died, or it sent nothing for ``client.host_timeout_s``):
  each of its requests in flight (sent, no record yet; workers report each send) is recorded as
  failed, with the reason; what it had measured is kept. ``client.on_host_loss=continue``: its
  slots move to the other workers and its sessions not yet begun are handed to them;
  ``stop``: the others are stopped as on Ctrl-C and the run fails, keeping every record.
- **The ending.** On Ctrl-C/SIGTERM (or an over-saturated open loop) every worker is told to
  stop; each cancels what it has in flight and sends those records (marked cancelled). A worker
  that has not ended within :data:`STOP_GRACE_S` has its requests in flight recorded as
  cancelled; every actor is then ended (harness/client/ray_hosts.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import pickle
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from backends.base import RequestStream
from core.errors import HarnessError
from harness.client.clock import ClockReading, ClockUnmeasured, Drift, drift, measure
from harness.client.driver import Driver, collector_frozen
from harness.client.ray_actor import BACKPRESSURE, RemoteJob
from harness.client.ray_hosts import CALL_TIMEOUT_S, HostWorker, RayHosts, clock_of
from harness.client.worker_loop import SentRequest
from harness.client.workers import slots
from harness.config import ClientConfig
from harness.results import formulas
from harness.results.record import CANCELLED, RequestRecord
from workloads.base import SessionSpec, arrival_order, first_request_ids
from workloads.prompts import PromptRenderer

log = logging.getLogger("harness")

START_LEAD_S = 0.5  # t0 is this far after go is sent: every worker has it by then
FEED_AHEAD_S = 2.0  # open loop: each worker has its sessions this long before they are due
FEED_INTERVAL_S = 0.1  # open loop: how often the feed is topped up
SETUP_TIMEOUT_S = 120.0  # the job sent, unpickled, and the server probed from every host
STOP_GRACE_S = 10.0  # after stop, how long the workers may take to send what they have
LOST = "client host lost: "  # the start of the error of a request in flight on a lost host


def spare(share: int) -> int:
    """Sessions a worker holds beyond its slots: its next sessions while the driver's hand-out
    travels (a round trip across the cluster, with the stream's batching)."""
    return max(2, share // 4)


@dataclass
class _Live:
    """A worker during the run: what it was given, what is in flight, what it sent back."""

    w: HostWorker
    share: int = 0
    seq: int = 0
    given: dict[int, None] = field(default_factory=dict)  # session indices given, not done (in order)
    started: set[int] = field(default_factory=set)  # those of them with a request sent
    in_flight: dict[int, SentRequest] = field(default_factory=dict)  # request id → sent, no record yet
    requests: int = 0
    completed: int = 0
    failed: int = 0
    # received − end_s (seconds) over its records: the least, and the sum for the mean (no list: a long run's are millions)
    delivery_min: float = float("inf")
    delivery_sum: float = 0.0
    records: int = 0
    lags: list[float] = field(default_factory=list)
    cpu_s: Optional[float] = None
    usage: dict[str, Any] = field(default_factory=dict)
    gone: bool = False  # said bye
    lost: Optional[str] = None  # why it was lost
    ended: bool = False  # told end
    after: Optional[ClockReading] = None

    @property
    def done(self) -> bool:
        return self.gone or self.lost is not None


class WorkerFailed(HarnessError):
    """A worker's loop failed (an error, not a loss): the run fails."""


class RayPool:
    """Runs a Driver's sessions on the actors of ``hosts``; ``worker_loads`` holds each
    worker's (loop lags, CPU seconds) once the run is over, as :class:`WorkerPool`'s does."""

    def __init__(
        self,
        driver: Driver,
        hosts: RayHosts,
        client: RequestStream,
        renderer: PromptRenderer,
        cfg: ClientConfig,
    ):
        self.driver, self.hosts, self.client, self.renderer, self.cfg = driver, hosts, client, renderer, cfg
        self.worker_loads: list[tuple[list[float], float]] = []
        self.live: list[_Live] = [_Live(w) for w in hosts.workers]
        self.warnings: list[str] = []
        self.failure: Optional[str] = None  # on_host_loss=stop: the host lost that ended the run
        self.duration_s = 0.0
        self._queue: deque[int] = deque()  # closed loop: sessions not handed out, in plan order
        self._order: Any = ()  # open loop: arrival order
        self._next = 0  # open loop: the next of the order to deal
        self._dealt = 0  # open loop: sessions dealt, for the round robin
        self._redeal: deque[int] = deque()  # open loop: a lost host's sessions not begun
        self._sessions: Sequence[SessionSpec] = ()
        self._first_ids: Sequence[int] = ()
        self._open_loop = False
        self._stopping = False
        self._woken = asyncio.Event()

    # --- the run ----------------------------------------------------------------------------

    async def run(self, sessions: Sequence[SessionSpec], open_loop: bool) -> float:
        """Run ``sessions`` on the hosts; returns T as :meth:`Driver.run` does."""
        self.driver.begin(open_loop)
        with collector_frozen():
            return await self._run(sessions, open_loop)

    async def _run(self, sessions: Sequence[SessionSpec], open_loop: bool) -> float:
        import ray

        driver = self.driver
        self._sessions, self._first_ids, self._open_loop = sessions, first_request_ids(sessions), open_loop
        cap = driver.cap(open_loop)
        active = _spread(self.live)[: min(len(self.live), len(sessions), cap or len(sessions))]
        for lv, share in zip(active, slots(cap, len(active)) if cap else [0] * len(active)):
            lv.share = share
        for lv in self.live:
            if all(lv is not a for a in active):
                lv.gone = True  # more workers than sessions or slots: this one is not used
        job = RemoteJob(
            client=self.client,
            renderer=self.renderer,
            plan=dataclasses.replace(driver.plan, sessions=[], warmup=[]),
            open_loop=open_loop,
            spin=driver.spin,
            event_loop=self.cfg.event_loop,
            urls=_urls(self.client),
        )
        job_ref = ray.put(job)  # sent once, shared by every worker
        await self._call_all([lv.w.actor.setup.remote(job_ref, lv.share) for lv in active], SETUP_TIMEOUT_S, "start")
        streams = {
            id(lv): lv.w.actor.stream.options(_generator_backpressure_num_objects=BACKPRESSURE).remote()
            for lv in active
        }
        if open_loop:
            self._order = arrival_order(sessions)
            self._feed_arrivals(horizon=FEED_AHEAD_S)
        else:
            self._queue = deque(range(len(sessions)))
            for lv in active:
                self._hand_out(lv, lv.share + spare(lv.share))
            self._end_if_empty()
        await self._measure_before(active)
        driver.t0 = time.perf_counter() + START_LEAD_S
        for lv in active:
            assert lv.w.clock is not None
            self._send(lv, [("go", driver.t0 + lv.w.clock.offset_s)])
        readers = [asyncio.create_task(self._read(lv, streams[id(lv)])) for lv in active]
        monitor = asyncio.create_task(driver.monitor(sessions)) if driver.monitoring else None
        feeder = asyncio.create_task(self._keep_feeding()) if open_loop else None
        log.info("client: %d workers on %d hosts (Ray)", len(active), len({lv.w.host for lv in active}))
        try:
            await self._serve(monitor)
        except asyncio.CancelledError:
            await self._stop("interrupted")
            raise
        finally:
            for task in (monitor, feeder, *readers):
                if task is not None:
                    task.cancel()
            await asyncio.gather(*(t for t in (monitor, feeder, *readers) if t is not None), return_exceptions=True)
            self.duration_s = time.perf_counter() - driver.t0
        await self._after(active)
        never = sum(1 for lv in active if lv.gone for i in lv.given if i not in lv.started)
        if never and not self._stopping:
            self.warnings.append(
                f"{never} sessions of a lost client host reached the others after they had ended: they were not run."
            )
        if self.failure is not None:
            raise HarnessError(self.failure)
        return self.duration_s

    async def _serve(self, monitor: Optional[asyncio.Task]) -> None:
        """Until every worker has ended (or was lost): the saturation watch, and a stop on loss."""
        driver = self.driver
        while not all(lv.done for lv in self.live):
            waiter = asyncio.create_task(self._woken.wait())
            wait_for: set[asyncio.Task] = {waiter} if monitor is None or monitor.done() else {waiter, monitor}
            await asyncio.wait(wait_for, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            self._woken.clear()
            if monitor is not None and monitor.done() and driver.saturated is None and not self._stopping:
                driver.saturated = monitor.result()
                await self._stop("saturated")
                return
            if self.failure is not None and not self._stopping:
                await self._stop(f"the run was stopped: {self.failure}")
                return

    async def _read(self, lv: _Live, stream: Any) -> None:
        """One worker's stream, batch by batch, until its bye; a failure or a silence is its loss."""
        timeout = self.cfg.host_timeout_s
        try:
            while not lv.done:
                try:
                    ref = await asyncio.wait_for(stream.__anext__(), timeout)
                    batch = await asyncio.wait_for(ref, timeout)
                except StopAsyncIteration:
                    if not lv.gone:
                        self._lose(lv, "its stream ended before its last message")
                    return
                except asyncio.TimeoutError:
                    self._lose(lv, f"nothing from it for client.host_timeout_s={timeout:g} s")
                    return
                for data in batch:
                    self._handle(lv, pickle.loads(data))
                self._woken.set()
        except asyncio.CancelledError:
            raise
        except WorkerFailed as exc:  # its loop failed: the run fails, the others are stopped
            lv.lost = str(exc)
            self.failure = self.failure or str(exc)
        except Exception as exc:  # noqa: BLE001 - whatever Ray raises for a dead actor or node is a loss
            self._lose(lv, _first_line(exc))
        finally:
            self._woken.set()

    def _handle(self, lv: _Live, msg: tuple) -> None:
        kind = msg[0]
        driver = self.driver
        if kind == "sent":
            sent: SentRequest = msg[1]
            lv.in_flight[sent.request_id] = sent
            lv.started.add(sent.index)
        elif kind == "record":
            record: RequestRecord = msg[1]
            lv.in_flight.pop(record.request_id, None)
            delivery = time.perf_counter() - driver.t0 - record.end_s
            lv.delivery_min = min(lv.delivery_min, delivery)
            lv.delivery_sum += delivery
            lv.records += 1
            self._count(lv, record)
            driver.take_record(record)
        elif kind == "done":
            index = msg[1]
            lv.given.pop(index, None)
            lv.started.discard(index)
            driver.session_finished()
            if not self._open_loop and not self._stopping:
                self._hand_out(lv, 1)
                self._end_if_empty()
        elif kind == "load":
            lv.lags, lv.cpu_s = list(msg[1]), float(msg[2])
            self.worker_loads.append((lv.lags, lv.cpu_s))
        elif kind == "bye":
            lv.gone = True
        elif kind == "error":
            raise WorkerFailed(f"client worker on {lv.w.name} failed: {msg[1]}")

    def _count(self, lv: _Live, record: RequestRecord) -> None:
        lv.requests += 1
        if record.ok:
            lv.completed += 1
        else:
            lv.failed += 1

    # --- sessions out -----------------------------------------------------------------------

    def _send(self, lv: _Live, msgs: list[tuple], items: Optional[list[tuple[int, SessionSpec, int]]] = None) -> None:
        """A numbered control batch to one worker (applied there in order); fire and forget:
        a worker that cannot take it is found lost by its stream."""
        if lv.done:
            return
        lv.w.actor.control.remote(lv.seq, msgs, items or [])
        lv.seq += 1

    def _item(self, index: int) -> tuple[int, SessionSpec, int]:
        return index, self._sessions[index], int(self._first_ids[index])

    def _hand_out(self, lv: _Live, n: int) -> None:
        """Closed loop: the queue's next ``n`` sessions to ``lv``."""
        items = [self._item(self._queue.popleft()) for _ in range(min(n, len(self._queue)))]
        if not items or lv.done:
            if items:
                self._queue.extendleft(reversed([i for i, _, _ in items]))
            return
        for index, _, _ in items:
            lv.given[index] = None
        self._send(lv, [("session", index) for index, _, _ in items], items)

    def _end_if_empty(self) -> None:
        """Closed loop: once every session is handed out, each worker is told no more will come."""
        if self._queue:
            return
        for lv in self.live:
            if not lv.ended and not lv.done:
                lv.ended = True
                self._send(lv, [("end",)])

    def _feed_arrivals(self, horizon: float) -> None:
        """Open loop: deal the sessions due before ``horizon`` (from t0), round-robin in arrival
        order over the workers still running; a lost host's sessions not begun first."""
        live = [lv for lv in self.live if not lv.done]
        if not live:
            return
        batches: dict[int, list[tuple[int, SessionSpec, int]]] = {}
        order, sessions = self._order, self._sessions

        def deal(index: int) -> None:
            lv = live[self._dealt % len(live)]
            self._dealt += 1
            lv.given[index] = None
            batches.setdefault(id(lv), []).append(self._item(index))

        while self._redeal:
            deal(self._redeal.popleft())
        while self._next < len(order) and (sessions[int(order[self._next])].arrival_s or 0.0) <= horizon:
            deal(int(order[self._next]))
            self._next += 1
        for lv in live:
            items = batches.get(id(lv))
            if items:
                self._send(lv, [("arrivals", [i for i, _, _ in items])], items)
        if self._next >= len(order):
            for lv in live:
                if not lv.ended:
                    lv.ended = True
                    self._send(lv, [("end",)])

    async def _keep_feeding(self) -> None:
        while not self._stopping and (self._next < len(self._order) or self._redeal):
            await asyncio.sleep(FEED_INTERVAL_S)
            self._feed_arrivals(time.perf_counter() - self.driver.t0 + FEED_AHEAD_S)

    # --- loss and stop ----------------------------------------------------------------------

    def _lose(self, lv: _Live, why: str) -> None:
        """``lv``'s host is lost: its requests in flight recorded as failed; its slots and
        sessions not begun to the others (continue), or the run stopped (stop)."""
        if lv.done:
            return
        lv.lost = why
        now = time.perf_counter() - self.driver.t0
        error = f"{LOST}{lv.w.name}: {why}"
        for sent in lv.in_flight.values():
            record = sent.failed(error, now)
            self._count(lv, record)
            self.driver.take_record(record)
        failed = len(lv.in_flight)
        lv.in_flight.clear()
        begun = [i for i in lv.given if i in lv.started]
        not_begun = [i for i in lv.given if i not in lv.started]
        for _ in begun:
            self.driver.session_finished()  # its turns left are never sent: no longer in the backlog
        lv.given.clear()
        _kill(lv.w.actor)
        text = f"Client {lv.w.name} was lost {now:.1f} s into the run ({why}): its {failed} requests in flight are recorded as failed"
        others = [o for o in self.live if not o.done]
        if self.cfg.on_host_loss == "stop" or not others:
            self.failure = self.failure or f"client {lv.w.name} lost {now:.1f} s into the run: {why}"
            ending = "the run was stopped (client.on_host_loss=stop)" if others else "no client host was left"
            self.warnings.append(f"{text}; {ending}.")
        else:
            self._move(lv, others, not_begun)
            self.warnings.append(
                text + f"; the run went on over the other {len(others)} workers "
                f"({len(not_begun)} of its sessions not begun moved to them, with its {lv.share} slots)."
            )
        log.warning(self.warnings[-1])
        self._woken.set()

    def _move(self, lv: _Live, others: list[_Live], not_begun: list[int]) -> None:
        """``continue``: a lost worker's slots and sessions not begun go to the others."""
        if self._open_loop:
            self._redeal.extend(sorted(not_begun, key=lambda i: self._sessions[i].arrival_s or 0.0))
            self._feed_arrivals(max(0.0, time.perf_counter() - self.driver.t0) + FEED_AHEAD_S)
            return
        self._queue.extendleft(reversed(not_begun))
        if lv.share:
            for other, extra in zip(others, slots(lv.share, len(others))):
                if extra:
                    other.share += extra
                    self._send(other, [("slots", extra)])
                    self._hand_out(other, extra)
        self._end_if_empty()

    async def _stop(self, why: str) -> None:
        """Every worker told to stop; what they send kept, within STOP_GRACE_S; then whatever is
        still in flight on a worker that has not ended is recorded as cancelled."""
        self._stopping = True
        for lv in self.live:
            self._send(lv, [("stop", why)])
        deadline = time.perf_counter() + STOP_GRACE_S
        while not all(lv.done for lv in self.live) and time.perf_counter() < deadline:
            self._woken.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._woken.wait(), max(0.0, deadline - time.perf_counter()))
        now = time.perf_counter() - self.driver.t0
        for lv in self.live:
            if lv.done:
                continue
            log.warning("client %s did not end within %g s of stop", lv.w.name, STOP_GRACE_S)
            for sent in lv.in_flight.values():
                record = sent.failed(f"{CANCELLED}the client host did not end within {STOP_GRACE_S:g} s", now)
                self._count(lv, record)
                self.driver.take_record(record)
            lv.in_flight.clear()
            lv.lost = "did not end when stopped"

    # --- the clocks -------------------------------------------------------------------------

    async def _measure_before(self, active: list[_Live]) -> None:
        """Every worker's offset again, just before t0 (off the loop: the round trips block)."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.hosts.measure_clocks)

    async def _after(self, active: list[_Live]) -> None:
        """The clocks measured once more, and each worker's usage, where it is still there."""
        import ray

        def after() -> None:
            for lv in active:
                if lv.lost is not None:
                    continue
                try:
                    lv.after = measure(clock_of(lv.w.actor), self.cfg.clock_samples)
                    lv.usage = ray.get(lv.w.actor.usage.remote(), timeout=CALL_TIMEOUT_S)
                except (ClockUnmeasured, ray.exceptions.RayError) as exc:
                    log.warning("client %s: its clock after the run was not measured (%s)", lv.w.name, exc)

        await asyncio.get_running_loop().run_in_executor(None, after)

    async def _call_all(self, refs: list[Any], timeout: float, what: str) -> None:
        import ray

        try:
            await asyncio.wait_for(asyncio.gather(*refs), timeout)
        except asyncio.TimeoutError:
            raise HarnessError(f"the client hosts did not {what} within {timeout:g} s") from None
        except ray.exceptions.RayTaskError as exc:
            raise HarnessError(_first_line(exc.as_instanceof_cause())) from None
        except ray.exceptions.RayError as exc:
            raise HarnessError(f"a client host failed to {what}: {_first_line(exc)}") from None

    # --- what the run's folder gets ---------------------------------------------------------

    def figures(self) -> dict[str, dict[str, Any]]:
        """The summary's ``hosts``: per host, its requests, CPU, loop lag, peak RSS and clock."""
        out: dict[str, dict[str, Any]] = {}
        bound = self.cfg.max_clock_drift_ms / 1e3
        for host in sorted({lv.w.host for lv in self.live}):
            mine = [lv for lv in self.live if lv.w.host == host]
            first = mine[0].w.info
            best = min(mine, key=lambda lv: lv.w.clock.rtt_s if lv.w.clock else float("inf"))
            cpu = [lv.cpu_s for lv in mine if lv.cpu_s is not None]
            received = sum(lv.records for lv in mine)
            lost = [lv.lost for lv in mine if lv.lost]
            out[str(host)] = {
                "hostname": first.get("hostname"),
                "ip": first.get("ip"),
                "node_id": first.get("node_id"),
                "workers": len(mine),
                "requests": sum(lv.requests for lv in mine),
                "completed": sum(lv.completed for lv in mine),
                "failed": sum(lv.failed for lv in mine),
                "cpu_cores": sum(cpu) / self.duration_s if cpu and self.duration_s > 0 else None,
                "loop_lag_s": formulas.distribution([lag for lv in mine for lag in lv.lags]),
                "rss_peak_bytes": sum(lv.usage.get("rss_peak_bytes", 0) for lv in mine) or None,
                "clock": _clock_figures(best.w.clock, best.after, bound),
                "delivery_s": {
                    "min": min(lv.delivery_min for lv in mine) if received else None,
                    "mean": sum(lv.delivery_sum for lv in mine) / received if received else None,
                },
                "lost": lost[0] if lost else None,
            }
        return out

    def clock_warnings(self) -> list[str]:
        """A host whose offset drifted beyond the bound, or whose records arrived before they
        ended (its offset is wrong)."""
        out = []
        bound = self.cfg.max_clock_drift_ms / 1e3
        for host, figures in self.figures().items():
            clock = figures["clock"] or {}
            name = f"host {host} ({figures['hostname']}, {figures['ip']})"
            if clock.get("drifted"):
                out.append(
                    f"The clock of client {name} drifted {clock['drift_s'] * 1e3:+.2f} ms against this host's during "
                    f"the run (offset {clock['offset_s'] * 1e3:+.2f} ms before, {clock['offset_after_s'] * 1e3:+.2f} ms "
                    f"after; bound {self.cfg.max_clock_drift_ms:g} ms beyond ±{clock['drift_uncertainty_s'] * 1e3:.2f} ms): "
                    "its records late in the run are placed in time up to that much off."
                )
            early = figures["delivery_s"]["min"]
            if early is not None and clock.get("uncertainty_s") is not None:
                if early < -(clock["uncertainty_s"] + bound):
                    out.append(
                        f"Records of client {name} reached this host {-early * 1e3:.1f} ms before they ended: "
                        "its clock offset is wrong, and its records' times with it."
                    )
        return out

    def hosts_json(self) -> dict[str, Any]:
        """hosts.json: each worker, where it ran, and both clock measurements with their round trips."""
        return {
            "address": self.hosts.cluster.address,
            "workers": [
                {
                    "host": lv.w.host,
                    "worker": lv.w.worker,
                    **{k: v for k, v in lv.w.info.items() if k != "code"},
                    "code_sha256": lv.w.info.get("code"),
                    "slots": lv.share,
                    "requests": lv.requests,
                    "clock_before": _reading(lv.w.clock),
                    "clock_after": _reading(lv.after),
                    "lost": lv.lost,
                }
                for lv in self.live
            ],
        }


def _clock_figures(before: Optional[ClockReading], after: Optional[ClockReading], bound: float) -> Optional[dict]:
    if before is None:
        return None
    moved: Optional[Drift] = drift(before, after, bound)
    return {
        "offset_s": before.offset_s,
        "rtt_s": before.rtt_s,
        "uncertainty_s": before.uncertainty_s,
        "offset_after_s": after.offset_s if after is not None else None,
        "rtt_after_s": after.rtt_s if after is not None else None,
        "drift_s": moved.drift_s if moved is not None else None,
        "drift_uncertainty_s": moved.uncertainty_s if moved is not None else None,
        "drifted": moved.beyond if moved is not None else None,
    }


def _reading(reading: Optional[ClockReading]) -> Optional[dict[str, Any]]:
    if reading is None:
        return None
    return {**reading.to_dict(), "round_trips": [[rtt, offset] for rtt, offset in reading.samples]}


def _spread(lives: list[_Live]) -> list[_Live]:
    """Workers in the order that spreads a few sessions over the hosts first: each host's first
    worker, then each host's second…"""
    return sorted(lives, key=lambda lv: (lv.w.worker, lv.w.host))


def _urls(client: RequestStream) -> list[str]:
    urls = getattr(client, "urls", None)
    return list(urls()) if callable(urls) else []


def _kill(actor: Any) -> None:
    import ray

    with contextlib.suppress(Exception):
        ray.kill(actor, no_restart=True)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]
