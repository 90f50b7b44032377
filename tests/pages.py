"""Pages in a real browser: what every page test checks, and text no page may run."""

from __future__ import annotations

from pathlib import Path

# text a prompt, an output or an error might carry: none of it may run in the report
PAYLOAD = (
    '<script>window.__pwned = 1; document.title = "pwned"; alert("pwned")</script>'
    '</script><img src=x onerror="window.__pwned = 2">'
)

PWNED_JS = "typeof window.__pwned === 'undefined' && !document.title.includes('pwned')"


def assert_renders(chromium, path: Path, shot: Path, expected_plots: list[str], evaluate=None):
    page = chromium.open(
        path, screenshot=shot, evaluate={"safe": PWNED_JS, "text": "document.body.innerText", **(evaluate or {})}
    )
    assert page.values["safe"] is True  # no script from the run's text ran
    assert page.errors == [], page.errors
    assert page.dialogs == []
    assert [p["id"] for p in page.plots] == expected_plots
    for p in page.plots:  # plotly drew each one: its SVG and at least one trace
        assert p["plotly"] and p["svg"] >= 1 and p["traces"] >= 1 and p["height"] > 100, p
    assert shot.exists() and shot.stat().st_size > 10_000
    return page
