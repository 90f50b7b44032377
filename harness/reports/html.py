"""HTML for the pages (report.html, compare.html): escaping, numbers as text, page parts, tables.

Pages are self-contained: plotly.js is inlined once in the page's head (no CDN, works
offline). Text that comes from a run (prompts, outputs, errors, config) goes through
:func:`esc`, and so does every cell of :func:`table`.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

CSS = """
body { font-family: -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; margin: 0; color: #1f2933; background: #f7f8fa; }
main { max-width: 1280px; margin: 0 auto; padding: 16px 24px 48px; }
h1 { font-size: 22px; margin: 8px 0 4px; word-break: break-all; }
h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid #d9dee5; padding-bottom: 4px; }
.sub { color: #52606d; font-size: 13px; margin: 0 0 6px; }
.note { color: #52606d; font-size: 12.5px; margin: 4px 0 8px; }
.meta { display: grid; grid-template-columns: max-content 1fr; gap: 3px 14px; font-size: 13.5px; background: #fff;
        border: 1px solid #d9dee5; border-radius: 6px; padding: 10px 14px; }
.meta dt { color: #52606d; } .meta dd { margin: 0; word-break: break-word; }
.banner { border-radius: 6px; padding: 10px 14px; margin: 12px 0; font-size: 14px; }
.banner.warning { background: #fff4e5; border: 1px solid #f0a030; }
.banner.error { background: #fdecec; border: 1px solid #d64545; }
.banner.ok { background: #eaf7ee; border: 1px solid #4caf6a; }
.banner.info { background: #eef4fb; border: 1px solid #7aa7d6; }
.banner b { display: block; margin-bottom: 4px; }
.banner ul { margin: 0; padding-left: 20px; }
.cards { display: flex; flex-wrap: wrap; gap: 8px; margin: 8px 0; }
.card { background: #fff; border: 1px solid #d9dee5; border-radius: 6px; padding: 6px 12px; min-width: 110px; }
.card .v { font-size: 18px; font-weight: 600; } .card .k { font-size: 12px; color: #52606d; }
table.tbl { border-collapse: collapse; font-size: 13px; background: #fff; margin: 6px 0; }
table.tbl th, table.tbl td { border: 1px solid #d9dee5; padding: 3px 8px; text-align: right; vertical-align: top; }
table.tbl th { background: #eef1f5; }
table.tbl td.text, table.tbl th.text { text-align: left; }
.excerpt { white-space: pre-wrap; max-height: 5.5em; overflow: auto; max-width: 420px; text-align: left;
           font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12px; }
.figure { background: #fff; border: 1px solid #d9dee5; border-radius: 6px; margin: 10px 0; padding: 4px; }
.scroll { overflow-x: auto; }
pre { background: #fff; border: 1px solid #d9dee5; border-radius: 6px; padding: 8px; font-size: 12px; overflow: auto; max-height: 480px; }
details summary { cursor: pointer; font-weight: 600; margin: 10px 0; }
.pill { display: inline-block; border-radius: 10px; padding: 1px 9px; font-size: 12px; font-weight: 600; vertical-align: middle; }
.pill.complete, .pill.faster { background: #d8f0df; color: #1e6b37; }
.pill.interrupted, .pill.slower { background: #fde2c8; color: #8a4a05; }
.pill.failed { background: #f9d3d3; color: #8a1c1c; }
.pill.nodiff, .pill.nodata { background: #e4e7eb; color: #3e4c59; }
"""


def esc(value: Any) -> str:
    """HTML-escaped text (quotes too); None becomes an empty string."""
    return html.escape("" if value is None else str(value), quote=True)


def excerpt(text: Any, limit: int = 240) -> str:
    """The first ``limit`` characters of a text, with an ellipsis when cut (not escaped)."""
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return ""
    text = str(text)
    return text if len(text) <= limit else text[:limit] + "…"


def is_num(value: Any) -> bool:
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


def plotly_js() -> str:
    """plotly.js, inlined once per page (about 4.8 MB)."""
    from plotly.offline import get_plotlyjs

    js = get_plotlyjs()
    # plotly.js contains no closing script tag today; keep it that way if that ever changes
    js = js.replace("</script", "<\\/script")
    return f'<script type="text/javascript">{js}</script>'


def page(title: str, body: str) -> str:
    """A whole HTML page: escaped title, the CSS, plotly.js once in the head, then ``body``."""
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(title)}</title>\n<style>{CSS}</style>\n{plotly_js()}\n</head>\n"
        f"<body>\n<main>\n{body}\n</main>\n</body>\n</html>\n"
    )


def banner(messages: Sequence[str], title: str, kind: str = "warning") -> str:
    """A box of escaped messages at the top of a page; empty when there are none."""
    if not messages:
        return ""
    items = "".join(f"<li>{esc(m)}</li>" for m in messages)
    return f'<div class="banner {esc(kind)}" role="alert"><b>{esc(title)}</b><ul>{items}</ul></div>'


def cards(items: Sequence[tuple[str, str]]) -> str:
    """Key figures as small cards: (label, already formatted value)."""
    inner = "".join(
        f'<div class="card"><div class="v">{esc(v)}</div><div class="k">{esc(k)}</div></div>' for k, v in items
    )
    return f'<div class="cards">{inner}</div>'


def meta_list(items: Sequence[tuple[str, str]]) -> str:
    inner = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in items)
    return f'<dl class="meta">{inner}</dl>'


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
    head = "".join(
        f'<th class="{"text" if c in text_columns or c in excerpt_columns else ""}">{esc(c)}</th>' for c in columns
    )
    body = []
    for row in rows:
        cells = []
        for c in columns:
            value = row.get(c, "")
            if c in link_columns:
                cells.append(
                    f'<td class="text"><a href="{esc(value[0])}">{esc(value[1])}</a></td>' if value else "<td></td>"
                )
            elif c in excerpt_columns:
                cells.append(f'<td class="text"><div class="excerpt">{esc(value)}</div></td>')
            elif classes and c in classes:
                cells.append(f'<td class="text"><span class="pill {esc(classes[c](value))}">{esc(value)}</span></td>')
            else:
                cells.append(f'<td class="{"text" if c in text_columns else ""}">{esc(value)}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f'<div class="scroll"><table class="tbl"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def section(title: str, content: str, note: str = "") -> str:
    note_html = f'<p class="note">{esc(note)}</p>' if note else ""
    return f"<section><h2>{esc(title)}</h2>{note_html}{content}</section>"
