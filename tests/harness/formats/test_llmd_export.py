"""llm-d benchmark reports v0.2: a real run and imported peer runs validate against the published
schema; a broken report does not; a sweep exports one report per run under one experiment."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from conftest import run_harness_cli
from reference_fixtures import PEER_SERVER_ARGS, peer_run_overrides, reference_server

from harness.formats import llmd
from harness.formats.detect import read_results
from harness.formats.imported import write_run
from harness.interop import export_cli
from harness.results.schema import LLMD_REPORT_VERSION
from harness.results.store import load_run

PEERS = Path(__file__).resolve().parents[2] / "fixtures" / "peers"


@pytest.fixture(scope="module")
def real_run(tmp_path_factory, real_model):
    """A real run of the harness against the reference server (its figures known: 50 ms, then 10 ms a token)."""
    tmp = tmp_path_factory.mktemp("llmd-run")
    with reference_server(tmp, *PEER_SERVER_ARGS) as server:
        proc = run_harness_cli(
            *peer_run_overrides(server),
            "progress=false",
            f"hydra.run.dir={tmp / 'run'}",
            cwd=tmp,
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return tmp / "run"


def test_the_schema_is_the_published_one():
    assert hashlib.sha256(llmd.SCHEMA_PATH.read_bytes()).hexdigest() == llmd.SCHEMA_SHA256
    assert llmd.schema()["title"] == f"Benchmark Report v{LLMD_REPORT_VERSION}"


@pytest.mark.slow  # the harness's own run (python -m harness) against the reference server
def test_an_exported_real_run_validates(real_run):
    report = llmd.report_of(load_run(real_run))
    llmd.validate(report)
    aggregate = report["results"]["request_performance"]["aggregate"]
    assert aggregate["requests"]["total"] == 6 and aggregate["requests"]["failures"] == 0
    latency = aggregate["latency"]
    assert latency["time_to_first_token"]["units"] == "s"
    assert latency["time_to_first_token"]["p50"] == pytest.approx(0.050, abs=0.03)
    assert latency["time_per_output_token"]["p50"] == pytest.approx(0.010, abs=0.004)
    assert latency["inter_token_latency"]["units"] == "s/token"
    # with the first token: E2E / n = (50 + 7·10) / 8 ms
    assert latency["normalized_time_per_output_token"]["p50"] == pytest.approx(0.120 / 8, abs=0.005)
    assert set(llmd.PERCENTILES) <= set(latency["request_latency"])
    assert report["scenario"]["load"]["standardized"]["tool"] == "llm-harness"
    assert report["scenario"]["load"]["standardized"]["output_seq_len"] == {"distribution": "fixed", "value": 8}
    assert report["scenario"]["stack"][0]["standardized"]["kind"] == "generic"  # a server seen over HTTP
    assert report["run"]["time"]["duration"].startswith("PT")


@pytest.mark.parametrize("path", ["vllm-bench/vllm-bench.json", "guidellm/benchmarks.json", "aiperf"])
def test_an_imported_run_validates_with_its_tool_as_the_load(tmp_path, path):
    (run,) = read_results([PEERS / path])
    report = llmd.report_of(load_run(write_run(run, tmp_path / "run")))
    llmd.validate(report)
    assert report["scenario"]["load"]["standardized"]["tool"] == llmd.LOAD_TOOLS[run.tool]


@pytest.mark.slow  # the harness's own run (python -m harness) against the reference server
def test_a_broken_report_is_refused(real_run):
    report = llmd.report_of(load_run(real_run))
    broken = json.loads(json.dumps(report))
    del broken["run"]["uid"]
    with pytest.raises(llmd.InvalidReport, match="uid"):
        llmd.validate(broken)
    wrong_unit = json.loads(json.dumps(report))
    wrong_unit["results"]["request_performance"]["aggregate"]["latency"]["time_to_first_token"]["units"] = "tokens/s"
    with pytest.raises(llmd.InvalidReport, match="time_to_first_token"):
        llmd.validate(wrong_unit)
    extra = json.loads(json.dumps(report))
    extra["results"]["request_performance"]["aggregate"]["latency"]["tpot"] = {"units": "s", "mean": 1.0}
    with pytest.raises(llmd.InvalidReport, match="Additional properties"):
        llmd.validate(extra)


@pytest.mark.slow  # the harness's own run (python -m harness) against the reference server
def test_the_command_exports_a_run_and_a_sweep(tmp_path, real_run, capsys):
    assert export_cli.main([str(real_run), "--format", "llmd", "--out", str(tmp_path / "one.json")]) == 0
    llmd.validate(json.loads((tmp_path / "one.json").read_text()))
    sweep = tmp_path / "sweep"
    for i in range(2):
        shutil.copytree(real_run, sweep / f"point-{i}")
    assert export_cli.main([str(sweep), "--out", str(tmp_path / "reports")]) == 0
    reports = [json.loads(p.read_text()) for p in sorted((tmp_path / "reports").glob("*.json"))]
    assert [r["scenario"]["load"]["standardized"]["stage"] for r in reports] == [0, 1]
    assert len({r["run"]["eid"] for r in reports}) == 1 and len({r["run"]["uid"] for r in reports}) == 2
    assert export_cli.main([str(tmp_path / "nothing"), "--out", str(tmp_path / "x.json")]) == 2
    assert "not a run or sweep folder" in capsys.readouterr().err
