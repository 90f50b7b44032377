"""Cross-engine token agreement: the recorded ids, the figures against a baseline, and their rendering."""

import json
import shutil
import signal
import subprocess
import sys
import time

import pandas as pd
import psutil
import pytest
from conftest import as_foreground_job, loads_engine, make_config

from core.model import gguf_quantization, hf_dtype
from harness.reports import agreement
from harness.results.store import load_run
from harness.run.point import run_benchmark

CHAT = [
    "model=tiny-random",
    "workload=chat",
    "workload.sessions=3",
    "workload.turns=1",
    "workload.user_len=16",
    "workload.output_len=8",
    "workload.concurrency=1",
    "workload.warmup_requests=0",
    "report=false",
]


@pytest.fixture(scope="module")
@loads_engine
def run_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("agree") / "fp32"
    run_benchmark(make_config(*CHAT, "backend.dtype=float32"), path)
    return path


def copy_with_ids(source, dest, change):
    """A copy of ``source`` whose output ids are changed by ``change(request_id, ids) -> ids``."""
    shutil.copytree(source, dest)
    df = pd.read_parquet(dest / "requests.parquet")
    df["output_token_ids"] = [list(change(int(r), list(ids))) for r, ids in zip(df.request_id, df.output_token_ids)]
    df.to_parquet(dest / "requests.parquet", index=False)
    return dest


@pytest.mark.engine
def test_each_run_records_its_output_ids_and_numerics(run_dir):
    result = load_run(run_dir)
    df = result.requests
    assert (df.output_token_ids.map(len) == df.output_tokens).all()
    # the text the runner decoded is the ids' text
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(result.summary.model["hf_dir"])
    assert [tok.decode(list(ids)) for ids in df.output_token_ids] == list(df.output_text)
    assert result.summary.backend["dtype"] == "float32" and result.summary.backend["quantization"] is None
    assert result.summary.workload["greedy"] is True
    rows = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    assert [r["output_token_ids"] for r in rows] == [list(ids) for ids in df.output_token_ids]


@pytest.mark.engine
def test_identical_runs_agree_fully(run_dir):
    result = load_run(run_dir)
    a = agreement.agreement(result, result)
    assert (a.compared, a.identical, a.identical_share, a.first) == (3, 3, 1.0, None)
    assert a.mean_common_prefix == a.mean_baseline_tokens and a.prefix_share == 1.0 and a.problems == []


@pytest.mark.engine
def test_a_divergence_is_found_where_it_is(run_dir, tmp_path):
    def change(rid, ids):
        if rid == 1:
            ids[3] = (ids[3] + 1) % 1000  # request 1 parts at token 3
        if rid == 2:
            ids = ids[:5]  # request 2 stops early: it parts at token 5
        return ids

    other = load_run(copy_with_ids(run_dir, tmp_path / "other", change))
    base = load_run(run_dir)
    n = [len(ids) for ids in base.requests.sort_values("request_id").output_token_ids]
    a = agreement.agreement(base, other)
    assert (a.compared, a.identical) == (3, 1)
    assert a.mean_common_prefix == pytest.approx((n[0] + 3 + 5) / 3)
    assert (a.first.request_id, a.first.position, a.first.tokens) == (1, 3, n[1])
    assert agreement.matrix([base, other], ["a", "b"]).loc["a", "b"] == pytest.approx(1 / 3)


@pytest.mark.engine
def test_sampled_or_different_prompts_are_flagged(run_dir, tmp_path):
    other = tmp_path / "sampled"
    shutil.copytree(run_dir, other)
    summary = json.loads((other / "summary.json").read_text())
    summary["workload"]["greedy"] = False
    summary["workload"]["prompts_sha256"] = "0" * 64
    (other / "summary.json").write_text(json.dumps(summary))
    problems = agreement.agreement(load_run(run_dir), load_run(other)).problems
    assert any("sampled" in p for p in problems) and any("different prompts" in p for p in problems)


@pytest.mark.engine
def test_compare_renders_the_agreement(run_dir, tmp_path):
    other = copy_with_ids(run_dir, tmp_path / "other", lambda rid, ids: ids[:2] + [7] + ids[3:] if rid == 0 else ids)
    out = tmp_path / "cmp"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.compare",
            str(run_dir),
            str(other),
            "--out",
            str(out),
            "--resamples",
            "50",
            "--markdown",
            str(tmp_path / "c.md"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert "token agreement with the baseline" in proc.stdout and "dtype float32" in proc.stdout
    assert "request 0, token 2" in proc.stdout and "2/3 (67%)" in proc.stdout
    csv = pd.read_csv(out / "agreement.csv")
    assert csv.identical.tolist() == [2] and csv.first_divergence_position.tolist() == [2]
    assert "Token agreement with the baseline" in (out / "compare.html").read_text()
    assert "### Token agreement with the baseline" in (tmp_path / "c.md").read_text()


@pytest.mark.engine
def test_agree_command_on_existing_runs(run_dir, tmp_path):
    other = copy_with_ids(run_dir, tmp_path / "b", lambda rid, ids: ids)
    proc = subprocess.run(
        [sys.executable, "-m", "harness.agree", "--runs", str(run_dir), str(other), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "identical replies, every pair" in proc.stdout and "100%" in proc.stdout
    assert (tmp_path / "out" / "compare" / "agreement.csv").exists()


@pytest.mark.slow
def test_agree_command_refuses_an_unknown_engine():
    proc = subprocess.run(
        [sys.executable, "-m", "harness.agree", "--engines", "transformers-fp32,tensorflow"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stderr.strip().startswith("error: unknown engine 'tensorflow'")


def test_model_numerics_from_the_files(real_model, tiny_model):
    assert gguf_quantization(real_model.gguf_file) == "GGUF Q4_1"
    assert hf_dtype(tiny_model.hf_dir) == "bfloat16"
    assert gguf_quantization(tiny_model.hf_dir / "config.json") is None  # not a GGUF


@pytest.mark.parametrize(
    "key,value,what",
    [
        ("constraint", "json_schema 3f2a9c1d04be", "reply constraint"),
        ("lora", "a0 1, base 1 · 9c1d04be3f2a", "LoRA traffic"),
        ("tree", "2 jobs, 6 agents, depth 1 · 04be3f2a9c1d", "agent tree"),
    ],
)
@pytest.mark.engine
def test_a_different_constraint_adapter_mix_or_tree_is_named(run_dir, tmp_path, key, value, what):
    """The prompts hash covers all three; the problem says which part differs, not only 'different prompts'."""
    other = tmp_path / key
    shutil.copytree(run_dir, other)
    summary = json.loads((other / "summary.json").read_text())
    summary["workload"].update({key: value, "prompts_sha256": "0" * 64})
    (other / "summary.json").write_text(json.dumps(summary))
    problems = agreement.agreement(load_run(run_dir), load_run(other)).problems
    assert problems == [f"the runs differ in their {what}" + problems[0].split(what, 1)[1]]
    assert problems[0].endswith(f": none vs {value}")


@pytest.mark.parametrize("workload", ["chat", "structured", "agentic", "lora"])
def test_agree_workloads_compose_and_plan(workload):
    """Each --workload of python -m harness.agree is a valid greedy one-at-a-time config."""
    from harness.run.agree import workload_overrides

    overrides = workload_overrides("tiny-random", 2, None, workload)
    cfg = make_config(*overrides)
    assert cfg.workload.temperature == 0 and cfg.workload.concurrency == 1 and not cfg.workload.exact_output_len
    if workload == "lora":
        assert [a["name"] for a in cfg.workload.lora.adapters] == ["a0", "base"]


@pytest.mark.engine
def test_agree_stopped_by_sigterm_keeps_the_run_in_progress_and_leaves_no_process(tmp_path):
    out = tmp_path / "agree"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness.agree",
            "--engines",
            "llamacpp,mlx",
            "--requests",
            "40",
            "--output-len",
            "64",
            "--out",
            str(out),
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_foreground_job,
    )
    rows = out / "llamacpp" / "requests.jsonl"
    deadline = time.monotonic() + 120
    while not (rows.exists() and rows.read_text().count("\n") >= 1) and time.monotonic() < deadline:
        time.sleep(0.1)
    family = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("interrupted: the runs so far") and "Traceback" not in err
    assert json.loads((out / "llamacpp" / "summary.json").read_text())["status"] == "interrupted"
    assert not (out / "mlx").exists()  # the next engine never started
    gone, alive = psutil.wait_procs(family, timeout=10)
    assert not alive, [p.cmdline() for p in alive]
