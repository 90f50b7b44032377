"""``python -m harness.reference_server``: the reference server, also ``python -m refserver`` (refserver/cli.py)."""

from refserver.cli import main

if __name__ == "__main__":
    main(prog="python -m harness.reference_server")
