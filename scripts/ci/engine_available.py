"""Whether an engine can run on this runner, asked of the backend registry (no engine names here).

    .venv-tgi/bin/python scripts/ci/engine_available.py tgi

Run with the engine's own interpreter. Prints it, and writes available=true|false to
$GITHUB_OUTPUT when that is set. The check is the one a run makes before any model loads
(backends.check_backend_available): an in-process engine must be importable; an engine with
a server of its own needs its program on PATH, or, with $HARNESS_CONTAINER_IMAGE, docker;
a server that runs as a module of this interpreter needs that module.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from backends.factory import check_backend_available
from backends.registry import backend_registry
from core.errors import HarnessError
from harness.cli import compose_config


def available(engine: str, image: str) -> tuple[bool, str]:
    overrides = [f"backend={engine}", "model=tiny-random"]
    if image:
        overrides.append(f"backend.container.image={image}")
    try:
        config = compose_config(*overrides).backend
        check_backend_available(config)
        if config.mode == "server" and not image:
            backend_registry.get(engine).cls.check_available()  # a server module of this interpreter
    except HarnessError as exc:
        return False, str(exc)
    return True, "available"


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: engine_available.py ENGINE", file=sys.stderr)
        return 2
    engine = sys.argv[1]
    ok, why = available(engine, os.environ.get("HARNESS_CONTAINER_IMAGE", ""))
    print(f"{engine}: {why}" if ok else f"{engine}: not on this runner ({why}): skipped")
    out = os.environ.get("GITHUB_OUTPUT")
    if out:
        with open(out, "a") as f:
            f.write(f"available={'true' if ok else 'false'}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
