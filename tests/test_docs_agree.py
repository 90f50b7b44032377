"""What the docs say of the code, checked against the code: numbers and lists that the docs and
the docstrings repeat must equal the constant they describe.

- the spin pacing's early start: every "N ms before the due time / each arrival" and "at most N
  ms … per arrival" equals ``harness.client.pacing.SPIN_S``;
- the keys left out of ``config_sha256``: a paragraph, list item or table row that lists them
  lists exactly ``core.hash_versions.left_out()``;
- docs/metrics.md has every metric of harness/results/metrics.py (its module docstring says so).

(Where a chunk is stamped is checked in tests/backends/http/test_client.py, and every file a
doc cites exists: tests/test_doc_references.py.)
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path

from test_doc_references import ROOT, project_files, texts_of

from core.hash_versions import left_out
from harness.client.pacing import SPIN_S
from harness.config import RunConfig
from harness.results import metrics

EARLY_START = (
    re.compile(r"(\d+(?:\.\d+)?)\s*ms before (?:the|each|its) (?:due time|arrival)"),
    re.compile(r"at most (\d+(?:\.\d+)?)\s*ms of (?:a core|yielding) per arrival"),
)
CODE = re.compile(r"`([^`\s]+)`")


def doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(page: Path) -> Iterator[str]:
    """A page's paragraphs, list items and table rows, each as one string."""
    block: list[str] = []
    for line in [*page.read_text(encoding="utf-8").splitlines(), ""]:
        stripped = line.strip()
        if not stripped or re.match(r"^([-*|]|\d+\.)\s?", stripped):
            if block:
                yield " ".join(block)
            block = [stripped] if stripped else []
        else:
            block.append(stripped)


def test_the_spin_pacing_early_start_is_spin_s():
    said = [
        (f"{path.relative_to(ROOT)}:{line}", float(match.group(1)))
        for path in project_files()
        for line, text in texts_of(path)
        for pattern in EARLY_START
        for match in pattern.finditer(" ".join(text.split()))
    ]
    assert said, "no doc gives the early start any more: drop this test, or its patterns missed a rewording"
    assert [(where, ms) for where, ms in said if ms != SPIN_S * 1000] == []


def test_every_listing_of_the_keys_left_out_of_the_hash_is_complete():
    top_keys = {f.name for f in dataclasses.fields(RunConfig)}
    wanted = set(left_out())  # top-level keys, and dotted ones of a section (client.ray_address)

    def named(code: str) -> str:
        key = code.split("=")[0]
        return key if key in wanted else key.split(".")[0]

    listings = []
    for page in doc_pages():
        for block in blocks(page):
            keys = {named(c) for c in CODE.findall(block)} & (top_keys | wanted)
            if ("config_sha256" in block or "hash" in block) and len(keys & wanted) >= 2:
                listings.append((page.name, block[:80], keys))
    assert any(name == "metrics.md" for name, _, _ in listings), "docs/metrics.md no longer lists them"
    assert [(name, start, sorted(keys ^ wanted)) for name, start, keys in listings if keys != wanted] == []


def test_docs_metrics_md_has_every_metric():
    page = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    keys = [*metrics.REQUEST_METRICS, *metrics.RUN_METRICS]
    assert [k for k in keys if f"`{k}`" not in page and f"`throughput.{k}`" not in page] == []
