"""Hugging Face Text Generation Inference: ``text-generation-launcher`` on the HF folder, or
its image (``backend.container.image=ghcr.io/huggingface/text-generation-inference:<tag>``).
Server mode only; the settings below are the launcher's flags (null: TGI's default).

    python -m harness backend=tgi backend.container.image=ghcr.io/huggingface/text-generation-inference:3.3.6

TGI's OpenAI layer cannot force an exact output length (no ignore_eos; logit_bias is unused).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from backends.registry import backend_registry
from backends.server.presets import tgi_preset
from backends.server.standalone import EngineServerBackend, EngineServerConfig
from core.errors import ConfigError

DTYPES = ("float16", "bfloat16")
USAGE_STATS = ("on", "off", "no-stack")


@dataclass
class TGIConfig(EngineServerConfig):
    name: str = "tgi"
    startup_timeout_s: float = 600.0  # weights load and CUDA graphs are captured before /health answers
    dtype: Optional[str] = None  # float16 | bfloat16
    num_shard: Optional[int] = None  # tensor parallel: GPUs the model is split over
    quantize: Optional[str] = None  # awq, gptq, fp8, bitsandbytes, … (TGI's --quantize)
    max_input_tokens: Optional[int] = None  # longest prompt, in tokens (below max_total_tokens)
    max_total_tokens: Optional[int] = None  # prompt + output, per request
    max_batch_prefill_tokens: Optional[int] = None  # prompt tokens prefilled in one batch
    max_batch_total_tokens: Optional[int] = None  # tokens (prompt + output) of all requests in a batch
    max_batch_size: Optional[int] = None  # requests in one batch; null: TGI's default
    max_concurrent_requests: Optional[int] = None  # TGI refuses requests beyond it (HTTP 429); its default 128
    cuda_graphs: Optional[list[int]] = None  # batch sizes to capture; [0] disables
    trust_remote_code: bool = False  # run the model's own code from its folder
    usage_stats: str = "off"  # TGI's anonymous telemetry: on | off | no-stack

    def validate(self) -> None:
        super().validate()
        if self.dtype is not None and self.dtype not in DTYPES:
            raise ConfigError(f"backend.dtype must be one of {', '.join(DTYPES)} or null (got {self.dtype!r})")
        if self.usage_stats not in USAGE_STATS:
            raise ConfigError(f"backend.usage_stats must be one of {', '.join(USAGE_STATS)} (got {self.usage_stats!r})")
        for key in (
            "num_shard",
            "max_input_tokens",
            "max_total_tokens",
            "max_batch_prefill_tokens",
            "max_batch_total_tokens",
            "max_batch_size",
            "max_concurrent_requests",
        ):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise ConfigError(f"backend.{key} must be >= 1 or null (got {value})")
        if (
            self.max_input_tokens is not None
            and self.max_total_tokens is not None
            and self.max_input_tokens >= self.max_total_tokens
        ):
            raise ConfigError(
                f"backend.max_input_tokens ({self.max_input_tokens}) must be below "
                f"backend.max_total_tokens ({self.max_total_tokens})"
            )

    def launcher_args(self) -> list[str]:
        """The settings as launcher flags (``max_total_tokens`` → ``--max-total-tokens 4096``)."""
        args = ["--usage-stats", self.usage_stats]
        for key in (
            "dtype",
            "num_shard",
            "quantize",
            "max_input_tokens",
            "max_total_tokens",
            "max_batch_prefill_tokens",
            "max_batch_total_tokens",
            "max_batch_size",
            "max_concurrent_requests",
        ):
            value = getattr(self, key)
            if value is not None:
                args += ["--" + key.replace("_", "-"), str(value)]
        if self.cuda_graphs is not None:
            args += ["--cuda-graphs", ",".join(str(n) for n in self.cuda_graphs)]
        if self.trust_remote_code:
            args.append("--trust-remote-code")
        return args


@backend_registry.register("tgi", TGIConfig)
class TGIBackend(EngineServerBackend):
    program = "text-generation-launcher"
    image = "ghcr.io/huggingface/text-generation-inference"

    @classmethod
    def server_preset(cls, config: Any, model: Any):
        assert isinstance(config, TGIConfig)
        return tgi_preset(config, model, extra_args=config.launcher_args())
