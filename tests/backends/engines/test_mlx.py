"""MLX (mlx-lm's Linux CPU build) for real, on tiny-random (MLX on this CPU decodes the real
model at ~2 tokens/s). What every backend must do (lengths, EOS, batched = serial,
cancellation, prompt count, stamps) is tests/test_conformance.py, on the real model; this file
keeps what is specific to this engine."""

import asyncio

import pytest
from conftest import loads_engine, run_warnings
from engine_helpers import ask, collect, request
from engine_helpers import make_backend as _make

from core.errors import ModelError
from core.model import ModelFiles


def make_backend(model, *args, **overrides):
    return _make("mlx", model, *args, **overrides)


@pytest.fixture(scope="module")
@loads_engine
def tiny_continuous(tiny_model):
    backend = make_backend(tiny_model)
    yield backend
    backend.close()


def prompts(backend, texts):
    tokenizer = backend.get_tokenizer()
    return [ask(tokenizer, t) for t in texts]


@pytest.mark.engine
def test_continuous_batching_serves_requests_together(tiny_continuous):
    ids = prompts(tiny_continuous, ["Hello there.", "A much longer question about ships and the sea?", "Why?"])

    async def together():
        return await asyncio.gather(*(collect(tiny_continuous, request(i, p, 10 + 5 * i)) for i, p in enumerate(ids)))

    results = asyncio.run(together())
    for i, (chunks, done) in enumerate(results):
        assert len(chunks) == 10 + 5 * i and done.finish_reason == "length"
        assert done.engine_stats["mlx_batch_generation_tps"] > 0
    firsts = [chunks[0].t for chunks, _ in results]
    lasts = [chunks[-1].t for chunks, _ in results]
    assert max(firsts) < min(lasts)  # in flight together, not one after another


@pytest.mark.engine
def test_continuous_matches_serial_greedy_output(tiny_model, tiny_continuous):
    ids = prompts(tiny_continuous, ["The quick brown fox"])[0]
    batched, _ = asyncio.run(collect(tiny_continuous, request(0, ids, 12)))
    serial_backend = make_backend(tiny_model, batching="serial")
    try:
        serial, done = asyncio.run(collect(serial_backend, request(1, ids, 12)))
    finally:
        serial_backend.close()
    assert [c.token_ids for c in batched] == [c.token_ids for c in serial]
    for key in ("mlx_prompt_tps", "mlx_generation_tps", "mlx_peak_memory_gb"):
        assert done.engine_stats[key] > 0  # mlx-lm's own per-request figures, in serial mode


@pytest.mark.engine
def test_quantized_copy_loads_and_generates(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path))
    backend = make_backend(tiny_model, quantize_bits=4)
    try:
        ids = prompts(backend, ["Hi"])[0]
        chunks, _ = asyncio.run(collect(backend, request(0, ids, 5)))
        assert len(chunks) == 5
        assert backend.engine_info()["model_path"].startswith(str(tmp_path))
    finally:
        backend.close()


def test_gguf_is_refused_in_one_line(tmp_path):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    with pytest.raises(ModelError, match="backend=mlx loads Hugging Face or MLX folders"):
        make_backend(ModelFiles(name="m", source=str(gguf), gguf_file=gguf), load=False)


@pytest.mark.engine
def test_synthetic_run_end_to_end(tmp_path):
    from conftest import make_config

    from harness.results.store import load_requests
    from harness.run.point import run_benchmark

    cfg = make_config(
        "backend=mlx",
        "model=tiny-random",
        "workload=synthetic",
        "workload.num_requests=4",
        "workload.concurrency=4",
        "workload.input_len=48",
        "workload.output_len=6",
    )
    outcome = run_benchmark(cfg, tmp_path)
    df = load_requests(tmp_path)
    assert (df.output_tokens == 6).all() and run_warnings(outcome.summary.warnings) == []
    assert outcome.summary.memory["kv_bytes_per_token"] == 2 * 2 * 1 * 64 * 2  # bf16 KV


@pytest.mark.slow
def test_cli_refuses_a_gguf_in_one_line(tmp_path, real_model):
    from conftest import run_harness_cli

    proc = run_harness_cli("backend=mlx", f"model.path={real_model.gguf_file}", f"output_root={tmp_path}", cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: backend=mlx loads Hugging Face or MLX folders")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.engine
def test_server_mode_end_to_end(tmp_path):
    from conftest import make_config

    from harness.results.store import load_requests
    from harness.run.point import run_benchmark

    cfg = make_config(
        "backend=mlx",
        "backend.mode=server",
        "model=tiny-random",
        "workload=synthetic",
        "workload.num_requests=3",
        "workload.concurrency=3",
        "workload.input_len=48",
        "workload.output_len=6",
    )
    outcome = run_benchmark(cfg, tmp_path)
    df = load_requests(tmp_path)
    assert (df.output_tokens == 6).all() and df.error.isna().all()
    assert outcome.summary.backend["mode"] == "server"


def test_rope_theta_is_passed_on_from_rope_parameters(tmp_path, real_model):
    """transformers 5 keeps rope_theta inside rope_parameters; mlx-lm would fall back to 10,000
    (SmolLM2's is 100,000) and compute another model: cross-engine agreement found it."""
    import json

    from backends.engines.mlx import rope_compat

    assert rope_compat(real_model.hf_dir) == {"rope_theta": 100000.0}
    (tmp_path / "config.json").write_text(json.dumps({"rope_theta": 5e5, "rope_parameters": {"rope_theta": 1.0}}))
    assert rope_compat(tmp_path) == {}  # a top-level value is mlx-lm's own to read
    assert rope_compat(tmp_path / "missing") == {}
