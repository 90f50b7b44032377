"""The command checked before Hydra runs it, each fault in one line (Hydra's own errors are a page
and point at a stack trace): an unknown config group choice, a value of the wrong type, an
unknown key, a folder that cannot be made, and in a sweep (``-m``) a value the run would refuse.

A sweep's points are checked one value at a time: each value of a key with the first value of
every other key (a sweep of 2 × 7 points composes 8 configs, about 0.08 s each: 0.7 s). A value refused
there is tried with other values of the other keys (up to 32 points): when one of them accepts it,
the fault is that combination's, and stays the point's own failure, recorded in sweep.json while
the other points run. A value no point accepts stops the sweep before it starts.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from pathlib import Path
from typing import Optional

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ValueType
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from core.errors import HarnessError
from harness.config import check_no_unknown_keys, to_run_config

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
GROUPS = ("backend", "model", "workload", "preset")
MULTIRUN_FLAGS = ("-m", "--multirun")
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
MAX_OTHER_POINTS = 32  # other points tried before a value refused at its first is called refused by all


def group_choices(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def check_group_choices(args: list[str]) -> None:
    """``backend=nope`` → one line naming the valid choices."""
    for arg in args:
        key, sep, value = arg.lstrip("+~").partition("=")
        if not sep or key not in GROUPS or "(" in value:
            continue
        choices = group_choices(key)
        for choice in (c.strip().strip("'\"") for c in value.split(",")):
            if choice and choice not in choices:
                raise HarnessError(f"unknown {key} '{choice}': choose one of {', '.join(choices)}")


def check_overrides(args: list[str]) -> None:
    """Compose the config as Hydra will (about 0.1 s), and with ``-m`` check the sweep's values.
    Hydra's other flags, and its own settings (``hydra…``: a launcher's keys need the launcher's
    plugin), are left to Hydra."""
    multirun = any(arg in MULTIRUN_FLAGS or arg.replace(" ", "") == "hydra.mode=MULTIRUN" for arg in args)
    if any(arg.startswith("-") and arg not in MULTIRUN_FLAGS for arg in args):
        return
    job = [arg for arg in args if not arg.startswith("-") and not arg.lstrip("+~").startswith("hydra")]
    try:
        with initialize_config_dir(version_base=None, config_dir=str(CONF_DIR)):
            if multirun:
                output_root = check_sweep_values(job, args)
            else:
                cfg = compose(config_name="config", overrides=job)
                check_no_unknown_keys(cfg)
                output_root = cfg.get("output_root")
    except (HydraException, OmegaConfBaseException) as exc:
        raise HarnessError(hydra_error_line(exc)) from None
    folders = {"output_root": str(output_root or "")}
    folders.update(
        {
            key: value
            for key, _, value in (a.partition("=") for a in args)
            if key in ("hydra.run.dir", "hydra.sweep.dir")
        }
    )
    for key, folder in folders.items():
        if folder and "$" not in folder:
            check_folder_path(key, Path(folder).expanduser())


def check_sweep_values(job: list[str], args: list[str]) -> object:
    """Every value of a sweep composed and validated as its point would be (one value varied at a
    time); HarnessError names the point's overrides. Returns the first point's output_root."""
    parser = OverridesParser.create()
    parsed = parser.parse_overrides(job)
    if any(
        o.is_sweep_override() and (not o.is_discrete_sweep() or o.value_type == ValueType.GLOB_CHOICE_SWEEP)
        for o in parsed
    ):
        return None  # an interval (another sweeper's) or a glob over a group's files: Hydra's to expand
    firsts = [
        next(iter(o.sweep_string_iterator()), None) if o.is_sweep_override() else arg for o, arg in zip(parsed, job)
    ]
    if None in firsts:
        return None  # an empty sweep (range(5, 1)): Hydra runs no point
    first = [
        f"{o.get_key_element()}={value}" if o.is_sweep_override() else arg for o, value, arg in zip(parsed, firsts, job)
    ]
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
        values[key] = (
            [f"{key}={v}" for v in override.sweep_string_iterator()]
            if override.is_sweep_override()
            else [f"{key}={override.get_value_element_as_str()}"]
        )
    if any(not choices for choices in values.values()):
        return cfg.get("output_root")
    choices = list(values.values())
    errors: dict[tuple[str, ...], Optional[str]] = {}

    def error_of(point: tuple[str, ...]) -> Optional[str]:
        if point not in errors:
            errors[point] = point_error(list(point))
        return errors[point]

    if not choices and (error := error_of(())):
        raise HarnessError(f"the sweep: {error}")
    base = tuple(options[0] for options in choices)
    for i, options in enumerate(choices):
        for value in options:
            # the value with the first of every other key, then (refused there) with others: a value
            # some point accepts leaves the refusal to that combination's point, recorded as it runs
            point = (*base[:i], value, *base[i + 1 :])
            if (error := error_of(point)) is None:
                continue
            others = itertools.product(*[options if j != i else [value] for j, options in enumerate(choices)])
            if any(error_of(other) is None for other in itertools.islice(others, 1, MAX_OTHER_POINTS + 1)):
                continue
            swept = [o for o, options in zip(point, choices) if len(options) > 1]
            raise HarnessError(f"the sweep's point {' '.join(swept)}: {error}" if swept else f"the sweep: {error}")
    return cfg.get("output_root")


def point_error(point: list[str]) -> Optional[str]:
    """Why the point's config is refused, in one line; None when it is accepted."""
    try:
        to_run_config(compose(config_name="config", overrides=point))
    except HarnessError as exc:
        return str(exc)
    except (HydraException, OmegaConfBaseException) as exc:
        return hydra_error_line(exc)
    return None


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
                    raise HarnessError(
                        f"{key}={folder}: cannot make folders in {parent} ({exc.strerror}); "
                        "give a folder path you can write to"
                    ) from None
            return


def hydra_error_line(exc: BaseException) -> str:
    """A Hydra or OmegaConf error on one line: its message (less Hydra's advice to append a key
    with +, which would only make Hydra ignore a misspelt one) and the first line of its cause."""
    lines = [
        line.strip()
        for line in str(exc).splitlines()
        if line.strip() and not line.strip().startswith("To append to your config use")
    ]
    text = "; ".join(lines) or type(exc).__name__
    cause = exc.__cause__
    if cause is not None and str(cause).strip():
        text += f" ({str(cause).strip().splitlines()[0]})"
    return text
