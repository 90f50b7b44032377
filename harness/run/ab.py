"""``python -m harness.ab``: two arms compared on one machine in randomized, interleaved blocks.

    python -m harness.ab --a "backend.n_threads=2" --b "backend.n_threads=1" -- backend=llamacpp workload=synthetic
    python -m harness.ab --aa -- backend=llamacpp workload=synthetic      # A/A: measure the noise floor
    python -m harness.ab --b-python ../head/.venv/bin/python --b-cwd ../head -- backend=vllm   # base vs head
    python -m harness.ab --keep-loaded --a "workload.concurrency=4" --b "workload.concurrency=8" -- backend=vllm

Each block runs arm A once and arm B once, in random order (seeded), each run a fresh process
of the harness (``python -m harness``) with a fresh engine: the run is the unit. An arm is a set
of overrides, and optionally another interpreter (another venv: another engine build) and
another checkout (``--b-cwd``: the head commit against the base). After ``--blocks`` blocks,
and every ``--look-every`` blocks after that up to ``--max-blocks``, the blocks are decided
(:mod:`harness.gate.paired`): **regression**, **pass**, or **inconclusive**; it stops at the
first clear verdict and adds blocks while there is none. At the cap an inconclusive decision
warns and never fails.

``--keep-loaded`` (when the user asks): one engine per arm, loaded at the arm's first run and
kept for all its runs (``python -m harness.held``, :mod:`harness.run.held`), with the engine's
prefix cache emptied between runs where it allows. Both arms' engines are loaded at once, so it
fits only where the machine holds two; and it measures a narrower noise (no load-to-load
variance): an A/A with it stores its noise floor apart (``<config>.held.json``), used only by
experiments that keep their engines loaded too.

A run that fails or is tainted (the machine was busy or throttled) is rerun once in a new
block; what is left out is named. ``--aa`` runs arm A as both arms and stores the noise floor of
the configuration on this machine under ``--noise-dir``, which later decisions (here, in
``harness.compare`` and in ``scripts/ci/gate.py``) use to set their margin.

Written to ``--out``: ``runs/`` (every run folder), ``ab.json`` (the plan, every run with its
exit code and wall time, every look with its decisions; rewritten after each run, so an
interrupted experiment keeps what it measured), ``ab.md`` (the decision as markdown), and
``compare.html`` (the runs side by side, with the decision). Exit codes: 0 pass or
inconclusive (and an A/A that completed), 1 regression, 2 bad input, 3 the runs failed, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

from core.parent import die_with
from harness.gate import noise, paired, verdicts
from harness.gate.figures import Figure, floor_figures, parse_figure
from harness.history.store import add_decision, add_run
from harness.reports.compare.comparison import CompareOptions
from harness.reports.compare.outputs import compare_runs
from harness.reports.compare.runs import CompareError
from harness.reports.gate_text import decision_lines, decision_table_markdown
from harness.run.held import HeldEngine, Interrupted, raise_interrupted, stop_as_ctrl_c

EXIT_REGRESSION, EXIT_BAD_INPUT, EXIT_RUNS_FAILED, EXIT_INTERRUPTED = 1, 2, 3, 130
DEFAULT_FIGURES = "ttft_s.p50,tpot_s.p50,output_tokens_per_s"
REPO = Path(__file__).resolve().parents[2]
STOP_GRACE_S = 30.0


@dataclass
class Arm:
    name: str
    overrides: list[str]
    python: str
    cwd: str

    def command(self, common: Sequence[str], run_dir: Path) -> list[str]:
        return [self.python, "-m", "harness", *common, *self.overrides, f"hydra.run.dir={run_dir}", "progress=false"]

    def held_command(self, common: Sequence[str]) -> list[str]:
        return [self.python, "-m", "harness.held", *common, *self.overrides, "progress=false"]


@dataclass
class RunRecord:
    block: int
    arm: str
    run_dir: str
    exit_code: Optional[int]
    wall_s: float


@dataclass
class Experiment:
    """ab.json."""

    arms: dict[str, dict[str, Any]]
    common: list[str]
    aa: bool
    seed: int
    figures: list[str]
    threshold: float
    blocks: int
    max_blocks: int
    look_every: int
    started_at: str = field(default_factory=lambda: datetime.now().isoformat(timespec="seconds"))
    status: str = "running"
    runs: list[RunRecord] = field(default_factory=list)
    orders: list[list[str]] = field(default_factory=list)
    looks: list[dict[str, Any]] = field(default_factory=list)
    verdict: Optional[str] = None
    wall_s: float = 0.0
    noise_floor: Optional[str] = None
    keep_loaded: bool = False  # one engine per arm, kept loaded for all its runs
    engine_starts: dict[str, int] = field(default_factory=dict)  # --keep-loaded: the held processes started per arm

    @property
    def engine(self) -> str:
        """The runs' kind, under which a noise floor is stored and looked up."""
        return "held" if self.keep_loaded else "fresh"

    def save(self, out: Path) -> None:
        tmp = out / "ab.json.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        os.replace(tmp, out / "ab.json")


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m harness.ab",
        description=__doc__.splitlines()[0],
        epilog="Overrides after -- are common to both arms.",
    )
    p.add_argument("common", nargs="*", help="Hydra overrides for both arms (after --)")
    p.add_argument("--a", default="", help="arm A's overrides, one quoted string (the baseline)")
    p.add_argument("--b", default="", help="arm B's overrides (the candidate)")
    p.add_argument("--a-python", default=sys.executable, help="arm A's interpreter (another venv)")
    p.add_argument("--b-python", default=None, help="arm B's interpreter (default: arm A's)")
    p.add_argument("--a-cwd", default=str(REPO), help="arm A's checkout of the harness")
    p.add_argument("--b-cwd", default=None, help="arm B's checkout (default: arm A's)")
    p.add_argument("--aa", action="store_true", help="A/A: arm A as both arms; store the noise floor")
    p.add_argument(
        "--keep-loaded",
        action="store_true",
        help="one engine per arm, loaded once and kept for all its runs (both loaded at once)",
    )
    p.add_argument("--blocks", type=int, default=5, help="blocks before the first look (default 5)")
    p.add_argument("--max-blocks", type=int, default=10, help="the cap (default 10; A/A runs --blocks blocks)")
    p.add_argument("--look-every", type=int, default=None, help="blocks between looks (default: --blocks)")
    p.add_argument("--figures", default=DEFAULT_FIGURES, help=f"figures decided (default {DEFAULT_FIGURES})")
    p.add_argument(
        "--threshold",
        type=float,
        default=5.0,
        metavar="PCT",
        help="the smallest slowdown that counts (%%); raised to 3 × the noise floor when one is stored",
    )
    p.add_argument("--noise-dir", type=Path, default=Path("results/noise"), help="where noise floors are kept")
    p.add_argument(
        "--precision",
        type=float,
        default=2.0,
        metavar="PCT",
        help="A/A: the half-width of the interval to plan runs for (%%, default 2)",
    )
    p.add_argument("--seed", type=int, default=None, help="the order of the arms in each block (default: random)")
    p.add_argument("--timeout-s", type=float, default=3600.0, help="one run's time limit")
    p.add_argument("--out", type=Path, default=None, help="default results/ab-<date>-<time>")
    p.add_argument(
        "--markdown", default=None, metavar="FILE", help="append the decision as markdown (e.g. $GITHUB_STEP_SUMMARY)"
    )
    p.add_argument(
        "--history",
        type=Path,
        default=None,
        metavar="DIR",
        help="add every run and the decision to this history (python -m harness.history)",
    )
    return p.parse_args(argv)


def check_args(a: argparse.Namespace) -> list[Figure]:
    if a.blocks < 2:
        raise CompareError(f"--blocks must be >= 2: a paired interval needs two blocks (got {a.blocks})")
    if a.max_blocks < a.blocks and not a.aa:
        raise CompareError(f"--max-blocks ({a.max_blocks}) must be >= --blocks ({a.blocks})")
    if a.look_every is not None and a.look_every < 1:
        raise CompareError("--look-every must be >= 1")
    if not a.threshold >= 0:  # written so that NaN fails too
        raise CompareError(f"--threshold must be a percentage >= 0 (got {a.threshold})")
    if not a.precision > 0:
        raise CompareError(f"--precision must be > 0 (got {a.precision})")
    if not a.timeout_s > 0:
        raise CompareError(f"--timeout-s must be > 0 seconds (got {a.timeout_s})")
    if a.aa and (a.b or a.b_python or a.b_cwd):
        raise CompareError("--aa runs arm A as both arms: drop --b, --b-python and --b-cwd")
    if not a.aa and not (a.b or a.b_python or a.b_cwd or a.a):
        raise CompareError("the arms are the same: give --b (or --b-python / --b-cwd), or --aa for an A/A experiment")
    if any(
        o.startswith(("hydra.run.dir", "repeat=", "-m", "--multirun"))
        for o in [*a.common, *shlex.split(a.a), *shlex.split(a.b)]
    ):
        raise CompareError("hydra.run.dir, repeat= and -m are set by harness.ab: remove them from the overrides")
    for python in (a.a_python, a.b_python):
        if python and not os.access(python, os.X_OK):
            raise CompareError(f"not an executable interpreter: {python}")
    for cwd in (a.a_cwd, a.b_cwd):
        if cwd and not (Path(cwd) / "harness").is_dir():
            raise CompareError(f"not a checkout of the harness (no harness/ folder): {cwd}")
        if cwd and a.keep_loaded and not (Path(cwd) / "harness" / "held.py").is_file():
            raise CompareError(f"{cwd} is a checkout older than --keep-loaded (no harness/held.py): drop --keep-loaded")
    if a.keep_loaded:
        ports = [_last_value("backend.port", [*a.common, *shlex.split(arm)]) for arm in (a.a, a.a if a.aa else a.b)]
        if ports[0] is not None and ports[0] == ports[1]:
            raise CompareError(
                "--keep-loaded keeps both arms' servers up at once: they cannot share "
                f"backend.port={ports[0]} (drop it, or give each arm its own in --a and --b)"
            )
    try:
        return [parse_figure(f.strip()) for f in a.figures.split(",") if f.strip()]
    except ValueError as exc:
        raise CompareError(str(exc)) from None


def _last_value(key: str, overrides: Sequence[str]) -> Optional[str]:
    values = [o.split("=", 1)[1] for o in overrides if o.lstrip("+").startswith(f"{key}=")]
    return values[-1] if values else None


def look_points(blocks: int, max_blocks: int, every: int) -> list[int]:
    points = list(range(blocks, max_blocks + 1, every))
    return points if points[-1] == max_blocks else points + [max_blocks]


class RunProcess:
    """One run of the harness as a child process; stopped as Ctrl-C would stop it."""

    def __init__(self, command: list[str], cwd: str, log: Path, block: int = 0, arm: str = "", run_dir: str = ""):
        self.block, self.arm, self.run_dir, self.start = block, arm, run_dir, time.perf_counter()
        self.log = open(log, "w")
        # a SIGKILL of harness.ab (no clean-up of its own) ends the run as SIGTERM does: interrupted, kept
        self.proc = subprocess.Popen(
            command, cwd=cwd, stdout=self.log, stderr=subprocess.STDOUT, preexec_fn=die_with(os.getpid())
        )

    def wait(self, timeout_s: float) -> Optional[int]:
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.stop()
            return None
        finally:
            self.log.close()

    def stop(self, signalled: bool = False) -> None:
        """Stop the run as Ctrl-C would (the harness keeps what it measured); ``signalled``: the
        terminal's Ctrl-C reached the run too, so give it time to end on its own first."""
        stop_as_ctrl_c(self.proc, STOP_GRACE_S, signalled)

    def record(self) -> RunRecord:
        return RunRecord(self.block, self.arm, self.run_dir, self.proc.poll(), time.perf_counter() - self.start)


def run_one(
    block: int,
    arm: Arm,
    common: Sequence[str],
    run_dir: Path,
    timeout_s: float,
    current: list[RunProcess],
    held: Optional[HeldEngine] = None,
) -> RunRecord:
    """One run: a fresh ``python -m harness`` process, or a run asked of the arm's held engine."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    log = run_dir.parent / f"{run_dir.name}.log"
    start = time.perf_counter()
    if held is not None:
        code = held.run(run_dir, log, timeout_s)
        return RunRecord(block, arm.name, str(run_dir), code, time.perf_counter() - start)
    proc = RunProcess(arm.command(common, run_dir), arm.cwd, log, block, arm.name, str(run_dir))
    current[:] = [proc]
    code = proc.wait(timeout_s)
    current.clear()
    return RunRecord(block, arm.name, str(run_dir), code, time.perf_counter() - start)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    try:
        figures = check_args(args)
    except CompareError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    out = args.out or Path("results") / f"ab-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    if (out / "ab.json").exists():
        print(f"error: {out} already holds an experiment (ab.json): choose another --out", file=sys.stderr)
        return EXIT_BAD_INPUT
    out.mkdir(parents=True, exist_ok=True)
    a = Arm("A", shlex.split(args.a), args.a_python, args.a_cwd)
    # A/A: arm B is arm A again (check_args refused --b* with --aa, so they default to A's)
    b = Arm("B", shlex.split(args.a if args.aa else args.b), args.b_python or args.a_python, args.b_cwd or args.a_cwd)
    arms = {"A": a, "B": b}
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    every = args.look_every or args.blocks
    max_blocks = args.blocks if args.aa else args.max_blocks
    exp = Experiment(
        {k: asdict(v) for k, v in arms.items()},
        list(args.common),
        args.aa,
        seed,
        [f.name for f in figures],
        args.threshold,
        args.blocks,
        max_blocks,
        every,
        keep_loaded=args.keep_loaded,
    )
    current: list[RunProcess] = []
    held: dict[str, HeldEngine] = (
        {
            name: HeldEngine(arm.held_command(exp.common), arm.cwd, out / "runs" / f"held-{name}.log", STOP_GRACE_S)
            for name, arm in arms.items()
        }
        if args.keep_loaded
        else {}
    )
    previous = {s: signal.signal(s, raise_interrupted) for s in (signal.SIGTERM, signal.SIGHUP)}
    start = time.perf_counter()
    try:
        code = run_blocks(exp, arms, figures, args, out, current, random.Random(seed), start, held)
    except KeyboardInterrupt as exc:  # Ctrl-C, or Interrupted: SIGTERM or SIGHUP to this process alone
        procs: list[RunProcess | HeldEngine] = [*current, *held.values()]
        for proc in procs:
            proc.stop(signalled=not isinstance(exc, Interrupted))
        exp.runs += [proc.record() for proc in current]  # the interrupted run, with what it kept
        exp.status = "interrupted"
        print(f"\ninterrupted: the runs so far and ab.json are in {out}", file=sys.stderr)
        code = EXIT_INTERRUPTED
    finally:
        for engine in held.values():
            engine.close()  # its engine is stopped: at the end, or after a refusal, before the page is built
        for s, handler in previous.items():
            signal.signal(s, handler)
        exp.engine_starts = {name: engine.starts for name, engine in held.items()}
        exp.wall_s = time.perf_counter() - start
        exp.save(out)
    return code


def run_blocks(
    exp: Experiment,
    arms: dict[str, Arm],
    figures: list[Figure],
    args: argparse.Namespace,
    out: Path,
    current: list[RunProcess],
    rng: random.Random,
    start: float,
    held: Optional[dict[str, HeldEngine]] = None,
) -> int:
    looks = look_points(exp.blocks, exp.max_blocks, exp.look_every)
    blocks: list[paired.BlockRuns] = []
    reruns_left = max(1, exp.max_blocks // 5)
    evaluation: Optional[paired.Evaluation] = None
    index = 0
    while len(paired.usable(blocks)[0]) < exp.max_blocks:
        index += 1
        order = ["A", "B"]
        rng.shuffle(order)
        exp.orders.append(order)
        dirs: dict[str, Optional[Path]] = {}
        for name in order:
            run_dir = out / "runs" / f"block{index:03d}-{name}"
            record = run_one(index, arms[name], exp.common, run_dir, args.timeout_s, current, (held or {}).get(name))
            exp.runs.append(record)
            exp.wall_s = time.perf_counter() - start
            dirs[name] = run_dir if (run_dir / "summary.json").is_file() else None
            exp.save(out)
            print(f"block {index} {name}: exit {record.exit_code} in {record.wall_s:.1f} s", flush=True)
            if record.exit_code == EXIT_BAD_INPUT:
                exp.status = "failed"
                print(
                    f"error: arm {name} was refused: {last_error_line(run_dir)} (log: {run_dir}.log)", file=sys.stderr
                )
                return EXIT_BAD_INPUT
        block = paired.load_block(index, dirs["A"], dirs["B"])
        blocks.append(block)
        problem = block.problem()
        if problem:
            print(f"left out: {problem}", file=sys.stderr, flush=True)
            failed = [n for n in order if dirs[n] is None]
            if index == 1 and len(failed) == 2:  # neither arm runs at all: more blocks will not help
                exp.status = "failed"
                reason = last_error_line(out / "runs" / f"block001-{failed[0]}")
                print(f"error: both arms failed their first run: {reason} (logs in {out / 'runs'})", file=sys.stderr)
                return EXIT_RUNS_FAILED
            if reruns_left == 0 or index >= 2 * exp.max_blocks:
                break
            reruns_left -= 1
            continue
        used = len(paired.usable(blocks)[0])
        if used in looks:
            evaluation = paired.evaluate(
                blocks, figures, exp.threshold / 100, looks=len(looks), noise_dir=args.noise_dir, engine=exp.engine
            )
            exp.looks.append(look_record(evaluation, used))
            exp.save(out)
            if not exp.aa and evaluation.verdict != verdicts.INCONCLUSIVE:
                break
    if evaluation is None:
        exp.status = "failed"
        print(
            f"error: too few usable blocks to decide ({len(paired.usable(blocks)[0])}); see the logs in {out / 'runs'}",
            file=sys.stderr,
        )
        return EXIT_RUNS_FAILED
    exp.status, exp.verdict = "complete", evaluation.verdict
    exp.engine_starts = {name: engine.starts for name, engine in (held or {}).items()}
    lines = summary_lines(exp, evaluation)
    if exp.aa:
        lines += record_noise_floor(exp, blocks, figures, args, out)
    print("\n".join(lines), flush=True)
    markdown = ab_markdown(exp, evaluation)
    (out / "ab.md").write_text(markdown)
    if args.markdown:
        with open(args.markdown, "a") as f:
            f.write(markdown)
    write_compare(blocks, out, figures, evaluation)
    if args.history:
        record_history(args.history, exp, evaluation)
    if exp.aa:
        return 0  # an A/A measures the noise: a "regression" between identical arms is a false alarm, shown above
    return EXIT_REGRESSION if evaluation.verdict == verdicts.REGRESSION else 0


def last_error_line(run_dir: Path) -> str:
    """The harness's own one-line reason, from the run's log."""
    try:
        lines = (run_dir.parent / f"{run_dir.name}.log").read_text(errors="replace").splitlines()
    except OSError:
        return "no log"
    errors = [line for line in lines if line.startswith("error:")]
    return (errors or lines or ["empty log"])[-1].removeprefix("error: ")


def look_record(evaluation: paired.Evaluation, blocks: int) -> dict[str, Any]:
    return {
        "blocks": blocks,
        "verdict": evaluation.verdict,
        "left_out": evaluation.left_out,
        "decisions": [
            {
                "figure": d.figure.name,
                "verdict": d.verdict,
                "change": d.change,
                "ci_low": d.interval.low - 1,
                "ci_high": d.interval.high - 1,
                "lower_bound": d.interval.lower_bound - 1,
                "upper_bound": d.interval.upper_bound - 1,
                "alpha": d.interval.alpha,
                "margin": d.margin,
                "margin_source": d.margin_source,
                "sd_log": d.interval.sd_log,
                "reason": d.reason,
            }
            for d in evaluation.decisions
        ],
    }


def summary_lines(exp: Experiment, evaluation: paired.Evaluation) -> list[str]:
    head = f"{'A/A' if exp.aa else 'A/B'}: {evaluation.verdict.upper()} after {evaluation.blocks_used} blocks"
    held = f"; engines kept loaded, started {sum(exp.engine_starts.values())}×" if exp.keep_loaded else ""
    lines = ["", head + f" ({len(exp.runs)} runs in {exp.wall_s:.0f} s{held})", *decision_lines(evaluation.decisions)]
    lines += [f"left out: {p}" for p in evaluation.left_out]
    if evaluation.verdict == verdicts.INCONCLUSIVE and not exp.aa:
        lines.append(
            f"WARNING: inconclusive at the cap of {exp.max_blocks} blocks: not failing; "
            "raise --max-blocks or reduce the noise (see --aa)"
        )
    return lines


def record_noise_floor(
    exp: Experiment, blocks: list[paired.BlockRuns], figures: list[Figure], args: argparse.Namespace, out: Path
) -> list[str]:
    walls = [r.wall_s for r in exp.runs if r.exit_code == 0]
    # every figure compare and the gates judge, not only those this experiment decided
    floor = paired.measure_noise_floor(blocks, floor_figures(figures), walls, source=str(out), engine=exp.engine)
    path = noise.save(args.noise_dir, floor)
    exp.noise_floor = str(path)
    kind = ", engines kept loaded" if exp.keep_loaded else ""
    lines = [
        "",
        f"noise floor ({floor.hardware}, config {floor.config_sha256[:12]}{kind}): {path}",
        f"  a run costs {floor.cost_run_s:.1f} s before its requests, a request {floor.cost_request_s:.3f} s",
    ]
    decided = {f.name for f in figures}
    others = [name for name in floor.figures if name not in decided]
    for name, fig in floor.figures.items():
        if name not in decided:
            continue
        p = noise.plan(name, fig, args.precision / 100, floor.cost_run_s, floor.cost_request_s)
        apart = f" (runs apart: {fig.sd_run_apart * 100:.2f}%)" if fig.sd_run_apart is not None else ""
        lines.append(
            f"  {name}: run-to-run sd {fig.sd_run * 100:.2f}%{apart}; ±{args.precision:g}% needs {p.blocks} "
            f"blocks of {p.requests_per_run} requests per run; gate margin at least {3 * fig.sd_run * 100:.1f}%"
        )
    if others:
        lines.append(f"  and the noise of {len(others)} more figures compare and the gates judge: {', '.join(others)}")
    return lines


def ab_markdown(exp: Experiment, evaluation: paired.Evaluation) -> str:
    kind = "A/A (noise floor)" if exp.aa else "A/B"
    lines = [
        f"### {kind}: **{evaluation.verdict.upper()}** after {evaluation.blocks_used} interleaved blocks",
        "",
        f"Arm A: `{' '.join(exp.arms['A']['overrides']) or '(common only)'}`; "
        f"arm B: `{' '.join(exp.arms['B']['overrides']) or '(common only)'}`; "
        f"common: `{' '.join(exp.common)}`; {len(exp.runs)} runs"
        f"{' on one engine per arm, kept loaded' if exp.keep_loaded else ''}.",
        "",
        *decision_table_markdown(evaluation.decisions),
    ]
    lines += [f"- left out: {p}" for p in evaluation.left_out]
    return "\n".join(lines) + "\n\n"


def record_history(root: Path, exp: Experiment, evaluation: paired.Evaluation) -> None:
    """Every finished run, and one row per figure's decision, into the history."""
    for record in exp.runs:
        if (Path(record.run_dir) / "summary.json").is_file():
            add_run(root, Path(record.run_dir))
    for d in evaluation.decisions:
        i = d.interval
        add_decision(
            root,
            {
                "started_at": exp.started_at,
                "kind": "A/A" if exp.aa else "A/B",
                "figure": d.figure.name,
                "arm_a": " ".join(exp.arms["A"]["overrides"]),
                "arm_b": " ".join(exp.arms["B"]["overrides"]),
                "common": " ".join(exp.common),
                "verdict": d.verdict,
                "experiment_verdict": evaluation.verdict,
                "ratio": i.ratio,
                "ci_low": i.low,
                "ci_high": i.high,
                "alpha": i.alpha,
                "margin": d.margin,
                "margin_source": d.margin_source,
                "blocks": evaluation.blocks_used,
                "runs": len(exp.runs),
                "wall_s": exp.wall_s,
                "seed": exp.seed,
            },
        )
    print(f"history: {len(exp.runs)} runs and {len(evaluation.decisions)} decisions added to {root}", flush=True)


def write_compare(
    blocks: list[paired.BlockRuns], out: Path, figures: list[Figure], evaluation: paired.Evaluation
) -> None:
    good, _ = paired.usable(blocks)
    a_dirs = [block.runs()[0].run_dir for block in good]
    b_dirs = [block.runs()[1].run_dir for block in good]
    try:
        options = CompareOptions(metric=figures[0].metric, baseline_count=len(a_dirs), decisions=evaluation.decisions)
        compare_runs(a_dirs + b_dirs, out, options)
    except CompareError as exc:
        print(f"note: no compare.html: {exc}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
