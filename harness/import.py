"""``python -m harness.import FILE…``: another tool's result files as run folders (harness/interop/import_cli.py).

``import`` is a keyword, so this module is run, never imported: ``python -m`` takes it by name.
"""

import sys

from harness.interop.import_cli import main

if __name__ == "__main__":
    sys.exit(main())
