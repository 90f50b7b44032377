"""Several endpoints' /metrics as one exposition: each sample labelled with its endpoint, each family together."""

from backends.http.exposition import label_sample, merge
from harness.telemetry import prometheus

A = """# HELP vllm:num_requests_running Running.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 2.0
# HELP vllm:prompt_tokens_total Prompt tokens.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="m"} 100.0
untyped_thing 7
# EOF
"""
B = """# HELP vllm:num_requests_running Running.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 3.0
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="m"} 50.0
"""


def test_a_sample_gets_the_endpoint_label_first():
    assert label_sample('a{b="c"} 1', 2) == 'a{endpoint="2",b="c"} 1'
    assert label_sample("a 1 1700000000", 0) == 'a{endpoint="0"} 1 1700000000'
    assert label_sample("a{} 1", 1) == 'a{endpoint="1"} 1'
    assert label_sample('a{b="x}y"} 1', 1) == 'a{endpoint="1",b="x}y"} 1'


def test_merged_families_hold_every_endpoints_samples_and_their_sum():
    text = merge([A, None, B])
    lines = text.splitlines()
    # comments once, each family's samples together, endpoint 1 (no answer) absent
    assert lines.count("# TYPE vllm:num_requests_running gauge") == 1 and "# EOF" not in lines
    running = [line for line in lines if line.startswith("vllm:num_requests_running{")]
    assert running == [
        'vllm:num_requests_running{endpoint="0",model_name="m"} 2.0',
        'vllm:num_requests_running{endpoint="2",model_name="m"} 3.0',
    ]
    assert lines.index(running[1]) == lines.index(running[0]) + 1
    families = prometheus.parse(text)
    assert families["vllm:num_requests_running"].type == "gauge"
    assert sum(s.value for s in families["vllm:prompt_tokens_total"].samples) == 150.0
    assert [s.labels for s in families["untyped_thing"].samples] == [{"endpoint": "0"}]
