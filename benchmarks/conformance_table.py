"""The conformance suite's table: engine × mode × case, from a run of tests/test_conformance.py.

    python benchmarks/conformance_table.py                  # runs the suite (all targets), then prints
    python benchmarks/conformance_table.py -k "reference"   # a subset (pytest -k)
    python benchmarks/conformance_table.py --xml FILE ...    # only render saved JUnit XML files

Cells: ``pass``, ``FAIL``, ``n/a`` (the case cannot apply to that target; the reason is
listed below the table) or ``error`` (the target did not load). Markdown, for a report.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CASES = (
    "exact_length",
    "stop_at_end_of_sequence",
    "batched_equals_serial",
    "cancellation_frees_the_engine",
    "prompt_token_count_as_the_engine_saw_it",
    "timestamps_increase",
    "request_done_last",
)
NAME = re.compile(r"test_(?P<case>\w+)\[(?P<target>[^\]]+)\]")


def outcomes(xml_files: list[Path]) -> tuple[dict[tuple[str, str], str], dict[str, str], dict[str, float]]:
    """(target, case) → cell; reason → the targets it applied to; target → seconds spent."""
    cells, reasons, seconds = {}, {}, {}
    for path in xml_files:
        for case in ET.parse(path).getroot().iter("testcase"):
            m = NAME.fullmatch(case.get("name", ""))
            if not m:
                continue
            target = m["target"]
            seconds[target] = seconds.get(target, 0.0) + float(case.get("time") or 0)
            cell = "pass"
            for child in case:
                if child.tag == "skipped":
                    cell = "n/a"
                    reason = (child.get("message") or "").removeprefix("n/a: ")
                    reasons.setdefault(reason, []).append(f"{target} {m['case']}")
                elif child.tag == "failure":
                    cell = "FAIL"
                    reasons.setdefault("FAIL: " + (child.get("message") or "").splitlines()[0][:160], []).append(
                        f"{target} {m['case']}"
                    )
                elif child.tag == "error":
                    cell = "error"
                    reasons.setdefault("error: " + (child.get("message") or "").splitlines()[0][:160], []).append(
                        f"{target} {m['case']}"
                    )
            cells[(target, m["case"])] = cell
    return cells, {k: ", ".join(v) for k, v in reasons.items()}, seconds


def table(cells: dict[tuple[str, str], str], seconds: dict[str, float]) -> str:
    targets = list(dict.fromkeys(t for t, _ in cells))
    heads = ["engine", "mode", *(c.replace("_", " ") for c in CASES), "s"]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for target in targets:
        engine, _, mode = target.rpartition("-")
        row = [engine, mode, *(cells.get((target, c), "–") for c in CASES), f"{seconds.get(target, 0):.0f}"]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--xml", nargs="+", type=Path, help="render these JUnit XML files instead of running")
    parser.add_argument("-k", default=None, help="pytest -k expression (a subset of targets or cases)")
    args = parser.parse_args(argv)
    files = args.xml
    rc = 0
    if not files:
        out = Path(tempfile.mkdtemp(prefix="conformance-")) / "junit.xml"
        cmd = [sys.executable, "-m", "pytest", "tests/test_conformance.py", "-q", "-rs", f"--junitxml={out}"]
        if args.k:
            cmd += ["-k", args.k]
        rc = subprocess.run(cmd, cwd=REPO).returncode
        files = [out]
    cells, reasons, seconds = outcomes(files)
    print(table(cells, seconds))
    for reason, where in reasons.items():
        print(f"\n- {reason} ({where})")
    return rc


if __name__ == "__main__":
    sys.exit(main())
