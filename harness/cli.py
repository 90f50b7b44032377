"""``python -m harness``: Hydra CLI around :func:`harness.runner.run_benchmark`."""
from __future__ import annotations

import logging
import shutil
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from harness.errors import HarnessError

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
GROUPS = ("backend", "model", "workload")


def register_everything() -> None:
    """Structured configs into ConfigStore, and every backend and workload module imported."""
    from backends import backend_registry
    from harness.config import register_configs
    from workloads import workload_registry

    register_configs()
    backend_registry.discover()
    workload_registry.discover()


def compose_config(*overrides: str):
    """A validated RunConfig from Hydra overrides, composed as ``python -m harness`` does
    (for scripts and tests that call :func:`harness.runner.run_benchmark` directly)."""
    from hydra import compose, initialize_config_dir

    from harness.runner import to_run_config

    register_everything()
    check_group_choices(list(overrides))
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("config", overrides=list(overrides))
    return to_run_config(cfg)


def group_choices(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def check_group_choices(args: list[str]) -> None:
    """``backend=nope`` → one line naming the valid choices (Hydra's own error is a page)."""
    for arg in args:
        key, sep, value = arg.lstrip("+~").partition("=")
        if not sep or key not in GROUPS or "(" in value:
            continue
        choices = group_choices(key)
        for choice in value.split(","):
            if choice and choice not in choices:
                raise HarnessError(f"unknown {key} '{choice}': choose one of {', '.join(choices)}")


def _discard_if_empty(run_dir: Path) -> None:
    """Nothing was measured: leave no folder behind, unless it holds an engine's server log."""
    only_hydra = {".hydra", "harness.log"}
    if run_dir.is_dir() and all(p.name in only_hydra for p in run_dir.iterdir()):
        shutil.rmtree(run_dir, ignore_errors=True)


def fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


@hydra.main(version_base=None, config_path=str(CONF_DIR), config_name="config")
def hydra_main(cfg: DictConfig) -> None:
    from harness.runner import run_benchmark, to_run_config
    from harness.summary import format_summary

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    outcome = None
    try:
        run_cfg = to_run_config(cfg)
        outcome = run_benchmark(run_cfg, run_dir)
    except HarnessError as exc:
        _discard_if_empty(run_dir)
        fail(str(exc))
    except KeyboardInterrupt:
        print(f"\ninterrupted: what was measured is in {run_dir}", file=sys.stderr)
        sys.exit(130)
    print(format_summary(outcome.summary))
    print(f"results: {run_dir}", flush=True)
    if outcome.summary["requests"]["failed"]:
        logging.getLogger("harness").warning("%d requests failed", outcome.summary["requests"]["failed"])


def main() -> None:
    register_everything()
    try:
        check_group_choices(sys.argv[1:])
    except HarnessError as exc:
        fail(str(exc))
    hydra_main()
