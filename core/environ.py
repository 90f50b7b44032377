"""The process environment kept as it was around a block.

Some engines' packages set environment variables when imported (SGLang's configuration module sets
CUDA_CACHE_PATH, TRITON_CACHE_DIR and others). Where the harness imports one only to check a
configuration, those would otherwise reach every process it starts afterwards: an engine's
server, a watchdog, another engine in the same sweep.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def environment_kept() -> Iterator[None]:
    """``os.environ`` after the block is what it was before it (added names removed, changed ones
    put back)."""
    before = dict(os.environ)
    try:
        yield
    finally:
        for name in set(os.environ) - set(before):
            del os.environ[name]
        for name, value in before.items():
            if os.environ.get(name) != value:
                os.environ[name] = value
