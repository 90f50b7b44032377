"""A point's client hosts on a Ray cluster (``client.cluster=ray``), from the cluster's address to
the actors ready, each step refused in one line before anything is measured.

In a point's order (harness/run/point.py): :func:`connect_cluster` before anything starts (no
engine loaded, no run folder written: an unreachable cluster costs seconds), then, once the
engine is up and the plan is built, :func:`start_hosts`: the workload checked (what must run
in one process cannot run across hosts), the backend's client checked (it must be able to
travel), the actors placed and started, their code and their clocks checked. The measured
phase then runs on :class:`~harness.client.ray_pool.RayPool`; the hosts are closed with the point.
"""

from __future__ import annotations

from typing import Optional

from core.errors import ConfigError
from harness.client.ray_connect import RayCluster, connect
from harness.client.ray_hosts import RayHosts
from harness.config import RunConfig
from harness.run.session import EngineSession
from workloads.base import WorkloadPlan, has_sub_agents


def connect_cluster(cfg: RunConfig) -> Optional[RayCluster]:
    """The Ray cluster, connected, for ``client.cluster=ray``; None for a local client."""
    if cfg.client.cluster != "ray":
        return None
    return connect(cfg.client.ray_address)


def start_hosts(cluster: RayCluster, cfg: RunConfig, session: EngineSession, plan: WorkloadPlan) -> RayHosts:
    """The point's client hosts, started and checked (closed again if a check fails)."""
    if plan.schedule is not None and not plan.open_loop:
        raise ConfigError(
            "client.cluster=ray: a closed loop whose cap follows a schedule runs in one client process "
            "(client.cluster=local)"
        )
    if has_sub_agents(plan.sessions):
        raise ConfigError(
            "client.cluster=ray: agent jobs (sub-agents) run in one client process (client.cluster=local)"
        )
    assert session.backend is not None
    if session.backend.remote_client() is None:
        raise ConfigError(f"client.cluster=ray: backend={cfg.backend.name} cannot be driven from other hosts")
    hosts = RayHosts(cluster, cfg.client)
    try:
        return hosts.start()
    except BaseException:
        hosts.close()
        raise
