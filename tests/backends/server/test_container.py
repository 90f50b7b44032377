"""Servers in a container (backends/server/container.py), checked without docker: the exact
``docker run`` argv, and the stop paths — a normal stop and the watchdog after a SIGKILL of the
harness — against a fake ``docker`` on PATH that records its calls (its ``run`` serves the
reference server on the published port, or sleeps like a container that never answers)."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest
from conftest import REPO
from reference_fixtures import chat_request, collect, run

from backends.registry import backend_registry
from backends.server.backend import ServerBackend
from backends.server.container import ContainerConfig, container_run, mount_source
from backends.server.launch import free_port
from backends.server.process import ManagedServer
from core.errors import ConfigError

FAKE_DOCKER = """#!{python}
import json, os, sys, time
args = sys.argv[1:]
with open(os.environ["FAKE_DOCKER_LOG"], "a") as f:
    f.write(json.dumps(args) + "\\n")
if args[0] == "run":
    serve = os.environ.get("FAKE_DOCKER_SERVE")
    if serve:  # the container's server, on the port published as 127.0.0.1:PORT:INSIDE
        port = args[args.index("-p") + 1].split(":")[1]
        os.execv(sys.executable, [sys.executable, "-m", "refserver", "--port", port, *serve.split()])
    time.sleep(3600)
"""


@pytest.fixture
def fake_docker(tmp_path, monkeypatch):
    """A ``docker`` first on PATH; returns a function that reads the calls it recorded."""
    folder = tmp_path / "fake-bin"
    folder.mkdir()
    (folder / "docker").write_text(FAKE_DOCKER.format(python=sys.executable))
    (folder / "docker").chmod(0o755)
    log = tmp_path / "docker-calls.jsonl"
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(log))
    return lambda: [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def gone(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_docker_run_argv():
    cfg = ContainerConfig(image="ghcr.io/huggingface/text-generation-inference:3.3.6", run_args=["--shm-size", "1g"])
    c = container_run(
        cfg,
        port=8000,
        mounts={"/models/m": "/model", "{files}": "/harness"},
        env={"A": "1"},
        args=["--model-id", "/model"],
        name="harness-abc",
    )
    assert c.argv == [
        "docker",
        "run",
        "--rm",
        "--name",
        "harness-abc",
        "--gpus",
        "all",
        "-p",
        "127.0.0.1:{port}:8000",
        "-v",
        "/models/m:/model:ro",
        "-v",
        "{files}:/harness:ro",
        "-e",
        "A=1",
        "--shm-size",
        "1g",
        "ghcr.io/huggingface/text-generation-inference:3.3.6",
        "--model-id",
        "/model",
    ]
    assert c.cleanup == [["docker", "rm", "-f", "harness-abc"]]
    assert c.exec("ollama", "list") == ["docker", "exec", "harness-abc", "ollama", "list"]
    podman = container_run(ContainerConfig(image="i", program="podman", gpus=None), port=1, mounts={}, args=[])
    assert re.fullmatch(r"harness-[0-9a-f]{12}", podman.name)
    assert podman.argv == ["podman", "run", "--rm", "--name", podman.name, "-p", "127.0.0.1:{port}:1", "i"]
    assert podman.name != container_run(ContainerConfig(image="i"), port=1, mounts={}, args=[]).name


def test_each_engine_in_its_container(real_model):
    """The container form of each preset: the engine's arguments after the image, its port
    inside published on 127.0.0.1, the model read-only, and `docker rm -f` as the clean-up."""
    hf = str(real_model.hf_dir.resolve())
    for name, image, port, tail in [
        (
            "tgi",
            "ghcr.io/huggingface/text-generation-inference:3.3.6",
            8000,
            ["--model-id", "/model", "--hostname", "0.0.0.0", "--port", "8000", "--usage-stats", "off"],
        ),
        (
            "tensorrt_llm",
            "nvcr.io/nvidia/tensorrt-llm/release:1.2.0",
            8000,
            [
                "trtllm-serve",
                "/model",
                "--host",
                "0.0.0.0",
                "--port",
                "8000",
                "--backend",
                "pytorch",
                "--tp_size",
                "1",
                "--pp_size",
                "1",
                "--log_level",
                "warning",
            ],
        ),
        (
            "deepspeed_mii",
            "my/mii:1",
            8000,
            [
                "python",
                "-m",
                "mii.entrypoints.openai_api_server",
                "--model",
                "/model",
                "--host",
                "0.0.0.0",
                "--port",
                "8000",
                "--tensor-parallel",
                "1",
                "--replica-num",
                "1",
            ],
        ),
    ]:
        entry = backend_registry.get(name)
        cfg = entry.config_cls(container=ContainerConfig(image=image))
        preset = entry.cls.server_preset(cfg, real_model)
        name_ = preset.command[4]
        assert preset.command[:4] == ["docker", "run", "--rm", "--name"] and name_.startswith("harness-")
        assert ["-p", f"127.0.0.1:{{port}}:{port}"] == preset.command[7:9] and [
            "-v",
            f"{hf}:/model:ro",
        ] == preset.command[9:11]
        assert preset.command[preset.command.index(image) + 1 :] == tail, name
        assert preset.cleanup_commands == [["docker", "rm", "-f", name_]] and preset.env == {}
        assert not preset.uses_python
    cfg = backend_registry.get("ollama").config_cls(
        container=ContainerConfig(image="ollama/ollama:0.12.6"), num_parallel=2
    )
    preset = backend_registry.get("ollama").cls.server_preset(cfg, real_model)
    gguf = real_model.gguf_file.resolve()
    name_ = preset.command[4]
    assert preset.command[5:] == [
        "--gpus",
        "all",
        "-p",
        "127.0.0.1:{port}:11434",
        "-v",
        f"{gguf}:/model/{gguf.name}:ro",
        "-v",
        "{files}:/harness:ro",
        "-e",
        "OLLAMA_HOST=0.0.0.0:11434",
        "-e",
        "OLLAMA_KEEP_ALIVE=-1",
        "-e",
        "OLLAMA_NUM_PARALLEL=2",
        "ollama/ollama:0.12.6",
        "serve",
    ]
    assert preset.files["Modelfile"] == f"FROM /model/{gguf.name}\nPARAMETER num_ctx 4096\n"
    assert preset.setup_commands == [
        ["docker", "exec", name_, "ollama", "create", "harness-smollm2-135m", "-f", "/harness/Modelfile"],
        ["docker", "exec", name_, "ollama", "run", "harness-smollm2-135m", ""],
    ]


def test_a_model_folder_with_links_out_of_it_cannot_be_mounted(tmp_path):
    (tmp_path / "blobs").mkdir()
    (tmp_path / "blobs" / "w").write_text("x")
    folder = tmp_path / "snapshot"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "inside.json").symlink_to(folder / "config.json")
    assert mount_source(folder) == str(folder.resolve())  # a link inside the folder is fine
    (folder / "model.safetensors").symlink_to(tmp_path / "blobs" / "w")
    with pytest.raises(ConfigError, match="holds links that lead out of it .*model.path=<a folder of real files>"):
        mount_source(folder)


def test_stop_removes_the_container(tmp_path, fake_docker):
    """The docker client is stopped with its group; then `docker rm -f` (a killed client leaves
    its container behind)."""
    server = ManagedServer(
        ["docker", "run", "--rm", "--name", "harness-t1", "img"],
        port=free_port(),
        log_path=tmp_path / "server.log",
        stop_grace_s=2,
        cleanup_commands=[["docker", "rm", "-f", "harness-t1"]],
    )
    server.start()
    deadline = time.time() + 30
    while not fake_docker() and time.time() < deadline:
        time.sleep(0.05)
    server.stop()
    assert fake_docker() == [["run", "--rm", "--name", "harness-t1", "img"], ["rm", "-f", "harness-t1"]]
    assert gone(server.pid)
    assert "clean-up: docker rm -f harness-t1" in server.log_path.read_text()


@pytest.mark.slow
def test_the_watchdog_removes_the_container_after_a_sigkill_of_the_harness(tmp_path, fake_docker):
    code = (
        "import sys, time\n"
        "from backends.server.launch import free_port\n"
        "from backends.server.process import ManagedServer\n"
        "s = ManagedServer(['docker', 'run', '--name', 'harness-t2', 'img'], port=free_port(),\n"
        f"                  log_path={str(tmp_path / 'server.log')!r}, stop_grace_s=1,\n"
        "                  cleanup_commands=[['docker', 'rm', '-f', 'harness-t2']])\n"
        "s.start()\n"
        "print(s.pid, flush=True)\n"
        "time.sleep(3600)\n"
    )
    harness = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        server_pid = int(harness.stdout.readline())
        deadline = time.time() + 30
        while not fake_docker() and time.time() < deadline:
            time.sleep(0.05)
        harness.send_signal(signal.SIGKILL)  # no clean-up runs in the harness
        harness.wait(timeout=30)
        deadline = time.time() + 60
        while ["rm", "-f", "harness-t2"] not in fake_docker() and time.time() < deadline:
            time.sleep(0.1)
    finally:
        harness.kill()
        harness.stdout.close()
    assert fake_docker() == [["run", "--name", "harness-t2", "img"], ["rm", "-f", "harness-t2"]]
    deadline = time.time() + 30
    while not gone(server_pid) and time.time() < deadline:
        time.sleep(0.1)
    assert gone(server_pid)


@pytest.mark.parametrize(
    "name,image,dialect",
    [
        ("tgi", "ghcr.io/huggingface/text-generation-inference:3.3.6", "tgi"),
        ("ollama", "ollama/ollama:0.12.6", "ollama"),
    ],
)
def test_a_run_through_a_container(tmp_path, monkeypatch, fake_docker, real_model, name, image, dialect):
    """Launch, health check, setup (`docker exec`), streaming and stop, through `docker run`."""
    monkeypatch.setenv(
        "FAKE_DOCKER_SERVE", f"--dialect {dialect} --ttft-ms 2 --itl-ms 1 --tokens 1000 --tokenizer {real_model.hf_dir}"
    )
    entry = backend_registry.get(name)
    cfg = entry.config_cls(container=ContainerConfig(image=image), startup_timeout_s=60)
    backend = ServerBackend(cfg, real_model, entry.cls.server_preset(cfg, real_model))
    backend.run_dir = tmp_path
    backend.load()
    try:
        chunks, done = run(collect(backend.stream(chat_request(0, 7))))
        port = backend.server.port
    finally:
        backend.close()
    assert sum(done.chunk_tokens) == len(chunks) == 7 and done.engine_stats["output_tokens"] == 7
    calls = fake_docker()
    container = calls[0][calls[0].index("--name") + 1]
    assert (
        calls[0][:3] == ["run", "--rm", "--name"] and f"127.0.0.1:{port}:{8000 if name == 'tgi' else 11434}" in calls[0]
    )
    assert calls[-1] == ["rm", "-f", container]  # removed after the client stopped
    if name == "ollama":
        assert f"{tmp_path / 'server-files'}:/harness:ro" in calls[0]
        assert calls[1:3] == [
            ["exec", container, "ollama", "create", "harness-smollm2-135m", "-f", "/harness/Modelfile"],
            ["exec", container, "ollama", "run", "harness-smollm2-135m", ""],
        ]
        assert (tmp_path / "server-files" / "Modelfile").read_text().startswith("FROM /model/")
    assert gone(backend.server.pid)
