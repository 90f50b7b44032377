"""The pages' HTML from jinja2 templates (``harness/reports/templates/*.html.j2``), through one
environment with autoescape on: every value a template prints is HTML-escaped unless it is
:class:`markupsafe.Markup` (HTML the code built: a figure's ``<div>``, a finished fragment).

``render`` fills a whole template; ``fragment`` calls one macro of ``fragments.html.j2`` (a
banner, a table, a section…), for the code that still assembles a page's parts in Python.
"""

from __future__ import annotations

import functools
from typing import Any

import jinja2
from markupsafe import Markup

TEMPLATES = "templates"  # inside this package; shipped as package data (pyproject.toml)


def _text(value: Any) -> Any:
    """None as nothing (not "None"), the rest as it is."""
    return "" if value is None else value


@functools.cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("harness.reports", TEMPLATES),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2",), default=True),
        undefined=jinja2.StrictUndefined,  # a name the code forgot to pass fails the page, not blanks it
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["text"] = _text
    return env


def render(template: str, /, **context: Any) -> str:
    """The template named ``template`` filled with ``context``."""
    return environment().get_template(template).render(**context)


@functools.cache
def _fragments() -> Any:
    return environment().get_template("fragments.html.j2").module


def fragment(macro: str, *args: Any, **kwargs: Any) -> Markup:
    """One macro of ``fragments.html.j2`` called with these arguments: HTML, safe to embed."""
    return Markup(getattr(_fragments(), macro)(*args, **kwargs))
