"""HTML for the pages (report.html, compare.html, trend.html): escaping, numbers as text, and the
page parts, which the templates of ``harness/reports/templates`` render (:mod:`harness.reports.templating`).

Pages are self-contained: plotly.js is inlined once in the page's head (no CDN, works
offline). The templates escape every value they print, so text that comes from a run (prompts,
outputs, errors, config) is shown as text. The parts return HTML as a plain ``str`` (not
:class:`markupsafe.Markup`, whose ``+`` would escape the plain HTML the callers join it with);
:func:`section` and :func:`page` take HTML the code built as it is. :func:`esc` remains for text
plotly draws as HTML (trace names, hover text).
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any, Optional, TypeGuard

import numpy as np
from markupsafe import Markup

from harness.reports.templating import fragment, render


def esc(value: Any) -> str:
    """HTML-escaped text (quotes too); None becomes an empty string."""
    return html.escape("" if value is None else str(value), quote=True)


def excerpt(text: Any, limit: int = 240) -> str:
    """The first ``limit`` characters of a text, with an ellipsis when cut (not escaped)."""
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return ""
    text = str(text)
    return text if len(text) <= limit else text[:limit] + "…"


def is_num(value: Any) -> TypeGuard[float | np.integer | np.floating]:
    """A finite number (Python's or numpy's)."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not (
        isinstance(value, (float, np.floating)) and not math.isfinite(value)
    )


def fmt(value: Any, digits: int = 1, scale: float = 1.0, unit: str = "") -> str:
    """A number to text with ``digits`` decimals after multiplying by ``scale``; '–' when missing."""
    if not is_num(value):
        return "–"
    return f"{value * scale:,.{digits}f}{unit}"


def fmt_bytes(n: Any) -> str:
    if not is_num(n) or not n:
        return "–"
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def plotly_js() -> Markup:
    """plotly.js, inlined once per page (about 4.8 MB), to go inside a ``<script>`` element."""
    from plotly.offline import get_plotlyjs

    # plotly.js contains no closing script tag today; keep it that way if that ever changes
    return Markup(get_plotlyjs().replace("</script", "<\\/script"))


def page(template: str, title: str, /, **context: Any) -> str:
    """A whole page from its template (which extends ``page.html.j2``): the title, the CSS and
    plotly.js in the head, then the template's own block. ``context`` values that are HTML the
    code built (the parts above) go in as :class:`markupsafe.Markup` (:func:`safe`)."""
    return render(template, title=title, plotly_js=plotly_js(), **context)


def safe(parts: Any) -> Any:
    """HTML the code built (one ``str`` or a list), marked so a template takes it as it is."""
    return Markup(parts) if isinstance(parts, str) else [Markup(p) for p in parts]


def banner(messages: Sequence[str], title: str, kind: str = "warning") -> str:
    """A box of escaped messages at the top of a page; empty when there are none."""
    return str(fragment("banner", messages, title, kind))


def cards(items: Sequence[tuple[str, str]]) -> str:
    """Key figures as small cards: (label, already formatted value)."""
    return str(fragment("cards", items))


def meta_list(items: Sequence[tuple[str, str]]) -> str:
    return str(fragment("meta_list", items))


def heading(text: str) -> str:
    """A heading inside a section."""
    return str(fragment("heading", text))


def note(text: str) -> str:
    """A short escaped paragraph in the notes' style."""
    return str(fragment("note", text))


def details(summary: str, text: str) -> str:
    """``text`` shown folded under ``summary`` (a file's content under its name)."""
    return str(fragment("details", summary, text))


def table(
    rows: Sequence[dict[str, Any]],
    columns: Sequence[str],
    text_columns: Sequence[str] = (),
    excerpt_columns: Sequence[str] = (),
    classes: Optional[dict[str, Any]] = None,
    link_columns: Sequence[str] = (),
) -> str:
    """An HTML table of already formatted cells; every header and cell is escaped.

    ``text_columns`` align left; ``excerpt_columns`` are shown in a small scrolling box;
    ``classes`` maps a column to a function of the cell's value giving the CSS class of a pill;
    ``link_columns`` hold (href, text) pairs or "" (both escaped).
    """
    return str(fragment("table", rows, columns, text_columns, excerpt_columns, classes, link_columns))


def section(title: str, content: str, note: str = "") -> str:
    """A titled section: ``content`` is HTML the code built (taken as it is), ``note`` is text."""
    return str(fragment("section", title, Markup(content), note))
