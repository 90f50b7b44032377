"""The engines the harness runs only as a server (TGI, TensorRT-LLM, DeepSpeed-MII, Ollama): their
commands, their config errors, and their HTTP path against a reference server that streams the
way each of them does. None of them runs on a CPU machine; their containers are checked in
test_container.py."""

import json
import os
import sys
from pathlib import Path

import pytest
from conftest import make_config
from reference_fixtures import chat_request, collect, reply_ids, run

from backends.factory import check_backend_available, create_backend
from backends.registry import backend_registry
from backends.server.backend import ServerBackend
from backends.server.container import ContainerConfig
from backends.server.presets import MII_MIN_TOKENS_MARGIN, mii_body, ollama_modelfile
from core.errors import ConfigError, ModelError
from core.types import SamplingParams
from harness.results.store import load_requests
from harness.run.point import run_benchmark
from refserver.dialects import DIALECTS

ENGINES = ("tgi", "tensorrt_llm", "deepspeed_mii", "ollama")


def engine_config(name, **overrides):
    cfg = backend_registry.get(name).config_cls(**overrides)
    cfg.validate()
    return cfg


def preset_of(name, model, **overrides):
    return backend_registry.get(name).cls.server_preset(engine_config(name, **overrides), model)


def fake_program(folder: Path, name: str, log: Path) -> Path:
    """An executable that appends its argv, OLLAMA_HOST and any -f file's text to ``log``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "args = sys.argv[1:]\n"
        "text = open(args[args.index('-f') + 1]).read() if '-f' in args else None\n"
        f"with open({str(log)!r}, 'a') as f:\n"
        "    f.write(json.dumps({'args': args, 'host': os.environ.get('OLLAMA_HOST'), 'file': text}) + '\\n')\n"
    )
    path.chmod(0o755)
    return path


# --- commands ------------------------------------------------------------------------------------


def test_tgi_builds_its_command(tiny_model):
    hf = str(tiny_model.hf_dir)
    p = preset_of(
        "tgi",
        tiny_model,
        dtype="bfloat16",
        num_shard=2,
        max_input_tokens=1024,
        max_total_tokens=2048,
        max_concurrent_requests=256,
        cuda_graphs=[1, 2, 4],
        trust_remote_code=True,
    )
    assert p.command == [
        "text-generation-launcher",
        "--model-id",
        hf,
        "--hostname",
        "127.0.0.1",
        "--port",
        "{port}",
        "--prometheus-port",
        "{aux_port}",
        "--usage-stats",
        "off",
        "--dtype",
        "bfloat16",
        "--num-shard",
        "2",
        "--max-input-tokens",
        "1024",
        "--max-total-tokens",
        "2048",
        "--max-concurrent-requests",
        "256",
        "--cuda-graphs",
        "1,2,4",
        "--trust-remote-code",
    ]
    assert not p.uses_python and (p.health_path, p.metrics_path, p.version_path) == ("/health", "/metrics", "/info")
    assert p.served_model_name == "tgi" and p.prompt_token_ids is False and p.extra_body is None
    assert p.cleanup_commands == [] and p.setup_commands == [] and p.files == {}


def test_tensorrt_llm_builds_its_command(tmp_path, tiny_model):
    hf = str(tiny_model.hf_dir)
    p = preset_of(
        "tensorrt_llm",
        tiny_model,
        max_batch_size=64,
        max_seq_len=4096,
        kv_cache_free_gpu_memory_fraction=0.8,
        dtype="bfloat16",
        llm_api_options={"kv_cache_config": {"enable_block_reuse": False}},
    )
    assert p.command == [
        "trtllm-serve",
        hf,
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
        "--backend",
        "pytorch",
        "--tp_size",
        "1",
        "--pp_size",
        "1",
        "--log_level",
        "warning",
        "--max_batch_size",
        "64",
        "--max_seq_len",
        "4096",
        "--kv_cache_free_gpu_memory_fraction",
        "0.8",
        "--extra_llm_api_options",
        "{files}/extra-llm-api-options.yaml",
    ]
    options = json.loads(p.files["extra-llm-api-options.yaml"])  # JSON: YAML reads it
    assert options == {"kv_cache_config": {"enable_block_reuse": False}, "dtype": "bfloat16"}
    assert (p.health_path, p.metrics_path, p.version_path) == ("/health", None, "/version")
    assert p.prompt_token_ids is True and p.served_model_name is None
    assert p.extra_body(chat_request(0, 7)) == {"ignore_eos": True, "min_tokens": 7}
    assert "--extra_llm_api_options" not in preset_of("tensorrt_llm", tiny_model).command  # nothing to write
    # with backend.python, the trtllm-serve beside that interpreter
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to(sys.executable)
    (venv / "trtllm-serve").write_text("#!/bin/sh\n")
    assert preset_of("tensorrt_llm", tiny_model, python=str(tmp_path / "venv")).command[0] == str(venv / "trtllm-serve")


def test_deepspeed_mii_builds_its_command_and_bodies(tiny_model):
    hf = str(tiny_model.hf_dir)
    p = preset_of("deepspeed_mii", tiny_model, tensor_parallel=2, max_length=8192)
    assert p.uses_python and p.command == [
        "-m",
        "mii.entrypoints.openai_api_server",
        "--model",
        hf,
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
        "--tensor-parallel",
        "2",
        "--replica-num",
        "1",
        "--max-length",
        "8192",
    ]
    assert p.served_model_name is None and p.prompt_token_ids is False and p.version_packages == ("deepspeed-mii",)
    # MII counts the prompt in min_new_tokens; it always samples, so greedy is top_k 1
    exact = chat_request(0, 7, prompt_ids=list(range(40)))
    assert mii_body(exact) == {"min_tokens": 40 + 7 + MII_MIN_TOKENS_MARGIN, "temperature": 1.0, "top_k": 1}
    sampled = chat_request(0, 7, exact=False)
    sampled.sampling = SamplingParams(temperature=0.7)
    assert mii_body(sampled) == {}


def test_ollama_imports_the_gguf_through_a_modelfile(real_model, tiny_model):
    p = preset_of(
        "ollama", real_model, num_ctx=8192, num_gpu=99, num_parallel=4, flash_attention=True, env={"OLLAMA_DEBUG": "1"}
    )
    gguf = str(real_model.gguf_file.resolve())
    assert p.command == ["ollama", "serve"] and not p.uses_python
    assert p.files == {"Modelfile": f"FROM {gguf}\nPARAMETER num_ctx 8192\nPARAMETER num_gpu 99\n"}
    assert p.setup_commands == [
        ["ollama", "create", "harness-smollm2-135m", "-f", "{files}/Modelfile"],
        ["ollama", "run", "harness-smollm2-135m", ""],
    ]  # the import, then the load
    assert p.env == {
        "OLLAMA_HOST": "127.0.0.1:{port}",
        "OLLAMA_KEEP_ALIVE": "-1",
        "OLLAMA_NUM_PARALLEL": "4",
        "OLLAMA_FLASH_ATTENTION": "1",
        "OLLAMA_DEBUG": "1",
    }
    assert p.served_model_name == "harness-smollm2-135m" and p.health_path == p.version_path == "/api/version"
    assert p.extra_body is None and p.prompt_token_ids is False
    assert preset_of("ollama", real_model, model_name="mine").setup_commands[0][2] == "mine"
    assert ollama_modelfile("/m/x.gguf", {}) == "FROM /m/x.gguf\n"
    with pytest.raises(ModelError):
        preset_of("ollama", tiny_model)  # needs a GGUF


# --- configuration ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["backend=tgi", "backend.mode=inprocess"], "backend=tgi runs as a server only (backend.mode=server)"),
        (
            ["backend=tgi", "backend.dtype=float32"],
            "backend.dtype must be one of float16, bfloat16 or null (got 'float32')",
        ),
        (
            ["backend=tgi", "backend.max_input_tokens=4096", "backend.max_total_tokens=2048"],
            "backend.max_input_tokens (4096) must be below backend.max_total_tokens (2048)",
        ),
        (["backend=tgi", "backend.num_shard=0"], "backend.num_shard must be >= 1 or null (got 0)"),
        (["backend=tgi", "backend.container.image=' '"], "backend.container.image must be an image name"),
        (
            ["backend=tensorrt_llm", "backend.backend=onnx"],
            "backend.backend must be one of pytorch, tensorrt, _autodeploy",
        ),
        (
            ["backend=tensorrt_llm", "backend.kv_cache_free_gpu_memory_fraction=1.5"],
            "backend.kv_cache_free_gpu_memory_fraction must be in (0, 1] (got 1.5)",
        ),
        (["backend=tensorrt_llm", "backend.tp_size=0"], "backend.tp_size must be >= 1 (got 0)"),
        (["backend=deepspeed_mii", "backend.replica_num=0"], "backend.replica_num must be >= 1 (got 0)"),
        (["backend=deepspeed_mii", "backend.mode=inprocess"], "backend=deepspeed_mii runs as a server only"),
        (["backend=ollama", "backend.endpoint=completions"], "backend=ollama serves chat only (backend.endpoint=chat)"),
        (
            ["backend=ollama", "backend.kv_cache_type=q2"],
            "backend.kv_cache_type must be one of f16, q8_0, q4_0 or null",
        ),
        (
            ["backend=ollama", "backend.models_dir=/data", "backend.container.image=ollama/ollama"],
            "backend.models_dir is for Ollama on this machine",
        ),
    ],
)
def test_bad_config_is_one_line(overrides, message):
    with pytest.raises(ConfigError) as info:
        make_config("model=tiny-random", *overrides)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_missing_program_is_named_before_any_model_loads(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on it
    for name, program, image in [
        ("tgi", "text-generation-launcher", "ghcr.io/huggingface/text-generation-inference"),
        ("tensorrt_llm", "trtllm-serve", "nvcr.io/nvidia/tensorrt-llm/release"),
        ("ollama", "ollama", "ollama/ollama"),
    ]:
        with pytest.raises(
            ConfigError, match=f"backend={name}: {program} is not on PATH .*backend.container.image={image}:<tag>"
        ):
            check_backend_available(engine_config(name))
    check_backend_available(engine_config("deepspeed_mii"))  # a module of backend.python
    with pytest.raises(ConfigError, match="backend.container.image is set, but docker is not on PATH"):
        check_backend_available(engine_config("tgi", container=ContainerConfig(image="x")))
    fake_program(tmp_path, "docker", tmp_path / "log")
    check_backend_available(engine_config("tgi", container=ContainerConfig(image="x")))


@pytest.mark.slow
def test_reference_backend_speaks_each_engines_dialect(tmp_path, tiny_model):
    """``backend=reference backend.dialect=<engine>``: a whole run against each dialect."""
    for name in ENGINES:
        cfg = make_config(
            "backend=reference",
            f"backend.dialect={name}",
            "backend.ttft_ms=1",
            "backend.itl_ms=1",
            "backend.count_prompt_tokens=false",
            "model=tiny-random",
            "workload=synthetic",
            "workload.input_len=48",
            "workload.output_len=5",
            "workload.num_requests=3",
            "workload.warmup_requests=0",
            "report=false",
        )
        preset = create_backend(cfg.backend, tiny_model).preset
        assert preset.health_path == (DIALECTS[name].health or "/v1/models")
        assert preset.prompt_token_ids is (None if DIALECTS[name].token_id_prompts else False)
        run_benchmark(cfg, tmp_path / name)
        df = load_requests(tmp_path / name)
        assert df.error.isna().all() and (df.output_tokens == 5).all(), name


# --- each preset's HTTP path ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ENGINES)
def test_each_engines_http_path_against_its_dialect(tmp_path, monkeypatch, real_model, name):
    """The preset's health path, model name, body extras, prompt form and setup steps, talking
    to a reference server that streams the way that engine's server does."""
    log = tmp_path / "ollama.jsonl"
    fake_program(tmp_path / "bin", "ollama", log)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    cfg = engine_config(
        name,
        startup_timeout_s=60,
        server_command=[
            "{python}",
            "-m",
            "refserver",
            "--port",
            "{port}",
            "--dialect",
            name,
            "--tokens",
            "1000",
            "--ttft-ms",
            "2",
            "--itl-ms",
            "1",
            "--tokenizer",
            "{model}",
            "--model-name",
            "whatever",
        ],
    )
    backend = ServerBackend(cfg, real_model, backend_registry.get(name).cls.server_preset(cfg, real_model))
    backend.run_dir = tmp_path
    backend.load()
    try:

        async def three():
            import asyncio

            return await asyncio.gather(*(collect(backend.stream(chat_request(i, 9 + i))) for i in range(3)))

        results = run(three())
        port = backend.server.port
    finally:
        backend.close()
    for i, (_chunks, done) in enumerate(results):
        assert (
            sum(done.chunk_tokens) == len(reply_ids(done, backend.get_tokenizer())) == 9 + i
            and done.engine_stats["output_tokens"] == 9 + i
        )
        assert done.finish_reason == "length" and len(done.text.split()) == 9 + i
        assert done.engine_stats["output_tokens_source"] == ("usage" if DIALECTS[name].usage else "retokenized")
    assert backend.client.model_name == (
        "tgi" if name == "tgi" else "harness-smollm2-135m" if name == "ollama" else "whatever"
    )
    if name == "ollama":  # imported from the Modelfile once the server answered, then loaded
        calls = [json.loads(line) for line in log.read_text().splitlines()]
        files = tmp_path / "server-files"
        assert [c["args"] for c in calls] == [
            ["create", "harness-smollm2-135m", "-f", f"{files}/Modelfile"],
            ["run", "harness-smollm2-135m", ""],
        ]
        assert calls[0]["file"] == f"FROM {real_model.gguf_file.resolve()}\nPARAMETER num_ctx 4096\n"
        assert {c["host"] for c in calls} == {f"127.0.0.1:{port}"}
        assert "running ollama create harness-smollm2-135m" in backend.server.log_path.read_text()
    else:
        assert not log.exists()
