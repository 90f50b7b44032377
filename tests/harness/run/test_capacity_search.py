"""The capacity search's logic with a fake run (harness/run/capacity_search.py) and its answer
(harness/run/slo_answer.py): no engine, deterministic."""

import math

import pytest

from harness.gate.slo_verdict import CANNOT_TELL, MEETS, MISSES
from harness.run.capacity_search import RunOutcome, Settings, search
from harness.run.slo_answer import Question, answer_text, search_record

RATE = Question("rate", {"ttft_s": 0.5, "tpot_s": 0.05}, 0.9)


def server(capacity: float, unclear_within: float = 0.0, noise: float = 0.01, fails_above=math.inf):
    """A fake run: TTFT's p90 / limit = load / capacity, the runs alternating by ±noise, and by
    ±0.3 within ``unclear_within`` (relative) of the capacity, so no number of runs tells there."""
    calls = []

    def run_once(load, probe, run):
        calls.append((load, probe, run))
        near = abs(math.log(load / capacity)) < unclear_within
        spread = 0.3 if near else noise
        d = math.log(load / capacity) + (spread if run % 2 else -spread)
        ok = load <= fails_above
        return RunOutcome({"ttft_s": d, "tpot_s": -1.0}, ok=ok, info={"status": "complete" if ok else "failed"})

    run_once.calls = calls
    return run_once


class Clock:
    """A clock that only runs move: each run takes 10 s."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def timed(self, run_once):
        def run(load, probe, run):
            self.t += 10.0
            return run_once(load, probe, run)

        return run


def settings(**kw):
    return Settings(**{"low": 1.0, "high": None, "tolerance": 0.1, "integer": False, **kw})


def test_a_clear_capacity_is_bracketed_within_the_tolerance():
    s = search(settings(), server(3.4))
    lo, hi = s.capacity_low, s.capacity_high
    assert lo < 3.4 < hi and (hi - lo) / hi <= 0.1
    assert s.tolerance_reached and s.stopped_by is None and not s.inside()
    assert [p.load for p in s.probes[:3]] == [1, 2, 4]  # doubling until a miss, then bisecting
    # t(1 − 0.05 / 4, 1) · 0.01 = 0.25: clear at min_runs further than that from the capacity
    assert all(len(p.runs) == 2 for p in s.probes if abs(math.log(p.load / 3.4)) > 0.25)
    assert s.runs == sum(len(p.runs) for p in s.probes)
    assert all(p.verdict == (MEETS if p.load < 3.4 else MISSES) for p in s.probes)


def test_a_probe_runs_again_until_clear_and_cannot_tell_at_the_cap():
    run_once = server(3.4, unclear_within=0.06)
    s = search(settings(), run_once)
    unclear = [p for p in s.probes if p.verdict == CANNOT_TELL]
    assert unclear and all(len(p.runs) == 5 for p in unclear)  # max_runs_per_probe
    lo, hi = s.capacity_low, s.capacity_high
    assert all(lo < p.load < hi for p in unclear) and s.inside() == sorted(p.load for p in unclear)
    # the gap is bisected on either side of the cannot-tell loads, each part within the tolerance
    points = [lo, *s.inside(), hi]
    assert all((b - a) / b <= 0.1 for a, b in zip(points, points[1:]))
    assert s.open_gap() is None and s.tolerance_reached
    assert [(p, r) for _, p, r in run_once.calls] == [(p.index, i + 1) for p in s.probes for i in range(len(p.runs))]


def test_looks_are_paid_for():
    """The verdict, looked at after every run from min_runs on, is taken at α / looks: two runs
    that a single look would call clear are not enough."""
    assert settings().alpha_per_look == pytest.approx(0.05 / 4)
    assert settings(min_runs=3, max_runs_per_probe=3).alpha_per_look == pytest.approx(0.05)
    s = search(settings(min_runs=2, max_runs_per_probe=5), server(3.4, noise=0.15))
    first = s.probes[0]  # load 1: d ≈ −1.22 ± 0.15; t(1 − 0.0125, 1) ≈ 25 needs more than 2 runs
    assert first.verdict == MEETS and len(first.runs) == 3


def test_a_failed_run_misses_at_once():
    s = search(settings(high=8.0), server(100.0, fails_above=3.0))
    failing = [p for p in s.probes if p.load > 3.0]
    assert failing and all(p.verdict == MISSES and len(p.runs) == 1 for p in failing)
    assert (s.capacity_low, s.capacity_high) == (3.0, 3.25)


def test_the_run_budget_ends_the_search_and_the_answer_says_so():
    s = search(settings(max_runs=7), server(3.4, unclear_within=0.06))
    assert s.runs == 7 and s.stopped_by == "max_runs" and not s.tolerance_reached
    text = answer_text(s, RATE, final=True)
    assert "the budget (slo_search.max_runs=7 runs) ended the search before the tolerance" in text
    assert "7 runs" in text


def test_the_time_budget_begins_no_run_that_would_end_past_it():
    clock = Clock()
    s = search(settings(max_time_s=95.0), clock.timed(server(3.4)), clock=clock)
    assert s.stopped_by == "max_time_s"
    assert s.runs == 9  # each run takes 10 s: the 10th would have ended at 100 s
    assert s.wall_s <= 95.0
    assert "slo_search.max_time_s=95 s" in answer_text(s, RATE, final=True)


def test_a_probe_cut_short_by_the_budget_cannot_tell():
    s = search(settings(max_runs=5), server(3.4))  # 1 and 2 meet in 2 runs each; 4 gets one
    last = s.probes[-1]
    assert last.load == 4.0 and last.cut_short and last.verdict == CANNOT_TELL and len(last.runs) == 1
    assert s.capacity_low == 2.0 and s.capacity_high is None and s.inside() == [4.0]
    text = answer_text(s, RATE, final=True)
    assert text.startswith("capacity ≥ 2 req/s") and "cannot tell at 4 (cut short)" in text


def test_nothing_meets():
    s = search(settings(), server(0.5))
    assert [p.load for p in s.probes] == [1.0] and s.capacity_low is None and s.capacity_high == 1.0
    assert answer_text(s, RATE, final=True).startswith(
        "no load meets p90 TTFT ≤ 500 ms and p90 TPOT ≤ 50 ms (misses at 1); 2 runs"
    )
    s = search(settings(), server(1.0, unclear_within=0.06))  # low cannot tell, 2 misses
    assert s.capacity_low is None and s.inside() == [1.0]
    assert "no load meets" in answer_text(s, RATE, final=True)


def test_none_misses_up_to_high():
    s = search(settings(high=6.0), server(100.0))
    assert [p.load for p in s.probes] == [1, 2, 4, 6] and s.capacity_high is None and s.capacity_low == 6.0
    assert answer_text(s, RATE, final=True).startswith("capacity ≥ 6 req/s at p90 TTFT")


def test_concurrency_is_bisected_to_one():
    s = search(settings(integer=True), server(5.5, noise=0.001))
    assert (s.capacity_low, s.capacity_high) == (5, 6)
    assert all(p.load == int(p.load) for p in s.probes)
    record = search_record(s, Question("concurrency", {"ttft_s": 0.5}, 0.9), final=True)
    assert record["capacity_low"] == 5 and record["slo_max_concurrency"] == 5 and record["capacity_high"] == 6
    assert isinstance(record["capacity_low"], int)


def test_the_answer_and_its_record():
    clock = Clock()
    s = search(settings(), clock.timed(server(3.4, unclear_within=0.06)), clock=clock)
    text = answer_text(s, RATE, final=True)
    lo, hi, inside = s.capacity_low, s.capacity_high, s.inside()
    assert text == (
        f"capacity {lo:g}–{hi:g} req/s at p90 TTFT ≤ 500 ms and p90 TPOT ≤ 50 ms (meets at {lo:g}, cannot tell at "
        + " and ".join(f"{x:g}" for x in inside)
        + f", misses at {hi:g}), {s.runs} runs, {s.wall_s / 60:.1f} min"
    )
    record = search_record(s, RATE, final=True)
    assert record["capacity_low"] == record["slo_max_rate"] == lo and record["capacity_high"] == hi
    assert record["runs"] == s.runs and record["wall_s"] == pytest.approx(s.wall_s) and record["finished"]
    probe = record["probes"][0]
    assert probe["verdict"] == MEETS and len(probe["runs"]) == 2 and probe["rate"] == 1.0
    assert probe["limits"]["ttft_s"]["high"] < 1 and set(probe["limits"]) == {"ttft_s", "tpot_s"}
    unfinished = search_record(s, RATE, final=False)
    assert unfinished["slo_max_rate"] is None and unfinished["capacity_low"] is None
    assert unfinished["best_so_far"] == lo and unfinished["answer_text"].startswith(
        "no answer: the search did not finish"
    )


def test_a_cannot_tell_below_the_capacity_is_named():
    """Time's noise (the machine busier at first) can leave a low load unclear while a higher one
    meets: the answer says so rather than hide it."""

    def run_once(load, probe, run):
        d = 0.3 * (1 if run % 2 else -1) if load < 4 else math.log(load / 100) + 0.01 * (run % 2)
        return RunOutcome({"ttft_s": d}, ok=True)

    s = search(settings(high=8.0), run_once)
    assert s.capacity_low == 8.0 and s.out_of_order() == [1.0, 2.0]
    text = answer_text(s, Question("rate", {"ttft_s": 0.5}, 0.9), final=True)
    assert "; out of order: cannot tell at 1 and 2, below 8" in text
