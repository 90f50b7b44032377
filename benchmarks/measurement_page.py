"""A benchmark's results as a dated page of the docs site (docs/measurements/), never typed by hand.

A benchmark adds the option and wraps what it prints:

    from measurement_page import add_page_option, recording

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_page_option(parser)
    args = parser.parse_args()
    with recording(args.page, __doc__):
        ...  # everything printed here is the page's result, as printed

``python benchmarks/NAME.py --page docs/measurements/NAME.md`` then writes the page: the
docstring's first line as its title, the date, the command that wrote it, the harness commit and
the machine (CPU, cores, memory, GPUs, OS, Python, load average), the printed output, and the
rest of the docstring (what it measures and how). Without ``--page`` nothing changes. The page is
written only when the benchmark ends without an exception; the docs site lists every page of
docs/measurements/ by itself (scripts/mkdocs_hooks.py).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional, TextIO

REPO = Path(__file__).resolve().parents[1]


def add_page_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--page",
        type=Path,
        default=None,
        metavar="FILE",
        help="also write the results as a dated page of the docs, e.g. docs/measurements/NAME.md",
    )


class _Tee(io.TextIOBase):
    """Writes go to the terminal and are kept."""

    def __init__(self, out: TextIO):
        self.out, self.kept = out, io.StringIO()

    def write(self, text: str) -> int:
        self.kept.write(text)
        return self.out.write(text)

    def flush(self) -> None:
        self.out.flush()


@contextlib.contextmanager
def recording(page: Optional[Path], doc: Optional[str], argv: Optional[list[str]] = None) -> Iterator[None]:
    """Keep what the block prints; at its end write ``page`` (nothing when ``page`` is None)."""
    if page is None:
        yield
        return
    command = _command(argv if argv is not None else sys.argv)
    machine = machine_rows()
    started = datetime.now(timezone.utc)
    tee = _Tee(sys.stdout)
    with contextlib.redirect_stdout(tee):  # type: ignore[type-var]  # a text stream that also keeps
        yield
    Path(page).parent.mkdir(parents=True, exist_ok=True)
    Path(page).write_text(render(doc or "", command, started, machine, tee.kept.getvalue()))
    print(f"page: {page}")


def _command(argv: list[str]) -> str:
    script = Path(argv[0]).resolve()
    try:
        shown = str(script.relative_to(REPO))
    except ValueError:
        shown = argv[0]
    return "python " + shlex.join([shown, *argv[1:]])


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> Optional[float]:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20
    except (OSError, ValueError):
        pass
    return None


def _gpus() -> str:
    if shutil.which("nvidia-smi") is None:
        return "none"
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=20
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown (nvidia-smi failed)"
    names = [line.strip() for line in out.splitlines() if line.strip()]
    return ", ".join(names) or "none"


def machine_rows() -> list[tuple[str, str]]:
    """(what, value) of the machine the benchmark runs on."""
    commit = _git("rev-parse", "--short=12", "HEAD")
    dirty = " (with uncommitted changes)" if _git("status", "--porcelain", "--untracked-files=no") else ""
    memory = _memory_gib()
    affinity = getattr(os, "sched_getaffinity", None)
    usable = f" ({len(affinity(0))} usable)" if affinity else ""
    try:
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "unknown"
    return [
        ("harness commit", f"`{commit}`{dirty}" if commit else "unknown"),
        ("CPU", f"{_cpu_model()}, {os.cpu_count()} logical cores{usable}"),
        ("memory", f"{memory:.1f} GiB" if memory else "unknown"),
        ("GPUs", _gpus()),
        ("OS", platform.platform()),
        ("Python", f"{platform.python_version()} ({platform.python_implementation()})"),
        ("load average at the start (1, 5, 15 min)", load),
    ]


def render(doc: str, command: str, started: datetime, machine: list[tuple[str, str]], output: str) -> str:
    lines = doc.strip().splitlines()
    title = lines[0].rstrip(".").replace("``", "`") if lines else "Measurement"
    rest = "\n".join(lines[1:]).strip()
    when = started.strftime("%Y-%m-%d %H:%M UTC")
    table = "\n".join(
        f"| {what} | {value} |" for what, value in [("date", when), ("command", f"`{command}`"), *machine]
    )
    return (
        f"# {title}\n\n"
        f'!!! note "Written by a script"\n'
        f"    `{command}` wrote this page on {started:%Y-%m-%d}. Run it again to update the page; "
        f"do not edit it by hand.\n\n"
        f"| | |\n|---|---|\n{table}\n\n"
        f"## Result\n\n```text\n{output.rstrip()}\n```\n\n"
        + (f"## What it measures\n\n{_markdown(rest)}\n" if rest else "")
    )


def _markdown(text: str) -> str:
    """A docstring's text as markdown: RST's double backticks single, an indented command a code block."""
    out, block = [], False
    for line in text.replace("``", "`").splitlines():
        if line.startswith("    ") and line.strip():
            if not block:
                out.append("```bash")
                block = True
            out.append(line[4:])
            continue
        if block:
            out.append("```")
            block = False
        out.append(line)
    if block:
        out.append("```")
    return "\n".join(out)
