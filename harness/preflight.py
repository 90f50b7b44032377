"""The command checked before Hydra runs it, each fault in one line (Hydra's own errors are a page
and point at a stack trace): an unknown config group choice, a value of the wrong type, an
unknown key, a folder that cannot be made, and in a sweep (``-m``) a value the run would refuse.

A sweep's points are checked one value at a time: the first value of every swept key, then each
other value of one key with the first of the rest (a sweep of 2 × 7 points composes 8 configs,
about 0.05 s each). A fault only a combination shows stays the point's own failure, recorded in
sweep.json while the other points run.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ValueType
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from core.errors import HarnessError
from harness.config import to_run_config

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
GROUPS = ("backend", "model", "workload", "preset")
MULTIRUN_FLAGS = ("-m", "--multirun")
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def group_choices(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def check_group_choices(args: list[str]) -> None:
    """``backend=nope`` → one line naming the valid choices."""
    for arg in args:
        key, sep, value = arg.lstrip("+~").partition("=")
        if not sep or key not in GROUPS or "(" in value:
            continue
        choices = group_choices(key)
        for choice in value.split(","):
            if choice and choice not in choices:
                raise HarnessError(f"unknown {key} '{choice}': choose one of {', '.join(choices)}")


def check_overrides(args: list[str]) -> None:
    """Compose the config as Hydra will (about 0.1 s), and with ``-m`` check the sweep's values.
    Hydra's other flags, and its own settings (``hydra…``: a launcher's keys need the launcher's
    plugin), are left to Hydra."""
    multirun = any(arg in MULTIRUN_FLAGS for arg in args)
    if any(arg.startswith("-") and arg not in MULTIRUN_FLAGS for arg in args):
        return
    job = [arg for arg in args if not arg.startswith("-") and not arg.lstrip("+~").startswith("hydra")]
    try:
        with initialize_config_dir(version_base=None, config_dir=str(CONF_DIR)):
            if multirun:
                output_root = check_sweep_values(job, args)
            else:
                output_root = compose(config_name="config", overrides=job).get("output_root")
    except (HydraException, OmegaConfBaseException) as exc:
        raise HarnessError(hydra_error_line(exc)) from None
    folders = {"output_root": str(output_root or "")}
    folders.update({key: value for key, _, value in (a.partition("=") for a in args)
                    if key in ("hydra.run.dir", "hydra.sweep.dir")})
    for key, folder in folders.items():
        if folder and "$" not in folder:
            check_folder_path(key, Path(folder).expanduser())


def check_sweep_values(job: list[str], args: list[str]) -> object:
    """Every value of a sweep composed and validated as its point would be (one value varied at a
    time); HarnessError names the point's overrides. Returns the first point's output_root."""
    parser = OverridesParser.create()
    parsed = parser.parse_overrides(job)
    if any(o.is_sweep_override() and (not o.is_discrete_sweep() or o.value_type == ValueType.GLOB_CHOICE_SWEEP)
           for o in parsed):
        return None  # an interval (another sweeper's) or a glob over a group's files: Hydra's to expand
    first = [f"{o.get_key_element()}={next(iter(o.sweep_string_iterator()))}" if o.is_sweep_override()
             else arg for o, arg in zip(parsed, job)]
    cfg = compose(config_name="config", overrides=first, return_hydra_config=True)
    sweeper = cfg.hydra.sweeper
    if sweeper.get("_target_") != BASIC_SWEEPER or any(a.startswith(("hydra/sweeper", "hydra.sweeper")) for a in args):
        return cfg.get("output_root")  # another sweeper (Optuna, Ax) draws its own points
    params = [f"{key}={value}" for key, value in (sweeper.get("params") or {}).items() if not key.startswith("hydra")]
    values: dict[str, list[str]] = {}  # key → its "key=value" overrides, the later override of a key winning
    for override in parser.parse_overrides([*params, *job]):
        key = override.get_key_element()
        if override.is_sweep_override() and not override.is_discrete_sweep():
            return cfg.get("output_root")  # an interval in the preset: Hydra's basic sweeper refuses it
        values[key] = ([f"{key}={v}" for v in override.sweep_string_iterator()] if override.is_sweep_override()
                       else [f"{key}={override.get_value_element_as_str()}"])
    base = [choices[0] for choices in values.values()]
    points = [base] + [[*base[:i], value, *base[i + 1:]]
                       for i, choices in enumerate(values.values()) for value in choices[1:]]
    for point in points:
        try:
            to_run_config(compose(config_name="config", overrides=point))
        except (HarnessError, HydraException, OmegaConfBaseException) as exc:
            message = str(exc) if isinstance(exc, HarnessError) else hydra_error_line(exc)
            swept = [o for o, choices in zip(point, values.values()) if len(choices) > 1]
            raise HarnessError(f"the sweep's point {' '.join(swept) or '(the first)'}: {message}") from None
    return cfg.get("output_root")


def check_folder_path(key: str, folder: Path) -> None:
    """One line when ``folder`` cannot be made: a file in its way, or a parent not writable."""
    for parent in (folder, *folder.absolute().parents):
        if parent.exists():
            if not parent.is_dir():
                raise HarnessError(f"{key}={folder}: {parent} is a file, not a folder; give a folder path")
            if parent != folder:
                try:  # a real try: write access says nothing of /proc, /sys or a read-only mount as root
                    os.rmdir(tempfile.mkdtemp(prefix=".harness-check-", dir=parent))
                except OSError as exc:
                    raise HarnessError(f"{key}={folder}: cannot make folders in {parent} ({exc.strerror}); "
                                       "give a folder path you can write to") from None
            return


def hydra_error_line(exc: BaseException) -> str:
    """A Hydra or OmegaConf error on one line: its message (less Hydra's advice to append a key
    with +, which would only make Hydra ignore a misspelt one) and the first line of its cause."""
    lines = [line.strip() for line in str(exc).splitlines()
             if line.strip() and not line.strip().startswith("To append to your config use")]
    text = "; ".join(lines) or type(exc).__name__
    cause = exc.__cause__
    if cause is not None and str(cause).strip():
        text += f" ({str(cause).strip().splitlines()[0]})"
    return text
