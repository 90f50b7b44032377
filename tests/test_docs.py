"""The docs site against the code.

- every config key has a doc (its field's comment: scripts/docs_reference.py reads it), and the
  generated reference pages are what the code makes now (a stale page fails: run
  ``python scripts/docs_reference.py``);
- the measurement pages are written by a benchmark (benchmarks/measurement_page.py), not typed;
- the README's three recipes run for real, on the small model: one engine, two engines and
  their comparison, and the CI gate's A/B step (with the reference server as the engine).

``mkdocs build --strict`` (broken links, missing pages) runs in scripts/lint.sh, and every
``python -m harness`` command of the README and docs/ passes the pre-flight in
tests/harness/test_readme_commands.py.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import docs_reference  # noqa: E402 - a script of scripts/, importable once its folder is on the path

README = REPO / "README.md"
# a recipe's run made short: a few short requests, no warm-up (the commands are the README's own)
SHORT = ["workload.num_requests=2", "workload.input_len=32", "workload.output_len=4", "workload.warmup_requests=0"]


# --- the generated reference ----------------------------------------------------------------


def test_every_config_key_has_a_doc():
    keys = list(docs_reference.every_key())
    assert len(keys) > 300  # every backend's and workload's keys, not only the run's
    undocumented = sorted(
        {f"{where}: {key.path} ({key.owner.__module__}.{key.owner.__name__})" for where, key in keys if not key.doc}
    )
    assert not undocumented, (
        "config keys without a doc (a comment on the field's line, or on the lines right above it): "
        + "; ".join(undocumented)
    )


@pytest.mark.slow
def test_the_generated_pages_are_current():
    stale = [
        str(path.relative_to(REPO))
        for path, text in docs_reference.pages().items()
        if not path.exists() or path.read_text() != text
    ]
    assert not stale, f"stale: {', '.join(stale)}: run python scripts/docs_reference.py and commit the pages"


def test_a_field_doc_is_its_comment_or_the_lines_above_it():
    from dataclasses import dataclass

    @dataclass
    class Example:
        trailing: int = 1  # on its line
        # above it,
        # on two lines
        above: int = 2
        plain: str = "# not a comment"
        """an attribute docstring"""
        none: int = 3

    docs = docs_reference.field_docs(Example)
    assert docs == {"trailing": "on its line", "above": "above it, on two lines", "plain": "an attribute docstring"}


def test_a_subclass_that_changes_a_default_keeps_the_base_doc():
    from backends.engines.vllm import VLLMConfig
    from workloads.chat import ChatConfig

    assert docs_reference.field_docs(ChatConfig)[
        "output_len"
    ]  # declared again in ChatConfig, documented in WorkloadConfig
    assert docs_reference.field_docs(VLLMConfig)["name"]


def test_the_cli_reference_names_no_path_of_this_machine():
    text = (REPO / "docs" / "reference" / "cli.md").read_text()
    assert str(REPO) not in text and sys.executable not in text
    for command in ("harness.compare", "harness.report", "harness.ab", "harness.agree", "harness.history gate"):
        assert f"`python -m {command}`" in text
    assert "`python scripts/ci/gate.py`" in text and "--allow-other-hardware" in text


def test_the_readme_links_to_pages_that_exist():
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text())
    local = [link for link in links if not re.match(r"[a-z]+://", link)]
    assert len(local) >= 20
    missing = [link for link in local if not (REPO / link).exists()]
    assert not missing, f"the README links to missing files: {missing}"


# --- measurements ----------------------------------------------------------------------------

MEASUREMENTS = REPO / "docs" / "measurements"
BY_HAND = {"index.md", "archive.md"}  # the section's index, and figures kept from before the pages


def test_measurement_pages_are_written_by_a_benchmark():
    pages = sorted(p for p in MEASUREMENTS.glob("*.md") if p.name not in BY_HAND)
    assert len(pages) >= 3
    for page in pages:
        text = page.read_text()
        command = re.search(r"`python (benchmarks/\S+\.py)[^`]*--page docs/measurements/" + re.escape(page.name), text)
        assert command, f"{page.name}: not written by benchmarks/measurement_page.py (no command naming it)"
        assert (REPO / command.group(1)).exists(), f"{page.name}: {command.group(1)} does not exist"
        assert "| date |" in text and "| CPU |" in text and "## Result" in text


def test_the_measurement_helper_writes_a_page(tmp_path):
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import measurement_page
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    page = tmp_path / "example.md"
    with measurement_page.recording(
        page, "A title.\n\nWhat it measures.\n\n    python benchmarks/x.py\n", ["benchmarks/x.py", "--page", str(page)]
    ):
        print("figure 1.0")
    text = page.read_text()
    assert text.startswith("# A title\n")
    assert "figure 1.0" in text and "```bash\npython benchmarks/x.py\n```" in text
    assert "`python benchmarks/x.py --page" in text
    with pytest.raises(RuntimeError), measurement_page.recording(tmp_path / "failed.md", "T."):
        raise RuntimeError("the benchmark failed")
    assert not (tmp_path / "failed.md").exists()


# --- the README's recipes, for real -----------------------------------------------------------


def recipe(name: str) -> str:
    """The code block after ``<!-- recipe: name -->`` in the README."""
    text = README.read_text()
    found = re.search(rf"<!-- recipe: {name} -->\n```(\w*)\n(.*?)\n```", text, re.S)
    assert found, f"the README has no recipe {name}"
    return found.group(2)


def harness_commands(block: str, results: Path) -> list[list[str]]:
    """The block's ``python -m harness…`` commands as argv, run by this interpreter, their
    ``results/`` folders under ``results``."""
    out = []
    for line in block.replace("\\\n", " ").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line.startswith("python -m harness"):
            continue
        argv = shlex.split(line)
        out.append([sys.executable, *[a.replace("results/", f"{results}/") for a in argv[1:]]])
    return out


def run(argv: list[str], cwd: Path, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )
    assert proc.returncode == 0, (
        f"{shlex.join(argv)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc


def with_overrides(argv: list[str], extra: list[str]) -> list[str]:
    """A harness command with more overrides (after a ``--`` where it has one)."""
    return [*argv, *extra]


@pytest.mark.engine
def test_recipe_one_engine(tmp_path):
    (command,) = harness_commands(recipe("one-engine"), tmp_path / "results")
    proc = run(with_overrides(command, [*SHORT, f"output_root={tmp_path / 'results'}", "progress=false"]), tmp_path)
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("results: "), proc.stdout[-2000:]
    folder = Path(last.removeprefix("results: "))
    for name in ("report.html", "summary.json", "requests.parquet"):
        assert (folder / name).exists(), name
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["backend"]["name"] == "llamacpp"


@pytest.mark.engine
def test_recipe_two_engines(tmp_path):
    sweep, compare = harness_commands(recipe("two-engines"), tmp_path / "results")
    run(with_overrides(sweep, [*SHORT, "progress=false"]), tmp_path)
    two = tmp_path / "results" / "two"
    points = sorted(p.name for p in two.iterdir() if p.is_dir())
    assert points == ["0-llamacpp-synthetic", "1-transformers-synthetic"], points
    assert (two / "compare.html").exists() and (two / "sweep.json").exists()  # the sweep writes its own
    proc = run(compare, tmp_path)
    out = tmp_path / "results" / "two-compare"
    for name in ("compare.html", "compare.csv", "differences.csv"):
        assert (out / name).exists(), name
    assert "llamacpp" in proc.stdout and "transformers" in proc.stdout


@pytest.mark.engine
def test_recipe_ci_gate(tmp_path):
    """The workflow's A/B step, as written, with the reference server as the engine and two blocks."""
    workflow = yaml.safe_load(recipe("ci-gate"))
    steps = workflow["jobs"]["bench"]["steps"]
    (step,) = [s for s in steps if "harness.ab" in s.get("run", "")]
    argv = shlex.split(step["run"])
    assert argv[:3] == [".venv/bin/python", "-m", "harness.ab"]
    nightly = next(s for s in steps if "history.sh" in s.get("run", ""))
    assert "python -m harness.history" not in nightly["run"] and (REPO / "scripts/ci/history.sh").exists()
    summary = tmp_path / "summary.md"
    split = argv.index("--")
    options = [REPO.as_posix() if a == "base" else a for a in argv[3:split]]
    options = [str(summary) if a == "$GITHUB_STEP_SUMMARY" else a for a in options]
    common = ["backend=reference" if a.startswith("backend=") else a for a in argv[split + 1 :]]
    command = [
        sys.executable,
        "-m",
        "harness.ab",
        *options,
        "--blocks",
        "2",
        "--max-blocks",
        "2",
        "--seed",
        "0",
        "--out",
        str(tmp_path / "ab"),
        "--noise-dir",
        str(tmp_path / "noise"),
        "--",
        *common,
        *SHORT,
        "backend.ttft_ms=5",
        "backend.itl_ms=2",
    ]
    proc = run(command, REPO, timeout=600)
    decision = json.loads((tmp_path / "ab" / "ab.json").read_text())
    assert decision["status"] != "interrupted", decision.get("status")
    assert summary.read_text().strip(), "the decision was not appended to the job summary"
    assert re.search(r"pass|inconclusive|regression", proc.stdout + proc.stderr, re.I)
