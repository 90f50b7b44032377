"""Inference engines behind one interface.

- :mod:`backends.base` — the Backend interface and the types that cross it;
- :mod:`backends.registry` — engines by name (``backend=…``), one module each in ``backends/engines/``;
- :mod:`backends.factory` — the backend for a config: the engine in-process, or its own server.
"""

from backends.base import Backend, BackendConfig, GenerationRequest, StreamEvent
from backends.factory import check_backend_available, create_backend
from backends.registry import backend_registry
from core.types import RequestDone, SamplingParams, TokenChunk

__all__ = [
    "Backend",
    "BackendConfig",
    "GenerationRequest",
    "RequestDone",
    "SamplingParams",
    "StreamEvent",
    "TokenChunk",
    "backend_registry",
    "check_backend_available",
    "create_backend",
]
