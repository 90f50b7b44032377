"""What the pages' own figure builder saves against plotly's figure objects, on one run's report.

The pages build each figure as plain plotly JSON (harness/reports/figures.py ``Figure``) and write
it unvalidated. Plotly's own way is ``plotly.graph_objects.Figure``, which checks every property
as it is set, then ``fig.to_json()``. For each figure of a run's report.html (the same builders
the report calls), this times, best of ``--repeats``, in the
process's own CPU time (a busy machine stretches wall time, not this):

- ours: ``Figure.to_dict()`` and ``plotly.io.to_json(…, validate=False)``, as the page writes it;
- plotly: ``go.Figure(the same dict)`` (every property validated, as building it through
  graph_objects does) and ``fig.to_json()``; and, for a figure of several cells, what
  ``make_subplots`` takes for its grid (a column of its own: plotly builds the grid that way);

and checks that both JSON texts hold the same figure (parsed, compared as data).

    .venv/bin/python benchmarks/figure_json.py --run RUN_DIR [--repeats 5]

(benchmarks/report_build.py makes a 1,000-request run to point it at.)
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import plotly
import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

from harness.reports import run_report
from harness.reports.run_report import load_run

BUILDERS = (
    "_latency_cdfs",
    "_itl_figure",
    "_timeline",
    "_throughput_over_time",
    "_server_over_time",
    "_memory_over_time",
    "_gpu_over_time",
    "_chat_figures",
)


def best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    run = load_run(args.run)
    print(
        f"{len(run.requests)} requests; plotly {plotly.__version__}; {platform.machine()}, Python {platform.python_version()}"
    )
    print(f"{'figure':<18} {'ours CPU ms':>11} {'plotly CPU ms':>13} {'+ its grid ms':>13} {'same':>5}")
    total_ours = total_theirs = total_grid = 0.0
    for name in BUILDERS:
        made = getattr(run_report, name)(run)
        if made is None or made[2] is None:
            continue
        div_id, _, fig, _ = made
        ours = best(lambda fig=fig: pio.to_json(fig.to_dict(), validate=False), args.repeats)
        theirs = best(lambda fig=fig: go.Figure(fig.to_dict()).to_json(), args.repeats)
        same = json.loads(pio.to_json(fig.to_dict(), validate=False)) == json.loads(go.Figure(fig.to_dict()).to_json())
        grid = (
            best(lambda fig=fig: make_subplots(rows=fig.rows, cols=fig.cols), args.repeats)
            if fig.rows * fig.cols > 1
            else 0.0
        )
        total_ours, total_theirs, total_grid = total_ours + ours, total_theirs + theirs, total_grid + grid
        print(f"{div_id:<18} {ours * 1000:>11.1f} {theirs * 1000:>13.1f} {grid * 1000:>13.1f} {same!s:>5}")
    print(f"{'all':<18} {total_ours * 1000:>11.1f} {total_theirs * 1000:>13.1f} {total_grid * 1000:>13.1f}")


if __name__ == "__main__":
    main()
