"""The run folder's schema: typed summary round trip, text a server sent, partial folders."""

import json

import pandas as pd

from harness.results.record import RequestRecord
from harness.results.schema import REQUEST_COLUMNS, RunSummary
from harness.results.store import RunWriter, clean_text, load_run


def record(i, **kw):
    base = dict(
        request_id=i,
        session_id=i,
        turn=0,
        prompt_tokens=5,
        output_tokens=2,
        requested_output_tokens=2,
        exact_output_len=True,
        expected_prompt_tokens=5,
        scheduled_s=None,
        start_s=0.0,
        end_s=0.2,
        ttft_s=0.1,
        tpot_s=0.1,
        e2e_s=0.2,
        itl_s=[0.1],
    )
    base.update(kw)
    return RequestRecord(**base)


def test_summary_round_trip_and_unknown_keys():
    s = RunSummary(status="complete", latency={"ttft_s": {"p50": 0.25}}, throughput={"requests_per_s": 2.0})
    back = RunSummary.from_dict({**json.loads(json.dumps(s.to_dict())), "from_a_newer_version": 1})
    assert back == s
    assert back.stat("ttft_s", "p50") == 0.25 and back.stat("requests_per_s") == 2.0 and back.stat("nope") is None
    assert RunSummary.from_dict({"status": "failed"}).requests == {"sent": 0, "completed": 0, "failed": 0}


def test_what_a_server_sent_cannot_lose_the_tables(tmp_path):
    """A non-string finish_reason and an error body with a lone surrogate: parquet is still written."""
    writer = RunWriter(tmp_path)
    writer.append(record(0, finish_reason={"weird": 1}))
    writer.append(record(1, error="bad \ud800 body", ttft_s=None, e2e_s=None, tpot_s=None, itl_s=[]))
    writer.write_tables([], 0.0)
    df = pd.read_parquet(tmp_path / "requests.parquet")
    assert list(df.columns) == list(REQUEST_COLUMNS)
    assert df.finish_reason[0] == "{'weird': 1}" and df.error[1] == "bad \ufffd body"
    assert clean_text(None) is None and clean_text(3) == "3"


def test_load_run_from_requests_jsonl_alone(tmp_path):
    writer = RunWriter(tmp_path)
    writer.append(record(0))
    writer.write_summary(RunSummary(status="interrupted"))
    run = load_run(tmp_path)  # no parquet, no env, no config, no workload
    assert run.summary.status == "interrupted" and len(run.requests) == 1
    assert run.values("ttft_s").tolist() == [0.1] and run.env == {} and run.config() == {}


def test_a_killed_run_with_a_truncated_last_line_still_loads(tmp_path):
    """SIGKILL mid-write: requests.jsonl ends in half a line, and there is no summary.json."""
    from harness.reports.run_report import main as report_main

    writer = RunWriter(tmp_path)
    for i in range(3):
        writer.append(record(i, ttft_s=0.1 * (i + 1)))
    with open(tmp_path / "requests.jsonl", "a") as f:
        f.write('{"request_id": 3, "session_id": 3, "tu')  # cut off
    run = load_run(tmp_path)
    assert len(run.requests) == 3
    assert run.summary.status == "incomplete" and run.summary.requests == {"sent": 3, "completed": 3, "failed": 0}
    assert run.summary.stat("ttft_s", "p50") == 0.2
    assert report_main([str(tmp_path)]) == 0 and (tmp_path / "report.html").exists()


def test_report_of_a_folder_that_is_no_run_is_one_line(tmp_path, capsys):
    from harness.reports.run_report import main as report_main

    assert report_main([str(tmp_path)]) == 2
    assert (
        capsys.readouterr().err.strip()
        == f"error: {tmp_path} is not a run folder: it has neither summary.json nor requests.jsonl"
    )
