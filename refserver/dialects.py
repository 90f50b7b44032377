"""How each engine's server streams (:data:`DIALECTS`), and the words the reference server sends."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional


@dataclass(frozen=True)
class Dialect:
    """How one server family streams (what a client has to cope with)."""

    # chat: "empty" (a first chunk of role + "" content) | "bare" (a first chunk of role only) |
    # "every" (role in every delta) | "first" (role in the first token's delta) | None
    role_chunk: Optional[str]
    # "chunk": a chunk with choices [] when stream_options.include_usage | "final": on the
    # finish chunk, always | "zeroed": zeros on every chunk, then the "chunk" one | None: never
    usage: Optional[str]
    finish_on_last_token: bool  # finish_reason rides on the last token's chunk (else an empty final chunk)
    comment: Optional[str]  # "keepalive" (": keepalive 0/N" first) | "ping" (": ping - <time>") | "empty" (":") | None
    health: Optional[str]  # the health path (None: clients poll /v1/models)
    # more fields: "matched_stop" (SGLang: matched_stop, reasoning_content null) | "stop_reason"
    # (trtllm-serve: stop_reason and more, null fields dropped in chat, reasoning_content "", cached_tokens)
    extras: Optional[str]
    metrics_prefix: str
    token_id_prompts: bool  # /v1/completions takes a list of token ids (else HTTP 422)
    stop_finish: str = "stop"  # finish_reason of a reply that ended by itself
    open_finish: Optional[str] = None  # finish_reason of the chunks before the last
    errors: str = "openai"  # {"error": {message, type, code}} | "flat": {"error": message, "error_type"} |
    #                         "object": {"object": "error", message, type, code} (FastChat, old vLLM)
    completions: tuple[tuple[str, Any], ...] = ()  # fields that differ on /v1/completions
    reasoning_field: str = "reasoning_content"  # the delta field of reasoning text (vLLM: "reasoning")
    # llama-server: a ``timings`` object (prompt_n, prompt_ms, cache_n, predicted_n, predicted_ms,
    # draft_n, draft_n_accepted) on the last chunk: the usage chunk, else the finish chunk
    timings: bool = False

    def on(self, chat: bool) -> Dialect:
        """The dialect of one endpoint."""
        return self if chat or not self.completions else replace(self, **dict(self.completions))


DIALECTS: dict[str, Dialect] = {
    # vLLM and OpenAI
    "openai": Dialect("empty", "chunk", True, None, "/health", None, "vllm", True, reasoning_field="reasoning"),
    "sglang": Dialect("empty", "chunk", False, None, "/health", "matched_stop", "sglang", True),
    # mlx_lm.server: keep-alive comments while the prompt is processed
    "mlx": Dialect(None, "chunk", False, "keepalive", "/health", None, "vllm", False),
    # llama_cpp.server: no usage, no /health, text prompts only
    "llamacpp": Dialect("bare", None, False, "ping", None, None, "vllm", False),
    # llama.cpp's C++ llama-server: a role-only first chunk, usage when asked, timings on the last chunk
    "llama-server": Dialect("bare", "chunk", False, None, "/health", None, "llamacpp", True, timings=True),
    # TGI's router (router/src/chat.rs, server.rs): role in every delta, axum's ":" keep-alives,
    # errors {"error": "…", "error_type": "…"}; /v1/completions: finish_reason "" until the last
    # chunk, which carries "eos_token" (or "length") and the usage, asked for or not
    "tgi": Dialect(
        "every",
        "chunk",
        True,
        "empty",
        "/health",
        None,
        "vllm",
        False,
        errors="flat",
        completions=(("usage", "final"), ("stop_finish", "eos_token"), ("open_finish", "")),
    ),
    # trtllm-serve (tensorrt_llm/serve/postprocess_handlers.py): a role-only first chunk, chat
    # choices without null fields, reasoning_content "" in each delta, stop_reason, cached_tokens
    "tensorrt_llm": Dialect("bare", "chunk", True, None, "/health", "stop_reason", "vllm", True, errors="object"),
    # DeepSpeed-MII's openai_api_server (FastChat's): a role-only first chunk, never any usage
    "deepspeed_mii": Dialect("bare", None, True, None, "/health", None, "vllm", False, errors="object"),
    # Ollama's OpenAI layer (openai/openai.go, middleware/openai.go): role in the first token's
    # delta, finish_reason in a chunk of its own with delta {}; /v1/completions: finish_reason on
    # the last token, and a zeroed usage on every chunk before the real one
    "ollama": Dialect(
        "first",
        "chunk",
        False,
        None,
        "/api/version",
        None,
        "vllm",
        False,
        completions=(("finish_on_last_token", True), ("usage", "zeroed")),
    ),
}

# Each is one token, with its leading space, for SmolLM2's tokenizer (tests check this).
WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there one all we their been has when who will more if no "
    "out so said what up its about into than them can only other new some could time these two "
    "may then do first any my now such like our over man me even most made after also did many "
    "before must through back years where much your way well down should because each just those "
    "people how too little state good very make world still own see men work long get here "
    "between both life being under never day same another know while last might us great old "
    "year off come since against go came right used take three"
).split()


def word(request_index: int, k: int) -> str:
    """The k-th token's text of a request: deterministic, so replies are reproducible."""
    return " " + WORDS[(request_index * 31 + k * 7) % len(WORDS)]
