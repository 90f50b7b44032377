"""``backend=openai``: any running OpenAI-compatible server (nothing is launched or stopped).

    python -m harness backend=openai backend.url=http://127.0.0.1:8000/v1 backend.api_key_env=MY_KEY

A wrong API key or an unreachable URL fails at load, in one line. The key itself is only ever
held in memory, and only sent to the configured origin.

Several servers (replicas with no router in front): ``backend.urls=[http://a:8000/v1,http://b:8000/v1]``
with ``backend.routing=round_robin|least_outstanding|session_affinity`` (backends/http/router.py).
Each must answer at load; during the run a server that fails fails its own requests only. The
model name is the first server's; ``metrics_url`` (a path) is scraped on every server, each sample
labelled with its endpoint (a full URL: that one alone).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional
from urllib.parse import urlsplit, urlunsplit

from backends.base import BackendConfig
from backends.http.backend import HTTPBackend
from backends.http.client import OpenAIClient, client_limits
from backends.http.probe import check_server
from backends.http.router import Router
from backends.http.urls import public_url, refuse_credentials_in_url
from backends.preset import StructuredDialect
from backends.registry import backend_registry
from core.errors import ConfigError
from core.types import GenerationRequest


@dataclass
class OpenAIConfig(BackendConfig):
    name: str = "openai"
    mode: str = "remote"  # a server that is already running; nothing is launched
    url: Optional[str] = None  # the API root, e.g. http://127.0.0.1:8000/v1 (this or urls required)
    urls: Optional[list[str]] = None  # several API roots, requests routed over them (backend.routing)
    model_name: Optional[str] = None  # the "model" sent; null: the first id of GET /v1/models
    metrics_url: Optional[str] = None  # Prometheus endpoint to scrape: a URL, or a path such as /metrics
    ignore_eos: bool = False  # send ignore_eos + min_tokens for exact lengths (vLLM, SGLang take them)
    extra_body: Optional[str] = None  # a JSON object merged into every request body, e.g. '{"top_k": 20}'

    def validate(self) -> None:
        if self.mode != "remote":
            raise ConfigError(
                "backend=openai talks to a server that is already running (backend.mode=remote); "
                "to launch an engine's server use backend=<engine> backend.mode=server"
            )
        if self.replicas != 1:
            raise ConfigError(
                "backend.replicas launches servers (backend=<engine> backend.mode=server); "
                "backend=openai routes over servers that already run: give backend.urls"
            )
        if self.urls is not None and self.url:
            raise ConfigError("give backend.url or backend.urls, not both")
        if self.urls is not None and not self.urls:
            raise ConfigError("backend.urls must list at least one API root")
        if not self.url and not self.urls:
            raise ConfigError("backend=openai needs backend.url, the API root (e.g. http://127.0.0.1:8000/v1)")
        for i, url in enumerate(self.api_roots()):
            name = "backend.url" if self.url else f"backend.urls[{i}]"
            if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).hostname:
                raise ConfigError(f"{name} must be an http:// or https:// URL (got {public_url(str(url))!r})")
            try:
                port = urlsplit(url).port
            except ValueError:  # not a number, or past 65535
                port = 0
            if port == 0:
                raise ConfigError(
                    f"{name} has a bad port (got {public_url(url)!r}): a port is a number from 1 to 65535"
                )
            refuse_credentials_in_url(name, url)
        refuse_credentials_in_url("backend.metrics_url", self.metrics_url)
        self.extra_body_dict()
        self.validate_http()

    def api_roots(self) -> list[str]:
        """The API roots requests go to: ``url``, or ``urls``."""
        return [self.url] if self.url else list(self.urls or [])

    def extra_body_dict(self) -> dict[str, Any]:
        if not self.extra_body:
            return {}
        try:
            body = json.loads(self.extra_body)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise ConfigError(f"backend.extra_body must be a JSON object (got {self.extra_body!r})")
        return body


@dataclass(frozen=True)
class OpenAIExtras:
    """Each request's extra body fields: its reply constraint, ``backend.extra_body``, and
    ``ignore_eos`` with ``min_tokens`` for an exact length (``backend.ignore_eos``). An object of
    its own, so a client on another host gets it pickled (``client.cluster=ray``)."""

    structured: StructuredDialect
    extra: dict[str, Any]
    ignore_eos: bool

    def __call__(self, request: GenerationRequest) -> dict[str, Any]:
        body = self.structured.body(request)
        body.update(self.extra)
        if self.ignore_eos and request.exact_output_len:
            body.update(ignore_eos=True, min_tokens=request.max_new_tokens)
        return body


@backend_registry.register("openai", OpenAIConfig)
class OpenAIBackend(HTTPBackend[OpenAIConfig]):
    """Any OpenAI-compatible server that is already running (nothing is launched or stopped)."""

    _server_header = ""

    def load(self) -> None:
        cfg = self.config
        roots = [url.rstrip("/") for url in cfg.api_roots()]
        base = roots[0]
        key = self.api_key()
        ids, self._server_header = check_server(base, key, cfg.api_key_env)
        for other in roots[1:]:
            check_server(other, key, cfg.api_key_env)
        model_name = cfg.model_name or (ids[0] if ids else self.model.name)
        clients = [
            OpenAIClient(
                root,
                model_name=model_name,
                tokenizer=self.get_tokenizer(),
                endpoint=cfg.endpoint,
                api_key=key,
                timeout_s=cfg.request_timeout_s,
                **client_limits(cfg),
            )
            for root in roots
        ]
        self.client = clients[0] if len(clients) == 1 else Router(clients, cfg.routing)
        if cfg.metrics_url:
            root = urlsplit(base)
            self.metrics_url = (
                cfg.metrics_url
                if "://" in cfg.metrics_url
                else urlunsplit((root.scheme, root.netloc, cfg.metrics_url, "", ""))
            )
            if "://" not in cfg.metrics_url:  # a path: on every endpoint, each sample labelled with its own
                self.metrics_urls = [urlunsplit((*urlsplit(r)[:2], cfg.metrics_url, "", "")) for r in roots]

    # structured output: OpenAI's response_format and tools; a regex as vLLM takes it
    # (``structured_outputs``), the likeliest server behind an OpenAI-compatible URL
    structured = StructuredDialect(regex_field="structured_outputs")

    def request_extras(self) -> OpenAIExtras:
        return OpenAIExtras(self.structured, self.config.extra_body_dict(), self.config.ignore_eos)

    def extra_body(self, request: GenerationRequest) -> dict[str, Any]:
        return self.request_extras()(request)

    @property
    def engine_name(self) -> str:
        return "openai-compatible server"

    @property
    def engine_version(self) -> str:
        return self._server_header or "unknown"

    def engine_info(self) -> dict[str, Any]:
        cfg = self.config
        return {
            "url": public_url(cfg.api_roots()[0] if cfg.api_roots() else ""),
            **(
                {"endpoints": [public_url(u) for u in cfg.api_roots()], "routing": cfg.routing}
                if len(cfg.api_roots()) > 1
                else {}
            ),
            "model_name": self.client.model_name if self.client else cfg.model_name,
            "endpoint": cfg.endpoint,
            "api_key_env": cfg.api_key_env,  # the variable's name, never its value
            "metrics_url": public_url(self.metrics_url) if self.metrics_url else None,
        }
