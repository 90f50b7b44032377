"""``python -m refserver``: the reference server (``--help`` lists its options)."""

from refserver.cli import main

if __name__ == "__main__":
    main()
