"""backend=transformers backend.batching=continuous: transformers' own continuous batching,
on the real SmolLM2 in fp32 on CPU (short outputs: a decode step takes long on a shared CPU)."""

import asyncio
import json
import sys
import time

import pytest
from conftest import loads_engine, run_warnings
from engine_helpers import ask, collect, request
from engine_helpers import make_backend as _make

from backends import SamplingParams, TokenChunk
from backends.engines.transformers import TransformersConfig
from core.errors import ConfigError


def make_backend(model, **overrides):
    return _make("transformers", model, **overrides)


@pytest.fixture(scope="module")
@loads_engine
def cb(real_model):
    backend = make_backend(
        real_model,
        batching="continuous",
        max_batch_size=4,
        cb_cache_tokens=2048,
        cb_max_batch_tokens=512,
        cb_page_size=64,
    )
    yield backend
    backend.close()


@pytest.fixture(scope="module")
@loads_engine
def serial(real_model):
    backend = make_backend(real_model)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def tok(cb):
    return cb.get_tokenizer()


@pytest.mark.engine
def test_exact_length_stamps_and_prompt_as_given(cb, tok):
    ids = ask(tok, "Write a poem about the sea.")
    before = time.perf_counter()
    chunks, done = asyncio.run(collect(cb, request(0, ids, 9)))
    assert [len(c.token_ids) for c in chunks] == [1] * 9
    assert done.finish_reason == "length"
    times = [c.t for c in chunks]
    assert before <= done.scheduled_t <= times[0] and times == sorted(times)
    assert all(c.handed_t is not None and c.handed_t >= c.t for c in chunks)
    assert done.engine_stats["prompt_tokens"] == len(ids)  # the ids as given: no BOS added
    assert cb.engine_info()["batching"] == "continuous"


@pytest.mark.engine
def test_stops_at_eos_without_outputting_it(cb, tok):
    ids = ask(tok, "What is the capital of France?")
    chunks, done = asyncio.run(collect(cb, request(0, ids, 40, exact=False)))
    out = [t for c in chunks for t in c.token_ids]
    assert "Paris" in tok.decode(out)
    assert done.finish_reason == "stop" and len(out) < 40
    assert not set(out) & set(cb._eos_ids)


@pytest.mark.engine
def test_batched_equals_serial_under_greedy(cb, serial, tok):
    """Requests of different prompt and output lengths share forward passes, and each says
    exactly what it says alone (fp32, greedy)."""
    prompts = [ask(tok, t) for t in ("What is the capital of France?", "Name three colours.", "Why is the sky blue?")]
    lengths = [10, 6, 8]

    async def together():
        return await asyncio.gather(*(collect(cb, request(i, p, n)) for i, (p, n) in enumerate(zip(prompts, lengths))))

    batched = asyncio.run(together())
    for i, (p, n) in enumerate(zip(prompts, lengths)):
        alone, _ = asyncio.run(collect(serial, request(i, p, n)))
        assert [c.token_ids for c in batched[i][0]] == [c.token_ids for c in alone], i


@pytest.mark.engine
def test_a_later_request_joins_the_running_batch(cb, tok):
    """The second request arrives while the first decodes, and streams before the first ends."""
    first_token = asyncio.Event()

    async def long_one():
        chunks = []
        async for event in cb.stream(request(0, ask(tok, "Tell me a long story."), 16)):
            if isinstance(event, TokenChunk):
                chunks.append(event)
                first_token.set()
        return chunks

    async def late_one():
        await first_token.wait()
        sent = time.perf_counter()
        chunks, done = await collect(cb, request(1, ask(tok, "Hi!"), 3))
        return sent, chunks, done

    async def both():
        return await asyncio.gather(long_one(), late_one())

    long_chunks, (sent, late_chunks, late_done) = asyncio.run(both())
    assert len(long_chunks) == 16 and len(late_chunks) == 3
    assert long_chunks[0].t < sent < late_done.scheduled_t
    assert late_chunks[-1].t < long_chunks[-1].t  # it ran beside the first, not after it


@pytest.mark.engine
def test_cancellation_frees_the_engine(cb, tok):
    ids = ask(tok, "Count from one to a thousand.")

    async def cancel_after_two():
        stream = cb.stream(request(0, ids, 500))
        n = 0
        async for event in stream:
            n += isinstance(event, TokenChunk)
            if n == 2:
                break
        await stream.aclose()

    asyncio.run(cancel_after_two())
    deadline = time.monotonic() + 60
    while cb._cb.engine_requests() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cb._cb.engine_requests() == 0 and cb._cb.in_flight() == 0
    chunks, done = asyncio.run(collect(cb, request(1, ids, 3)))
    assert len(chunks) == 3 and done.finish_reason == "length"


@pytest.mark.engine
def test_one_decoding_setting_at_a_time(cb, tok):
    ids = ask(tok, "Hello!")
    sampled = SamplingParams(temperature=0.8, top_p=0.9, top_k=20, seed=3)

    async def mixed():
        greedy = asyncio.ensure_future(collect(cb, request(0, ids, 4)))
        await asyncio.sleep(0)  # the greedy request is in flight
        try:
            with pytest.raises(RuntimeError, match="one setting"):
                await collect(cb, request(1, ids, 4, sampling=sampled))
        finally:
            await greedy

    asyncio.run(mixed())
    chunks, done = asyncio.run(collect(cb, request(2, ids, 4, sampling=sampled)))  # idle: the manager is rebuilt
    assert len(chunks) == 4 and done.finish_reason == "length"
    chunks, _ = asyncio.run(collect(cb, request(3, ids, 4)))  # and back to greedy
    assert len(chunks) == 4


def test_config_errors():
    bad = [
        dict(batching="dynamic"),
        dict(batching="continuous", attn_implementation="flex_attention"),
        dict(batching="continuous", cb_cache_tokens=0),
        dict(batching="continuous", cb_page_size=0),
    ]
    for fields in bad:
        with pytest.raises(ConfigError):
            TransformersConfig(**fields).validate()
    TransformersConfig(batching="continuous", cb_cache_tokens=None, attn_implementation="eager").validate()


def test_flash_attention_on_cpu_is_one_clear_error(real_model):
    with pytest.raises(ConfigError, match="needs CUDA"):
        make_backend(real_model, batching="continuous", device="cpu", attn_implementation="flash_attention_2")


@pytest.mark.engine
@pytest.mark.timeout(600)  # its server may take backend.startup_timeout_s=300 to start
def test_server_mode_runs_transformers_serve_with_continuous_batching(tmp_path):
    """backend.mode=server: a real `transformers serve --continuous-batching`, with the cache
    settings, start to stop (its plain server is run by the conformance suite)."""
    import psutil
    from conftest import make_config

    from backends.server.presets import transformers_serve_available
    from harness.results.store import load_requests
    from harness.run.point import run_benchmark

    assert transformers_serve_available(sys.executable) is None, (
        "pip install -e '.[test]' installs transformers[serving]"
    )

    cfg = make_config(
        "backend=transformers",
        "backend.mode=server",
        "backend.batching=continuous",
        "backend.cb_cache_tokens=1024",
        "backend.cb_page_size=64",
        "backend.startup_timeout_s=300",
        "model=tiny-random",
        "workload=synthetic",
        "workload.input_len=48",
        "workload.output_len=6",
        "workload.num_requests=4",
        "workload.concurrency=2",
        "progress=false",
    )
    outcome = run_benchmark(cfg, tmp_path)
    df = load_requests(tmp_path)
    assert df.error.isna().all() and (df.output_tokens == 6).all() and (df.prompt_tokens == 48).all()
    assert df.engine_stats.map(lambda s: json.loads(s)["output_tokens_source"]).eq("usage").all()
    assert run_warnings(outcome.summary.warnings) == []  # exact lengths through the logit bias on eos ids
    assert outcome.summary.backend["engine"] == "transformers"
    assert (
        not psutil.pid_exists(outcome.summary.backend["info"]["server"]["pid"])
        or psutil.Process(outcome.summary.backend["info"]["server"]["pid"]).status() == psutil.STATUS_ZOMBIE
    )
    log = (tmp_path / "server.log").read_text()
    assert "transformers.cli.transformers serve" in log and "POST /v1/chat/completions" in log
    assert "--continuous-batching --cb-block-size 64 --cb-num-blocks 16 --cb-max-batch-tokens 1024" in log
    assert "CB: True" in log  # the server says it served them through continuous batching
