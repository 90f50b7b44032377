"""The contract every backend meets, in-process and in server mode, on the real SmolLM2 model.

One case per clause, each run against every target (engine × mode):

- exact length: end-of-sequence suppressed, exactly ``max_new_tokens`` come out;
- stop at end-of-sequence otherwise, which is not part of the output;
- batched output equals serial output under greedy decoding;
- a stream cancelled mid-way frees the engine for the next request;
- the prompt token count as the engine saw it (where the engine reports one);
- timestamps that increase; ``RequestDone`` last, exactly once.

Each target's engine loads once for the module (a module-scoped parametrized fixture, so
pytest runs all cases of one target before loading the next); vLLM's two are the sessions
its own tests use too (tests/conftest.py), loaded once for the whole run. Engines that run only on a
GPU are driven through their preset against the reference server speaking their dialect
(their HTTP path, not their numerics). ``python benchmarks/conformance_table.py`` runs this
module and prints the engine × mode × case table.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, Optional

import pytest
from conftest import loads_engine
from engine_helpers import loaded_backend, require_llama_server
from reference_fixtures import reply_ids

from backends import RequestDone, TokenChunk
from backends.base import GenerationRequest
from backends.factory import create_backend
from backends.registry import backend_registry
from backends.server.backend import ServerBackend
from core.types import SamplingParams
from workloads.prompts import PromptRenderer

# SmolLM2 answers in 11 tokens ("The answer to this classic math problem is 4."), then <|im_end|>,
# on every engine here. ("What is the capital of France?" does not do: its first token is a
# near-tie, "The" 25.36 against "L" 25.26 in fp32, and llama.cpp's Q4_1 picks "L'Étoile, …".)
SHORT = "What is 2+2?"
PROMPTS = ("Tell me about ships.", "Why is the sky blue?", "Name a fruit.")


@dataclass
class Target:
    """One engine in one mode, with the settings that make it batch for real."""

    id: str
    backend: str
    mode: str
    overrides: dict[str, Any] = field(default_factory=dict)
    dialect_of: Optional[str] = None  # an engine's preset talking to the reference server in its dialect
    n: int = 6  # output length asked in the cases that do not test the end-of-sequence
    exact_n: int = 16  # exact length asked past the natural end of SHORT's answer
    eos_budget: int = 24  # most tokens in the stop-at-EOS case
    long: int = 120  # the request cancelled mid-stream asks this many
    batch: int = 3  # requests sent together (and one by one) in the batched case
    model_reply: bool = True  # a model answers (False: the reference server's scripted words)
    shared: Optional[str] = None  # the session fixture whose engine this target uses (loaded once for the tests)
    server_ids: bool = False  # the server sends the reply's token ids (else they are its text re-tokenized)
    notes: dict[str, str] = field(default_factory=dict)  # case → why it does not apply
    needs: Optional[Callable[[], Any]] = None  # skips (fails under CI) where the engine is not installed
    timeout_s: Optional[int] = None  # its cases' limit, the engine's start in the first one's (else pyproject.toml's)

    @property
    def loads_engine(self) -> bool:
        """A real engine: not the reference server, in its own dialect or in an engine's."""
        return self.backend != "reference" and self.dialect_of is None

    def param(self):
        """The fixture's parameter, marked engine where it loads one (tests/conftest.py)."""
        marks = [pytest.mark.engine] if self.loads_engine else []
        if self.timeout_s:
            marks.append(pytest.mark.timeout(self.timeout_s))
        return pytest.param(self, id=self.id, marks=marks)


SCRIPTED = {"batched_equals_serial": "the reference server's words depend on arrival order, not on the prompt"}
TARGETS = [
    Target(
        "transformers-inprocess",
        "transformers",
        "inprocess",
        dict(batching="static", max_batch_size=4, batch_wait_s=0.05),
        notes={"prompt_tokens": "the engine is handed the ids and reports no count of its own"},
    ),
    Target("transformers-server", "transformers", "server", dict(startup_timeout_s=240), timeout_s=600),
    Target("vllm-inprocess", "vllm", "inprocess", shared="vllm_inprocess"),
    Target("vllm-server", "vllm", "server", server_ids=True, shared="vllm_server", timeout_s=600),
    Target(
        "llamacpp-inprocess",
        "llamacpp",
        "inprocess",
        dict(batched=True, max_batch_size=4, n_ctx=1024),
        notes={
            "prompt_tokens": "batched, llama.cpp's counters belong to the context the sequences share "
            "(every batched step counts as prompt eval): no per-request prompt count"
        },
    ),
    Target(
        "llamacpp-server",
        "llamacpp",
        "server",
        dict(startup_timeout_s=120),
        notes={"prompt_tokens": "llama_cpp.server sends no usage"},
    ),
    Target(
        "llama-server",
        "llamacpp",
        "server",
        dict(server="llama-server", max_batch_size=4, n_ctx=1024, startup_timeout_s=120),
        needs=require_llama_server,
    ),
    # MLX's CPU kernels run at ~2 GFLOP/s here (5 tokens/s): short replies, a short cancelled one, two in a batch
    Target(
        "mlx-inprocess",
        "mlx",
        "inprocess",
        {},
        n=4,
        exact_n=14,
        eos_budget=16,
        long=30,
        batch=2,
        notes={"prompt_tokens": "mlx-lm's BatchGenerator reports no per-request prompt count (its serial mode does)"},
    ),
    Target(
        "mlx-server", "mlx", "server", dict(startup_timeout_s=120), n=4, exact_n=14, eos_budget=16, long=30, batch=2
    ),
    Target(
        "reference-server",
        "reference",
        "server",
        dict(ttft_ms=5, itl_ms=20, tokens=8),
        model_reply=False,
        notes=SCRIPTED,
    ),
    Target("sglang-server", "sglang", "server", {}, dialect_of="sglang", model_reply=False, notes=SCRIPTED),
    Target(
        "tgi-server",
        "tgi",
        "server",
        {},
        dialect_of="tgi",
        model_reply=False,
        notes={
            **SCRIPTED,
            "exact_length": "TGI's OpenAI layer has no ignore_eos or min_tokens: it cannot be asked for exact lengths",
        },
    ),
]


@dataclass
class Engine:
    target: Target
    backend: Any
    run: Callable[[Awaitable], Any]  # a coroutine run to its end on the engine's event loop
    renderer: PromptRenderer
    eos_ids: set[int]

    def request(self, i: int, text: str, n: int, exact: bool = True) -> GenerationRequest:
        messages = [{"role": "user", "content": text}]
        return GenerationRequest(
            request_id=i,
            prompt_token_ids=self.renderer.render(messages),
            max_new_tokens=n,
            exact_output_len=exact,
            sampling=SamplingParams(),
            messages=messages,
        )


def _config(target: Target, model):
    if target.dialect_of:  # the engine's own preset, its server replaced by the reference server
        command = [
            "{python}",
            "-m",
            "refserver",
            "--host",
            "{host}",
            "--port",
            "{port}",
            "--dialect",
            target.dialect_of,
            "--tokens",
            "8",
            "--ttft-ms",
            "5",
            "--itl-ms",
            "20",
            "--tokenizer",
            "{model}",
            "--model-name",
            "whatever",
        ]
        return backend_registry.get(target.backend).config_cls(
            mode="server", startup_timeout_s=60, server_command=command, **target.overrides
        )
    return backend_registry.get(target.backend).config_cls(mode=target.mode, **target.overrides)


@pytest.fixture(scope="module", params=[t.param() for t in TARGETS])
@loads_engine(unless=lambda target: not target.loads_engine)
def engine(request, real_model, real_tokenizer, tmp_path_factory):
    target: Target = request.param
    ids = {
        real_tokenizer.eos_token_id,
        *(real_tokenizer.convert_tokens_to_ids(t) for t in ("<|endoftext|>", "<|im_end|>")),
    }
    renderer = PromptRenderer(real_tokenizer)
    if target.shared:  # an engine session other tests use too, loaded once (tests/conftest.py)
        session = request.getfixturevalue(target.shared)
        yield Engine(target, session.backend, session.run, renderer, ids)
        return
    if target.needs:
        target.needs()
    cfg = _config(target, real_model)
    cfg.validate()
    backend = create_backend(cfg, real_model)
    backend.run_dir = tmp_path_factory.mktemp(target.id)
    with loaded_backend(backend) as run:  # a loop of its own per target
        yield Engine(target, backend, run, renderer, ids)


def applies(engine: Engine, case: str) -> None:
    """Skip, with the reason shown in the table, a case that cannot apply to this target."""
    reason = engine.target.notes.get(case)
    if reason:
        pytest.skip(f"n/a: {reason}")


# --- reading one stream ----------------------------------------------------------------------


@dataclass
class Stream:
    send_t: float
    chunks: list[TokenChunk]
    done: Optional[RequestDone]
    events_after_done: int

    @property
    def output_tokens(self) -> int:
        """The count the harness records: the engine's (an HTTP server's usage) or the streamed one."""
        streamed = sum(len(c.token_ids) if c.n_tokens is None else c.n_tokens for c in self.chunks)
        return int(self.done.engine_stats.get("output_tokens", streamed)) if self.done else streamed

    @property
    def ids(self) -> list[int]:
        """The reply's ids as the harness records them (harness/client/driver.py)."""
        if self.done is not None and self.done.token_ids is not None:
            return list(self.done.token_ids)
        return [t for c in self.chunks for t in c.token_ids]


async def read(backend, req: GenerationRequest, first_token: Optional[asyncio.Event] = None) -> Stream:
    send_t = time.perf_counter()
    chunks, done, after = [], None, 0
    try:
        async for event in backend.stream(req):
            if done is not None:
                after += 1
            if isinstance(event, TokenChunk):
                chunks.extend(event.split())  # one per server chunk
                if first_token is not None:
                    first_token.set()
            else:
                assert isinstance(event, RequestDone)
                done = event if done is None else done
    finally:
        if first_token is not None:
            first_token.set()  # a reply that ended without a token, or failed, holds up no one waiting on it
    if done is not None and done.token_ids is None and done.token_ids_text is not None:
        done.token_ids = reply_ids(done, backend.get_tokenizer())  # left to count after the run
    return Stream(send_t, chunks, done, after)


# --- the cases -------------------------------------------------------------------------------


def test_exact_length(engine):
    applies(engine, "exact_length")
    n = engine.target.exact_n
    s = engine.run(read(engine.backend, engine.request(0, SHORT, n, exact=True)))
    assert s.output_tokens == n and s.done.finish_reason == "length"
    if engine.target.model_reply:  # the answer ends after 11 tokens unless its end-of-sequence is suppressed
        assert not engine.eos_ids & set(s.ids)
    if isinstance(engine.backend, ServerBackend):  # where the recorded output ids come from
        source = s.done.engine_stats["output_token_ids_source"]
        assert source == ("server" if engine.target.server_ids else "retokenized")
        assert len(s.ids) == n


def test_stop_at_end_of_sequence(engine):
    applies(engine, "stop_at_eos")
    budget = engine.target.eos_budget
    s = engine.run(read(engine.backend, engine.request(1, SHORT, budget, exact=False)))
    assert s.done.finish_reason == "stop", s.done
    assert 0 < s.output_tokens < budget
    assert not engine.eos_ids & set(s.ids)  # the end-of-sequence token is not output
    if engine.target.model_reply:
        assert "4" in engine.renderer.decode(s.ids)


def test_batched_equals_serial(engine):
    applies(engine, "batched_equals_serial")
    n = engine.target.n
    reqs = [engine.request(10 + i, text, n) for i, text in enumerate(PROMPTS[: engine.target.batch])]
    serial = [engine.run(read(engine.backend, r)) for r in reqs]

    async def together():
        return await asyncio.gather(*(read(engine.backend, r) for r in reqs))

    async def each_joining_at_the_first_token_of_the_last():
        """Continuous batching's other shape: a prefill beside another reply's decode, on an event,
        not on the timing that decided it in the gather above."""
        joined = []
        for req in reqs:
            first = asyncio.Event()
            joined.append(asyncio.ensure_future(read(engine.backend, req, first)))
            await first.wait()
        return await asyncio.gather(*joined)

    for batched in (engine.run(together()), engine.run(each_joining_at_the_first_token_of_the_last())):
        assert [s.ids for s in batched] == [s.ids for s in serial]
        assert all(s.output_tokens == n for s in batched)


def test_cancellation_frees_the_engine(engine):
    applies(engine, "cancellation")
    long_req = engine.request(20, "Write a long story about a dragon and a knight.", engine.target.long)
    got: list[TokenChunk] = []

    async def cancel_mid_stream() -> float:
        two = asyncio.Event()

        async def consume():
            async for event in engine.backend.stream(long_req):
                if isinstance(event, TokenChunk):
                    got.extend(event.split())
                    if len(got) >= 2:
                        two.set()

        task = asyncio.create_task(consume())
        await asyncio.wait_for(two.wait(), 300)
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        return got[-1].t - got[0].t  # one token's gap (two chunks seen)

    gap = engine.run(cancel_mid_stream())
    after = engine.run(read(engine.backend, engine.request(21, SHORT, 2)))
    assert after.done is not None and after.output_tokens == 2 and after.done.finish_reason == "length"
    # what the cancelled request had left would take (long − 2) gaps: the next one must not wait for it
    left = (engine.target.long - len(got)) * gap
    took = after.chunks[-1].t - after.send_t
    assert took < max(0.5 * left, 0.0) + _ttft_allowance(engine), (took, left)


def _ttft_allowance(engine: Engine) -> float:
    """A request's own time to its two tokens on this CPU (MLX prefills ~40 tokens in 4-7 s)."""
    return 10.0 if engine.target.backend == "mlx" else 2.0


def test_prompt_token_count_as_the_engine_saw_it(engine):
    applies(engine, "prompt_tokens")
    req = engine.request(30, SHORT, 2)
    s = engine.run(read(engine.backend, req))
    seen = engine_prompt_count(s.done.engine_stats)
    assert seen is not None, f"{engine.target.id} reports no prompt count: say why in its Target's notes"
    assert seen == len(req.prompt_token_ids)


def engine_prompt_count(stats: dict[str, Any]) -> Optional[int]:
    """The engine's own prompt count: an HTTP server's usage, MLX's, llama.cpp's evaluated +
    cached tokens, vLLM's; None when the engine reports none."""
    if "prompt_tokens" in stats:
        return int(stats["prompt_tokens"])
    if "mlx_prompt_tokens" in stats:
        return int(stats["mlx_prompt_tokens"])
    if "llama_n_p_eval" in stats:
        return int(stats["llama_n_p_eval"]) + int(stats.get("cached_tokens") or 0)
    return None


def test_timestamps_increase(engine):
    applies(engine, "timestamps")
    s = engine.run(read(engine.backend, engine.request(40, PROMPTS[0], engine.target.n)))
    times = [c.t for c in s.chunks]
    assert times == sorted(times) and s.send_t < times[0]
    if s.done.scheduled_t is not None:  # the engine's own "work began" lies between send and first token
        assert s.send_t <= s.done.scheduled_t <= times[0]


def test_request_done_last(engine):
    applies(engine, "request_done_last")
    s = engine.run(read(engine.backend, engine.request(50, PROMPTS[1], engine.target.n)))
    assert s.done is not None and s.events_after_done == 0 and s.chunks
