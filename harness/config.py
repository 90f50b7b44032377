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
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

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


@dataclass
class ClientConfig:
    """The load generator that drives HTTP backends (``backend.mode=server``, ``backend=openai``).

    ``workers``: client processes, each with its own event loop and connection pool
    (harness/client/workers.py); null picks one (:func:`harness.client.workers.auto_workers`). In-process
    engines always run in the harness's own process (1).
    """

    workers: Optional[int] = None  # client processes; null: 1 up to 32 streams, then min(cores − 1, streams / 32, 8)
    event_loop: str = "asyncio"  # asyncio | uvloop (pip install -e '.[client]')
    # open-loop arrivals: spin (sleep to 1.5 ms before the due time, then yield until it) | sleep
    # (asyncio's timer alone, ~1 ms late)
    pacing: str = "spin"

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
