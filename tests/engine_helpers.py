"""Helpers shared by the engine tests: build a backend, make a request, read its stream."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from backends import GenerationRequest, SamplingParams, TokenChunk
from backends.registry import backend_registry
from workloads.prompts import PromptRenderer


def make_backend(name: str, model, load: bool = True, **overrides):
    entry = backend_registry.get(name)
    cfg = entry.config_cls(**overrides)
    cfg.validate()
    backend = entry.cls(cfg, model)
    if load:
        backend.load()
    return backend


def request(i, ids, n, exact=True, sampling=None, session=0, turn=0) -> GenerationRequest:
    """Request ``i``: ``n`` tokens after ``ids``, greedy unless ``sampling`` says otherwise."""
    return GenerationRequest(
        request_id=i,
        prompt_token_ids=ids,
        max_new_tokens=n,
        exact_output_len=exact,
        sampling=sampling or SamplingParams(),
        session_id=session,
        turn=turn,
    )


async def collect(backend, req: GenerationRequest):
    """The request's TokenChunks (one per server chunk) and its RequestDone."""
    chunks, done = [], None
    async for event in backend.stream(req):
        if isinstance(event, TokenChunk):
            chunks.extend(event.split())
        else:
            done = event
    return chunks, done


def ask(tokenizer_or_renderer, text: str) -> list[int]:
    """A one-message chat, rendered with the model's template (a tokenizer or a PromptRenderer)."""
    renderer = (
        tokenizer_or_renderer
        if isinstance(tokenizer_or_renderer, PromptRenderer)
        else PromptRenderer(tokenizer_or_renderer)
    )
    return renderer.render([{"role": "user", "content": text}])


def require_package(name: str) -> None:
    """An engine's package that a test needs installed but does not load (SGLang's configuration
    classes, MLX's checks before a refusal). Missing: the test skips (the fast CI job installs no
    engine), except under CI, where it fails: an engine CI installs must run."""
    import importlib.util
    import os

    import pytest

    if importlib.util.find_spec(name) is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI installs {name}, but it is not installed")
        pytest.skip(f"{name} is not installed")


def require_llama_server() -> str:
    """llama-server's program (scripts/setup.sh all builds it). Missing: the test skips, except
    under CI, where it fails: an engine CI installs must run."""
    import os

    import pytest

    from backends.engines.llamacpp import LlamaCppConfig, find_llama_server
    from core.errors import ConfigError

    try:
        return find_llama_server(LlamaCppConfig(mode="server", server="llama-server"))
    except ConfigError as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI installs llama-server, but: {exc}")
        pytest.skip(str(exc))


@contextmanager
def loaded_backend(backend) -> Iterator[Callable[[Any], Any]]:
    """The backend loaded on an event loop of its own (vLLM binds to the loop it first runs in);
    yields that loop's ``run_until_complete``; closes the backend and the loop's tasks after."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        backend.load()
        yield loop.run_until_complete
    finally:
        backend.close()
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()
        asyncio.set_event_loop(None)
