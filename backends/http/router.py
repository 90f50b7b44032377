"""Several OpenAI-compatible endpoints behind one run: a router over one :class:`OpenAIClient` each.

``backend=openai backend.urls=[…]`` (servers that are already running) and
``backend=<engine> backend.mode=server backend.replicas=N`` (N servers launched for the run) send
each request to one endpoint, chosen by ``backend.routing``:

- ``round_robin`` (default): endpoint 0, 1, …, N−1, 0, … in the order requests are sent;
- ``least_outstanding``: the endpoint with the fewest requests in flight from this client (ties:
  the next in round-robin order);
- ``session_affinity``: every turn of a chat session (``GenerationRequest.session_id``) goes to
  the endpoint its first turn went to, chosen by least outstanding, so the session's prefix is
  in that server's cache. A session whose endpoint is down moves to another (least outstanding).

What the router counts is its own: with ``client.workers`` > 1 each forked worker has a router of
its own (its own counts of requests in flight, its own session map; a session runs in one
worker, so it keeps its endpoint).

**Failures are the request's, never the run's.** A request that fails on an endpoint (connection
refused, an HTTP 5xx, a stream cut off, a server that exited) raises :class:`EndpointError`,
whose text starts ``endpoint <i> (<url>): `` and then the cause; the runner records it against
that request, with the endpoint from the exception's ``engine_stats`` (its text names it too:
:func:`endpoint_of_error`). An
endpoint that **refuses a connection** is left out of the choice for ``REFUSED_RETRY_S`` seconds,
then tried again (a replica that restarts comes back); so is one whose process has exited, for
good (``exited``, managed replicas only). When every endpoint is left out, requests go to all
of them as usual, and fail with their own errors.

Each request that completes carries its endpoint's index in ``RequestDone.engine_stats["endpoint"]``
(the ``endpoint`` column of requests.parquet). Only one ``/metrics`` is scraped per run (the first
endpoint's, where one is set): the router does not scrape per endpoint.
"""

from __future__ import annotations

import asyncio
import errno
import re
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Optional

from backends.base import ROUTING
from backends.http.client import OpenAIClient
from backends.http.urls import public_url
from core.types import GenerationRequest, RequestDone, StreamEvent

# an endpoint that refused a connection is skipped for this long, then tried again
REFUSED_RETRY_S = 5.0

_ERROR_PREFIX = re.compile(r"^(?:EndpointError: )?endpoint (\d+) \(")


class EndpointError(Exception):
    """A request failed on one endpoint; ``endpoint`` is its index."""

    def __init__(self, endpoint: int, url: str, cause: BaseException, why: Optional[str] = None):
        self.endpoint = endpoint
        self.engine_stats = {"endpoint": endpoint}  # the failed request's record keeps it (harness/client/driver.py)
        text = why or f"{type(cause).__name__}: {cause}".strip()
        super().__init__(f"endpoint {endpoint} ({url}): {text}")


def endpoint_of_error(error: Optional[str]) -> Optional[int]:
    """The endpoint a failed request's error names (an :class:`EndpointError`'s text), or None."""
    match = _ERROR_PREFIX.match(error) if error else None
    return int(match.group(1)) if match else None


def refused(exc: BaseException) -> bool:
    return isinstance(exc, ConnectionRefusedError) or (isinstance(exc, OSError) and exc.errno == errno.ECONNREFUSED)


class Router:
    """Routes each request to one of several clients (``backend.routing``); quacks like
    :class:`OpenAIClient` where the backends use it (``stream``, ``model_name``, ``endpoint``).

    ``exited(i)``: why endpoint ``i``'s process has exited, or None while it runs (managed
    replicas); a copy (a forked worker's) has none, since the servers are not its children.
    """

    def __init__(
        self,
        clients: Sequence[OpenAIClient],
        policy: str = "round_robin",
        exited: Optional[Callable[[int], Optional[str]]] = None,
    ):
        if not clients:
            raise ValueError("a router needs at least one client")
        if policy not in ROUTING:
            raise ValueError(f"routing must be one of {', '.join(ROUTING)} (got {policy!r})")
        self.clients = list(clients)
        self.policy = policy
        self.exited = exited
        self.urls = [public_url(c.base_url) for c in self.clients]
        self.outstanding = [0] * len(self.clients)
        self.sent = [0] * len(self.clients)
        self._next = 0
        self._sessions: dict[int, int] = {}
        self._refused_until = [0.0] * len(self.clients)

    def __copy__(self) -> Router:
        import copy

        return Router([copy.copy(c) for c in self.clients], self.policy)

    @property
    def model_name(self) -> str:
        return self.clients[0].model_name

    @property
    def endpoint(self) -> str:
        return self.clients[0].endpoint

    def usable(self, i: int, now: float) -> bool:
        return now >= self._refused_until[i] and (self.exited is None or self.exited(i) is None)

    def pick(self, request: GenerationRequest) -> int:
        """The endpoint for ``request`` under the policy, among those not left out."""
        n = len(self.clients)
        now = time.monotonic()
        candidates = [i for i in range(n) if self.usable(i, now)] or list(range(n))
        if self.policy == "session_affinity":
            kept = self._sessions.get(request.session_id)
            if kept is not None and kept in candidates:
                return kept
        if self.policy == "round_robin":
            choice = min(candidates, key=lambda i: (i - self._next) % n)
        else:  # least outstanding, ties in round-robin order
            choice = min(candidates, key=lambda i: (self.outstanding[i], (i - self._next) % n))
        self._next = (choice + 1) % n
        if self.policy == "session_affinity":
            self._sessions[request.session_id] = choice
        return choice

    async def stream(
        self, request: GenerationRequest, extra_body: Optional[dict[str, Any]] = None
    ) -> AsyncIterator[StreamEvent]:
        i = self.pick(request)
        self.outstanding[i] += 1
        self.sent[i] += 1
        try:
            async for event in self.clients[i].stream(request, extra_body):
                if type(event) is RequestDone:
                    event.engine_stats["endpoint"] = i
                yield event
        except Exception as exc:
            if refused(exc):
                self._refused_until[i] = time.monotonic() + REFUSED_RETRY_S
            why = None
            if self.exited is not None:
                if self.exited(i) is None:
                    await asyncio.sleep(0.05)  # a dying process closes its sockets before it is reaped
                why = self.exited(i)
            raise EndpointError(i, self.urls[i], exc, why) from exc
        finally:
            self.outstanding[i] -= 1
