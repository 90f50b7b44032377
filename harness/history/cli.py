"""``python -m harness.history``: add runs to a history, list them, draw trend.html, check for alerts.

    python -m harness.history add ROOT RUN_OR_SWEEP…     # run folders, sweep folders, folders of runs
    python -m harness.history list ROOT [--engine E] [--point P] [--since YYYY-MM-DD] [--decisions]
    python -m harness.history trend ROOT --out trend.html [--metric ttft_s.p50 …]
    python -m harness.history check ROOT [--markdown FILE] [--metric …] [--margin 0.05]
    python -m harness.history gate ROOT SWEEP [--noise-dir DIR] [--record] [--markdown FILE] [--metric …]

``gate`` judges a new sweep (not yet added) against the nightlies before it, point by point
(harness/history/nightly.py has the rule); ``--record`` keeps its verdicts in the history, so that
trend.html marks a flagged nightly and the next one confirms or clears it.

Exit codes: 0 fine; 1 ``check`` found an alert (harness/history/alerts.py has the rule), or
``gate`` a regression; 2 bad input, said in one ``error:`` line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import NoReturn, Optional

import pandas as pd

from core.errors import HarnessError
from harness.history import nightly
from harness.history.alerts import CONSECUTIVE, MARGIN, MAX_AGE, AlertRule
from harness.history.analysis import DEFAULT_FIGURES, SeriesReport, alert_cells, analyse, parse_figure
from harness.history.nightly import FDR
from harness.history.query import EmptyHistory, RunFilter, decisions, runs
from harness.history.store import add_decision, add_runs, rows_in
from harness.history.trend import write_trend

EXIT_ALERT, EXIT_BAD_INPUT = 1, 2

LIST_COLUMNS = (
    "date",
    "engine",
    "engine_version",
    "point",
    "model",
    "workload",
    "concurrency",
    "rate",
    "git_commit",
    "tainted",
    "ttft_s_p50",
    "tpot_s_p50",
    "output_tokens_per_s",
    "run_id",
)


class OneLineParser(argparse.ArgumentParser):
    """argparse whose complaints are one ``error:`` line (exit 2), as the command's own are."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = OneLineParser(prog="python -m harness.history", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    add = commands.add_parser("add", help="append run folders (or every run of a sweep) to the history")
    add.add_argument("root", type=Path, help="the history's folder (created if missing)")
    add.add_argument(
        "paths", type=Path, nargs="+", metavar="RUN_OR_SWEEP", help="run folders, sweep folders or folders of runs"
    )
    ls = commands.add_parser("list", help="the runs in the history")
    ls.add_argument("root", type=Path, help="the history's folder")
    ls.add_argument("--decisions", action="store_true", help="list the A/B decisions instead")
    for sub in (
        ls,
        trend := commands.add_parser("trend", help="write trend.html"),
        check := commands.add_parser("check", help="exit 1 when a series alerts"),
    ):
        if sub is not ls:
            sub.add_argument("root", type=Path, help="the history's folder")
        sub.add_argument("--engine", default=None, help="only this engine's runs")
        sub.add_argument("--point", default=None, help="only this point (its id, or the id's first characters)")
        sub.add_argument(
            "--since", type=date.fromisoformat, default=None, metavar="YYYY-MM-DD", help="only runs since then"
        )
    for sub in (trend, check):
        sub.add_argument(
            "--metric",
            action="append",
            default=None,
            metavar="FIGURE",
            help=f"a figure to follow, repeatable: metric.stat or a run metric (default: {' '.join(DEFAULT_FIGURES)})",
        )
        sub.add_argument(
            "--margin", type=float, default=MARGIN, help=f"relative margin of a bad run (default {MARGIN})"
        )
        sub.add_argument(
            "--max-age", type=int, default=MAX_AGE, help=f"runs a change point keeps alerting (default {MAX_AGE})"
        )
    trend.add_argument("--out", type=Path, default=Path("trend.html"), help="the page to write (default trend.html)")
    gate = commands.add_parser("gate", help="judge a new sweep against the nightlies before it (exit 1: regression)")
    gate.add_argument("root", type=Path, help="the history's folder (the nightlies before this one)")
    gate.add_argument(
        "current", type=Path, metavar="SWEEP", help="the new nightly: a sweep folder, or run folders' folder"
    )
    gate.add_argument(
        "--metric",
        action="append",
        default=None,
        metavar="FIGURE",
        help=f"a figure to judge, repeatable (default: {' '.join(DEFAULT_FIGURES)})",
    )
    gate.add_argument(
        "--margin", type=float, default=MARGIN, help=f"relative margin of a regression (default {MARGIN})"
    )
    gate.add_argument(
        "--fdr", type=float, default=FDR, help=f"Benjamini-Hochberg level over the points (default {FDR})"
    )
    gate.add_argument("--noise-dir", type=Path, default=None, help="noise floors (python -m harness.ab --aa)")
    gate.add_argument(
        "--allow-other-hardware",
        action="store_true",
        help="judge against a history made on another hardware fingerprint (otherwise: inconclusive)",
    )
    gate.add_argument("--record", action="store_true", help="keep the verdicts in the history (trend.html marks them)")
    gate.add_argument("--markdown", default=None, metavar="FILE", help="append the table as markdown to FILE")
    check.add_argument(
        "--markdown",
        default=None,
        metavar="FILE",
        help="append the alerts as markdown to FILE (e.g. $GITHUB_STEP_SUMMARY); '-': stdout",
    )
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    try:
        if args.root.exists() and not args.root.is_dir():
            raise HarnessError(f"the history's root must be a folder, and {args.root} is a file")
        commands = {"add": run_add, "list": run_list, "trend": run_trend, "check": run_check, "gate": run_gate}
        return commands[args.command](args)
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:  # a path that cannot be read or written: named in the message
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


def run_add(args: argparse.Namespace) -> int:
    for stored in add_runs(args.root, args.paths):
        print(f"{stored.status}: {stored.id} {stored.path}")
    return 0


def run_list(args: argparse.Namespace) -> int:
    if args.decisions:
        print(decisions(args.root).to_string(index=False))
        return 0
    frame = runs(args.root, RunFilter(args.engine, args.point, args.since))
    if frame.empty:
        print("no run matches the filter")
        return 0
    shown = frame[[c for c in LIST_COLUMNS if c in frame.columns]].copy()
    shown["git_commit"] = shown["git_commit"].fillna("").str[:10]
    for column in ("ttft_s_p50", "tpot_s_p50"):
        if column in shown:
            shown[column] = (shown[column] * 1000).round(2)  # ms
    shown = shown.rename(columns={"ttft_s_p50": "ttft_p50_ms", "tpot_s_p50": "tpot_p50_ms"})
    with pd.option_context("display.width", 200, "display.max_columns", None):
        print(shown.to_string(index=False))
    return 0


def reports_for(args: argparse.Namespace) -> tuple[list[SeriesReport], AlertRule]:
    if not 0 <= args.margin < 1:
        raise HarnessError(f"--margin must be in [0, 1), a fraction (got {args.margin}); e.g. 0.05 for 5 %")
    if args.max_age < CONSECUTIVE:
        raise HarnessError(f"--max-age must be at least {CONSECUTIVE} (got {args.max_age})")
    figures = [parse_figure(m) for m in args.metric or DEFAULT_FIGURES]
    rule = AlertRule(margin=args.margin, max_age=args.max_age)
    frame = runs(args.root, RunFilter(args.engine, args.point, args.since))
    if frame.empty:
        raise HarnessError(f"no run in {args.root} matches --engine/--point/--since")
    return analyse(frame, figures, rule), rule


def run_trend(args: argparse.Namespace) -> int:
    if args.out.is_dir():
        raise HarnessError(f"--out must be a file, not a folder: {args.out}")
    reports, rule = reports_for(args)
    try:
        gate_decisions: Optional[pd.DataFrame] = decisions(args.root)
    except EmptyHistory:
        gate_decisions = None
    path = write_trend(args.out, reports, args.root, rule, gate_decisions)
    alerts = sum(r.verdict.alert is not None for r in reports)
    changes = sum(len(r.verdict.points) for r in reports)
    print(f"trend: {path} ({len(reports)} series, {changes} change points, {alerts} alerts)")
    return 0


def alert_lines(reports: Sequence[SeriesReport]) -> list[str]:
    return [
        f"{r.figure.name} {cells['change']} at {r.point_label} (point {r.point}): since {cells['since']}, "
        f"reference {cells['reference']}, latest {cells['latest']}"
        for r in reports
        if (cells := alert_cells(r)) is not None
    ]


def alert_markdown(lines: Sequence[str], series: int) -> str:
    if not lines:
        return f"### History check: no alert\n\n{series} series checked.\n"
    items = "\n".join(f"- {line}" for line in lines)
    return f"### History check: {len(lines)} alert(s)\n\n{items}\n"


def run_check(args: argparse.Namespace) -> int:
    if args.markdown == "":
        raise HarnessError("--markdown got an empty file name (is $GITHUB_STEP_SUMMARY set?)")
    if args.markdown not in (None, "-") and Path(args.markdown).is_dir():
        raise HarnessError(f"--markdown must be a file, not a folder: {args.markdown}")
    reports, _ = reports_for(args)
    lines = alert_lines(reports)
    out = sys.stderr if args.markdown == "-" else sys.stdout
    for line in lines:
        print(f"ALERT {line}", file=out)
    print(f"check: {len(reports)} series, {len(lines)} alert(s)", file=out)
    if args.markdown == "-":
        print(alert_markdown(lines, len(reports)))
    elif args.markdown:
        with open(args.markdown, "a", encoding="utf-8") as f:
            f.write(alert_markdown(lines, len(reports)))
    return EXIT_ALERT if lines else 0


def run_gate(args: argparse.Namespace) -> int:
    if args.markdown == "":
        raise HarnessError("--markdown got an empty file name (is $GITHUB_STEP_SUMMARY set?)")
    if not 0 <= args.margin < 1:
        raise HarnessError(f"--margin must be in [0, 1), a fraction (got {args.margin}); e.g. 0.05 for 5 %")
    if not 0 < args.fdr < 1:
        raise HarnessError(f"--fdr must be in (0, 1) (got {args.fdr})")
    figures = [parse_figure(m) for m in args.metric or DEFAULT_FIGURES]
    current = pd.DataFrame(rows_in(args.current))
    if current.empty:
        raise HarnessError(f"{args.current} holds no finished run to judge")
    try:
        history = runs(args.root)
    except EmptyHistory:
        history = pd.DataFrame()
    try:
        earlier = decisions(args.root)
    except EmptyHistory:
        earlier = None
    gate = nightly.judge(
        history,
        current,
        figures,
        margin=args.margin,
        fdr=args.fdr,
        noise_dir=args.noise_dir,
        allow_other_hardware=args.allow_other_hardware,
        decisions=earlier,
    )
    print(nightly.text(gate))
    if args.markdown:
        with open(args.markdown, "a", encoding="utf-8") as f:
            f.write(nightly.markdown(gate) + "\n")
    if args.record:
        started = str(current["started_at"].min())
        for row in nightly.decision_rows(gate, started):
            add_decision(args.root, row)
    return EXIT_ALERT if gate.regressions else 0
