"""Every file that the docs and the code's docstrings and comments cite exists.

Read: the ``.md`` files, the docstrings and comments of the ``.py`` files, and the ``.yaml``,
``.toml`` and ``.sh`` files whole. A citation is a path with a folder (``harness/client/pacing.py``,
``docs/gate.md``) whose first folder is one of the repository's, a bare Markdown file name
(``metrics.md``), or the target of a relative Markdown link. A path is looked for from the
repository's root and from the citing file's folder.

Also here: a doc never sends the reader outside the repository for figures (a commit's note):
it names the script that makes them.

Run it alone to list the citations it checks: ``python tests/test_doc_references.py``.
"""

from __future__ import annotations

import ast
import functools
import io
import os
import re
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# folders that hold no file of the project's own: builds, caches, and (at the top) run results
SKIP = {"__pycache__", "build", "dist", "node_modules"}
TOP_SKIP = {"results"}  # harness/results is code
SUFFIXES = (".py", ".md", ".yaml", ".yml", ".toml", ".sh")
EXTENSIONS = "py|md|yaml|yml|toml|sh|txt|json|cmake|j2|css|png|svg"

PATH = re.compile(rf"(?<![\w./<>-])((?:[\w.-]+/)+[\w.-]+\.(?:{EXTENSIONS}))(?![\w/*<>-])")
BARE_MD = re.compile(r"(?<![\w./<>-])([\w-]+\.md)(?![\w/*<>-])")
LINK = re.compile(r"\]\(([^)#\s]+)")
OUTSIDE = re.compile(r"closing note|commit message|description of the (?:pull request|change)", re.IGNORECASE)

# cited on purpose though not in the repository, and why
NOT_HERE = {
    "backends/engines/myengine.py": "the example of adding an engine (docs/internals/extending.md)",
    "conf/backend/myengine.yaml": "the example of adding an engine",
    "workloads/myworkload.py": "the example of adding a workload",
    "conf/workload/myworkload.yaml": "the example of adding a workload",
    ".github/workflows/bench.yml": "the CI gate's workflow, for a user's repository to copy",
    "benchmarks/NAME.py": "a benchmark, in the pattern of measurement_page.py's docstring",
    "docs/measurements/NAME.md": "its page, in the same pattern",
    "ab.md": "written by python -m harness.ab into its --out folder",
}


DOT_FOLDERS = (".github", ".ci")  # the hidden folders of the project's own


def kept(relative: Path) -> bool:
    if relative.parts and relative.parts[0] in TOP_SKIP:
        return False
    return not any(part in SKIP or (part.startswith(".") and part not in DOT_FOLDERS) for part in relative.parts)


def top_folders() -> set[str]:
    return {p.name for p in ROOT.iterdir() if p.is_dir() and kept(Path(p.name))}


def project_files() -> Iterator[Path]:
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = sorted(d for d in subfolders if kept(Path(folder, d).relative_to(ROOT)))
        for name in sorted(files):
            if name.endswith(SUFFIXES):
                yield Path(folder, name)


def texts(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of what a file says to its reader: a .py file's comments and docstrings,
    any other file whole."""
    source = path.read_text(encoding="utf-8")
    if path.suffix != ".py":
        yield from enumerate(source.splitlines(), start=1)
        return
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield node.body[0].lineno, doc


@functools.cache
def texts_of(path: Path) -> tuple[tuple[int, str], ...]:
    """:func:`texts`, read once a session: this module's tests and tests/test_docs_agree.py scan every file."""
    return tuple(texts(path))


def citations() -> Iterator[tuple[Path, int, str]]:
    """(citing file, line, cited path) of every citation in the project's files."""
    tops = top_folders()
    for path in project_files():
        for line, text in texts_of(path):
            for match in PATH.finditer(text):
                if match.group(1).split("/")[0] in tops:
                    yield path, line, match.group(1)
            for match in BARE_MD.finditer(text):
                yield path, line, match.group(1)
            if path.suffix == ".md":
                for match in LINK.finditer(text):
                    if "://" not in match.group(1) and not match.group(1).startswith("mailto:"):
                        yield path, line, match.group(1)


def exists(citing: Path, cited: str) -> bool:
    if (ROOT / cited).exists() or (citing.parent / cited).exists():
        return True
    return "/" not in cited and cited in _names()  # a bare name: a file of that name somewhere


@functools.cache
def _names() -> frozenset[str]:
    return frozenset(p.name for p in project_files())


def test_every_cited_file_exists():
    missing = [
        f"{path.relative_to(ROOT)}:{line}: {cited}"
        for path, line, cited in citations()
        if cited not in NOT_HERE and not exists(path, cited)
    ]
    assert missing == [], "cited but not in the repository:\n" + "\n".join(missing)


def test_the_scan_finds_citations():
    found = {(path.relative_to(ROOT).as_posix(), cited) for path, _, cited in citations()}
    assert ("harness/config.py", "harness/results/jobs.py") in found  # a comment
    assert ("harness/cli.py", "harness/run/slo_search.py") in found  # a module docstring
    assert ("backends/base.py", "docs/metrics.md") in found
    assert ("docs/reports.md", "metrics.md") in found  # a Markdown link


def test_the_exceptions_are_still_cited():
    cited = {c for _, _, c in citations()}
    assert set(NOT_HERE) <= cited, f"no longer cited, drop from NOT_HERE: {set(NOT_HERE) - cited}"


def test_no_doc_sends_the_reader_outside_the_repository_for_figures():
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {text.strip()[:120]}"
        for path in project_files()
        if path.suffix == ".md"
        for line, text in texts(path)
        if OUTSIDE.search(text)
    ]
    assert offenders == []


if __name__ == "__main__":
    for path, line, cited in citations():
        mark = "" if exists(path, cited) else "   <- missing" + (f" ({NOT_HERE[cited]})" if cited in NOT_HERE else "")
        print(f"{path.relative_to(ROOT)}:{line}: {cited}{mark}")
    sys.exit(0)
