"""``python -m harness.history``: see harness/history/cli.py."""

import sys

from harness.history.cli import main

if __name__ == "__main__":
    sys.exit(main())
