"""A backend that streams from an OpenAI-compatible server through the streaming client."""

from __future__ import annotations

import copy
import os
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

from backends.base import Backend, ConfigT, RequestStream
from backends.http.client import OpenAIClient
from backends.http.exposition import merge
from backends.http.probe import http_get_text
from backends.http.router import Router
from backends.http.urls import public_url
from core.errors import HarnessError
from core.types import GenerationRequest, StreamEvent


class HTTPBackend(Backend[ConfigT]):
    """A backend that streams from an OpenAI-compatible server through :class:`OpenAIClient`."""

    extra = ""
    client: Optional[OpenAIClient | Router] = None  # a Router over several endpoints (backend.urls, replicas)
    metrics_url: Optional[str] = None  # the first endpoint's /metrics
    metrics_urls: Sequence[str] = ()  # every endpoint's, where a run has several (scraped together)
    _tokenizer: Any = None

    def get_tokenizer(self) -> Any:
        if self._tokenizer is None:
            self._tokenizer = super().get_tokenizer()
        return self._tokenizer

    def api_key(self) -> Optional[str]:
        env = self.config.api_key_env
        return os.environ.get(env) if env else None

    def extra_body(self, request: GenerationRequest) -> dict[str, Any]:
        return {}

    def stream(self, request: GenerationRequest) -> AsyncIterator[StreamEvent]:
        """The client's own stream, handed on as it is (one async generator less per chunk)."""
        if self.client is None:
            raise RuntimeError("the backend is not loaded")
        return self.client.stream(request, self.extra_body(request))

    def worker_client(self) -> Optional[RequestStream]:
        """The HTTP client alone (a copy), with this backend's request extras: a forked worker
        streams through it and never polls the server process, which is not its child (it would
        take it for dead). The copy opens its own connection pool on the worker's loop; the
        pool it was copied with stays referenced by this backend's client, so the fork never
        collects it (its clean-up would act on the driver's loop)."""
        if self.client is None:
            return None
        return ClientStream(copy.copy(self.client), self.extra_body)

    def request_extras(self) -> Optional[Callable[[GenerationRequest], dict[str, Any]]]:
        """:meth:`extra_body` as an object that pickles on its own (a client on another host
        adds the same extras); None where a subclass's extras need the backend itself."""
        return no_extras if type(self).extra_body is HTTPBackend.extra_body else None

    def remote_client(self) -> Optional[RequestStream]:
        """The HTTP client alone (a copy: its connection pool, bound to this process's loop, is
        left behind) with this backend's extras as an object of their own: what Ray sends to
        the client hosts (``client.cluster=ray``)."""
        extras = self.request_extras()
        if self.client is None or extras is None:
            return None
        return ClientStream(copy.copy(self.client), extras)

    def engine_process(self) -> Optional[int]:
        return None  # a server elsewhere (backend=openai); ServerBackend knows the one it launched

    def scrape_metrics(self, deadline_s: float = 10.0) -> Optional[str]:
        """One endpoint's /metrics; several endpoints' all at once, merged with an ``endpoint``
        label on every sample (backends/http/exposition.py). An endpoint that fails is left out of
        that scrape; all failing raises the first one's error."""
        urls = list(self.metrics_urls) if len(self.metrics_urls) > 1 else [self.metrics_url] if self.metrics_url else []
        if len(urls) <= 1:
            return scrape_one(urls[0], deadline_s) if urls else None
        with ThreadPoolExecutor(len(urls), thread_name_prefix="scrape") as pool:
            futures = [pool.submit(scrape_one, url, deadline_s) for url in urls]
        texts: list[Optional[str]] = []
        errors: list[BaseException] = []
        for future in futures:
            try:
                texts.append(future.result())
            except (OSError, TimeoutError, HarnessError) as exc:
                texts.append(None)
                errors.append(exc)
        if len(errors) == len(urls):
            raise errors[0]
        return merge(texts)


def scrape_one(url: str, deadline_s: float) -> str:
    """The text of one /metrics, or HarnessError naming the URL and its HTTP status."""
    status, body = http_get_text(url, deadline_s)
    if status != 200:
        raise HarnessError(f"{public_url(url)} answered HTTP {status}")
    return body


def no_extras(request: GenerationRequest) -> dict[str, Any]:
    """No per-request extras (a module-level function: it pickles by name)."""
    return {}


class ClientStream:
    """An OpenAI-compatible server's stream through one client, with a backend's per-request extras."""

    def __init__(self, client: OpenAIClient | Router, extra_body: Callable[[GenerationRequest], dict[str, Any]]):
        self.client = client
        self.extra_body = extra_body

    def stream(self, request: GenerationRequest) -> AsyncIterator[StreamEvent]:
        return self.client.stream(request, self.extra_body(request))

    def urls(self) -> list[str]:
        """The API roots its requests go to (a client on another host checks it can reach them)."""
        client = self.client
        return [c.base_url for c in client.clients] if isinstance(client, Router) else [client.base_url]
