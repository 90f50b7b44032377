"""SGLang in-process through ``sglang.Engine`` (RadixAttention: shared prefixes reused).

The harness's config becomes SGLang's own ``ServerArgs``: every field is checked against the
schema ServerArgs declares (field names, types, choices) before the engine starts, so a typo
or an impossible value fails in one line. The engine spawns its scheduler and detokenizer
processes; streamed chunks are stamped as they reach this process, and SGLang's per-request
meta information (prompt, completion and cached token counts, its own latencies) is stored
next to the harness's timings. SGLang needs a GPU build of its kernels: on a CPU-only machine
it cannot generate, but its arguments and HTTP dialect can still be checked.
"""

from __future__ import annotations

import itertools
import json
import typing
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Optional

from backends.base import Backend, BackendConfig, GenerationRequest, StreamEvent
from backends.registry import backend_registry
from backends.server.presets import sglang_preset
from core.environ import environment_kept
from core.errors import ConfigError
from core.structured import JSON_OBJECT, JSON_SCHEMA, decoding_constraint
from core.types import RequestDone, TokenChunk

CPU_ATTENTION_BACKENDS = ("torch_native", "intel_amx")


@dataclass
class SGLangConfig(BackendConfig):
    name: str = "sglang"
    tp_size: int = 1  # tensor parallel: GPUs the model is split over
    mem_fraction_static: Optional[float] = None  # null: SGLang picks from the GPU's memory
    attention_backend: Optional[str] = None  # SGLang's --attention-backend; null: SGLang picks
    dtype: str = "auto"  # the weights' and activations' dtype (SGLang's --dtype)
    context_length: Optional[int] = None  # the model's context in tokens; null: config.json's
    disable_radix_cache: bool = False  # true: no prefix cache (RadixAttention off)
    chunked_prefill_size: Optional[int] = None  # -1 disables chunked prefill
    device: Optional[str] = None  # null: SGLang detects it
    random_seed: int = 0  # SGLang's --random-seed
    log_level: str = "error"  # SGLang's --log-level
    # any other ServerArgs field, by name
    server_args: dict[str, Any] = field(default_factory=dict)  # type: ignore[assignment]  # a mapping, not the base's flags

    def server_flags(self) -> list[str]:
        """None: SGLang's preset already has ``server_args`` on its command, as flags."""
        return []

    def validate(self) -> None:
        super().validate()
        if self.tp_size < 1:
            raise ConfigError(f"backend.tp_size must be >= 1 (got {self.tp_size})")
        if self.mem_fraction_static is not None and not 0 < self.mem_fraction_static < 1:
            raise ConfigError(f"backend.mem_fraction_static must be in (0, 1) (got {self.mem_fraction_static})")
        if self.chunked_prefill_size is not None and (self.chunked_prefill_size == 0 or self.chunked_prefill_size < -1):
            raise ConfigError(
                f"backend.chunked_prefill_size must be > 0, or -1 to disable (got {self.chunked_prefill_size})"
            )
        if self.context_length is not None and self.context_length < 1:
            raise ConfigError(f"backend.context_length must be >= 1 (got {self.context_length})")
        if self.device == "cpu" and self.attention_backend not in (None, *CPU_ATTENTION_BACKENDS):
            raise ConfigError(
                f"backend.attention_backend={self.attention_backend} does not run on device=cpu: "
                f"use one of {', '.join(CPU_ATTENTION_BACKENDS)}"
            )

    def server_args_dict(self, model_path: str) -> dict[str, Any]:
        """The ServerArgs fields this config sets (the rest keep SGLang's defaults)."""
        args: dict[str, Any] = {
            "model_path": model_path,
            "tp_size": self.tp_size,
            "dtype": self.dtype,
            "disable_radix_cache": self.disable_radix_cache,
            "random_seed": self.random_seed,
            "log_level": self.log_level,
        }
        for key in ("mem_fraction_static", "attention_backend", "context_length", "chunked_prefill_size", "device"):
            if getattr(self, key) is not None:
                args[key] = getattr(self, key)
        args.update(self.server_args)
        return args


def build_server_args(config: SGLangConfig, model_path: str) -> Any:
    """SGLang's ServerArgs for this config, each field checked against ServerArgs' own schema. The
    import and the construction leave the harness's environment as it was (:mod:`core.environ`)."""
    with environment_kept():
        from sglang.srt.server_args import ServerArgs

        kwargs = config.server_args_dict(model_path)
        schema = server_args_schema(ServerArgs)
        for key, value in kwargs.items():
            if key not in schema:
                raise ConfigError(f"backend.server_args.{key}: ServerArgs has no field {key!r}")
            expected, choices = schema[key]
            if value is not None and expected is not None and not _is_instance(value, expected):
                raise ConfigError(f"ServerArgs.{key} must be {_type_name(expected)} (got {value!r})")
            if choices and value is not None and value not in choices:
                raise ConfigError(f"ServerArgs.{key}={value!r} is not one of {', '.join(map(str, choices))}")
        return ServerArgs(**kwargs)


def server_args_flags(config: SGLangConfig) -> list[str]:
    """The config's ServerArgs fields as launch_server flags (``tp_size`` → ``--tp-size 2``)."""
    flags: list[str] = []
    for key, value in config.server_args_dict("").items():
        if key == "model_path" or value is None:
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            flags += [flag] if value else []
        else:
            flags += [flag, str(value)]
    return flags


def server_args_schema(cls: Any) -> dict[str, tuple[Optional[tuple[type, ...]], Optional[list]]]:
    """field → (accepted Python types or None when not a simple type, declared choices) of ``cls``,
    SGLang's ServerArgs (a msgspec Struct; SGLang ships no types)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    schema = {}
    for name in cls.__struct_fields__:
        hint = hints.get(name)
        choices = None
        if typing.get_origin(hint) is typing.Annotated:
            base, *meta = typing.get_args(hint)
            for m in meta:
                choices = getattr(m, "choices", None) or choices
        else:
            base = hint
        schema[name] = (_simple_types(base), choices)
    return schema


def _simple_types(hint: Any) -> Optional[tuple[type, ...]]:
    if hint in (int, float, bool, str):
        return (int, float) if hint is float else (hint,)
    if typing.get_origin(hint) is typing.Union:
        types: list[type] = []
        for part in typing.get_args(hint):
            if part is type(None):
                continue
            simple = _simple_types(part)
            if simple is None:
                return None
            types += simple
        return tuple(types)
    return None


def _is_instance(value: Any, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool) and bool not in types:
        return False
    return isinstance(value, types)


def _type_name(types: tuple[type, ...]) -> str:
    return " or ".join(t.__name__ for t in types)


@backend_registry.register("sglang", SGLangConfig)
class SGLangBackend(Backend[SGLangConfig]):
    requires = ("sglang",)
    extra = "sglang"
    install_hint = " (a GPU machine; see the README for running it beside vLLM)"

    def __init__(self, config: SGLangConfig, model: Any):
        super().__init__(config, model)
        self._ids = itertools.count()

    @classmethod
    def server_preset(cls, config: SGLangConfig, model: Any):
        """``python -m sglang.launch_server`` with the same ServerArgs, as command-line flags."""
        return sglang_preset(config, model, extra_args=server_args_flags(config))

    def server_args(self) -> Any:
        return build_server_args(self.config, str(self.model.require_hf_dir()))

    def import_engine(self) -> None:
        import sglang  # noqa: F401 - imported to time the import, as part of the load

    def load(self) -> None:
        import sglang

        self._engine = sglang.Engine(server_args=self.server_args())
        eos = self.get_tokenizer().eos_token_id
        self._eos_ids = {eos} if eos is not None else set()

    @property
    def engine_name(self) -> str:
        return "sglang"

    @property
    def engine_version(self) -> str:
        import importlib.metadata

        return importlib.metadata.version("sglang")

    def engine_info(self) -> dict[str, Any]:
        return {
            "server_args": self.config.server_args_dict(str(self.model.hf_dir)),
            "radix_cache": not self.config.disable_radix_cache,
        }

    def memory(self) -> dict[str, Any]:
        params = self.model.parameter_count()
        bytes_per_value = 2 if self.config.dtype in ("auto", "bfloat16", "float16", "half") else 4
        return {"weights_bytes": params * bytes_per_value if params else None, "kv_bytes_per_value": bytes_per_value}

    async def stream(self, request: GenerationRequest) -> AsyncIterator[StreamEvent]:
        import time

        s = request.sampling
        sampling: dict[str, Any] = {
            "max_new_tokens": request.max_new_tokens,
            "min_new_tokens": request.max_new_tokens if request.exact_output_len else 0,
            "ignore_eos": request.exact_output_len,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "top_k": s.top_k if s.top_k > 0 else -1,
        }
        if s.seed is not None:
            sampling["sampling_seed"] = s.seed
        constraint = decoding_constraint(request.response_format, request.tools, request.tool_choice)
        if constraint is not None:  # SGLang's own grammar backend: a JSON schema (as text) or a regex
            kind, value = constraint
            if kind in (JSON_SCHEMA, JSON_OBJECT):  # JSON mode: the schema of any object
                sampling["json_schema"] = json.dumps(value)
            else:
                sampling["regex"] = value
        chunks = await self._engine.async_generate(
            input_ids=request.prompt_token_ids, sampling_params=sampling, stream=True, rid=f"harness-{next(self._ids)}"
        )
        seen = 0
        meta: dict[str, Any] = {}
        async for chunk in chunks:
            t = time.perf_counter()
            ids = list(chunk.get("output_ids") or [])  # cumulative in SGLang's default streaming
            meta = chunk.get("meta_info", meta)
            finish = meta.get("finish_reason") or {}
            if finish.get("type") == "stop" and ids and ids[-1] in self._eos_ids:
                ids = ids[:-1]  # the end-of-sequence token is not output
            if len(ids) > seen:
                yield TokenChunk(ids[seen:], t)
                seen = len(ids)
        reason = ((meta.get("finish_reason") or {}).get("type")) or "length"
        if reason == "abort":
            raise RuntimeError(f"SGLang aborted the request: {(meta.get('finish_reason') or {}).get('message', '')}")
        yield RequestDone(reason, engine_stats=sglang_stats(meta))

    async def reset_prefix_cache(self) -> bool:
        """RadixAttention's tree emptied (``Engine.flush_cache``); between points, nothing in flight."""
        if not hasattr(self, "_engine"):
            return False
        # Engine.flush_cache runs its own loop; the coroutine under it runs on ours
        result = await self._engine.tokenizer_manager.flush_cache()
        return bool(getattr(result, "success", True))

    def close(self) -> None:
        engine = getattr(self, "_engine", None)
        if engine is not None:
            engine.shutdown()
            del self._engine


def sglang_stats(meta: dict[str, Any]) -> dict[str, Any]:
    """SGLang's meta_info as engine_stats: its token counts (cached_tokens too) and latencies."""
    stats = {f"sglang_{k}": v for k, v in meta.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    if "cached_tokens" in meta:
        stats["cached_tokens"] = meta["cached_tokens"]
    if "prompt_tokens" in meta:
        stats["prompt_tokens"] = meta["prompt_tokens"]
    return stats
