"""The backend for a config: the engine in-process, or its own server (``backend.mode=server``)."""

from __future__ import annotations

from backends.base import Backend, BackendConfig
from backends.registry import backend_registry
from backends.server.backend import ServerBackend
from backends.server.launch import check_server_config
from core.model import ModelFiles


def check_backend_available(config: BackendConfig) -> None:
    """Before any model loads: in-process, the engine is installed (BackendUnavailable names
    the pip extra); in server mode the engine may live in another interpreter, so only that
    interpreter (and a custom command's program, or the engine's own) must exist."""
    entry = backend_registry.get(config.name)
    if config.mode == "server":
        check_server_config(config)
        if not config.server_command:
            entry.cls.check_server(config)
    else:
        entry.cls.check_available()


def create_backend(config: BackendConfig, model: ModelFiles) -> Backend:
    """The backend for ``config``: the engine in-process, or its own server
    (``backend.mode=server``: a ServerBackend from the engine's ``server_preset``)."""
    entry = backend_registry.get(config.name)
    if config.mode == "server":
        return ServerBackend(config, model, entry.cls.server_preset(config, model))
    return entry.cls(config, model)
