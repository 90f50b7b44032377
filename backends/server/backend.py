"""Server mode (``backend.mode=server``): an engine's own OpenAI-compatible server, launched
for the run, benchmarked over HTTP, stopped after it.

:class:`ServerBackend` is a :class:`backends.base.Backend` built from the engine's
:class:`backends.preset.ServerPreset`: it launches the server (``backends/server/launch.py``:
interpreter, command, port) as a :class:`backends.server.process.ManagedServer` (its own
process group, its log, its health check, its stop, its watchdog) and streams from it with
:class:`backends.http.client.OpenAIClient`.

The server can run in another interpreter (``backend.python=/opt/vllm/bin/python`` or a
virtual-environment folder), so engines whose pins conflict are benchmarked from one
harness install; ``backend.server_command`` replaces the whole command.

**Replicas** (``backend.replicas=N``): N servers of the engine, each on a free port of its own
(``backend.port``, when set, is replica 0's), launched together, each with its log
(``server.log``, ``server-1.log``, …); the run starts once all are healthy, and requests are
routed over them by ``backend.routing`` (backends/http/router.py). All are stopped on every
ending, as one server is: SIGTERM to every replica's process group at once, then each is
waited for (its grace, then SIGKILL), and each has its own watchdog. A replica that exits
during the run fails the requests sent to it (and is sent no more); the run fails only when
every replica has exited. Placement, one entry per replica: ``backend.replica_gpus=[[0],[1]]``
sets each replica's ``CUDA_VISIBLE_DEVICES``, ``backend.replica_cpus=[[0],[1]]`` its CPU
affinity (Linux, ``os.sched_setaffinity`` in the child before it starts: its threads inherit
it), ``backend.replica_env=[{A: x},{A: y}]`` variables of its own. A server in a container
(``backend.container.image``) has no replicas here. Every replica's ``/metrics`` is scraped, each
sample labelled with its replica (``endpoint``); the GPU memory of the engine is that of
every process the harness started (all replicas).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Optional

from backends.base import BackendConfig, GenerationRequest, StreamEvent
from backends.http.backend import HTTPBackend
from backends.http.client import OpenAIClient, client_limits
from backends.http.probe import check_server, http_get
from backends.http.router import Router
from backends.preset import PresetExtras, ServerPreset
from backends.server.launch import choose_port, fill_placeholders, placeholder_values, resolve_python, server_argv
from backends.server.process import HealthWatch, ManagedServer, ServerStartError
from core.errors import ConfigError
from core.model import ModelFiles, gguf_quantization, hf_dtype

log = logging.getLogger("harness")

FILES_DIR = "server-files"  # <run folder>/server-files: the preset's files, {files}


class ServerExited(Exception):
    """A request failed because the server process is gone."""


# --- interpreter, command, port ---------------------------------------------------------------


# --- the child process ------------------------------------------------------------------------


# --- the backend --------------------------------------------------------------------------------


_VERSION_PROBE = (
    "import sys, importlib.metadata as m\n"
    "for name in sys.argv[1:]:\n"
    "    try:\n"
    "        print(m.version(name)); break\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
)


class ServerBackend(HTTPBackend[BackendConfig]):
    """An engine's own server, launched for the run and stopped after it."""

    def __init__(self, config: BackendConfig, model: ModelFiles, preset: ServerPreset):
        super().__init__(config, model)
        self.preset = preset
        self.registry_name = config.name
        # one per replica (backend.replicas); None where a replica is being relaunched
        self.servers: list[Optional[ManagedServer]] = [None] * max(1, config.replicas)
        self._version = "unknown"
        self._log_path: Optional[Path] = None  # set at the first launch, kept for a relaunch
        self._files_dir: Optional[Path] = None
        self._values: dict[str, Any] = {}  # the placeholders of the current launch (replica 0)
        self._values_of: dict[int, dict[str, Any]] = {}  # each replica's
        self._health: Optional[HealthWatch] = None  # the health of the launch begun in begin_load (replica 0)
        self._healths: dict[int, HealthWatch] = {}  # each replica's
        self._exit_noted: set[int] = set()
        if config.replicas > 1 and preset.cleanup_commands:
            raise ConfigError(
                "backend.replicas is not supported for a server in a container (backend.container.image): "
                "its replicas would share the container's name; run the engine's program instead"
            )

    def check_adapters(self, adapters: list[Any]) -> None:
        """LoRA adapters: served where the engine's preset launches its server with them."""
        if not self.preset.lora:
            raise ConfigError(
                self.preset.lora_refusal
                or (
                    f"the {self.config.name} server does not serve LoRA adapters here (workload.lora.adapters): drop them, "
                    f"or use one of the {self.lora_hint}"
                )
            )

    @property
    def server(self) -> Optional[ManagedServer]:
        """The server (replica 0 of several)."""
        return self.servers[0]

    @property
    def replicated(self) -> bool:
        return len(self.servers) > 1

    def begin_load(self) -> bool:
        """Launch the server (every replica) and return at once: it loads while the harness reads
        the tokenizer and builds the workload. ``load`` then waits for it to be healthy."""
        if all(server is None for server in self.servers):
            self._check_placement()
            for index in range(len(self.servers)):
                server = self._launch(attempt=0, index=index)
                self._healths[index] = HealthWatch(server, self.config.startup_timeout_s)
            self._health = self._healths[0]
        return True

    def _check_placement(self) -> None:
        cpus = self.config.replica_cpus
        if cpus and hasattr(os, "sched_getaffinity"):
            allowed = os.sched_getaffinity(0)
            for index, entry in enumerate(cpus):
                if not set(entry) <= allowed:
                    raise ConfigError(
                        f"backend.replica_cpus[{index}]={list(entry)} names CPUs this process may "
                        f"not use (it may use {sorted(allowed)})"
                    )

    def _launch(self, attempt: int, index: int = 0) -> ManagedServer:
        cfg, preset = self.config, self.preset
        if self._log_path is None:
            run_dir = Path(self.run_dir) if self.run_dir else Path(tempfile.mkdtemp(prefix="harness-server-"))
            run_dir.mkdir(parents=True, exist_ok=True)
            self._log_path = run_dir / "server.log"
            self._files_dir = self._write_files(run_dir / FILES_DIR) if preset.files else None
            self._version = self._probe_version()
        taken = {s.port for i, s in enumerate(self.servers) if s is not None and i != index}
        port, note = choose_port(cfg.port if attempt == 0 and index == 0 else 0)
        while port in taken:  # a free port another replica was just given, not yet bound
            port, note = choose_port(0)
        if note:
            log.warning("%s", note)
        values = placeholder_values(cfg, self.model, port, files_dir=self._files_dir)
        self._values_of[index] = values
        if index == 0:
            self._values = values
        argv = server_argv(cfg, preset, self.model, port, values=values)
        env = {key: fill_placeholders([value], values)[0] for key, value in preset.env.items()}
        if cfg.replica_gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in cfg.replica_gpus[index])
        if cfg.replica_env:
            env.update({str(k): str(v) for k, v in cfg.replica_env[index].items()})
        log_path = self._log_path if index == 0 else self._log_path.with_name(f"server-{index}.log")
        server = ManagedServer(
            argv,
            port=port,
            log_path=log_path,
            env=env,
            health_path=preset.health_path,
            name=self.engine_name if not self.replicated else f"{self.engine_name} replica {index}",
            stop_grace_s=preset.stop_grace_s,
            cleanup_commands=[fill_placeholders(c, values) for c in preset.cleanup_commands],
            cpus=cfg.replica_cpus[index] if cfg.replica_cpus else None,
        )
        self.servers[index] = server
        log.info("starting the %s server on %s (log: %s)", server.name, server.url_root, log_path)
        server.start(notes=(note,) if note else ())
        return server

    def load(self) -> None:
        cfg, preset = self.config, self.preset
        asked_at = time.perf_counter()
        self._check_placement()
        try:
            self.ready_unused_s = min(self._wait_healthy(index, asked_at) for index in range(len(self.servers)))
            for index, server in enumerate(self.servers):
                assert server is not None
                for step in preset.setup_commands:
                    server.run_step(fill_placeholders(step, self._values_of[index]), cfg.startup_timeout_s)
        except BaseException:
            self._stop_all()
            raise
        assert self.server is not None
        if preset.version_path:
            self._version = self._server_version(self.server.url_root + preset.version_path) or self._version
        base = self.server.url_root + preset.api_root
        key = self.api_key()
        model_name = preset.served_model_name
        if model_name is None:
            ids, _ = check_server(base, key, cfg.api_key_env)
            model_name = ids[0] if ids else self.model.name
        clients = [
            OpenAIClient(
                server.url_root + preset.api_root,
                model_name=model_name,
                tokenizer=self.get_tokenizer(),
                endpoint=cfg.endpoint,
                api_key=key,
                timeout_s=cfg.request_timeout_s,
                prompt_token_ids=preset.prompt_token_ids,
                **client_limits(cfg),
            )
            for server in self.servers
            if server is not None
        ]
        self.client = clients[0] if len(clients) == 1 else Router(clients, cfg.routing, exited=self._replica_exited)
        self.metrics_url = self.server.url_root + preset.metrics_path if preset.metrics_path else None
        self.metrics_urls = (
            [server.url_root + preset.metrics_path for server in self.servers if server is not None]
            if preset.metrics_path
            else []
        )

    def _wait_healthy(self, index: int, asked_at: float) -> float:
        """Wait for replica ``index`` to be healthy (relaunched on another port when its port was
        taken); the seconds it sat ready before ``load`` asked."""
        for attempt in range(3):
            if self.servers[index] is None:
                self._launch(attempt, index)
            server = self.servers[index]
            assert server is not None
            try:
                health = self._healths.get(index)
                if health is not None and health.server is server:
                    return max(0.0, asked_at - health.result())
                server.wait_healthy(self.config.startup_timeout_s)
                return 0.0
            except ServerStartError as exc:
                port = server.port
                server.stop()
                self.servers[index] = None
                if not (exc.port_clash and attempt < 2):
                    raise
                log.warning("port %d was taken before the server bound it; trying another", port)
        raise AssertionError("unreachable")

    def _replica_exited(self, index: int) -> Optional[str]:
        """Why replica ``index`` is gone, or None while it runs (the router's ``exited``)."""
        server = self.servers[index]
        if server is None or server.poll() is None:
            return None
        message = self._exit_message(server)
        if index not in self._exit_noted:
            self._exit_noted.add(index)
            log.warning("%s during the run; its requests fail, the other replicas go on", message)
        return f"ServerExited: {message}"

    def _write_files(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in self.preset.files.items():
            (folder / name).write_text(text)
        return folder

    @staticmethod
    def _server_version(url: str) -> Optional[str]:
        try:
            status, body, _ = http_get(url, timeout_s=10.0)
            version = json.loads(body).get("version") if status == 200 else None
        except (OSError, ValueError, AttributeError):
            return None
        return str(version) if version else None

    def _probe_version(self) -> str:
        if self.preset.version:
            return self.preset.version
        if not self.preset.version_packages:
            return "unknown"
        try:
            out = subprocess.run(
                [resolve_python(self.config.python), "-c", _VERSION_PROBE, *self.preset.version_packages],
                capture_output=True,
                text=True,
                timeout=60,
            )
            return out.stdout.strip().splitlines()[0] if out.stdout.strip() else "unknown"
        except (OSError, subprocess.SubprocessError):
            return "unknown"

    def request_extras(self) -> PresetExtras:
        return PresetExtras(self.preset.structured, self.preset.extra_body)

    def extra_body(self, request: GenerationRequest) -> dict[str, Any]:
        return self.request_extras()(request)

    def check_workload(self, plan: Any) -> None:
        """Structured output (workload.response_format, workload.tools): refused in one line,
        before launch, where the engine's server takes no such constraint (its preset's ``structured``)."""
        structured = getattr(plan, "structured", None)
        if not structured:
            return
        engine = self.preset.engine or self.config.name
        if self.preset.structured is None:
            raise ConfigError(
                f"the {engine} server has no constrained decoding here (workload.response_format, "
                "workload.tools): drop them, or use vllm, llama.cpp, sglang or another engine with it"
            )
        reason = self.preset.structured.refusal(structured, engine, self.config.server_flags())
        if reason:
            raise ConfigError(reason)

    async def stream(self, request: GenerationRequest) -> AsyncIterator[StreamEvent]:
        if self.replicated:  # the router names the replica, and one that exited
            async for event in super().stream(request):
                yield event
            return
        server = self.server
        if server is not None and server.poll() is not None:
            raise ServerExited(self._exit_message(server))
        try:
            async for event in super().stream(request):
                yield event
        except Exception as exc:
            if server is not None:
                if server.poll() is None:
                    await asyncio.sleep(0.05)  # a dying process closes its sockets before it is reaped
                if server.poll() is not None:
                    raise ServerExited(self._exit_message(server)) from exc
            raise

    async def reset_prefix_cache(self) -> bool:
        """POST the preset's cache-reset path (to every replica); False where the server has none."""
        if self.server is None or not self.preset.reset_cache_path:
            return False
        for server in self.servers:
            if server is None or server.poll() is not None:
                continue
            url = server.url_root + self.preset.reset_cache_path
            status, body, _ = await asyncio.to_thread(http_get, url, None, 30.0, "POST")
            if status != 200 or '"success": false' in body.replace('":false', '": false'):
                raise RuntimeError(f"POST {self.preset.reset_cache_path} answered {status}: {body[:200]}")
        return True

    def _exit_message(self, server: ManagedServer) -> str:
        return f"the {server.name} server exited with code {server.poll()} (log: {server.log_path})"

    def fatal_error(self) -> Optional[str]:
        """The server exited; with replicas, every one of them (one gone fails only its requests)."""
        if self.replicated:
            if self.servers and all(s is not None and s.poll() is not None for s in self.servers):
                return (
                    f"all {len(self.servers)} replicas of the {self.engine_name} server exited during the run "
                    f"(logs: {', '.join(str(s.log_path) for s in self.servers if s is not None)})"
                )
            return None
        server = self.server
        if server is not None and server.poll() is not None:
            return self._exit_message(server) + " during the run"
        return None

    @property
    def engine_name(self) -> str:
        return self.preset.engine or self.config.name

    @property
    def engine_version(self) -> str:
        return self._version

    def engine_info(self) -> dict[str, Any]:
        server = self.server
        return {
            "server": {
                "command": server.argv if server else None,
                "python": resolve_python(self.config.python),
                "url": server.url_root if server else None,
                "pid": server.pid if server else None,
                "log": str(server.log_path) if server else None,
                "health_path": self.preset.health_path,
                "metrics_path": self.preset.metrics_path,
            },
            **(
                {
                    "replicas": [
                        {
                            "url": s.url_root if s else None,
                            "pid": s.pid if s else None,
                            "log": str(s.log_path) if s else None,
                            "cpus": s.cpus if s else None,
                            "cuda_visible_devices": s.env.get("CUDA_VISIBLE_DEVICES") if s else None,
                        }
                        for s in self.servers
                    ],
                    "endpoints": [s.url_root + self.preset.api_root if s else None for s in self.servers],
                    "routing": self.config.routing,
                }
                if self.replicated
                else {}
            ),
            # sentences for the reader, not settings (a dict: compare does not tell runs apart by them)
            "notes": {"engine_timings": self.preset.timings_note},
            "model_name": self.client.model_name if self.client else self.preset.served_model_name,
            "endpoint": self.config.endpoint,
            "api_key_env": self.config.api_key_env,  # the variable's name, never its value
        }

    def numerics(self) -> dict[str, Optional[str]]:
        """What the server was given: the GGUF's quantization where its command names the GGUF;
        else backend.dtype where set, or the dtype the HF folder declares (what ``auto`` loads)."""
        if self.preset.engine == "reference":
            return {"dtype": None, "quantization": None}  # no model computes anything
        gguf = self.model.gguf_file
        command = " ".join(self.preset.command + list(self.config.server_command or []))
        if "{gguf}" in command or (gguf is not None and str(gguf) in command):
            return {"dtype": None, "quantization": gguf_quantization(gguf) if gguf else None}
        asked = getattr(self.config, "dtype", None)
        dtype = asked if asked not in (None, "auto") else hf_dtype(self.model.hf_dir)
        return {"dtype": dtype, "quantization": None}

    def memory(self) -> dict[str, Any]:
        return {}

    def engine_process(self) -> Optional[int]:
        """The server's PID, which is also its process group's id (it leads a session of its own);
        with replicas, the harness's own (every replica is a child of it)."""
        if self.replicated:
            return os.getpid() if any(s is not None for s in self.servers) else None
        return self.server.pid if self.server is not None else None

    def close(self) -> None:
        if any(s is not None for s in self.servers):
            log.info("stopping the %s server%s", self.engine_name, "s" if self.replicated else "")
            self._stop_all()

    def _stop_all(self) -> None:
        """Stop every replica: SIGTERM to all at once, then each waited for (replica 0, whose
        SIGTERM trap is the harness's, last); a second Ctrl-C still stops them all, then raises."""
        servers = [s for s in self.servers if s is not None]
        for server in servers:
            server.begin_stop()
        interrupted: Optional[BaseException] = None
        for server in reversed(servers):
            try:
                server.stop()
            except BaseException as exc:  # noqa: BLE001 - the others are stopped first
                interrupted = interrupted or exc
        if interrupted is not None:
            raise interrupted
