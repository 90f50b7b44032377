"""What an engine module says about its own OpenAI-compatible server (``backend.mode=server``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from core.structured import ANY_OBJECT, JSON_OBJECT
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
    cleanup_commands: list[list[str]] = field(
        default_factory=list
    )  # run once the server is stopped, by the watchdog too
    version_path: Optional[str] = None  # GET answers {"version": …}, asked once healthy (preferred to version_packages)
    version: Optional[str] = None  # the engine's version where the preset already knows it (a program's --version)
    # what the server says about each request in its stream (backends/http/engine_timings.py): the
    # report shows it where the engine gave no stage times
    timings_note: str = "this server sends no per-request timings in its stream"
    # LoRA (workload.lora.adapters): True where the preset launched the server with the model's
    # adapters (``ModelFiles.adapters``) and its ``extra_body`` names each request's adapter;
    # False: the server is refused before launch (``lora_refusal`` says why, one line)
    lora: bool = False
    lora_refusal: Optional[str] = None
    # Structured output (workload.response_format, workload.tools): how the server takes a reply
    # constraint in its body; None: it takes none, and such a workload is refused before launch
    structured: Optional[StructuredDialect] = None


# how a server takes a regular expression (a key of REGEX_FIELDS)
REGEX_FIELDS: dict[str, Callable[[str], dict[str, Any]]] = {
    "structured_outputs": lambda p: {"structured_outputs": {"regex": p}},  # vLLM >= 0.10 (guided_regex before)
    "regex": lambda p: {"regex": p},  # SGLang (and the reference server)
    "response_format": lambda p: {"response_format": {"type": "regex", "value": p}},  # TGI's grammar
}


@dataclass(frozen=True)
class StructuredDialect:
    """How one OpenAI-compatible server takes a reply constraint (core/structured.py) in its
    chat/completions body.

    - a JSON schema: ``response_format`` ``{"type": "json_schema", "json_schema": {"name", "schema"}}``
      (OpenAI's form), or with ``json_object`` ``{"type": "json_object", "schema": ...}``
      (llama-cpp-python's server);
    - JSON mode (any JSON object): ``response_format`` ``{"type": "json_object"}``, OpenAI's form,
      which vLLM, SGLang, llama-server, llama_cpp.server, trtllm-serve and Ollama take as it is; a
      server whose ``regex_field`` is ``response_format`` (TGI's grammar) gets ``{"type": "json",
      "value": {"type": "object"}}``, its JSON grammar with the schema of any object;
    - a regex: the field named by ``regex_field`` (:data:`REGEX_FIELDS`); None: refused;
    - tools: ``tools`` and ``tool_choice`` as OpenAI's API has them, where ``tools`` is True.
    """

    regex_field: Optional[str] = None
    tools: bool = True
    json_object: bool = False
    # a server argument without which ``tool_choice: auto`` is refused (vLLM: --enable-auto-tool-choice,
    # with a --tool-call-parser for the model); None: auto needs nothing
    auto_tools_flag: Optional[str] = None

    def body(self, request: GenerationRequest) -> dict[str, Any]:
        """The body fields of one request's constraint ({} without one)."""
        body: dict[str, Any] = {}
        fmt = request.response_format
        if fmt is not None and fmt["type"] == JSON_OBJECT:
            body["response_format"] = (
                {"type": "json", "value": dict(ANY_OBJECT)}
                if self.regex_field == "response_format"
                else {"type": JSON_OBJECT}
            )
        elif fmt is not None and fmt["type"] == "json_schema":
            if self.json_object:
                body["response_format"] = {"type": "json_object", "schema": fmt["schema"]}
            else:
                body["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": fmt.get("name") or "reply", "schema": fmt["schema"]},
                }
        elif fmt is not None and self.regex_field is not None:
            body.update(REGEX_FIELDS[self.regex_field](fmt["pattern"]))
        if request.tools:
            body["tools"] = request.tools
            body["tool_choice"] = request.tool_choice or "auto"
        return body

    def refusal(
        self, structured: Optional[dict[str, Any]], engine: str, server_args: Sequence[str] = ()
    ) -> Optional[str]:
        """Why the server cannot take the workload's constraint (one line), or None."""
        if not structured:
            return None
        fmt = structured.get("response_format")
        if fmt is not None and fmt["type"] == "regex" and self.regex_field is None:
            return (
                f"the {engine} server takes no regular expression (workload.response_format type regex): "
                "use a JSON schema, or another engine"
            )
        if structured.get("tools") and not self.tools:
            return (
                f"the {engine} server takes no tool definitions (workload.tools) here: drop them, or use another engine"
            )
        auto = structured.get("tools") and structured.get("tool_choice_share", 0) < 1
        if auto and self.auto_tools_flag and self.auto_tools_flag not in server_args:
            return (
                f"the {engine} server answers tool_choice auto only with {self.auto_tools_flag} and a tool-call "
                f"parser for the model: set workload.tool_choice_share=1 (every request required), or add them "
                f"with backend.server_args"
            )
        return None


@dataclass(frozen=True)
class PresetExtras:
    """A preset's per-request body fields (its reply-constraint dialect, then its ``extra_body``)
    as an object of their own: a client on another host (``client.cluster=ray``) gets it pickled."""

    structured: Optional[StructuredDialect]
    extra_body: Optional[Callable[[GenerationRequest], dict[str, Any]]]

    def __call__(self, request: GenerationRequest) -> dict[str, Any]:
        body = self.structured.body(request) if self.structured is not None else {}
        if self.extra_body:
            body.update(self.extra_body(request))
        return body
