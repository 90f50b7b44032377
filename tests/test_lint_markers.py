"""Every silenced lint or type check says why, on its line.

A ``# noqa`` names its codes and then the reason, ``# noqa: BLE001 - the run goes on``; a
``# type: ignore`` names its error codes and then the reason, after `` - `` or a second
comment: ``# type: ignore[import-untyped]  # llama_cpp ships no stubs``. A bare marker, or one
with codes and no words after them, fails here. Comments are read with :mod:`tokenize`, so
the markers quoted in strings and docstrings (like these) do not count.

Run it alone to list the markers: ``python tests/test_lint_markers.py``.
"""

from __future__ import annotations

import io
import re
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# folders that hold no code of the project's own: virtual environments, builds, run results
SKIP = {"__pycache__", "build", "dist", "results", "node_modules"}

CODES = r"[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*"
NOQA = re.compile(rf"#\s*noqa\b(?P<codes>:\s*{CODES})?(?P<rest>.*)$", re.IGNORECASE)
TYPE_IGNORE = re.compile(r"#\s*type:\s*ignore\b(?P<codes>\[[a-z0-9_,\s-]+\])?(?P<rest>.*)$")
# the reason right after the codes: " - words" or "  # words", with a word of two letters at least
REASON = re.compile(r"^(?:\s+-\s+|\s+#\s*)\S.*[^\W\d_]{2}")


def project_files() -> Iterator[Path]:
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).parts
        if not any(part.startswith(".") or part in SKIP for part in parts):
            yield path


def comments(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of each comment in ``source``."""
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def problem(comment: str) -> str | None:
    """Why this comment's marker is not enough, or None (no marker, or one with codes and a reason)."""
    for kind, pattern in (("noqa", NOQA), ("type: ignore", TYPE_IGNORE)):
        found = pattern.search(comment)
        if found is None:
            continue
        if not found.group("codes"):
            return f"a bare {kind}: name the codes it silences"
        if not REASON.match(found.group("rest")):
            return f"{kind} without a reason: add ' - why' (or '  # why') after the codes"
    return None


def problems() -> list[str]:
    out = []
    for path in project_files():
        for line, comment in comments(path.read_text(encoding="utf-8")):
            why = problem(comment)
            if why is not None:
                out.append(f"{path.relative_to(ROOT)}:{line}: {why}: {comment}")
    return out


def test_every_noqa_and_type_ignore_says_why() -> None:
    found = problems()
    assert not found, f"{len(found)} markers without a reason:\n" + "\n".join(found)


def test_the_checker_tells_a_reason_from_none() -> None:
    good = [
        "# noqa: BLE001 - the run goes on",
        "# noqa: E402, F401 - after the sys.path line",
        "# noqa: BLE001 - a backend being closed",
        "# type: ignore[import-untyped]  # llama_cpp ships no stubs",
        "# type: ignore[attr-defined, arg-type] - the stubs lag the library",
        "# an ordinary comment",
    ]
    bad = [
        "# noqa",
        "# noqa: F401",
        "# noqa: F401 (a fixture)",
        "# NOQA: E731 -",
        "# type: ignore",
        "# type: ignore  # no codes",
        "# type: ignore[attr-defined]",
        "# type: ignore[attr-defined]  #",
        "# noqa: E731 - x",
    ]
    assert [problem(c) for c in good] == [None] * len(good)
    assert all(problem(c) is not None for c in bad), [c for c in bad if problem(c) is None]
    # markers quoted in a string are not comments
    assert list(comments('x = "# noqa"  # noqa: E501 - a long line\n')) == [(1, "# noqa: E501 - a long line")]


if __name__ == "__main__":
    found = problems()
    print("\n".join(found) or "every marker says why")
    sys.exit(1 if found else 0)
