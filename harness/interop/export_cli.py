"""``python -m harness.export RUN_OR_SWEEP… --format llmd --out FILE_OR_DIR``: runs as llm-d benchmark reports.

Each run folder becomes one llm-d benchmark report v0.2 (harness/formats/llmd.py says what goes
where), validated against the published JSON schema before it is written; an invalid one is not
written, and the command says where it fails (exit 1). A run: ``--out`` is the report's file.
Several runs, or a sweep (its sweep.json's points, or the run folders inside it): ``--out`` is a
folder with one report per run, ``NN-<run folder>.json``; the runs of one sweep share the
report's experiment id (``run.eid``) and count their ``stage`` from 0 in the sweep's order.
Imported runs (python -m harness.import) export too, with the tool that measured them as the load's tool.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from core.errors import HarnessError
from harness.formats.llmd import InvalidReport, experiment_id, report_of, validate
from harness.results.store import is_run_dir, load_run
from harness.results.sweep_file import SWEEP_JSON, point_run_dirs, read_sweep

EXIT_INVALID, EXIT_BAD_INPUT = 1, 2
FORMATS = ("llmd",)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m harness.export",
        description="Write run folders and sweeps as llm-d benchmark reports (v0.2), validated against its schema.",
    )
    parser.add_argument("runs", nargs="+", type=Path, help="run folders, or sweep folders (all their runs)")
    parser.add_argument(
        "--format", choices=FORMATS, default="llmd", help="the report format: llmd, llm-d benchmark report v0.2"
    )
    parser.add_argument(
        "--out",
        type=Path,
        required=True,
        help="the report's file (JSON) for one run; a folder (one report per run) for several or a sweep",
    )
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    try:
        written = export(args.runs, args.out)
    except InvalidReport as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except (HarnessError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for path in written:
        print(f"llm-d report (valid): {path}")
    return 0


def runs_of(paths: Sequence[Path]) -> list[tuple[Path, Optional[str], int]]:
    """(run folder, experiment id, stage) of every run: a sweep's runs share its experiment."""
    out: list[tuple[Path, Optional[str], int]] = []
    for path in paths:
        path = Path(path)
        if is_run_dir(path):
            out.append((path, None, 0))
            continue
        if (path / SWEEP_JSON).is_file():
            runs = point_run_dirs(read_sweep(path))
        elif path.is_dir():
            runs = [p.parent for p in sorted(path.glob("*/summary.json")) + sorted(path.glob("*/*/summary.json"))]
        else:
            raise HarnessError(f"not a run or sweep folder: {path}")
        runs = [r for r in runs if is_run_dir(r)]
        if not runs:
            raise HarnessError(f"{path} holds no finished run (summary.json)")
        eid = experiment_id(path)
        out += [(run, eid, stage) for stage, run in enumerate(runs)]
    return out


def export(paths: Sequence[Path], out: Path) -> list[Path]:
    """Write the reports of ``paths``' runs; every one is validated before anything is written."""
    runs = runs_of(paths)
    reports: list[tuple[Path, dict[str, Any]]] = []
    for run_dir, eid, stage in runs:
        report = report_of(load_run(run_dir, with_workload=False), experiment=eid, stage=stage)
        try:
            validate(report)
        except InvalidReport as exc:
            raise InvalidReport(f"{run_dir}: {exc}") from None
        reports.append((run_dir, report))
    out = Path(out)
    if len(reports) == 1 and not out.is_dir():
        targets = [out]
    else:
        if out.exists() and not out.is_dir():
            raise HarnessError(f"--out {out} is a file; several runs need a folder")
        out.mkdir(parents=True, exist_ok=True)
        targets = [out / f"{i:02d}-{run_dir.name}.json" for i, (run_dir, _) in enumerate(reports)]
    for target, (_, report) in zip(targets, reports):
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    return targets


if __name__ == "__main__":
    sys.exit(main())
