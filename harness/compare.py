"""``python -m harness.compare RUN…``: compare run folders (harness/reports/compare/cli.py)."""

import sys

from harness.reports.compare.cli import main

if __name__ == "__main__":
    sys.exit(main())
