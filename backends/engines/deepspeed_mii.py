"""DeepSpeed-MII: its OpenAI-compatible server, ``python -m mii.entrypoints.openai_api_server``
(it starts MII's gRPC deployment of the HF folder, then serves HTTP), in ``backend.python``
(pip install deepspeed-mii there). Server mode only. MII ships no image; an image of your own
that has MII runs with ``backend.container.image=…``.

    python -m harness backend=deepspeed_mii backend.python=/opt/venvs/mii

One MII server per machine at a time: its gRPC load balancer takes port 50050.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from backends.registry import backend_registry
from backends.server.presets import deepspeed_mii_preset
from backends.server.standalone import EngineServerBackend, EngineServerConfig
from core.errors import ConfigError


@dataclass
class DeepSpeedMIIConfig(EngineServerConfig):
    name: str = "deepspeed_mii"
    startup_timeout_s: float = 900.0  # the deployment loads (and may compile kernels) before HTTP starts
    tensor_parallel: int = 1  # GPUs the model is split over
    replica_num: int = 1  # model replicas behind MII's load balancer
    max_length: Optional[int] = None  # prompt + output, per request; null: MII's default

    def validate(self) -> None:
        super().validate()
        for key in ("tensor_parallel", "replica_num", "max_length"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise ConfigError(f"backend.{key} must be >= 1 (got {value})")

    def mii_args(self) -> list[str]:
        args = ["--tensor-parallel", str(self.tensor_parallel), "--replica-num", str(self.replica_num)]
        if self.max_length is not None:
            args += ["--max-length", str(self.max_length)]
        return args


@backend_registry.register("deepspeed_mii", DeepSpeedMIIConfig)
class DeepSpeedMIIBackend(EngineServerBackend):
    program = ""  # a module of backend.python
    requires = ("mii",)  # in that interpreter

    @classmethod
    def server_preset(cls, config: Any, model: Any):
        assert isinstance(config, DeepSpeedMIIConfig)
        return deepspeed_mii_preset(config, model, extra_args=config.mii_args())
