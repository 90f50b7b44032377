"""The forms of a run's hashes, as one ordered list of versions: ``config_sha256`` (the config
that decides what a point measures, harness/config.py) and the workload's ``sha256`` and
``prompts_sha256`` (the measured requests, workloads/base.py).

Why one list: resume, compare, the gate's noise floors and the history match runs by these
hashes, across run folders that older harness versions wrote. Every change to what a hash covers
is a :class:`Version` here, saying what changed and how a config or a plan of the versions before
maps onto it; every run records the version it was made with (summary.json's ``hash_version``),
and a run made at an older version is read through :func:`migrate_config` / :func:`migrate_plan`
(harness/results/migrations.py). The hash functions take what they leave out from here, so a
change and its migration are written once, together.

So far every change kept the older hashes: a key added is hashed only when set (its unset value
is what a config or plan written before it meant by leaving it out), and each key left out of the
config hash was new when it was left out. A change that cannot keep them (:class:`Renamed`: the
hash covers the key's name) makes :func:`keeps_hashes` false for the runs made before it, and
those runs are hashed again from their config.yaml and workload.json, migrated.

Pure data and dict functions (no harness imports): harness/config.py and workloads/base.py,
which sit below harness/results, read it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Union

# Where a key lives: the resolved run config (config.yaml; dotted keys, "workload.duration_s"),
# the head of a workload plan (workload.json), one of its sessions, one of a session's turns.
CONFIG, PLAN, SESSION, TURN = "config", "plan", "session", "turn"


@dataclass(frozen=True)
class Added:
    """A key added at ``where``: absent from what the versions before wrote, which meant ``unset``.
    Hashed only when set (for a plan's head: when not empty), so the older hashes hold."""

    where: str
    key: str
    unset: Any = None


@dataclass(frozen=True)
class LeftOut:
    """A config key that changes how a run is shown or stored, not what it measures: never in
    config_sha256. Left out as it was added, so the older hashes hold. Dotted for a key of a
    section (``client.ray_address``)."""

    key: str


@dataclass(frozen=True)
class Renamed:
    """A key renamed at ``where``: what the versions before wrote as ``old`` is ``new``. The hash
    covers the name, so the runs made before it are hashed again, migrated."""

    where: str
    old: str
    new: str


@dataclass(frozen=True)
class Dropped:
    """A config key the hash covered, left out from now on (it changes how often or where a point
    runs, not what a run measures). The hash covered it, so the runs made before it are hashed
    again, without it, from their config.yaml."""

    key: str


Change = Union[Added, LeftOut, Renamed, Dropped]


@dataclass(frozen=True)
class Version:
    number: int
    made: str  # the commit and day it came in
    what: str  # what changed, in a line
    changes: tuple[Change, ...]

    @property
    def keeps_hashes(self) -> bool:
        """The hashes of the versions before it are its hashes too (no key renamed or dropped)."""
        return not any(isinstance(c, (Renamed, Dropped)) for c in self.changes)


# Oldest first; the last is the form the harness writes now. Append, never edit: runs on disk
# were made at these versions.
VERSIONS: tuple[Version, ...] = (
    Version(
        1,
        "e352415, 2026-12-01",
        "summary.json carries config_sha256 (the resolved config, presentation keys left out) and "
        "the workload's sha256 (name, exact_output_len, sampling, the sessions) and prompts_sha256 "
        "(the same without arrival times); a run before it has no config hash, and its prompts "
        "hash is taken from its workload.json",
        tuple(LeftOut(k) for k in ("output_root", "progress", "report", "resume", "save_output_text", "sweep")),
    ),
    Version(
        2,
        "40f50e1, 2026-12-01",
        "data workloads: the plan's data file (hashed as its sha256), a turn's dataset reply and "
        "prompt id, a session's history",
        (Added(PLAN, "source"), Added(TURN, "reply"), Added(TURN, "prompt_id"), Added(SESSION, "history")),
    ),
    Version(
        3,
        "35748ec, 2026-12-02",
        "the regression gate: the machine-state check and the history folder",
        (LeftOut("machine"), LeftOut("history")),
    ),
    Version(4, "c1db7eb, 2026-12-02", "the server's /metrics time series", (LeftOut("server_metrics"),)),
    Version(
        5,
        "8cf940a, 2026-12-02",
        "load over time: a duration, stages or a ramp, the steady-state window, the plan's schedule "
        "(in the content hash only: it is arrival times); the cost of the machine",
        (
            Added(CONFIG, "workload.duration_s"),
            Added(CONFIG, "workload.stages"),
            Added(CONFIG, "workload.ramp"),
            Added(CONFIG, "workload.warmup_s", 0.0),
            Added(CONFIG, "workload.cooldown_s", 0.0),
            Added(PLAN, "schedule"),
            LeftOut("cost"),
        ),
    ),
    Version(
        6,
        "181e0ba, 2026-12-02",
        "agent trees, LoRA traffic and structured output: a session's adapter, job, depth and "
        "parent; the plan's adapters and reply constraint",
        (
            Added(SESSION, "adapter"),
            Added(SESSION, "job_id"),
            Added(SESSION, "depth"),
            Added(SESSION, "parent"),
            Added(PLAN, "lora"),
            Added(PLAN, "structured"),
        ),
    ),
    Version(
        7,
        "the sweep gate across time, 2026-12-05",
        "repeat (how many times a point runs) left out of config_sha256: a noise floor measured by an "
        "A/A of single runs is the floor of a sweep's repeated point, and resume finds the repeats a "
        "sweep with more repeats still needs",
        (Dropped("repeat"),),
    ),
    Version(
        8,
        "capacity with confidence, 2026-12-06",
        "the SLO search repeats each probe until its verdict is clear, within a budget: its keys "
        "for the runs, the budget, the error level and the noise floors",
        (
            Added(CONFIG, "slo_search.min_runs", 2),
            Added(CONFIG, "slo_search.max_runs_per_probe", 5),
            Added(CONFIG, "slo_search.max_runs", 40),
            Added(CONFIG, "slo_search.max_time_s"),
            Added(CONFIG, "slo_search.alpha", 0.05),
            Added(CONFIG, "slo_search.noise_dir"),
        ),
    ),
    Version(
        9,
        "the reference server's batch, 2026-12-06",
        "the reference server's batch_itl_ms (a request's ITL grows with the requests running), hashed when set",
        (Added(CONFIG, "backend.batch_itl_ms", 0.0),),
    ),
    Version(
        10,
        "the search over engine settings, 2026-12-06",
        "the search's settings (search.*: which points a search runs, not what one point measures) left out",
        (LeftOut("search"),),
    ),
    Version(
        11,
        "load generation across hosts, 2026-12-06",
        "the client's workers on a Ray cluster: where they run and on how many hosts (hashed when "
        "set); the cluster's address, the clock checks and what a lost host does left out (they "
        "change where and how a run is watched, not what it measures)",
        (
            Added(CONFIG, "client.cluster", "local"),
            Added(CONFIG, "client.hosts"),
            LeftOut("client.ray_address"),
            LeftOut("client.on_host_loss"),
            LeftOut("client.clock_samples"),
            LeftOut("client.max_clock_drift_ms"),
            LeftOut("client.host_timeout_s"),
        ),
    ),
)

HASH_VERSION = VERSIONS[-1].number  # what a run made now records
UNRECORDED = 0  # a run made before runs recorded their version: migrated from the first


def current_version() -> int:
    """The version of the hashes made now (:data:`HASH_VERSION`, read when called)."""
    return VERSIONS[-1].number


def check_versions(versions: Sequence[Version] = VERSIONS) -> None:
    """The list's own rules: numbered 1, 2, 3… oldest first; each key changed once (a key that
    changes again is renamed)."""
    if [v.number for v in versions] != list(range(1, len(versions) + 1)):
        raise ValueError("hash versions are numbered 1, 2, 3… oldest first")
    seen: set[tuple[str, str]] = set()
    for change in (c for v in versions for c in v.changes):
        name = _name(change)
        if name in seen:
            raise ValueError(f"hash versions: the {name[0]} key {name[1]} changes twice")
        seen.add(name)
        if isinstance(change, Added) and change.where in (SESSION, TURN) and change.unset is not None:
            raise ValueError(f"hash versions: a {change.where} field is unset as None (a plan leaves those out)")


def _name(change: Change) -> tuple[str, str]:
    """(where, key) of the key a change leaves in the current form."""
    if isinstance(change, (LeftOut, Dropped)):
        return CONFIG, change.key
    return change.where, change.new if isinstance(change, Renamed) else change.key


check_versions()


def since(made_at: int) -> list[Version]:
    """The versions after ``made_at``: what a run made then goes through."""
    return [v for v in VERSIONS if v.number > made_at]


def keeps_hashes(made_at: int) -> bool:
    """A run made at ``made_at`` has the hashes it would have now (every version since kept them)."""
    return all(v.keeps_hashes for v in since(made_at))


def left_out() -> tuple[str, ...]:
    """The config keys config_sha256 does not cover now (by their current names)."""
    return (*_current_names(LeftOut, CONFIG), *_current_names(Dropped, CONFIG))


def hashed_when_set(where: str) -> dict[str, Any]:
    """Keys at ``where`` that enter the hashes only when set: key (its current name) → its unset value."""
    return _current_names(Added, where)


def _current_names(kind: type, where: str) -> dict[str, Any]:
    """The keys a kind of change made at ``where``, each under the name it has after the renames
    since: name → unset value (None for a key left out)."""
    names: dict[str, Any] = {}
    for change in (c for v in VERSIONS for c in v.changes):
        if isinstance(change, kind) and _name(change)[0] == where:
            names[_name(change)[1]] = getattr(change, "unset", None)
        elif isinstance(change, Renamed) and change.where == where and change.old in names:
            names[change.new] = names.pop(change.old)
    return names


# --- the current form ---------------------------------------------------------------------


def hashed_config(body: dict[str, Any]) -> dict[str, Any]:
    """What config_sha256 covers of a resolved config (a plain dict, changed in place): the keys
    left out dropped, and the added keys while they hold their unset value."""
    for key in left_out():
        parent, last = _parent(body, key)  # a dotted key: under its section
        if isinstance(parent, dict):
            parent.pop(last, None)
    for dotted, unset in hashed_when_set(CONFIG).items():
        parent, key = _parent(body, dotted)
        if isinstance(parent, dict) and key in parent and parent[key] == unset:
            del parent[key]
    return body


def config_digest(body: dict[str, Any]) -> str:
    """config_sha256 of a resolved config (a plain dict, changed in place)."""
    return hashlib.sha256(json.dumps(hashed_config(body), sort_keys=True, default=str).encode()).hexdigest()


# --- migrations ---------------------------------------------------------------------------


def migrate_config(body: dict[str, Any], made_at: int) -> dict[str, Any]:
    """A resolved config as the version ``made_at`` wrote it (config.yaml), in the current form
    (changed in place): keys renamed since, and the keys added since at their unset value.
    Idempotent on a config that has them already, so a run that records no version migrates
    from the first."""
    for version in since(made_at):
        for change in version.changes:
            if isinstance(change, Renamed) and change.where == CONFIG:
                parent, old = _parent(body, change.old)
                if isinstance(parent, dict) and old in parent:
                    value = parent.pop(old)
                    new_parent, new = _parent(body, change.new)
                    if isinstance(new_parent, dict):
                        new_parent.setdefault(new, value)
            elif isinstance(change, Added) and change.where == CONFIG:
                parent, key = _parent(body, change.key)
                if isinstance(parent, dict):
                    parent.setdefault(key, change.unset)
    return body


def migrate_plan(body: dict[str, Any], made_at: int) -> dict[str, Any]:
    """A plan as the version ``made_at`` wrote it (workload.json), in the current form (changed
    in place): keys renamed since, in the head, each session and each turn. Added keys need
    nothing: a plan leaves them out while unset, as the versions before did."""
    for version in since(made_at):
        for change in version.changes:
            if not isinstance(change, Renamed):
                continue
            if change.where == PLAN:
                targets: Iterable[dict[str, Any]] = [body]
            elif change.where == SESSION:
                targets = (s for key in ("sessions", "warmup") for s in body.get(key) or ())
            elif change.where == TURN:
                targets = (
                    t for key in ("sessions", "warmup") for s in body.get(key) or () for t in s.get("turns") or ()
                )
            else:
                continue
            for target in targets:
                if change.old in target:
                    target[change.new] = target.pop(change.old)
    return body


def _parent(body: dict[str, Any], dotted: str) -> tuple[Any, str]:
    """The dict holding a dotted key, and the key's last part (None as the dict when absent)."""
    *path, key = dotted.split(".")
    node: Any = body
    for part in path:
        node = node.get(part) if isinstance(node, dict) else None
    return node, key
