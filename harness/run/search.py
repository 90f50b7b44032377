"""Search over engine settings and load with Optuna: which configuration serves best, and is it
really better than the defaults?

    python -m harness backend=llamacpp workload=synthetic search.enabled=true \\
        'search.space={backend.n_threads: [1, 2], backend.n_batch: int:32:512:log, workload.concurrency: int:1:8}' \\
        'search.objectives=[output_tps.p50:max, output_tokens_per_s:max]' search.trials=12

Why an option of ``python -m harness`` and not a command of its own: a search is a run of the
same config with some settings left open, as an SLO search is (``slo_search.enabled``). So the
command composes, checks and documents its config as every run does (``--cfg job``, the
pre-flight's one-line errors, ``--help``), its folder is Hydra's run folder, and resuming is
giving that folder again (``hydra.run.dir=…``), as a sweep resumes with ``hydra.sweep.dir``.

The space (``search.space``; syntax in harness/config.py, :data:`~harness.config.SPACE_SYNTAX`):

- ``[a, b, …]``: choices (null, booleans, numbers, strings);
- ``int:LOW:HIGH``, ``float:LOW:HIGH``: a range, both ends in; ``:log`` samples it on a log
  scale, ``:STEP`` in steps (``int:0:512:64``);
- keys are any settings of the run (``backend.*``, ``workload.*``…), also inside a free mapping
  (``backend.engine_args.max_num_batched_tokens`` for vLLM), but not ``search.*``.

Objectives (``search.objectives``): figures of a run's summary.json, ``metric`` for a run metric
or ``metric.stat`` for a request metric (as ``--figures`` of harness.ab), each with ``:max`` or
``:min`` (default: the metric's own direction). One objective: TPE on it, the best trial. Two
or more: multi-objective TPE and the Pareto front (``study.best_trials``). The default pair is
the capacity trade: ``output_tps.p50`` (per user) and ``output_tokens_per_s`` (per instance).

How it runs:

1. The run's own config is **the defaults**: the first trial runs it unchanged (its values of
   the searched keys need not lie in the space; those that do are its Optuna parameters).
2. Each trial asks the study for settings, builds their config (a refused value: **pruned**,
   with the config's one line) and runs it as a point of a sweep
   (:func:`harness.run.sweep.run_sweep_point`) into ``trial-NNN/``: consecutive trials with the
   same engine settings share one engine load (a load that fails: **pruned**, with the engine's
   line); a trial that measured nothing (Ctrl-C) is told FAIL and asked again on resume.
3. Its objectives are read from its summary.json and told to the study (SQLite,
   ``search.db``: harness/run/search_study.py), which is the record; a trial is printed in one
   line, and search.json, search.html (the Pareto page: harness/reports/search_page.py),
   sweep.json and compare.html are refreshed.
4. It stops when the study holds ``search.trials`` trials (those that measured nothing left out)
   or ``search.max_time_s`` has passed (no trial starts after it), or at Ctrl-C (what was
   measured is kept; running the command again goes on).
5. ``search.check_best``: the best (harness/run/search_study.py: ``best_for_check``), or the
   trial ``search.check_trial`` names (the same command again checks another), runs against the
   defaults in ``search.check_blocks`` interleaved blocks (python -m harness.ab,
   harness/run/search_check.py); the summary says whether its gain is beyond noise, either way.

The search folder: ``search.db``, ``search.json`` (every trial, the front, the best and its
check), ``search.html``, ``sweep.json`` and ``compare.html`` (the trials as sweep points),
``trial-NNN/`` (a run folder each), ``check/`` (the A/B experiment).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

from omegaconf import OmegaConf

from core.errors import ConfigError, HarnessError
from harness.config import (
    UNSET,
    Param,
    RunConfig,
    config_sha256,
    override_value,
    parse_objective,
    search_default,
    search_defaults,
)
from harness.gate.figures import parse_figure
from harness.reports import search_page
from harness.results import metrics
from harness.results.schema import FINISHED, RunSummary
from harness.results.store import is_run_dir, load_summary, write_json
from harness.results.sweep_file import locked_sweep, new_entry, record_point
from harness.run import search_check, search_study
from harness.run.search_study import Objective
from harness.run.sweep import SESSIONS, run_sweep_point

log = logging.getLogger("harness")
SEARCH_JSON = "search.json"


def objectives_of(cfg: RunConfig) -> list[Objective]:
    """``search.objectives`` as figures with directions; ConfigError in one line."""
    out = []
    for text in cfg.search.objectives:
        name, direction = parse_objective(text)
        try:
            figure = parse_figure(name)
        except ValueError as exc:
            raise ConfigError(f"search.objectives: {exc}") from None
        metric = figure.definition
        if getattr(metric, "source", None) == "cost" and cfg.cost.machine_usd_per_hour() is None:
            raise ConfigError(f"search.objectives: {figure.name} needs the machine's price: set cost.usd_per_hour")
        direction = direction or ("minimize" if figure.lower_is_better else "maximize")
        out.append(Objective(figure.name, direction, figure.label, metric.unit))
    return out


def trial_config(base: RunConfig, settings: dict[str, Any]) -> RunConfig:
    """The base config with the trial's settings, validated; ConfigError (one line) when refused.
    A key of a free mapping that the base leaves unset stays unset where the trial's value is null."""
    node = OmegaConf.structured(base)
    for key, value in settings.items():
        if value is None and search_default(base, key) is UNSET:
            continue
        try:
            OmegaConf.update(node, key, value, merge=True)
        except Exception as exc:  # noqa: BLE001 - omegaconf's errors are multi-line
            raise ConfigError(f"{key}={override_value(value)}: {str(exc).splitlines()[0]}") from None
    try:
        cfg = OmegaConf.to_object(node)
    except Exception as exc:  # noqa: BLE001 - omegaconf's errors are multi-line
        raise ConfigError(str(exc).splitlines()[0]) from None
    assert isinstance(cfg, RunConfig)
    cfg.validate()
    return cfg


def summary_of(entry: dict[str, Any]) -> Optional[RunSummary]:
    """The point's run summary (its own folder, or the finished run resume found), or None."""
    for d in entry.get("run_dirs") or []:
        if is_run_dir(Path(d)):
            return RunSummary.from_dict(load_summary(Path(d)))
    return None


class Search:
    """One search: its config, the study, and what it writes after every trial."""

    def __init__(self, cfg: RunConfig, out_dir: Path, overrides: Sequence[str]):
        self.cfg = cfg
        self.out_dir = Path(out_dir)
        self.overrides = list(overrides)
        self.objectives = objectives_of(cfg)
        self.space: dict[str, Param] = cfg.search.params()
        self.defaults = search_defaults(cfg, self.space)
        self.base = copy.deepcopy(cfg)
        self.base.search.enabled = False  # a trial is a plain run (its config.yaml runs it again)
        identity = {
            "objectives": [f"{o.figure}:{o.direction}" for o in self.objectives],
            "space": {k: p.text() for k, p in self.space.items()},
            "config_sha256": config_sha256(self.base),
        }
        self.study, self.stale = search_study.open_study(
            self.out_dir, self.objectives, identity, cfg.seed, cfg.search.trials
        )
        self.started = time.monotonic()
        self.stopped: Optional[str] = None
        self.check: Optional[dict[str, Any]] = None

    # --- the loop -----------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        search = self.cfg.search
        if self.stale:
            print(
                f"resume: trial(s) {', '.join(map(str, self.stale))} left running by a process that ended: "
                "told FAIL, not counted",
                flush=True,
            )
        in_space = {k: v for k, v in self.defaults.items() if self.space[k].contains(v)}
        search_study.enqueue_defaults(self.study, in_space)
        with locked_sweep(self.out_dir) as data:
            data["kind"] = "search"
        try:
            while True:
                done = search_study.counted(self.study)
                if done >= search.trials:
                    self.stopped = f"{done} trials"
                    break
                if search.max_time_s is not None and time.monotonic() - self.started >= search.max_time_s:
                    self.stopped = f"search.max_time_s ({search.max_time_s:g} s) passed after {done} trials"
                    break
                self.run_trial()
                self.write()
        except KeyboardInterrupt:
            self.stopped = "interrupted"
            self.write()
            raise
        finally:
            SESSIONS.close()  # the check runs its own engines; a finished search holds none
        best = self.checked()
        if search.check_best and best is not None and not best.user_attrs.get("defaults"):
            try:
                self.check = search_check.check_best(
                    self.out_dir,
                    search_check.common_overrides(self.overrides),
                    best.user_attrs.get("overrides", []),
                    self.objectives,
                    search.check_blocks,
                    self.cfg.seed,
                    best.number,
                )
            finally:
                self.write()
            if self.check.get("exit_code") == 130:
                raise KeyboardInterrupt
        elif search.check_best:
            why = "no trial completed" if best is None else "the best is the defaults"
            self.check = {"status": "skipped", "text": f"not checked: {why}"}
        return self.write()

    def run_trial(self) -> None:
        trial = self.study.ask()
        is_defaults = bool(trial.user_attrs.get("defaults"))
        settings = {}
        for key, param in self.space.items():
            if is_defaults and key not in trial.params and not param.contains(self.defaults[key]):
                settings[key] = self.defaults[key]  # the defaults' own value, outside the space
            else:
                settings[key] = search_study.suggest(trial, key, param)
        overrides = [] if is_defaults else [f"{k}={override_value(v)}" for k, v in settings.items()]
        run_dir = self.out_dir / f"trial-{trial.number:03d}"
        trial.set_user_attr("settings", settings)
        trial.set_user_attr("overrides", overrides)
        trial.set_user_attr("run_dir", str(run_dir))
        shown = "the defaults" if is_defaults else " ".join(overrides)
        try:
            cfg = trial_config(self.base, settings)
        except HarnessError as exc:
            record_point(self.out_dir, new_entry(trial.number, overrides, run_dir, error=str(exc)))
            search_study.prune(self.study, trial, f"refused: {exc}")
            print(f"trial {trial.number}: {shown} → pruned: {exc}", flush=True)
            return
        try:
            entry = run_sweep_point(cfg, run_dir, self.out_dir, trial.number, overrides)
        except KeyboardInterrupt:
            search_study.fail(self.study, trial, "interrupted", counted_=False)
            print(f"trial {trial.number}: {shown} → interrupted (not counted: the same command goes on)", flush=True)
            raise
        summary = summary_of(entry)
        trial.set_user_attr("status", entry.get("status"))
        trial.set_user_attr("engine_reused", bool(entry.get("engine_reused")))
        if summary is None or summary.status not in FINISHED:
            reason = entry.get("error") or (summary.error if summary else None) or entry.get("status")
            search_study.prune(self.study, trial, str(reason))
            print(f"trial {trial.number}: {shown} → pruned: {reason}", flush=True)
            return
        trial.set_user_attr("figures", search_page.trial_figures(summary))
        if getattr(summary, "taint", None):
            trial.set_user_attr("taint", list(summary.taint))
        values = [parse_figure(o.figure).of(summary) for o in self.objectives]
        missing = [o.figure for o, v in zip(self.objectives, values) if v is None]
        if missing:
            search_study.fail(self.study, trial, f"no value for {', '.join(missing)} in its summary.json")
            print(f"trial {trial.number}: {shown} → failed: no value for {', '.join(missing)}", flush=True)
            return
        self.study.tell(trial, values)
        print(f"trial {trial.number}: {shown} → {self.values_text(values)}", flush=True)

    # --- what it says -------------------------------------------------------------------

    def values_text(self, values: Sequence[Optional[float]]) -> str:
        parts = []
        for o, v in zip(self.objectives, values):
            metric = metrics.get(parse_figure(o.figure).metric)
            parts.append(f"{o.label} {'-' if v is None else f'{metric.show(v):.{metric.digits}f}'} {metric.unit}")
        return ", ".join(parts)

    def checked(self) -> Any:
        """The trial the check runs: ``search.check_trial``, or the best."""
        number = self.cfg.search.check_trial
        if number is None:
            return self.best()
        found = [t for t in search_study.complete(self.study) if t.number == number]
        if not found:
            raise ConfigError(f"search.check_trial={number}: no complete trial of that number in {self.out_dir}")
        return found[0]

    def best(self) -> Any:
        complete = search_study.complete(self.study)
        return search_study.best_for_check(complete, search_study.front(self.study), self.objectives)

    def record(self) -> dict[str, Any]:
        """search.json: the search's settings, every trial, the front, the best and its check."""
        trials = [search_study.trial_json(t) for t in self.study.get_trials(deepcopy=False)]
        try:
            best = self.checked()
        except ConfigError:  # a check_trial not (yet) complete: the best, until the check says so
            best = self.best()
        return {
            "kind": "search",
            "folder": str(self.out_dir),
            "updated_at": datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds"),
            "objectives": [dataclasses.asdict(o) for o in self.objectives],
            "space": {k: p.text() for k, p in self.space.items()},
            "defaults": self.defaults,
            "trials_planned": self.cfg.search.trials,
            "max_time_s": self.cfg.search.max_time_s,
            "command": search_check.common_overrides(self.overrides),
            "backend": self.cfg.backend.name,
            "model": self.cfg.model.name,
            "workload": self.cfg.workload.name,
            "trials": trials,
            "front": [t.number for t in search_study.front(self.study)],
            "best": best.number if best is not None else None,
            "stopped": self.stopped,
            "check": self.check,
        }

    def write(self) -> dict[str, Any]:
        """search.json and search.html, now; a page that fails costs only the page."""
        record = self.record()
        write_json(self.out_dir / SEARCH_JSON, record)
        try:
            search_page.write_search_page(self.out_dir, record)
        except Exception as exc:  # noqa: BLE001 - the study and search.json hold every figure
            log.warning("search.html not written (%s: %s)", type(exc).__name__, exc)
        return record


def run_search(cfg: RunConfig, out_dir: Path, overrides: Sequence[str]) -> dict[str, Any]:
    """Run (or resume) the search in ``out_dir``; search.json's record. ``overrides``: the command's."""
    return Search(cfg, out_dir, overrides).run()


def summary_lines(record: dict[str, Any]) -> list[str]:
    """What the console says at the end: the trials, the front, the best and its check."""
    trials = record["trials"]
    states = {s: sum(1 for t in trials if t["state"] == s) for s in ("complete", "pruned", "fail")}
    lines = [
        "",
        f"search: {len(trials)} trials ({states['complete']} complete, {states['pruned']} pruned, "
        f"{states['fail']} failed); stopped: {record.get('stopped')}",
    ]
    labels = [o["label"] for o in record["objectives"]]
    by_number = {t["number"]: t for t in trials}
    lines.append(f"front ({', '.join(labels)}):")
    for n in record["front"]:
        t = by_number[n]
        mark = " (defaults)" if t.get("defaults") else ""
        mark += " ← best" if n == record.get("best") else ""
        values = ", ".join(f"{v:.4g}" for v in t.get("values") or [])
        lines.append(f"  trial {n}: {' '.join(t.get('overrides') or []) or 'the defaults'} → {values}{mark}")
    check = record.get("check")
    if check:
        lines.append(f"check: {check.get('text')}")
    lines.append(f"page: {Path(record['folder']) / search_page.PAGE_NAME}")
    return lines
