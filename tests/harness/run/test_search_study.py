"""The Optuna side of a search (harness/run/search_study.py), on a study in a temporary folder and
made-up values: resume, stale trials, the defaults, what counts, and which trial is checked."""

import pytest

optuna = pytest.importorskip("optuna")

from optuna.trial import TrialState  # noqa: E402 - after the skip: optuna is the search extra

from core.errors import ConfigError  # noqa: E402 - after the skip, as above
from harness.config import Choices, Range  # noqa: E402 - after the skip, as above
from harness.run import search_study  # noqa: E402 - after the skip, as above
from harness.run.search_study import Objective  # noqa: E402 - after the skip, as above

OBJECTIVES = [
    Objective("output_tps.p50", "maximize", "per user", "tok/s"),
    Objective("output_tokens_per_s", "maximize", "per instance", "tok/s"),
]
IDENTITY = {"objectives": ["a"], "space": {"x": "int:1:8"}, "config_sha256": "0" * 64}
SPACE = {"workload.concurrency": Range("int", 1, 8), "backend.batched": Choices((False, True))}


@pytest.mark.slow
def test_a_study_resumes_fails_its_stale_trials_and_runs_the_defaults_once(tmp_path):
    study, stale = search_study.open_study(tmp_path, OBJECTIVES, IDENTITY, seed=0, planned=6)
    assert stale == [] and (tmp_path / "search.db").is_file()
    assert search_study.enqueue_defaults(study, {"workload.concurrency": 1})
    assert not search_study.enqueue_defaults(study, {"workload.concurrency": 1})  # waiting already
    first = study.ask()
    assert (
        first.user_attrs["defaults"]
        and search_study.suggest(first, "workload.concurrency", SPACE["workload.concurrency"]) == 1
    )
    search_study.suggest(first, "backend.batched", SPACE["backend.batched"])
    # the process dies here: the defaults' trial is left RUNNING
    study, stale = search_study.open_study(tmp_path, OBJECTIVES, IDENTITY, seed=0, planned=6)
    assert stale == [0] and study.trials[0].state == TrialState.FAIL
    assert search_study.measured_nothing(study.trials[0]) and search_study.counted(study) == 0
    assert search_study.enqueue_defaults(study, {"workload.concurrency": 1})  # they run again
    again = study.ask()
    assert again.user_attrs["defaults"] and again.number == 1
    search_study.suggest(again, "workload.concurrency", SPACE["workload.concurrency"])
    study.tell(again, [100.0, 100.0])
    refused = study.ask()
    search_study.prune(study, refused, "refused: backend.max_running must be >= 0")
    gone = study.ask()
    search_study.fail(study, gone, "interrupted", counted_=False)
    missing = study.ask()
    search_study.fail(study, missing, "no value for output_tps.p50")
    assert search_study.counted(study) == 3  # complete, pruned, and the fail that measured something
    assert not search_study.enqueue_defaults(study, {"workload.concurrency": 1})
    rows = [search_study.trial_json(t) for t in study.trials]
    assert [r["state"] for r in rows] == ["fail", "complete", "pruned", "fail", "fail"]
    assert rows[0]["ended"] == "interrupted" and rows[2]["error"].startswith("refused:")


def test_a_folder_of_another_search_is_refused(tmp_path):
    search_study.open_study(tmp_path, OBJECTIVES, IDENTITY, seed=0, planned=6)
    other = {**IDENTITY, "space": {"x": "int:1:4"}}
    with pytest.raises(ConfigError, match=r"holds another search \(space differ\)"):
        search_study.open_study(tmp_path, OBJECTIVES, other, seed=0, planned=6)


def test_distributions_follow_the_space():
    assert search_study.distribution(Range("int", 32, 512, log=True)) == optuna.distributions.IntDistribution(
        32, 512, log=True
    )
    assert search_study.distribution(Range("float", 0, 1, step=0.25)) == optuna.distributions.FloatDistribution(
        0, 1, step=0.25
    )
    assert search_study.distribution(Choices((None, 1))).choices == (None, 1)


def done(number, values, defaults=False):
    """A complete trial of these values (the defaults' when ``defaults``)."""
    t = optuna.trial.create_trial(values=values, user_attrs={"defaults": True} if defaults else {})
    t.number = number
    return t


def test_the_best_improves_most_on_the_defaults_over_all_objectives():
    # defaults: 100 per user, 100 per instance; trial 1 trades 40 % per user for 3× per instance
    complete = [done(0, [100.0, 100.0], True), done(1, [60.0, 300.0]), done(2, [101.0, 102.0]), done(3, [20.0, 400.0])]
    front = complete[1:]
    best = search_study.best_for_check(complete, front, OBJECTIVES)
    assert best.number == 1  # √(0.6 × 3) = 1.34 beats √(1.01 × 1.02) and √(0.2 × 4)
    # without the defaults' values: the front's best on the first objective
    assert search_study.best_for_check(complete[1:], front, OBJECTIVES).number == 2
    assert search_study.best_for_check(complete, [], OBJECTIVES) is None
    cost = [OBJECTIVES[0], Objective("usd_per_million_output_tokens", "minimize", "cost", "$")]
    cheaper = done(1, [90.0, 1.0])  # 10 % slower per user at half the price: √(0.9 × 2) > 1
    assert search_study.best_for_check([done(0, [100.0, 2.0], True), cheaper], [cheaper], cost).number == 1
