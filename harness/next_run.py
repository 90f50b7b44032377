"""What a finished run suggests running next: its overrides on another engine, into a folder
named in advance, and ``python -m harness.compare`` of the two (the last lines of
``python -m harness``, harness/cli.py)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from core.errors import HarnessError
from harness.preflight import CONF_DIR
from harness.reports.console import next_run_lines, pages_lines

# overrides another engine does not take as they are: the engine's own, and where results go
OWN_OR_OUTPUT = ("backend", "output_root", "hydra")


def next_steps(run_cfg: Any, run_dir: Path, overrides: Sequence[str], has_gguf: bool) -> list[str]:
    """The last lines of a run before ``results:``: where its pages are, and the commands that
    run its overrides on another engine and compare the two."""
    if run_dir.is_absolute() and run_dir.is_relative_to(Path.cwd()):
        run_dir = run_dir.relative_to(Path.cwd())  # shorter, and the commands run from here anyway
    lines = pages_lines(run_dir)
    kept = comparable_overrides(overrides)
    try:
        other = other_engine(run_cfg.backend.name, kept, has_gguf)
    except Exception as exc:  # noqa: BLE001 - the run is done and written: a suggestion that fails is left out
        logging.getLogger("harness").debug("no other engine suggested: %s", exc)
        other = None
    if other is not None:
        lines += next_run_lines(run_dir, run_cfg.backend.name, run_cfg.workload.name, other, kept)
    return lines


def comparable_overrides(overrides: Sequence[str]) -> list[str]:
    """A run's overrides that another engine takes as they are: less the engine's own
    (``backend=``, ``backend.*``) and where the results go (``output_root``, ``hydra.*``)."""
    return [o for o in overrides if o.lstrip("+~").split("=", 1)[0].split(".")[0] not in OWN_OR_OUTPUT]


def other_engine(engine: str, overrides: Sequence[str], has_gguf: bool) -> Optional[str]:
    """An engine other than ``engine`` that can run ``overrides`` here: installed (the check a
    run makes before loading), valid with these overrides, and able to load the model's files.
    The default engine (conf/config.yaml) first, then by name; a stand-in for an engine (the
    reference server) only when no engine can."""
    from backends.factory import check_backend_available
    from backends.registry import backend_registry

    try:
        default: Any = _composed(overrides).backend  # the default engine's, composed once (0.1 s a time)
    except (HarnessError, HydraException, OmegaConfBaseException):
        default = None
    entries = [backend_registry.get(name) for name in backend_registry.names() if name != engine]
    for entry in sorted(entries, key=lambda e: (e.cls.stand_in, default is None or e.name != default.name)):
        if entry.cls.needs_gguf and not has_gguf:
            continue
        try:
            if default is not None and entry.name == default.name:
                config = default
            else:
                config = _composed([f"backend={entry.name}", *overrides]).backend
            check_backend_available(config)
            if config.mode == "server" and not config.server_command:
                entry.cls.check_available()  # a server that runs as a module of this interpreter
        except (HarnessError, HydraException, OmegaConfBaseException):
            continue
        return entry.name
    return None


def _composed(overrides: Sequence[str]) -> Any:
    """The validated RunConfig of these overrides, inside a Hydra app (the run's) or outside one."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from harness.config import to_run_config

    if GlobalHydra.instance().is_initialized():
        return to_run_config(compose("config", overrides=list(overrides)))
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return to_run_config(compose("config", overrides=list(overrides)))
