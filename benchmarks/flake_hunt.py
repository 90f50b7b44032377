"""The flake hunt: every test that races something, run many times in a row.

A test *races* when it sends a signal, forks, starts or kills another process, or races a timer
(its source names ``send_signal``, ``os.kill``, a ``SIG…`` constant, ``.kill()``, ``.terminate()``,
a fork, ``Popen``, ``threading.Timer`` or ``wait_procs``), or sits in one of :data:`WHOLE_FILES`
(fault drills, launchers, CI's scripts): the tests whose outcome can hang on timing. They are
found by reading the tests' source (so a new one joins the hunt by itself),
then run ``--tries`` times each in a row with pytest-repeat, in one pytest process per test file
(as the suite runs them: shared fixtures, the leak check of tests/process_state.py around each).

By default pytest starts as CI starts it, a background job of a script: SIGINT ignored and
SIGHUP as the caller has it (``--foreground`` gives it Python's Ctrl-C). The table: each test,
its tries and passes, and the first error of a failure.

    .venv/bin/python benchmarks/flake_hunt.py --list                 # what would run
    .venv/bin/python benchmarks/flake_hunt.py --tries 30             # the hunt (hours here)
    .venv/bin/python benchmarks/flake_hunt.py --tries 30 -k plan_pool --tree /tmp/old   # another checkout

``--tree`` hunts in another checkout with this environment (its packages come first on the path):
before-and-after tables from one script.

``--beside engine`` (or ``rest``) hunts as the suite runs in CI (scripts/pytest_halves.py): the
other half of the suite runs meanwhile in a pytest of its own, again and again until the hunt
ends, so the hunted tests share the machine as they do there. Its rounds are listed at the end
(a failure there is a flake too).

    .venv/bin/python benchmarks/flake_hunt.py --all --tries 5 --beside engine -k "schedule or timing" Results: ``--out`` (JSON, one entry per test, each failure's report in full).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RACE_WORDS = re.compile(
    r"send_signal|os\.kill|killpg|\bSIG(INT|TERM|HUP|KILL|ALRM|USR1)\b|\.kill\(|\.terminate\(|os\.fork|"
    r"[\"']fork[\"']|Popen|threading\.Timer|wait_procs"
)
FAILURE_CHARS = 20_000  # of each failure's text kept in --out (its end: the traceback's last frames)
# files hunted whole: every test in them waits on other processes (drills, launchers, CI's scripts)
WHOLE_FILES = (
    "tests/test_faults.py",
    "tests/test_launchers.py",
    "tests/test_ci.py",
    "tests/workloads/test_plan_pool.py",
)


@dataclass
class Tally:
    test: str
    tries: int = 0
    passes: int = 0
    skips: int = 0
    errors: list[str] = field(default_factory=list)  # the first line of each failure, in order
    # each failure in full (pytest's report of it: the assertion, the captured output), for --out:
    # a failure seen once in 30 is read from here, not run again until it recurs
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0


def collect(tree: Path, expression: str | None, env: dict[str, str], marker: str | None = None) -> list[str]:
    args = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    if expression:
        args += ["-k", expression]
    if marker:
        args += ["-m", marker]
    done = subprocess.run(args, cwd=tree, env=env, capture_output=True, text=True, timeout=900)
    ids = [line for line in done.stdout.splitlines() if "::" in line]
    if not ids:
        raise SystemExit(f"error: no tests collected in {tree}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return ids


def function_sources(path: Path) -> dict[str, str]:
    """Each test function's source, by name (top level and in classes)."""
    text = path.read_text()
    out: dict[str, str] = {}
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            out[node.name] = ast.get_source_segment(text, node) or ""
    return out


def racing(tree: Path, ids: list[str]) -> list[str]:
    """The collected tests whose source races something (module docstring)."""
    sources: dict[Path, dict[str, str]] = {}
    found = []
    for node_id in ids:
        file, _, name = node_id.partition("::")
        path = tree / file
        if path not in sources:
            sources[path] = function_sources(path)
        base = name.split("::")[-1].split("[")[0]
        if file in WHOLE_FILES or RACE_WORDS.search(sources[path].get(base, "")):
            found.append(node_id)
    return found


def as_background_job() -> None:
    """What a non-interactive shell does to ``cmd &`` (and so to CI's steps): SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def base_name(testcase: ET.Element) -> str:
    """``test_x[2-30]`` or ``test_x[case-2-30]`` → the test without pytest-repeat's suffix."""
    name = testcase.get("name", "")
    name = re.sub(r"\[(\d+)-(\d+)\]$", "", name)
    name = re.sub(r"-(\d+)-(\d+)\]$", "]", name)
    classname = testcase.get("classname", "")
    return f"{classname}::{name}"


def hunt_file(tree: Path, ids: list[str], tries: int, env: dict[str, str], foreground: bool) -> dict[str, Tally]:
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        # pytest-repeat's --count: its plugin loads by itself
        args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--count={tries}",
                "--repeat-scope=function", f"--junitxml={xml}", *ids]  # fmt: skip
        done = subprocess.run(
            args,
            cwd=tree,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=None if foreground else as_background_job,
        )
        tallies: dict[str, Tally] = {}
        if not xml.exists():
            why = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
            return {i: Tally(i, errors=[f"pytest wrote no report (exit {done.returncode}): {why}"]) for i in ids}
        for case in ET.parse(xml).getroot().iter("testcase"):
            key = base_name(case)
            tally = tallies.setdefault(key, Tally(key))
            tally.tries += 1
            tally.seconds += float(case.get("time", 0) or 0)
            failure = case.find("failure")
            if failure is None:
                failure = case.find("error")
            if case.find("skipped") is not None:
                tally.skips += 1
            elif failure is not None:
                tally.failures.append(f"{failure.get('message') or ''}\n{failure.text or ''}"[-FAILURE_CHARS:])
                tally.errors.append(
                    (failure.get("message") or failure.text or "").strip().splitlines()[0][:200]
                    if (failure.get("message") or failure.text)
                    else "failed"
                )
            else:
                tally.passes += 1
        return tallies


class OtherHalf:
    """The suite's other half (``-m engine`` or ``-m "not engine"``), run again and again in a pytest
    of its own while the hunt goes on; :meth:`stop` ends the round in progress (Ctrl-C to its group)."""

    def __init__(self, half: str, tree: Path, env: dict[str, str]) -> None:
        marker = "engine" if half == "engine" else "not engine"
        self.args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", marker]
        self.tree, self.env = tree, env
        self.rounds: list[str] = []  # each finished round's last line
        self.stopping = threading.Event()
        self.proc: subprocess.Popen[str] | None = None
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stopping.is_set():
            self.proc = subprocess.Popen(
                self.args, cwd=self.tree, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True, start_new_session=True,
            )  # fmt: skip
            out, _ = self.proc.communicate()
            if not self.stopping.is_set():
                lines = out.strip().splitlines()
                self.rounds.append(f"exit {self.proc.returncode}: {lines[-1] if lines else 'no output'}")

    def stop(self) -> None:
        self.stopping.set()
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
        self.thread.join()


def table(tallies: list[Tally]) -> str:
    lines = ["| test | tries | passes | first failure |", "|---|---:|---:|---|"]
    for t in tallies:
        first = t.errors[0].replace("|", "\\|") if t.errors else ""
        lines.append(f"| `{t.test}` | {t.tries} | {t.passes}{f' ({t.skips} skipped)' if t.skips else ''} | {first} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=30)
    parser.add_argument("-k", dest="expression", help="only the tests pytest -k selects (before the race filter)")
    parser.add_argument("--tree", type=Path, default=REPO, help="the checkout to hunt in (default: this one)")
    parser.add_argument("--foreground", action="store_true", help="Python's Ctrl-C, not a background job's")
    parser.add_argument("--list", action="store_true", help="print the racing tests and stop")
    parser.add_argument("--all", action="store_true", help="every collected test, not only the racing ones")
    parser.add_argument("--out", type=Path, help="JSON of the tallies")
    parser.add_argument(
        "--beside", choices=("engine", "rest"), help="the suite's other half runs meanwhile, again and again (as in CI)"
    )
    args = parser.parse_args(argv)
    tree = args.tree.resolve()
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    # beside one half, the other half's tests: never two engines at once, as in CI
    hunted_half = {"engine": "not engine", "rest": "engine"}.get(args.beside or "")
    ids = collect(tree, args.expression, env, hunted_half)
    chosen = ids if args.all else racing(tree, ids)
    print(f"{len(chosen)} of {len(ids)} tests race something in {tree}", file=sys.stderr)
    if args.list:
        print("\n".join(chosen))
        return 0
    # pytest-repeat renames a parametrized case (test_x[2] becomes test_x[2-1-30]): such a test is
    # asked for by its function, every case of it
    by_file: dict[str, list[str]] = defaultdict(list)
    for node_id in dict.fromkeys(i.split("[")[0] for i in chosen):
        by_file[node_id.split("::")[0]].append(node_id)
    started = time.monotonic()
    other = OtherHalf(args.beside, tree, env) if args.beside else None
    try:
        results = hunt(tree, by_file, args.tries, env, args.foreground)
    finally:
        if other is not None:
            other.stop()
    print(table(results))
    flaky = [t for t in results if t.passes + t.skips < args.tries]
    print(
        f"\n{len(results)} tests, {len(flaky)} failed at least once; {time.monotonic() - started:.0f} s "
        f"({'foreground' if args.foreground else 'as a background job: SIGINT ignored'})"
    )
    if other is not None:
        print(f"beside them, {len(other.rounds)} whole round(s) of the {args.beside} tests:")
        print("\n".join(f"- {line}" for line in other.rounds) or "- none finished")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps([asdict(t) for t in results], indent=1) + "\n")
    return 1 if flaky or (other is not None and any(not r.startswith("exit 0") for r in other.rounds)) else 0


def hunt(tree: Path, by_file: dict[str, list[str]], tries: int, env: dict[str, str], foreground: bool) -> list[Tally]:
    """Each file's tests, ``tries`` times each, one pytest per file; a line per file on stderr."""
    results: list[Tally] = []
    for file, file_ids in by_file.items():
        t0 = time.monotonic()
        got = hunt_file(tree, file_ids, tries, env, foreground)
        if not got:
            got = {i: Tally(i, errors=["no test ran (not collected?)"]) for i in file_ids}
        results.extend(sorted(got.values(), key=lambda t: t.test))
        bad = [t for t in got.values() if t.passes + t.skips < t.tries or t.tries < tries]
        print(
            f"{file}: {len(file_ids)} tests × {tries} in {time.monotonic() - t0:.0f} s"
            + (f", {len(bad)} with failures" if bad else ""),
            file=sys.stderr,
            flush=True,
        )
    return results


if __name__ == "__main__":
    sys.exit(main())
