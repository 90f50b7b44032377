"""Inference engines behind one interface; each module registers one backend by name."""
from backends.base import (
    Backend,
    BackendConfig,
    GenerationRequest,
    RequestDone,
    SamplingParams,
    StreamEvent,
    TokenChunk,
)
from harness.registry import Registry

backend_registry: Registry[Backend] = Registry("backend", package="backends", config_group="backend")

__all__ = [
    "Backend",
    "BackendConfig",
    "GenerationRequest",
    "RequestDone",
    "SamplingParams",
    "StreamEvent",
    "TokenChunk",
    "backend_registry",
]
