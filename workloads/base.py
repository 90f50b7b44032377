"""The workload interface: a config, and a plan of sessions built from it.

A plan is a list of sessions; a session is a list of turns. A synthetic workload is one
turn per session; a chat workload re-sends the whole history each turn. Everything in a
plan is decided before the run from the seed, except the model's replies in a chat.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence, Sized
from dataclasses import dataclass, field, fields
from itertools import chain, islice
from typing import Any, Optional, Union

import numpy as np

from core.errors import ConfigError
from core.hash_versions import PLAN, SESSION, TURN, hashed_when_set
from core.structured import check_tool_choice_share, normalize_response_format, normalize_tools
from workloads.arrivals import arrival_registry
from workloads.corpus import TokenizedCorpus
from workloads.lora import LoraSettings, adapter_specs, assign, round_robin
from workloads.prompts import PromptRenderer
from workloads.schedule import CONCURRENCY, RATE, count_arrivals, load_schedule
from workloads.session_file import SPILL_AT, SessionFile

LENGTH_DISTRIBUTIONS = ("fixed", "uniform", "normal")

# A warm-up request only has to run the engine's paths once (prefill, a few decode steps):
# its output is capped, whatever the workload's output_len.
WARMUP_OUTPUT_TOKENS = 16


@dataclass
class WorkloadConfig:
    """Fields every workload has: arrival, concurrency, output lengths, sampling, warm-up."""

    name: str = "?"  # the workload: set by workload=<choice>, never by hand
    # Closed loop: at most `concurrency` sessions in flight (1 when unset and no rate).
    # Open loop: sessions start at `rate` per second; `concurrency` then caps those in flight.
    concurrency: Optional[int] = None
    rate: Optional[float] = None  # open loop: sessions (requests) started per second; null: closed loop
    arrival: str = "poisson"  # poisson | gamma | constant (open loop only)
    burstiness: float = 1.0  # gamma shape; 1 is Poisson, larger is more regular
    output_len: int = 32  # output tokens asked of each request (the mean with a distribution)
    output_len_dist: str = "fixed"  # fixed | uniform | normal
    output_len_spread: float = 0.0  # uniform: half-width; normal: standard deviation (tokens)
    exact_output_len: bool = True  # suppress end-of-sequence to get exactly output_len tokens
    temperature: float = 0.0  # 0: greedy decoding
    top_p: float = 1.0  # nucleus sampling (1: off)
    top_k: int = 0  # top-k sampling (0: off)
    warmup_requests: int = 1  # each with at most WARMUP_OUTPUT_TOKENS output tokens
    # Closed loop: at least this many sessions per unit of concurrency (a sweep over
    # concurrency then runs each point for as many rounds); null: the count as configured.
    min_rounds: Optional[int] = None
    # Time-shaped load (workloads/schedule.py): a run that lasts a time; stages of a rate or a
    # concurrency; a ramp of either. null: a run of a count, as configured.
    duration_s: Optional[float] = None
    stages: Optional[list[Any]] = None  # [{duration_s, rate} | {duration_s, concurrency}, …]
    ramp: Optional[Any] = None  # a mapping {from, to, duration_s, shape: linear|exponential, of: rate|concurrency}
    # The steady-state window: the summary's latency and throughput count only the requests that
    # started in [warmup_s, L − cooldown_s] (docs/metrics.md); 0 and 0: the whole run.
    warmup_s: float = 0.0
    cooldown_s: float = 0.0  # the steady-state window ends this long before the schedule's (or run's) end
    # LoRA traffic (workloads/lora.py): adapters and their shares; empty: the base model alone
    lora: LoraSettings = field(default_factory=LoraSettings)
    # Structured output and tool calls (core/structured.py; every reply is checked):
    # {type: json_schema, schema: {...}} | {type: json_object} (JSON mode: any JSON object) |
    # {type: regex, pattern: "..."}; null: free text
    response_format: Optional[Any] = None
    tools: Optional[list[Any]] = None  # OpenAI tool definitions [{type: function, function: {name, parameters}}]
    tool_choice_share: float = 0.0  # share of requests sent with tool_choice "required" (the rest "auto")

    def validate(self) -> None:
        require_positive("workload.concurrency", self.concurrency, allow_none=True)
        require_positive("workload.min_rounds", self.min_rounds, allow_none=True)
        if self.rate is not None and not self.rate > 0:
            raise ConfigError(f"workload.rate must be > 0 requests/s, or null for a closed loop (got {self.rate})")
        arrival_registry.get(self.arrival)
        if not self.burstiness > 0:
            raise ConfigError(f"workload.burstiness must be > 0 (got {self.burstiness})")
        require_positive("workload.output_len", self.output_len)
        check_length_distribution("workload.output_len", self.output_len_dist, self.output_len_spread)
        if not self.temperature >= 0:  # written so that NaN fails too
            raise ConfigError(f"workload.temperature must be >= 0 (got {self.temperature})")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"workload.top_p must be in (0, 1] (got {self.top_p})")
        if self.top_k < 0:
            raise ConfigError(f"workload.top_k must be >= 0, 0 for none (got {self.top_k})")
        if self.warmup_requests < 0:
            raise ConfigError(f"workload.warmup_requests must be >= 0 (got {self.warmup_requests})")
        schedule = load_schedule(self)
        for key in ("warmup_s", "cooldown_s"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ConfigError(f"workload.{key} must be >= 0 seconds (got {value!r})")
        if schedule is not None and self.warmup_s + self.cooldown_s >= schedule.duration_s:
            raise ConfigError(
                f"workload.warmup_s + workload.cooldown_s ({self.warmup_s + self.cooldown_s:g} s) leave no "
                f"steady-state window in a run of {schedule.duration_s:g} s: make them shorter"
            )
        adapter_specs(self.lora)
        self.structured()

    def structured(self) -> Optional[dict[str, Any]]:
        """The reply constraint as plain data ({response_format, tools, tool_choice_share}), or
        None for free text; ConfigError on a bad one. A constrained reply ends when it is
        complete, so it cannot have an exact length."""
        response_format = normalize_response_format(self.response_format)
        tools = normalize_tools(self.tools)
        check_tool_choice_share(self.tool_choice_share, tools)
        if response_format is None and tools is None:
            return None
        if self.exact_output_len:
            raise ConfigError(
                "workload.response_format and workload.tools need workload.exact_output_len=false: "
                "a constrained reply ends when it is complete, not at an exact length"
            )
        return {
            "response_format": response_format,
            "tools": tools,
            "tool_choice_share": float(self.tool_choice_share) if tools else 0.0,
        }


def session_count(cfg: WorkloadConfig, configured: int, arrival_rng: Optional[np.random.Generator] = None) -> int:
    """``configured``, raised to ``min_rounds`` × concurrency for a closed loop that asks for it.
    A time-shaped load decides the count itself: open loop, one session per arrival of the
    schedule (drawn from a copy of ``arrival_rng``, which make_plan draws again); closed loop,
    :meth:`LoadSchedule.sessions_needed` (the configured count is the least)."""
    schedule = load_schedule(cfg)
    if schedule is not None and schedule.kind == RATE and arrival_rng is not None:
        return count_arrivals(schedule, arrival_rng, arrival_registry.create(cfg.arrival), cfg.burstiness)
    if schedule is not None and schedule.kind == CONCURRENCY:
        return schedule.sessions_needed(configured)
    if cfg.min_rounds is None or cfg.rate is not None:
        return configured
    return max(configured, cfg.min_rounds * (cfg.concurrency or 1))


def require_positive(key: str, value: Optional[float], allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if value is None or value < 1:
        raise ConfigError(f"{key} must be >= 1 (got {value})")


def check_length_distribution(key: str, dist: str, spread: float) -> None:
    if dist not in LENGTH_DISTRIBUTIONS:
        raise ConfigError(f"{key}_dist must be one of {', '.join(LENGTH_DISTRIBUTIONS)} (got {dist!r})")
    if spread < 0:
        raise ConfigError(f"{key}_spread must be >= 0 (got {spread})")


@dataclass(slots=True)  # a plan holds one a request, for the whole run: no __dict__
class TurnSpec:
    user: str  # the user's message for this turn
    output_len: int  # requested output tokens (exact, or a maximum)
    think_time_s: float = 0.0  # pause before sending this turn
    prompt_token_ids: Optional[list[int]] = None  # set when the prompt is fixed in advance
    # Data workloads: the dataset's own reply, which the next turn re-sends instead of the
    # engine's (history from the dataset); and the prompt's id in its data file.
    reply: Optional[str] = None
    prompt_id: Optional[str] = None


@dataclass(slots=True)
class SessionSpec:
    session_id: int
    turns: list[TurnSpec]
    system: Optional[str] = None
    arrival_s: Optional[float] = None  # open loop: when the session starts, from run start
    history: Optional[list[dict[str, str]]] = None  # messages before the first turn (a dataset's)
    adapter: Optional[str] = None  # the LoRA adapter serving every turn (workloads/lora.py); None: the base model
    # Agent jobs (workload=agentic): the job this session belongs to, its depth in the job's
    # tree (0: the main loop) and, for a sub-agent, (parent session id, parent turn): it starts
    # once that turn has finished, and the parent's next turn waits for all its sub-agents.
    job_id: Optional[int] = None
    depth: Optional[int] = None
    parent: Optional[tuple[int, int]] = None


# A plan's measured sessions: a list, or a large plan's file (workloads/session_file.py)
Sessions = Union[list["SessionSpec"], SessionFile]


def first_request_ids(sessions: Sequence[SessionSpec]) -> Sequence[int]:
    """The id of each session's first request: requests are numbered in plan order, turn by turn."""
    if isinstance(sessions, SessionFile):
        return sessions.first_request_ids()
    ids, next_id = [], 0
    for s in sessions:
        ids.append(next_id)
        next_id += len(s.turns)
    return ids


def arrival_order(sessions: Sequence[SessionSpec]) -> Sequence[int] | np.ndarray:
    """The sessions' indices by arrival time (none: 0), ties in plan order."""
    if isinstance(sessions, SessionFile):
        return np.argsort(_arrival_array(sessions), kind="stable")
    return sorted(range(len(sessions)), key=lambda i: sessions[i].arrival_s or 0.0)


def sorted_arrivals(sessions: Sequence[SessionSpec]) -> Sequence[float] | np.ndarray:
    """Every session's arrival time (none: 0), in increasing order."""
    if isinstance(sessions, SessionFile):
        return np.sort(_arrival_array(sessions))
    return sorted(s.arrival_s or 0.0 for s in sessions)


def _arrival_array(sessions: SessionFile, none: float = 0.0) -> np.ndarray:
    """A file's arrival times as numpy (a copy), ``none`` where a session has none."""
    values = np.frombuffer(sessions.arrivals(), dtype=np.float64).copy()
    values[np.isnan(values)] = none
    return values


def has_sub_agents(sessions: Sequence[SessionSpec]) -> bool:
    """Some session waits on its parent's turn (agent jobs)."""
    if isinstance(sessions, SessionFile):
        return sessions.has_parents
    return any(s.parent is not None for s in sessions)


Forks = dict[tuple[int, int], list[tuple[SessionSpec, int]]]


def fork_table(sessions: Sequence[SessionSpec], first_ids: Sequence[int]) -> Forks:
    """The sub-agents of each (session id, turn) that forks, each with its first request id, in
    plan order; {} for a plan without dependencies (every workload but agentic)."""
    table: Forks = {}
    if not has_sub_agents(sessions):
        return table
    for s, first_id in zip(sessions, first_ids):
        if s.parent is not None:
            table.setdefault((int(s.parent[0]), int(s.parent[1])), []).append((s, first_id))
    return table


# Session and turn fields added since the first plans (core/hash_versions.py): left out of the
# plan's JSON while unset (None), so the hashes of the plans made before them stay what they were.
_OPTIONAL_KEYS = frozenset({**hashed_when_set(SESSION), **hashed_when_set(TURN)})
# Plan keys added since the first plans: in the hashes only when set (not empty)
_PLAN_KEYS = tuple(hashed_when_set(PLAN))
# workload.json of a data workload keeps this much of each user message (the data file has the rest)
EXCERPT_CHARS = 200


_SESSION_FIELDS = tuple(f.name for f in fields(SessionSpec))
_TURN_FIELDS = tuple(f.name for f in fields(TurnSpec))


def _field_dict(obj: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """``asdict`` one level deep, unset optional keys left out: the lists are the plan's own, not
    copies (asdict copies every token id of every prompt, most of the time of hashing a plan)."""
    return {k: v for k in names if not ((v := getattr(obj, k)) is None and k in _OPTIONAL_KEYS)}


def session_json(s: SessionSpec) -> dict[str, Any]:
    """A session as workload.json holds it (and the hashes read it): only read, never changed."""
    body = _field_dict(s, _SESSION_FIELDS)
    body["turns"] = [_field_dict(t, _TURN_FIELDS) for t in s.turns]
    return body


def compact_session_json(s: SessionSpec) -> dict[str, Any]:
    """A session as workload.json keeps it for a data workload: ids, lengths, arrival and an
    excerpt of each message; the full text stays in the data file (its sha256 is in the plan)."""
    turns = []
    for t in s.turns:
        turn: dict[str, Any] = {
            "prompt_id": t.prompt_id,
            "user": _excerpt(t.user),
            "user_chars": len(t.user),
            "output_len": t.output_len,
        }
        if t.prompt_token_ids is not None:
            turn["prompt_tokens"] = len(t.prompt_token_ids)
        if t.think_time_s:
            turn["think_time_s"] = t.think_time_s
        turns.append(turn)
    body: dict[str, Any] = {"session_id": s.session_id, "turns": turns, "arrival_s": s.arrival_s}
    if s.system:
        body["system"] = _excerpt(s.system)
    if s.history:
        body["history_messages"] = len(s.history)
    if s.adapter is not None:
        body["adapter"] = s.adapter
    for key in ("job_id", "depth", "parent"):  # an agent trace's tree
        if getattr(s, key) is not None:
            body[key] = getattr(s, key)
    return body


def _excerpt(text: str) -> str:
    return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + "…"


@dataclass
class WorkloadPlan:
    name: str
    sessions: Sessions
    warmup: list[SessionSpec]
    exact_output_len: bool
    concurrency: Optional[int]
    open_loop: bool
    sampling: dict[str, Any] = field(default_factory=dict)
    seed: Optional[int] = None  # sampled decoding: request i uses seed + i
    # Data workloads: the data file (path, format, sha256, records) — its sha256 enters the
    # hashes, so runs made from different data never compare — and workload.json keeps
    # compact sessions (ids, lengths), not the whole data.
    source: Optional[dict[str, Any]] = None
    # Figures of the workload itself for the summary (e.g. the target and theoretical
    # prefix-cache hit rate of workload=shared_prefix).
    info: dict[str, Any] = field(default_factory=dict)
    # Time-shaped load (workloads/schedule.py LoadSchedule): its stages enter workload.json and
    # the sha256 (arrival times are in the sessions already); None for a run of a count.
    schedule: Optional[Any] = None
    # LoRA traffic: the entries of workload.lora.adapters ({name, path, share}); in the hashes when set
    lora: list[dict[str, Any]] = field(default_factory=list)
    # Structured output (WorkloadConfig.structured): {response_format, tools, tool_choice_share};
    # in workload.json and the hashes when set, so runs under different schemas never compare
    structured: Optional[dict[str, Any]] = None

    @property
    def num_requests(self) -> int:
        if isinstance(self.sessions, SessionFile):
            return self.sessions.num_requests
        return sum(len(s.turns) for s in self.sessions)

    @property
    def bytes_on_disk(self) -> Optional[int]:
        """The size of the file that holds the sessions of a large plan; None for a plan in memory."""
        return self.sessions.disk_bytes if isinstance(self.sessions, SessionFile) else None

    @property
    def has_jobs(self) -> bool:
        """Some session belongs to an agent job (workload=agentic)."""
        if isinstance(self.sessions, SessionFile):
            return self.sessions.has_jobs
        return any(s.job_id is not None for s in self.sessions)

    def request_sizes(self) -> Iterator[tuple[int, int]]:
        """(prompt tokens, output tokens) of the requests whose prompt is fixed in advance: every
        one of a list's, and of a plan on disk the one that needs the most context."""
        if isinstance(self.sessions, SessionFile):
            if self.sessions.largest_request is not None:
                yield self.sessions.largest_request
            sessions: Iterable[SessionSpec] = self.warmup
        else:
            sessions = chain(self.sessions, self.warmup)
        for session in sessions:
            for turn in session.turns:
                if turn.prompt_token_ids is not None:
                    yield len(turn.prompt_token_ids), turn.output_len

    def last_arrival(self) -> float:
        """The latest arrival time of a session (0 without any)."""
        if isinstance(self.sessions, SessionFile):
            values = _arrival_array(self.sessions, none=math.nan)
            values = values[~np.isnan(values)]
            return float(values.max()) if values.size else 0.0
        return max((s.arrival_s for s in self.sessions if s.arrival_s is not None), default=0.0)

    def to_json(self) -> dict[str, Any]:
        """workload.json as a dict (:meth:`json_chunks` parsed): for small plans and tests."""
        return json.loads("".join(self.json_chunks()))

    def _head(self) -> dict[str, Any]:
        """Every key of workload.json but the sessions, the warm-up and the hashes: small."""
        body: dict[str, Any] = {
            "name": self.name,
            "exact_output_len": self.exact_output_len,
            "concurrency": self.concurrency,
            "open_loop": self.open_loop,
            "sampling": self.sampling,
        }
        if self.source is not None:
            body["source"] = self.source
        if self.schedule is not None:
            body["schedule"] = {"kind": self.schedule.kind, "stages": self.schedule.to_json()}
        if self.lora:
            body["lora"] = self.lora
        if self.structured:
            body["structured"] = self.structured
        return json.loads(json.dumps(body, default=_plain))  # as the file will hold it

    def hashes(self) -> dict[str, str]:
        """``sha256`` and ``prompts_sha256`` (:meth:`content_hash`, :meth:`prompts_hash`), one
        session at a time: a long run's plan is never one JSON document in memory."""
        head = self._head()
        content, prompts = _CanonicalHash(_measured(head, True)), _CanonicalHash(_measured(head, False))
        for s in self.sessions:
            body = session_json(s)
            content.add(body)
            prompts.add(_without_arrival(body))
        return {"sha256": content.hexdigest(), "prompts_sha256": prompts.hexdigest()}

    def json_chunks(self, hashes: Optional[dict[str, str]] = None) -> Iterator[str]:
        """workload.json, written a session a line: the hashes first (``hashes``, or a first pass
        over the sessions), then the head, the sessions and the warm-up (compact for a data
        workload: ids and lengths; the full text stays in the data file, whose sha256 the hashes
        cover)."""
        head = {**(hashes or self.hashes()), **self._head()}
        if self.source is not None:
            head["compact"] = True
        if self.info:
            head["info"] = self.info
        shape = compact_session_json if self.source is not None else session_json
        yield json.dumps(head, indent=2, default=_plain)[:-2] + ","
        for key, sessions in (("sessions", self.sessions), ("warmup", self.warmup)):
            yield f'\n  "{key}": ['
            for i, s in enumerate(sessions):
                yield ("," if i else "") + "\n    " + json.dumps(shape(s), default=_plain)
            yield "\n  ]" + ("," if key == "sessions" else "\n}\n")

    @staticmethod
    def content_hash(body: dict[str, Any]) -> str:
        """sha256 of the measured requests' content: prompts, token ids, lengths, arrivals
        (the canonical JSON of :func:`_measured` with the full sessions, keys sorted)."""
        digest = _CanonicalHash(_measured(body, True))
        for s in body["sessions"]:
            digest.add(s)
        return digest.hexdigest()

    @staticmethod
    def prompts_hash(body: dict[str, Any]) -> str:
        """sha256 of the prompts and lengths alone, without arrival times: runs of one workload
        at different rates share it (a rate sweep), so they stay comparable."""
        digest = _CanonicalHash(_measured(body, False))
        for s in body["sessions"]:
            digest.add(_without_arrival(s))
        return digest.hexdigest()


def _measured(body: dict[str, Any], with_schedule: bool) -> dict[str, Any]:
    """What a hash covers besides the sessions. Keys absent from older plans (the data file,
    the schedule, LoRA, structured output: core/hash_versions.py) are left out while unset, so
    those hashes stay what they were; the data file enters as its sha256, and the prompts' hash
    leaves the schedule (arrivals) out."""
    measured = {k: body[k] for k in ("name", "exact_output_len", "sampling")}
    for key in _PLAN_KEYS:
        value = body.get(key)
        if not value or (key == "schedule" and not with_schedule):
            continue
        if key == "source":
            measured["data_sha256"] = value.get("sha256")
        else:
            measured[key] = value
    return measured


def _without_arrival(session: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in session.items() if k != "arrival_s"}


class _CanonicalHash:
    """sha256 of ``json.dumps({**measured, "sessions": [...]}, sort_keys=True)``, the sessions
    added one at a time: the same bytes, without the document in memory."""

    def __init__(self, measured: dict[str, Any]):
        keys = sorted([*measured, "sessions"])
        at = keys.index("sessions")

        def part(ks: list[str]) -> str:
            return ", ".join(f"{json.dumps(k)}: {json.dumps(measured[k], sort_keys=True)}" for k in ks)

        before, after = part(keys[:at]), part(keys[at + 1 :])
        self._sha = hashlib.sha256(("{" + (before + ", " if before else "") + '"sessions": [').encode())
        self._tail = "]" + (", " + after if after else "") + "}"
        self._first = True

    def add(self, session: dict[str, Any]) -> None:
        self._sha.update(((", " if not self._first else "") + json.dumps(session, sort_keys=True)).encode())
        self._first = False

    def hexdigest(self) -> str:
        sha = self._sha.copy()
        sha.update(self._tail.encode())
        return sha.hexdigest()


def _plain(value: Any) -> Any:
    """numpy scalars and arrays, and paths, in a plan's info or sessions, as JSON."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


class Workload(ABC):
    registry_name: str

    def __init__(self, config: WorkloadConfig):
        self.config = config

    @abstractmethod
    def build(self, renderer: PromptRenderer, corpus: TokenizedCorpus, seed: int) -> WorkloadPlan:
        """Make the plan; the same config, tokenizer and seed give the same plan."""


def seeded_streams(seed: int, n: int) -> list[np.random.Generator]:
    """Independent random streams from one seed (text, lengths, arrivals, warm-up…)."""
    return [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(n)]


def make_plan(
    config: WorkloadConfig,
    sessions: Iterable[SessionSpec],
    warmup: list[SessionSpec],
    arrival_rng: np.random.Generator,
    seed: Optional[int] = None,
    use_schedule: bool = True,
    count: Optional[int] = None,
) -> WorkloadPlan:
    """Attach open-loop arrival times and the common fields to a workload's sessions.

    ``sessions``: a list (changed in place), or an iterator of ``count`` sessions made as they
    are taken, which the plan keeps on disk beyond :data:`~workloads.session_file.SPILL_AT`
    (workloads/session_file.py), so a long run's plan is never whole in memory.

    A time-shaped load (``use_schedule``; off where the data's own timestamps set the arrivals):
    open loop, the schedule's arrivals, one per session — a plan with more sessions keeps the
    first ones, a data workload with fewer ends early (``info["schedule_short"]``); closed loop,
    the cap follows the schedule (``concurrency`` is its peak)."""
    schedule = load_schedule(config) if use_schedule else None
    concurrency = config.concurrency
    specs = adapter_specs(getattr(config, "lora", None))
    info: dict[str, Any] = {}
    if count is not None:
        n = count
    elif isinstance(sessions, Sized):  # a list
        n = len(sessions)
    else:
        raise TypeError("make_plan: sessions made as they are taken need their count")
    arrivals: Optional[Sequence[float]] = None
    if schedule is not None and schedule.kind == RATE:
        arrivals = schedule.arrivals(arrival_rng, arrival_registry.create(config.arrival), config.burstiness)
        if n < len(arrivals):
            info["schedule_short"] = {"arrivals": len(arrivals), "sessions": n}
        n = min(n, len(arrivals))
    elif schedule is not None:
        concurrency = int(schedule.peak)
    elif config.rate is not None:
        arrivals = arrival_registry.create(config.arrival).offsets(arrival_rng, n, config.rate, config.burstiness)
    adapters = assign(specs, n, seed) if specs else None
    if specs:
        for session, adapter in zip(warmup, round_robin(specs, len(warmup))):
            session.adapter = adapter
    kept = _kept_sessions(sessions, n, arrivals, adapters)
    return WorkloadPlan(
        name=config.name,
        sessions=kept,
        warmup=warmup,
        exact_output_len=config.exact_output_len,
        concurrency=concurrency,
        open_loop=config.rate is not None or (schedule is not None and schedule.kind == RATE),
        sampling={"temperature": config.temperature, "top_p": config.top_p, "top_k": config.top_k},
        seed=seed,
        info=info,
        schedule=schedule,
        lora=[s.to_json() for s in specs],
        structured=config.structured() if hasattr(config, "structured") else None,
    )


def _kept_sessions(
    sessions: Iterable[SessionSpec],
    n: int,
    arrivals: Optional[Sequence[float]],
    adapters: Optional[list[Optional[str]]],
) -> Sessions:
    """The first ``n`` sessions, each given its arrival time and adapter: the list itself, cut to
    ``n``; or, from an iterator, a list or (beyond SPILL_AT) a file, filled as it is taken."""
    kept: Union[list[SessionSpec], SessionFile]
    if isinstance(sessions, list):
        del sessions[n:]
        source: Iterable[SessionSpec] = sessions
        kept = sessions
    else:
        source = islice(sessions, n)
        kept = SessionFile() if n > SPILL_AT else []
    try:
        for i, session in enumerate(source):
            if arrivals is not None:
                session.arrival_s = round(arrivals[i], 6)
            if adapters is not None:
                session.adapter = adapters[i]
            if kept is not sessions:
                kept.append(session)
    except BaseException:
        if isinstance(kept, SessionFile):
            kept.close()
        raise
    finally:
        close = getattr(sessions, "close", None)
        if close is not None and not isinstance(sessions, list):
            close()  # a generator of sessions ends here (a pool of plan workers with it)
    return kept.seal() if isinstance(kept, SessionFile) else kept
