"""Server mode: presets, the managed child process, and whole runs through backend=reference."""

import json
import os
import socket
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import make_config, run_harness_cli, run_warnings
from reference_fixtures import chat_request, collect, reply_ids, run

from backends import BackendConfig
from backends.base import Backend
from backends.engines.reference import ReferenceConfig
from backends.factory import create_backend
from backends.preset import ServerPreset
from backends.registry import backend_registry
from backends.server.backend import ServerBackend
from backends.server.launch import choose_port, free_port, resolve_python, server_argv
from backends.server.presets import (
    eog_token_ids,
    llamacpp_preset,
    mlx_preset,
    sglang_preset,
    vllm_preset,
)
from backends.server.process import ManagedServer, ServerStartError
from core.errors import ConfigError, ModelError
from harness.results.store import load_requests, load_summary
from harness.run.point import run_benchmark
from refserver.dialects import WORDS
from workloads.prompts import PromptRenderer, chat_messages

FAST = ["model=tiny-random", "workload=synthetic", "workload.input_len=48", "workload.output_len=6", "progress=false"]
REF = ["backend=reference", "backend.ttft_ms=2", "backend.itl_ms=1"]


def gone(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def run_dir_of(proc):
    return Path(proc.stdout.strip().splitlines()[-1].removeprefix("results: "))


# --- command building -------------------------------------------------------------------------


def test_resolve_python(tmp_path):
    assert resolve_python(None) == sys.executable
    venv = Path(sys.executable).parent.parent
    assert resolve_python(str(venv)) == str((venv / "bin" / "python").absolute())  # a venv folder
    assert resolve_python(sys.executable) == sys.executable
    with pytest.raises(ConfigError, match="backend.python /no/such/python does not exist"):
        resolve_python("/no/such/python")
    with pytest.raises(ConfigError, match="not a virtual environment"):
        resolve_python(str(tmp_path))


def test_server_argv_placeholders_command_and_args(tiny_model, real_model):
    preset = ServerPreset(command=["-m", "srv", "--model", "{model}", "--port", "{port}", '--json={"a": 1}'])
    cfg = BackendConfig(name="x", mode="server", server_args=["--extra", "1"])
    argv = server_argv(cfg, preset, tiny_model, 1234)
    assert argv == [
        sys.executable,
        "-m",
        "srv",
        "--model",
        str(tiny_model.hf_dir),
        "--port",
        "1234",
        '--json={"a": 1}',
        "--extra",
        "1",
    ]
    custom = BackendConfig(
        name="x", mode="server", server_command=["{python}", "serve.py", "{gguf}", "--host", "{host}"]
    )
    assert server_argv(custom, preset, real_model, 1) == [
        sys.executable,
        "serve.py",
        str(real_model.gguf_file),
        "--host",
        "127.0.0.1",
    ]
    with pytest.raises(ModelError, match="no GGUF"):  # {gguf} is resolved only when used, then required
        server_argv(custom, preset, tiny_model, 1)
    full = ServerPreset(command=["llama-server", "-m", "{gguf}"], uses_python=False)
    assert server_argv(BackendConfig(mode="server"), full, real_model, 1)[0] == "llama-server"


def test_server_config_validation():
    for kwargs, message in [
        (dict(port=70000), "backend.port must be 0"),
        (dict(startup_timeout_s=0), "backend.startup_timeout_s must be > 0"),
        (dict(server_command=[]), "non-empty list"),
        (dict(request_timeout_s=-1), "backend.request_timeout_s must be > 0"),
    ]:
        with pytest.raises(ConfigError, match=message):
            BackendConfig(mode="server", **kwargs).validate()


def test_choose_port_replaces_a_port_in_use():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        port, note = choose_port(taken)
        assert port != taken and note == f"port {taken} is in use; using port {port} instead"
    assert choose_port(0)[1] is None
    free = free_port()
    assert choose_port(free) == (free, None)


def test_backend_without_a_server_mode(tiny_model):
    with pytest.raises(ConfigError, match="backend nothing has no server mode"):
        Backend.server_preset(BackendConfig(name="nothing", mode="server"), tiny_model)
    with pytest.raises(ConfigError, match="runs as a server only"):
        ReferenceConfig(mode="inprocess").validate()


# --- presets ----------------------------------------------------------------------------------


def test_engine_presets_build_their_commands(tiny_model, real_model):
    cfg = BackendConfig(mode="server")
    hf = str(tiny_model.hf_dir)
    v = vllm_preset(cfg, tiny_model, extra_args=["--enforce-eager"], env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    assert v.command == [
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        hf,
        "--served-model-name",
        "tiny-random",
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
        "--enforce-eager",
    ]
    assert (v.health_path, v.metrics_path, v.served_model_name) == ("/health", "/metrics", "tiny-random")
    # /reset_prefix_cache (between sweep points) exists only in vLLM's dev mode
    assert (
        v.env == {"VLLM_SERVER_DEV_MODE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
        and v.reset_cache_path == "/reset_prefix_cache"
    )
    # return_token_ids: the reply's ids come from vLLM, not from re-tokenizing its text
    assert v.extra_body(chat_request(0, 7)) == {"ignore_eos": True, "min_tokens": 7, "return_token_ids": True}
    assert v.extra_body(chat_request(0, 7, exact=False)) == {"return_token_ids": True}
    s = sglang_preset(cfg, tiny_model)
    assert s.command[:4] == ["-m", "sglang.launch_server", "--model-path", hf] and "--enable-metrics" in s.command
    assert s.reset_cache_path == "/flush_cache"
    assert s.metrics_path == "/metrics" and s.extra_body(chat_request(0, 3)) == {"ignore_eos": True, "min_tokens": 3}
    lc = llamacpp_preset(cfg, real_model)
    assert lc.command[:4] == ["-m", "llama_cpp.server", "--model", str(real_model.gguf_file)]
    assert lc.command[-2:] == ["--interrupt_requests", "False"] and "{port}" in lc.command
    assert (lc.health_path, lc.metrics_path, lc.prompt_token_ids) == ("/v1/models", None, False)
    assert lc.extra_body(chat_request(0, 3)) == {"logit_bias": {"0": -1e9, "2": -1e9, "4": -1e9}}
    assert llamacpp_preset(cfg, real_model, eog_ids=[2]).extra_body(chat_request(0, 3)) == {"logit_bias": {"2": -1e9}}
    with pytest.raises(ModelError):
        llamacpp_preset(cfg, tiny_model)  # needs a GGUF
    m = mlx_preset(cfg, tiny_model)
    assert m.command[:4] == ["-m", "mlx_lm.server", "--model", hf] and m.served_model_name == "default_model"
    assert m.extra_body(chat_request(0, 3, exact=False)) == {}
    assert eog_token_ids(real_model) == [0, 2, 4]


def test_transformers_serve_missing_is_a_clear_error(tmp_path, tiny_model):
    import subprocess

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True, timeout=120)
    cfg = make_config("model=tiny-random", "backend.mode=server", f"backend.python={tmp_path / 'bare'}").backend
    with pytest.raises(ConfigError, match="has no serve command"):
        create_backend(cfg, tiny_model)


@pytest.mark.parametrize(
    "preset_fn,dialect",
    [
        (vllm_preset, "openai"),
        (sglang_preset, "sglang"),
        (llamacpp_preset, "llamacpp"),
        (mlx_preset, "mlx"),
    ],
)
def test_each_presets_http_path_against_its_dialect(tmp_path, real_model, preset_fn, dialect):
    """Each engine's preset (health path, model name, body extras, prompt form) talks to a
    reference server that streams the way that engine's server does."""
    cfg = BackendConfig(
        name=dialect,
        mode="server",
        startup_timeout_s=60,
        server_command=[
            "{python}",
            "-m",
            "refserver",
            "--port",
            "{port}",
            "--dialect",
            dialect,
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
    backend = ServerBackend(cfg, real_model, preset_fn(cfg, real_model))
    backend.run_dir = tmp_path
    backend.load()
    try:

        async def both():
            import asyncio

            return await asyncio.gather(*(collect(backend.stream(chat_request(i, 9 + i))) for i in range(3)))

        results = run(both())
        assert backend.server.url_root in backend.engine_info()["server"]["url"]
    finally:
        backend.close()
    for i, (_chunks, done) in enumerate(results):
        assert (
            sum(done.chunk_tokens) == len(reply_ids(done, backend.get_tokenizer())) == 9 + i
            and done.engine_stats["output_tokens"] == 9 + i
        )
        assert done.finish_reason == "length"
        assert done.engine_stats["output_tokens_source"] == ("retokenized" if dialect == "llamacpp" else "usage")
    assert gone(backend.server.pid)
    assert (tmp_path / "server.log").exists()


# --- the managed process ---------------------------------------------------------------------


@pytest.mark.slow
def test_a_server_that_never_becomes_healthy(tmp_path):
    script = tmp_path / "slow.py"
    script.write_text(
        "import os, time\nprint('booting', os.getpid(), flush=True)\nprint('still loading', flush=True)\ntime.sleep(120)\n"
    )
    server = ManagedServer(
        [sys.executable, str(script)], port=free_port(), log_path=tmp_path / "server.log", stop_grace_s=2
    )
    server.start()
    t0 = time.monotonic()
    with pytest.raises(ServerStartError) as info:
        server.wait_healthy(1.5)
    assert 1.5 <= time.monotonic() - t0 < 15
    message = str(info.value)
    assert "did not become healthy within 1.5 s" in message
    assert "  | booting" in message and "  | still loading" in message and str(tmp_path / "server.log") in message
    assert gone(server.pid)


def test_a_server_that_exits_at_start_shows_its_log(tmp_path):
    server = ManagedServer(
        [sys.executable, "-c", "import sys; print('bad flag --nope'); sys.exit(5)"],
        port=free_port(),
        log_path=tmp_path / "server.log",
    )
    server.start()
    with pytest.raises(ServerStartError, match=r"exited with code 5 before it became healthy(.|\n)*bad flag --nope"):
        server.wait_healthy(30)
    server.stop()


def test_stop_kills_the_whole_group_even_when_sigterm_is_ignored(tmp_path):
    code = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)'])\n"
        "print('pid of the child:', child.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    server = ManagedServer(
        [sys.executable, "-c", code], port=free_port(), log_path=tmp_path / "server.log", stop_grace_s=1
    )
    server.start()
    deadline = time.time() + 30
    while "pid of the child: " not in server.log_path.read_text().split("\n", 1)[-1] and time.time() < deadline:
        time.sleep(0.05)
    child = int(server.log_path.read_text().rsplit("pid of the child: ", 1)[1].split()[0])
    assert os.getpgid(child) == server.pid  # the grandchild is in the server's group
    t0 = time.monotonic()
    server.stop()
    assert time.monotonic() - t0 < 15
    for _ in range(100):
        if gone(child):
            break
        time.sleep(0.05)
    assert gone(server.pid) and gone(child)
    assert "stopped (exit code -9)" in server.log_path.read_text()


def test_a_server_that_cannot_start_at_all(tmp_path):
    server = ManagedServer(["/no/such/server-binary"], port=free_port(), log_path=tmp_path / "server.log")
    with pytest.raises(ServerStartError, match="could not start the server"):
        server.start()


# --- whole runs ------------------------------------------------------------------------------


@pytest.mark.slow
def test_cli_run_in_server_mode(tmp_path):
    proc = run_harness_cli(
        *REF,
        *FAST,
        "workload.num_requests=6",
        "workload.concurrency=3",
        f"output_root={tmp_path}",
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    run_dir = run_dir_of(proc)
    log = (run_dir / "server.log").read_text()
    assert (
        "starting reference server" in log
        and "listening on http://127.0.0.1:" in log
        and "stopped (exit code 0)" in log
    )
    summary = load_summary(run_dir)
    assert summary["status"] == "complete" and summary["backend"]["mode"] == "server"
    assert summary["backend"]["engine"] == "reference" and summary["backend"]["engine_version"] == "0.1.0"
    info = summary["backend"]["info"]["server"]
    assert gone(info["pid"])  # the server and its group are gone
    assert info["command"][:3] == [sys.executable, "-m", "refserver"]
    key = summary["server_metrics"]["key"]
    assert key["ttft_s"]["count"] == 6 and key["itl_s"]["count"] == 6 * 5  # the measured phase only
    assert summary["server_metrics"]["counters"]["vllm:generation_tokens"] == 36
    assert (run_dir / "metrics_before.txt").exists() and (run_dir / "metrics_after.txt").exists()
    df = load_requests(run_dir)
    assert (df.output_tokens == 6).all() and (df.prompt_tokens == 48).all() and df.error.isna().all()
    assert run_warnings(summary["warnings"]) == []
    assert "server's own metrics: TTFT mean" in proc.stdout


@pytest.mark.slow
def test_cli_server_never_healthy_fails_after_the_timeout_with_its_log(tmp_path):
    script = tmp_path / "slow.py"
    script.write_text("import time\nprint('loading weights', flush=True)\ntime.sleep(120)\n")
    t0 = time.monotonic()
    proc = run_harness_cli(
        *REF,
        *FAST,
        f"backend.server_command=[{sys.executable},{script}]",
        "backend.startup_timeout_s=2",
        f"output_root={tmp_path / 'out'}",
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 2 and time.monotonic() - t0 < 120
    assert "error: the reference server did not become healthy within 2 s" in proc.stderr
    assert "  | loading weights" in proc.stderr
    run_dir = next((tmp_path / "out").iterdir())
    assert "loading weights" in (run_dir / "server.log").read_text()
    assert not (run_dir / "summary.json").exists()  # the log is kept; nothing measured, no summary
    assert not [p for p in psutil.process_iter(["cmdline"]) if str(script) in " ".join(p.info["cmdline"] or [])]


@pytest.mark.slow
def test_cli_port_in_use_takes_another(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        proc = run_harness_cli(
            *REF,
            *FAST,
            f"backend.port={taken}",
            "workload.num_requests=2",
            f"output_root={tmp_path}",
            cwd=tmp_path,
            timeout=300,
        )
    assert proc.returncode == 0, proc.stderr
    run_dir = run_dir_of(proc)
    assert f"port {taken} is in use; using port" in (run_dir / "server.log").read_text()
    assert not load_summary(run_dir)["backend"]["info"]["server"]["url"].endswith(f":{taken}")


@pytest.mark.slow
def test_server_mode_api_key_never_reaches_a_file(tmp_path):
    secret = "sk-SERVER-MODE-c0ffee99"
    proc = run_harness_cli(
        *REF,
        *FAST,
        "backend.api_key_env=HARNESS_TEST_KEY",
        "workload.num_requests=2",
        f"output_root={tmp_path}",
        cwd=tmp_path,
        env={"HARNESS_TEST_KEY": secret},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr  # the server demanded the key: the client sent it
    run_dir = run_dir_of(proc)
    assert "--api-key-env HARNESS_TEST_KEY" in (run_dir / "server.log").read_text()
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
    assert secret not in proc.stdout + proc.stderr


def test_chat_history_is_the_servers_reply_text(tmp_path, tiny_model):
    cfg = make_config(
        *REF,
        "model=tiny-random",
        "workload=chat",
        "workload.sessions=2",
        "workload.turns=3",
        "workload.output_len=5",
        "workload.user_len=20",
        "workload.concurrency=2",
    )
    run_benchmark(cfg, tmp_path)
    df = load_requests(tmp_path).sort_values(["session_id", "turn"])
    assert df.error.isna().all() and len(df) == 6
    for text in df.output_text:  # the server's words, as it sent them (leading spaces kept)
        assert text.startswith(" ") and all(w in WORDS for w in text.split()) and len(text.split()) == 5
    workload = json.loads((tmp_path / "workload.json").read_text())
    from transformers import AutoTokenizer

    renderer = PromptRenderer(AutoTokenizer.from_pretrained(tiny_model.hf_dir))
    for session in workload["sessions"]:
        rows = df[df.session_id == session["session_id"]].to_dict("records")
        history = []
        for turn, row in zip(session["turns"], rows):
            history.append({"role": "user", "content": turn["user"]})
            # the server counted this prompt with the chat template: it held the exact replies
            assert row["prompt_tokens"] == len(renderer.render(chat_messages(session["system"], history)))
            history.append({"role": "assistant", "content": row["output_text"]})


def test_registry_lists_the_new_backends():
    names = backend_registry.names()
    assert "openai" in names and "reference" in names


def test_servers_are_asked_for_their_per_request_figures(tiny_model):
    """vLLM: --enable-per-request-metrics and cached tokens in usage (null: where the installed vLLM has
    them); SGLang: cached tokens in usage."""
    from backends.engines.vllm import VLLMBackend, VLLMConfig, per_request_metrics_on

    on = VLLMBackend.server_preset(VLLMConfig(mode="server", per_request_metrics=True), tiny_model)
    assert {"--enable-per-request-metrics", "--enable-prompt-tokens-details"} <= set(on.command)
    off = VLLMBackend.server_preset(VLLMConfig(mode="server", per_request_metrics=False), tiny_model)
    assert "--enable-per-request-metrics" not in off.command
    assert per_request_metrics_on(VLLMConfig(mode="server", python="/elsewhere/bin/python")) is False  # not guessed
    with pytest.raises(ConfigError, match="disable_log_stats"):
        VLLMConfig(per_request_metrics=True, engine_args={"disable_log_stats": True}).validate()
    assert "--enable-cache-report" in sglang_preset(BackendConfig(mode="server"), tiny_model).command


def test_vllm_speculates_as_configured_and_is_asked_for_each_request_acceptance(tiny_model):
    """backend.speculative_config reaches vLLM's server as JSON (as --speculative-config reads it),
    with the per-request acceptance asked for where the installed vLLM has it; a mapping among
    engine_args is JSON too; anything but a mapping is one line."""
    import json

    from backends.engines.vllm import VLLMBackend, VLLMConfig, per_request_spec_on

    spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}
    cfg = VLLMConfig(
        mode="server",
        per_request_metrics=True,
        speculative_config=spec,
        engine_args={"compilation_config": {"level": 0}},
    )
    command = VLLMBackend.server_preset(cfg, tiny_model).command
    assert json.loads(command[command.index("--speculative-config") + 1]) == spec
    assert json.loads(command[command.index("--compilation-config") + 1]) == {"level": 0}
    if per_request_spec_on(cfg):  # vLLM 0.28.1 on, installed here
        assert command[command.index("--per-request-spec-decode-metrics") + 1] == "summary"
    plain = VLLMBackend.server_preset(VLLMConfig(mode="server", per_request_metrics=True), tiny_model).command
    assert "--speculative-config" not in plain and "--per-request-spec-decode-metrics" not in plain
    assert per_request_spec_on(VLLMConfig(mode="server", per_request_metrics=False, speculative_config=spec)) is False
    with pytest.raises(ConfigError, match="backend.speculative_config must be a mapping"):
        VLLMConfig(speculative_config="ngram").validate()


def test_ctrl_c_as_the_server_starts_leaves_a_server_that_stop_can_find(tmp_path, monkeypatch):
    """A press that lands inside Popen, after the fork, is held until the server is known: start
    then raises KeyboardInterrupt, and the stop that follows ends the server."""
    import signal
    import subprocess

    real_popen = subprocess.Popen

    def popen_pressed_after_the_fork(*args, **kwargs):
        proc = real_popen(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C before Popen has returned the server
        return proc

    monkeypatch.setattr(subprocess, "Popen", popen_pressed_after_the_fork)
    server = ManagedServer(
        [sys.executable, "-c", "import time; time.sleep(120)"],
        port=free_port(),
        log_path=tmp_path / "server.log",
        stop_grace_s=1,
    )
    with pytest.raises(KeyboardInterrupt):
        server.start()
    monkeypatch.undo()
    assert server.proc is not None and server.proc.poll() is None
    server.stop()
    assert server.proc.poll() is not None
