"""Sweeps through `python -m harness -m …`: one engine load, failure isolation, sweep.json,
compare.html, resume, repeats; and the SLO search."""

import json
from pathlib import Path

import pytest
from conftest import run_harness_cli

from harness.results.store import load_summary
from harness.results.sweep_file import mean_ci95, varying_overrides

FAST = [
    "model=tiny-random",
    "workload=synthetic",
    "workload.input_len=48",
    "workload.output_len=4",
    "workload.num_requests=4",
    "progress=false",
]
# what a sweep does with whatever engine it drives: the reference server (no torch import, no
# model load) keeps these quick; the engines' own sweeps are in tests/backends/engines/
REF = ["backend=reference", "backend.ttft_ms=5", "backend.itl_ms=1", *FAST]


def sweep_dir(root: Path) -> Path:
    found = sorted(root.glob("sweep-*"))
    assert len(found) == 1, found
    return found[0]


def read_sweep(root: Path) -> dict:
    return json.loads((sweep_dir(root) / "sweep.json").read_text())


@pytest.mark.slow
def test_points_share_one_engine_and_the_sweep_is_summarised(tmp_path, chromium):
    proc = run_harness_cli("-m", *REF, "workload.concurrency=1,2,4", f"output_root={tmp_path}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    sweep = read_sweep(tmp_path)
    assert sweep["engine_loads"] == 1
    points = sweep["points"]
    assert [p["status"] for p in points] == ["complete"] * 3
    assert [p["engine_reused"] for p in points] == [False, True, True]
    assert points[0]["load_s"] > 0 and points[1]["load_s"] == 0 and points[2]["load_s"] == 0
    for p in points:
        summary = load_summary(Path(p["run_dirs"][0]))
        assert summary["engine"]["reused"] == p["engine_reused"]
        assert summary["config_sha256"] == p["config_sha256"]
        assert p["figures"]["ttft_s.p50"] > 0 and p["figures"]["output_tokens_per_s"] > 0
    assert [load_summary(Path(p["run_dirs"][0]))["workload"]["concurrency"] for p in points] == [1, 2, 4]
    assert (sweep_dir(tmp_path) / "compare.html").exists() and (sweep_dir(tmp_path) / "compare.csv").exists()
    assert "engine loads: 1 for 3 points" in proc.stdout
    folder = sweep_dir(tmp_path)
    assert proc.stdout.strip().splitlines()[-2:] == [f"compare: {folder}/compare.html", f"sweep: {folder}/sweep.json"]
    table = proc.stdout[proc.stdout.index("overrides") :]
    assert "workload.concurrency=4" in table and "workload.input_len" not in table  # only what the sweep varies
    page = chromium.open(sweep_dir(tmp_path) / "compare.html", screenshot=tmp_path / "sweep.png")
    assert page.errors == []
    plots = [p["id"] for p in page.plots]
    assert "latency-throughput" in plots and all(p["traces"] >= 1 for p in page.plots)


@pytest.mark.engine
def test_another_engine_setting_loads_again(tmp_path):
    # llama.cpp on the store's GGUF: an engine setting that needs a new load, and a load of a second
    proc = run_harness_cli(
        "-m",
        "backend=llamacpp",
        "backend.n_ctx=256,512",
        "workload=synthetic",
        "workload.input_len=48",
        "workload.output_len=4",
        "workload.num_requests=4",
        "progress=false",
        f"output_root={tmp_path}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    sweep = read_sweep(tmp_path)
    assert sweep["engine_loads"] == 2
    assert [p["engine_reused"] for p in sweep["points"]] == [False, False]


@pytest.mark.slow
def test_a_failing_point_is_one_line_and_the_sweep_goes_on(tmp_path):
    # a prompt longer than the model's context: only the point's plan can tell (the pre-flight cannot)
    proc = run_harness_cli("-m", *REF, "workload.input_len=48,100000,40", f"output_root={tmp_path}", cwd=tmp_path)
    assert proc.returncode == 1  # a point failed
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: point 1 (") and "workload.input_len=100000" in errors[0]
    assert "needs more than the model's context" in errors[0]
    sweep = read_sweep(tmp_path)
    assert [p["status"] for p in sweep["points"]] == ["complete", "failed", "complete"]
    assert sweep["engine_loads"] == 1
    assert "1 of 3 points failed" in proc.stderr


def test_a_value_no_point_accepts_stops_the_sweep_before_it_starts(tmp_path):
    proc = run_harness_cli("-m", *REF, "workload.concurrency=1,0,2", f"output_root={tmp_path}", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: the sweep's point workload.concurrency=0: workload.concurrency must be >= 1 (got 0)"
    ]
    assert list(tmp_path.iterdir()) == []  # nothing ran, no folder made


@pytest.mark.slow
def test_engine_death_reloads_for_the_next_point(tmp_path):
    """The reference server exits at its 4th request: that point fails, the next one gets a new server."""
    args = [
        "model=tiny-random",
        "backend=reference",
        "workload=synthetic",
        "workload.input_len=32",
        "workload.output_len=4",
        "workload.warmup_requests=0",
        "progress=false",
        "backend.ttft_ms=5",
        "backend.itl_ms=1",
    ]
    proc = run_harness_cli(
        "-m",
        *args,
        "backend.exit_after=3",
        "workload.num_requests=2,6,2",
        f"output_root={tmp_path}",
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr
    sweep = read_sweep(tmp_path)
    assert [p["status"] for p in sweep["points"]] == ["complete", "failed", "complete"]
    assert "exited" in sweep["points"][1]["error"]
    assert sweep["engine_loads"] == 2
    assert [p["engine_reused"] for p in sweep["points"]] == [False, True, False]
    assert (sweep_dir(tmp_path) / "server.log").exists()


@pytest.mark.slow
def test_resume_skips_finished_points(tmp_path):
    args = ["-m", *REF, "workload.concurrency=1,2,3", f"output_root={tmp_path}"]
    assert run_harness_cli(*args, cwd=tmp_path).returncode == 0
    first = sweep_dir(tmp_path)
    killed = Path(read_sweep(tmp_path)["points"][2]["run_dirs"][0])
    (killed / "summary.json").unlink()  # as a sweep killed during its last point leaves it
    proc = run_harness_cli(*args, "resume=true", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    second = [d for d in tmp_path.glob("sweep-*") if d != first]
    assert len(second) == 1
    sweep = json.loads((second[0] / "sweep.json").read_text())
    assert [p["status"] for p in sweep["points"]] == ["skipped", "skipped", "complete"]
    assert sweep["points"][0]["run_dirs"][0].startswith(str(first))
    assert sweep["points"][2]["run_dirs"][0].startswith(str(second[0]))
    assert all(p["figures"]["ttft_s.p50"] for p in sweep["points"])  # the table is complete
    assert sweep["engine_loads"] == 1


@pytest.mark.slow
def test_repeats_give_mean_and_ci(tmp_path):
    proc = run_harness_cli("-m", *REF, "repeat=3", "workload.concurrency=1", f"output_root={tmp_path}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    point = read_sweep(tmp_path)["points"][0]
    assert len(point["run_dirs"]) == 3 and all(d.endswith(f"repeat-{i}") for i, d in zip((1, 2, 3), point["run_dirs"]))
    ttft = point["figures"]["ttft_s.p50"]
    assert ttft["n"] == 3 and ttft["ci_low"] <= ttft["mean"] <= ttft["ci_high"]
    assert load_summary(Path(point["run_dirs"][1]))["repeat"] == {"index": 2, "of": 3}
    assert "±" in proc.stdout


@pytest.mark.slow
def test_single_run_with_repeats(tmp_path):
    proc = run_harness_cli(*REF, "repeat=2", f"output_root={tmp_path}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    run_dir = Path(proc.stdout.strip().splitlines()[-1].removeprefix("results: "))
    assert (run_dir / "repeat-1" / "summary.json").exists() and (run_dir / "repeat-2" / "summary.json").exists()
    assert f"compare: {run_dir.relative_to(tmp_path)}/compare.html" in proc.stdout.splitlines()  # of the repeats
    assert json.loads((run_dir / "sweep.json").read_text())["points"][0]["figures"]["ttft_s.p50"]["n"] == 2


def test_mean_ci95_and_varying_overrides():
    ci = mean_ci95([1.0, 2.0, 3.0])
    assert (
        ci["mean"] == 2.0
        and ci["ci_low"] == pytest.approx(2 - 4.303 / 3**0.5)
        and ci["ci_high"] == pytest.approx(2 + 4.303 / 3**0.5)
    )
    assert mean_ci95([5.0])["ci_low"] is None and mean_ci95([None])["mean"] is None
    assert varying_overrides([["a=1", "b=1"], ["a=1", "b=2"]]) == [["b=1"], ["b=2"]]


# A server that serves one request at a time (the reference server's backend.max_running=1):
# TTFT grows with concurrency, by ~34 ms a request ahead, so p90 TTFT ≤ 150 ms holds up to
# concurrency 4 or 5
ONE_AT_A_TIME = [
    "model=tiny-random",
    "backend=reference",
    "backend.ttft_ms=20",
    "backend.itl_ms=2",
    "backend.max_running=1",
    "workload=synthetic",
    "workload.input_len=32",
    "workload.output_len=8",
    "workload.num_requests=12",
    "progress=false",
    "report=false",
    "machine.enabled=false",
    "slo_search.enabled=true",
    "slo_search.over=concurrency",
    "slo_search.low=1",
    "slo_search.high=16",
    "slo_search.attainment=0.9",
    "slo.ttft_s=0.15",
]


def run_search(tmp_path, *overrides):
    proc = run_harness_cli(*ONE_AT_A_TIME, *overrides, f"output_root={tmp_path}", cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr
    run_dir = Path(proc.stdout.strip().splitlines()[-1].removeprefix("results: "))
    return proc, json.loads((run_dir / "sweep.json").read_text())


@pytest.mark.slow
def test_slo_search_probes_are_points_with_their_runs(tmp_path):
    """Each probe runs at least twice (slo_search.min_runs) into run-K/ of its point; the budget
    of 4 runs ends the search, and the answer says so."""
    proc, sweep = run_search(tmp_path, "slo_search.max_runs=4", "sweep.compare_html=false")
    search = sweep["slo_search"]
    assert sweep["kind"] == "slo_search" and search["finished"] and sweep["engine_loads"] == 1
    assert search["runs"] == 4 and search["stopped_by"] == "max_runs" and search["wall_s"] > 0
    probes, points = search["probes"], sweep["points"]
    assert len(points) == len(probes) + (search["probing"] is not None)
    for probe, point in zip(probes, points):
        assert len(probe["runs"]) == len(point["run_dirs"]) >= 1
        assert [Path(r["run_dir"]).name for r in probe["runs"]] == [
            f"run-{k}" for k in range(1, len(probe["runs"]) + 1)
        ]
        assert [r["run_dir"] for r in probe["runs"]] == point["run_dirs"]
        assert probe["verdict"] in ("meets", "misses", "cannot tell") and set(probe["limits"]) <= {"ttft_s"}
        assert all(set(r["log_margins"]) == {"ttft_s"} and 0 <= r["slo_met_share"] <= 1 for r in probe["runs"])
    # every probe run's config hashes as a plain run at its load (a noise floor is stored under it)
    first = load_summary(Path(probes[0]["runs"][0]["run_dir"]))
    assert first["config_sha256"] == points[0]["config_sha256"]
    assert "the budget (slo_search.max_runs=4 runs) ended the search before the tolerance" in search["answer_text"]
    assert search["answer_text"] in proc.stdout and "4 runs" in search["answer_text"]
    assert sweep["slo_max_concurrency"] == search["capacity_low"] == search["slo_max_concurrency"]


@pytest.mark.slow
def test_slo_search_finds_a_capacity_with_an_interval(tmp_path):
    """The capacity of the one-at-a-time server, bracketed: the highest concurrency that meets,
    the lowest that misses, within 1 of each other or of the cannot-tell loads between them."""
    proc, sweep = run_search(tmp_path, "sweep.compare_html=false")
    search = sweep["slo_search"]
    assert search["finished"] and search["stopped_by"] is None, search["answer_text"]
    lo, hi = search["capacity_low"], search["capacity_high"]
    probes = search["probes"]
    verdicts = {p["concurrency"]: p["verdict"] for p in probes}
    assert lo is not None, search["answer_text"]  # concurrency 1: TTFT ~20 ms, far below 150
    assert verdicts[lo] == "meets" and verdicts[hi] == "misses" and 1 <= lo < hi <= 16
    points = [lo, *search["inside"], hi]
    assert all(verdicts[x] == "cannot tell" for x in search["inside"])
    assert all(b - a <= 1 for a, b in zip(points, points[1:]))
    assert sweep["slo_max_concurrency"] == lo and search["runs"] == sum(len(p["runs"]) for p in probes)
    assert all(len(p["runs"]) >= 2 or p["verdict"] == "misses" for p in probes)
    text = search["answer_text"]
    assert text.startswith(f"capacity {lo}–{hi} concurrent requests at p90 TTFT ≤ 150 ms (meets at {lo}")
    assert f"misses at {hi}), {search['runs']} runs" in text and text in proc.stdout
    assert search["wall_s"] < 300  # ~30 s here


@pytest.mark.slow
def test_slo_search_needs_an_slo(tmp_path):
    proc = run_harness_cli(*FAST, "slo_search.enabled=true", f"output_root={tmp_path}", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: slo_search needs an SLO: set slo.ttft_s, slo.tpot_s or slo.e2e_s"


@pytest.mark.slow
def test_resume_into_the_same_folders_runs_an_unfinished_point_again(tmp_path):
    """hydra.sweep.dir given again (a requeued batch job): the interrupted point's run is kept
    beside, renamed, and the point runs again in its own folder."""
    args = ["-m", *REF, "workload.concurrency=1,2", f"output_root={tmp_path}"]
    assert run_harness_cli(*args, cwd=tmp_path).returncode == 0
    first = sweep_dir(tmp_path)
    killed = Path(read_sweep(tmp_path)["points"][1]["run_dirs"][0])
    summary = json.loads((killed / "summary.json").read_text())
    (killed / "summary.json").write_text(json.dumps({**summary, "status": "interrupted"}))  # as SIGTERM leaves it
    proc = run_harness_cli(*args, "resume=true", f"hydra.sweep.dir={first}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    sweep = read_sweep(tmp_path)
    assert [p["status"] for p in sweep["points"]] == ["skipped", "complete"]
    assert load_summary(killed)["status"] == "complete"
    aside = killed.with_name(killed.name + ".unfinished-1")
    assert load_summary(aside)["status"] == "interrupted"  # nothing measured is lost
    # the new run logs into its own folder, the one set aside keeps only its own run's lines
    assert "resume: the unfinished run" in (killed / "harness.log").read_text()
    assert "resume: the unfinished run" not in (aside / "harness.log").read_text()
