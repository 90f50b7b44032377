"""The nightly gate: a sweep against the nightlies before it, never against its own repeats."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from history_runs import FakeRun, fake_sweep

from harness.gate import noise, prediction
from harness.gate.verdicts import INCONCLUSIVE, PASS, REGRESSION
from harness.history import cli, nightly
from harness.history.analysis import parse_figure
from harness.history.query import decisions, runs
from harness.history.store import add_runs, rows_in
from harness.telemetry.environment import hardware_fingerprint

TPOT = parse_figure("tpot_s.p50")


DEFAULT_RUN = FakeRun()


def nightly_history(tmp_path, levels, repeats=3, spread=0.002, run=DEFAULT_RUN, start_day=0):
    """One sweep a day at concurrency 1 and 2, each point's repeats close together around the
    night's level (the band a night's repeats share), added to the history at tmp_path/h."""
    rng = np.random.default_rng(7)
    for day, level in enumerate(levels, start=start_day):
        values = {c: [level * c * (1 + spread * rng.standard_normal()) for _ in range(repeats)] for c in (1, 2)}
        add_runs(tmp_path / "h", [fake_sweep(tmp_path / f"night-{day}", day, values, run)])


def new_night(tmp_path, day, level, repeats=3, run=DEFAULT_RUN):
    values = {c: [level * c] * repeats for c in (1, 2)}
    return fake_sweep(tmp_path / f"night-{day}", day, values, run)


def gate_cli(tmp_path, sweep, *extra, capsys=None):
    code = cli.main(["gate", str(tmp_path / "h"), str(sweep), "--metric", "tpot_s.p50", *extra])
    return code, capsys.readouterr().out if capsys else ""


def test_the_prediction_interval_is_the_t_interval_for_one_new_value():
    earlier = [10.0, 11.0, 9.5, 10.5, 10.2, 9.8]
    p = prediction.from_history(earlier, 12.0, lower_is_better=True)
    logs = np.log(earlier)
    m, s, n = logs.mean(), logs.std(ddof=1), len(logs)
    from scipy import stats

    half = stats.t.ppf(0.975, n - 1) * s * math.sqrt(1 + 1 / n)
    assert p.low == pytest.approx(math.exp(m - half)) and p.high == pytest.approx(math.exp(m + half))
    assert p.p_worse == pytest.approx(1 - stats.t.cdf((math.log(12.0) - m) / (s * math.sqrt(1 + 1 / n)), n - 1))
    assert p.outside and p.worse > 0.15
    # a rate (higher is better) worse is lower
    assert prediction.from_history(earlier, 12.0, lower_is_better=False).p_worse > 0.9
    with pytest.raises(ValueError, match="needs 5 earlier nightlies"):
        prediction.from_history(earlier[:4], 12.0, lower_is_better=True)


def test_repeats_of_one_night_are_one_value_so_time_judges_the_nightly(tmp_path):
    """Nights wander by ~6 % while each night's repeats agree to 0.2 %: a new night 8 % up is
    inside the history's interval (a bootstrap over the repeats would have called it)."""
    levels = [0.010 * f for f in (1.00, 1.06, 0.95, 1.03, 0.98, 1.07, 0.96)]
    nightly_history(tmp_path, levels)
    frame = runs(tmp_path / "h")
    assert frame["batch"].nunique() == len(levels) and len(frame) == len(levels) * 6
    current = rows_in(new_night(tmp_path, 30, 0.0108))
    gate = nightly.judge(frame, __import__("pandas").DataFrame(current), [TPOT])
    assert [v.verdict for v in gate.verdicts] == [PASS, PASS]
    assert all(v.prediction.source == prediction.HISTORY and v.earlier == len(levels) for v in gate.verdicts)


@pytest.mark.slow
def test_a_slower_night_regresses_then_the_next_confirms_or_clears_it(tmp_path, capsys):
    nightly_history(tmp_path, [0.010 * f for f in (1.00, 1.02, 0.99, 1.01, 0.98, 1.00)])
    slow = new_night(tmp_path, 10, 0.013)  # 30 % slower
    code, out = gate_cli(tmp_path, slow, "--record", capsys=capsys)
    assert code == 1 and "REGRESSION (suspect)" in out
    add_runs(tmp_path / "h", [slow])
    recorded = decisions(tmp_path / "h")
    assert set(recorded["verdict"]) == {REGRESSION} and set(recorded["status"]) == {nightly.SUSPECT}

    # the next nightly is judged without the flagged one: slow again confirms it
    again = new_night(tmp_path, 11, 0.013)
    code, out = gate_cli(tmp_path, again, capsys=capsys)
    assert code == 1 and "REGRESSION (confirmed)" in out

    # back to normal clears it
    normal = new_night(tmp_path, 12, 0.0101)
    code, out = gate_cli(tmp_path, normal, capsys=capsys)
    assert code == 0 and "pass (cleared)" in out


def test_without_enough_nightlies_or_a_floor_a_point_is_inconclusive_and_says_what_decides(tmp_path, capsys):
    nightly_history(tmp_path, [0.010, 0.0102])
    code, out = gate_cli(tmp_path, new_night(tmp_path, 10, 0.020), capsys=capsys)  # twice as slow
    assert code == 0 and REGRESSION.upper() not in out
    assert "2 earlier nightlies of this point (the history decides from 5: 3 more)" in out
    assert "python -m harness.ab" in out


def test_a_noise_floor_judges_a_short_history(tmp_path, capsys):
    nightly_history(tmp_path, [0.010, 0.0102])
    env = {"cpu": {"model": "Test CPU", "logical_cores": 2}, "gpus": [{"name": "Test GPU"}]}
    floor = noise.NoiseFloor(
        config_sha256="c" * 64,
        hardware=hardware_fingerprint(env),
        figures={"tpot_s.p50": noise.FigureNoise(0.02, None, 5, 10, sd_run_apart=0.04)},
        cost_run_s=1.0,
        cost_request_s=0.1,
    )
    noise.save(tmp_path / "noise", floor)
    code, out = gate_cli(tmp_path, new_night(tmp_path, 10, 0.0103), "--noise-dir", str(tmp_path / "noise"),
                         capsys=capsys)  # fmt: skip
    assert code == 0 and out.count("noise floor, 2 nightlies") == 2
    code, out = gate_cli(tmp_path, new_night(tmp_path, 11, 0.014), "--noise-dir", str(tmp_path / "noise"),
                         capsys=capsys)  # fmt: skip
    assert code == 1 and out.count("REGRESSION") >= 2


def test_history_from_other_hardware_does_not_decide_unless_allowed(tmp_path, capsys):
    nightly_history(tmp_path, [0.010] * 6, run=FakeRun(cpu="Other CPU"))
    sweep = new_night(tmp_path, 10, 0.020)
    code, out = gate_cli(tmp_path, sweep, capsys=capsys)
    assert code == 0 and "from other hardware" in out and "--allow-other-hardware" in out
    code, out = gate_cli(tmp_path, sweep, "--allow-other-hardware", capsys=capsys)
    assert code == 1 and "judged against other hardware" in out


def test_tainted_runs_are_left_out_and_a_tainted_night_is_not_judged(tmp_path):
    nightly_history(tmp_path, [0.010] * 6)
    current = rows_in(new_night(tmp_path, 10, 0.020, run=replace(FakeRun(), taint=["busy"])))
    gate = nightly.judge(runs(tmp_path / "h"), __import__("pandas").DataFrame(current), [TPOT])
    assert {v.verdict for v in gate.verdicts} == {INCONCLUSIVE}
    assert all("tainted" in v.reason for v in gate.verdicts)


def test_bad_input_is_one_line(tmp_path, capsys):
    assert cli.main(["gate", str(tmp_path / "h"), str(tmp_path / "nothing")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    nightly_history(tmp_path, [0.010] * 2)
    assert cli.main(["gate", str(tmp_path / "h"), str(tmp_path / "night-0"), "--margin", "5"]) == 2
    assert "--margin must be in [0, 1)" in capsys.readouterr().err


@pytest.mark.slow
def test_the_trend_page_marks_a_flagged_nightly_and_how_the_next_one_left_it(tmp_path, capsys):
    nightly_history(tmp_path, [0.010 * f for f in (1.00, 1.02, 0.99, 1.01, 0.98, 1.00)])
    for day, level in ((10, 0.013), (11, 0.0101)):  # flagged, then cleared
        sweep = new_night(tmp_path, day, level)
        gate_cli(tmp_path, sweep, "--record", capsys=capsys)
        add_runs(tmp_path / "h", [sweep])
    page = tmp_path / "trend.html"
    assert cli.main(["trend", str(tmp_path / "h"), "--out", str(page), "--metric", "tpot_s.p50"]) == 0
    html = page.read_text()
    assert "Nightly gate" in html and html.count("flagged, then cleared by the next nightly") >= 2
    assert "flagged by the nightly gate (the next nightly decides)" not in html
