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
"""
from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, AsyncIterator, Optional

from backends.base import BackendConfig, GenerationRequest, StreamEvent
from backends.http.backend import HTTPBackend
from backends.http.client import OpenAIClient, client_limits
from backends.http.probe import check_server, http_get
from backends.preset import ServerPreset
from backends.server.launch import choose_port, fill_placeholders, placeholder_values, resolve_python, server_argv
from backends.server.process import ManagedServer, ServerStartError, HealthWatch
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


# What each engine's server says about each request in a stream (backends/http/engine_timings.py);
# the report shows it where the stage table is empty. docs/metrics.md has the table.
ENGINE_TIMINGS: dict[str, str] = {
    "vllm": "vLLM sends its queue, prefill and decode times on the last chunk with --enable-per-request-metrics "
            "(vLLM 0.27 on; the preset adds it where the installed vLLM has it)",
    "llamacpp": "llama_cpp.server sends no timings; backend.server=llama-server (llama.cpp's C++ server) sends "
                "prompt and predicted times on every stream",
    "llama-server": "llama-server sends prompt and predicted times (timings) on the last chunk of every stream",
    "sglang": "SGLang sends its meta_info (cached tokens, latencies) only on replies that are not streamed",
    "tgi": "TGI sends its timing headers only on replies that are not streamed",
    "reference": "the reference server sends vLLM's metrics with backend.per_request_metrics=true, and "
                 "llama-server's timings with backend.dialect=llama-server",
    "other": "this server sends no per-request timings in its stream",
}


class ServerBackend(HTTPBackend):
    """An engine's own server, launched for the run and stopped after it."""

    def __init__(self, config: BackendConfig, model: ModelFiles, preset: ServerPreset):
        super().__init__(config, model)
        self.preset = preset
        self.registry_name = config.name
        self.server: Optional[ManagedServer] = None
        self._version = "unknown"
        self._log_path: Optional[Path] = None  # set at the first launch, kept for a relaunch
        self._files_dir: Optional[Path] = None
        self._values: dict[str, Any] = {}  # the placeholders of the current launch
        self._health: Optional[HealthWatch] = None  # the health of the launch begun in begin_load

    def begin_load(self) -> bool:
        """Launch the server and return at once: it loads while the harness reads the tokenizer
        and builds the workload. ``load`` then waits for it to be healthy."""
        if self.server is None:
            self._launch(attempt=0)
            self._health = HealthWatch(self.server, self.config.startup_timeout_s)
        return True

    def _launch(self, attempt: int) -> None:
        cfg, preset = self.config, self.preset
        if self._log_path is None:
            run_dir = Path(self.run_dir) if self.run_dir else Path(tempfile.mkdtemp(prefix="harness-server-"))
            run_dir.mkdir(parents=True, exist_ok=True)
            self._log_path = run_dir / "server.log"
            self._files_dir = self._write_files(run_dir / FILES_DIR) if preset.files else None
            self._version = self._probe_version()
        port, note = choose_port(cfg.port if attempt == 0 else 0)
        if note:
            log.warning("%s", note)
        self._values = placeholder_values(cfg, self.model, port, files_dir=self._files_dir)
        argv = server_argv(cfg, preset, self.model, port, values=self._values)
        env = {key: fill_placeholders([value], self._values)[0] for key, value in preset.env.items()}
        self.server = ManagedServer(
            argv, port=port, log_path=self._log_path, env=env, health_path=preset.health_path,
            name=self.engine_name, stop_grace_s=preset.stop_grace_s,
            cleanup_commands=[fill_placeholders(c, self._values) for c in preset.cleanup_commands],
        )
        log.info("starting the %s server on %s (log: %s)", self.engine_name, self.server.url_root, self._log_path)
        self.server.start(notes=(note,) if note else ())

    def load(self) -> None:
        cfg, preset = self.config, self.preset
        asked_at = time.perf_counter()
        for attempt in range(3):
            if self.server is None:
                self._launch(attempt)
            assert self.server is not None
            try:
                if self._health is not None and self._health.server is self.server:
                    self.ready_unused_s = max(0.0, asked_at - self._health.result())
                else:
                    self.server.wait_healthy(cfg.startup_timeout_s)
                break
            except ServerStartError as exc:
                port = self.server.port
                self.server.stop()
                self.server = None
                if not (exc.port_clash and attempt < 2):
                    raise
                log.warning("port %d was taken before the server bound it; trying another", port)
        assert self.server is not None
        values = self._values
        try:
            for step in preset.setup_commands:
                self.server.run_step(fill_placeholders(step, values), cfg.startup_timeout_s)
        except BaseException:
            self.server.stop()
            raise
        if preset.version_path:
            self._version = self._server_version(self.server.url_root + preset.version_path) or self._version
        base = self.server.url_root + preset.api_root
        key = self.api_key()
        model_name = preset.served_model_name
        if model_name is None:
            ids, _ = check_server(base, key, cfg.api_key_env)
            model_name = ids[0] if ids else self.model.name
        self.client = OpenAIClient(
            base, model_name=model_name, tokenizer=self.get_tokenizer(), endpoint=cfg.endpoint,
            api_key=key, timeout_s=cfg.request_timeout_s, prompt_token_ids=preset.prompt_token_ids,
            **client_limits(cfg),
        )
        self.metrics_url = self.server.url_root + preset.metrics_path if preset.metrics_path else None

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
            out = subprocess.run([resolve_python(self.config.python), "-c", _VERSION_PROBE, *self.preset.version_packages],
                                 capture_output=True, text=True, timeout=60)
            return out.stdout.strip().splitlines()[0] if out.stdout.strip() else "unknown"
        except (OSError, subprocess.SubprocessError):
            return "unknown"

    def extra_body(self, request: GenerationRequest) -> dict[str, Any]:
        return self.preset.extra_body(request) if self.preset.extra_body else {}

    async def stream(self, request: GenerationRequest) -> AsyncIterator[StreamEvent]:
        if self.server is not None and self.server.poll() is not None:
            raise ServerExited(self._exit_message())
        try:
            async for event in super().stream(request):
                yield event
        except Exception as exc:
            if self.server is not None:
                if self.server.poll() is None:
                    await asyncio.sleep(0.05)  # a dying process closes its sockets before it is reaped
                if self.server.poll() is not None:
                    raise ServerExited(self._exit_message()) from exc
            raise

    async def reset_prefix_cache(self) -> bool:
        """POST the preset's cache-reset path; False where the server has none."""
        if self.server is None or not self.preset.reset_cache_path:
            return False
        url = self.server.url_root + self.preset.reset_cache_path
        status, body, _ = await asyncio.to_thread(http_get, url, None, 30.0, "POST")
        if status != 200 or '"success": false' in body.replace('":false', '": false'):
            raise RuntimeError(f"POST {self.preset.reset_cache_path} answered {status}: {body[:200]}")
        return True

    def _exit_message(self) -> str:
        server = self.server
        return f"the {self.engine_name} server exited with code {server.poll()} (log: {server.log_path})"

    def fatal_error(self) -> Optional[str]:
        if self.server is not None and self.server.poll() is not None:
            return self._exit_message() + " during the run"
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
            "engine_timings": ENGINE_TIMINGS.get(self.engine_name, ENGINE_TIMINGS["other"]),
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
        """The server's PID, which is also its process group's id (it leads a session of its own)."""
        return self.server.pid if self.server is not None else None

    def close(self) -> None:
        if self.server is not None:
            log.info("stopping the %s server", self.engine_name)
            self.server.stop()
