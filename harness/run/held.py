"""An engine held for many runs: the loop behind ``python -m harness.held <overrides>``, which
``harness.ab --keep-loaded`` starts once per arm, and :class:`HeldEngine`, the side that starts
it and asks for the runs.

The process reads one JSON line per run from its commands, ``{"run_dir": …, "log": …}``, runs it
on the engine session it keeps loaded (:func:`harness.run.sweep.run_sweep_point`, as the points
of a sweep share one engine), and writes one JSON line per run to its answers::

    {"run_dir": …, "exit_code": 0, "status": "complete", "engine_reused": true, "wall_s": 12.3}

``exit_code`` is what ``python -m harness`` would have exited with for that run: 0, 2 (the run
failed, or was refused: its one-line reason is in ``error`` and in the run's log), 130
(interrupted). The first run loads the engine and later runs reuse it; between runs the
engine's prefix cache is emptied where it allows, as between the points of a sweep. An engine
that dies fails its run, and the next run loads a fresh one. What a run prints goes to its
``log``, and the harness's log lines also to ``<run_dir>/harness.log``.

Endings: the commands closed (the parent ended) → the engine is stopped and the loop returns 0;
a KeyboardInterrupt (SIGINT; SIGTERM and SIGHUP are turned into it by the entry point) during a
run → the run ends as Ctrl-C would end it (it keeps what it measured), its answer says 130, the
engine is stopped and the loop returns 130; while waiting for a command → the engine is stopped
and the loop returns 130.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Optional, TextIO

from core.errors import HarnessError
from harness.config import RunConfig
from harness.reports.console import format_summary
from harness.results.schema import RunSummary
from harness.results.store import load_summary
from harness.run.sweep import SESSIONS, run_sweep_point

EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = 0, 2, 130
LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"  # as Hydra's harness.log


def serve(cfg: RunConfig, overrides: Sequence[str], commands: TextIO, answers: TextIO) -> int:
    """Run every command read from ``commands`` on one held engine; the exit code of the process."""
    try:
        for line in commands:
            if not line.strip():
                continue
            command = json.loads(line)
            answer = run_command(cfg, overrides, Path(command["run_dir"]), Path(command["log"]))
            answers.write(json.dumps(answer) + "\n")
            answers.flush()
            if answer["exit_code"] == EXIT_INTERRUPTED:
                return EXIT_INTERRUPTED
        return EXIT_OK
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    finally:
        SESSIONS.close()


def run_command(cfg: RunConfig, overrides: Sequence[str], run_dir: Path, log_path: Path) -> dict[str, Any]:
    """One run on the held session; never raises but for a second Ctrl-C while it ends."""
    start = time.perf_counter()
    answer: dict[str, Any] = {
        "run_dir": str(run_dir),
        "exit_code": EXIT_OK,
        "status": None,
        "engine_reused": SESSIONS.session is not None and SESSIONS.session.loaded,
    }
    log_path.parent.mkdir(parents=True, exist_ok=True)
    run_dir.mkdir(parents=True, exist_ok=True)  # for harness.log, as Hydra makes it before a run
    with (
        open(log_path, "a") as out,
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(out),
        _log_lines_to(out, run_dir),
    ):
        try:
            entry = run_sweep_point(cfg, run_dir, run_dir, 0, overrides, single=True, keep_engine=True)
            answer["status"] = entry["status"]
            for folder in entry["run_dirs"]:
                print(format_summary(RunSummary.from_dict(load_summary(Path(folder)))))
            print(f"results: {run_dir}", flush=True)
        except HarnessError as exc:
            answer.update(exit_code=EXIT_FAILED, status="failed", error=str(exc))
            print(f"error: {exc}", flush=True)
        except KeyboardInterrupt:
            answer.update(exit_code=EXIT_INTERRUPTED, status="interrupted")
            print(f"\ninterrupted: what was measured is in {run_dir}", flush=True)
    answer["wall_s"] = time.perf_counter() - start
    return answer


@contextlib.contextmanager
def _log_lines_to(out: TextIO, run_dir: Path) -> Iterator[None]:
    """The harness's log lines to the run's log and to ``<run_dir>/harness.log``, for one run."""
    logger = logging.getLogger("harness")
    formatter = logging.Formatter(LOG_FORMAT)
    console = logging.StreamHandler(out)
    console.setFormatter(formatter)
    in_folder = logging.FileHandler(run_dir / "harness.log")
    in_folder.setFormatter(formatter)
    handlers: list[logging.Handler] = [console, in_folder]
    for handler in handlers:
        logger.addHandler(handler)
    try:
        yield
    finally:
        for handler in handlers:
            logger.removeHandler(handler)
            handler.close()


class HeldEngine:
    """The other side: one ``python -m harness.held`` process for an arm (started at its first
    run, and again after it ended), its runs asked for one at a time."""

    def __init__(self, command: list[str], cwd: str, log_path: Path, stop_grace_s: float = 30.0):
        self.command, self.cwd, self.log_path, self.stop_grace_s = command, cwd, Path(log_path), stop_grace_s
        self.proc: Optional[subprocess.Popen] = None
        self._answers: queue.Queue[Optional[dict[str, Any]]] = queue.Queue()
        self.starts = 0

    def _start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "a") as log_file:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                self.command, cwd=self.cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_file, text=True
            )
        self._answers = queue.Queue()
        threading.Thread(target=_read_answers, args=(self.proc.stdout, self._answers), daemon=True).start()
        self.starts += 1

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def run(self, run_dir: Path, log_path: Path, timeout_s: float) -> Optional[int]:
        """The run's exit code (as ``python -m harness`` would exit), or None when it ran past
        ``timeout_s`` (then it was stopped as Ctrl-C stops a run, and the process with it)."""
        if not self.alive:
            self._start()
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps({"run_dir": str(run_dir), "log": str(log_path)}) + "\n")
            self.proc.stdin.flush()
        except OSError:  # it ended before it read the command: its answer queue says how
            pass
        try:
            answer = self._answers.get(timeout=timeout_s)
        except queue.Empty:
            self.stop()
            return None
        if answer is None:  # the process ended without answering
            code = self.proc.wait()
            with open(log_path, "a") as out:
                reason = _last_error(self.log_path)
                out.write(
                    f"error: {reason or f'the held engine process ended with exit code {code}'} "
                    f"(its log: {self.log_path})\n"
                )
            return code or EXIT_FAILED
        return int(answer["exit_code"])

    def close(self) -> None:
        """The commands closed: the process stops its engine and ends; stopped if it does not."""
        if self.proc is None:
            return
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=self.stop_grace_s)
        except subprocess.TimeoutExpired:
            self.stop()

    def stop(self, signalled: bool = False) -> None:
        """As Ctrl-C: the run in progress keeps what it measured, the engine is stopped.
        ``signalled``: the terminal's Ctrl-C reached the process too; it is given time first."""
        if self.proc is None:
            return
        stop_as_ctrl_c(self.proc, self.stop_grace_s, signalled)
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP: the run ends as at Ctrl-C, but the signal came to this process alone (a
    terminal's Ctrl-C reaches the whole foreground group, so a child run has it already)."""


def raise_interrupted(signum: int, frame: Any) -> None:
    """The handler of SIGTERM and SIGHUP in the entry points that drive harness runs (ab, agree)."""
    raise Interrupted(signal.Signals(signum).name)


def stop_as_ctrl_c(proc: subprocess.Popen, grace_s: float, signalled: bool = False) -> None:
    """Stop a harness process as Ctrl-C would (it keeps what it measured): SIGINT, then SIGKILL
    after ``grace_s``. ``signalled``: the terminal's Ctrl-C reached it too; it is given a third
    of the grace to end on its own first."""
    if signalled:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s / 3)
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _read_answers(stdout: TextIO, answers: queue.Queue[Optional[dict[str, Any]]]) -> None:
    for line in stdout:
        try:
            answers.put(json.loads(line))
        except ValueError:
            continue
    answers.put(None)


def _last_error(log_path: Path) -> str:
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    errors = [line.removeprefix("error: ") for line in lines if line.startswith("error:")]
    return errors[-1] if errors else ""
