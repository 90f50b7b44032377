"""Fitting the prompts of a large plan on every core: fixed chunks, each from a random stream of its own.

A long timed run plans millions of prompts before its first request, each fitted to an exact
token length (:meth:`PromptRenderer.fit_texts`, about 0.2 ms a prompt on one core here). This
module cuts the work into chunks that processes fit side by side.

**Chunks.** The prompts are cut into chunks of :data:`CHUNK`, in plan order. Chunk 0 draws from
the caller's generator exactly as ``fit_texts`` does, so a plan of up to :data:`CHUNK` prompts
is the plan it always was (the same texts, ids and sha256), and the generator is left where
chunk 0 leaves it. Chunk k ≥ 1 draws from a stream of its own, seeded from the caller's
generator's seed sequence with the spawn key ``(…, CHUNK_KEY, k)`` (:func:`chunk_streams`): what a
chunk holds never depends on how many processes fitted it, nor on which finished first.

**Processes.** With two chunks or more and more than one usable core, forked workers fit the
chunks, one at a time each, and the parent takes them back in plan order, at most :data:`AHEAD`
chunks a worker ahead of the caller (a plan kept on disk as it is made holds a few chunks, not
the plan). A forked worker
inherits the renderer, the corpus and the prompt's template at no cost (as the client's workers
do) and tokenizes on one thread (core.parent.tokenizers_single_threaded). Endings: a worker
ignores Ctrl-C and a hang-up (they reach the whole process group; the parent decides) and dies
with its parent, even one killed outright (PR_SET_PDEATHSIG); the parent terminates its workers
on any error or interruption (a second Ctrl-C held off meanwhile), and joins them when done, so
none outlives the build.
"""

from __future__ import annotations

import copy
import multiprocessing
import os
import signal
import warnings
from array import array
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from core.cpus import usable_cores
from core.interrupts import interrupts_held
from core.parent import follow_the_parent, tokenizers_single_threaded
from workloads.corpus import TokenizedCorpus
from workloads.prompts import Messages, PromptRenderer

# Prompts a chunk: plans up to this size are unchanged by the chunking; one chunk takes about
# 2 s to fit on a core here (input_len 128), long beside a forked worker's start (milliseconds)
CHUNK = 10_000
CHUNK_KEY = 0x706C616E  # "plan": the spawn-key element that names the chunk streams
AHEAD = 2  # chunks a worker may have fitted, or be fitting, before the caller takes them

Fit = tuple[str, list[int]]


@dataclass
class _Job:
    """What every forked worker inherits: the prompts to fit and how."""

    renderer: PromptRenderer
    corpus: TokenizedCorpus
    target_lens: Sequence[int]
    make_messages: Callable[[str], Messages]
    overhead: int
    streams: list[np.random.Generator]  # one per chunk, chunk 0's a copy of the caller's generator


def chunk_streams(rng: np.random.Generator, chunks: int) -> list[np.random.Generator]:
    """The streams of chunks 1 … ``chunks`` - 1: spawned from ``rng``'s seed sequence (not its
    state), so they depend on the seed alone."""
    seq = rng.bit_generator.seed_seq
    if not isinstance(seq, np.random.SeedSequence):
        raise ValueError("a chunked plan needs a generator made from a seed (numpy.random.default_rng(seed))")
    return [
        np.random.default_rng(np.random.SeedSequence(seq.entropy, spawn_key=(*seq.spawn_key, CHUNK_KEY, k)))
        for k in range(1, chunks)
    ]


def iter_fitted_texts(
    renderer: PromptRenderer,
    corpus: TokenizedCorpus,
    rng: np.random.Generator,
    target_lens: Sequence[int],
    make_messages: Callable[[str], Messages],
    overhead: int,
    processes: Optional[int] = None,
) -> Generator[Fit, None, None]:
    """:meth:`PromptRenderer.fit_texts` of each length, chunk by chunk (see the module docstring),
    one fit at a time as the chunks come: a caller that keeps them elsewhere (a plan on disk,
    workloads/session_file.py) never holds more than a few chunks. ``rng`` is left as chunk 0
    leaves it once the last fit is taken. ``processes``: the workers (None: one per usable core,
    at most one per chunk; 1: fit here)."""
    chunks = (len(target_lens) + CHUNK - 1) // CHUNK
    if chunks <= 1:
        yield from renderer.fit_texts(corpus, rng, target_lens, make_messages, overhead=overhead)
        return
    job = _Job(
        renderer, corpus, target_lens, make_messages, overhead, [copy.deepcopy(rng), *chunk_streams(rng, chunks)]
    )
    workers = min(chunks, usable_cores() if processes is None else max(1, processes))
    chunk_0_state: Optional[Mapping[str, Any]] = None
    # chunk by chunk as they come, every prompt's ids made the renderer's own ints: a plan's
    # chunks kept whole until the last (ids as new ints) left ~5 KB a request of freed,
    # fragmented memory in this process for the whole run (benchmarks/long_run_memory.py)
    fitted = _fit_serially(job, chunks) if workers == 1 else _fit_in_workers(job, chunks, workers)
    try:
        for chunk, state in fitted:
            chunk_0_state = state if chunk_0_state is None else chunk_0_state
            for text, ids in chunk:
                yield text, renderer.shared_ints(ids)
    finally:
        fitted.close()  # the workers' pool ends with the chunks, whatever ended the loop
    if chunk_0_state is not None:  # (a chunked plan has chunk 0)
        rng.bit_generator.state = chunk_0_state  # the caller's generator as chunk 0 leaves it


# a chunk's fits (ids as a list, or packed in an array from a worker), and its generator's state after them
Chunk = tuple[Sequence[tuple[str, Sequence[int]]], Mapping[str, Any]]


def _fit_serially(job: _Job, chunks: int) -> Generator[Chunk, None, None]:
    return (_fit_chunk_of(job, k) for k in range(chunks))


@dataclass
class _Worker:
    process: Any  # a forked multiprocessing Process
    conn: Any  # this process's end of the worker's own pipe


def _fit_in_workers(job: _Job, chunks: int, workers: int) -> Generator[Chunk, None, None]:
    """Chunk k is fitted by worker k mod n, each worker's chunks in order, so the parent reads
    chunk k from that worker's own pipe; a worker is asked for at most AHEAD chunks not yet taken
    (an imap over a pool would fit every chunk as fast as the workers go and keep them all here,
    however slowly the caller takes them)."""
    started: list[_Worker] = []
    try:
        _start_workers(job, workers, started)
        n = len(started)
        for k in range(min(chunks, AHEAD * n)):
            started[k % n].conn.send(k)
        for k in range(chunks):
            yield _take(started[k % n], k)
            if k + AHEAD * n < chunks:
                started[k % n].conn.send(k + AHEAD * n)
    except BaseException:  # GeneratorExit included: a caller that stops taking chunks
        _end_workers(started)  # an error in a worker, Ctrl-C, SIGTERM: no worker fits on
        raise
    for worker in started:
        worker.conn.send(None)
    for worker in started:
        worker.process.join()
        worker.conn.close()


def _start_workers(job: _Job, workers: int, started: list[_Worker]) -> None:
    """Fork the workers, each with a pipe of its own. Not multiprocessing.Pool: its workers share
    the locks of its queues, and one ended while it held the results' lock (an error, Ctrl-C)
    left Pool.terminate waiting on that lock for ever (the flake hunt: once in 30 tries of
    test_an_error_in_a_worker_is_raised_and_ends_every_worker, then 1 in 9); nothing is shared
    here, so a worker killed at any moment leaves nothing held."""
    ctx = multiprocessing.get_context("fork")
    with tokenizers_single_threaded(), warnings.catch_warnings():
        # Python >= 3.12 warns of any fork with threads running; a worker takes no lock those
        # threads use (it tokenizes, on one thread, and returns its chunk)
        warnings.simplefilter("ignore", DeprecationWarning)
        for index in range(workers):
            mine, theirs = ctx.Pipe(duplex=True)
            inherited = [w.conn for w in started] + [mine]  # the parent's ends a worker must not hold
            process = ctx.Process(
                target=_serve, name=f"plan-worker-{index}", daemon=True, args=(job, theirs, inherited, os.getpid())
            )
            try:
                process.start()
            except BaseException:
                mine.close()
                raise
            finally:
                theirs.close()
            started.append(_Worker(process, mine))


def _take(worker: _Worker, k: int) -> Chunk:
    """Chunk ``k`` from its worker, or the error the worker met (raised here)."""
    try:
        kind, value = worker.conn.recv()
    except EOFError:
        worker.process.join(1.0)
        raise RuntimeError(
            f"a plan worker ended (exit code {worker.process.exitcode}) while it fitted chunk {k}"
        ) from None
    if kind == "error":
        raise value
    return value


def _end_workers(started: list[_Worker]) -> None:
    """Kill and reap every worker, whatever Ctrl-C does meanwhile: a second press cut into the
    ending would leave workers alive (the parent lives on after a plan)."""
    while True:
        try:
            with interrupts_held():  # held from here on; a press before it began is caught below
                for worker in started:
                    worker.process.kill()
                for worker in started:
                    worker.process.join()
                    worker.conn.close()
            return
        except KeyboardInterrupt:
            continue


def _serve(job: _Job, conn: Any, inherited: list[Any], parent_pid: int) -> None:
    """A worker: the chunks asked for, in order, until None or the pipe's end."""
    for other in inherited:
        other.close()
    follow_the_parent(parent_pid)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the parent's handler: the parent decides
    while True:
        try:
            k = conn.recv()
        except EOFError:
            return
        if k is None:
            return
        try:
            fits, state = _fit_chunk_of(job, k)
            # ids packed: 4 bytes an id through the pipe, not an int object each in the parent
            reply: tuple[str, Any] = ("chunk", ([(text, array("i", ids)) for text, ids in fits], state))
        except Exception as exc:  # noqa: BLE001 - the parent raises it
            reply = ("error", exc)
        try:
            conn.send(reply)
        except (BrokenPipeError, ConnectionResetError):
            return  # the parent is gone
        except Exception as exc:  # noqa: BLE001 - an error that cannot be pickled goes as its text
            conn.send(("error", RuntimeError(f"{type(exc).__name__}: {exc}")))


def _fit_chunk_of(job: _Job, k: int) -> tuple[list[Fit], Mapping[str, Any]]:
    """Chunk ``k``'s fits, and its generator's state after them."""
    rng = job.streams[k]
    lens = job.target_lens[k * CHUNK : (k + 1) * CHUNK]
    fits = job.renderer.fit_texts(job.corpus, rng, lens, job.make_messages, overhead=job.overhead)
    return fits, rng.bit_generator.state
