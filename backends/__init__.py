"""Inference engines behind one interface; each module registers one backend by name."""
from typing import TYPE_CHECKING

from backends.base import (
    Backend,
    BackendConfig,
    GenerationRequest,
    RequestDone,
    SamplingParams,
    StreamEvent,
    TokenChunk,
)
from core.registry import Registry

if TYPE_CHECKING:
    from core.model import ModelFiles

backend_registry: Registry[Backend] = Registry("backend", package="backends.engines", config_group="backend")


def check_backend_available(config: BackendConfig) -> None:
    """Before any model loads: in-process, the engine is installed (BackendUnavailable names
    the pip extra); in server mode the engine may live in another interpreter, so only that
    interpreter (and a custom command's program, or the engine's own) must exist."""
    entry = backend_registry.get(config.name)
    if config.mode == "server":
        from backends.server.backend import check_server_config

        check_server_config(config)
        if not config.server_command:
            entry.cls.check_server(config)
    else:
        entry.cls.check_available()


def create_backend(config: BackendConfig, model: "ModelFiles") -> Backend:
    """The backend for ``config``: the engine in-process, or its own server
    (``backend.mode=server``: a ServerBackend from the engine's ``server_preset``)."""
    entry = backend_registry.get(config.name)
    if config.mode == "server":
        from backends.server.backend import ServerBackend

        return ServerBackend(config, model, entry.cls.server_preset(config, model))
    return entry.cls(config, model)

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
