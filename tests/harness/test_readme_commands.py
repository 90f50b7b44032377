"""Every ``python -m harness …`` command of the README is one the harness accepts.

Each command is read from the README's code blocks (continuation lines joined, the comment
dropped) and checked as ``python -m harness`` checks it before it starts: the group choices,
the config composed and validated, and with ``-m`` every swept value. Nothing is run; a command
whose files or servers exist only on the reader's machine passes as long as its settings are
valid. A README edit that renames a key or a value is caught here, not by a user.
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


def readme_commands(readme: Path = REPO / "README.md") -> list[tuple[int, list[str]]]:
    """(line number, arguments) of each ``python -m harness`` command in the README's code blocks."""
    commands: list[tuple[int, list[str]]] = []
    in_block, pending, start = False, "", 0
    for number, line in enumerate(readme.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_block, pending = not in_block, ""
            continue
        if not in_block:
            continue
        if pending:
            pending += " " + line.strip()
        elif COMMAND.match(line.strip()):
            pending, start = line.strip(), number
        else:
            continue
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        args = shlex.split(COMMAND.match(pending)["args"], comments=True)
        commands.append((start, args))
        pending = ""
    return commands


COMMANDS = readme_commands()


def test_the_readme_has_the_commands_a_reader_copies():
    assert len(COMMANDS) >= 40
    assert any(args == [] for _, args in COMMANDS)  # python -m harness, the first command
    assert any("-m" in args for _, args in COMMANDS)  # sweeps


@pytest.mark.parametrize("args", [args for _, args in COMMANDS], ids=[f"README:{line}" for line, _ in COMMANDS])
def test_a_readme_command_is_accepted(args):
    register_everything()
    try:
        check_group_choices(args)
        check_overrides(args)
    except HarnessError as exc:
        pytest.fail(f"python -m harness {shlex.join(args)}: {exc}")
