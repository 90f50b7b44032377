"""llama.cpp for real on the real SmolLM2 GGUF: plain and batched, lengths, caches, bad input.
What every backend must do (lengths, EOS, batched = serial, cancellation, prompt count, stamps)
is tests/test_conformance.py; this file keeps what is specific to this engine."""

import asyncio

import pytest
from conftest import loads_engine, run_warnings
from engine_helpers import ask, collect, request
from engine_helpers import make_backend as _make

from core.errors import ConfigError, ModelError
from core.model import ModelFiles
from workloads.prompts import PromptRenderer


def make_backend(model, *args, **overrides):
    return _make("llamacpp", model, *args, **overrides)


@pytest.fixture(scope="module")
def renderer(real_tokenizer):
    return PromptRenderer(real_tokenizer)


@pytest.fixture(scope="module")
@loads_engine
def plain(real_model):
    backend = make_backend(real_model)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
@loads_engine
def batched(real_model):
    backend = make_backend(real_model, batched=True, max_batch_size=4, n_ctx=1024)
    yield backend
    backend.close()


@pytest.mark.engine
def test_exact_length_and_llama_counters(plain, renderer):
    ids = ask(renderer, "What is the capital of France?")
    chunks, done = asyncio.run(collect(plain, request(1, ids, 24)))
    assert len(chunks) == 24 and done.finish_reason == "length"
    stats = done.engine_stats
    assert stats["llama_n_p_eval"] == len(ids)  # the whole prompt was evaluated: no cache hit
    assert stats["llama_n_eval"] == 23  # the first token comes from the prompt's evaluation
    assert stats["llama_eval_tps"] > 0 and stats["cached_tokens"] == 0


@pytest.mark.engine
def test_identical_prompts_do_not_hit_the_cache(plain, renderer):
    ids = ask(renderer, "Name a colour.")
    _, first = asyncio.run(collect(plain, request(2, ids, 4)))
    _, second = asyncio.run(collect(plain, request(3, ids, 4)))
    assert first.engine_stats["cached_tokens"] == second.engine_stats["cached_tokens"] == 0
    assert second.engine_stats["llama_n_p_eval"] == len(ids)


@pytest.mark.engine
def test_a_session_may_keep_its_prefix(real_model, renderer, real_tokenizer):
    backend = make_backend(real_model, keep_session_cache=True)
    try:
        history = [{"role": "user", "content": "Tell me about the sea."}]
        chunks, _ = asyncio.run(collect(backend, request(0, renderer.render(history), 12, session=5, turn=0)))
        history += [
            {
                "role": "assistant",
                "content": real_tokenizer.decode([c.token_ids[0] for c in chunks], skip_special_tokens=True),
            },
            {"role": "user", "content": "And the mountains?"},
        ]
        ids = renderer.render(history)
        _, done = asyncio.run(collect(backend, request(1, ids, 4, session=5, turn=1)))
        assert done.engine_stats["cached_tokens"] > 20
        assert done.engine_stats["llama_n_p_eval"] == len(ids) - done.engine_stats["cached_tokens"]
    finally:
        backend.close()


@pytest.mark.engine
def test_batched_matches_plain_greedy_output(plain, batched, renderer):
    prompts = [
        ask(renderer, q)
        for q in (
            "What is the capital of France?",
            "Write a haiku about rain.",
            "Count from one to five.",
            "Who wrote Hamlet?",
        )
    ]
    expected = [
        [c.token_ids[0] for c in asyncio.run(collect(plain, request(i, p, 10)))[0]] for i, p in enumerate(prompts)
    ]

    async def together():
        return await asyncio.gather(*(collect(batched, request(i, p, 10)) for i, p in enumerate(prompts)))

    results = asyncio.run(together())
    for (chunks, done), want in zip(results, expected):
        got = [c.token_ids[0] for c in chunks]
        # batched float arithmetic may differ in the last bits; the greedy text must agree at the start
        assert got[:4] == want[:4]
        assert len(got) == 10 and done.finish_reason == "length"
        # llama.cpp files every multi-token decode under prompt eval, so batched steps land there
        assert done.engine_stats["llama_batch_n_p_eval"] > 0
    # all four were in flight together: each one's first token came before any of them finished
    firsts = [chunks[0].t for chunks, _ in results]
    lasts = [chunks[-1].t for chunks, _ in results]
    assert max(firsts) < min(lasts)


def test_hf_folder_without_gguf_is_refused(tiny_model):
    with pytest.raises(ModelError, match="has no GGUF file"):
        make_backend(tiny_model, load=False)


def test_corrupt_gguf_is_refused(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"not a model at all" * 100)
    with pytest.raises(ModelError, match="not a GGUF file"):
        make_backend(ModelFiles(name="broken", source=str(bad), gguf_file=bad), load=False)


def test_context_too_small_for_the_prompt(real_model, renderer):
    from workloads.base import SessionSpec, TurnSpec, WorkloadPlan

    backend = make_backend(real_model, load=False, n_ctx=64)
    ids = ask(renderer, "word " * 80)
    plan = WorkloadPlan("synthetic", [SessionSpec(0, [TurnSpec("x", 8, prompt_token_ids=ids)])], [], True, None, False)
    with pytest.raises(ConfigError, match="backend.n_ctx=64 is too small"):
        backend.check_workload(plan)


@pytest.mark.engine
def test_chat_run_end_to_end(tmp_path):
    from conftest import make_config

    from harness.results.store import load_requests
    from harness.run.point import run_benchmark

    cfg = make_config(
        "backend=llamacpp",
        "workload=chat",
        "workload.sessions=2",
        "workload.turns=2",
        "workload.output_len=16",
        "workload.concurrency=1",
        "backend.keep_session_cache=true",
    )
    outcome = run_benchmark(cfg, tmp_path)
    df = load_requests(tmp_path)
    assert len(df) == 4 and df.error.isna().all()
    # one session at a time: each second turn finds its session's prefix still in the cache
    assert (df[df.turn == 1].cached_tokens > 0).all() and (df[df.turn == 0].cached_tokens == 0).all()
    assert outcome.summary.per_turn[1]["cached_share"] > 0.5
    assert outcome.summary.backend["info"]["prefix_cache"] == "kept within a chat session"
    assert outcome.summary.memory["weights_bytes"] > 50e6


@pytest.mark.engine
def test_batched_synthetic_run_end_to_end(tmp_path):
    from conftest import make_config

    from harness.results.store import load_requests
    from harness.run.point import run_benchmark

    cfg = make_config(
        "backend=llamacpp",
        "backend.batched=true",
        "workload=synthetic",
        "workload.num_requests=4",
        "workload.concurrency=4",
        "workload.input_len=64",
        "workload.output_len=8",
    )
    outcome = run_benchmark(cfg, tmp_path)
    df = load_requests(tmp_path)
    assert (df.output_tokens == 8).all() and (df.prompt_tokens == 64).all()
    assert run_warnings(outcome.summary.warnings) == []


@pytest.mark.slow
def test_cli_refuses_a_folder_without_gguf(tmp_path):
    from conftest import run_harness_cli

    proc = run_harness_cli("backend=llamacpp", "model=tiny-random", f"output_root={tmp_path}", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: model tiny-random has no GGUF file: pass model.path=/path/to/model.gguf"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.engine
def test_server_mode_chat_and_exact_lengths(tmp_path):
    from conftest import make_config

    from harness.results.store import load_requests
    from harness.run.point import run_benchmark

    cfg = make_config(
        "backend=llamacpp",
        "backend.mode=server",
        "workload=synthetic",
        "workload.num_requests=3",
        "workload.concurrency=3",
        "workload.input_len=64",
        "workload.output_len=12",
    )
    outcome = run_benchmark(cfg, tmp_path)
    df = load_requests(tmp_path)
    # llama_cpp.server sends no usage: counts come from re-tokenizing; the logit bias gives exact lengths
    assert (df.output_tokens == 12).all() and df.error.isna().all()
    assert run_warnings(outcome.summary.warnings) == []
    assert "llama_cpp.server" in (tmp_path / "server.log").read_text()


@pytest.mark.engine
def test_sweep_reuses_llamacpp_and_forgets_kept_prefixes(tmp_path):
    """keep_session_cache keeps prefixes in the slots; between points they are forgotten unless asked not to."""
    import json

    from conftest import run_harness_cli

    from harness.results.store import load_summary

    proc = run_harness_cli(
        "-m",
        "backend=llamacpp",
        "backend.batched=true",
        "backend.keep_session_cache=true",
        "workload=chat",
        "workload.sessions=2",
        "workload.turns=2",
        "workload.user_len=24",
        "workload.output_len=6",
        "workload.concurrency=2",
        "progress=false",
        "report=false",
        "sweep.reset_prefix_cache=true,false",
        "seed=0,0",
        f"output_root={tmp_path}",
        cwd=tmp_path,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    sweep = json.loads(next(tmp_path.glob("sweep-*/sweep.json")).read_text())
    assert sweep["engine_loads"] == 1
    # point 0: emptied after its warm-up; point 1: between points; points 2 and 3 keep the cache
    assert [p["prefix_cache_reset"] for p in sweep["points"]] == [True, True, None, None]
    first_turn = [load_summary(p["run_dirs"][0])["per_turn"][0]["cached_share"] for p in sweep["points"]]
    assert first_turn[0] == 0  # nothing left from the warm-up request
    assert first_turn[1] < first_turn[3]  # after a reset, turn 0 finds less of the last point's prompts
