"""Shared fixtures: configs composed exactly as the CLI composes them, and the store models."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import pytest
from browser import chromium  # noqa: F401 - the fixture: defined here once, one browser for the whole session
from process_state import (
    changed_between_tests,
    unchanged_process_state,  # noqa: F401 - the autouse fixture, around every test
)

REPO = Path(__file__).resolve().parent.parent


def loads_engine(fixture: Optional[Callable] = None, *, unless: Optional[Callable[[Any], bool]] = None):
    """Declares a fixture that loads an engine (under its ``@pytest.fixture``): a test that uses it,
    directly or through another fixture, must be marked ``engine``, or collection fails
    (:func:`pytest_collection_modifyitems`). ``unless(param)``: the fixture's parameters that load
    none (the conformance targets that the reference server plays)."""

    def declare(function: Callable) -> Callable:
        function.loads_engine = unless or (lambda param: False)
        return function

    return declare(fixture) if fixture is not None else declare


def make_config(*overrides: str):
    """A validated RunConfig from Hydra overrides, as `python -m harness` would build it."""
    from harness.cli import compose_config

    return compose_config("progress=false", *overrides)


def as_foreground_job() -> None:
    """A child's signals as a terminal's foreground job has them (a ``preexec_fn``), whatever
    this test run inherited: a suite started under nohup passes SIGHUP ignored to every child."""
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


# warnings about the machine's state, which another process on a busy test machine moves: the
# client's own load (its event loop late, a busy core: harness/results/summary.py client_warnings)
# and the harness's overhead (tokens delivered or requests sent late: overhead_warnings; a 3 ms
# delivery lag on an 8 ms reference-server run is past its share of E2E)
MACHINE_STATE_WARNINGS = ("The client may be the bottleneck", "Large harness overhead")


def run_warnings(warnings: list[str]) -> list[str]:
    """A summary's warnings about the run itself, without those about the machine's state."""
    return [w for w in warnings if not w.startswith(MACHINE_STATE_WARNINGS)]


def run_harness_cli(
    *args: str, cwd: Path, env: dict | None = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="session")
def tiny_model():
    from harness.config import ModelConfig
    from harness.run.model_store import resolve_model

    return resolve_model(ModelConfig(name="tiny-random"))


@pytest.fixture(scope="session")
def real_model():
    from harness.config import ModelConfig
    from harness.run.model_store import resolve_model

    return resolve_model(ModelConfig(name="smollm2-135m"))


@pytest.fixture(scope="session")
def real_tokenizer(real_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(real_model.hf_dir)


@pytest.fixture(scope="module")
def parts(real_tokenizer):
    """The workload tests' prompt renderer and corpus of the store model's tokenizer (tiny-random has
    the same one); one per test module, since a test may set the renderer's ``max_context``."""
    from workloads.corpus import TokenizedCorpus
    from workloads.prompts import PromptRenderer

    return PromptRenderer(real_tokenizer), TokenizedCorpus(real_tokenizer)


# vLLM's settings in every test that loads it: small enough for this machine, prefix caching on
VLLM = (
    "backend=vllm",
    "backend.max_model_len=1024",
    "backend.cpu_kvcache_space_gib=1",
    "backend.enable_prefix_caching=true",
    # fp32, not the model's bf16: vLLM's CPU kernels are not batch-invariant, and in bf16 "Why is the
    # sky blue?" ties at its second token (two logits of 17.625; 0.066 apart in fp32), so its reply
    # changed when its decode met another's prefill (test_batched_equals_serial failed once in a
    # fresh-clone CI run). benchmarks/batch_invariance.py: bf16 changed a reply in 13 of 36 staggered
    # batches, fp32 in 0 of 36; fp32 costs ~1.7x per generated token here.
    "backend.dtype=float32",
)


def shared_session(tmp_path_factory, *overrides: str):
    """An engine session loaded once for the tests that share it (a vLLM load is 25-40 s here),
    closed when the test session ends."""
    from harness.run.session import EngineSession

    session = EngineSession(make_config(*overrides), tmp_path_factory.mktemp("shared-engine"))
    try:
        session.open()
        session.ensure_loaded()
        yield session
    finally:
        session.close()


VLLM_SERVER = (*VLLM, "backend.mode=server", "backend.startup_timeout_s=300")


def uses_fixture(item, name: str) -> bool:
    """A collected test that asks for the fixture ``name``: by argument, or as the engine its
    conformance target shares (``Target.shared``, fetched with ``request.getfixturevalue``)."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    return name in item.fixturenames or any(getattr(p, "shared", None) == name for p in params.values())


@pytest.fixture(scope="session")
@loads_engine
def vllm_sessions(request, tmp_path_factory):
    """vLLM in-process and vLLM's own server, each on the real model and loaded at most once.

    A vLLM load here is a chain of three processes, each importing vLLM on one core before it
    starts the next (~30 s in all), so the server, where a selected test needs it, is launched
    first and starts on the other core while the in-process engine loads."""
    from core import shm
    from harness.run.session import EngineSession

    before = shm.segments()
    inprocess = EngineSession(make_config(*VLLM), tmp_path_factory.mktemp("vllm-inprocess"))
    server = EngineSession(make_config(*VLLM_SERVER), tmp_path_factory.mktemp("vllm-server"))
    try:
        if any(uses_fixture(item, "vllm_server") for item in request.session.items):
            # launched: its health is waited for where a test first needs it; a launch that failed
            # is tried again, and fails, there (ensure_loaded opens a closed session), not here
            with contextlib.suppress(Exception):
                server.open()
        yield {"inprocess": inprocess, "server": server}
    finally:
        # the server first: the in-process close waits for the processes started since its load began
        server.close()
        inprocess.close()
    # an engine core killed at its shutdown timeout left its workers' queue: removed at close
    assert shm.segments() - before == set(), "vLLM's shared memory outlived the engine"


def loaded(session):
    """The session with its engine loaded: by the first test that asks, once."""
    session.ensure_loaded()
    return session


@pytest.fixture(scope="session")
@loads_engine
def vllm_inprocess(vllm_sessions):
    """vLLM in-process on the real model: the conformance cases and vLLM's own run checks."""
    return loaded(vllm_sessions["inprocess"])


@pytest.fixture(scope="session")
@loads_engine
def vllm_server(vllm_sessions):
    """vLLM's own server on the real model: the conformance cases and vLLM's server-mode checks."""
    return loaded(vllm_sessions["server"])


def pytest_configure(config) -> None:
    """The suite takes Ctrl-C back as the harness's entry modules do (core.parent.take_back_ctrl_c):
    a suite started as a background job of a script (CI runners, ``cmd &``, nohup) inherits SIGINT
    ignored, and the tests that press Ctrl-C for this process (the plan pool's, the final writes')
    then saw nothing happen ("DID NOT RAISE KeyboardInterrupt" in every fresh-clone CI run)."""
    from core.parent import take_back_ctrl_c

    take_back_ctrl_c()


def pytest_collection_modifyitems(config, items) -> None:
    """A test that uses a fixture declared with :func:`loads_engine` but is not marked ``engine``
    fails the collection, one line each: the fast tier (``-m "not engine and not slow"``) would
    otherwise load that engine. Failing, rather than adding the marker here, keeps the marker in
    the test module, where a reader and ``-m`` expect it, and in no hook's hidden rule."""
    unmarked = []
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None or item.get_closest_marker("engine"):
            continue
        params = getattr(item, "callspec", None)
        for name in info.names_closure:
            defs = info.name2fixturedefs.get(name)
            unless = getattr(defs[-1].func, "loads_engine", None) if defs else None
            if unless is not None and not unless(params.params.get(name) if params else None):
                unmarked.append(f"{item.nodeid} uses fixture {name!r}, which loads an engine: mark it engine")
                break
    if unmarked:
        raise pytest.UsageError("tests not marked engine:\n" + "\n".join(unmarked))


def pytest_terminal_summary(terminalreporter) -> None:
    """What module- and session-scoped fixtures changed in the process (not a test's leak, but
    what every later test then runs with)."""
    if changed_between_tests:
        terminalreporter.section("process state changed by wider-scoped fixtures")
        for nodeid, line in changed_between_tests:
            terminalreporter.write_line(f"before {nodeid}: {line}")
