"""The Pareto front and its chart (harness/reports/pareto.py): which points no other beats, the
staircase drawn through them, and the chart's traces. No run folder, no engine."""

import pytest

from harness.reports import pareto
from harness.reports.pareto import Point, dominates, pareto_front, staircase
from harness.results.schema import RunSummary

UP_UP = (True, True)


def test_dominates_needs_as_good_everywhere_and_better_somewhere():
    assert dominates((2, 2), (1, 2), UP_UP) and not dominates((1, 2), (1, 2), UP_UP)
    assert not dominates((2, 1), (1, 2), UP_UP)  # a trade: neither dominates
    assert dominates((2, 1), (1, 3), (True, False))  # the second figure minimized (a cost)


def test_the_front_of_a_trade():
    # per instance (x) against per user (y): more at once, more throughput, each slower
    values = [(100, 50), (180, 40), (150, 30), (260, 20), (90, 45), (260, 20)]
    assert pareto_front(values, UP_UP) == [0, 1, 3, 5]  # equal points are both kept
    assert pareto_front([(1, 1)], UP_UP) == [0] and pareto_front([], UP_UP) == []
    # minimizing the second figure turns the front over
    assert pareto_front([(1, 1), (2, 2), (3, 0.5)], (True, False)) == [2]


def test_the_staircase_is_the_edge_of_what_the_front_dominates():
    xs, ys = staircase([(260, 20), (100, 50), (180, 40)], True, True)
    assert list(zip(xs, ys)) == [(100, 50), (100, 40), (180, 40), (180, 20), (260, 20)]
    # x maximized, y minimized (per user against $/Mtok): the corner is worse in both again
    xs, ys = staircase([(10, 1.0), (20, 2.0)], True, False)
    assert list(zip(xs, ys)) == [(10, 1.0), (10, 2.0), (20, 2.0)]
    assert staircase([(1, 1), (1, 1)], True, True) == ([1], [1])


def summary(per_user, per_instance, cost=None):
    return RunSummary(
        status="complete",
        latency={"output_tps": {"p50": per_user}},
        throughput={"output_tokens_per_s": per_instance, "usd_per_million_output_tokens": cost},
    )


def test_a_point_reads_its_figures_from_the_summary():
    p = Point.of(summary(40.0, 180.0, 1.5), "run 1", ["c=4"], mark="best")
    assert (p.per_user, p.per_instance, p.usd_per_mtok, p.lines, p.mark) == (40.0, 180.0, 1.5, ["c=4"], "best")
    assert Point.of(summary(None, 0.0), "x").per_instance is None  # no rate is no point


def test_the_chart_needs_three_points_with_both_figures():
    pts = [Point("a", 50, 100), Point("b", 40, 180), Point("c", None, 200)]
    assert pareto.pareto_figure(pts) is None
    fig = pareto.pareto_figure([*pts, Point("d", 30, 150, lines=["<b>x</b>"]), Point("e", 20, 260, mark="defaults")])
    assert fig is not None
    names = [t["name"] for t in fig.data]
    assert names == ["dominated", "on the front", "the front", "defaults"]
    front = fig.data[1]
    assert list(front["x"]) == [100, 180, 260] and list(front["y"]) == [50, 40, 20]
    assert "&lt;b&gt;x&lt;/b&gt;" in fig.data[0]["hovertext"][0]  # a setting's text is escaped, not HTML
    assert "xaxis2" not in fig.layout  # no cost: one panel


def test_with_a_price_the_chart_adds_cost_against_per_user():
    pts = [Point(n, u, i, c) for n, u, i, c in (("a", 50, 100, 3.0), ("b", 40, 180, 1.7), ("c", 20, 260, 1.2))]
    fig = pareto.pareto_figure(pts)
    assert fig is not None and fig.layout["xaxis2"]["title"]["text"] == pareto.PER_USER_LABEL
    assert fig.layout["yaxis2"]["title"]["text"] == pareto.COST_LABEL
    cost_front = [t for t in fig.data if t.get("xaxis") == "x2" and t["name"] == "on the front"][0]
    assert sorted(cost_front["y"]) == pytest.approx([1.2, 1.7, 3.0])  # each trade is on this front too
