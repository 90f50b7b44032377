"""LoRA traffic: which adapter serves each session (``workload.lora.adapters``).

    workload.lora.adapters='[{name: a0, path: "store:adapter-0", share: 2}, {name: a1, path: "store:adapter-1"},
                             {name: base, share: 1}]'

Each entry is ``{name, path, share}``: ``path`` is a PEFT folder, a GGUF LoRA file, or
``store:adapter-N`` (a seeded adapter the model store makes for the model,
harness/run/adapter_store.py); ``share`` is its weight in the traffic (default 1; shares are
normalised to sum to 1). The name ``base`` (no path) is the base model's share: requests
without an adapter.

Assignment is per session (every turn of a chat keeps its adapter, as one user of one
fine-tune would): of n sessions, adapter i gets its quota q_i = n · s_i / Σ s rounded by
largest remainder (the counts sum to n; ties to the earlier entry), and the labels are shuffled
with a stream of the run's seed (``seed``, :data:`LORA_STREAM`). The same config and seed give
the same assignment; it is part of the plan, so of the workload's hashes. Warm-up sessions go
round-robin over the entries in order, so each adapter is loaded before the measured phase.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from core.errors import ConfigError
from core.lora import BASE

# the SeedSequence entropy beside the run's seed for the assignment's own random stream
LORA_STREAM = 0x10A4
ENTRY_KEYS = {"name", "path", "share"}
STORE_PREFIX = "store:"


@dataclass
class LoraSettings:
    """``workload.lora``: the adapters and their shares of the traffic; empty: no LoRA."""

    # [{name, path, share}]: path a PEFT folder, a GGUF LoRA or store:adapter-N (no path: the base
    # model's share); share the entry's weight (default 1)
    adapters: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class AdapterSpec:
    name: str
    path: Optional[str]  # None for the base model's share
    share: float

    @property
    def is_base(self) -> bool:
        return self.name == BASE

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.path, "share": self.share}


def adapter_specs(settings: Optional[LoraSettings]) -> list[AdapterSpec]:
    """The validated entries of ``workload.lora.adapters`` (empty: no LoRA); bad entries raise
    one ConfigError line naming the entry and what to do."""
    raw = list(getattr(settings, "adapters", None) or [])
    specs: list[AdapterSpec] = []
    for i, entry in enumerate(raw):
        key = f"workload.lora.adapters[{i}]"
        if not hasattr(entry, "items"):
            raise ConfigError(f"{key} must be a mapping {{name, path, share}} (got {entry!r})")
        entry = dict(entry.items())
        unknown = set(entry) - ENTRY_KEYS
        if unknown:
            raise ConfigError(
                f"{key} has unknown keys {', '.join(sorted(unknown))}: an adapter is {{name, path, share}}"
            )
        name = entry.get("name")
        if not isinstance(name, str) or not name or any(c in name for c in "=,: /"):
            raise ConfigError(
                f"{key}.name must be a non-empty name without '=', ',', ':', '/' or spaces (got {name!r})"
            )
        path = entry.get("path")
        if name == BASE:
            if path is not None:
                raise ConfigError(
                    f"{key}: '{BASE}' is the base model's share and takes no path; name the adapter otherwise"
                )
        elif not isinstance(path, str) or not path:
            raise ConfigError(f"{key} ({name}) needs a path: a PEFT folder, a GGUF LoRA, or store:adapter-N")
        share = entry.get("share", 1.0)
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not math.isfinite(share) or share <= 0:
            raise ConfigError(f"{key}.share must be a number > 0 (got {share!r})")
        specs.append(AdapterSpec(name, path, float(share)))
    names = [s.name for s in specs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(
            f"workload.lora.adapters names {', '.join(dupes)} more than once: give each entry its own name"
        )
    if specs and all(s.is_base for s in specs):
        raise ConfigError(f"workload.lora.adapters has only '{BASE}': add an adapter, or drop workload.lora")
    return specs


def describe_traffic(entries: list[dict[str, Any]]) -> Optional[str]:
    """The plan's adapters in a few words, with a fingerprint of the entries (names, paths,
    shares: the first 12 hex digits of their sha256), so two runs that sent traffic to other
    adapters are told apart at a glance: ``a0 2, a1 1, base 1 · 3f2a9c1d04be``."""
    if not entries:
        return None
    digest = hashlib.sha256(json.dumps(entries, sort_keys=True).encode()).hexdigest()[:12]
    return ", ".join(f"{e['name']} {e['share']:g}" for e in entries) + f" · {digest}"


def quotas(specs: list[AdapterSpec], n: int) -> list[int]:
    """Sessions per entry: n · s_i / Σ s, rounded by largest remainder (sums to n)."""
    shares = [s.share for s in specs]
    if not math.isfinite(sum(shares)):  # shares near the float maximum: their ratios are what count
        shares = [share / max(shares) for share in shares]
    total = sum(shares)
    exact = [n * share / total for share in shares]
    counts = [math.floor(x) for x in exact]
    order = sorted(range(len(specs)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[: n - sum(counts)]:
        counts[i] += 1
    return counts


def assign(specs: list[AdapterSpec], n: int, seed: Optional[int]) -> list[Optional[str]]:
    """The adapter of each of n sessions (None: the base model), seeded."""
    labels: list[Optional[str]] = []
    for spec, count in zip(specs, quotas(specs, n)):
        labels.extend([None if spec.is_base else spec.name] * count)
    rng = np.random.default_rng(np.random.SeedSequence([seed or 0, LORA_STREAM]))
    order = rng.permutation(n)
    return [labels[i] for i in order]


def round_robin(specs: list[AdapterSpec], n: int) -> list[Optional[str]]:
    """Warm-up: entry i % len(specs) for session i, so each adapter runs once before measuring."""
    return [None if specs[i % len(specs)].is_base else specs[i % len(specs)].name for i in range(n)]


def is_store_path(path: str) -> bool:
    return path.startswith(STORE_PREFIX)
