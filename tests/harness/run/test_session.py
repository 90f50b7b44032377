"""The engine session: one load serves several load points; the config hash and engine key."""

import time

import pytest
from conftest import make_config

from backends.server.backend import ServerBackend
from core.errors import ConfigError
from harness.config import config_sha256, engine_key
from harness.run.point import run_benchmark, run_point
from harness.run.session import EngineSession, SessionCache

FAST = [
    "model=tiny-random",
    "workload=synthetic",
    "workload.input_len=40",
    "workload.output_len=4",
    "workload.num_requests=3",
]


@pytest.mark.engine
def test_one_session_serves_two_points(tmp_path):
    first, second = make_config(*FAST, "workload.concurrency=1"), make_config(*FAST, "workload.concurrency=2")
    with EngineSession(first, tmp_path) as session:
        a = run_point(session, first, tmp_path / "a")
        backend = session.backend
        b = run_point(session, second, tmp_path / "b")
        assert session.backend is backend and session.points_served == 2
    assert session.backend is None and not session.loaded  # closed on exit
    assert a.summary.engine["reused"] is False and a.summary.load_s > 0
    assert b.summary.engine["reused"] is True and b.summary.load_s == 0
    assert b.summary.engine["session_load_s"] == a.summary.engine["session_load_s"]
    # the engine's import (transformers, torch) is part of its load, imported before the tokenizer
    assert 0 <= a.summary.engine["import_s"] <= a.summary.load_s
    assert a.summary.workload["concurrency"] == 1 and b.summary.workload["concurrency"] == 2
    assert a.summary.workload["prompts_sha256"] == b.summary.workload["prompts_sha256"]


def test_cache_keeps_a_session_only_for_the_same_engine(tmp_path):
    cache = SessionCache()
    serial = make_config(*FAST)
    s1 = cache.get(serial, tmp_path)
    assert (
        cache.get(make_config(*FAST, "workload.concurrency=4", "seed=3"), tmp_path) is s1
    )  # a load setting: same engine
    s2 = cache.get(make_config(*FAST, "backend.batching=static"), tmp_path)  # an engine setting: another one
    assert s2 is not s1 and cache.session is s2
    assert cache.get(make_config(*FAST, "backend.batching=static"), tmp_path, reuse=False) is not s2
    cache.close()
    assert cache.session is None


def test_config_hash_ignores_presentation_keys():
    base = make_config(*FAST)
    assert config_sha256(base) == config_sha256(
        make_config(
            *FAST, "progress=true", "report=false", "resume=true", "output_root=/elsewhere", "sweep.compare_html=false"
        )
    )
    assert config_sha256(base) != config_sha256(make_config(*FAST, "workload.concurrency=2"))
    # How many times a point runs is left out (hash version 7): a sweep with more repeats resumes from fewer
    assert config_sha256(base) == config_sha256(make_config(*FAST, "repeat=2"))
    assert engine_key(base) == engine_key(make_config(*FAST, "workload.concurrency=2"))
    assert engine_key(base) != engine_key(make_config(*FAST, "backend.batching=static"))


def test_open_reads_the_models_context_for_the_workloads(tmp_path):
    """Data workloads refuse prompts longer than this before any engine loads."""
    with EngineSession(make_config(*FAST), tmp_path) as session:
        assert session.renderer.max_context == 8192 and not session.loaded


@pytest.mark.slow
def test_a_server_is_launched_in_open_and_loads_while_the_tokenizer_is_read(tmp_path):
    session = EngineSession(make_config("backend=reference", *FAST), tmp_path)
    try:
        session.open()
        launched = session._load_began  # when open() launched the server, before the tokenizer
        server = session.backend.server
        assert server is not None and server.poll() is None and not session.loaded  # launched, not waited for
        healthy_at = session.backend._health.result()  # the watch started with the launch
        time.sleep(1.0)  # the harness is still busy (reading a large tokenizer, building a workload)
        load_s = session.ensure_loaded()
        assert session.backend.server is server  # the same launch, now serving
        # the load is the launch until healthy (plus load()'s own steps), not the harness's delay after it
        assert session.backend.ready_unused_s >= 1.0
        assert healthy_at - launched - 0.1 <= load_s <= healthy_at - launched + 0.5
    finally:
        session.close()
    assert server.poll() is not None  # stopped with the session


def test_a_workload_refused_after_the_launch_stops_the_server(tmp_path, monkeypatch):
    """Data workloads check prompts against the model's context after open(): the server
    launched meanwhile must not outlive the refusal."""
    long_prompts = tmp_path / "long.jsonl"
    long_prompts.write_text('{"prompt": "' + "word " * 9000 + '"}\n')
    launched = []
    begin = ServerBackend.begin_load

    def spy(self):
        began = begin(self)
        launched.append(self.server)
        return began

    monkeypatch.setattr(ServerBackend, "begin_load", spy)
    with pytest.raises(ConfigError, match="context"):
        run_benchmark(
            make_config("backend=reference", "model=tiny-random", "workload=jsonl", f"workload.path={long_prompts}"),
            tmp_path / "run",
        )
    assert len(launched) == 1 and launched[0].poll() is not None
