"""What the engines the harness runs only as a server share (TGI, TensorRT-LLM, DeepSpeed-MII,
Ollama): ``backend.mode=server`` is their only mode, and their server runs either as the
engine's program on this machine or in its container (``backend.container``, see
``backends/server/container.py``). Each engine module subclasses these two and registers itself.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from typing import Any, ClassVar

from backends.base import Backend, BackendConfig
from backends.server.container import ContainerConfig
from core.errors import ConfigError


@dataclass
class EngineServerConfig(BackendConfig):
    mode: str = "server"  # the only mode
    container: ContainerConfig = field(default_factory=ContainerConfig)

    def validate(self) -> None:
        if self.mode != "server":
            raise ConfigError(f"backend={self.name} runs as a server only (backend.mode=server)")
        super().validate()
        self.container.validate()


class EngineServerBackend(Backend):
    """Server mode only: :func:`backends.create_backend` builds a ServerBackend from the preset."""

    program: ClassVar[str] = ""  # the server's program on PATH ("" when it runs in backend.python)
    image: ClassVar[str] = ""  # the engine's image, named in hints ("" when it ships none)

    @classmethod
    def server_program(cls, config: Any) -> str:
        """The program that launches the server on this machine."""
        return cls.program

    @classmethod
    def check_server(cls, config: BackendConfig) -> None:
        assert isinstance(config, EngineServerConfig)
        if config.container.image:
            if shutil.which(config.container.program) is None:
                raise ConfigError(
                    f"backend.container.image is set, but {config.container.program} is not on PATH "
                    "(install docker, or set backend.container.program)"
                )
            return
        program = cls.server_program(config)
        if program and shutil.which(program) is None:
            hint = f", or run its image: backend.container.image={cls.image}:<tag>" if cls.image else ""
            raise ConfigError(f"backend={config.name}: {program} is not on PATH (install the engine{hint})")

    def __init__(self, config: BackendConfig, model: Any):
        raise ConfigError(f"backend={config.name} runs as a server only (backend.mode=server)")

    def load(self) -> None:  # pragma: no cover - never instantiated
        raise NotImplementedError

    @property
    def engine_name(self) -> str:  # pragma: no cover
        return self.registry_name

    @property
    def engine_version(self) -> str:  # pragma: no cover
        return "unknown"

    def stream(self, request):  # pragma: no cover
        raise NotImplementedError
