"""The metric formulas against values computed by hand."""

import math

import pytest

from core.sequences import reconcile_counts
from core.types import RequestDone
from harness.config import SLOConfig
from harness.results import formulas
from harness.results.record import RequestTiming, build_record


def test_request_formulas_by_hand():
    send = 10.0
    chunks = [(10.5, 1), (10.6, 1), (10.8, 1), (11.1, 1)]  # 4 tokens
    assert formulas.ttft(send, chunks[0][0]) == pytest.approx(0.5)
    assert formulas.e2e_latency(send, chunks[-1][0]) == pytest.approx(1.1)
    assert formulas.tpot(1.1, 0.5, 4) == pytest.approx(0.2)  # (1.1 - 0.5) / 3
    assert formulas.inter_token_latencies(chunks) == pytest.approx([0.1, 0.2, 0.3])
    assert formulas.output_tokens_per_second(4, 1.1) == pytest.approx(4 / 1.1)
    assert formulas.decode_tokens_per_second(0.2) == pytest.approx(5.0)
    assert formulas.queue_wait(send, 10.25) == pytest.approx(0.25)
    assert formulas.queue_wait(send, None) is None


def test_tpot_undefined_for_one_token():
    assert formulas.tpot(0.5, 0.5, 1) is None
    assert formulas.decode_tokens_per_second(None) is None


def test_multi_token_chunks_spread_their_gap():
    # first chunk carries 2 tokens, then a chunk of 3 tokens 0.3 s later
    gaps = formulas.inter_token_latencies([(1.0, 2), (1.3, 3)])
    assert gaps == pytest.approx([0.0, 0.1, 0.1, 0.1])
    assert sum(gaps) == pytest.approx(0.3)  # Σ ITL = E2E − TTFT
    assert len(gaps) == 5 - 1


def test_distribution_percentiles():
    d = formulas.distribution([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    assert d["count"] == 10
    assert d["mean"] == pytest.approx(5.5)
    assert d["p50"] == pytest.approx(5.5)
    assert d["p90"] == pytest.approx(9.1)  # linear: 1 + 0.9 * 9
    assert d["p99"] == pytest.approx(9.91)
    assert d["min"] == 1 and d["max"] == 10
    empty = formulas.distribution([])
    assert empty["count"] == 0 and empty["mean"] is None


def test_run_throughputs_by_hand():
    assert formulas.request_throughput(8, 4.0) == 2.0
    assert formulas.output_token_throughput([10, 20, 30], 6.0) == 10.0
    assert formulas.total_token_throughput([100, 100], [10, 30], 4.0) == 60.0
    assert formulas.goodput(3, 2.0) == 1.5
    assert formulas.mean_concurrency([1.0, 2.0, 3.0], 3.0) == 2.0


def test_slo():
    slo = SLOConfig(ttft_s=0.5, tpot_s=0.05, e2e_s=None)
    assert formulas.meets_slo(0.4, 0.04, 99.0, slo)
    assert not formulas.meets_slo(0.6, 0.04, 1.0, slo)
    assert not formulas.meets_slo(0.4, 0.06, 1.0, slo)
    assert formulas.meets_slo(0.4, None, 1.0, slo)  # one-token outputs have no TPOT
    assert formulas.meets_slo(9.0, 9.0, 9.0, SLOConfig())


def test_kv_cache_bytes_for_smollm2_shape():
    config = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576}
    # 2 × 30 layers × 3 KV heads × head_dim 64 × 2 bytes (bf16) = 23,040 bytes
    assert formulas.kv_cache_bytes_per_token(config, 2) == 23040
    assert formulas.kv_cache_bytes_per_token({**config, "head_dim": 128}, 4) == 2 * 30 * 3 * 128 * 4
    assert formulas.kv_cache_bytes_per_token({}, 2) is None
    # 1 GiB budget, 100 MiB of weights: (1024 − 100) MiB / 23,040 B
    assert formulas.kv_tokens_in_budget(2**30, 100 * 2**20, 23040) == math.floor((2**30 - 100 * 2**20) / 23040)
    assert formulas.kv_tokens_in_budget(10, 100, 23040) == 0


def test_cached_share():
    assert formulas.cached_share([10, 0, None], [20, 20, 100]) == pytest.approx(0.25)  # unknown ones left out
    assert formulas.cached_share([None, None], [5, 5]) is None


@pytest.mark.parametrize(
    "stats,error",
    [
        ({"output_tokens": -5}, "invalid output tokens count: '-5'"),
        ({"output_tokens": "12"}, "invalid output tokens count: '12'"),
        ({"prompt_tokens": 3.5}, "invalid prompt tokens count: '3.5'"),
        ({"output_tokens": float("nan")}, "invalid output tokens count: 'nan'"),
    ],
)
def test_counts_a_server_lies_about_fail_that_request(stats, error):
    """A server's usage that is not a whole number ≥ 0 is that request's error, never negative tokens/s."""
    from core.types import GenerationRequest

    request = GenerationRequest(request_id=0, prompt_token_ids=[1, 2, 3], max_new_tokens=4, exact_output_len=True)
    timing = RequestTiming(t0=0.0, send_t=1.0, end_t=2.0, chunks=[(1.5, 1), (1.6, 1)], expected_prompt_tokens=3)
    record = build_record(request, timing, RequestDone("length", engine_stats=stats), output_token_ids=[7, 8])
    assert record.error == f"the engine reported an {error}"
    assert record.prompt_tokens == 3 and record.output_tokens == 2 and record.ttft_s is None


def test_itl_per_chunk_is_the_chunks_own_gaps():
    # 2 tokens at 1.0, 3 at 1.3, 1 at 1.4: per chunk 2 gaps, per token 5
    chunks = [(1.0, 2), (1.3, 3), (1.4, 1)]
    assert formulas.inter_chunk_latencies(chunks) == pytest.approx([0.3, 0.1])
    assert sum(formulas.inter_chunk_latencies(chunks)) == pytest.approx(sum(formulas.inter_token_latencies(chunks)))
    assert formulas.inter_chunk_latencies([(1.0, 1), (1.1, 0), (1.5, 1)]) == pytest.approx(
        [0.5]
    )  # no-token chunks skipped


@pytest.mark.parametrize(
    "counts,total,expected",
    [
        ([1, 3, 1, 1], 4, [1, 1, 1, 1]),  # " t12" re-tokenized into 3 where the server counted 1
        ([1, 1, 1], 3, [1, 1, 1]),  # agree: unchanged
        ([2, 2], 6, [3, 3]),  # fewer counted than produced: scaled up
        ([1, 5, 1], 5, [1, 3, 1]),  # the surplus comes off the chunk that over-counted
        ([1, 3, 1], 2, [1, 1, 0]),  # fewer tokens than chunks: the first keeps one, the rest by weight
    ],
)
def test_chunk_counts_reconciled_with_usage(counts, total, expected):
    scaled = reconcile_counts(counts, total)
    assert scaled == expected and sum(scaled) == total and scaled[0] >= 1


def _record(chunks, engine_stats, ids):
    from core.types import GenerationRequest

    request = GenerationRequest(request_id=0, prompt_token_ids=[1, 2, 3], max_new_tokens=8, exact_output_len=False)
    timing = RequestTiming(t0=0.0, send_t=1.0, end_t=2.0, chunks=chunks, expected_prompt_tokens=3)
    return build_record(request, timing, RequestDone("stop", engine_stats=engine_stats), output_token_ids=ids)


def test_itl_per_token_agrees_with_usage_and_tpot():
    """Chunks re-tokenized into 6 tokens where the server's usage says 4: ITL per token has
    n_out − 1 = 3 gaps whose mean is TPOT; ITL per chunk keeps the 3 chunk gaps."""
    chunks = [(1.1, 1), (1.2, 3), (1.3, 1), (1.5, 1)]
    record = _record(chunks, {"output_tokens": 4}, [5, 6, 7, 8, 9, 10])
    assert record.output_tokens == 4
    assert record.itl_s == pytest.approx([0.1, 0.1, 0.2])
    assert len(record.itl_s) == record.output_tokens - 1
    assert sum(record.itl_s) / len(record.itl_s) == pytest.approx(record.tpot_s)
    assert record.itl_chunk_s == pytest.approx([0.1, 0.1, 0.2])


def test_itl_per_token_and_per_chunk_differ_when_chunks_carry_several_tokens():
    chunks = [(1.1, 2), (1.3, 2), (1.5, 2)]  # a server that sends 2 tokens an event, usage 6
    record = _record(chunks, {"output_tokens": 6}, list(range(6)))
    assert record.itl_s == pytest.approx([0.0, 0.1, 0.1, 0.1, 0.1])  # n_out − 1 gaps
    assert record.itl_chunk_s == pytest.approx([0.2, 0.2])  # chunks − 1 gaps
    assert sum(record.itl_s) == pytest.approx(sum(record.itl_chunk_s)) == pytest.approx(record.e2e_s - record.ttft_s)
    assert sum(record.itl_s) / len(record.itl_s) == pytest.approx(record.tpot_s)


@pytest.mark.slow
def test_a_server_that_sends_three_tokens_an_event(tmp_path):
    """A whole run against the reference server streaming 3 tokens a chunk (usage: 9): ITL per
    token has 8 gaps a request, mean TPOT; ITL per chunk the 2 gaps between the 3 events."""
    import pandas as pd
    from conftest import make_config

    from harness.run.point import run_benchmark

    cfg = make_config(
        "model=tiny-random",
        "backend=reference",
        "backend.ttft_ms=5",
        "backend.itl_ms=4",
        "backend.chunk_tokens=3",
        "backend.count_prompt_tokens=false",
        "workload=synthetic",
        "workload.num_requests=3",
        "workload.input_len=48",
        "workload.output_len=9",
    )
    run_benchmark(cfg, tmp_path)
    df = pd.read_parquet(tmp_path / "requests.parquet")
    assert df.error.isna().all() and (df.output_tokens == 9).all()
    for itl, itl_chunk, tpot, ttft, e2e in zip(df.itl_s, df.itl_chunk_s, df.tpot_s, df.ttft_s, df.e2e_s):
        assert len(itl) == 8 and len(itl_chunk) == 2
        assert sum(itl) / len(itl) == pytest.approx(tpot)
        assert sum(itl) == pytest.approx(sum(itl_chunk)) == pytest.approx(e2e - ttft)
        assert list(itl[:2]) == [0.0, 0.0]  # the first event's 2 other tokens came with it
        for k in (0, 1):  # each event's gap is spread evenly over its 3 tokens
            assert list(itl[2 + 3 * k : 5 + 3 * k]) == pytest.approx([itl_chunk[k] / 3] * 3)
    # the reply's ids: not counted on the stream's path (the jsonl row has none), but by the
    # run's writer with the tables, from the reply text
    import json

    from transformers import AutoTokenizer

    from harness.results.store import load_run

    rows = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert [r["output_token_ids"] for r in rows] == [None] * 3
    tok = AutoTokenizer.from_pretrained(load_run(tmp_path).summary.model["hf_dir"])
    assert [list(ids) for ids in df.output_token_ids] == [
        tok(t, add_special_tokens=False)["input_ids"] for t in df.output_text
    ]
    assert all(len(ids) for ids in df.output_token_ids)


def test_no_chunks_reconcile_to_none():
    assert reconcile_counts([], 3) == [] and reconcile_counts([], 0) == []


def test_first_tokens_client_wait_and_http_phases():
    assert formulas.ttst([(1.0, 1), (1.5, 0), (1.7, 1)]) == pytest.approx(0.7)  # a chunk without tokens is no token
    assert formulas.ttst([(1.0, 3), (1.2, 1)]) == 0.0 and formulas.ttst([(1.0, 1)]) is None
    assert formulas.ttfo(1.0, 1.25) == 0.25 and formulas.ttfo(1.0, None) is None
    assert formulas.client_wait(None, 2.0) is None and formulas.client_wait(1.5, 2.0) == 0.5
    assert formulas.from_scheduled(0.5, 0.25) == 0.75 and formulas.from_scheduled(None, 0.25) is None
    fresh = formulas.http_phases(
        10.0, {"connect_start": 10.001, "connect_end": 10.003, "sent": 10.004, "first_byte": 10.05, "last_byte": 10.5}
    )
    assert fresh["http_connect_s"] == pytest.approx(0.002) and fresh["http_reused"] is False
    assert fresh["http_first_byte_s"] == pytest.approx(0.05) and fresh["http_last_byte_s"] == pytest.approx(0.5)
    reused = formulas.http_phases(10.0, {"sent": 10.001, "first_byte": 10.05, "last_byte": 10.5})
    assert reused["http_connect_s"] is None and reused["http_reused"] is True
    assert formulas.http_phases(10.0, None) == {}
