"""The Optuna side of a search (harness/run/search.py): the study, kept in the search folder.

The study lives in Optuna's SQLite storage, ``search.db`` beside the trials, so the folder is the
whole record: running the same command with the same folder (``hydra.run.dir=…``) loads the study
and goes on. One process drives a study at a time (SQLite takes one writer), so a trial still
RUNNING at the start was left by a process that died; it is told FAIL and not counted (a FAIL
without an error of its own measured nothing), and the defaults run again if it was theirs.

What Optuna does not keep, set again at every start: the sampler (TPE, seeded by the run's
``seed`` plus the trials so far, so a resumed search does not replay its first suggestions) and
the check that the folder's study is this search — same objectives and directions, same space,
same base config (``identity``); a study of another search is refused in one line.

Trial states, as the sampler reads them: COMPLETE with the objectives' values; PRUNED for a
configuration the config or the engine refused (TPE takes it as a bad point and moves away);
FAIL for what says nothing of the configuration (interrupted, a figure missing), which TPE
ignores. The engine's defaults are enqueued as the first trial (``user_attrs.defaults``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, Trial, TrialState

from core.errors import ConfigError
from harness.config import Choices, Param

STUDY_NAME = "search"
DB_NAME = "search.db"
INTERRUPTED = "interrupted"  # user_attrs["ended"] of a trial that measured nothing: not counted
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


@dataclass(frozen=True)
class Objective:
    figure: str  # e.g. output_tokens_per_s, output_tps.p50
    direction: str  # maximize | minimize
    label: str
    unit: str

    @property
    def maximize(self) -> bool:
        return self.direction == "maximize"


def distribution(param: Param) -> BaseDistribution:
    if isinstance(param, Choices):
        return CategoricalDistribution(list(param.values))
    if param.kind == "int":
        step = int(param.step) if param.step is not None else 1
        return IntDistribution(int(param.low), int(param.high), log=param.log, step=step)
    return FloatDistribution(param.low, param.high, log=param.log, step=param.step)


def suggest(trial: Trial, key: str, param: Param) -> Any:
    """The trial's value of ``key``: an enqueued one where the trial has it, else the sampler's."""
    if isinstance(param, Choices):
        return trial.suggest_categorical(key, list(param.values))
    if param.kind == "int":
        step = int(param.step) if param.step is not None else 1
        return trial.suggest_int(key, int(param.low), int(param.high), log=param.log, step=step)
    return trial.suggest_float(key, param.low, param.high, log=param.log, step=param.step)


def open_study(
    out_dir: Path, objectives: Sequence[Objective], identity: dict[str, Any], seed: int, planned: int
) -> tuple[optuna.Study, list[int]]:
    """The folder's study, created or resumed; the numbers of the stale RUNNING trials it failed."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    out_dir.mkdir(parents=True, exist_ok=True)
    storage = f"sqlite:///{(out_dir / DB_NAME).resolve()}"
    directions = [o.direction for o in objectives]
    study = optuna.create_study(study_name=STUDY_NAME, storage=storage, load_if_exists=True, directions=directions)
    stored = study.user_attrs.get("identity")
    if stored is None:
        study.set_user_attr("identity", identity)
    elif stored != identity:
        differ = [k for k in identity if stored.get(k) != identity[k]] or ["the search"]
        raise ConfigError(
            f"{out_dir} holds another search ({', '.join(differ)} differ): give the same settings to resume it, "
            "or another folder (hydra.run.dir=…)"
        )
    if [d.name.lower() for d in study.directions] != directions:  # a study made by hand
        raise ConfigError(f"{out_dir / DB_NAME}: its study's directions are not {', '.join(directions)}")
    stale = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
    for number in stale:  # FAIL with no "error": measured nothing (measured_nothing)
        study.tell(number, state=TrialState.FAIL)
    startup = min(10, max(3, planned // 3))  # TPE's random start: a third of a small budget, at most its default
    study.sampler = optuna.samplers.TPESampler(seed=seed + len(study.trials), n_startup_trials=startup)
    return study, stale


def measured_nothing(t: FrozenTrial) -> bool:
    """A FAIL that says nothing of its settings: interrupted, or left RUNNING by a process that
    died (failed at the next start, with no error of its own)."""
    return t.state == TrialState.FAIL and (t.user_attrs.get("ended") == INTERRUPTED or "error" not in t.user_attrs)


def counted(study: optuna.Study) -> int:
    """Trials that count against ``search.trials``: finished, less those that measured nothing."""
    return sum(1 for t in study.get_trials(deepcopy=False, states=FINISHED) if not measured_nothing(t))


def enqueue_defaults(study: optuna.Study, in_space: dict[str, Any]) -> bool:
    """The defaults as the next trial, unless a trial of them finished or waits (an interrupted one
    runs again); only the values inside the space are the trial's parameters. True when enqueued."""
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get("defaults") and (
            t.state == TrialState.WAITING or (t.state in FINISHED and not measured_nothing(t))
        ):
            return False
    study.enqueue_trial(in_space, user_attrs={"defaults": True})
    return True


def fail(study: optuna.Study, trial: Trial, reason: str, counted_: bool = True) -> None:
    """Tell FAIL: interrupted (``counted_`` false: asked again) or a figure missing."""
    trial.set_user_attr("error", reason)
    if not counted_:
        trial.set_user_attr("ended", INTERRUPTED)
    study.tell(trial, state=TrialState.FAIL)


def prune(study: optuna.Study, trial: Trial, reason: str) -> None:
    """Tell PRUNED: the config or the engine refused the settings (``reason``: their one line)."""
    trial.set_user_attr("error", reason)
    study.tell(trial, state=TrialState.PRUNED)


def complete(study: optuna.Study) -> list[FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))


def front(study: optuna.Study) -> list[FrozenTrial]:
    """The Pareto front of the complete trials (for one objective: the best, ties included)."""
    return list(study.best_trials)


def trial_json(t: FrozenTrial) -> dict[str, Any]:
    """A trial as search.json keeps it: state, values, parameters and the harness's own attributes."""
    out = {
        "number": t.number,
        "state": t.state.name.lower(),
        "values": list(t.values) if t.values is not None else None,
        "params": dict(t.params),
        "started_at": t.datetime_start.isoformat(timespec="seconds") if t.datetime_start else None,
        "duration_s": t.duration.total_seconds() if t.duration is not None else None,
    }
    out.update({k: v for k, v in t.user_attrs.items()})
    if t.state == TrialState.FAIL and "error" not in out:
        out.update(error="interrupted: the process ended during the trial", ended=INTERRUPTED)
    return json.loads(json.dumps(out, default=str))


def best_for_check(
    complete: Sequence[FrozenTrial], front_: Sequence[FrozenTrial], objectives: Sequence[Objective]
) -> Optional[FrozenTrial]:
    """The trial checked against the defaults: of the front, the one that improves most on the
    defaults' values over all objectives (the geometric mean of its ratios to them, each > 1 when
    better); without a complete defaults trial, the front's best on the first objective."""
    if not front_:
        return None
    defaults = next((t for t in complete if t.user_attrs.get("defaults")), None)
    if defaults is None or defaults.values is None:
        first = objectives[0]
        return (max if first.maximize else min)(front_, key=lambda t: t.values[0])
    base = defaults.values

    def score(t: FrozenTrial) -> float:
        product = 1.0
        for value, ref, objective in zip(t.values, base, objectives):
            product *= (value / ref) if objective.maximize else (ref / value)
        return product ** (1 / len(objectives))

    return max(front_, key=lambda t: (score(t), -t.number))
