"""Small helpers on token-id sequences, shared by backends, workloads and the harness."""
from __future__ import annotations

from typing import Sequence


def common_prefix(a: Sequence, b: Sequence) -> int:
    """The number of leading items ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
