"""The server's watchdog: stops the server's process group once the harness is gone.

A tiny process of its own (its own session: a Ctrl-C to the terminal does not reach it) that
outlives the harness only to stop the server's process group when the harness is gone, even
after a SIGKILL, which runs no clean-up: the harness is its parent, so being re-parented means
the harness died. Then it runs the clean-up commands (so it waits for the harness as long as
there are some, even after the group is gone; a clean stop kills it).

Run by path, in an isolated interpreter (``python -I -S watchdog.py PGID GRACE_S CLEANUP_JSON
PARENT_PID``): the standard library only, nothing of the harness. The harness's pid is given,
not read at start: the harness may already be gone by the time this interpreter has started.
"""

import json
import os
import signal
import subprocess
import sys
import time

POLL_S = 0.25  # how soon the harness's end is noticed


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except OSError:
        return False


def stop_group(pgid: int, grace_s: float) -> None:
    """SIGTERM to the group, SIGKILL to what is left after ``grace_s``."""
    os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if group_alive(pgid):
        os.killpg(pgid, signal.SIGKILL)


def run_cleanup(commands: list) -> None:
    for argv in commands:
        try:
            subprocess.run(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120
            )
        except Exception:  # noqa: BLE001 - each command is tried, whatever the one before did
            pass


def watch(pgid: int, grace_s: float, cleanup: list, parent: int) -> None:
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    while os.getppid() == parent and (group_alive(pgid) or cleanup):
        time.sleep(POLL_S)
    if group_alive(pgid):
        stop_group(pgid, grace_s)
    if os.getppid() != parent:  # the harness died: its own stop never ran the clean-up
        run_cleanup(cleanup)


if __name__ == "__main__":
    watch(int(sys.argv[1]), float(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4]))
