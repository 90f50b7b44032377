"""Registries by name: backends, workloads and arrival processes register themselves here.

A registry maps a name to a class and its config dataclass. Registering also stores the
config dataclass in Hydra's ConfigStore as ``<group>/<name>_schema``, so the YAML file
``conf/<group>/<name>.yaml`` can extend it. Modules of a registry's package are imported by
:meth:`Registry.discover`, so adding an entry is one module and one config file.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from core.errors import ConfigError


class Registered(Protocol):
    """What a registry holds: a class that registering names."""

    registry_name: str


T = TypeVar("T", bound=Registered)


@dataclass(frozen=True)
class Entry(Generic[T]):
    name: str
    cls: type[T]
    config_cls: type | None


class Registry(Generic[T]):
    def __init__(self, kind: str, package: str | None = None, config_group: str | None = None):
        self.kind = kind
        self.package = package
        self.config_group = config_group
        self._entries: dict[str, Entry[T]] = {}
        self._discovered = False

    def register(self, name: str, config_cls: type | None = None) -> Callable[[type[T]], type[T]]:
        def decorator(cls: type[T]) -> type[T]:
            self._entries[name] = Entry(name, cls, config_cls)
            cls.registry_name = name
            if config_cls is not None and self.config_group is not None:
                from hydra.core.config_store import ConfigStore

                ConfigStore.instance().store(group=self.config_group, name=f"{name}_schema", node=config_cls)
            return cls

        return decorator

    def discover(self) -> None:
        """Import every module of the registry's package (each registers itself)."""
        if self._discovered or self.package is None:
            return
        pkg = importlib.import_module(self.package)
        for info in pkgutil.iter_modules(pkg.__path__):
            if not info.name.startswith("_"):
                importlib.import_module(f"{self.package}.{info.name}")
        self._discovered = True

    def names(self) -> list[str]:
        self.discover()
        return sorted(self._entries)

    def get(self, name: str) -> Entry[T]:
        self.discover()
        try:
            return self._entries[name]
        except KeyError:
            raise ConfigError(f"unknown {self.kind} '{name}': choose one of {', '.join(self.names())}") from None

    def create(self, name: str, *args: Any, **kwargs: Any) -> T:
        return self.get(name).cls(*args, **kwargs)
