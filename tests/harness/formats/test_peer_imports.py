"""The importers on files the peer tools wrote for real (tests/fixtures/peers/, from
scripts/peer_fixtures.py): 6 requests, 8 output tokens each, against the reference server (first
token 50 ms after arrival, then one every 10 ms; its streams open with a role-only chunk)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.formats import definitions
from harness.formats.detect import NotAResultFile, read_results, tool_of
from harness.formats.imported import write_run
from harness.history.record import run_row
from harness.reports.run_report import build_report
from harness.results.schema import SCHEMA_VERSION
from harness.results.store import load_run

PEERS = Path(__file__).resolve().parents[2] / "fixtures" / "peers"
VLLM = PEERS / "vllm-bench" / "vllm-bench.json"
VLLM_SUMMARY = PEERS / "vllm-bench" / "vllm-bench-summary.json"
GUIDELLM = PEERS / "guidellm" / "benchmarks.json"
AIPERF = PEERS / "aiperf"
TTFT, ITL, TOKENS = 0.050, 0.010, 8  # the reference server's schedule and the output length
E2E = TTFT + (TOKENS - 1) * ITL


def imported(path: Path, tmp_path: Path, **kwargs):
    (run,) = read_results([path], **kwargs)
    return run, load_run(write_run(run, tmp_path / run.tool, model_name="smollm2-135m"))


def test_the_fixtures_are_small_and_named_by_their_tools():
    versions = json.loads((PEERS / "versions.json").read_text())["tools"]
    assert versions == {"vllm-bench": "0.32.0", "guidellm": "0.8.1", "aiperf": "0.13.0"}
    for path in PEERS.rglob("*.json*"):
        assert path.stat().st_size < 60_000, path
    assert tool_of(json.loads(VLLM.read_text())) == definitions.VLLM_BENCH
    assert tool_of(json.loads(GUIDELLM.read_text())) == definitions.GUIDELLM
    assert tool_of(json.loads((AIPERF / "profile_export_aiperf.json").read_text())) == definitions.AIPERF


def test_vllm_bench_with_its_requests(tmp_path):
    run, loaded = imported(VLLM, tmp_path, tool_version="0.32.0")
    s = loaded.summary
    assert s.schema_version == SCHEMA_VERSION
    assert s.source["tool"] == "vllm-bench" and s.source["tool_version"] == "0.32.0" and s.source["per_request"]
    assert s.requests == {"sent": 6, "completed": 6, "failed": 0}
    assert len(loaded.requests) == 6 and (loaded.requests["output_tokens"] == TOKENS).all()
    # vLLM stamps the role-only first chunk: its TTFT is far below the schedule's, its TPOT above
    assert s.latency["ttft_s"]["p50"] < TTFT / 2
    assert s.latency["tpot_s"]["p50"] > ITL * 1.1
    assert s.latency["e2e_s"]["p50"] == pytest.approx(E2E, abs=0.015)
    # its ITL is per chunk: the harness's ITL per chunk, and no per-token gaps (absent, not zero)
    assert s.latency["itl_chunk_s"]["count"] > 0
    assert s.latency["itl_s"]["count"] == 0 and s.latency["itl_s"]["p50"] is None
    assert "itl_s" in s.source["absent"]
    assert loaded.requests["itl_s"].isna().all()
    # its own figures, in its own names and units, with its definitions
    assert s.source["figures"]["ITL"]["unit"] == "ms"
    assert s.source["definitions"]["ITL"]["concept"] == "itl_chunk_s"
    assert s.throughput["requests_per_s"] == pytest.approx(json.loads(VLLM.read_text())["request_throughput"])
    assert s.throughput["goodput_requests_per_s"] is None and s.throughput["energy_per_token_j"] is None
    assert (Path(loaded.run_dir) / "imported" / VLLM.name).read_bytes() == VLLM.read_bytes()


def test_vllm_bench_without_its_requests_keeps_only_what_it_reported(tmp_path):
    run, loaded = imported(VLLM_SUMMARY, tmp_path)
    s = loaded.summary
    assert run.rows is None and not (Path(loaded.run_dir) / "requests.parquet").exists()
    assert s.source["tool_version"] is None and any("version" in w for w in s.warnings)
    raw = json.loads(VLLM_SUMMARY.read_text())
    ttft = s.latency["ttft_s"]
    assert ttft["mean"] == pytest.approx(raw["mean_ttft_ms"] / 1e3)
    assert ttft["p50"] == pytest.approx(raw["median_ttft_ms"] / 1e3)
    assert ttft["p99"] == pytest.approx(raw["p99_ttft_ms"] / 1e3)
    assert ttft["p90"] is None and ttft["p95"] is None  # not reported: absent
    assert s.latency["e2e_s"]["mean"] is None  # e2el is not among vLLM's default percentile metrics
    assert s.requests["completed"] == 6


def test_vllm_bench_statistics_of_no_request_are_absent(tmp_path):
    raw = json.loads(VLLM_SUMMARY.read_text())
    raw.update(completed=0, failed=6, request_throughput=0.0)
    raw.update({k: 0.0 for k in raw if k.endswith("_ms")})  # as vLLM writes them for an empty list
    path = tmp_path / "failed.json"
    path.write_text(json.dumps(raw))
    run, loaded = imported(path, tmp_path)
    assert loaded.summary.latency["ttft_s"]["mean"] is None
    assert loaded.summary.requests == {"sent": 6, "completed": 0, "failed": 6}


def test_guidellm_with_its_requests(tmp_path):
    run, loaded = imported(GUIDELLM, tmp_path)
    s = loaded.summary
    assert s.source["tool_version"] == "0.8.1" and s.source["title"] == "GuideLLM"
    assert s.requests == {"sent": 6, "completed": 6, "failed": 0}
    assert s.workload["concurrency"] == 2 and s.workload["output_len"] == TOKENS
    # GuideLLM stamps the first token, not the role chunk
    assert s.latency["ttft_s"]["p50"] == pytest.approx(TTFT, abs=0.02)
    # its per-request ITL is the harness's TPOT; its own TPOT counts the first token
    assert s.latency["tpot_s"]["p50"] == pytest.approx(ITL, abs=0.003)
    assert s.source["definitions"]["ITL"]["concept"] == "tpot_s"
    assert s.source["definitions"]["TPOT"]["concept"] == definitions.NTPOT
    tpot_incl_first = s.source["figures"]["TPOT"]["stats"]["p50"] / 1e3
    assert tpot_incl_first == pytest.approx(E2E / TOKENS, abs=0.004)
    # E2E to the last token (the harness's definition, from its stamps)
    assert s.latency["e2e_s"]["p50"] == pytest.approx(E2E, abs=0.02)
    # no chunk gaps kept: ITL per chunk absent; its token-weighted mean ITL is the ITL-per-token mean
    assert s.latency["itl_chunk_s"]["count"] == 0 and "itl_chunk_s" in s.source["absent"]
    assert s.latency["itl_s"]["mean"] == pytest.approx(s.source["figures"]["ITL"]["stats"]["mean"] / 1e3)
    assert s.latency["itl_s"]["p50"] is None


def test_guidellm_without_its_requests(tmp_path):
    data = json.loads(GUIDELLM.read_text())
    data["benchmarks"][0]["requests"] = {"successful": [], "errored": [], "incomplete": [], "total": None}
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(data))
    run, loaded = imported(path, tmp_path)
    assert run.rows is None and any("kept no per-request" in w for w in loaded.summary.warnings)
    assert loaded.summary.latency["ttft_s"]["p90"] is not None  # GuideLLM reports p90
    assert loaded.summary.latency["e2e_s"]["mean"] is None  # its request latency has another definition


def test_a_guidellm_sweep_is_one_run_per_benchmark(tmp_path):
    data = json.loads(GUIDELLM.read_text())
    second = json.loads(json.dumps(data["benchmarks"][0]))
    second["config"]["strategy"] = {"type_": "constant", "rate": 4.0}
    data["benchmarks"].append(second)
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(data))
    runs = read_results([path])
    assert [r.label for r in runs] == ["concurrent@2", "constant@4.0"]
    assert runs[1].workload["rate"] == 4.0 and runs[1].workload["open_loop"]


def test_aiperf_with_its_records(tmp_path):
    run, loaded = imported(AIPERF, tmp_path)
    s = loaded.summary
    assert s.source["tool_version"] == "0.13.0" and len(s.source["files"]) == 2
    assert s.requests == {"sent": 6, "completed": 6, "failed": 0}
    assert s.latency["ttft_s"]["p50"] == pytest.approx(TTFT, abs=0.03)
    # AIPerf's ITL is the harness's TPOT; its ICL the harness's ITL per chunk
    assert s.latency["tpot_s"]["p50"] == pytest.approx(ITL, abs=0.004)
    assert s.source["definitions"]["ICL"]["concept"] == "itl_chunk_s"
    records = [json.loads(line) for line in (AIPERF / "profile_export.jsonl").read_text().splitlines()]
    first = min(records, key=lambda r: r["metadata"]["request_start_ns"])
    assert loaded.requests["ttft_s"].iloc[0] == pytest.approx(first["metrics"]["time_to_first_token"]["value"] / 1e3)
    assert loaded.requests["ttst_s"].notna().all()


def test_aiperf_without_its_records(tmp_path):
    shutil.copyfile(AIPERF / "profile_export_aiperf.json", tmp_path / "profile_export_aiperf.json")
    run, loaded = imported(tmp_path / "profile_export_aiperf.json", tmp_path / "out")
    assert run.rows is None
    assert loaded.summary.latency["ttft_s"]["p90"] is not None  # AIPerf's own statistics
    assert loaded.summary.latency["itl_chunk_s"]["mean"] is not None


def test_a_file_of_no_tool_is_refused_in_one_line(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"hello": 1}')
    with pytest.raises(NotAResultFile, match="not a result file"):
        read_results([path])
    with pytest.raises(NotAResultFile, match="written by GuideLLM, not AIPerf"):
        read_results([GUIDELLM], tool=definitions.AIPERF)


def test_imported_runs_read_like_the_harnesss_own(tmp_path):
    """report, history and compare take them; labels name the tool; token agreement leaves them out."""
    from harness.reports.compare.comparison import CompareOptions
    from harness.reports.compare.outputs import compare_runs

    dirs = []
    for path in (VLLM, GUIDELLM, AIPERF):
        run, loaded = imported(path, tmp_path, tool_version="0.32.0")
        page, _ = build_report(loaded)
        assert "measured by" in page and f"Measured by {run.title}" in page
        row = run_row(loaded.run_dir)
        assert row["client"] == run.tool and row["ttft_s_p50"] is not None
        dirs.append(loaded.run_dir)
    result = compare_runs(dirs, tmp_path / "compare", CompareOptions(resamples=50))
    assert [r.label for r in result.runs] == ["1 vllm-bench", "2 guidellm", "3 aiperf"]
    assert not result.agreements
    assert (tmp_path / "compare" / "compare.html").is_file()
    assert any("client differs" in n for n in result.comparability.notes)


def test_every_definition_names_a_figure_the_pages_show():
    for meaning in definitions.TABLE:
        assert meaning.concept is None or meaning.concept in definitions.CONCEPTS or meaning.concept == "ttst_s"
    for tool in definitions.TOOLS:
        names = {m.name for m in definitions.of_tool(tool)}
        assert "TTFT" in names, tool
        assert definitions.for_concept(tool, "ttft_s") is not None
    # the same name, different figures: what the tools call ITL
    assert {definitions.named(t, "ITL").concept for t in ("vllm-bench", "guidellm", "aiperf")} == {
        "itl_chunk_s",
        "tpot_s",
    }
