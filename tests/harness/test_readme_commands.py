"""Every ``python -m harness …`` command of the README and of the docs site is one the harness accepts.

Each command is read from the shell code blocks of README.md and docs/**/*.md (continuation lines
joined, the comment dropped; in YAML blocks, a workflow's ``run:`` lines) and checked as
``python -m harness`` checks it before it starts: the group choices, the config composed and
validated, and with ``-m`` every swept value. Nothing is run; a command whose files or servers
exist only on the reader's machine passes as long as its settings are valid. A page that renames
a key or a value is caught here, not by a reader. The generated reference pages hold no shell
block (their usage lines are ``text``), so what they quote is the code's own.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from conftest import REPO

from core.errors import HarnessError
from harness.cli import register_everything
from harness.preflight import check_group_choices, check_overrides

COMMAND = re.compile(r"^(?:\.venv/bin/)?python -m harness(?=\s|$)(?P<args>.*)$")
SHELL = {"", "bash", "sh", "shell", "console"}  # the info strings of the blocks a reader pastes into a shell
YAML = {"yaml", "yml"}  # a workflow: its run: lines are shell commands too
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def commands_in(page: Path) -> list[tuple[int, list[str]]]:
    """(line number, arguments) of each ``python -m harness`` command in the page's code blocks."""
    commands: list[tuple[int, list[str]]] = []
    kind, pending, start = None, "", 0
    for number, line in enumerate(page.read_text().splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            kind = None if kind is not None else stripped[3:].strip().lower()
            pending = ""
            continue
        if kind is None or (kind not in SHELL and kind not in YAML):
            continue
        if kind in YAML:
            stripped = re.sub(r"^(?:-\s+)?run:\s*\|?\s*", "", stripped)
        if pending:
            pending += " " + stripped
        elif COMMAND.match(stripped):
            pending, start = stripped, number
        else:
            continue
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        args = shlex.split(COMMAND.match(pending)["args"], comments=True)
        commands.append((start, args))
        pending = ""
    return commands


COMMANDS = [(page, line, args) for page in PAGES for line, args in commands_in(page)]


def readme_commands(readme: Path = REPO / "README.md") -> list[tuple[int, list[str]]]:
    return commands_in(readme)


def test_the_pages_have_the_commands_a_reader_copies():
    assert len(COMMANDS) >= 60
    readme = readme_commands()
    assert any(args[:1] == ["-m"] for _, args in readme)  # the two-engine recipe: a sweep
    assert any(args and args[0].startswith("backend=") for _, args in readme)  # the one-engine recipe
    assert any(args == [] for _, _, args in COMMANDS)  # python -m harness, the default benchmark
    pages = {page for page, _, _ in COMMANDS}
    assert REPO / "docs" / "getting-started" / "first-run.md" in pages
    assert REPO / "docs" / "guides" / "workloads.md" in pages


@pytest.mark.parametrize(
    "args",
    [args for _, _, args in COMMANDS],
    ids=[f"{page.relative_to(REPO)}:{line}" for page, line, _ in COMMANDS],
)
def test_a_documented_command_is_accepted(args):
    register_everything()
    try:
        check_group_choices(args)
        check_overrides(args)
    except HarnessError as exc:
        pytest.fail(f"python -m harness {shlex.join(args)}: {exc}")
