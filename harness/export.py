"""``python -m harness.export RUN_OR_SWEEP… --format llmd --out FILE``: runs as llm-d benchmark reports (harness/interop/export_cli.py)."""

import sys

from harness.interop.export_cli import main

if __name__ == "__main__":
    sys.exit(main())
