"""``python -m harness.crosscheck --url URL``: one server measured by the harness and each installed peer client (harness/interop/crosscheck_cli.py)."""

import sys

from harness.interop.crosscheck_cli import main

if __name__ == "__main__":
    sys.exit(main())
