"""``python -m harness``: the Hydra CLI. One run, a multirun sweep (``-m``), or an SLO search.

- a plain run is one load point on an engine session of its own (``repeat=N``: N runs);
- ``-m`` runs each point through :func:`harness.run.sweep.run_sweep_point`, which shares one
  loaded engine between consecutive points of the same engine settings;
- ``slo_search.enabled=true`` probes loads against one engine (harness/run/slo_search.py);
- ``search.enabled=true`` searches engine settings and load with Optuna (harness/run/search.py).

The packages below are imported where a command needs them, not at the top: ``--help``, a
misspelled config group or a bad value answer before pandas, torch and the engines load.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Any, NoReturn, Optional

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig

from core.errors import HarnessError
from core.interrupts import interrupts_kept
from core.parent import take_back_ctrl_c
from harness.preflight import CONF_DIR, GROUPS, check_group_choices, check_overrides, group_choices

EXIT_POINT_FAILED = 1
_exit_code = 0  # set by the sweep callback: non-zero when a point of the sweep failed
_job_started = ""  # "run" or "sweep" once Hydra has made the folder and called the job: what Ctrl-C says


def register_everything() -> None:
    """Structured configs into ConfigStore, and every backend and workload module imported."""
    from backends.registry import backend_registry
    from harness.config import register_configs
    from workloads import workload_registry

    register_configs()
    backend_registry.discover()
    workload_registry.discover()
    register_help()


def register_help() -> None:
    """``python -m harness --help`` (conf/config.yaml: ``override hydra/help: harness``): the
    choices a user types, from conf/ (Hydra's own list also names every ``*_schema`` node of
    ConfigStore), then the whole config; ``--hydra-help`` keeps Hydra's flags."""
    from hydra.core.config_store import ConfigStore

    choices = "\n".join(f"  {group}: {', '.join(group_choices(group))}" for group in GROUPS)
    template = HELP.replace("CHOICES", choices)
    ConfigStore.instance().store(
        group="hydra/help",
        name="harness",
        provider="harness",
        node={"app_name": "harness", "header": "", "footer": "", "template": template},
    )


# string.Template text: Hydra puts the composed config in for $CONFIG ($$ is a dollar sign)
HELP = """usage: python -m harness [group=choice …] [key=value …]    one run
       python -m harness -m [key=a,b …]                    a sweep: every combination, one engine load where it can
       python -m harness search.enabled=true …             search engine settings and load (Optuna)
       python -m harness --cfg job [overrides …]           print the composed config and stop

Config groups (group=choice):
CHOICES
  (preset: a sweep's overrides, with -m: python -m harness -m preset=nightly backend=vllm)

Examples:
  python -m harness backend=vllm workload=chat
  python -m harness backend=llamacpp backend.mode=server workload=synthetic workload.rate=4
  python -m harness -m backend=vllm workload.concurrency=1,4,16

Other commands: python -m harness.compare RUN RUN …, harness.report RUN, harness.ab, harness.agree,
harness.history, harness.reference_server (each answers --help). The README and docs/ say more.

The config, with these overrides (any key: key=value):

$CONFIG
Hydra's own flags: --hydra-help"""


def compose_config(*overrides: str):
    """A validated RunConfig from Hydra overrides, composed as ``python -m harness`` does
    (for scripts and tests that call :func:`harness.run.point.run_benchmark` directly)."""
    from hydra import compose, initialize_config_dir

    from harness.config import to_run_config

    register_everything()
    check_group_choices(list(overrides))
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("config", overrides=list(overrides))
    return to_run_config(cfg)


def _discard_if_empty(run_dir: Path) -> None:
    """Nothing was measured: leave no folder behind, unless it holds an engine's server log."""
    from harness.results.schema import CLAIM

    only_hydra = {".hydra", "harness.log"}
    try:
        if (run_dir / CLAIM).read_text().strip() == str(os.getpid()):
            only_hydra.add(CLAIM)  # claimed by this run: nobody else's folder
    except OSError:
        pass
    if run_dir.is_dir() and all(p.name in only_hydra for p in run_dir.iterdir()):
        shutil.rmtree(run_dir, ignore_errors=True)


def fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


@hydra.main(version_base=None, config_path=str(CONF_DIR), config_name="config")
def hydra_main(cfg: DictConfig) -> None:
    global _job_started
    hc = HydraConfig.get()
    _job_started = "sweep" if hc.mode == RunMode.MULTIRUN else "run"
    with interrupts_kept():  # a Ctrl-C that a library turned into another error still ends as one
        if hc.mode == RunMode.MULTIRUN:
            if cfg.get("search", {}).get("enabled"):
                fail("search.enabled=true runs as one command, not as a sweep's point: drop -m")
            _sweep_point(cfg, hc)
        else:
            _single_run(cfg, Path(hc.runtime.output_dir), list(hc.overrides.task))


def _single_run(cfg: DictConfig, run_dir: Path, overrides: list[str]) -> None:
    try:
        with interrupts_kept():
            from harness.config import to_run_config
            from harness.next_run import next_steps
            from harness.reports.console import format_summary, format_sweep, pages_lines
            from harness.results.schema import RunSummary
            from harness.results.store import load_summary
            from harness.results.sweep_file import read_sweep
            from harness.run.sweep import run_sweep_point

            run_cfg = to_run_config(cfg)
            if run_cfg.search.enabled:
                from harness.run.search import run_search, summary_lines

                record = run_search(run_cfg, run_dir, overrides)
                print("\n".join(summary_lines(record)))
                print(f"results: {run_dir}", flush=True)
                return
            if run_cfg.slo_search.enabled:
                from harness.run.slo_search import run_slo_search

                run_slo_search(run_cfg, run_dir)
                print(format_sweep(read_sweep(run_dir)))
                print("\n".join([*pages_lines(run_dir), f"results: {run_dir}"]), flush=True)
                return
            entry = run_sweep_point(run_cfg, run_dir, run_dir, 0, overrides, single=True, keep_engine=False)
    except HarnessError as exc:
        _discard_if_empty(run_dir)
        fail(str(exc))
    except KeyboardInterrupt:
        if _measured(run_dir):
            print(f"\ninterrupted: what was measured is in {run_dir}", file=sys.stderr)
            if (run_dir / "search.db").is_file():
                print(f"the search goes on with the same command and hydra.run.dir={run_dir}", file=sys.stderr)
        else:
            _discard_if_empty(run_dir)
            kept = f" (the engine's log is kept in {run_dir})" if run_dir.is_dir() else ""
            print(f"\ninterrupted before the run started: nothing was measured{kept}", file=sys.stderr)
        sys.exit(130)
    has_gguf = False
    for d in entry["run_dirs"]:
        summary = RunSummary.from_dict(load_summary(Path(d)))
        print(format_summary(summary))
        has_gguf = has_gguf or bool(summary.model.get("gguf_file"))
        if summary.requests.get("failed"):
            logging.getLogger("harness").warning("%d requests failed", summary.requests["failed"])
    if run_cfg.repeat > 1:
        print(format_sweep(read_sweep(run_dir)))
    if entry["status"] == "skipped":
        print(f"resume: this config already finished in {', '.join(entry['run_dirs'])}")
    print("\n".join([*next_steps(run_cfg, run_dir, overrides, has_gguf), f"results: {run_dir}"]), flush=True)


def _measured(run_dir: Path) -> bool:
    """Whether the run (a repeat, a probe) wrote a summary or a request."""
    return any(
        p.name == "summary.json" or p.stat().st_size > 0
        for pattern in ("**/summary.json", "**/requests.jsonl")
        for p in run_dir.glob(pattern)
    )


def _sweep_point(cfg: DictConfig, hc: Any) -> None:
    """One point of a multirun: a failure is recorded and printed in one line, the sweep goes on."""
    from harness.config import to_run_config
    from harness.reports.console import format_summary
    from harness.results.schema import RunSummary
    from harness.results.store import is_run_dir, load_summary
    from harness.results.sweep_file import new_entry, record_point
    from harness.run.sweep import run_sweep_point

    run_dir, sweep_dir = Path(hc.runtime.output_dir), Path(hc.sweep.dir)
    index, overrides = int(hc.job.num), list(hc.overrides.task)
    try:
        run_cfg = to_run_config(cfg)
    except HarnessError as exc:  # a value invalid at this point only
        print(f"error: point {index} ({' '.join(overrides)}) failed: {exc}", file=sys.stderr)
        record_point(sweep_dir, new_entry(index, overrides, run_dir, error=str(exc)))
        _discard_if_empty(run_dir)
        return
    # Hydra's basic launcher runs every point in this process, so the engine can stay loaded
    # between points; any other launcher (submitit, Ray) runs points in processes of their
    # own, which must not keep an engine (and its GPU memory) once their point is done.
    entry = run_sweep_point(run_cfg, run_dir, sweep_dir, index, overrides, keep_engine=_basic_launcher(hc.launcher))
    for d in entry["run_dirs"]:
        if is_run_dir(Path(d)):
            print(format_summary(RunSummary.from_dict(load_summary(Path(d)))))
    print(
        f"point {index} ({' '.join(overrides) or 'no overrides'}): {entry['status']} · results: {run_dir}", flush=True
    )


def _basic_launcher(launcher: Any) -> bool:
    """Hydra's own launcher, which runs every point in this process (others use a process each)."""
    return str(launcher.get("_target_", "")).endswith("BasicLauncher")


class SweepCallback(Callback):
    """Hydra callback (conf/config.yaml → hydra.callbacks): a sweep's start and end, in the
    launching process whatever the launcher."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from harness.results.sweep_file import locked_sweep

        with locked_sweep(Path(config.hydra.sweep.dir)) as data:
            data.setdefault("kind", "multirun")
            data["command"] = list(sys.argv[1:])

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        global _exit_code
        from harness.reports.console import format_sweep, pages_lines
        from harness.results.sweep_file import read_sweep
        from harness.run.sweep import SESSIONS, refresh_compare

        SESSIONS.close()
        sweep_dir = Path(config.hydra.sweep.dir)
        try:
            sweep = read_sweep(sweep_dir)
        except (OSError, ValueError):
            return
        if config.get("sweep", {}).get("compare_html", True) and not _basic_launcher(config.hydra.launcher):
            refresh_compare(sweep_dir)  # points run elsewhere each refreshed it; once more, complete
        print(format_sweep(sweep))
        failed = [p for p in sweep.get("points", []) if p.get("status") not in ("complete", "saturated", "skipped")]
        if failed:
            print(f"{len(failed)} of {len(sweep['points'])} points failed: see sweep.json", file=sys.stderr)
            _exit_code = EXIT_POINT_FAILED
        print("\n".join([*pages_lines(sweep_dir), f"sweep: {sweep_dir / 'sweep.json'}"]), flush=True)


def terminate_as_interrupt(signum: int, frame: Optional[Any]) -> None:
    """SIGTERM and SIGHUP (CI cancellation, SLURM, `timeout`, a closed terminal) end a run the
    way Ctrl-C does — re-raised as SIGINT, so the event loop cancels the requests in flight
    (recorded as cancelled), the results are written and the engine's server is stopped."""
    signal.raise_signal(signal.SIGINT)


def exit_now(code: object) -> NoReturn:
    """End ``python -m harness`` without the interpreter's teardown.

    With torch and an engine imported, freeing every module one by one takes about 2 s and
    writes nothing; every result file is closed and every engine stopped by now. The atexit
    handlers still run (Ray's shutdown is one of them), then the logs and streams are flushed.
    ``code`` is a SystemExit's: None, an exit status, or a message (printed, status 1)."""
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code or 0)


def main() -> None:
    try:
        register_everything()
        check_group_choices(sys.argv[1:])
        check_overrides(sys.argv[1:])
    except HarnessError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        print("\ninterrupted before the run started: nothing was measured", file=sys.stderr)
        sys.exit(130)
    # SIGTERM and SIGHUP end a run along SIGINT's path, which a background job of a script starts
    # with ignored: harness/__main__.py took it back before the imports.
    take_back_ctrl_c()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is not signal.SIG_IGN:  # ignored on purpose: `nohup` ignores SIGHUP
            signal.signal(sig, terminate_as_interrupt)
    try:
        hydra_main()
    except KeyboardInterrupt:
        from harness.run.sweep import SESSIONS

        SESSIONS.close()
        if _job_started == "sweep":
            print("\ninterrupted: what was measured is kept (sweep.json lists the points so far)", file=sys.stderr)
        else:  # a run's own interrupt is answered in _single_run
            print("\ninterrupted before the run started: nothing was measured", file=sys.stderr)
        sys.exit(130)
    finally:
        from harness.run.sweep import SESSIONS

        SESSIONS.close()
    sys.exit(_exit_code)
