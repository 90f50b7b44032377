"""The transformers backend for real: tiny-random for speed, the real SmolLM2 where it matters.
What every backend must do (lengths, EOS, batched = serial, cancellation, prompt count, stamps)
is tests/test_conformance.py; this file keeps what is specific to this engine."""

import asyncio

import pytest
from conftest import loads_engine
from engine_helpers import ask, collect, request
from engine_helpers import make_backend as _make

from backends import SamplingParams
from backends.engines.transformers import TransformersConfig
from core.errors import ConfigError


def make_backend(model, *args, **overrides):
    return _make("transformers", model, *args, **overrides)


def prompt(backend, text):
    return ask(backend.get_tokenizer(), text)


@pytest.fixture(scope="module")
@loads_engine
def tiny_serial(tiny_model):
    backend = make_backend(tiny_model)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
@loads_engine
def tiny_static(tiny_model):
    backend = make_backend(tiny_model, batching="static", max_batch_size=4, batch_wait_s=0.05)
    yield backend
    backend.close()


@pytest.mark.engine
def test_serial_requests_wait_and_ttft_includes_the_wait(tiny_serial):
    ids = prompt(tiny_serial, "Tell me a story about a fox.")

    async def both():
        return await asyncio.gather(
            collect(tiny_serial, request(0, ids, 24)), collect(tiny_serial, request(1, ids, 24))
        )

    (a_chunks, a_done), (b_chunks, b_done) = asyncio.run(both())
    # one at a time: the second starts after the first has finished
    assert b_done.scheduled_t >= a_chunks[-1].t
    assert b_done.engine_stats["batch_size"] == 1


@pytest.mark.engine
def test_static_batching_serves_requests_together(tiny_static):
    tok_prompts = [
        prompt(tiny_static, t) for t in ("Hi.", "A longer question about the sea and ships?", "Why?", "Tell me more.")
    ]

    async def all_four():
        return await asyncio.gather(
            *(collect(tiny_static, request(i, p, 6 + 3 * i)) for i, p in enumerate(tok_prompts))
        )

    results = asyncio.run(all_four())
    for i, (chunks, done) in enumerate(results):
        assert len(chunks) == 6 + 3 * i  # each row stops at its own length
        assert done.engine_stats["batch_size"] == 4
    assert len({done.scheduled_t for _, done in results}) == 1


@pytest.mark.engine
def test_sampling_is_seeded(tiny_serial):
    ids = prompt(tiny_serial, "Once upon a time")
    sampling = SamplingParams(temperature=1.0, top_p=0.95, top_k=50, seed=7)
    a, _ = asyncio.run(collect(tiny_serial, request(0, ids, 10, sampling=sampling)))
    b, _ = asyncio.run(collect(tiny_serial, request(1, ids, 10, sampling=sampling)))
    assert [c.token_ids for c in a] == [c.token_ids for c in b]


@pytest.mark.engine
def test_memory_figures(tiny_serial):
    mem = tiny_serial.memory()
    assert mem["kv_bytes_per_value"] == 4  # float32 on CPU
    assert 20e6 < mem["weights_bytes"] < 40e6  # 6.6 M parameters × 4 bytes


def test_config_errors():
    for bad in (dict(batching="dynamic"), dict(dtype="int3"), dict(max_batch_size=0), dict(mode="remote")):
        with pytest.raises(ConfigError):
            TransformersConfig(**bad).validate()
