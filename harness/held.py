"""``python -m harness.held <overrides>``: one engine held loaded for many runs, each asked for on
stdin as a JSON line and answered on stdout (the loop: :mod:`harness.run.held`). It is what
``python -m harness.ab --keep-loaded`` starts for each arm; a person runs ``python -m harness``.

Everything else the process and its engine write goes to stderr: stdout carries the answers
alone. SIGTERM and SIGHUP end it as SIGINT does, and on Linux it gets SIGTERM when the process
that started it dies (a killed experiment leaves no engine loaded).
"""

from __future__ import annotations

import logging
import os
import signal
import sys

from core.errors import HarnessError
from core.interrupts import keep_every_interrupt
from core.parent import signal_when_parent_dies
from harness.cli import compose_config, exit_now, terminate_as_interrupt
from harness.run.held import serve


def main(argv: list[str]) -> int:
    answers = os.fdopen(os.dup(1), "w", buffering=1)  # stdout, kept for the answers alone
    os.dup2(2, 1)  # what anything else writes to stdout (an engine's own processes too) goes to stderr
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started in the background
    keep_every_interrupt()  # a Ctrl-C swallowed in a callback is sent again
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, terminate_as_interrupt)
    parent = os.getppid()
    signal_when_parent_dies(signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the line above
        return 130
    logger = logging.getLogger("harness")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        cfg = compose_config(*argv)
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - Hydra's and OmegaConf's errors on a bad override
        print(f"error: {(str(exc).strip().splitlines() or [type(exc).__name__])[0]}", file=sys.stderr)
        return 2
    return serve(cfg, argv, sys.stdin, answers)


if __name__ == "__main__":
    try:
        code = main(sys.argv[1:])
    except KeyboardInterrupt:
        code = 130
    except SystemExit as exc:
        exit_now(exc.code)
    exit_now(code)
