"""A large plan's prompts fitted in chunks: the same prompts in one process or several, chunk 0 the
stream a plan always drew, and no worker left behind by an error, Ctrl-C or a killed parent."""

import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from workloads import plan_pool
from workloads.plan_pool import iter_fitted_texts
from workloads.prompts import user_only
from workloads.synthetic import SyntheticConfig, SyntheticWorkload

ROOT = Path(__file__).resolve().parents[2]


def fit_texts_in_chunks(*args, **kwargs) -> list:
    """Every fit of :func:`iter_fitted_texts`, taken to the last (the caller's stream then restored)."""
    return list(iter_fitted_texts(*args, **kwargs))


@pytest.fixture
def chunks_of_8(monkeypatch):
    monkeypatch.setattr(plan_pool, "CHUNK", 8)


def stream(seed: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed).spawn(2)[1])  # as workloads.base.seeded_streams


@pytest.fixture
def children_before() -> set[int]:
    """The test process's children before the test: engines and browsers other tests keep loaded."""
    return {child.pid for child in psutil.Process().children()}


def no_new_children_within(before: set[int], seconds: float) -> list[psutil.Process]:
    deadline = time.monotonic() + seconds
    while True:
        left = [
            child for child in psutil.Process().children() if child.pid not in before
        ]  # the workers are direct children
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


def test_the_chunks_are_the_same_in_one_process_and_in_two(parts, chunks_of_8, children_before):
    renderer, corpus = parts
    overhead = renderer.overhead(user_only)
    lens = [int(n) for n in np.random.default_rng(3).integers(overhead + 1, 120, size=30)]  # 4 chunks
    here_rng, pooled_rng, serial_rng = stream(7), stream(7), stream(7)
    here = fit_texts_in_chunks(renderer, corpus, here_rng, lens, user_only, overhead, processes=1)
    pooled = fit_texts_in_chunks(renderer, corpus, pooled_rng, lens, user_only, overhead, processes=2)
    assert here == pooled and [len(ids) for _, ids in here] == lens
    assert no_new_children_within(children_before, 2.0) == []
    # chunk 0 is fit_texts on the caller's stream, which is left where fit_texts leaves it
    assert here[:8] == renderer.fit_texts(corpus, serial_rng, lens[:8], user_only, overhead=overhead)
    assert here_rng.bit_generator.state == pooled_rng.bit_generator.state == serial_rng.bit_generator.state
    # the next chunk draws from a stream of its own (not the caller's next draws)
    assert here[8:16] != renderer.fit_texts(corpus, serial_rng, lens[8:16], user_only, overhead=overhead)
    # ids from a worker are the renderer's own int objects, as fit_texts makes them
    ids = pooled[20][1]
    assert all(a is b for a, b in zip(ids, renderer.shared_ints(ids)))


def test_workers_fit_only_a_few_chunks_ahead_of_a_slow_caller(parts, chunks_of_8, children_before, monkeypatch):
    renderer, corpus = parts
    overhead = renderer.overhead(user_only)
    fitted = multiprocessing.get_context("fork").Value("i", 0)  # chunks fitted, counted in the workers
    fit_chunk_of = plan_pool._fit_chunk_of

    def counted(job, k):
        out = fit_chunk_of(job, k)
        with fitted.get_lock():
            fitted.value += 1
        return out

    monkeypatch.setattr(plan_pool, "_fit_chunk_of", counted)
    fits = plan_pool.iter_fitted_texts(
        renderer, corpus, stream(2), [overhead + 10] * 80, user_only, overhead, processes=2
    )  # 10 chunks
    next(fits)
    time.sleep(1.0)  # a chunk of 8 takes milliseconds: the workers had time to fit all ten
    assert fitted.value <= plan_pool.AHEAD * 2
    assert sum(1 for _ in fits) == 79 and fitted.value == 10
    assert no_new_children_within(children_before, 2.0) == []


def test_a_plan_of_one_chunk_is_unchanged(parts, chunks_of_8, monkeypatch):
    renderer, corpus = parts
    calls = []
    monkeypatch.setattr(plan_pool, "_fit_in_workers", lambda *args: calls.append(args))
    overhead = renderer.overhead(user_only)
    a, b = stream(1), stream(1)
    assert fit_texts_in_chunks(renderer, corpus, a, [overhead + 20] * 8, user_only, overhead) == renderer.fit_texts(
        corpus, b, [overhead + 20] * 8, user_only, overhead=overhead
    )
    assert calls == [] and a.bit_generator.state == b.bit_generator.state


def test_a_synthetic_plan_does_not_depend_on_the_cores(parts, chunks_of_8, monkeypatch):
    renderer, corpus = parts
    cfg = SyntheticConfig(
        num_requests=20, input_len=48, output_len=4, input_len_dist="uniform", input_len_spread=0.25, warmup_requests=2
    )
    hashes = []
    for cores in (1, 2):
        monkeypatch.setattr(plan_pool, "usable_cores", lambda cores=cores: cores)
        plan = SyntheticWorkload(cfg).build(renderer, corpus, 5)
        assert [len(s.turns[0].prompt_token_ids) for s in plan.sessions] == [
            len(renderer.render(user_only(s.turns[0].user))) for s in plan.sessions
        ]
        hashes.append(plan.hashes())
    assert hashes[0] == hashes[1]


def test_an_error_in_a_worker_is_raised_and_ends_every_worker(parts, chunks_of_8, children_before):
    renderer, corpus = parts
    overhead = renderer.overhead(user_only)
    parent = os.getpid()

    def failing(text):
        if os.getpid() != parent:
            raise ValueError("the template failed in a worker")
        return user_only(text)

    with pytest.raises(ValueError, match="the template failed in a worker"):
        fit_texts_in_chunks(renderer, corpus, stream(2), [overhead + 10] * 40, failing, overhead, processes=2)
    assert no_new_children_within(children_before, 2.0) == []


def test_ctrl_c_ends_every_worker_even_pressed_twice(parts, chunks_of_8, children_before):
    renderer, corpus = parts
    overhead = renderer.overhead(user_only)
    parent = os.getpid()

    def slow(text):
        # each worker presses Ctrl-C for the parent once, as it fits its first prompt: the parent
        # is then surely waiting on its workers, and the second press may come while it ends them
        if os.getpid() != parent and not hasattr(slow, "pressed"):
            slow.pressed = True
            os.kill(parent, signal.SIGINT)
        time.sleep(0.05)
        return user_only(text)

    start = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        fit_texts_in_chunks(renderer, corpus, stream(2), [overhead + 10] * 80, slow, overhead, processes=2)
    assert time.perf_counter() - start < 5.0  # 10 chunks of 0.4 s or more each: ended, not finished
    assert no_new_children_within(children_before, 2.0) == []


@pytest.mark.slow
def test_a_killed_parent_takes_its_workers_with_it(real_model, tmp_path):
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from core.tokenizer import load_tokenizer
        from workloads import plan_pool
        from workloads.corpus import TokenizedCorpus
        from workloads.prompts import PromptRenderer, user_only
        plan_pool.CHUNK = 8
        tokenizer = load_tokenizer({str(real_model.hf_dir)!r})
        renderer, corpus = PromptRenderer(tokenizer), TokenizedCorpus(tokenizer)
        def slow(text):
            time.sleep(0.05)
            return user_only(text)
        overhead = renderer.overhead(user_only)
        print("building", flush=True)
        list(plan_pool.iter_fitted_texts(renderer, corpus, __import__("numpy").random.default_rng(1),
                                         [overhead + 10] * 400, slow, overhead, processes=2))
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline().strip() == "building"
        deadline = time.monotonic() + 10
        while len(workers := psutil.Process(parent.pid).children()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(workers) == 2
        parent.kill()
        parent.wait(5)
        gone, alive = psutil.wait_procs(workers, timeout=3)
        assert alive == []
    finally:
        parent.kill()
