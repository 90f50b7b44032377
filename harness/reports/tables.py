"""Tables of already formatted cells, as fixed-width console text and as GitHub markdown.

Cells are strings; formatting numbers is the caller's (it knows each metric's digits).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence

CONSOLE_WIDTH = 120  # what compare's console output fits in
GAP = "  "


def header_lines(text: str, unit: str = "", width: int = 6) -> list[str]:
    """A column header stacked over a few lines (words kept whole), the unit on the last one."""
    lines = textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False) or [""]
    return lines + [unit] if unit else lines


def aligned(n: int, align: str = "") -> str:
    """Each of ``n`` columns' alignment, ``l`` or ``r``: as given, else the first left, the rest right."""
    return (align or "l").ljust(n, "r")[:n]


def text_table(
    headers: Sequence[Sequence[str]], rows: Sequence[Sequence[str]], align: str = "", indent: str = ""
) -> list[str]:
    """Lines of a fixed-width table; each header is a list of lines (bottom-aligned); ``align``:
    one ``l`` or ``r`` per column (default: the first column left, the others right)."""
    sides = aligned(len(headers), align)
    height = max((len(h) for h in headers), default=0)
    stacked = [[""] * (height - len(h)) + list(h) for h in headers]
    widths = [max([len(x) for x in h] + [len(r[i]) for r in rows]) for i, h in enumerate(stacked)]

    def line(cells: Sequence[str]) -> str:
        parts = [c.ljust(w) if side == "l" else c.rjust(w) for c, w, side in zip(cells, widths, sides)]
        return (indent + GAP.join(parts)).rstrip()

    return [line([h[k] for h in stacked]) for k in range(height)] + [line(r) for r in rows]


def wrap(text: str, indent: str = "  ", width: int = CONSOLE_WIDTH, first: str = "") -> list[str]:
    """``text`` wrapped to ``width``; the first line starts with ``first``, the others with ``indent``.
    Words are never split, so a single word longer than the width (a path) stays whole."""
    return textwrap.wrap(
        text, width, initial_indent=first, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
    ) or [first.rstrip()]


# --- markdown -----------------------------------------------------------------------------

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>|~#])")


def md_text(value: object) -> str:
    """Text safe in a markdown table cell or list item: on one line, markdown and HTML
    characters backslash-escaped (so ``|`` cannot end the cell and ``<b>`` shows as text)."""
    text = " ".join(str("" if value is None else value).split())
    return _MD_SPECIAL.sub(r"\\\1", text)


def md_table(columns: Sequence[str], rows: Sequence[Sequence[str]], align: str = "") -> str:
    """A GitHub markdown table; cells are escaped here; ``align`` as for :func:`text_table`."""
    head = "| " + " | ".join(md_text(c) for c in columns) + " |"
    rule = "|" + "|".join("---" if side == "l" else "--:" for side in aligned(len(columns), align)) + "|"
    body = ["| " + " | ".join(md_text(c) for c in row) + " |" for row in rows]
    return "\n".join([head, rule, *body])
