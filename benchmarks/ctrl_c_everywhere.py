"""A Ctrl-C at every line a library runs: what comes out, KeyboardInterrupt or another error?

A KeyboardInterrupt can land at any bytecode, and code not written for it can turn it into
another error (a ``finally`` that reads what its ``try`` had not set yet). Such an error would end
an interrupted run as "failed", exit 1, unless ``core.interrupts.interrupts_kept`` raises it as
the Ctrl-C it was. This raises KeyboardInterrupt at the K-th line event in the chosen library's
files while the harness hashes a run's config (``harness.config.config_sha256``, which OmegaConf
does, and where tests/test_faults.py's interrupted SLO search lands), for K = 1, 1 + step, …
until the call runs to its end, and tallies what each try raised, with and without
``interrupts_kept``::

    .venv/bin/python benchmarks/ctrl_c_everywhere.py                   # omegaconf, every 7th line
    .venv/bin/python benchmarks/ctrl_c_everywhere.py --library omegaconf --step 1

Measured (2026-12-06, OmegaConf 2.3.1, step 7, ~15 min a pass here): 15,900 places; 45
UnboundLocalError and 121 AttributeError without ``interrupts_kept``, every one KeyboardInterrupt
with it.
"""

from __future__ import annotations

import argparse
import collections
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any, Optional

from core.interrupts import interrupt_behind, interrupts_kept
from harness.cli import compose_config
from harness.config import config_sha256


def outcome(call: Callable[[], Any], library: str, k: int, kept: bool) -> str:
    """What ``call`` raised with a KeyboardInterrupt at the k-th line event in ``library``'s files."""
    lines = [0]

    def tracer(frame: FrameType, event: str, arg: Any) -> Optional[Callable[..., Any]]:
        if f"/{library}/" not in frame.f_code.co_filename:
            return tracer if event == "call" else None
        if event == "line":
            lines[0] += 1
            if lines[0] == k:
                sys.settrace(None)
                raise KeyboardInterrupt
        return tracer

    sys.settrace(tracer)
    try:
        if kept:
            with interrupts_kept():
                call()
        else:
            call()
        return "ran to its end"
    except KeyboardInterrupt:
        return "KeyboardInterrupt"
    except Exception as exc:  # noqa: BLE001 - what the Ctrl-C became is what is counted
        behind = " (a KeyboardInterrupt behind it)" if interrupt_behind(exc) else ""
        return f"{type(exc).__name__}{behind}"
    finally:
        sys.settrace(None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", default="omegaconf", help="a folder name in the library's path")
    parser.add_argument("--step", type=int, default=7, help="every step-th line event")
    args = parser.parse_args()
    cfg = compose_config("backend=reference", "model=tiny-random", "workload=synthetic")
    for kept in (False, True):
        tally: collections.Counter[str] = collections.Counter()
        k = 1
        while (result := outcome(lambda: config_sha256(cfg), args.library, k, kept)) != "ran to its end":
            tally[result] += 1
            k += args.step
        print(f"{'with' if kept else 'without'} interrupts_kept: {sum(tally.values())} places: {dict(tally)}")


if __name__ == "__main__":
    main()
