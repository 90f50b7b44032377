"""The Backend interface every engine implements, and the types that cross it.

The life of one request, and who does each stage (mission.md):

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
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, ClassVar, Optional, Union

from harness.errors import BackendUnavailable, ConfigError


@dataclass
class BackendConfig:
    """Fields every backend config has; each backend subclasses it."""

    name: str = "?"
    mode: str = "inprocess"  # or "server" where a backend supports it

    def validate(self) -> None:
        if self.mode not in ("inprocess", "server"):
            raise ConfigError(f"backend.mode must be inprocess or server (got {self.mode!r})")


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 means greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 means no top-k
    seed: Optional[int] = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass
class GenerationRequest:
    """One request as every engine receives it: chat-templated prompt ids and a length."""

    request_id: int
    prompt_token_ids: list[int]
    max_new_tokens: int
    exact_output_len: bool  # suppress end-of-sequence so exactly max_new_tokens come out
    sampling: SamplingParams = field(default_factory=SamplingParams)
    messages: list[dict[str, str]] = field(default_factory=list)
    session_id: int = 0
    turn: int = 0


@dataclass(slots=True)
class TokenChunk:
    """Tokens the engine produced, stamped with ``time.perf_counter()`` when it produced them."""

    token_ids: list[int]
    t: float


@dataclass
class RequestDone:
    """The last event of a request's stream."""

    finish_reason: str  # "length", "stop" or "cancelled"
    scheduled_t: Optional[float] = None  # perf_counter time the engine began work on it
    engine_stats: dict[str, Any] = field(default_factory=dict)  # the engine's own figures


StreamEvent = Union[TokenChunk, RequestDone]


class Backend(ABC):
    """An inference engine driven by the harness.

    Subclasses set ``requires`` (modules the engine needs) and ``extra`` (the pip extra that
    installs them), import their engine only inside methods, and register themselves with
    ``@backend_registry.register(name, ConfigClass)``.
    """

    registry_name: ClassVar[str]
    requires: ClassVar[tuple[str, ...]] = ()
    extra: ClassVar[str] = ""
    install_hint: ClassVar[str] = ""  # anything else a user must know to install the engine

    def __init__(self, config: BackendConfig, model: "ModelFiles"):
        self.config = config
        self.model = model

    @classmethod
    def check_available(cls) -> None:
        """Raise BackendUnavailable, naming the pip extra, if the engine is not installed."""
        missing = [m for m in cls.requires if importlib.util.find_spec(m) is None]
        if missing:
            raise BackendUnavailable(
                f"backend '{cls.registry_name}' needs {', '.join(missing)}, which is not installed: "
                f"pip install -e '.[{cls.extra or cls.registry_name}]'{cls.install_hint}"
            )

    def check_workload(self, plan: Any) -> None:
        """Raise ConfigError if the workload cannot run on this engine (checked before loading)."""

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
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(self.model.require_hf_dir())

    @abstractmethod
    def stream(self, request: GenerationRequest) -> AsyncIterator[StreamEvent]:
        """Serve one request: yield TokenChunks as produced, then one RequestDone.

        Called concurrently for every request in flight; the engine decides how to batch
        them. A failure raises; the runner records it against this request alone.
        """

    def memory(self) -> dict[str, Any]:
        """Engine memory figures: ``weights_bytes``, ``kv_bytes_per_value`` and any others."""
        return {}

    def engine_info(self) -> dict[str, Any]:
        """What the engine was set up with, for the run's summary (device, dtype, batching…)."""
        return {}

    def close(self) -> None:
        """Release the engine; called once, also after an error or Ctrl-C."""


# Imported late for the type annotation only; model_store has no dependency on backends.
from harness.model_store import ModelFiles  # noqa: E402
