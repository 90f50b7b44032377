"""``python -m harness.import FILE_OR_FOLDER… --out DIR``: other tools' result files as run folders.

Reads what ``vllm bench serve --save-result [--save-detailed]``, GuideLLM (``benchmarks.json``)
and AIPerf (``profile_export_aiperf.json`` with ``profile_export.jsonl``) wrote, recognized by
content (harness/formats/detect.py), and writes each benchmark in them as a run folder that
``python -m harness.compare``, ``harness.report`` and ``harness.history`` read like the
harness's own (harness/formats/imported.py says what goes where). One benchmark: ``--out`` is
its run folder; several (a GuideLLM sweep, vllm's ``--append-result`` lines, several files):
``--out`` holds one folder each, ``NN-<tool>[-<label>]``, which compare takes as a sweep.

Import is its own command, not a part of compare: compare only reads run folders, and an
imported run is a run folder that every reader (compare, report, history, export) takes, made
once, with the tool's files kept beside it (``imported/``).

The tool's version is read from its file (GuideLLM, AIPerf); vllm bench serve's file does not
say it: ``--tool-version``. ``--model`` names the model as the harness does (a file has the name
the tool sent), so compare finds the runs of one model. ``--ran-here``: the tool ran on this
machine, so its env.json is this machine's (compare then checks the hardware as for its own runs).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Optional

from core.errors import HarnessError
from harness.formats.detect import TOOL_CHOICES, read_results
from harness.formats.imported import ImportedRun, write_run
from harness.reports.run_report import write_report
from harness.telemetry.environment import capture_environment

EXIT_BAD_INPUT = 2


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m harness.import",
        description="Import result files of vllm bench serve, GuideLLM or AIPerf as run folders "
        "that compare, report and history read.",
    )
    parser.add_argument(
        "paths",
        nargs="+",
        type=Path,
        help="result files, or folders holding them (AIPerf's artifact folder, a folder with benchmarks.json)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="the run folder (a folder of run folders for several benchmarks); default: results/import-<date>-<time>",
    )
    parser.add_argument(
        "--tool", choices=TOOL_CHOICES, default=None, help="insist on one tool (default: recognized by content)"
    )
    parser.add_argument(
        "--tool-version", default=None, help="the tool's version where its file does not say it (vllm bench serve)"
    )
    parser.add_argument(
        "--model", default=None, help="the model's name as the harness runs name it (default: the name the tool sent)"
    )
    parser.add_argument(
        "--ran-here", action="store_true", help="the tool ran on this machine: write this machine's env.json"
    )
    parser.add_argument("--no-report", action="store_true", help="write no report.html")
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    try:
        written = import_files(
            args.paths,
            args.out or Path("results") / f"import-{datetime.now().strftime('%Y%m%d-%H%M%S')}",
            tool=args.tool,
            tool_version=args.tool_version,
            model=args.model,
            ran_here=args.ran_here,
            report=not args.no_report,
        )
    except (HarnessError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for run_dir, run in written:
        print(describe(run_dir, run))
    return 0


def import_files(
    paths: Sequence[Path],
    out: Path,
    tool: Optional[str] = None,
    tool_version: Optional[str] = None,
    model: Optional[str] = None,
    ran_here: bool = False,
    report: bool = True,
) -> list[tuple[Path, ImportedRun]]:
    """Import every benchmark of ``paths`` under ``out``; (run folder, what was read) each."""
    runs = read_results(paths, tool, tool_version)
    if not runs:
        raise HarnessError(f"no benchmark found in {', '.join(str(p) for p in paths)}")
    out = Path(out)
    if (out / "summary.json").exists() or (out.is_dir() and any(out.iterdir())):
        raise HarnessError(f"{out} is not empty: import into a new folder")
    env = capture_environment() if ran_here else None
    written = []
    for i, run in enumerate(runs, start=1):
        run_dir = out if len(runs) == 1 else out / folder_name(i, run)
        write_run(run, run_dir, model_name=model, env=env)
        if report:
            write_report(run_dir)
        written.append((run_dir, run))
    return written


def folder_name(index: int, run: ImportedRun) -> str:
    """``NN-<tool>[-<label>]``, safe as a folder name."""
    label = re.sub(r"[^A-Za-z0-9._-]+", "_", run.label).strip("_")
    return f"{index:02d}-{run.tool}" + (f"-{label}" if label else "")


def describe(run_dir: Path, run: ImportedRun) -> str:
    """One line per imported benchmark, and its notes."""
    kept = f"{len(run.rows)} requests" if run.rows is not None else "no per-request records"
    version = run.tool_version or "version unknown"
    lines = [
        f"{run_dir}: {run.title} {version}{' ' + run.label if run.label else ''} · "
        f"{run.requests.get('completed', 0)}/{run.requests.get('sent', 0)} ok · {kept}"
    ]
    lines += [f"  note: {note}" for note in run.notes]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
