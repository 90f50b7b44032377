"""Prometheus text: parsing, histogram quantiles, and the before/after difference."""

import math

import pytest

from harness.telemetry import prometheus

BEFORE = """\
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.01",model_name="m"} 1.0
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 2.0
vllm:time_to_first_token_seconds_bucket{le="1.0",model_name="m"} 2.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 2.0
vllm:time_to_first_token_seconds_sum{model_name="m"} 0.06
vllm:time_to_first_token_seconds_count{model_name="m"} 2.0
vllm:time_to_first_token_seconds_created{model_name="m"} 1.7e9
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{model_name="m"} 100.0
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 3.0
"""

AFTER = """\
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.01",model_name="m"} 1.0
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 12.0
vllm:time_to_first_token_seconds_bucket{le="1.0",model_name="m"} 21.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 22.0
vllm:time_to_first_token_seconds_sum{model_name="m"} 4.06
vllm:time_to_first_token_seconds_count{model_name="m"} 22.0
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{model_name="m"} 1100.0
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 0.0
# TYPE sglang:inter_token_latency_seconds histogram
sglang:inter_token_latency_seconds_bucket{le="0.005",tp_rank="0"} 0
sglang:inter_token_latency_seconds_bucket{le="0.005",tp_rank="1"} 0
sglang:inter_token_latency_seconds_bucket{le="0.01",tp_rank="0"} 10
sglang:inter_token_latency_seconds_bucket{le="0.01",tp_rank="1"} 10
sglang:inter_token_latency_seconds_bucket{le="+Inf",tp_rank="0"} 10
sglang:inter_token_latency_seconds_bucket{le="+Inf",tp_rank="1"} 10
sglang:inter_token_latency_seconds_sum{tp_rank="0"} 0.08
sglang:inter_token_latency_seconds_sum{tp_rank="1"} 0.08
sglang:inter_token_latency_seconds_count{tp_rank="0"} 10
sglang:inter_token_latency_seconds_count{tp_rank="1"} 10
"""


def test_parse_families_types_labels():
    fams = prometheus.parse(BEFORE + 'weird_metric{path="/a\\"b",x="1"} NaN 1700000000\n# EOF\n')
    assert fams["vllm:time_to_first_token_seconds"].type == "histogram"
    assert fams["vllm:prompt_tokens"].type == "counter"  # its sample is vllm:prompt_tokens_total
    assert fams["vllm:prompt_tokens"].samples[0].name == "vllm:prompt_tokens_total"
    weird = fams["weird_metric"].samples[0]
    assert weird.labels == {"path": '/a"b', "x": "1"} and math.isnan(weird.value)


def test_histogram_quantiles_interpolate_inside_buckets():
    h = prometheus.Histogram({0.1: 50.0, 0.2: 100.0, math.inf: 100.0}, sum=14.0, count=100.0)
    assert h.quantile(0.5) == pytest.approx(0.1)
    assert h.quantile(0.25) == pytest.approx(0.05)  # first bucket starts at 0
    assert h.quantile(0.75) == pytest.approx(0.15)
    assert h.describe()["mean"] == pytest.approx(0.14)
    tail = prometheus.Histogram({0.1: 1.0, math.inf: 10.0}, sum=50.0, count=10.0)
    assert tail.quantile(0.99) == 0.1  # in the +Inf bucket: the highest finite bound
    assert prometheus.Histogram({0.1: 0.0, math.inf: 0.0}, 0.0, 0.0).quantile(0.5) is None
    assert prometheus.Histogram({0.001: 5.0, math.inf: 5.0}, 0.0, 5.0).quantile(0.99) == 0.0


def test_summarize_is_the_difference_over_the_phase():
    out = prometheus.phase_difference(BEFORE, AFTER)
    ttft = out["histograms"]["vllm:time_to_first_token_seconds"]
    assert ttft["count"] == 20 and ttft["sum"] == pytest.approx(4.0) and ttft["mean"] == pytest.approx(0.2)
    # Δbuckets: ≤0.01: 0, ≤0.1: 10, ≤1: 19, +Inf: 20 → p50 at rank 10 is the 0.1 bound
    assert ttft["p50"] == pytest.approx(0.1)
    assert ttft["p90"] == pytest.approx(0.1 + 0.9 * (18 - 10) / 9)
    assert ttft["p99"] == pytest.approx(1.0)  # rank 19.8 falls in +Inf: highest finite bound
    assert out["counters"]["vllm:prompt_tokens"] == 1000
    assert out["gauges"]["vllm:num_requests_running"] == 0
    # label sets other than le are summed; a family absent before counts from zero
    itl = out["histograms"]["sglang:inter_token_latency_seconds"]
    assert itl["count"] == 20 and itl["mean"] == pytest.approx(0.008)
    assert out["key"]["ttft_s"]["metric"] == "vllm:time_to_first_token_seconds"
    assert out["key"]["itl_s"]["metric"] == "sglang:inter_token_latency_seconds"
    assert "e2e_s" not in out["key"]


def test_histograms_without_new_observations_are_left_out():
    assert prometheus.phase_difference(BEFORE, BEFORE)["histograms"] == {}


def _tgi_histogram(name: str, count: int, total: float) -> str:
    return (
        f"# TYPE {name} histogram\n"
        f'{name}_bucket{{le="0.01"}} 0\n{name}_bucket{{le="0.1"}} {count}\n{name}_bucket{{le="+Inf"}} {count}\n'
        f"{name}_sum {total}\n{name}_count {count}\n"
    )


def test_tgi_metric_names_map_to_the_key_figures():
    names = (
        "tgi_request_duration",
        "tgi_request_queue_duration",
        "tgi_request_mean_time_per_token_duration",
        "tgi_request_validation_duration",
        "tgi_request_inference_duration",
    )
    before = "".join(_tgi_histogram(n, 0, 0.0) for n in names)
    after = "".join(_tgi_histogram(n, 4, 0.2) for n in names)
    key = prometheus.phase_difference(before, after)["key"]
    assert key["e2e_s"]["metric"] == "tgi_request_duration"
    assert key["queue_s"]["metric"] == "tgi_request_queue_duration"
    assert key["itl_s"]["metric"] == "tgi_request_mean_time_per_token_duration"
    assert key["e2e_s"]["count"] == 4 and key["e2e_s"]["mean"] == pytest.approx(0.05)
    assert "ttft_s" not in key  # TGI exports none


SPEC_BEFORE = """\
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{model_name="m"} 10
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{model_name="m"} 30
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 12
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="0"} 7
vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="1"} 4
vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="2"} 1
"""

SPEC_AFTER = """\
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{model_name="m"} 110
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{model_name="m"} 330
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 162
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="0"} 87
vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="1"} 49
vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="2"} 26
"""


def test_speculative_acceptance_from_counter_deltas_as_vllm_bench_serve():
    spec = prometheus.phase_difference(SPEC_BEFORE, SPEC_AFTER)["speculative"]
    assert spec["source"] == "counters"
    assert (spec["drafts"], spec["draft_tokens"], spec["accepted_tokens"]) == (100, 300, 150)
    assert spec["acceptance_rate"] == pytest.approx(150 / 300)  # Δaccepted / Δdraft_tokens
    assert spec["mean_acceptance_length"] == pytest.approx(1 + 150 / 100)  # 1 + Δaccepted / Δdrafts
    assert spec["acceptance_per_position"] == pytest.approx([0.80, 0.45, 0.25])  # Δper_pos / Δdrafts
    assert "speculative" not in prometheus.phase_difference(BEFORE, AFTER)  # no draft tokens: no block


def test_speculative_acceptance_from_llama_server_counters():
    text = (
        "# TYPE llamacpp:spec_decode_num_draft_tokens_total counter\nllamacpp:spec_decode_num_draft_tokens_total {}\n"
        "# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter\n"
        "llamacpp:spec_decode_num_accepted_tokens_total {}\n"
        "# TYPE llamacpp:spec_decode_num_drafts_total counter\nllamacpp:spec_decode_num_drafts_total {}\n"
    )
    spec = prometheus.phase_difference(text.format(0, 0, 0), text.format(400, 260, 100))["speculative"]
    assert spec["acceptance_rate"] == pytest.approx(0.65) and spec["mean_acceptance_length"] == pytest.approx(3.6)
    assert spec["acceptance_per_position"] == []
