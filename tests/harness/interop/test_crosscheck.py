"""python -m harness.crosscheck against the reference server, with the peers installed here (slow:
each peer is a process of its own that starts in 6 to 60 s)."""

from __future__ import annotations

import json

import pytest
from reference_fixtures import reference_server

from harness.interop import crosscheck_cli, peers


@pytest.mark.slow
def test_crosscheck_on_the_reference_server(tmp_path, real_model, capsys):
    found = [t for t in (peers.GUIDELLM, peers.AIPERF) if peers.find(t)[0] is not None]
    if not found:
        pytest.skip("neither GuideLLM nor AIPerf is installed (HARNESS_GUIDELLM, HARNESS_AIPERF, PATH)")
    with reference_server(
        tmp_path, "--ttft-ms", "50", "--itl-ms", "10", "--model-name", "m", "--tokenizer", str(real_model.hf_dir)
    ) as server:
        code = crosscheck_cli.main(
            [
                "--url",
                server.url_root + "/v1",
                "--tools",
                "vllm,guidellm,aiperf",
                "--vllm",
                str(tmp_path / "no-such-python"),
                "--requests",
                "6",
                "--output-len",
                "8",
                "--out",
                str(tmp_path / "out"),
            ]
        )
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "skipped: vllm bench serve" in printed and "is not a file" in printed
    data = json.loads((tmp_path / "out" / "crosscheck.json").read_text())
    assert data["truth"]["ttft_s"] == pytest.approx(0.05)
    assert set(data["clients"]) == {"harness", *found}
    ttft = next(r for r in data["rows"] if r["concept"] == "ttft_s" and r["stat"] == "p50")
    for tool in ("harness", *found):  # every client here stamps the first token, not the role chunk
        assert abs(ttft["error"][tool]) < 40, (tool, ttft)
    tpot = next(r for r in data["rows"] if r["concept"] == "tpot_s" and r["stat"] == "p50")
    for tool in ("harness", *found):
        assert abs(tpot["error"][tool]) < 5, (tool, tpot)
    page = (tmp_path / "out" / "crosscheck.html").read_text()
    assert "Against the known schedule" in page
    assert (tmp_path / "out" / "compare" / "compare.html").is_file()
    for tool in found:
        assert (tmp_path / "out" / tool / "summary.json").is_file()
