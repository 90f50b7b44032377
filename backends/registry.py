"""Engines by name: ``backend=<name>`` picks the class an engine module registered with
``@backend_registry.register(name, ConfigClass)``; the modules of ``backends/engines/`` are
imported on first use, so adding an engine is one module and one config file."""

from __future__ import annotations

from backends.base import Backend
from core.registry import Registry

backend_registry: Registry[Backend] = Registry("backend", package="backends.engines", config_group="backend")
