"""Several servers' Prometheus ``/metrics`` as one exposition: every sample labelled with the
index of the endpoint it came from (``endpoint="0"``, ``"1"``, …), each family's samples kept
together under its ``# HELP``/``# TYPE`` lines (written once). A run over several endpoints
(``backend.urls``, ``backend.replicas``) scrapes each and hands the harness the merged text, so
its before/after difference and its time series hold each endpoint's series and their sum."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

ENDPOINT_LABEL = "endpoint"


def label_sample(line: str, index: int) -> str:
    """A sample line with ``endpoint="index"`` first among its labels."""
    space = line.find(" ")
    brace = line.find("{")
    if brace != -1 and (space == -1 or brace < space):
        close = line.rfind("}")  # the value and timestamp after it hold no brace
        inner = line[brace + 1 : close].strip().rstrip(",")
        labels = f'{ENDPOINT_LABEL}="{index}"' + (f",{inner}" if inner else "")
        return f"{line[:brace]}{{{labels}}}{line[close + 1 :]}"
    if space == -1:
        return line  # not a sample: left as it is (the parser skips it)
    return f'{line[:space]}{{{ENDPOINT_LABEL}="{index}"}}{line[space:]}'


def merge(texts: Sequence[Optional[str]]) -> str:
    """The expositions of endpoints 0, 1, … as one (None: that endpoint gave none)."""
    families: dict[str, tuple[list[str], list[str]]] = {}  # family → (its comment lines, its samples)
    for index, text in enumerate(texts):
        if text is None:
            continue
        family: Optional[str] = None
        for raw in text.splitlines():
            line = raw.strip()
            if not line:
                continue
            if line.startswith("#"):
                parts = line.split(None, 3)
                if len(parts) >= 3 and parts[1] in ("HELP", "TYPE", "UNIT"):
                    family = parts[2]
                    comments = families.setdefault(family, ([], []))[0]
                    if line not in comments:
                        comments.append(line)
                continue  # other comments (# EOF) are dropped
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if family is None or not name.startswith(family):  # an untyped family of its own
                family = name
            families.setdefault(family, ([], []))[1].append(label_sample(line, index))
    lines = [line for comments, samples in families.values() for line in (*comments, *samples)]
    return "\n".join(lines) + "\n"
