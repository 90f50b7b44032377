"""Reaching the Ray cluster of ``client.cluster=ray``: at once, or a one-line refusal in seconds.

``ray.init(address)`` where no cluster answers retries for about 14 minutes (20 tries of about
41 s) before it gives up, and ``ray.init()`` without an address starts a new local cluster
without a word. So, before anything of the run starts:

1. the address is ``client.ray_address``, else ``RAY_ADDRESS``, as ``host:port`` (the head's
   GCS); neither set is a refusal, never a local cluster;
2. a TCP connection to it within :data:`PROBE_TIMEOUT_S`: refused or silent is a refusal;
3. ``ray.init`` with the GCS connection's timeouts short (:data:`FAST_FAIL_ENV`, unless the
   environment sets them): a port that answers but is no Ray cluster fails in about 5 s;
4. the harness's SIGTERM handler is put back: ``ray.init`` replaces it by ``sys.exit``, and a
   run ends on SIGTERM as on Ctrl-C (every worker stopped, what they measured kept).

Ray is imported here only, and only for ``client.cluster=ray``: the rest of the harness runs
without it installed.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from dataclasses import dataclass
from typing import Any, Optional

from core.errors import HarnessError

PROBE_TIMEOUT_S = 3.0
# GCS connection timeouts for a driver that must fail fast (measured: 5 s instead of ~14 min)
FAST_FAIL_ENV = {
    "RAY_gcs_server_port_wait_time_s": "1",
    "RAY_py_gcs_connect_timeout_s": "2",
    "RAY_gcs_rpc_server_connect_timeout_s": "1",
}
NAMESPACE = "llm-harness"
GUIDE = "docs/guides/multi-host.md"


class ClusterUnreachable(HarnessError):
    """No Ray cluster answers at the address: the run is refused before anything starts."""


@dataclass
class RayCluster:
    """The cluster this process is connected to."""

    address: str  # host:port of its GCS, as given
    nodes: list[dict[str, Any]]  # the alive nodes: NodeID, NodeManagerAddress, NodeManagerHostname, Resources


def cluster_address(configured: Optional[str]) -> str:
    """``client.ray_address``, else RAY_ADDRESS, as host:port; a one-line refusal without either."""
    address = configured or os.environ.get("RAY_ADDRESS") or ""
    where = "client.ray_address" if configured else "RAY_ADDRESS"
    if not address:
        raise ClusterUnreachable(
            f"client.cluster=ray needs the cluster's address: set client.ray_address=HOST:PORT or RAY_ADDRESS "
            f"(ray start --head prints it; {GUIDE})"
        )
    host, sep, port = address.rpartition(":")
    if "://" in address or not sep or not host or not port.isdigit():
        raise ClusterUnreachable(f"{where}={address!r} is not a Ray cluster's HOST:PORT (e.g. 10.0.0.5:6379)")
    return address


def probe(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """A TCP connection to the address within ``timeout_s``, or a one-line refusal."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        why = "no answer" if isinstance(exc, socket.timeout) else exc.strerror or type(exc).__name__
        raise ClusterUnreachable(
            f"no Ray cluster at {address} ({why} within {timeout_s:g} s): start one with "
            f"`ray start --head` there, or check client.ray_address / RAY_ADDRESS ({GUIDE})"
        ) from None


def connect(configured: Optional[str]) -> RayCluster:
    """This process connected to the cluster (once: a later point reuses the connection)."""
    address = cluster_address(configured)
    for key, value in FAST_FAIL_ENV.items():  # read when Ray's core loads: before the import
        os.environ.setdefault(key, value)
    import ray

    if ray.is_initialized():
        current = ray.get_runtime_context().gcs_address
        if _same(current, address):
            return RayCluster(address, alive_nodes())
        raise ClusterUnreachable(
            f"this process is connected to the Ray cluster at {current}, not {address}: one cluster per process"
        )
    probe(address)
    handler = signal.getsignal(signal.SIGTERM) if threading.current_thread() is threading.main_thread() else None
    try:
        ray.init(
            address=address,
            namespace=NAMESPACE,
            log_to_driver=False,
            logging_level=logging.WARNING,
        )
    except (ConnectionError, RuntimeError, TimeoutError) as exc:
        raise ClusterUnreachable(
            f"no Ray cluster at {address}: {str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}"
        ) from None
    finally:
        if handler is not None:
            signal.signal(signal.SIGTERM, handler)
    return RayCluster(address, alive_nodes())


def alive_nodes() -> list[dict[str, Any]]:
    import ray

    return [n for n in ray.nodes() if n.get("Alive")]


def _same(gcs_address: Optional[str], address: str) -> bool:
    """One address by port, and by host unless either is a loopback (Ray rewrites those to the
    machine's own address)."""
    if not gcs_address:
        return False
    host_a, _, port_a = gcs_address.rpartition(":")
    host_b, _, port_b = address.rpartition(":")
    loopback = {"127.0.0.1", "localhost", "::1"}
    return port_a == port_b and (host_a == host_b or host_a in loopback or host_b in loopback)
