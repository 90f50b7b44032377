"""The whole suite as two pytest processes side by side: the tests that load a real engine
(``-m engine``) and the rest (``-m "not engine"``). ``scripts/test.sh`` (CI's command) runs it;
the edit loop's fast tier stays one plain pytest (``-m "not engine and not slow"``).

    .venv/bin/python scripts/pytest_halves.py --durations=25   # pytest's arguments, given to both

Why two processes: one pytest keeps about one of this machine's two cores busy (880 s of CPU in
1,026 s of wall time: docs/internals/testing.md). The engine tests took 414 s of it, the rest
525 s. In a fresh clone's ``.ci/run`` the halves took 579 s side by side, where one pytest had
taken 947 s.

Why split on the engine marker rather than with pytest-xdist's scheduling: two engines at once
each run threads that spin waiting for one another (a llama-server run of 1.6 s took 106 s when
two xdist workers each ran an engine). Here every engine test stays in one process, one engine at
a time as in a single pytest run, and an engine load the tests share (vLLM's two) is made once.
The rest's runs already leave the machine's state out where the verdict is the run's own
(``machine.enabled=false`` in the gate, search and report tests: a busy machine taints a run), and
its tests with the tightest timing passed 30 of 30 each beside the engine half
(``benchmarks/flake_hunt.py --beside engine``).

Each half has its own temporary folders (pytest numbers and locks them: two sessions never share
one) and its own cache (``.pytest_cache`` and ``.pytest_cache/engine``: ``--lf`` of one half
never overwrites the other's); a ``--basetemp`` or ``--junitxml`` given is split the same way
(``DIR/engine``, ``report.engine.xml``). A ``-m`` given here narrows both halves; a half that the
selection leaves empty counts as passed (pytest's status 5).

The rest prints as it runs; the engine half writes to a file named at the start, printed (and
removed) when both have ended. The status: 0 when both passed; else the rest's, else the engine half's.

Endings: each half is a session of its own, tied to this process (SIGTERM when it dies, even by
SIGKILL). Ctrl-C (SIGINT) goes to each half's whole process group, as a terminal sends it to a
single pytest; SIGTERM and SIGHUP go to each pytest. Either way both halves are waited for, and
their output is printed.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's packages first

from core.parent import die_with  # noqa: E402 - after the path line above

NO_TESTS_COLLECTED = 5  # pytest's exit status when the selection is empty
HALVES = (("rest", "not engine"), ("engine", "engine"))  # the rest prints as it runs
OWN_CACHE = {"engine": ".pytest_cache/engine"}
PATH_OPTIONS = ("--basetemp", "--junitxml", "--junit-xml")  # a folder or file each half needs of its own
SUMMARY_LINE = re.compile(r"^=+ (.* in [0-9.]+s.*?) =+$")


def split_marker(args: Sequence[str]) -> tuple[Optional[str], list[str]]:
    """(the ``-m`` expression given, if any: pytest keeps the last; the other arguments)."""
    expression: Optional[str] = None
    others: list[str] = []
    items = iter(args)
    for arg in items:
        if arg == "-m":
            expression = next(items, None)
        elif arg.startswith("-m") and not arg.startswith("--"):
            expression = arg[2:]
        else:
            others.append(arg)
    return expression, others


def own_paths(name: str, args: Sequence[str]) -> list[str]:
    """The arguments with each path that two pytests cannot share made the half's own:
    ``--basetemp DIR`` → ``DIR/<half>`` (pytest empties it first), ``--junitxml F.xml`` → ``F.<half>.xml``."""
    out: list[str] = []
    items = iter(args)
    for arg in items:
        option, sep, value = arg.partition("=")
        if option in PATH_OPTIONS:
            value = value if sep else next(items, "")
            path = Path(value)
            mine = path / name if option == "--basetemp" else path.with_name(f"{path.stem}.{name}{path.suffix}")
            out.append(f"{option}={mine}")
        else:
            out.append(arg)
    return out


def half_command(name: str, own: str, expression: Optional[str], others: Sequence[str]) -> list[str]:
    """One half's pytest: its marker joined with the one given, its cache and paths, the other arguments."""
    marker = f"({expression}) and ({own})" if expression else own
    cache = ["-o", f"cache_dir={OWN_CACHE[name]}"] if name in OWN_CACHE else []
    return [sys.executable, "-m", "pytest", "-m", marker, *cache, *own_paths(name, others)]


def status(codes: dict[str, int]) -> int:
    """0 when every half passed or had nothing to run; else the first failing half's, in HALVES order."""
    if all(code == NO_TESTS_COLLECTED for code in codes.values()):
        return NO_TESTS_COLLECTED
    failing = [codes[name] for name, _ in HALVES if codes[name] not in (0, NO_TESTS_COLLECTED)]
    return failing[0] if failing else 0


def last_summary(text: str) -> str:
    """pytest's closing line (``12 passed, 1 skipped in 3.41s``), or a note that there was none."""
    lines = [m.group(1) for m in map(SUMMARY_LINE.match, text.splitlines()) if m]
    return lines[-1] if lines else "no summary line (see its output above)"


def main(argv: Optional[Sequence[str]] = None) -> int:
    expression, others = split_marker(sys.argv[1:] if argv is None else argv)
    folder = Path(tempfile.mkdtemp(prefix="pytest-halves-"))
    engine_log = folder / "engine.log"
    print(f"[halves] the engine tests run beside the rest; their output goes to {engine_log}", flush=True)
    started = time.monotonic()
    procs: dict[str, subprocess.Popen[bytes]] = {}

    def forward(signum: int, frame: Optional[FrameType]) -> None:
        for proc in procs.values():
            if proc.poll() is None:
                try:
                    if signum == signal.SIGINT:  # as a terminal's Ctrl-C reaches a pytest: its whole group
                        os.killpg(proc.pid, signum)
                    else:  # as `kill` reaches a pytest
                        proc.send_signal(signum)
                except ProcessLookupError:
                    pass

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)
    with open(engine_log, "wb") as log:
        for name, own in HALVES:
            procs[name] = subprocess.Popen(
                half_command(name, own, expression, others),
                stdout=log if name == "engine" else None,
                stderr=subprocess.STDOUT if name == "engine" else None,
                start_new_session=True,
                preexec_fn=die_with(os.getpid()),
            )
        # a half ended by a signal: 128 + its number, as a shell says it
        codes = {name: code if code >= 0 else 128 - code for name, code in ((n, p.wait()) for n, p in procs.items())}
    wall = time.monotonic() - started
    text = engine_log.read_text(errors="replace")
    print(f"\n[halves] the engine tests' output ({engine_log}):\n{text}", end="", flush=True)
    for name, _ in HALVES:
        summary = last_summary(text) if name == "engine" else "its summary is above"
        print(f"[halves] {name}: status {codes[name]}, {summary}")
    print(f"[halves] both halves side by side: {wall:.0f} s of wall time", flush=True)
    shutil.rmtree(folder, ignore_errors=True)  # printed whole above
    return status(codes)


if __name__ == "__main__":
    sys.exit(main())
