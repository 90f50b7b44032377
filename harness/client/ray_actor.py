"""A client worker on another host: the Ray actor of ``client.cluster=ray``.

It runs the same :class:`~harness.client.worker_loop.WorkerLoop` as a forked worker, on an event
loop of its own in a thread of its own (``client.event_loop``), with its own connection pool.
What differs is how the messages travel:

- **In**: the driver calls :meth:`ClientHost.control` with numbered batches of messages and the
  sessions they name (their specs travel with them: the plan stays with the driver). Ray may run
  two calls of a threaded actor at once, so the batches are applied in their numbers' order,
  each handed to the loop with ``call_soon_threadsafe``.
- **Out**: :meth:`ClientHost.stream`, a streaming generator the driver consumes as it goes. The
  loop pickles each message as it sends it (as a pipe would) into :class:`Outbox`; the stream
  yields them in batches of at most :data:`BATCH_MAX`, waiting :data:`LINGER_S` after the first
  of a batch so a busy host sends a few hundred batches a second, not one object per message;
  an empty batch every :data:`HEARTBEAT_S` tells the driver the host is alive. Memory is
  bounded on both sides: Ray holds at most :data:`BACKPRESSURE` unread batches (the generator
  waits at its ``yield``), and the outbox at most :data:`MAX_PENDING` messages (the loop waits to
  send, as it would on a full pipe). Nothing is dropped.
- **The clock**: :meth:`ClientHost.now` reads ``perf_counter`` for the driver's round trips
  (harness/client/clock.py); ``go`` brings t0 on this host's clock. The test hook
  :data:`CLOCK_SHIFT_ENV` makes this host's clock read that many seconds more, consistently:
  ``now`` adds it and ``go``'s t0 has it taken off, as a host whose clock differs would.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import os
import pickle
import resource
import socket
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional
from urllib.parse import urlsplit

from backends.base import RequestStream
from core.errors import HarnessError
from harness.client.event_loops import LoopRunner
from harness.client.worker_loop import WorkerLoop
from workloads.base import SessionSpec, WorkloadPlan
from workloads.prompts import PromptRenderer

# Test hook: this host's clock reads this many seconds more than it is (a host set so is measured
# and corrected like any other; tests/harness/client/test_ray_cluster.py)
CLOCK_SHIFT_ENV = "HARNESS_TEST_CLOCK_OFFSET_S"
BATCH_MAX = 512  # messages in one yielded batch, at most
MAX_PENDING = 4096  # messages waiting for the stream, at most: beyond, the loop waits to send
LINGER_S = 0.005  # after a batch's first message, how long the stream waits for more
HEARTBEAT_S = 1.0  # an empty batch this often when there is nothing to send
BACKPRESSURE = 8  # yielded batches the driver has not read, at most (Ray's generator backpressure)
PROBE_TIMEOUT_S = 5.0
# the packages whose source must be the driver's: a host with other code would measure otherwise
CODE_PACKAGES = ("core", "harness", "backends", "workloads")


@dataclass
class RemoteJob:
    """What every client host is sent once: how to send requests, render prompts and pace them."""

    client: RequestStream  # the backend's remote_client(): pickled, no handle of the driver's process
    renderer: PromptRenderer
    plan: WorkloadPlan  # its settings (sampling, seed, constraint); no sessions: they come with control()
    open_loop: bool
    spin: bool
    event_loop: str
    urls: Sequence[str]  # the servers the client sends to, each probed from the host first


def code_digest() -> str:
    """sha256 over the source of :data:`CODE_PACKAGES` (file names and contents, in order)."""
    root = Path(__file__).resolve().parents[2]
    digest = hashlib.sha256()
    for package in CODE_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


class Outbox:
    """The loop's messages, pickled, waiting for the stream; bounded (:data:`MAX_PENDING`)."""

    def __init__(self, max_pending: int = MAX_PENDING):
        self.cond = threading.Condition()
        self.items: list[bytes] = []
        self.max_pending = max_pending
        self.closed = False  # "bye" is in

    def put(self, msg: tuple) -> None:
        """On the loop's thread: waits while the outbox is full (the driver is behind)."""
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
        with self.cond:
            while len(self.items) >= self.max_pending:
                self.cond.wait()
            self.items.append(data)
            if msg[0] == "bye":
                self.closed = True
            self.cond.notify_all()

    def take(self, heartbeat_s: float = HEARTBEAT_S, linger_s: float = LINGER_S) -> tuple[list[bytes], bool]:
        """The next batch (empty after ``heartbeat_s`` with nothing to send), and whether it is the last."""
        with self.cond:
            if not self.items and not self.closed:
                self.cond.wait(heartbeat_s)
            if self.items and not self.closed and len(self.items) < BATCH_MAX:
                deadline = time.monotonic() + linger_s
                while not self.closed and len(self.items) < BATCH_MAX and (left := deadline - time.monotonic()) > 0:
                    self.cond.wait(left)
            batch, self.items = self.items[:BATCH_MAX], self.items[BATCH_MAX:]
            self.cond.notify_all()
            return batch, self.closed and not self.items


class ClientHost:
    """One client worker on a host of the cluster (a Ray actor: harness/client/ray_pool.py makes it one)."""

    def __init__(self, host: int, worker: int):
        self.host, self.worker = host, worker
        self.clock_shift = float(os.environ.get(CLOCK_SHIFT_ENV) or 0.0)
        self.outbox = Outbox()
        self.sessions: dict[int, tuple[SessionSpec, int]] = {}
        self.lock = threading.Lock()  # control() calls, and the sessions they bring
        self.next_seq = 0
        self.waiting: dict[int, tuple[list[tuple], list[tuple[int, SessionSpec, int]]]] = {}
        self.runner: Optional[LoopRunner] = None
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.work: Optional[WorkerLoop] = None
        self.thread: Optional[threading.Thread] = None

    def describe(self) -> dict[str, Any]:
        """Where this worker runs, and the code it runs."""
        import ray

        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "hostname": socket.gethostname(),
            "ip": ray.util.get_node_ip_address(),
            "pid": os.getpid(),
            "python": sys.version.split()[0],
            "code": code_digest(),
        }

    def now(self) -> float:
        """This host's clock, for the driver's round trips (with the test hook's shift)."""
        return time.perf_counter() + self.clock_shift

    def setup(self, job: RemoteJob, share: int) -> None:
        """The servers reachable from here, then the worker loop started on its own thread,
        waiting for ``go``. ``share``: its slots (0: no cap)."""
        for url in job.urls:
            probe_url(url)
        self.runner = LoopRunner(job.event_loop)
        self.loop = self.runner.loop
        self.work = WorkerLoop(
            job.client,
            job.renderer,
            job.plan,
            open_loop=job.open_loop,
            spin=job.spin,
            share=share,
            initial=(),
            take=self._take,
            send=self.outbox.put,
            report_sends=True,
        )
        self.thread = threading.Thread(target=self._run_loop, name="harness-client-loop", daemon=True)
        self.thread.start()

    def control(self, seq: int, msgs: list[tuple], items: list[tuple[int, SessionSpec, int]]) -> None:
        """Batch ``seq`` of messages for the loop, with the sessions they name, applied in order."""
        with self.lock:
            self.waiting[seq] = (msgs, items)
            while self.next_seq in self.waiting:
                msgs, items = self.waiting.pop(self.next_seq)
                self.next_seq += 1
                for index, spec, first_id in items:
                    self.sessions[index] = (spec, first_id)
                msgs = [("go", m[1] - self.clock_shift) if m[0] == "go" else m for m in msgs]
                assert self.loop is not None and self.work is not None, "setup() first"
                self.loop.call_soon_threadsafe(self._apply, msgs)

    def stream(self) -> Iterator[list[bytes]]:
        """The loop's messages in batches, until its ``bye`` (a streaming generator for Ray)."""
        while True:
            batch, last = self.outbox.take()
            yield batch
            if last:
                return

    def usage(self) -> dict[str, Any]:
        """This process's peak RSS and CPU seconds so far."""
        t = os.times()
        return {
            "rss_peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "cpu_s": t.user + t.system,
        }

    # --- on the loop's thread -------------------------------------------------------------

    def _apply(self, msgs: list[tuple]) -> None:
        assert self.work is not None
        for msg in msgs:
            self.work.control(msg)

    def _take(self, index: int) -> tuple[SessionSpec, int]:
        with self.lock:
            return self.sessions.pop(index)

    def _run_loop(self) -> None:
        runner, work = self.runner, self.work
        assert runner is not None and work is not None
        gc.freeze()  # the job (tokenizer, plan) is never collected: a full pass would stall the loop
        asyncio.set_event_loop(runner.loop)
        try:
            runner.run(work.run())  # on this thread, not the main one: no Ctrl-C handler is set
        except BaseException as exc:  # noqa: BLE001 - the driver must hear why, then the stream ends
            self.outbox.put(("error", f"{type(exc).__name__}: {exc}"[:300]))
            self.outbox.put(("bye",))
        finally:
            runner.close()  # what is left on the loop is cancelled (the connection pool closes with it)


def probe_url(url: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """A TCP connection to the server at ``url`` from this host, or a one-line error."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "", port), timeout=timeout_s):
            pass
    except OSError as exc:
        raise HarnessError(
            f"client host {socket.gethostname()} cannot reach the server at {parts.hostname}:{port} "
            f"({exc.strerror or type(exc).__name__}): give a URL every client host can reach "
            "(backend=openai backend.url=…, or a server listening beyond its loopback)"
        ) from None
