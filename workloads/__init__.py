"""Workloads: what requests to send, with what lengths, arriving when."""

from core.registry import Registry
from workloads.base import SessionSpec, TurnSpec, Workload, WorkloadConfig, WorkloadPlan

workload_registry: Registry[Workload] = Registry("workload", package="workloads", config_group="workload")

__all__ = ["SessionSpec", "TurnSpec", "Workload", "WorkloadConfig", "WorkloadPlan", "workload_registry"]
