"""What a run keeps in memory of its requests: columns, ITL gaps held to a budget."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from harness.config import SLOConfig
from harness.results.kept import KeptRequests, as_table
from harness.results.metrics import ENGINE_STAGES, distributions
from harness.results.store import RunWriter, load_requests
from harness.results.summary import summarize, time_windows
from tests.records import record


def _full(i: int, n_out: int = 11, gap: float = 0.01):
    r = record(i, n_out=n_out, e2e=0.1 + gap * (n_out - 1))
    r.itl_s = [gap * (1 + (i * 7 + k) % 5) for k in range(n_out - 1)]
    r.itl_chunk_s = list(r.itl_s)
    return dataclasses.replace(
        r,
        output_text="x" * 500,
        output_token_ids=list(range(n_out)),
        engine_stats={"vllm_queue_s": 0.5, "prompt_tokens": 50, "note": "y" * 200},
    )


def test_a_kept_record_has_every_field_but_the_payloads():
    kept = KeptRequests(stat_keys=ENGINE_STAGES)
    full = dataclasses.replace(_full(3), http_reused=True, adapter="a1", error="boom", cached_tokens=None)
    slim = kept.add(full)
    assert slim.output_text is None and slim.output_token_ids is None and slim.ids_text is None
    assert slim.engine_stats == {"vllm_queue_s": 0.5}  # what the summary reads: the engine's stage times
    assert list(slim.itl_chunk_s) == list(slim.itl_s) == _full(3).itl_s
    for name in (
        "request_id",
        "ttft_s",
        "tpot_s",
        "exact_output_len",
        "http_reused",
        "adapter",
        "error",
        "cached_tokens",
        "stage",
        "start_s",
        "prompt_tokens",
    ):
        assert getattr(slim, name) == getattr(full, name) and type(getattr(slim, name)) is type(getattr(full, name)), (
            name
        )
    assert not slim.ok and kept.sampling() is None and len(kept) == 1 and kept[0].request_id == 3


def test_columns_appear_when_a_request_has_a_value_and_earlier_rows_have_none():
    kept = KeptRequests()
    kept.add(_full(0))
    assert not kept.has("http_connect_s") and kept.column("http_connect_s").tolist() != [0.0]
    kept.add(dataclasses.replace(_full(1), http_connect_s=0.002, finish_reason="length"))
    assert kept.has("http_connect_s")
    assert [kept[0].http_connect_s, kept[1].http_connect_s] == [None, 0.002]
    assert kept.column("finish_reason").tolist() == [None, "length"]
    assert kept.where(kept.column("request_id") == 1)[0].finish_reason == "length"


def test_a_table_gives_the_summary_the_records_would():
    """The summary of the kept columns is that of the full records: every section, every figure."""
    full = []
    for i in range(30):
        r = _full(i, n_out=5 + i % 4)
        r.turn, r.start_s, r.stage, r.endpoint = i % 3, i * 0.5, i // 10, i % 2
        r.itl_chunk_s = r.itl_s[::2] if i % 5 == 0 else list(r.itl_s)
        if i % 7 == 0:
            r = dataclasses.replace(r, error="HTTP 500", ttft_s=None, tpot_s=None, e2e_s=None, itl_s=[], itl_chunk_s=[])
        full.append(r)
    stages = [{"index": k, "start_s": 5.0 * k, "end_s": 5.0 * (k + 1)} for k in range(3)]
    slo = SLOConfig(ttft_s=0.2)
    kept = KeptRequests(stat_keys=ENGINE_STAGES)
    for r in full:
        kept.add(r)

    def figures(records):
        return time_windows(summarize(records, 15.0, slo, endpoint_urls=["a", "b"]), records, slo, (2.0, 12.0), stages)

    assert figures(kept) == figures(full)
    # pooled in request order, as each record's own list: a mean's last digit depends on it
    for name in ("itl_s", "itl_chunk_s"):
        assert kept.gaps(name).tolist() == [g for r in full for g in getattr(r, name)]
        odd = kept.where(kept.column("request_id") % 2 == 1)
        assert odd.gaps(name).tolist() == [g for r in full if r.request_id % 2 for g in getattr(r, name)]
    assert isinstance(as_table(full), KeptRequests) and as_table(kept) is kept


def test_under_the_budget_the_distributions_are_exact():
    full = [_full(i) for i in range(50)]
    kept = KeptRequests(itl_budget=10_000)
    for r in full:
        kept.add(r)
    assert distributions(kept) == distributions(full)


def test_past_the_budget_every_request_keeps_one_gap_in_k_and_the_sample_stays_uniform():
    rng = np.random.default_rng(0)
    full = []
    for i in range(400):
        r = _full(i, n_out=65)
        r.itl_s = list(rng.exponential(0.02, 64) + (0.05 if i % 2 else 0.0))  # two kinds of request
        r.itl_chunk_s = list(r.itl_s)
        full.append(r)
    kept = KeptRequests(itl_budget=4000)
    for r in full:
        kept.add(r)
    info = kept.sampling()
    assert info is not None and info["one_in"] == 8 and info["itl_s_seen"] == 400 * 64
    assert info["itl_s_kept"] <= 4000 and info["itl_s_kept"] == sum(len(r.itl_s) for r in kept) == len(
        kept.gaps("itl_s")
    )
    exact = distributions(full)["itl_s"]
    sampled = distributions(kept)["itl_s"]
    for p in ("p50", "p90", "mean"):
        assert abs(sampled[p] - exact[p]) / exact[p] < 0.05, p
    # the requests' own figures are untouched
    assert [r.tpot_s for r in kept] == [r.tpot_s for r in full]


def test_thinning_keeps_the_positions_a_fresh_record_would_keep():
    """A record thinned from stride k to 2k holds the gaps a record added at 2k would."""
    r = _full(5, n_out=101)
    early, late = KeptRequests(itl_budget=150), KeptRequests(itl_budget=150)
    early.add(r)
    for i in range(6, 10):
        early.add(_full(i, n_out=101))
    late.stride = early.stride
    assert list(early[0].itl_s) == list(late.add(r).itl_s)
    assert list(early[0].itl_chunk_s) == list(early[0].itl_s)


def test_the_writer_keeps_slim_records_and_the_table_keeps_every_payload(tmp_path):
    writer = RunWriter(tmp_path, tokenize=lambda texts: [[len(t), 1, 2] for t in texts])
    pending = dataclasses.replace(_full(2), output_token_ids=None, ids_text="abcd")
    for r in (_full(1), pending, _full(0)):
        writer.append(r)
    assert all(r.output_text is None for r in writer.records)
    writer.write_tables([], 0.0)
    df = load_requests(tmp_path)
    assert list(df["request_id"]) == [0, 1, 2]
    assert df.loc[2, "output_token_ids"].tolist() == [4, 1, 2]  # counted from the text after the run
    assert df.loc[0, "output_text"] == "x" * 500 and df.loc[0, "itl_s"].tolist() == _full(0).itl_s
    assert "ids_text" not in df.columns


def test_row_groups_of_a_long_run_load_in_request_order(tmp_path, monkeypatch):
    monkeypatch.setattr("harness.results.store.ROW_GROUP", 3)
    writer = RunWriter(tmp_path)
    for i in (5, 4, 3, 2, 1, 0, 6):
        writer.append(_full(i))
    writer.write_tables([], 0.0)
    df = load_requests(tmp_path)
    assert list(df["request_id"]) == list(range(7))
    assert isinstance(df, pd.DataFrame) and df["ttft_s"].notna().all()


def test_an_empty_run_writes_an_empty_table_with_every_column(tmp_path):
    RunWriter(tmp_path).write_tables([], 0.0)
    df = load_requests(tmp_path)
    assert len(df) == 0 and "itl_s" in df.columns and "output_token_ids" in df.columns
