"""``python -m harness.agree``: cross-engine token agreement, run and compared (harness/run/agree.py)."""
import sys

from core.parent import take_back_ctrl_c

try:
    take_back_ctrl_c()  # a background job's ignored SIGINT: kill -INT stops it as Ctrl-C does
    from harness.run.agree import main
except KeyboardInterrupt:
    print("\ninterrupted before any run started", file=sys.stderr)
    sys.exit(130)

if __name__ == "__main__":
    sys.exit(main())
