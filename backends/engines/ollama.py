"""Ollama: ``ollama serve``, or the ollama/ollama image (``backend.container.image=ollama/ollama:<tag>``),
with the run's GGUF imported through a Modelfile once the server answers (``ollama create``)
and loaded before the first request. Server mode only, chat only. The settings below are the
Modelfile's parameters and the server's environment (null: Ollama's default).

    python -m harness backend=ollama backend.num_parallel=4 workload.concurrency=4

The import goes to Ollama's models folder (``models_dir``; null: ~/.ollama/models, where a
GGUF imported before is not copied again). In a container it lives in the container unless
``backend.container.run_args`` mounts one, e.g. ``[-v,/data/ollama:/root/.ollama]``.
Ollama's OpenAI layer cannot force an exact output length (no ignore_eos; logit_bias is
ignored).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from backends.registry import backend_registry
from backends.server.presets import ollama_preset
from backends.server.standalone import EngineServerBackend, EngineServerConfig
from core.errors import ConfigError

KV_CACHE_TYPES = ("f16", "q8_0", "q4_0")


@dataclass
class OllamaConfig(EngineServerConfig):
    name: str = "ollama"
    model_name: Optional[str] = None  # the name the GGUF is imported under; null: harness-<model>
    num_ctx: int = 4096  # context per sequence (Modelfile PARAMETER num_ctx)
    num_gpu: Optional[int] = None  # layers on the GPU (PARAMETER num_gpu)
    num_parallel: Optional[int] = None  # requests served at once (OLLAMA_NUM_PARALLEL); memory grows with num_ctx × it
    max_queue: Optional[int] = None  # requests queued before HTTP 503 (OLLAMA_MAX_QUEUE)
    flash_attention: Optional[bool] = None  # OLLAMA_FLASH_ATTENTION
    kv_cache_type: Optional[str] = None  # f16 | q8_0 | q4_0 (OLLAMA_KV_CACHE_TYPE)
    keep_alive: str = "-1"  # OLLAMA_KEEP_ALIVE: -1 keeps the model loaded for the whole run
    models_dir: Optional[str] = None  # OLLAMA_MODELS, on this machine
    env: dict[str, str] = field(default_factory=dict)  # any other OLLAMA_* variable

    def validate(self) -> None:
        super().validate()
        if self.endpoint != "chat":
            raise ConfigError(
                "backend=ollama serves chat only (backend.endpoint=chat): its /v1/completions "
                "wraps the prompt in the model's chat template a second time"
            )
        for key in ("num_ctx", "num_parallel", "max_queue"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise ConfigError(f"backend.{key} must be >= 1 (got {value})")
        if self.num_gpu is not None and self.num_gpu < 0:
            raise ConfigError(f"backend.num_gpu must be >= 0 or null (got {self.num_gpu})")
        if self.kv_cache_type is not None and self.kv_cache_type not in KV_CACHE_TYPES:
            raise ConfigError(
                f"backend.kv_cache_type must be one of {', '.join(KV_CACHE_TYPES)} or null (got {self.kv_cache_type!r})"
            )
        if self.models_dir is not None and self.container.image:
            raise ConfigError(
                "backend.models_dir is for Ollama on this machine; in a container, mount a folder "
                "instead: backend.container.run_args=[-v,<folder>:/root/.ollama/models]"
            )
        if self.model_name is not None and not self.model_name.strip():
            raise ConfigError("backend.model_name must be a name, or null for harness-<model>")

    def parameters(self) -> dict[str, Any]:
        """The Modelfile's PARAMETER lines."""
        params: dict[str, Any] = {"num_ctx": self.num_ctx}
        if self.num_gpu is not None:
            params["num_gpu"] = self.num_gpu
        return params

    def server_env(self) -> dict[str, str]:
        env = {"OLLAMA_KEEP_ALIVE": self.keep_alive}
        if self.num_parallel is not None:
            env["OLLAMA_NUM_PARALLEL"] = str(self.num_parallel)
        if self.max_queue is not None:
            env["OLLAMA_MAX_QUEUE"] = str(self.max_queue)
        if self.flash_attention is not None:
            env["OLLAMA_FLASH_ATTENTION"] = "1" if self.flash_attention else "0"
        if self.kv_cache_type is not None:
            env["OLLAMA_KV_CACHE_TYPE"] = self.kv_cache_type
        if self.models_dir is not None:
            env["OLLAMA_MODELS"] = self.models_dir
        return {**env, **{str(k): str(v) for k, v in self.env.items()}}


@backend_registry.register("ollama", OllamaConfig)
class OllamaBackend(EngineServerBackend):
    program = "ollama"
    image = "ollama/ollama"
    needs_gguf = True

    @classmethod
    def server_preset(cls, config: Any, model: Any):
        assert isinstance(config, OllamaConfig)
        return ollama_preset(
            config, model, model_name=config.model_name, parameters=config.parameters(), env=config.server_env()
        )
