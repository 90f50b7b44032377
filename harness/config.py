"""The run's configuration: structured configs registered in Hydra's ConfigStore.

The backend and workload sections are typed by the entry chosen from their registries
(``backend=…``, ``workload=…``); the sections below are common to every run.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from harness.errors import ConfigError


@dataclass
class ModelConfig:
    """Which model: a model-store name, or ``path`` (local HF folder or GGUF), or ``id`` (hub)."""

    name: str = "smollm2-135m"
    path: Optional[str] = None
    id: Optional[str] = None
    revision: Optional[str] = None

    def validate(self) -> None:
        if self.path is not None and self.id is not None:
            raise ConfigError("set model.path or model.id, not both")


@dataclass
class SLOConfig:
    """Service-level objectives for goodput; ``null`` means no limit on that metric."""

    ttft_s: Optional[float] = None
    tpot_s: Optional[float] = None
    e2e_s: Optional[float] = None

    def validate(self) -> None:
        for key in ("ttft_s", "tpot_s", "e2e_s"):
            value = getattr(self, key)
            if value is not None and value <= 0:
                raise ConfigError(f"slo.{key} must be > 0 seconds (got {value})")


@dataclass
class MemoryConfig:
    """Memory accounting: sampling period of the RSS sampler and an optional budget.

    With ``budget_gib`` set, the summary says how many KV-cache tokens fit in that budget
    next to the model's weights.
    """

    budget_gib: Optional[float] = None
    sample_interval_s: float = 0.05

    def validate(self) -> None:
        if self.budget_gib is not None and self.budget_gib <= 0:
            raise ConfigError(f"memory.budget_gib must be > 0 (got {self.budget_gib})")
        if self.sample_interval_s <= 0:
            raise ConfigError(f"memory.sample_interval_s must be > 0 (got {self.sample_interval_s})")


@dataclass
class RunConfig:
    backend: Any = MISSING
    model: ModelConfig = field(default_factory=ModelConfig)
    workload: Any = MISSING
    seed: int = 0
    output_root: str = "results"
    slo: SLOConfig = field(default_factory=SLOConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    progress: bool = True
    save_output_text: bool = True
    report: bool = True  # write report.html (harness/report.py) into the run folder

    def validate(self) -> None:
        for section in (self.backend, self.model, self.workload, self.slo, self.memory):
            section.validate()


def register_configs() -> None:
    ConfigStore.instance().store(name="run_schema", node=RunConfig)
