"""``python -m harness.ab``: see :mod:`harness.run.ab`."""
import sys

from harness.run.ab import main

if __name__ == "__main__":
    sys.exit(main())
