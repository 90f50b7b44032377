"""``backend=reference``: the harness's own reference server (``refserver/app.py``),
launched in server mode like any engine's server.

It emits tokens on a known schedule (``ttft_ms``, ``itl_ms``, optional jitter and errors),
so the whole server-mode path — launch, health check, streaming client, Prometheus scrape,
stop — runs for real in seconds, and the client's timing can be checked against the
schedule:

    python -m harness backend=reference workload=synthetic backend.itl_ms=5 backend.dialect=mlx
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from backends.base import Backend, BackendConfig, GenerationRequest
from backends.preset import ServerPreset, StructuredDialect
from backends.registry import backend_registry
from core.errors import ConfigError
from core.model import ModelFiles
from refserver.dialects import DIALECTS
from refserver.faults import FAULTS


@dataclass
class ReferenceConfig(BackendConfig):
    name: str = "reference"
    mode: str = "server"  # its only mode
    ttft_ms: float = 50.0  # first token at arrival + ttft
    itl_ms: float = 10.0  # token k at arrival + ttft + k · itl
    tokens: int = 1024  # natural reply length (max_tokens caps it; exact lengths ignore it)
    jitter_ms: float = 0.0  # each due time moves by U(−jitter, +jitter)
    error_rate: float = 0.0  # fraction of requests that fail
    error_kind: str = "status"  # how a failing request misbehaves: one of refserver.app.FAULTS
    fault_size_mib: float = 32.0  # the size of a huge-event or huge-error-body fault
    chunk_tokens: int = 1  # tokens per streamed chunk
    dialect: str = "openai"  # openai (vLLM-like) | sglang | mlx | llamacpp | llama-server | tgi | tensorrt_llm | deepspeed_mii | ollama
    metrics: bool = True  # serve /metrics, scraped around the measured phase
    exit_after: Optional[int] = None  # the server exits when request exit_after + 1 arrives
    count_prompt_tokens: bool = True  # load the model's tokenizer to report exact usage.prompt_tokens
    seed: int = 0  # the server's seed: its jitter, faults and replies
    run_noise_cv: float = 0.0  # run-to-run noise: ttft and itl scaled by exp(N(0, cv)) once per server start
    max_running: int = 0  # requests served at once; more wait (the waiting gauge of /metrics); 0: no limit
    batch_itl_ms: float = 0.0  # a request's ITL grows by this for each request running when it starts
    kv_capacity_tokens: int = 16384  # /metrics KV use = reply tokens reserved by the running requests / this
    metrics_drip_s: float = 0.0  # fault: /metrics written one byte every this many seconds (0: at once)
    spec_draft_tokens: int = 0  # /metrics speculative-decoding counters: K draft tokens per chunk (0: none)
    spec_acceptance: float = 0.0  # the share of draft tokens accepted
    reasoning_tokens: int = 0  # the first N tokens of a chat reply are reasoning (the dialect's reasoning delta)
    per_request_metrics: bool = False  # vLLM's per-request metrics object on the usage chunk (openai dialect)
    # a lying engine: it ignores response_format, regexes and tools and answers in plain words
    # (refserver/constrained.py), so tests can show that invalid replies are caught
    ignore_constraints: bool = False

    def validate(self) -> None:
        if self.mode != "server":
            raise ConfigError("backend=reference runs as a server only (backend.mode=server)")
        super().validate()
        if min(self.ttft_ms, self.itl_ms, self.jitter_ms, self.run_noise_cv, self.batch_itl_ms) < 0:
            raise ConfigError("backend.ttft_ms, itl_ms, jitter_ms, batch_itl_ms and run_noise_cv must be >= 0")
        if self.tokens < 1 or self.chunk_tokens < 1:
            raise ConfigError("backend.tokens and backend.chunk_tokens must be >= 1")
        if not 0 <= self.error_rate <= 1:
            raise ConfigError(f"backend.error_rate must be in [0, 1] (got {self.error_rate})")
        if self.error_kind not in FAULTS:
            raise ConfigError(f"backend.error_kind must be one of {', '.join(FAULTS)} (got {self.error_kind!r})")
        if self.fault_size_mib <= 0:
            raise ConfigError(f"backend.fault_size_mib must be > 0 (got {self.fault_size_mib})")
        if self.max_running < 0 or self.kv_capacity_tokens < 1 or self.metrics_drip_s < 0 or self.spec_draft_tokens < 0:
            raise ConfigError(
                "backend.max_running, metrics_drip_s and spec_draft_tokens must be >= 0, "
                "backend.kv_capacity_tokens >= 1"
            )
        if not 0 <= self.spec_acceptance <= 1:
            raise ConfigError(f"backend.spec_acceptance must be in [0, 1] (got {self.spec_acceptance})")
        if self.reasoning_tokens < 0:
            raise ConfigError(f"backend.reasoning_tokens must be >= 0 (got {self.reasoning_tokens})")
        if self.dialect not in DIALECTS:
            raise ConfigError(f"backend.dialect must be one of {', '.join(DIALECTS)} (got {self.dialect!r})")


def reference_preset(config: ReferenceConfig, model: ModelFiles) -> ServerPreset:
    c = config
    command = [
        "-m",
        "refserver",
        "--host",
        "{host}",
        "--port",
        "{port}",
        "--ttft-ms",
        str(c.ttft_ms),
        "--itl-ms",
        str(c.itl_ms),
        "--tokens",
        str(c.tokens),
        "--jitter-ms",
        str(c.jitter_ms),
        "--error-rate",
        str(c.error_rate),
        "--error-kind",
        c.error_kind,
        "--fault-size-mib",
        str(c.fault_size_mib),
        "--chunk-tokens",
        str(c.chunk_tokens),
        "--dialect",
        c.dialect,
        "--seed",
        str(c.seed),
        "--model-name",
        model.name,
    ]
    if c.metrics:
        command.append("--metrics")
    if c.exit_after is not None:
        command += ["--exit-after", str(c.exit_after)]
    if c.run_noise_cv:
        command += ["--run-noise-cv", str(c.run_noise_cv)]
    if c.max_running:
        command += ["--max-running", str(c.max_running)]
    if c.batch_itl_ms:
        command += ["--batch-itl-ms", str(c.batch_itl_ms)]
    if c.kv_capacity_tokens != 16384:
        command += ["--kv-capacity-tokens", str(c.kv_capacity_tokens)]
    if c.metrics_drip_s:
        command += ["--metrics-drip-s", str(c.metrics_drip_s)]
    if c.spec_draft_tokens:
        command += ["--spec-draft-tokens", str(c.spec_draft_tokens), "--spec-acceptance", str(c.spec_acceptance)]
    if c.reasoning_tokens:
        command += ["--reasoning-tokens", str(c.reasoning_tokens)]
    if c.per_request_metrics:
        command.append("--per-request-metrics")
    if c.ignore_constraints:
        command.append("--ignore-constraints")
    if c.count_prompt_tokens:
        command += ["--tokenizer", "{model}"]
    if c.api_key_env:
        command += ["--api-key-env", c.api_key_env]  # the variable's name; the server reads the key itself

    if model.adapters:  # LoRA traffic: the adapters by name, each request's as its model (as vLLM's)
        command += ["--lora-modules", *(a.name for a in model.adapters)]

    def extra_body(request: GenerationRequest) -> dict[str, Any]:
        body: dict[str, Any] = {"ignore_eos": True} if request.exact_output_len else {}
        if request.adapter is not None:
            body["model"] = request.adapter
        return body

    return ServerPreset(
        command=command,
        health_path=DIALECTS[c.dialect].health or "/v1/models",
        metrics_path="/metrics" if c.metrics else None,
        served_model_name=None,  # exercises GET /v1/models
        extra_body=extra_body,
        prompt_token_ids=None if DIALECTS[c.dialect].token_id_prompts else False,
        engine="reference",
        lora=True,
        structured=StructuredDialect(regex_field="regex"),  # and it answers under the constraint unless told to lie
        timings_note="the reference server sends vLLM's metrics with backend.per_request_metrics=true, and "
        "llama-server's timings with backend.dialect=llama-server",
        version_packages=("llm-harness",),
        stop_grace_s=5.0,
    )


@backend_registry.register("reference", ReferenceConfig)
class ReferenceBackend(Backend):
    """Server mode only: :func:`create_backend` builds a ServerBackend from the preset."""

    stand_in = True

    @classmethod
    def server_preset(cls, config: BackendConfig, model: ModelFiles) -> ServerPreset:
        assert isinstance(config, ReferenceConfig)
        return reference_preset(config, model)

    def __init__(self, config: BackendConfig, model: ModelFiles):
        raise ConfigError("backend=reference runs as a server only (backend.mode=server)")

    def load(self) -> None:  # pragma: no cover - never instantiated
        raise NotImplementedError

    @property
    def engine_name(self) -> str:  # pragma: no cover
        return "reference"

    @property
    def engine_version(self) -> str:  # pragma: no cover
        return "unknown"

    def stream(self, request):  # pragma: no cover
        raise NotImplementedError
