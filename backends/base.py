"""The Backend interface every engine implements, and the types that cross it.

The life of one request, and who does each stage (docs/metrics.md, "Where the time goes"):

1. intake — the runner renders the chat template and tokenizes, once, the same for every
   engine (``workloads.prompts.PromptRenderer``); a server backend adds HTTP intake.
2. scheduler — the engine queues and batches; ``RequestDone.scheduled_t`` says when the
   engine started work on the request, so the queue wait can be told apart.
3. prefill — the engine's forward pass over the prompt; ends at the first ``TokenChunk``.
4. decode loop — one ``TokenChunk`` per step, stamped when the engine produced it.
5. post-processing — detokenizing; the runner decodes the output ids after the request.
6. return — events reach the runner through :meth:`Backend.stream`.
7. clean-up — the engine frees the request's state; ``RequestDone`` closes the stream.
"""

from __future__ import annotations

import importlib.util
import os
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, Optional, Protocol, TypeVar

from backends.preset import ServerPreset
from core.errors import BackendUnavailable, ConfigError
from core.model import ModelFiles
from core.tokenizer import load_tokenizer
from core.types import GenerationRequest, StreamEvent

MODES = ("inprocess", "server")
ENDPOINTS = ("chat", "completions")
# how requests are spread over several endpoints (backends/http/router.py)
ROUTING = ("round_robin", "least_outstanding", "session_affinity")
# servers one run launches on this machine; more endpoints are launched by the user and listed in backend.urls
MAX_REPLICAS = 64


@dataclass
class BackendConfig:
    """Fields every backend config has; each backend subclasses it.

    ``mode``: ``inprocess`` runs the engine inside the harness; ``server`` launches the
    engine's own OpenAI-compatible server as a child process (``backends/server/backend.py``) and
    drives it over HTTP. The fields below ``mode`` are for server mode and ``backend=openai``.
    """

    name: str = "?"  # the engine: set by backend=<choice>, never by hand
    mode: str = "inprocess"  # or "server" where a backend supports it
    # --- server mode (and backend=openai where marked) -----------------------------------
    python: Optional[str] = None  # interpreter (or venv folder) that runs the server; default: this one
    server_command: Optional[list[str]] = (
        None  # full argv replacing the preset's; {model} {gguf} {port} {host} {python}
    )
    server_args: list[str] = field(default_factory=list)  # appended to the server's command
    port: int = 0  # 0: a free port; a port in use is replaced by a free one (said in the log)
    startup_timeout_s: float = 300.0  # how long the server may take to answer its health check
    request_timeout_s: float = 600.0  # per request, from send to the last byte (also backend=openai)
    idle_timeout_s: float = 120.0  # per request: no byte from the server for this long fails it (also openai)
    max_event_mib: float = 16.0  # a server-sent event (or line) larger than this fails its request (also openai)
    endpoint: str = "chat"  # chat: /v1/chat/completions with messages | completions: /v1/completions (also openai)
    api_key_env: Optional[str] = None  # name of the environment variable holding the API key (also openai)
    # several endpoints (backends/http/router.py): how requests are spread (also openai with backend.urls)
    routing: str = "round_robin"  # round_robin | least_outstanding | session_affinity
    replicas: int = 1  # server mode: N servers of the engine on N free ports, requests routed over them
    replica_gpus: Optional[list[Any]] = None  # one list of GPU indices per replica: its CUDA_VISIBLE_DEVICES
    replica_cpus: Optional[list[Any]] = None  # one list of CPU ids per replica: its CPU affinity (Linux)
    replica_env: Optional[list[Any]] = None  # one mapping per replica: environment variables of its own

    def server_flags(self) -> list[str]:
        """What the server backend appends to the server's command: ``backend.server_args``."""
        return list(self.server_args)

    def validate(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"backend.mode must be inprocess or server (got {self.mode!r})")
        self.validate_http()
        if self.mode == "server":
            self.validate_server()

    def validate_http(self) -> None:
        """The fields a client of an OpenAI-compatible server uses."""
        if self.endpoint not in ENDPOINTS:
            raise ConfigError(f"backend.endpoint must be chat or completions (got {self.endpoint!r})")
        if self.request_timeout_s <= 0:
            raise ConfigError(f"backend.request_timeout_s must be > 0 (got {self.request_timeout_s})")
        if self.idle_timeout_s <= 0:
            raise ConfigError(f"backend.idle_timeout_s must be > 0 (got {self.idle_timeout_s})")
        if self.max_event_mib <= 0:
            raise ConfigError(f"backend.max_event_mib must be > 0 (got {self.max_event_mib})")
        if self.api_key_env is not None and not os.environ.get(self.api_key_env):
            raise ConfigError(
                f"backend.api_key_env names the environment variable {self.api_key_env}, which is not set"
            )
        if self.routing not in ROUTING:
            raise ConfigError(f"backend.routing must be one of {', '.join(ROUTING)} (got {self.routing!r})")
        if self.replicas < 1:
            raise ConfigError(f"backend.replicas must be >= 1 (got {self.replicas})")
        if self.replicas > MAX_REPLICAS:
            raise ConfigError(
                f"backend.replicas launches that many servers on this machine: at most {MAX_REPLICAS} "
                f"(got {self.replicas}); for more endpoints, start them yourself and list them in "
                "backend.urls"
            )
        if self.replicas > 1 and self.mode != "server":
            raise ConfigError("backend.replicas launches several servers: it needs backend.mode=server")
        for key in ("replica_gpus", "replica_cpus", "replica_env"):
            value = getattr(self, key)
            if value is not None and len(value) != self.replicas:
                raise ConfigError(f"backend.{key} needs one entry per replica ({self.replicas}; got {len(value)})")
        for key in ("replica_gpus", "replica_cpus"):
            for entry in getattr(self, key) or ():
                if not entry or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in entry):
                    raise ConfigError(
                        f"backend.{key} needs a non-empty list of indices >= 0 per replica (got {entry!r})"
                    )
        for entry in self.replica_env or ():
            if not isinstance(entry, dict):
                raise ConfigError(f"backend.replica_env needs a mapping of variables per replica (got {entry!r})")

    def validate_server(self) -> None:
        """The fields that launch a server (backend.mode=server)."""
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"backend.port must be 0 (a free port) or 1-65535 (got {self.port})")
        if self.startup_timeout_s <= 0:
            raise ConfigError(f"backend.startup_timeout_s must be > 0 (got {self.startup_timeout_s})")
        if self.server_command is not None and not self.server_command:
            raise ConfigError("backend.server_command must be a non-empty list (or null for the preset's)")


class RequestStream(Protocol):
    """What the measuring client sends requests through: a Backend, or its ``worker_client()``."""

    def stream(self, request: GenerationRequest) -> AsyncIterator[StreamEvent]: ...


# the config class of one backend (a BackendConfig subclass)
ConfigT = TypeVar("ConfigT", bound="BackendConfig")


class Backend(ABC, Generic[ConfigT]):
    """An inference engine driven by the harness, configured by a ``ConfigT``.

    Subclasses set ``requires`` (modules the engine needs) and ``extra`` (the pip extra that
    installs them), import their engine only inside methods, and register themselves with
    ``@backend_registry.register(name, ConfigClass)``; one with a config class of its own
    subclasses ``Backend[ConfigClass]``, so its ``config`` and its classmethods take that class.
    """

    registry_name: str  # set on the class by backend_registry.register; a ServerBackend sets its engine's
    requires: ClassVar[tuple[str, ...]] = ()
    extra: ClassVar[str] = ""
    install_hint: ClassVar[str] = ""  # anything else a user must know to install the engine
    needs_gguf: ClassVar[bool] = False  # loads a GGUF file only (an HF folder alone will not do)
    # not an inference engine but a stand-in for one (the reference server): the end of a run
    # suggests it for a comparison only when no engine can run the same overrides
    stand_in: ClassVar[bool] = False

    def __init__(self, config: ConfigT, model: ModelFiles):
        self.config = config
        self.model = model
        self.run_dir: Optional[Path] = None  # the run folder, set by the runner before load()

    @classmethod
    def server_preset(cls, config: ConfigT, model: ModelFiles) -> ServerPreset:
        """How to launch this engine's OpenAI-compatible server (``backend.mode=server``).

        Engines with a server override this and return a :class:`backends.server.backend.ServerPreset`
        (``backends/server/presets.py`` has one function per engine).
        """
        raise ConfigError(f"backend {config.name} has no server mode (use backend.mode=inprocess)")

    @classmethod
    def check_available(cls) -> None:
        """Raise BackendUnavailable, naming the pip extra, if the engine is not installed."""
        missing = [m for m in cls.requires if importlib.util.find_spec(m) is None]
        if missing:
            raise BackendUnavailable(
                f"backend '{cls.registry_name}' needs {', '.join(missing)}, which is not installed: "
                f"pip install -e '.[{cls.extra or cls.registry_name}]'{cls.install_hint}"
            )

    @classmethod
    def check_server(cls, config: ConfigT) -> None:
        """Server mode, before any model loads: raise ConfigError if what launches the server
        is missing (engines whose server is a program of its own, or runs in a container)."""
        return None  # by default nothing to check: the harness launches the server itself

    def check_workload(self, plan: Any) -> None:
        """Raise ConfigError if the workload cannot run on this engine (checked before loading)."""
        return None  # by default every workload runs

    @staticmethod
    def refuse_constraints(plan: Any, engine: str) -> None:
        """ConfigError, in one line, for a workload with a reply constraint (workload.response_format,
        workload.tools) on an engine that has no constrained decoding."""
        if getattr(plan, "structured", None):
            raise ConfigError(
                f"{engine} has no constrained decoding (workload.response_format, workload.tools): "
                "drop them, or use vllm or llamacpp (in-process or server), or an engine's server"
            )

    # what serving LoRA adapters takes here, for the refusal of engines that cannot (one line)
    lora_hint: ClassVar[str] = (
        "engines that serve them: backend=vllm, backend=transformers (peft), backend=llamacpp "
        "(in-process, or backend.mode=server backend.server=llama-server), or the vLLM, SGLang "
        "and TGI servers"
    )

    def check_adapters(self, adapters: list[Any]) -> None:
        """Raise ConfigError if this engine cannot serve these LoRA adapters (``workload.lora``),
        before it loads. Engines that serve adapters override it; by default it refuses."""
        raise ConfigError(
            f"backend {self.config.name} (mode {self.config.mode}) does not serve LoRA adapters "
            f"(workload.lora.adapters): drop them, or use one of the {self.lora_hint}"
        )

    @staticmethod
    def check_context_fits(plan: Any, limit: Optional[int], key: str) -> None:
        """ConfigError when a request known in advance needs more than ``limit`` tokens of context."""
        if limit is None:
            return
        for prompt, output in plan.request_sizes():
            if prompt + output > limit:
                raise ConfigError(
                    f"{key}={limit} is too small: a request needs {prompt} prompt + {output} output tokens; raise {key}"
                )

    def import_engine(self) -> None:
        """Import the engine's libraries; timed as part of the engine's load.

        It runs before the harness reads the tokenizer, so what the engine shares with the
        harness (transformers, torch) is counted as the engine's load, as it would be in a
        process of the engine's own. In-process engines override it; servers import nothing here.
        """
        return None  # by default nothing to import

    # seconds an engine whose load began in begin_load sat ready before load() was called
    # (the harness was still reading the tokenizer): not part of its load time
    ready_unused_s: float = 0.0

    def begin_load(self) -> bool:
        """Start loading without waiting, where the engine loads in a process of its own (a
        server): it loads while the harness reads the tokenizer. True if it began; ``load``
        then finishes it. In-process engines load in ``load`` alone."""
        return False

    @abstractmethod
    def load(self) -> None:
        """Load the model into the engine (may take long; not timed as part of a request)."""

    @property
    @abstractmethod
    def engine_name(self) -> str: ...

    @property
    @abstractmethod
    def engine_version(self) -> str: ...

    def get_tokenizer(self) -> Any:
        """The tokenizer, with its chat template, that renders prompts for this engine.

        By default the Hugging Face tokenizer of the model folder: every engine gets the same
        prompt token ids. An engine with its own vocabulary may override this.
        """
        return load_tokenizer(self.model.require_hf_dir())

    @abstractmethod
    def stream(self, request: GenerationRequest) -> AsyncIterator[StreamEvent]:
        """Serve one request: yield TokenChunks as produced, then one RequestDone.

        Called concurrently for every request in flight; the engine decides how to batch
        them. A failure raises; the runner records it against this request alone.
        """

    def worker_client(self) -> Optional[RequestStream]:
        """What a forked client process streams this backend's requests through
        (``client.workers`` > 1), or None when it cannot be driven from another process.

        Called once in the harness's process before the workers are forked; the object must
        touch nothing the forked copy cannot use (a server process that is not its child, an
        engine's threads). In-process engines return None: they serve from this process.
        """
        return None

    def remote_client(self) -> Optional[RequestStream]:
        """What a client process on another host streams this backend's requests through
        (``client.cluster=ray``), or None when it cannot be driven from another host.

        The object is pickled (Ray's cloudpickle) and sent to each host, so it must hold
        nothing of this process: no server handle, lock, thread or event loop. In-process
        engines return None.
        """
        return None

    def memory(self) -> dict[str, Any]:
        """Engine memory figures: ``weights_bytes``, ``kv_bytes_per_value`` and any others."""
        return {}

    def engine_info(self) -> dict[str, Any]:
        """What the engine was set up with, for the run's summary (device, dtype, batching…)."""
        return {}

    def numerics(self) -> dict[str, Optional[str]]:
        """The precision the engine computes in, for the summary beside every figure and for
        cross-engine agreement: ``dtype`` (e.g. ``bfloat16``) and ``quantization`` (e.g.
        ``GGUF Q4_1``; None: unquantized weights). By default ``engine_info()``'s keys of those names."""
        info = self.engine_info()
        return {"dtype": _text(info.get("dtype")), "quantization": _text(info.get("quantization"))}

    def engine_process(self) -> Optional[int]:
        """The PID the engine's processes descend from, for per-process GPU memory
        (harness/telemetry/processes.py): this process for an in-process engine (its child processes
        count too); None when the engine is no local process (a remote server)."""
        return os.getpid()

    def scrape_metrics(self, deadline_s: float = 10.0) -> Optional[str]:
        """The engine's own Prometheus metrics as text, or None where it exposes none.

        The runner scrapes before and after the measured phase and stores the difference
        (``harness/telemetry/prometheus.py``) next to the client's figures, and samples it during
        the phase (``harness/telemetry/server_metrics.py``), off the event loop. ``deadline_s``
        bounds the whole scrape, not each read (TimeoutError past it).
        """
        return None

    async def reset_prefix_cache(self) -> bool:
        """Empty the engine's prefix cache, so the next load point does not profit from the last.

        Called between the points of a sweep that share one loaded engine. Returns False where
        the engine offers no way to do it (the point's summary says so).
        """
        return False

    def fatal_error(self) -> Optional[str]:
        """Why the engine can no longer serve any request (e.g. its server exited), or None.

        The runner asks after the warm-up and after the measured phase; a reason ends the
        run as failed, with the results so far kept.
        """
        return None

    def close(self) -> None:
        """Release the engine; called once, also after an error or Ctrl-C."""
        return None  # by default nothing is held


def _text(value: Any) -> Optional[str]:
    return None if value is None else str(value).removeprefix("torch.")
