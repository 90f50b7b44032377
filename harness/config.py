"""The run's configuration: structured configs registered in Hydra's ConfigStore.

The backend and workload sections are typed by the entry chosen from their registries
(``backend=…``, ``workload=…``); the sections below are common to every run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf

from core import hash_versions
from core.errors import ConfigError


@dataclass
class ModelConfig:
    """Which model: a model-store name, or ``path`` (local HF folder or GGUF), or ``id`` (hub)."""

    name: str = "smollm2-135m"  # a model of the store (smollm2-135m, tiny-random), or a label for path or id
    path: Optional[str] = None  # a local Hugging Face folder or GGUF file (a GGUF is converted once where needed)
    id: Optional[str] = None  # a Hugging Face hub id, e.g. Org/Name (downloaded once; HF_ENDPOINT honoured)
    revision: Optional[str] = None  # with id: the hub revision (branch, tag or commit)

    def validate(self) -> None:
        if self.path is not None and self.id is not None:
            raise ConfigError("set model.path or model.id, not both")


MAX_USD_PER_HOUR = 1e6  # a thousand 8-GPU nodes cost a few tens of thousands; above this the units are wrong


@dataclass
class CostConfig:
    """What the machine costs, for $ per million tokens; ``null``: no cost figures (absent, not 0).
    Either the whole machine's price, or an accelerator's price × their number."""

    usd_per_hour: Optional[float] = None  # the whole machine's price per hour, US$
    usd_per_accelerator_hour: Optional[float] = None  # instead: one accelerator's price per hour, US$
    accelerators: int = 1  # with usd_per_accelerator_hour: how many the run uses

    def validate(self) -> None:
        if self.usd_per_hour is not None and self.usd_per_accelerator_hour is not None:
            raise ConfigError(
                "set cost.usd_per_hour (the machine) or cost.usd_per_accelerator_hour "
                "(with cost.accelerators), not both"
            )
        for key in ("usd_per_hour", "usd_per_accelerator_hour"):
            value = getattr(self, key)
            if value is not None and not 0 < value <= MAX_USD_PER_HOUR:
                raise ConfigError(
                    f"cost.{key} must be > 0 and at most {MAX_USD_PER_HOUR:,.0f} US dollars per hour "
                    f"(got {value}); give the price of one hour of the machine"
                )
        if self.accelerators < 1:
            raise ConfigError(f"cost.accelerators must be >= 1 (got {self.accelerators})")

    def machine_usd_per_hour(self) -> Optional[float]:
        """The run's price per hour: the machine's, or the accelerators' together; None when not given."""
        if self.usd_per_hour is not None:
            return self.usd_per_hour
        if self.usd_per_accelerator_hour is not None:
            return self.usd_per_accelerator_hour * self.accelerators
        return None


@dataclass
class SLOConfig:
    """Service-level objectives for goodput; ``null`` means no limit on that metric."""

    ttft_s: Optional[float] = None  # goodput: TTFT at most this (s); null: no limit
    tpot_s: Optional[float] = None  # goodput: TPOT at most this (s/token); null: no limit
    e2e_s: Optional[float] = None  # goodput: E2E latency at most this (s); null: no limit
    # agent jobs (workload=agentic): a job's completion time, first send to last token
    # (harness/results/jobs.py job goodput); not part of the per-request SLO
    job_s: Optional[float] = None

    def validate(self) -> None:
        for key in ("ttft_s", "tpot_s", "e2e_s", "job_s"):
            value = getattr(self, key)
            if value is not None and not value > 0:  # NaN too
                raise ConfigError(f"slo.{key} must be > 0 seconds (got {value})")


@dataclass
class MemoryConfig:
    """Memory accounting: sampling period of the RSS sampler and an optional budget.

    With ``budget_gib`` set, the summary says how many KV-cache tokens fit in that budget
    next to the model's weights.
    """

    # a memory budget: the summary says how many KV-cache tokens fit beside the weights
    budget_gib: Optional[float] = None
    sample_interval_s: float = 0.05  # how often the RSS (and with NVML the GPUs) is sampled

    def validate(self) -> None:
        if self.budget_gib is not None and self.budget_gib <= 0:
            raise ConfigError(f"memory.budget_gib must be > 0 (got {self.budget_gib})")
        if self.sample_interval_s <= 0:
            raise ConfigError(f"memory.sample_interval_s must be > 0 (got {self.sample_interval_s})")


@dataclass
class MachineConfig:
    """The machine's state around each run (harness/telemetry/machine_state.py): machine.json,
    and ``taint`` in the summary when the machine was not fit to measure on.

    ``ignore``: processes never counted as other busy or GPU processes, by name or by a piece of
    their command line (e.g. the local server that ``backend=openai`` measures)."""

    enabled: bool = True  # machine.json and the taint rules (false: neither)
    interval_s: float = 1.0  # seconds between the monitor's readings during the measured phase
    # process names or command-line pieces never counted as other busy or GPU processes
    ignore: list[str] = field(default_factory=list)

    def validate(self) -> None:
        if self.interval_s <= 0:
            raise ConfigError(f"machine.interval_s must be > 0 (got {self.interval_s})")


@dataclass
class ServerMetricsConfig:
    """A server's Prometheus ``/metrics`` sampled during the measured phase
    (harness/telemetry/server_metrics.py): ``server_metrics.parquet`` and ``server_metrics.sampled``
    in the summary. ``timeout_s`` bounds every scrape as a whole (this one, and those before and
    after the phase): a slower one is given up and counted, never waited for."""

    enabled: bool = True  # sample the server's /metrics during the measured phase
    interval_s: float = 1.0  # seconds between scrapes (at least 0.05)
    timeout_s: float = 2.0  # the deadline of a whole scrape; a slower one is given up and counted

    def validate(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ConfigError(f"server_metrics.enabled must be true or false (got {self.enabled!r})")
        _number("server_metrics.interval_s", self.interval_s, ">= 0.05 seconds", lambda v: 0.05 <= v < math.inf)
        _number("server_metrics.timeout_s", self.timeout_s, "> 0 seconds", lambda v: 0 < v < math.inf)


# A slope needs at least this many points in the window to be tested (n − 2 ≥ 3 degrees of freedom).
MIN_POINTS = 5


@dataclass
class SaturationConfig:
    enabled: bool = True  # stop an open-loop point whose queue keeps growing (false: never)
    min_s: float = 10.0  # never stop before this much of the measured phase has passed
    window_s: float = 10.0  # the sliding window the slopes are fitted over
    sample_interval_s: float = 0.25  # how often the driver samples the backlog and checks
    min_backlog: int = 4  # never stop while the latest backlog is below this many sessions
    # A slope counts as rising when slope / (its standard error) ≥ min_t: a one-sided t-test
    # (2 is roughly the 97.5 % point of Student's t for the window sizes used here).
    min_t: float = 2.0
    # TTFT must also rise at least this fast (seconds per second). A FIFO queue fed faster than
    # it drains has TTFT rising at 1 − 1/ρ s/s (ρ = arrival rate / capacity), so 0.2 asks for
    # ρ ≳ 1.25; a queue under capacity only rises this fast in short excursions.
    min_ttft_slope_s: float = 0.2
    # The rule must hold at every check for this long before the point is stopped: over-
    # saturation persists, a burst the engine works off does not.
    hold_s: float = 5.0

    def validate(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ConfigError(f"saturation.enabled must be true or false (got {self.enabled!r})")
        _number("saturation.min_s", self.min_s, ">= 0", lambda v: v >= 0)
        _number("saturation.window_s", self.window_s, "> 0", lambda v: 0 < v < math.inf)
        _number(
            "saturation.sample_interval_s",
            self.sample_interval_s,
            f"> 0 and <= window_s / {MIN_POINTS} ({self.window_s / MIN_POINTS:g})",
            lambda v: 0 < v <= self.window_s / MIN_POINTS,
        )
        _number("saturation.min_backlog", self.min_backlog, ">= 0", lambda v: v >= 0)
        _number("saturation.min_t", self.min_t, "> 0", lambda v: 0 < v < math.inf)
        _number("saturation.min_ttft_slope_s", self.min_ttft_slope_s, ">= 0", lambda v: 0 <= v < math.inf)
        _number("saturation.hold_s", self.hold_s, ">= 0", lambda v: 0 <= v < math.inf)


def _number(key: str, value: object, rule: str, ok) -> None:
    """One-line ConfigError unless ``value`` is a real, non-NaN number satisfying ``ok``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or not ok(value):
        raise ConfigError(f"{key} must be {rule} (got {value!r})")


@dataclass
class SweepConfig:
    """How a multirun sweep (``python -m harness -m …``) treats its points."""

    # consecutive points whose engine settings (backend, model) are the same share one loaded
    # engine (in-process, or one server); false: every point loads its own
    reuse_engine: bool = True
    # after the warm-up, and between points on a reused engine, empty its prefix cache where
    # the engine allows
    reset_prefix_cache: bool = True
    # the workload's warm-up requests run on an engine's first point only: a reused engine is
    # warm already (true: warm up before every point)
    warmup_every_point: bool = False
    compare_html: bool = True  # refresh compare.html of the points beside sweep.json after each point

    def validate(self) -> None:
        pass


EVENT_LOOPS = ("asyncio", "uvloop")
PACINGS = ("spin", "sleep")
HTTP_MODES = ("server", "remote")
CLUSTERS = ("local", "ray")
ON_HOST_LOSS = ("continue", "stop")
MIN_CLOCK_SAMPLES = 20  # round trips of a clock-offset measurement, at least (harness/client/clock.py)


@dataclass
class ClientConfig:
    """The load generator that drives HTTP backends (``backend.mode=server``, ``backend=openai``).

    ``workers``: client processes, each with its own event loop and connection pool
    (harness/client/workers.py); null picks one (:func:`harness.client.workers.auto_workers`). In-process
    engines always run in the harness's own process (1).

    ``cluster=ray``: the workers are Ray actors on ``hosts`` nodes of a Ray cluster, ``workers``
    on each (harness/client/ray_pool.py; docs/guides/multi-host.md), their clocks measured
    against this process's before and after the run.
    """

    # client processes (with cluster=ray: on each host, 1 when null); null: 1 up to 32 streams, then
    # min(cores − 1, streams / 32, 8)
    workers: Optional[int] = None
    event_loop: str = "asyncio"  # asyncio | uvloop (pip install -e '.[client]')
    # open-loop arrivals: spin (sleep to 1.5 ms before the due time, then yield until it) | sleep
    # (asyncio's timer alone, ~1 ms late)
    pacing: str = "spin"
    # where the workers run: local (this host) | ray (Ray actors spread over the nodes of a Ray
    # cluster: docs/guides/multi-host.md)
    cluster: str = "local"
    # cluster=ray: the cluster's address, host:port of its head (the GCS); null: the RAY_ADDRESS
    # environment variable
    ray_address: Optional[str] = None
    # cluster=ray: the nodes the workers spread over, one host each; null: every alive node with a
    # CPU for each of its workers
    hosts: Optional[int] = None
    # cluster=ray: a host lost mid-run (its requests in flight are recorded as failed): continue on
    # the others (its slots and sessions move to them) | stop the run
    on_host_loss: str = "continue"
    # cluster=ray: round trips of each clock-offset measurement, before and after the run (the
    # fastest one's midpoint gives the offset); at least 20
    clock_samples: int = 32
    # cluster=ray: a host whose clock offset moved more than this during the run, beyond the
    # measurements' own uncertainty (half their round trips), is named in the summary's warnings
    max_clock_drift_ms: float = 1.0
    # cluster=ray: a host that sends nothing for this long (no record, no heartbeat) is lost
    host_timeout_s: float = 30.0

    def validate(self, backend_mode: Optional[str] = None) -> None:
        if self.workers is not None and (isinstance(self.workers, bool) or self.workers < 1):
            raise ConfigError(f"client.workers must be >= 1, or null to choose (got {self.workers})")
        if self.event_loop not in EVENT_LOOPS:
            raise ConfigError(f"client.event_loop must be asyncio or uvloop (got {self.event_loop!r})")
        if self.pacing not in PACINGS:
            raise ConfigError(f"client.pacing must be spin or sleep (got {self.pacing!r})")
        if self.event_loop == "uvloop":
            import importlib.util

            if importlib.util.find_spec("uvloop") is None:
                raise ConfigError(
                    "client.event_loop=uvloop needs uvloop, which is not installed: "
                    "pip install -e '.[client]' (or pip install uvloop)"
                )
        if (
            self.workers is not None
            and self.workers > 1
            and backend_mode is not None
            and backend_mode not in HTTP_MODES
        ):
            raise ConfigError(
                f"client.workers={self.workers} needs an HTTP backend (backend.mode=server or "
                "backend=openai): an in-process engine runs in the harness's own process"
            )
        self._validate_cluster(backend_mode)

    def _validate_cluster(self, backend_mode: Optional[str]) -> None:
        if self.cluster not in CLUSTERS:
            raise ConfigError(f"client.cluster must be local or ray (got {self.cluster!r})")
        if self.on_host_loss not in ON_HOST_LOSS:
            raise ConfigError(f"client.on_host_loss must be continue or stop (got {self.on_host_loss!r})")
        if self.hosts is not None and (isinstance(self.hosts, bool) or self.hosts < 1):
            raise ConfigError(f"client.hosts must be >= 1, or null for every node (got {self.hosts})")
        if isinstance(self.clock_samples, bool) or self.clock_samples < MIN_CLOCK_SAMPLES:
            raise ConfigError(f"client.clock_samples must be >= {MIN_CLOCK_SAMPLES} (got {self.clock_samples})")
        _number("client.max_clock_drift_ms", self.max_clock_drift_ms, "> 0", lambda v: 0 < v < math.inf)
        _number(
            "client.host_timeout_s",
            self.host_timeout_s,
            ">= 2 seconds (a host's heartbeat comes every second)",
            lambda v: 2 <= v < math.inf,
        )
        if self.ray_address is not None and "://" in self.ray_address:
            raise ConfigError(
                f"client.ray_address must be the cluster's host:port (got {self.ray_address!r}): "
                "Ray Client addresses (ray://) are not supported"
            )
        if self.cluster != "ray":
            return
        if backend_mode is not None and backend_mode not in HTTP_MODES:
            raise ConfigError(
                "client.cluster=ray needs an HTTP backend (backend.mode=server or backend=openai): "
                "an in-process engine runs in the harness's own process"
            )
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise ConfigError("client.cluster=ray needs Ray, which is not installed: pip install -e '.[ray]'")


SEARCH_OVER = ("rate", "concurrency")


@dataclass
class SLOSearchConfig:
    """Find the capacity: the load (``workload.rate`` or ``workload.concurrency``) up to which
    the SLO (``slo.*``) holds, as an interval: ``slo_search.enabled=true``.

    Each probe runs the workload at one load against one loaded engine, again until its verdict
    is clear (harness/run/slo_search.py has the rule): the ``attainment``-quantile of each
    limited metric below its limit beyond noise (meets), above it (misses), or cannot tell after
    ``max_runs_per_probe`` runs. The search doubles the load from ``low`` until a probe misses
    (or ``high`` is reached), then bisects the gap between the highest load that meets and the
    lowest that misses, on either side of the cannot-tell loads, until each part is within
    ``tolerance`` (relative; 1 for concurrency) or the budget (``max_runs``, ``max_time_s``,
    ``max_probes``) ends.
    """

    enabled: bool = False  # run the search instead of one point
    over: str = "rate"  # rate (open loop, requests/s) | concurrency (closed loop)
    low: float = 1.0  # the first probe's load
    high: Optional[float] = None  # null: double from low until a probe misses
    max_probes: int = 10  # loads probed, at most
    # stop when each part of the gap between the highest load that meets and the lowest that
    # misses (either side of the cannot-tell loads) is this narrow (relative; 1 for concurrency)
    tolerance: float = 0.1
    # a probe's quantile of each slo.* metric: 0.9 judges p90 TTFT, p90 TPOT… against their limits
    attainment: float = 0.99
    min_runs: int = 2  # runs of a probe before its verdict is taken
    max_runs_per_probe: int = 5  # runs of a probe, at most: still unclear then, it cannot tell
    max_runs: int = 40  # runs of the whole search, at most
    max_time_s: Optional[float] = None  # no run is begun that would end past this (null: no limit)
    alpha: float = 0.05  # each verdict's one-sided error, per SLO limit
    # noise floors (python -m harness.ab --aa --noise-dir): where one is stored for a probe's
    # configuration and this machine, its spread between sessions widens the probe's bounds
    noise_dir: Optional[str] = None

    def validate(self, slo: SLOConfig) -> None:
        if not self.enabled:
            return
        if self.over not in SEARCH_OVER:
            raise ConfigError(f"slo_search.over must be rate or concurrency (got {self.over!r})")
        if not self.low > 0 or (self.over == "concurrency" and self.low < 1):
            raise ConfigError(f"slo_search.low must be > 0 (>= 1 for concurrency) (got {self.low})")
        if self.high is not None and not self.high > self.low:
            raise ConfigError(f"slo_search.high must be > slo_search.low (got {self.high})")
        if self.max_probes < 2:
            raise ConfigError(f"slo_search.max_probes must be >= 2 (got {self.max_probes})")
        if not 0 < self.tolerance < 1:
            raise ConfigError(f"slo_search.tolerance must be in (0, 1) (got {self.tolerance})")
        if not 0 < self.attainment <= 1:
            raise ConfigError(f"slo_search.attainment must be in (0, 1] (got {self.attainment})")
        if self.min_runs < 2:
            raise ConfigError(
                f"slo_search.min_runs must be >= 2: a run-to-run spread needs two runs (got {self.min_runs})"
            )
        if self.max_runs_per_probe < self.min_runs:
            raise ConfigError(
                f"slo_search.max_runs_per_probe must be >= slo_search.min_runs={self.min_runs} "
                f"(got {self.max_runs_per_probe})"
            )
        if self.max_runs < self.min_runs:
            raise ConfigError(
                f"slo_search.max_runs must be >= slo_search.min_runs={self.min_runs} (got {self.max_runs})"
            )
        if self.max_time_s is not None and not self.max_time_s > 0:
            raise ConfigError(f"slo_search.max_time_s must be > 0 seconds (got {self.max_time_s})")
        if not 0 < self.alpha < 0.5:
            raise ConfigError(f"slo_search.alpha must be in (0, 0.5) (got {self.alpha})")
        if slo.ttft_s is None and slo.tpot_s is None and slo.e2e_s is None:
            raise ConfigError("slo_search needs an SLO: set slo.ttft_s, slo.tpot_s or slo.e2e_s")


# --- search over engine settings and load (harness/run/search.py) -------------------------

SPACE_SYNTAX = "[a, b, …] (choices) | int:LOW:HIGH[:log|:STEP] | float:LOW:HIGH[:log|:STEP]"
DIRECTIONS = {"max": "maximize", "min": "minimize"}
UNSET = object()  # a key of a free mapping (backend.engine_args.…) that the config does not set


@dataclass(frozen=True)
class Choices:
    """A categorical parameter: one of these values (null, booleans, numbers, strings)."""

    values: tuple[Any, ...]

    def contains(self, value: Any) -> bool:
        return any(_same(value, v) for v in self.values)

    def text(self) -> str:
        return "[" + ", ".join(override_value(v) for v in self.values) + "]"


@dataclass(frozen=True)
class Range:
    """An integer or float parameter in [low, high], on a log scale or in steps of ``step``."""

    kind: str  # int | float
    low: float
    high: float
    log: bool = False
    step: Optional[float] = None

    def contains(self, value: Any) -> bool:
        return (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and (self.kind == "float" or float(value).is_integer())
            and self.low <= value <= self.high
        )

    def text(self) -> str:
        tail = ":log" if self.log else (f":{self.step:g}" if self.step is not None else "")
        return f"{self.kind}:{self.low:g}:{self.high:g}{tail}"


Param = Union[Choices, Range]


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same kind: true is not 1, 1 is 1.0."""
    return a == b and isinstance(a, bool) == isinstance(b, bool) and (a is None) == (b is None)


def parse_param(key: str, spec: Any) -> Param:
    """One entry of ``search.space`` (module syntax :data:`SPACE_SYNTAX`); ConfigError in one line."""

    def bad(why: str) -> ConfigError:
        return ConfigError(f"search.space: {key}: {why} (got {spec!r}); write {SPACE_SYNTAX}")

    if isinstance(spec, (list, tuple)):
        if not spec:
            raise bad("no choices")
        if any(v is not None and not isinstance(v, (bool, int, float, str)) for v in spec):
            raise bad("a choice must be null, a boolean, a number or a string")
        if any(_same(a, b) for i, a in enumerate(spec) for b in spec[i + 1 :]):
            raise bad("a choice is given twice")
        return Choices(tuple(spec))
    if not isinstance(spec, str) or spec.split(":")[0] not in ("int", "float"):
        raise bad("not a list of choices nor a range")
    kind, *parts = spec.split(":")
    if len(parts) not in (2, 3):
        raise bad("a range is KIND:LOW:HIGH, optionally :log or :STEP")
    number = int if kind == "int" else float
    try:
        low, high = number(parts[0]), number(parts[1])
        step = None if len(parts) < 3 or parts[2] == "log" else number(parts[2])
    except ValueError:
        raise bad(f"LOW, HIGH and STEP of the range must be {kind}s") from None
    log = len(parts) == 3 and parts[2] == "log"
    if not (math.isfinite(low) and math.isfinite(high)) or not low < high:
        raise bad("a range needs LOW < HIGH")
    if log and low <= 0:
        raise bad("a log range needs LOW > 0")
    if step is not None and not step > 0:
        raise bad("STEP must be > 0")
    return Range(kind, low, high, log, step)


def parse_objective(text: str) -> tuple[str, Optional[str]]:
    """``figure[:max|:min]`` → (figure, "maximize" | "minimize" | None: the metric's own direction)."""
    figure, sep, direction = str(text).partition(":")
    if not figure or (sep and direction not in DIRECTIONS):
        raise ConfigError(
            f"search.objectives: {text!r}: write FIGURE or FIGURE:max or FIGURE:min "
            "(e.g. output_tokens_per_s:max, output_tps.p50:max, ttft_s.p90:min)"
        )
    return figure, DIRECTIONS.get(direction)


def override_value(value: Any) -> str:
    """A value as a Hydra override writes it: null, true, 3, 0.5, or a quoted string where needed."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value)
    if text and all(c.isalnum() or c in "-_./" for c in text) and text not in ("null", "true", "false"):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


@dataclass
class SearchConfig:
    """A search over engine settings and load with Optuna: ``search.enabled=true`` (harness/run/search.py).

    ``space``: setting → choices or a range (:data:`SPACE_SYNTAX`), e.g.
    ``{backend.n_threads: [1, 2], backend.n_batch: int:32:512:log, workload.concurrency: int:1:8}``;
    the run's own config is the defaults, the first trial (its values need not be in the space). ``objectives``: one figure (TPE) or
    more (a Pareto front), each ``figure[:max|:min]``. ``trials``: how many trials the study holds
    when done (a resumed search runs the rest); ``max_time_s``: no trial starts after this long.
    ``check_best``: the best (or ``check_trial``) against the defaults, interleaved (harness.ab),
    ``check_blocks`` blocks.
    """

    enabled: bool = False  # search the space with Optuna instead of running one point
    # the settings searched: {key: [a, b, …] | int:LOW:HIGH[:log|:STEP] | float:LOW:HIGH[:log|:STEP]}
    # (a mapping, typed Any: Hydra merges a mapping given on the command line into a null one only)
    space: Optional[Any] = None
    # figures of a run's summary.json, each figure[:max|:min]: one (TPE, the best) or more (a Pareto front)
    objectives: list[str] = field(default_factory=lambda: ["output_tps.p50:max", "output_tokens_per_s:max"])
    trials: int = 20  # trials the study holds when done (a resumed search runs the rest)
    max_time_s: Optional[float] = None  # no trial starts after this long (null: no limit)
    check_best: bool = True  # after the trials, the best against the defaults, interleaved (python -m harness.ab)
    check_blocks: int = 3  # blocks of that check, each one run of each arm (exactly that many)
    check_trial: Optional[int] = None  # the trial to check; null: the best (harness/run/search_study.py)

    def params(self) -> dict[str, Param]:
        return {str(key): parse_param(str(key), spec) for key, spec in (self.space or {}).items()}

    def validate(self, run: RunConfig) -> None:
        if not self.enabled:
            return
        import importlib.util

        if importlib.util.find_spec("optuna") is None:
            raise ConfigError("search.enabled=true needs Optuna, which is not installed: pip install -e '.[search]'")
        if self.space is not None and not isinstance(self.space, dict):
            raise ConfigError(f"search.space must be a mapping of settings to their values (got {self.space!r})")
        if not self.space:
            raise ConfigError(
                "search.space is empty: give the settings to search, e.g. "
                "'search.space={backend.n_batch: int:32:512:log, workload.concurrency: [1, 2, 4]}'"
            )
        if not self.objectives:
            raise ConfigError("search.objectives is empty: give one figure or more, e.g. [output_tokens_per_s:max]")
        figures = [parse_objective(o)[0] for o in self.objectives]
        if len(set(figures)) < len(figures):
            raise ConfigError(f"search.objectives names a figure twice: {', '.join(self.objectives)}")
        _number("search.trials", self.trials, ">= 1", lambda v: v >= 1 and float(v).is_integer())
        if self.max_time_s is not None:
            _number("search.max_time_s", self.max_time_s, "> 0 seconds", lambda v: v > 0)
        _number("search.check_blocks", self.check_blocks, ">= 2 (a paired interval needs two)", lambda v: v >= 2)
        if self.check_trial is not None:
            _number("search.check_trial", self.check_trial, "a trial's number (>= 0)", lambda v: v >= 0)
        if run.slo_search.enabled:
            raise ConfigError("search.enabled and slo_search.enabled: run one of them at a time")
        if run.repeat != 1:
            raise ConfigError(
                "search measures each trial once (repeat=1); the best is checked against the defaults "
                "by repeated, interleaved runs (search.check_best)"
            )
        params = self.params()
        for key, param in params.items():
            check_search_key(run, key, param)


def check_search_key(run: RunConfig, key: str, param: Param) -> None:
    """The key is a setting of this run, and every value the space gives it fits its type."""
    if key.split(".")[0] in ("search", "slo_search", "hydra", "output_root", "repeat", "resume", "history"):
        raise ConfigError(f"search.space: {key}: not a setting a search can vary (engine settings and load are)")
    search_default(run, key)  # ConfigError for a key that is no setting
    node = OmegaConf.structured(run)
    values = list(param.values) if isinstance(param, Choices) else [param.low, param.high]
    if isinstance(param, Range) and param.kind == "int":
        values = [int(v) for v in values]
    for value in values:
        try:
            OmegaConf.update(node, key, value, merge=True)
        except Exception as exc:  # noqa: BLE001 - omegaconf's errors are multi-line
            raise ConfigError(f"search.space: {key}: {value!r} does not fit: {str(exc).splitlines()[0]}") from None


def search_default(run: RunConfig, key: str) -> Any:
    """The run's value of a dotted key; :data:`UNSET` for a key a free mapping does not hold;
    ConfigError for a key that is no setting."""
    node: Any = OmegaConf.structured(run)
    parts = key.split(".")
    for i, part in enumerate(parts):
        if not isinstance(node, DictConfig):
            raise ConfigError(f"search.space: {key}: {'.'.join(parts[:i])} is a value, not a section")
        if part not in node:
            if i > 0 and not dataclasses.is_dataclass(OmegaConf.get_type(node)):
                return UNSET  # a free mapping (backend.engine_args): the key is simply not set
            known = ", ".join(sorted(str(k) for k in node.keys()))
            where = ".".join(parts[:i]) or "the config"
            raise ConfigError(f"search.space: {key}: no such setting ({where} has {known})")
        node = node[part]
    if isinstance(node, DictConfig):
        raise ConfigError(f"search.space: {key}: a section, not a setting")
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, ListConfig) else node


def search_defaults(run: RunConfig, params: dict[str, Param]) -> dict[str, Any]:
    """The run's own value of each searched key: the first trial's settings (None for a key a free
    mapping does not set, which the trials then leave unset)."""
    return {key: (None if (value := search_default(run, key)) is UNSET else value) for key in params}


@dataclass
class RunConfig:
    backend: Any = MISSING
    model: ModelConfig = field(default_factory=ModelConfig)
    workload: Any = MISSING
    seed: int = 0  # same seed and config: the same prompts, lengths and arrivals
    output_root: str = "results"  # where run and sweep folders are written
    slo: SLOConfig = field(default_factory=SLOConfig)
    cost: CostConfig = field(default_factory=CostConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    machine: MachineConfig = field(default_factory=MachineConfig)
    server_metrics: ServerMetricsConfig = field(default_factory=ServerMetricsConfig)
    saturation: SaturationConfig = field(default_factory=SaturationConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    slo_search: SLOSearchConfig = field(default_factory=SLOSearchConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    client: ClientConfig = field(default_factory=ClientConfig)
    repeat: int = 1  # run each point this many times (the sweep table gives mean and 95% CI)
    resume: bool = False  # skip points whose run folder under output_root is complete (same config)
    progress: bool = True  # show a progress bar
    # keep each reply's text and token ids in requests.parquet (false: lengths and times only)
    save_output_text: bool = True
    report: bool = True  # write report.html (harness/reports/run_report.py) into the run folder
    history: Optional[str] = None  # a history folder (python -m harness.history): every finished run is added to it

    def validate(self) -> None:
        check_finite(self)
        if self.seed < 0:
            raise ConfigError(f"seed must be >= 0 (got {self.seed})")
        if self.repeat < 1:
            raise ConfigError(f"repeat must be >= 1 (got {self.repeat})")
        for section in (
            self.backend,
            self.model,
            self.workload,
            self.slo,
            self.cost,
            self.memory,
            self.machine,
            self.saturation,
            self.sweep,
            self.server_metrics,
        ):
            section.validate()
        self.slo_search.validate(self.slo)
        self.search.validate(self)
        self.client.validate(getattr(self.backend, "mode", None))


def check_finite(node: Any, path: str = "") -> None:
    """NaN and infinities are refused in every float of the config (``workload.rate=nan`` would
    otherwise pass every ``> 0`` check), before anything loads."""
    if dataclasses.is_dataclass(node):
        for f in dataclasses.fields(node):
            check_finite(getattr(node, f.name), f"{path}.{f.name}" if path else f.name)
    elif isinstance(node, dict):
        for key, value in node.items():
            check_finite(value, f"{path}.{key}")
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            check_finite(value, f"{path}[{i}]")
    elif isinstance(node, float) and not math.isfinite(node):
        raise ConfigError(f"{path} must be a finite number (got {node})")


def config_sha256(cfg: RunConfig) -> str:
    """sha256 of the resolved config that decides what a point measures (resume matches on it).
    What it leaves out, and how the hashes of runs made by older versions map onto it, is
    core/hash_versions.py's."""
    container = OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)
    assert isinstance(container, dict)  # a structured config's container is a mapping, by field name
    return hash_versions.config_digest({str(key): value for key, value in container.items()})


def engine_key(cfg: RunConfig) -> str:
    """What makes two points able to share one loaded engine: the backend's and the model's settings."""
    body = {
        "backend": OmegaConf.to_container(OmegaConf.structured(cfg.backend), resolve=True),
        "model": OmegaConf.to_container(OmegaConf.structured(cfg.model), resolve=True),
    }
    adapters = getattr(getattr(cfg.workload, "lora", None), "adapters", None)
    if adapters:  # LoRA adapters load with the engine (their shares do not); absent without: keys stay what they were
        body["lora"] = [{k: v for k, v in a.items() if k != "share"} if hasattr(a, "items") else a for a in adapters]
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def to_run_config(cfg: DictConfig) -> RunConfig:
    """The composed Hydra config as dataclasses, validated; ConfigError on bad values."""
    check_no_unknown_keys(cfg)
    try:
        run_cfg = OmegaConf.to_object(cfg)
    except Exception as exc:  # noqa: BLE001 - omegaconf's errors are multi-line
        raise ConfigError(str(exc).splitlines()[0]) from None
    assert isinstance(run_cfg, RunConfig)
    run_cfg.validate()
    return run_cfg


def check_no_unknown_keys(node: Any, path: str = "") -> None:
    """ConfigError for a key that no setting reads. Hydra's own error for a misspelt key tells
    the user to add it with ``+``; a key added so would be dropped without a word."""
    if not isinstance(node, DictConfig):
        return
    schema = OmegaConf.get_type(node)
    if dataclasses.is_dataclass(schema):
        known = {f.name for f in dataclasses.fields(schema)}
        unknown = sorted(str(k) for k in node.keys() if k not in known)
        if unknown:
            where = f"{path}." if path else ""
            raise ConfigError(
                f"{', '.join(where + k for k in unknown)}: no such setting (check the spelling; "
                f"{path or 'the config'} has {', '.join(sorted(known))})"
            )
    for key, child in node.items_ex(resolve=False):  # unresolved: an interpolation may need what is not set yet
        if isinstance(child, DictConfig):
            name = str(key)
            check_no_unknown_keys(child, f"{path}.{name}" if path else name)


def register_configs() -> None:
    ConfigStore.instance().store(name="run_schema", node=RunConfig)
