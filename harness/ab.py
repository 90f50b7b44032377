"""``python -m harness.ab``: see :mod:`harness.run.ab`."""

import sys

from core.interrupts import exit_interrupted_at_start, keep_every_interrupt
from core.parent import take_back_ctrl_c

try:
    keep_every_interrupt()  # a Ctrl-C swallowed in a callback is sent again
    take_back_ctrl_c()  # a background job's ignored SIGINT: kill -INT stops the experiment as Ctrl-C does
    from harness.run.ab import main
except KeyboardInterrupt:
    exit_interrupted_at_start("\ninterrupted before the experiment started: nothing was run")

if __name__ == "__main__":
    sys.exit(main())
