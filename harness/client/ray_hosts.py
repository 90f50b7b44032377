"""The client hosts of ``client.cluster=ray``: one actor per worker, spread one host per node,
checked before anything is measured.

- **Placement**: a placement group of ``client.hosts`` bundles of ``{"CPU": workers}``,
  ``STRICT_SPREAD``: each bundle on a node of its own, so ``hosts=2`` is two machines (Ray's
  ``SPREAD`` is best effort, and may put two on one node when they fit). Its workers
  (``client.workers`` per host) are actors in their host's bundle, one CPU each: one event loop
  uses one core. ``hosts`` null takes every alive node with a CPU per worker. A placement that
  cannot be met within :data:`PLACEMENT_TIMEOUT_S` is refused in one line.
- **The same code everywhere**: each actor reports the sha256 of its harness source
  (:func:`~harness.client.ray_actor.code_digest`); one that differs from this process's is
  refused, naming the host (a host with another version would measure otherwise). The actors
  import what this process imports where the path exists there too: its ``PYTHONPATH``
  travels with them.
- **A clock for each**: every actor's offset is measured (harness/client/clock.py); a host
  whose clock cannot be measured refuses the run, in one line.

:meth:`RayHosts.close` ends every actor and the placement group (also after an error or Ctrl-C);
actors are owned by this process, so Ray ends them too if it dies.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from core.errors import HarnessError
from harness.client.clock import ClockReading, ClockUnmeasured, measure
from harness.client.ray_actor import ClientHost, code_digest
from harness.client.ray_connect import RayCluster
from harness.config import ClientConfig

log = logging.getLogger("harness")

PLACEMENT_TIMEOUT_S = 60.0
START_TIMEOUT_S = 120.0  # an actor's process started and its imports done
CALL_TIMEOUT_S = 10.0  # a round trip of the clock, at most
MAX_CONCURRENCY = 8  # an actor's threads for calls: its stream, control, the clock's round trips


@dataclass
class HostWorker:
    """One actor, as this process sees it."""

    host: int  # its host (the placement group's bundle)
    worker: int  # its index on the host
    actor: Any  # the Ray actor handle
    info: dict[str, Any] = field(default_factory=dict)  # node_id, hostname, ip, pid, python, code
    clock: Optional[ClockReading] = None  # the latest measurement before the run

    @property
    def name(self) -> str:
        return f"host {self.host} ({self.info.get('hostname', '?')}, {self.info.get('ip', '?')})"


class RayHosts:
    """The placement group and its actors; :meth:`close` ends both."""

    def __init__(self, cluster: RayCluster, cfg: ClientConfig):
        self.cluster, self.cfg = cluster, cfg
        self.pg: Any = None
        self.workers: list[HostWorker] = []

    def start(self) -> RayHosts:
        """Place, start and check every actor; a one-line HarnessError when one cannot be."""
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        per_host = self.cfg.workers or 1
        hosts = self._hosts(per_host)
        self.pg = ray.util.placement_group([{"CPU": per_host}] * hosts, strategy="STRICT_SPREAD")
        if not self.pg.wait(timeout_seconds=PLACEMENT_TIMEOUT_S):
            raise HarnessError(
                f"client.hosts={hosts} with client.workers={per_host}: the cluster has not placed {hosts} hosts "
                f"of {per_host} CPU, one per node, within {PLACEMENT_TIMEOUT_S:g} s (are {hosts} nodes free?)"
            )
        actor_class = ray.remote(ClientHost)
        run = uuid.uuid4().hex[:8]
        for host in range(hosts):
            for worker in range(per_host):
                actor = actor_class.options(
                    name=f"harness-client-{run}-{host}-{worker}",
                    num_cpus=1,
                    max_concurrency=MAX_CONCURRENCY,
                    max_restarts=0,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(self.pg, placement_group_bundle_index=host),
                    runtime_env=_runtime_env(),
                ).remote(host, worker)
                self.workers.append(HostWorker(host, worker, actor))
        self._check_code(ray)
        self.measure_clocks()
        log.info(
            "client: %d workers on %d hosts of the Ray cluster at %s (clock offsets %s)",
            len(self.workers),
            hosts,
            self.cluster.address,
            ", ".join(f"{w.clock.offset_s * 1e3:+.2f} ms" for w in self.workers if w.clock is not None),
        )
        return self

    def _hosts(self, per_host: int) -> int:
        usable = [n for n in self.cluster.nodes if (n.get("Resources") or {}).get("CPU", 0) >= per_host]
        hosts = self.cfg.hosts or len(usable)
        if hosts < 1 or hosts > len(usable):
            raise HarnessError(
                f"client.hosts={self.cfg.hosts or 'null'}: the Ray cluster at {self.cluster.address} has "
                f"{len(usable)} alive node(s) with {per_host} CPU for client.workers={per_host} "
                f"(of {len(self.cluster.nodes)} alive)"
            )
        return hosts

    def _check_code(self, ray: Any) -> None:
        refs = [w.actor.describe.remote() for w in self.workers]
        try:
            infos = ray.get(refs, timeout=START_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            raise HarnessError(f"the client hosts' actors did not start within {START_TIMEOUT_S:g} s") from None
        except ray.exceptions.RayError as exc:
            raise HarnessError(f"a client host's actor failed to start: {_first_line(exc)}") from None
        mine = code_digest()
        for w, info in zip(self.workers, infos):
            w.info = info
            if info["code"] != mine:
                raise HarnessError(
                    f"client {w.name} runs other harness code than this process (source sha256 "
                    f"{info['code'][:12]} ≠ {mine[:12]}): install the same version on every host"
                )

    def measure_clocks(self) -> None:
        """Every actor's clock offset now; a host whose clock cannot be measured refuses the run."""
        for w in self.workers:
            try:
                w.clock = measure(clock_of(w.actor), self.cfg.clock_samples)
            except ClockUnmeasured as exc:
                raise ClockUnmeasured(f"the clock of client {w.name} cannot be measured: {exc}") from None

    def close(self) -> None:
        """End every actor and the placement group (idempotent)."""
        if not self.workers and self.pg is None:
            return
        import ray

        for w in self.workers:
            try:
                ray.kill(w.actor, no_restart=True)
            except Exception as exc:  # noqa: BLE001 - an actor already gone is what is wanted
                log.debug("client %s: %s", w.name, exc)
        self.workers = []
        if self.pg is not None:
            try:
                ray.util.remove_placement_group(self.pg)
            except Exception as exc:  # noqa: BLE001 - a cluster gone takes its groups with it
                log.debug("placement group: %s", exc)
            self.pg = None


def clock_of(actor: Any) -> Callable[[], float]:
    """A read of ``actor``'s clock (one round trip), for :func:`~harness.client.clock.measure`."""
    import ray

    def read() -> float:
        return float(ray.get(actor.now.remote(), timeout=CALL_TIMEOUT_S))

    return read


def _runtime_env() -> Optional[dict[str, Any]]:
    """This process's PYTHONPATH for the actors, where it has one: they import what it imports
    (on a host without that path, Python skips it and the installed harness is used; the code
    check tells them apart)."""
    path = os.environ.get("PYTHONPATH")
    return {"env_vars": {"PYTHONPATH": path}} if path else None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]
