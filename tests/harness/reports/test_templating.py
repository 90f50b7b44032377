"""The pages' templates: shipped with the package, escaped by default, strict about missing names."""

import ast
import fnmatch
import re
from pathlib import Path

import jinja2
import pytest
from pages import PAYLOAD

from harness.reports import html, templating

REPO = Path(__file__).resolve().parents[3]
TEMPLATES = REPO / "harness" / "reports" / templating.TEMPLATES


def test_every_template_is_package_data_and_compiles():
    # tomllib is Python 3.11+: the one line of [tool.setuptools.package-data] is read as it is written
    line = re.search(r'^"harness\.reports" = (\[.*?\])', (REPO / "pyproject.toml").read_text(), re.MULTILINE)
    shipped = ast.literal_eval(line.group(1))
    files = sorted(p.name for p in TEMPLATES.iterdir() if p.is_file())
    assert files and all(any(fnmatch.fnmatch(f"templates/{f}", pat) for pat in shipped) for f in files), files
    for name in files:
        templating.environment().get_template(name)  # a syntax error fails here


def test_text_from_a_run_is_escaped_and_built_html_is_not():
    section = html.section(PAYLOAD, html.table([{"a": PAYLOAD, "b": None}], ["a", "b"]), PAYLOAD)
    assert "<script>" not in section and "<img" not in section and "&lt;script&gt;" in section
    assert section.count('<div class="scroll"><table class="tbl">') == 1  # the table inside, as HTML
    assert '<td class=""></td>' in section  # None is an empty cell, not "None"
    assert html.banner([], "title") == ""


def test_a_name_the_code_forgot_fails_the_page():
    with pytest.raises(jinja2.UndefinedError):
        templating.render("compare.html.j2", title="t", plotly_js="")
