"""HTML and plotly helpers shared by the per-run report and the comparison of runs.

Pages are self-contained: plotly.js is inlined once in the page's head (no CDN, works
offline) and every figure is a ``<div>`` drawn by ``Plotly.newPlot``. Text that comes from a
run (prompts, outputs, errors, config) goes through :func:`esc`; figure data is serialized by
plotly, which writes ``<``, ``>`` and ``/`` as JSON escapes, so nothing can close a
``<script>`` early.

Why figures are built as plain JSON (:class:`Figure`) and not as plotly's ``graph_objects``:
those validate every property as it is set, and the pages write a figure per panel, per run and
per sweep point. ``benchmarks/figure_json.py`` (the five figures of a 1,000-request report.html,
the same JSON out; best of 5, CPU time), 2026-12-05, 2-core x86_64, plotly 7.1.0: ours 1.4–1.5
ms, ``go.Figure(…).to_json()`` 25–27 ms, and ``make_subplots`` 14 ms more for the two grids:
about 40 ms a report, against 0.14 s for the whole report (``benchmarks/report_build.py``).
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Optional

import numpy as np
import pandas as pd
from markupsafe import Markup

from harness.reports.templating import fragment

PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#e15759",
    "#76b7b2",
    "#59a14f",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
)
PLOT_CONFIG = {"displaylogo": False, "responsive": True}


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


# --- numbers ------------------------------------------------------------------------------


def values(series: Optional[pd.Series]) -> np.ndarray:
    """A column's finite values as floats (None/NaN dropped)."""
    if series is None:
        return np.empty(0)
    arr = pd.to_numeric(series, errors="coerce").to_numpy(dtype=float)
    return arr[np.isfinite(arr)]


def cdf_points(vals: Iterable[float], max_points: int = 1500) -> tuple[np.ndarray, np.ndarray]:
    """Empirical CDF: x = sorted values, y = rank / n; at most ``max_points`` evenly spaced ranks."""
    x = np.sort(np.asarray(list(vals) if not isinstance(vals, np.ndarray) else vals, dtype=float))
    n = x.size
    if n == 0:
        return x, x
    y = np.arange(1, n + 1) / n
    if n > max_points:
        keep = np.unique(np.linspace(0, n - 1, max_points).round().astype(int))
        x, y = x[keep], y[keep]
    return x, y


def nice_bin(span: float, target_bins: int = 60) -> float:
    """A bin width of 1, 2 or 5 × 10^k that cuts ``span`` into about ``target_bins`` bins."""
    if span <= 0:
        return 1.0
    raw = span / target_bins
    base = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * base:
            return m * base
    return 10 * base


# --- plotly -------------------------------------------------------------------------------


_TEMPLATE: Optional[dict[str, Any]] = None


def template() -> dict[str, Any]:
    """The pages' template as JSON: plotly_white's layout, and its defaults for the trace types
    the pages draw only (its defaults for 24 trace types would be written into every figure)."""
    global _TEMPLATE
    if _TEMPLATE is None:
        import plotly.io as pio

        white = pio.templates["plotly_white"].to_plotly_json()
        data = {kind: white["data"][kind] for kind in TRACE_TYPES if kind in white["data"]}
        _TEMPLATE = {"layout": white["layout"], "data": data}
    return _TEMPLATE


TRACE_TYPES = ("scatter", "bar", "histogram", "box")


def trace(kind: str, **props: Any) -> dict[str, Any]:
    """A plotly trace as JSON, e.g. ``trace("scatter", x=…, y=…, mode="lines")``; nested
    properties are dicts (``marker=dict(color=…)``)."""
    assert kind in TRACE_TYPES, kind
    return {"type": kind, **props}


def _deep_update(target: dict[str, Any], update: dict[str, Any]) -> None:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _deep_update(target[key], value)
        else:
            target[key] = value


def _axis_props(props: dict[str, Any]) -> dict[str, Any]:
    """``title_text`` (plotly's shorthand, the only one the pages use) as ``title.text``."""
    if "title_text" in props:
        props = dict(props)
        props["title"] = {"text": props.pop("title_text")}
    return props


class Figure:
    """A plotly figure kept as plain JSON (``data``: traces, ``layout``), with the few calls of
    plotly's Figure the pages use: subplots in a grid, traces added to a cell, axes updated by
    cell, vertical lines. Written with ``validate=False``: plotly.graph_objects checked every
    property on each call, which was most of a page's build time (0.7 s of pages per sweep point).

    Cells are numbered row by row from the top left, as make_subplots does: cell k has axes
    ``x{k}`` and ``y{k}`` (k = 1 has ``x`` and ``y``); a figure with a secondary y axis has one
    cell, whose second y axis is ``y2``.
    """

    def __init__(
        self,
        rows: int = 1,
        cols: int = 1,
        titles: Sequence[str] = (),
        height: int = 360,
        shared_xaxes: bool = False,
        shared_yaxes: bool = False,
        secondary_y: bool = False,
        horizontal_spacing: Optional[float] = None,
        vertical_spacing: Optional[float] = None,
    ):
        self.rows, self.cols, self.secondary_y = rows, cols, secondary_y
        self.data: list[dict[str, Any]] = []
        self.layout: dict[str, Any] = {
            "template": template(),
            "height": height,
            "margin": dict(l=60, r=20, t=50, b=50),
            "legend": dict(orientation="h", yanchor="bottom", y=1.06, xanchor="left", x=0),
            "hoverlabel": dict(align="left"),
        }
        if secondary_y:
            assert rows == cols == 1, "a secondary y axis only on a one-cell figure"
            self.layout.update(
                xaxis={"anchor": "y", "domain": [0.0, 0.94]},
                yaxis={"anchor": "x", "domain": [0.0, 1.0]},
                yaxis2={"anchor": "x", "overlaying": "y", "side": "right"},
            )
            return
        if rows * cols == 1 and not titles:
            return
        h = 0.2 / cols if horizontal_spacing is None else horizontal_spacing
        v = (0.5 if titles else 0.3) / rows if vertical_spacing is None else vertical_spacing  # room for titles
        width, height_frac = (1 - h * (cols - 1)) / cols, (1 - v * (rows - 1)) / rows
        annotations = []
        for r in range(1, rows + 1):
            for c in range(1, cols + 1):
                k = self._cell(r, c)
                x0 = (c - 1) * (width + h)
                y1 = 1 - (r - 1) * (height_frac + v)
                xaxis: dict[str, Any] = {"anchor": f"y{k or ''}", "domain": [x0, x0 + width]}
                yaxis: dict[str, Any] = {"anchor": f"x{k or ''}", "domain": [y1 - height_frac, y1]}
                if shared_xaxes and r < rows:  # every column's x axes follow its bottom one
                    xaxis.update(matches=f"x{self._cell(rows, c) or ''}", showticklabels=False)
                if shared_yaxes and c > 1:  # every row's y axes follow its first one
                    yaxis.update(matches=f"y{self._cell(r, 1) or ''}", showticklabels=False)
                self.layout[f"xaxis{k or ''}"], self.layout[f"yaxis{k or ''}"] = xaxis, yaxis
                i = (r - 1) * cols + (c - 1)
                if i < len(titles):
                    annotations.append(
                        {
                            "font": {"size": 16},
                            "showarrow": False,
                            "text": titles[i],
                            "x": x0 + width / 2,
                            "xanchor": "center",
                            "xref": "paper",
                            "y": y1,
                            "yanchor": "bottom",
                            "yref": "paper",
                        }
                    )
        if annotations:
            self.layout["annotations"] = annotations

    def _cell(self, row: int, col: int) -> int:
        """The cell's axis number; 0 for the first (whose axes are ``x`` and ``y``)."""
        k = (row - 1) * self.cols + col
        return 0 if k == 1 else k

    def _cells(self, row: Optional[int], col: Optional[int]) -> list[int]:
        return [
            self._cell(r, c)
            for r in range(1, self.rows + 1)
            for c in range(1, self.cols + 1)
            if (row is None or r == row) and (col is None or c == col)
        ]

    def add_trace(
        self, trace: dict[str, Any], row: Optional[int] = None, col: Optional[int] = None, secondary_y: bool = False
    ) -> None:
        if secondary_y:
            trace = {**trace, "yaxis": "y2"}
        elif row is not None and col is not None:
            k = self._cell(row, col) or ""
            trace = {**trace, "xaxis": f"x{k}", "yaxis": f"y{k}"}
        self.data.append(trace)

    def update_layout(self, **props: Any) -> None:
        _deep_update(self.layout, props)

    def update_xaxes(self, row: Optional[int] = None, col: Optional[int] = None, **props: Any) -> None:
        for k in self._cells(row, col):
            _deep_update(self.layout.setdefault(f"xaxis{k or ''}", {}), _axis_props(props))

    def update_yaxes(
        self, row: Optional[int] = None, col: Optional[int] = None, secondary_y: Optional[bool] = None, **props: Any
    ) -> None:
        names = [f"yaxis{k or ''}" for k in self._cells(row, col)]
        if self.secondary_y:
            names = {None: ["yaxis", "yaxis2"], False: ["yaxis"], True: ["yaxis2"]}[secondary_y]
        for name in names:
            _deep_update(self.layout.setdefault(name, {}), _axis_props(props))

    def add_vline(
        self,
        x: float | str,
        line: Optional[dict[str, Any]] = None,
        row: Optional[int] = None,
        col: Optional[int] = None,
        annotation_text: Optional[str] = None,
    ) -> None:
        """A vertical line at ``x`` (a number, or a date on a date axis) across the cell (or every
        cell), with a label at its top right."""
        for k in self._cells(row, col):
            xref, yref = f"x{k or ''}", f"y{k or ''} domain"
            self.layout.setdefault("shapes", []).append(
                {"type": "line", "x0": x, "x1": x, "xref": xref, "y0": 0, "y1": 1, "yref": yref, "line": line or {}}
            )
            if annotation_text:
                self.layout.setdefault("annotations", []).append(
                    {
                        "showarrow": False,
                        "text": annotation_text,
                        "x": x,
                        "xanchor": "left",
                        "xref": xref,
                        "y": 1,
                        "yanchor": "top",
                        "yref": yref,
                    }
                )

    def add_vrect(
        self,
        x0: float,
        x1: float,
        fillcolor: str,
        opacity: float = 0.12,
        row: Optional[int] = None,
        col: Optional[int] = None,
        annotation_text: Optional[str] = None,
    ) -> None:
        """A shaded band from x0 to x1 across the cell (or every cell), behind the traces, labelled at its top left."""
        for k in self._cells(row, col):
            xref, yref = f"x{k or ''}", f"y{k or ''} domain"
            self.layout.setdefault("shapes", []).append(
                {
                    "type": "rect",
                    "x0": x0,
                    "x1": x1,
                    "xref": xref,
                    "y0": 0,
                    "y1": 1,
                    "yref": yref,
                    "layer": "below",
                    "fillcolor": fillcolor,
                    "opacity": opacity,
                    "line": {"width": 0},
                }
            )
            if annotation_text:
                self.layout.setdefault("annotations", []).append(
                    {
                        "showarrow": False,
                        "text": annotation_text,
                        "x": x0,
                        "xanchor": "left",
                        "xref": xref,
                        "y": 1,
                        "yanchor": "top",
                        "yref": yref,
                        "font": {"size": 11},
                    }
                )

    def to_dict(self) -> dict[str, Any]:
        return {"data": [_binary_arrays(t) for t in self.data], "layout": self.layout}


# plotly.js's typed arrays: numbers as base64 bytes, about a third the size of JSON lists
_TYPED = {
    "int8": "i1",
    "uint8": "u1",
    "int16": "i2",
    "uint16": "u2",
    "int32": "i4",
    "uint32": "u4",
    "float32": "f4",
    "float64": "f8",
}


def _typed_array(value: Any) -> Any:
    """A numeric numpy array, pandas Series or Index as a plotly.js typed array spec
    (``{"dtype", "bdata"[, "shape"]}``); anything else unchanged. int64 becomes int32 when it fits."""
    if isinstance(value, (pd.Series, pd.Index)):
        value = value.to_numpy()
    if not isinstance(value, np.ndarray) or value.size == 0:
        return value
    if value.dtype == np.int64:
        info = np.iinfo(np.int32)
        value = (
            value.astype(np.int32) if info.min <= value.min() and value.max() <= info.max else value.astype(np.float64)
        )
    code = _TYPED.get(str(value.dtype))
    if code is None:
        return value
    spec = {"dtype": code, "bdata": base64.b64encode(np.ascontiguousarray(value).tobytes()).decode("ascii")}
    if value.ndim > 1:
        spec["shape"] = ", ".join(str(n) for n in value.shape)
    return spec


def _binary_arrays(trace: dict[str, Any]) -> dict[str, Any]:
    """The trace with its numeric arrays (and those one level down, e.g. marker.color) as typed arrays."""
    return {
        k: {kk: _typed_array(vv) for kk, vv in v.items()} if isinstance(v, dict) else _typed_array(v)
        for k, v in trace.items()
    }


def figure(
    rows: int = 1, cols: int = 1, titles: Optional[Sequence[str]] = None, height: int = 360, **kwargs: Any
) -> Figure:
    """A figure with the pages' look; subplots when rows × cols > 1 (see :class:`Figure`)."""
    return Figure(rows, cols, titles or (), height, **kwargs)


# the latency panels every page draws as CDFs: (column of the requests table, its label)
LATENCY_PANELS = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E"))


def latency_cdfs(lines: Sequence[tuple[str, Callable[[str], np.ndarray]]], height: int = 380) -> Optional[Figure]:
    """TTFT, TPOT and E2E side by side (ms), one empirical CDF per ``(name, values_of)`` in each
    panel, colored by its place in ``lines``; ``values_of(column)`` gives the line's values in
    seconds and ``name`` is already escaped. None when no line has a value to draw."""
    fig = figure(1, 3, [f"{label} (ms)" for _, label in LATENCY_PANELS], height=height)
    drawn = False
    for i, (name, values_of) in enumerate(lines):
        for j, (column, label) in enumerate(LATENCY_PANELS, start=1):
            x, y = cdf_points(values_of(column) * 1000)
            if x.size == 0:
                continue
            drawn = True
            fig.add_trace(
                trace(
                    "scatter",
                    x=x,
                    y=y,
                    mode="lines",
                    line=dict(color=color(i), shape="hv"),
                    name=name,
                    legendgroup=f"line{i}",
                    showlegend=j == 1,
                    hovertemplate=f"{name}<br>{label} %{{x:.1f}} ms, fraction ≤ %{{y:.3f}}<extra></extra>",
                ),
                1,
                j,
            )
            fig.update_xaxes(title_text="ms", row=1, col=j)
    if not drawn:
        return None
    fig.update_yaxes(title_text="fraction of requests", range=[0, 1.02], row=1, col=1)
    return fig


def figure_div(fig: Figure, div_id: str) -> str:
    """The figure as a ``<div>`` plus its ``Plotly.newPlot`` script; plotly.js is not included."""
    import plotly.io as pio

    div = pio.to_html(
        fig.to_dict(),
        include_plotlyjs=False,
        full_html=False,
        div_id=div_id,
        config=PLOT_CONFIG,
        default_height=f"{fig.layout.get('height') or 360}px",
        validate=False,
    )
    return str(fragment("figure", div_id, Markup(div)))


# --- HTML ---------------------------------------------------------------------------------
