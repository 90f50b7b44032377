"""Which tool wrote a result file, and its runs: the one entry to the importers.

A path is a file or a folder. A folder is searched for the files the tools write by default
(AIPerf's artifact folder with ``profile_export_aiperf.json``; GuideLLM's ``benchmarks.json``;
any ``*.json`` that is a vllm bench serve result). A file is recognized by its content, not
its name: a vllm bench result has ``num_prompts`` and ``request_throughput``, a GuideLLM
report ``metadata.guidellm_version``, an AIPerf export ``aiperf_version`` (its records file,
``profile_export.jsonl``, is read beside it).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from core.errors import HarnessError
from harness.formats import aiperf, guidellm, vllm_bench
from harness.formats.definitions import AIPERF, GUIDELLM, TITLES, VLLM_BENCH
from harness.formats.imported import ImportedRun

TOOL_CHOICES = (VLLM_BENCH, GUIDELLM, AIPERF)


class NotAResultFile(HarnessError, ValueError):
    """A file no importer recognizes; said in one line."""


def result_files(path: Path) -> list[Path]:
    """The result files of ``path``: itself, or the ones a folder holds (a records file is read
    with its summary, not alone)."""
    path = Path(path)
    if path.is_file():
        if path.suffix == ".jsonl" and (path.with_name(aiperf.SUMMARY_NAME)).is_file():
            return [path.with_name(aiperf.SUMMARY_NAME)]
        return [path]
    if not path.is_dir():
        raise NotAResultFile(f"{path} does not exist")
    if (path / aiperf.SUMMARY_NAME).is_file():
        return [path / aiperf.SUMMARY_NAME]
    found = sorted(p for p in path.glob("*.json") if p.is_file() and not p.name.startswith("."))
    if not found:
        raise NotAResultFile(f"{path} holds no result file (*.json) of vllm bench serve, GuideLLM or AIPerf")
    return found


def tool_of(data: Any) -> Optional[str]:
    """The tool that wrote a parsed file, or None."""
    if guidellm.looks_like(data):
        return GUIDELLM
    if aiperf.looks_like(data):
        return AIPERF
    if vllm_bench.looks_like(data):
        return VLLM_BENCH
    return None


def read_results(
    paths: Sequence[Path], tool: Optional[str] = None, tool_version: Optional[str] = None
) -> list[ImportedRun]:
    """Every run of the result files at ``paths`` (files or folders). ``tool``: insist on one tool
    (a file of another is refused); ``tool_version``: the version where the file does not say it."""
    runs: list[ImportedRun] = []
    for path in paths:
        for file in result_files(Path(path)):
            runs.extend(read_file(file, tool, tool_version))
    return runs


def read_file(path: Path, tool: Optional[str] = None, tool_version: Optional[str] = None) -> list[ImportedRun]:
    """The runs of one result file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise NotAResultFile(f"{path}: cannot read it ({exc})") from None
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError:
        lines = [line for line in text.splitlines() if line.strip()]
        try:  # JSON Lines: vllm bench serve --append-result
            data = json.loads(lines[0]) if lines else None
        except json.JSONDecodeError:
            data = None
    found = tool_of(data)
    if found is None:
        raise NotAResultFile(
            f"{path} is not a result file of vllm bench serve (--save-result), GuideLLM (benchmarks.json) "
            f"or AIPerf (profile_export_aiperf.json)"
        )
    if tool is not None and tool != found:
        raise NotAResultFile(f"{path} was written by {TITLES[found]}, not {TITLES[tool]}")
    try:
        if found == VLLM_BENCH:
            return vllm_bench.read(path, tool_version)
        if found == GUIDELLM:
            return guidellm.read(data, path, tool_version)
        return aiperf.read(data, path, tool_version)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise NotAResultFile(f"{path}: a {TITLES[found]} file this importer cannot read ({exc!r})") from None
