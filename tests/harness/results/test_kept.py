"""What a run keeps in memory of its requests: slim records, ITL gaps held to a budget."""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from harness.results.kept import KeptRequests
from harness.results.metrics import distributions
from harness.results.store import RunWriter, load_requests
from tests.records import record


def _full(i: int, n_out: int = 11, gap: float = 0.01):
    r = record(i, n_out=n_out, e2e=0.1 + gap * (n_out - 1))
    r.itl_s = [gap * (1 + (i * 7 + k) % 5) for k in range(n_out - 1)]
    r.itl_chunk_s = list(r.itl_s)
    return dataclasses.replace(r, output_text="x" * 500, output_token_ids=list(range(n_out)),
                               engine_stats={"vllm_queue_s": 0.5, "prompt_tokens": 50, "note": "y" * 200})


def test_a_kept_record_has_no_payloads_and_one_packed_array_for_equal_gaps():
    kept = KeptRequests()
    slim = kept.add(_full(3))
    assert slim.output_text is None and slim.output_token_ids is None and slim.ids_text is None
    assert slim.engine_stats == {"vllm_queue_s": 0.5}  # what the summary reads: the engine's stage times
    assert slim.itl_chunk_s is slim.itl_s and list(slim.itl_s) == _full(3).itl_s
    assert kept.sampling() is None and len(kept) == 1 and kept[0] is slim


def test_under_the_budget_the_distributions_are_exact():
    full = [_full(i) for i in range(50)]
    kept = KeptRequests(itl_budget=10_000)
    for r in full:
        kept.add(r)
    assert distributions(list(kept)) == distributions(full)


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
    assert info["itl_s_kept"] <= 4000 and info["itl_s_kept"] == sum(len(r.itl_s) for r in kept)
    exact = distributions(full)["itl_s"]
    sampled = distributions(list(kept))["itl_s"]
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
