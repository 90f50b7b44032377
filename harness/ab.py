"""``python -m harness.ab``: see :mod:`harness.run.ab`."""
import sys

from core.parent import take_back_ctrl_c

try:
    take_back_ctrl_c()  # a background job's ignored SIGINT: kill -INT stops the experiment as Ctrl-C does
    from harness.run.ab import main
except KeyboardInterrupt:
    print("\ninterrupted before the experiment started: nothing was run", file=sys.stderr)
    sys.exit(130)

if __name__ == "__main__":
    sys.exit(main())
