"""A backend that streams from an OpenAI-compatible server through the streaming client."""
from __future__ import annotations

import os
from typing import Any, AsyncIterator, Optional

from backends.base import Backend
from backends.http.client import OpenAIClient
from backends.http.probe import http_get
from backends.http.urls import public_url
from core.errors import HarnessError
from core.types import GenerationRequest, StreamEvent


class HTTPBackend(Backend):
    """A backend that streams from an OpenAI-compatible server through :class:`OpenAIClient`."""

    extra = ""
    client: Optional[OpenAIClient] = None
    metrics_url: Optional[str] = None
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

    def engine_process(self) -> Optional[int]:
        return None  # a server elsewhere (backend=openai); ServerBackend knows the one it launched

    def scrape_metrics(self) -> Optional[str]:
        if not self.metrics_url:
            return None
        status, body, _ = http_get(self.metrics_url, timeout_s=10.0)
        if status != 200:
            raise HarnessError(f"{public_url(self.metrics_url)} answered HTTP {status}")
        return body
