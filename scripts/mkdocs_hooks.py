"""mkdocs hooks (mkdocs.yml ``hooks``): every page of docs/measurements/ in the Measurements section.

The measurement pages are written by benchmarks (benchmarks/measurement_page.py), so the nav in
mkdocs.yml cannot name them all: each one not named there is added, in file-name order, after the
section's index. A benchmark that writes a new page needs no edit here or in mkdocs.yml.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SECTION = "Measurements"
FOLDER = "measurements"


def on_config(config: Any) -> Any:
    for item in config["nav"] or []:
        if isinstance(item, dict) and SECTION in item:
            pages = item[SECTION]
            named = {entry if isinstance(entry, str) else next(iter(entry.values())) for entry in pages}
            for path in sorted((Path(config["docs_dir"]) / FOLDER).glob("*.md")):
                uri = f"{FOLDER}/{path.name}"
                if uri not in named:
                    pages.append(uri)
    return config
