"""What an engine module says about its own OpenAI-compatible server (``backend.mode=server``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from core.types import GenerationRequest


@dataclass
class ServerPreset:
    """How to launch one engine's OpenAI-compatible server, and how to talk to it.

    ``command`` is the argv after the Python interpreter (``["-m", "vllm.entrypoints…"]``),
    or the full argv when ``uses_python`` is False. Its items may hold the placeholders
    ``{model}`` (the HF folder), ``{gguf}`` (the GGUF file), ``{port}``, ``{host}``,
    ``{python}``, ``{files}`` (the folder the preset's ``files`` are written to) and
    ``{aux_port}`` (a second free port), filled in at launch, as in ``env`` values and the
    setup and clean-up commands. ``backend.server_args`` are appended to the command.
    """

    command: list[str]
    uses_python: bool = True
    health_path: str = "/health"  # GET answers 200 once the server is ready
    metrics_path: Optional[str] = None  # Prometheus text, scraped before and after the measured phase
    reset_cache_path: Optional[str] = None  # POST empties the prefix cache (between the points of a sweep)
    env: dict[str, str] = field(default_factory=dict)  # added to the server's environment
    served_model_name: Optional[str] = None  # the "model" sent; None: the first id of GET /v1/models
    extra_body: Optional[Callable[[GenerationRequest], dict[str, Any]]] = None  # merged into each request
    prompt_token_ids: Optional[bool] = None  # /v1/completions takes token ids? None: try, else text
    engine: Optional[str] = None  # engine name in the summary (default: the backend's name)
    version_packages: tuple[str, ...] = ()  # distributions whose version, in the server's interpreter, is reported
    api_root: str = "/v1"
    stop_grace_s: float = 15.0  # SIGTERM, then SIGKILL after this long
    files: dict[str, str] = field(default_factory=dict)  # name -> text, written to <run folder>/server-files/ first
    setup_commands: list[list[str]] = field(default_factory=list)  # run in order once healthy (e.g. a model import)
    cleanup_commands: list[list[str]] = field(default_factory=list)  # run once the server is stopped, by the watchdog too
    version_path: Optional[str] = None  # GET answers {"version": …}, asked once healthy (preferred to version_packages)
    version: Optional[str] = None  # the engine's version where the preset already knows it (a program's --version)
    # what the server says about each request in its stream (backends/http/engine_timings.py): the
    # report shows it where the engine gave no stage times
    timings_note: str = "this server sends no per-request timings in its stream"
