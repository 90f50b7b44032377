"""The search over engine settings (search.enabled=true, harness/run/search.py) end to end, on the
reference server: its batch_itl_ms makes a real trade (each request running slows the others'
tokens), so more at once serves more per instance and less per user."""

import json
import re

import pytest
from conftest import run_harness_cli

optuna = pytest.importorskip("optuna")

REF = (
    "model=tiny-random",
    "backend=reference",
    "backend.ttft_ms=20",
    "backend.itl_ms=5",
    "backend.batch_itl_ms=1",
    "workload=synthetic",
    "workload.input_len=32",
    "workload.output_len=16",
    "workload.num_requests=8",
    "progress=false",
    "machine.enabled=false",  # the search's own working, not the machine's: a busy one taints the check's runs
)
SEARCH = ("search.enabled=true", "search.space={backend.max_running: int:0:8, workload.concurrency: int:1:6}")


@pytest.mark.slow
def test_a_bad_space_is_one_line_before_anything_runs(tmp_path):
    proc = run_harness_cli(*REF, "search.enabled=true", "search.space={backend.max_running: int:8:0}", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "error: search.space: backend.max_running: a range needs LOW < HIGH (got 'int:8:0'); "
        "write [a, b, …] (choices) | int:LOW:HIGH[:log|:STEP] | float:LOW:HIGH[:log|:STEP]"
    )
    assert not list(tmp_path.glob("results/*"))  # nothing was made


@pytest.mark.slow
def test_a_search_resumes_prunes_what_the_config_refuses_and_checks_its_best(tmp_path, chromium):
    folder = tmp_path / "search"
    args = (*REF, *SEARCH, f"output_root={tmp_path}", f"hydra.run.dir={folder}")
    first = run_harness_cli(*args, "search.trials=3", "search.check_best=false", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    record = json.loads((folder / "search.json").read_text())
    assert [t["state"] for t in record["trials"]] == ["complete"] * 3
    defaults = record["trials"][0]
    assert defaults["defaults"] and defaults["overrides"] == [] and defaults["run_dir"].endswith("trial-000")
    assert defaults["settings"] == {"backend.max_running": 0, "workload.concurrency": None}  # null: outside 1…6
    assert defaults["params"] == {"backend.max_running": 0}  # only what lies in the space is Optuna's

    # a process killed mid-trial leaves it RUNNING; a value the config refuses, and a point, wait their turn
    study = optuna.load_study(study_name="search", storage=f"sqlite:///{folder / 'search.db'}")
    study.ask()
    study.enqueue_trial({"backend.max_running": -1, "workload.concurrency": 2})
    study.enqueue_trial({"backend.max_running": 0, "workload.concurrency": 4})

    second = run_harness_cli(*args, "search.trials=6", "search.check_blocks=2", cwd=tmp_path, timeout=900)
    assert second.returncode == 0, second.stderr
    out = second.stdout
    assert "resume: trial(s) 3 left running by a process that ended: told FAIL, not counted" in out
    assert re.search(r"trial 4: backend\.max_running=-1 workload\.concurrency=2 → pruned: .*must be >= 0", out)
    assert not re.search(r"^trial [012]:", out, re.M)  # what the first run measured is not run again
    record = json.loads((folder / "search.json").read_text())
    trials = record["trials"]
    assert [t["state"] for t in trials] == ["complete"] * 3 + ["fail", "pruned", "complete", "complete"]
    assert trials[3]["ended"] == "interrupted" and "backend.max_running" in trials[4]["error"]
    assert record["stopped"] == "6 trials" and set(record["front"]) <= {t["number"] for t in trials}
    sweep = json.loads((folder / "sweep.json").read_text())
    assert sweep["kind"] == "search" and [p["index"] for p in sweep["points"]] == [0, 1, 2, 4, 5, 6]
    assert sweep["points"][3]["status"] == "failed" and "must be >= 0" in sweep["points"][3]["error"]

    # the best (not the defaults: concurrency 4 serves ~2.6× per instance for ~0.7× per user) against the defaults
    check = record["check"]
    assert check["status"] == "complete" and check["best"] == record["best"] != 0 and check["blocks"] == 2
    assert [f["figure"] for f in check["figures"]] == ["output_tps.p50", "output_tokens_per_s"]
    assert all(f["outcome"] in ("better beyond noise", "worse beyond noise", "within noise") for f in check["figures"])
    assert f"check: {check['text']}" in out and (folder / "check" / "ab.json").is_file()

    third = run_harness_cli(*args, "search.trials=6", "search.check_blocks=2", cwd=tmp_path)
    assert third.returncode == 0, third.stderr
    assert not re.search(r"^trial \d+:", third.stdout, re.M) and "block 1" not in third.stdout
    assert json.loads((folder / "search.json").read_text())["check"]["reused"] is True

    page = chromium.open(folder / "search.html")
    assert page.errors == [] and page.dialogs == [] and page.title.startswith("Search · reference")
    plots = {p["id"]: p for p in page.plots}
    assert plots["pareto"]["traces"] >= 3 and plots["objectives"]["traces"] >= 2
    compare = chromium.open(folder / "compare.html")
    assert compare.errors == [] and "pareto" in {p["id"] for p in compare.plots}
