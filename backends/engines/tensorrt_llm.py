"""NVIDIA TensorRT-LLM: ``trtllm-serve`` on the HF folder (the PyTorch backend by default), or
the release image (``backend.container.image=nvcr.io/nvidia/tensorrt-llm/release:<tag>``).
Server mode only; the settings below are trtllm-serve's flags (null: its default), and
``llm_api_options`` holds any other LLM API argument (kv_cache_config, cuda_graph_config, …).

    python -m harness backend=tensorrt_llm backend.container.image=nvcr.io/nvidia/tensorrt-llm/release:1.2.0

With ``backend.python`` set, the ``trtllm-serve`` next to that interpreter is run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from backends.registry import backend_registry
from backends.server.launch import resolve_python
from backends.server.presets import tensorrt_llm_preset
from backends.server.standalone import EngineServerBackend, EngineServerConfig
from core.errors import ConfigError

BACKENDS = ("pytorch", "tensorrt", "_autodeploy")
LOG_LEVELS = ("internal_error", "error", "warning", "info", "verbose")  # tensorrt_llm/logger.py severity_map


@dataclass
class TensorRTLLMConfig(EngineServerConfig):
    name: str = "tensorrt_llm"
    startup_timeout_s: float = 900.0  # loading, and warming up or building engines, before /health answers
    backend: str = "pytorch"  # pytorch | tensorrt (a prebuilt engine folder) | _autodeploy
    dtype: str = "auto"  # the LLM API's dtype (through llm_api_options)
    tp_size: int = 1  # tensor parallel: GPUs the model is split over
    pp_size: int = 1  # pipeline parallel: stages the layers are split over
    max_batch_size: Optional[int] = None  # requests batched at once; null: trtllm-serve's default
    max_num_tokens: Optional[int] = None  # batched tokens per iteration
    max_seq_len: Optional[int] = None  # prompt + output, per request; null: from the model's config
    kv_cache_free_gpu_memory_fraction: Optional[float] = None  # its default 0.9
    trust_remote_code: bool = False  # run the model's own code from its folder
    log_level: str = "warning"  # trtllm-serve's --log_level
    llm_api_options: dict[str, Any] = field(default_factory=dict)  # --extra_llm_api_options (a YAML file)

    def validate(self) -> None:
        super().validate()
        if self.backend not in BACKENDS:
            raise ConfigError(f"backend.backend must be one of {', '.join(BACKENDS)} (got {self.backend!r})")
        if self.log_level not in LOG_LEVELS:
            raise ConfigError(f"backend.log_level must be one of {', '.join(LOG_LEVELS)} (got {self.log_level!r})")
        for key in ("tp_size", "pp_size", "max_batch_size", "max_num_tokens", "max_seq_len"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise ConfigError(f"backend.{key} must be >= 1 (got {value})")
        fraction = self.kv_cache_free_gpu_memory_fraction
        if fraction is not None and not 0 < fraction <= 1:
            raise ConfigError(f"backend.kv_cache_free_gpu_memory_fraction must be in (0, 1] (got {fraction})")

    def serve_args(self) -> list[str]:
        args = [
            "--backend",
            self.backend,
            "--tp_size",
            str(self.tp_size),
            "--pp_size",
            str(self.pp_size),
            "--log_level",
            self.log_level,
        ]
        for key in ("max_batch_size", "max_num_tokens", "max_seq_len", "kv_cache_free_gpu_memory_fraction"):
            value = getattr(self, key)
            if value is not None:
                args += ["--" + key, str(value)]
        if self.trust_remote_code:
            args.append("--trust_remote_code")
        return args

    def api_options(self) -> dict[str, Any]:
        options = dict(self.llm_api_options)
        if self.dtype != "auto":
            options.setdefault("dtype", self.dtype)
        return options


@backend_registry.register("tensorrt_llm", TensorRTLLMConfig)
class TensorRTLLMBackend(EngineServerBackend):
    program = "trtllm-serve"
    image = "nvcr.io/nvidia/tensorrt-llm/release"

    @classmethod
    def server_program(cls, config: Any) -> str:
        """``trtllm-serve`` next to ``backend.python`` when that is set (a virtual environment's
        bin folder), else the one on PATH."""
        if config.python:
            beside = Path(resolve_python(config.python)).parent / cls.program
            if beside.is_file():
                return str(beside)
        return cls.program

    @classmethod
    def server_preset(cls, config: Any, model: Any):
        assert isinstance(config, TensorRTLLMConfig)
        return tensorrt_llm_preset(
            config,
            model,
            extra_args=config.serve_args(),
            llm_api_options=config.api_options(),
            program=cls.server_program(config),
        )
