"""``python -m harness.report RUN_DIR…``: (re)build report.html (harness/reports/run_report.py)."""

import sys

from harness.reports.run_report import main

if __name__ == "__main__":
    sys.exit(main())
