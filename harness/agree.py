"""``python -m harness.agree``: cross-engine token agreement, run and compared (harness/run/agree.py)."""

import sys

from core.interrupts import exit_interrupted_at_start, keep_every_interrupt
from core.parent import take_back_ctrl_c

try:
    keep_every_interrupt()  # a Ctrl-C swallowed in a callback is sent again
    take_back_ctrl_c()  # a background job's ignored SIGINT: kill -INT stops it as Ctrl-C does
    from harness.run.agree import main
except KeyboardInterrupt:
    exit_interrupted_at_start("\ninterrupted before any run started")

if __name__ == "__main__":
    sys.exit(main())
