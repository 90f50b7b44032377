"""A server as a child process: its own process group, its log, its health check, its stop.

:class:`ManagedServer` binds 127.0.0.1, logs to ``<run folder>/server.log``, waits for its health
path with a time-out, and stops the whole group (SIGTERM, then SIGKILL after a grace period) —
also on error, Ctrl-C, SIGTERM or interpreter exit — then runs the preset's clean-up commands
(``docker rm -f`` of a container), as its watchdog does when the harness itself is killed.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from backends.http.probe import http_get
from backends.server.launch import HOST
from core.errors import HarnessError
from core.interrupts import interrupts_held

log = logging.getLogger("harness")

CLASH_MESSAGES = ("address already in use", "errno 98", "port is already allocated")  # the last: docker -p


class ServerStartError(HarnessError):
    """The server exited or never became healthy; the message ends with its log's last lines."""

    def __init__(self, message: str, port_clash: bool = False):
        super().__init__(message)
        self.port_clash = port_clash


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
        cpus: Optional[Sequence[int]] = None,
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
        self.cpus = list(cpus) if cpus else None  # the CPUs it may run on (Linux; set before it starts)
        self._sigterm_sent = False
        self._descendants: list[Any] = []

    @property
    def url_root(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc else None

    def start(self, notes: tuple[str, ...] = ()) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab", buffering=0)
        header = [
            f"# harness {time.strftime('%Y-%m-%d %H:%M:%S')}: starting {self.name} server: {shlex.join(self.argv)}"
        ]
        header += [f"# harness: {note}" for note in notes]
        self._log.write(("\n".join(header) + "\n").encode())
        # Ctrl-C (and SIGTERM, which comes as one) is held until the server is known: one that cut
        # into Popen after the fork would leave a server no stop can find
        with interrupts_held() as pressed:
            try:
                self.proc = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=self._log,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
                    start_new_session=True,  # its own session and process group: signalled as one
                    preexec_fn=_pin_to(self.cpus) if self.cpus else None,
                )
            except OSError as exc:
                self._log.close()
                raise ServerStartError(
                    f"could not start the {self.name} server ({self.argv[0]}): {exc.strerror or exc}"
                ) from None
            atexit.register(self.stop)
            self._trap_sigterm()
            self._watchdog = _start_watchdog(self.proc.pid, self.stop_grace_s, self.cleanup_commands)
        if pressed:
            raise KeyboardInterrupt

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
                    f"last lines of {self.log_path}:\n{_indent(tail)}",
                    port_clash=clash,
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.stop()
                raise ServerStartError(
                    f"the {self.name} server did not become healthy within {timeout_s:g} s "
                    f"(GET {url} never answered 200); last lines of {self.log_path}:\n{_indent(self.log_tail())}"
                )
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
            rc = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
                timeout=timeout_s,
            ).returncode
        except subprocess.TimeoutExpired:
            raise ServerStartError(
                f"{what} did not finish within {timeout_s:g} s; last lines of "
                f"{self.log_path}:\n{_indent(self.log_tail())}"
            ) from None
        except OSError as exc:
            raise ServerStartError(
                f"could not run {argv[0]} for the {self.name} server: {exc.strerror or exc}"
            ) from None
        if rc != 0:
            raise ServerStartError(
                f"{what} failed with exit code {rc}; last lines of {self.log_path}:\n{_indent(self.log_tail())}"
            )

    def log_tail(self, lines: int = 20) -> list[str]:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 16384))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return []
        return [line for line in text.splitlines() if line.strip()][-lines:]

    def begin_stop(self) -> None:
        """SIGTERM to the whole process group, without waiting: several servers stopped
        together (replicas) each get their grace period at the same time; ``stop`` then waits."""
        proc = self.proc
        if proc is None or self._stopped or self._sigterm_sent:
            return
        self._sigterm_sent = True
        self._descendants = _descendants(proc.pid)
        _signal_group(proc.pid, signal.SIGTERM)

    def stop(self) -> None:
        """SIGTERM to the whole process group, SIGKILL to whatever is left after the grace
        period (also to descendants that left the group). Idempotent."""
        proc = self.proc
        if proc is None or self._stopped:
            return
        self.begin_stop()  # once: a second SIGTERM makes some servers (llama-server) exit at once
        self._stopped = True
        pgid = proc.pid
        descendants = self._descendants
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
                self._log.write(
                    f"# harness {time.strftime('%Y-%m-%d %H:%M:%S')}: stopped (exit code {proc.poll()})\n".encode()
                )
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
        log_file = self._log if self._log is not None and not self._log.closed else None
        out = log_file if log_file is not None else subprocess.DEVNULL
        for argv in self.cleanup_commands:
            if log_file is not None:
                log_file.write(f"# harness: clean-up: {shlex.join(argv)}\n".encode())
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

    def __enter__(self) -> ManagedServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


# backends/server/watchdog.py, run by path: stdlib only, started in a fraction of the harness's time
WATCHDOG = Path(__file__).with_name("watchdog.py")


def _start_watchdog(pgid: int, grace_s: float, cleanup: Sequence[Sequence[str]] = ()) -> Optional[subprocess.Popen]:
    try:
        return subprocess.Popen(
            [
                sys.executable,
                "-I",
                "-S",
                str(WATCHDOG),
                str(pgid),
                str(grace_s),
                json.dumps([list(c) for c in cleanup]),
                str(os.getpid()),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:  # the run goes on; only a SIGKILL of the harness could then leave the server behind
        log.warning("no watchdog for the server (%s): a SIGKILL of the harness would leave it running", exc)
        return None


def _pin_to(cpus: list[int]) -> Any:
    """A ``preexec_fn`` that sets the child's CPU affinity before it runs the server (Linux)."""
    if not hasattr(os, "sched_setaffinity"):
        log.warning("CPU affinity is not supported on this system; the server runs on every CPU")
        return None

    def pin() -> None:
        os.sched_setaffinity(0, cpus)

    return pin


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


class HealthWatch:
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
