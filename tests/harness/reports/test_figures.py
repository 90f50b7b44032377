import base64
import json

import numpy as np
import pandas as pd
import pytest

from harness.reports import figures


def test_a_grid_numbers_its_cells_row_by_row_and_titles_them():
    fig = figures.figure(2, 2, ["a", "b", "c"], height=400)
    layout = fig.layout
    assert layout["height"] == 400 and layout["template"] is figures.template()
    assert [layout[k]["anchor"] for k in ("xaxis", "xaxis2", "xaxis3", "xaxis4")] == ["y", "y2", "y3", "y4"]
    assert layout["xaxis"]["domain"] == pytest.approx([0, 0.45]) and layout["xaxis2"]["domain"] == pytest.approx(
        [0.55, 1]
    )
    # rows 0.25 apart (0.5 / rows: room for the titles, as make_subplots leaves)
    assert layout["yaxis"]["domain"] == pytest.approx([0.625, 1]) and layout["yaxis3"]["domain"] == pytest.approx(
        [0, 0.375]
    )
    assert [a["text"] for a in layout["annotations"]] == ["a", "b", "c"]  # the fourth cell has no title
    assert layout["annotations"][2]["y"] == pytest.approx(0.375)


def test_traces_and_axes_go_to_their_cell():
    fig = figures.figure(1, 3, ["x", "y", "z"])
    fig.add_trace(figures.trace("scatter", x=[1], y=[2]), 1, 1)
    fig.add_trace(figures.trace("bar", x=[1], y=[2]), 1, 3)
    fig.update_xaxes(title_text="ms", row=1, col=3)
    fig.update_yaxes(range=[0, 1])
    assert [(t["type"], t["xaxis"], t["yaxis"]) for t in fig.data] == [("scatter", "x", "y"), ("bar", "x3", "y3")]
    assert fig.layout["xaxis3"]["title"] == {"text": "ms"} and "title" not in fig.layout["xaxis"]
    assert all(fig.layout[k]["range"] == [0, 1] for k in ("yaxis", "yaxis2", "yaxis3"))


def test_shared_axes_follow_one_cell():
    rows = figures.figure(2, 1, ["a", "b"], shared_xaxes=True, vertical_spacing=0.12).layout
    assert (
        rows["xaxis"]["matches"] == "x2"
        and rows["xaxis"]["showticklabels"] is False
        and "matches" not in rows["xaxis2"]
    )
    cols = figures.figure(1, 3, ["a", "b", "c"], shared_yaxes=True).layout
    assert [cols[k].get("matches") for k in ("yaxis", "yaxis2", "yaxis3")] == [None, "y", "y"]


def test_a_secondary_y_axis_overlays_the_first():
    fig = figures.figure(secondary_y=True)
    fig.add_trace(figures.trace("bar", x=[1], y=[1]), secondary_y=False)
    fig.add_trace(figures.trace("scatter", x=[1], y=[1]), secondary_y=True)
    fig.update_yaxes(title_text="right", secondary_y=True)
    assert "yaxis" not in fig.data[0] and fig.data[1]["yaxis"] == "y2"
    assert fig.layout["yaxis2"]["overlaying"] == "y" and fig.layout["yaxis2"]["title"] == {"text": "right"}
    assert "title" not in fig.layout["yaxis"]


def test_a_vertical_line_spans_its_cell():
    fig = figures.figure(1, 2, ["a", "b"])
    fig.add_vline(x=0, line=dict(width=1), row=1, col=2, annotation_text="here")
    assert fig.layout["shapes"] == [
        {"type": "line", "x0": 0, "x1": 0, "xref": "x2", "y0": 0, "y1": 1, "yref": "y2 domain", "line": {"width": 1}}
    ]
    assert fig.layout["annotations"][-1]["text"] == "here" and fig.layout["annotations"][-1]["xref"] == "x2"


def _decode(spec):
    dtype = {"f8": "<f8", "f4": "<f4", "i4": "<i4", "i1": "<i1"}[spec["dtype"]]
    return np.frombuffer(base64.b64decode(spec["bdata"]), dtype=dtype)


def test_numeric_arrays_are_written_as_typed_arrays():
    fig = figures.figure()
    fig.add_trace(
        figures.trace(
            "scatter",
            x=np.array([1.5, np.nan, 3.0]),
            y=pd.Series([1, 2, 3]),
            text=["a", "b", "c"],
            marker=dict(color=np.array([0.1, 0.2, 0.3], dtype=np.float32)),
            customdata=np.arange(6, dtype=np.float32).reshape(3, 2),
        )
    )
    trace = fig.to_dict()["data"][0]
    assert trace["x"]["dtype"] == "f8" and np.array_equal(_decode(trace["x"]), [1.5, np.nan, 3.0], equal_nan=True)
    assert trace["y"]["dtype"] == "i4" and list(_decode(trace["y"])) == [1, 2, 3]  # int64 narrowed for plotly.js
    assert trace["text"] == ["a", "b", "c"] and trace["marker"]["color"]["dtype"] == "f4"
    assert trace["customdata"]["shape"] == "3, 2"
    assert fig.data[0]["x"] is not trace["x"]  # the figure itself keeps its arrays


def test_the_div_escapes_text_that_could_close_the_script():
    fig = figures.figure()
    fig.add_trace(figures.trace("scatter", x=[1], y=[1], name="</script><script>alert(1)</script>"))
    div = figures.figure_div(fig, "plot-1")
    assert "</script><script>alert" not in div and 'data-plot="plot-1"' in div
    spec = div[div.index("[{") : div.index("}]") + 2]
    assert json.loads(spec)[0]["name"] == "</script><script>alert(1)</script>"
