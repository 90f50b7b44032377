"""``python -m harness.agree``: cross-engine token agreement, run and compared (harness/run/agree.py)."""
import sys

from harness.run.agree import main

if __name__ == "__main__":
    sys.exit(main())
