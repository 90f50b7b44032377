"""Helpers shared by the engine tests: build a backend, make a request, read its stream."""
from __future__ import annotations

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


def request(i, ids, n, exact=True, sampling=SamplingParams(), session=0, turn=0) -> GenerationRequest:
    return GenerationRequest(request_id=i, prompt_token_ids=ids, max_new_tokens=n, exact_output_len=exact,
                             sampling=sampling, session_id=session, turn=turn)


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
    renderer = tokenizer_or_renderer if isinstance(tokenizer_or_renderer, PromptRenderer) else PromptRenderer(tokenizer_or_renderer)
    return renderer.render([{"role": "user", "content": text}])
