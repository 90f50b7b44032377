"""Server mode (``backend.mode=server``): launch an engine's own OpenAI-compatible server as
a child process, benchmark it over HTTP, stop it.

- :class:`ServerPreset` — what an engine module says about its server: the command, the
  health and metrics paths, extra environment, the model name to send, and per-request
  body extras (e.g. ``ignore_eos`` for exact output lengths).
- :class:`ManagedServer` — the child process: its own process group (session), bound to
  127.0.0.1 on a free port, stdout and stderr in ``<run folder>/server.log``, a health
  check with a time-out, and a stop that signals the whole group (SIGTERM, then SIGKILL
  after a grace period) — also on error, Ctrl-C, SIGTERM or interpreter exit — and then runs
  the preset's clean-up commands (``docker rm -f`` of a container), as its watchdog does
  when the harness itself is killed.
- :class:`ServerBackend` — a :class:`backends.base.Backend` that owns a ManagedServer and
  streams from it with :class:`backends.http.client.OpenAIClient`.

The server can run in another interpreter (``backend.python=/opt/vllm/bin/python`` or a
virtual-environment folder), so engines whose pins conflict are benchmarked from one
harness install; ``backend.server_command`` replaces the whole command.
"""
from __future__ import annotations

import asyncio
import atexit
import json
import logging
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Optional, Sequence

from backends.base import BackendConfig, GenerationRequest, StreamEvent
from backends.http.client import HTTPBackend, OpenAIClient, check_server, client_limits, http_get
from core.errors import ConfigError, HarnessError
from core.model import ModelFiles, gguf_quantization, hf_dtype

log = logging.getLogger("harness")

HOST = "127.0.0.1"
PLACEHOLDERS = ("model", "gguf", "port", "host", "python", "files", "aux_port")
FILES_DIR = "server-files"  # <run folder>/server-files: the preset's files, {files}
CLASH_MESSAGES = ("address already in use", "errno 98", "port is already allocated")  # the last: docker -p


@dataclass
class ServerPreset:
    """How to launch one engine's OpenAI-compatible server, and how to talk to it.

    ``command`` is the argv after the Python interpreter (``["-m", "vllm.entrypoints…"]``),
    or the full argv when ``uses_python`` is False. Its items may hold the placeholders
    ``{model}`` (the HF folder), ``{gguf}`` (the GGUF file), ``{port}``, ``{host}``,
    ``{python}``, ``{files}`` (the folder the preset's ``files`` are written to) and
    ``{aux_port}`` (a second free port), filled in at launch, as in ``env`` values and the
    setup and clean-up commands. ``backend.server_args`` are appended to the command.
    """

    command: list[str]
    uses_python: bool = True
    health_path: str = "/health"  # GET answers 200 once the server is ready
    metrics_path: Optional[str] = None  # Prometheus text, scraped before and after the measured phase
    reset_cache_path: Optional[str] = None  # POST empties the prefix cache (between the points of a sweep)
    env: dict[str, str] = field(default_factory=dict)  # added to the server's environment
    served_model_name: Optional[str] = None  # the "model" sent; None: the first id of GET /v1/models
    extra_body: Optional[Callable[[GenerationRequest], dict[str, Any]]] = None  # merged into each request
    prompt_token_ids: Optional[bool] = None  # /v1/completions takes token ids? None: try, else text
    engine: Optional[str] = None  # engine name in the summary (default: the backend's name)
    version_packages: tuple[str, ...] = ()  # distributions whose version, in the server's interpreter, is reported
    api_root: str = "/v1"
    stop_grace_s: float = 15.0  # SIGTERM, then SIGKILL after this long
    files: dict[str, str] = field(default_factory=dict)  # name -> text, written to <run folder>/server-files/ first
    setup_commands: list[list[str]] = field(default_factory=list)  # run in order once healthy (e.g. a model import)
    cleanup_commands: list[list[str]] = field(default_factory=list)  # run once the server is stopped, by the watchdog too
    version_path: Optional[str] = None  # GET answers {"version": …}, asked once healthy (preferred to version_packages)


class ServerStartError(HarnessError):
    """The server exited or never became healthy; the message ends with its log's last lines."""

    def __init__(self, message: str, port_clash: bool = False):
        super().__init__(message)
        self.port_clash = port_clash


class ServerExited(Exception):
    """A request failed because the server process is gone."""


# --- interpreter, command, port ---------------------------------------------------------------


def resolve_python(value: Optional[str]) -> str:
    """The interpreter that runs the server: ``backend.python`` (a file, a name on PATH, or a
    virtual-environment folder), else the harness's own. Symlinks are kept: a venv's
    ``bin/python`` is a link whose location selects the venv."""
    if value is None:
        return sys.executable
    path = Path(value).expanduser()
    if path.is_dir():
        for candidate in (path / "bin" / "python", path / "bin" / "python3", path / "Scripts" / "python.exe"):
            if candidate.is_file():
                return str(candidate.absolute())
        raise ConfigError(f"backend.python {value} is a folder without bin/python (not a virtual environment)")
    if path.is_file() and os.access(path, os.X_OK):
        return str(path.absolute())
    found = shutil.which(value)
    if found:
        return found
    raise ConfigError(f"backend.python {value} does not exist (give an interpreter or a virtual-environment folder)")


def check_server_config(config: BackendConfig) -> None:
    """Before any model loads: the interpreter (and a custom command's program) exist."""
    resolve_python(config.python)
    if config.server_command:
        program = config.server_command[0]
        if "{" not in program and shutil.which(program) is None and not Path(program).is_file():
            raise ConfigError(f"backend.server_command: {program} not found")


def fill_placeholders(args: list[str], values: dict[str, Callable[[], str]]) -> list[str]:
    """Replace ``{name}`` in each argument; a value is computed only when some argument uses it
    (``{gguf}`` of a model without one raises). Other braces (JSON arguments) are left alone."""
    out = []
    for arg in args:
        for name, get in values.items():
            token = "{" + name + "}"
            if token in arg:
                arg = arg.replace(token, get())
        out.append(arg)
    return out


def placeholder_values(config: BackendConfig, model: ModelFiles, port: int, host: str = HOST,
                       files_dir: Optional[Path] = None) -> dict[str, Callable[[], str]]:
    """The values of PLACEHOLDERS for one launch (``{aux_port}`` is picked once, when first used)."""
    python = resolve_python(config.python)
    aux: list[str] = []

    def aux_port() -> str:
        if not aux:
            aux.append(str(free_port(host)))
        return aux[0]

    def files() -> str:
        if files_dir is None:
            raise ConfigError("{files} is used, but the preset writes no files")
        return str(files_dir)

    return {
        "model": lambda: str(model.require_hf_dir()),
        "gguf": lambda: str(model.require_gguf()),
        "port": lambda: str(port),
        "host": lambda: host,
        "python": lambda: python,
        "files": files,
        "aux_port": aux_port,
    }


def server_argv(config: BackendConfig, preset: ServerPreset, model: ModelFiles, port: int, host: str = HOST,
                files_dir: Optional[Path] = None, values: Optional[dict[str, Callable[[], str]]] = None) -> list[str]:
    values = values or placeholder_values(config, model, port, host, files_dir)
    if config.server_command:
        argv = list(config.server_command)
    elif preset.uses_python:
        argv = [values["python"](), *preset.command]
    else:
        argv = list(preset.command)
    argv += list(config.server_args)
    return fill_placeholders(argv, values)


def port_free(port: int, host: str = HOST) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind: TIME_WAIT is no clash
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def choose_port(requested: int, host: str = HOST) -> tuple[int, Optional[str]]:
    """(port, note): ``requested``, or a free one when it is 0 or in use (the note says so)."""
    if requested == 0:
        return free_port(host), None
    if port_free(requested, host):
        return requested, None
    port = free_port(host)
    return port, f"port {requested} is in use; using port {port} instead"


# --- the child process ------------------------------------------------------------------------


class ManagedServer:
    """One server process in its own process group, logging to a file."""

    def __init__(
        self,
        argv: list[str],
        *,
        port: int,
        log_path: Path,
        env: Optional[dict[str, str]] = None,
        host: str = HOST,
        health_path: str = "/health",
        name: str = "server",
        stop_grace_s: float = 15.0,
        cleanup_commands: Sequence[Sequence[str]] = (),
    ):
        self.argv = argv
        self.port = port
        self.host = host
        self.log_path = Path(log_path)
        self.env = env or {}
        self.health_path = health_path
        self.name = name
        self.stop_grace_s = stop_grace_s
        self.cleanup_commands = [list(c) for c in cleanup_commands]
        self.proc: Optional[subprocess.Popen] = None
        self._log: Any = None
        self._stopped = False
        self._old_sigterm: Any = None
        self._watchdog: Optional[subprocess.Popen] = None

    @property
    def url_root(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc else None

    def start(self, notes: tuple[str, ...] = ()) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab", buffering=0)
        header = [f"# harness {time.strftime('%Y-%m-%d %H:%M:%S')}: starting {self.name} server: {shlex.join(self.argv)}"]
        header += [f"# harness: {note}" for note in notes]
        self._log.write(("\n".join(header) + "\n").encode())
        try:
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
                start_new_session=True,  # its own session and process group: signalled as one
            )
        except OSError as exc:
            self._log.close()
            raise ServerStartError(f"could not start the {self.name} server ({self.argv[0]}): {exc.strerror or exc}") from None
        atexit.register(self.stop)
        self._trap_sigterm()
        self._watchdog = _start_watchdog(self.proc.pid, self.stop_grace_s, self.cleanup_commands)

    def poll(self) -> Optional[int]:
        """The exit code, or None while it runs."""
        return self.proc.poll() if self.proc else None

    def wait_healthy(self, timeout_s: float) -> None:
        """Poll the health path until it answers 200; ServerStartError (with the log's tail)
        when the process exits first or ``timeout_s`` passes (the server is then stopped)."""
        url = self.url_root + self.health_path
        deadline = time.monotonic() + timeout_s
        delay = 0.05
        while True:
            rc = self.poll()
            if rc is not None:
                tail = self.log_tail()
                clash = any(m in line.lower() for line in tail for m in CLASH_MESSAGES)
                raise ServerStartError(
                    f"the {self.name} server exited with code {rc} before it became healthy; "
                    f"last lines of {self.log_path}:\n{_indent(tail)}", port_clash=clash)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.stop()
                raise ServerStartError(
                    f"the {self.name} server did not become healthy within {timeout_s:g} s "
                    f"(GET {url} never answered 200); last lines of {self.log_path}:\n{_indent(self.log_tail())}")
            try:
                status, _, _ = http_get(url, timeout_s=max(0.2, min(5.0, remaining)))
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(max(0.0, min(delay, deadline - time.monotonic())))
            delay = min(delay * 1.5, 0.5)

    def run_step(self, argv: list[str], timeout_s: float) -> None:
        """A command that prepares the running server (an engine's model import), its output
        in the server's log; ServerStartError (with the log's tail) when it fails."""
        assert self._log is not None, "start() first"
        self._log.write(f"# harness {time.strftime('%Y-%m-%d %H:%M:%S')}: running {shlex.join(argv)}\n".encode())
        what = f"{shlex.join(argv)} (setting up the {self.name} server)"
        try:
            rc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                env={**os.environ, **self.env}, timeout=timeout_s).returncode
        except subprocess.TimeoutExpired:
            raise ServerStartError(f"{what} did not finish within {timeout_s:g} s; last lines of "
                                   f"{self.log_path}:\n{_indent(self.log_tail())}") from None
        except OSError as exc:
            raise ServerStartError(f"could not run {argv[0]} for the {self.name} server: {exc.strerror or exc}") from None
        if rc != 0:
            raise ServerStartError(f"{what} failed with exit code {rc}; last lines of {self.log_path}:\n"
                                   f"{_indent(self.log_tail())}")

    def log_tail(self, lines: int = 20) -> list[str]:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 16384))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return []
        return [line for line in text.splitlines() if line.strip()][-lines:]

    def stop(self) -> None:
        """SIGTERM to the whole process group, SIGKILL to whatever is left after the grace
        period (also to descendants that left the group). Idempotent."""
        proc = self.proc
        if proc is None or self._stopped:
            return
        self._stopped = True
        pgid = proc.pid
        descendants = _descendants(proc.pid)
        _signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_grace_s
        interrupted = False
        try:
            proc.wait(timeout=self.stop_grace_s)
            while _group_alive(pgid) and time.monotonic() < deadline:
                time.sleep(0.05)
        except subprocess.TimeoutExpired:
            pass
        except KeyboardInterrupt:  # a second Ctrl-C: no more grace
            interrupted = True
        if interrupted or proc.poll() is None or _group_alive(pgid):
            _signal_group(pgid, signal.SIGKILL)
        for p in descendants:
            try:
                p.kill()
            except Exception:  # noqa: BLE001 - already gone
                pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self._run_cleanup()
        if self._log is not None:
            try:
                self._log.write(f"# harness {time.strftime('%Y-%m-%d %H:%M:%S')}: stopped (exit code {proc.poll()})\n".encode())
            finally:
                self._log.close()
        atexit.unregister(self.stop)
        self._restore_sigterm()
        if self._watchdog is not None:
            self._watchdog.kill()
            self._watchdog.wait(timeout=5)
        if interrupted:
            raise KeyboardInterrupt

    def _run_cleanup(self) -> None:
        """The preset's clean-up commands (a container outlives a killed ``docker run``);
        a failure is written to the log, and the stop goes on."""
        out = self._log if self._log is not None and not self._log.closed else subprocess.DEVNULL
        for argv in self.cleanup_commands:
            if out is not subprocess.DEVNULL:
                out.write(f"# harness: clean-up: {shlex.join(argv)}\n".encode())
            try:
                subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, timeout=120)
            except (OSError, subprocess.SubprocessError) as exc:
                log.warning("clean-up of the %s server failed: %s: %s", self.name, shlex.join(argv), exc)

    def _trap_sigterm(self) -> None:
        """A SIGTERM to the harness becomes KeyboardInterrupt, so the clean-up runs."""
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            self._old_sigterm = signal.SIG_DFL
            signal.signal(signal.SIGTERM, _raise_interrupt)

    def _restore_sigterm(self) -> None:
        if self._old_sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._old_sigterm)
            self._old_sigterm = None

    def __enter__(self) -> "ManagedServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


# A tiny process of its own (its own session: a Ctrl-C to the terminal does not reach it) that
# outlives the harness only to stop the server's process group when the harness is gone, even
# after a SIGKILL, which runs no clean-up: the harness is its parent, so being re-parented means
# the harness died. Then it runs the clean-up commands (so it waits for the harness as long as
# there are some, even after the group is gone; a clean stop kills it). argv: server pgid, grace
# seconds, the clean-up commands as JSON, the harness's pid (given, not read at start: the
# harness may already be gone by the time this interpreter has started).
_WATCHDOG = """
import json, os, signal, subprocess, sys, time
pgid, grace, cleanup, parent = int(sys.argv[1]), float(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4])
for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
    signal.signal(s, signal.SIG_IGN)
def alive():
    try:
        os.killpg(pgid, 0)
        return True
    except OSError:
        return False
while os.getppid() == parent and (alive() or cleanup):
    time.sleep(0.25)
if alive():
    os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive():
        os.killpg(pgid, signal.SIGKILL)
if os.getppid() != parent:
    for argv in cleanup:
        try:
            subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        except Exception:
            pass
"""


def _start_watchdog(pgid: int, grace_s: float, cleanup: Sequence[Sequence[str]] = ()) -> Optional[subprocess.Popen]:
    try:
        return subprocess.Popen([sys.executable, "-I", "-S", "-c", _WATCHDOG, str(pgid), str(grace_s),
                                 json.dumps([list(c) for c in cleanup]), str(os.getpid())],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True, close_fds=True)
    except OSError as exc:  # the run goes on; only a SIGKILL of the harness could then leave the server behind
        log.warning("no watchdog for the server (%s): a SIGKILL of the harness would leave it running", exc)
        return None


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _indent(lines: list[str]) -> str:
    return "\n".join(f"  | {line}" for line in lines) if lines else "  | (the log is empty)"


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs (zombies, awaiting their parent, do not count)."""
    import psutil

    for p in psutil.process_iter(["status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error, OSError):
            continue
    return False


def _descendants(pid: int) -> list[Any]:
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


class _HealthWatch:
    """``wait_healthy`` on a thread of its own from the launch, so the moment the server became
    healthy is known even when the harness was still reading the tokenizer then."""

    def __init__(self, server: ManagedServer, timeout_s: float):
        self.server = server
        self.healthy_at: Optional[float] = None
        self.error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, args=(timeout_s,), name="server-health", daemon=True)
        self._thread.start()

    def _run(self, timeout_s: float) -> None:
        try:
            self.server.wait_healthy(timeout_s)
            self.healthy_at = time.perf_counter()
        except BaseException as exc:  # noqa: BLE001 - handed to the thread that waits for it
            self.error = exc

    def result(self) -> float:
        """When the server became healthy (perf_counter); its ServerStartError if it did not."""
        while self._thread.is_alive():
            self._thread.join(0.1)  # in steps: Ctrl-C still reaches this thread
        if self.error is not None:
            raise self.error
        assert self.healthy_at is not None
        return self.healthy_at


# --- the backend --------------------------------------------------------------------------------


_VERSION_PROBE = (
    "import sys, importlib.metadata as m\n"
    "for name in sys.argv[1:]:\n"
    "    try:\n"
    "        print(m.version(name)); break\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
)


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
        self._health: Optional[_HealthWatch] = None  # the health of the launch begun in begin_load

    def begin_load(self) -> bool:
        """Launch the server and return at once: it loads while the harness reads the tokenizer
        and builds the workload. ``load`` then waits for it to be healthy."""
        if self.server is None:
            self._launch(attempt=0)
            self._health = _HealthWatch(self.server, self.config.startup_timeout_s)
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
