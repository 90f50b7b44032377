"""crosscheck.html from a real harness run against the reference server and the peers' real files
(tests/fixtures/peers/: the same server settings), with the reference server's truth."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from browser import screenshot_dir
from conftest import make_config
from reference_fixtures import PEER_SERVER_ARGS, peer_run_overrides, reference_server

from harness.formats import definitions
from harness.formats.detect import read_results
from harness.formats.imported import write_run
from harness.reports import crosscheck
from harness.results.store import load_run
from harness.run.point import run_benchmark

PEERS = Path(__file__).resolve().parents[2] / "fixtures" / "peers"
TRUTH = crosscheck.Truth(ttft_s=0.050, itl_s=0.010, output_tokens=8, role_chunk="empty")


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("crosscheck")
    with reference_server(tmp, *PEER_SERVER_ARGS) as server:
        cfg = make_config(*peer_run_overrides(server), "machine.enabled=false")
        run_benchmark(cfg, tmp / "harness")
    out = [crosscheck.Measured(definitions.HARNESS, load_run(tmp / "harness"))]
    for path in ("vllm-bench/vllm-bench.json", "guidellm/benchmarks.json", "aiperf"):
        (run,) = read_results([PEERS / path], tool_version="0.32.0")
        out.append(crosscheck.Measured(run.tool, load_run(write_run(run, tmp / run.tool, model_name="smollm2-135m"))))
    return out


def test_the_table_sets_figures_of_one_definition_side_by_side(measured):
    rows = {(r["concept"], r["stat"]): r for r in crosscheck.rows(measured, TRUTH)}
    ttft = rows[("ttft_s", "p50")]
    assert set(ttft["values"]) == {"harness", "vllm-bench", "guidellm", "aiperf"}
    assert abs(ttft["error"]["harness"]) < 20  # ms: the harness against the schedule
    assert ttft["error"]["vllm-bench"] < -25  # the role-only chunk stamped as the first token
    assert ttft["truth"] == pytest.approx(50.0)
    # per-chunk gaps: vLLM and AIPerf have them, GuideLLM does not (absent, not zero)
    chunk = rows[("itl_chunk_s", "p50")]
    assert chunk["values"]["guidellm"] is None and chunk["values"]["vllm-bench"] is not None
    # the time per token with the first: E2E / n for every client; the truth (50 + 7·10) / 8 ms
    ntpot = rows[(definitions.NTPOT, "p50")]
    assert ntpot["truth"] == pytest.approx(15.0)
    assert all(v is not None for v in ntpot["values"].values())
    assert rows[("requests_per_s", None)]["truth"] is None


def test_disagreements_are_explained_by_definitions(measured):
    table = crosscheck.rows(measured, TRUTH)
    lines = crosscheck.disagreements(measured, table)
    vllm_ttft = [line for line in lines if line.startswith("TTFT") and "vllm bench serve" in line]
    assert len(vllm_ttft) == 1 and "role-only chunk" in vllm_ttft[0]
    names = {row["name"]: row for row in crosscheck.by_name(measured)}
    guidellm = next(m.title for m in measured if m.tool == definitions.GUIDELLM)
    assert "first token included" in names["TPOT"][guidellm]
    assert "= TPOT" in names["ITL"][guidellm]  # GuideLLM's ITL is the harness's TPOT
    vllm = next(m.title for m in measured if m.tool == definitions.VLLM_BENCH)
    assert "= ITL per chunk" in names["ITL"][vllm]


@pytest.mark.slow  # headless Chromium
def test_the_page_opens_with_its_plots(measured, tmp_path, chromium):
    context = crosscheck.Context("http://127.0.0.1:1", "m", 6, 2, 32, 8, skipped=["AIPerf: not found"])
    page = crosscheck.write(tmp_path, measured, TRUTH, context)
    data = json.loads((tmp_path / crosscheck.DATA).read_text())
    assert data["truth"]["ttft_s"] == 0.05 and data["disagreements"]
    html = page.read_text()
    for text in ("Against the known schedule", "role-only chunk", "What each client calls TTFT", "AIPerf: not found"):
        assert text in html
    result = chromium.open(page, screenshot=screenshot_dir(tmp_path) / "crosscheck.png")
    assert not result.errors and not result.dialogs
    assert {p["id"] for p in result.plots} == {"bars", "cdfs"} and all(p["traces"] for p in result.plots)
