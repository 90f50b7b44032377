"""The driver with an engine that returns its reply as text and counts its own tokens
(what an HTTP server backend does)."""

import asyncio
import time

from backends.base import Backend
from core.types import RequestDone, TokenChunk
from harness.client.driver import Driver, execute
from workloads.base import SessionSpec, TurnSpec, WorkloadPlan
from workloads.prompts import PromptRenderer


class TextBackend(Backend):
    """Streams fixed ids, then says its reply text and token count differ from them."""

    def __init__(self):
        self.requests = []

    def load(self):
        pass

    engine_name = engine_version = "fake"

    async def stream(self, request):
        self.requests.append(request)
        for ids in ([11], [12, 13]):
            yield TokenChunk(ids, time.perf_counter())
        yield RequestDone(
            "length", engine_stats={"prompt_tokens": 99, "output_tokens": 4}, text=f" reply {request.turn}"
        )


def test_server_text_becomes_the_chat_history(real_tokenizer):
    backend = TextBackend()
    renderer = PromptRenderer(real_tokenizer)
    session = SessionSpec(0, [TurnSpec("first question", 3), TurnSpec("second question", 3)])
    plan = WorkloadPlan("chat", [session], [], exact_output_len=True, concurrency=1, open_loop=False)
    records = []
    asyncio.run(Driver(backend, renderer, plan, on_record=records.append).run(plan.sessions, False))
    assert [r.output_text for r in records] == [" reply 0", " reply 1"]  # not a decode of ids 11-13
    assert backend.requests[1].messages[-2] == {"role": "assistant", "content": " reply 0"}
    assert [r.prompt_tokens for r in records] == [99, 99]  # the engine's own count
    assert [r.output_tokens for r in records] == [4, 4]  # usage beats the streamed ids (3)
    assert (
        len(records[0].itl_s) == 3 and len(records[0].itl_chunk_s) == 1
    )  # per token: n_out − 1 (usage); per chunk: 2 chunks


def test_execute_without_text_leaves_decoding_to_the_driver():
    class Plain(TextBackend):
        async def stream(self, request):
            yield TokenChunk([5], time.perf_counter())
            yield RequestDone("length")

    from backends.base import GenerationRequest

    request = GenerationRequest(0, [1, 2], 1, True)
    record, ids = asyncio.run(execute(Plain(), request, time.perf_counter()))
    assert record.output_text is None and ids == [5] and record.output_tokens == 1


def test_dataset_history_and_replies_replace_the_engines(real_tokenizer):
    """Data workloads: messages before the first turn, and the dataset's reply re-sent in place of the engine's."""
    backend = TextBackend()
    renderer = PromptRenderer(real_tokenizer)
    earlier = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    session = SessionSpec(
        0,
        [TurnSpec("first question", 3, reply="the dataset's answer"), TurnSpec("second", 3)],
        system="Be brief.",
        history=earlier,
    )
    plan = WorkloadPlan("sharegpt", [session], [], exact_output_len=True, concurrency=1, open_loop=False)
    asyncio.run(Driver(backend, renderer, plan, on_record=lambda r: None).run(plan.sessions, False))
    first, second = (r.messages for r in backend.requests)
    assert first == [
        {"role": "system", "content": "Be brief."},
        *earlier,
        {"role": "user", "content": "first question"},
    ]
    assert second[-2] == {"role": "assistant", "content": "the dataset's answer"}
    assert second[1:3] == earlier


def test_the_collector_leaves_what_was_alive_before_the_run_alone_while_it_runs(real_tokenizer):
    """A full collection over the engine's and tokenizer's objects would stop every stream's stamps."""
    import gc

    frozen_during = []

    class Watching(TextBackend):
        async def stream(self, request):
            frozen_during.append(gc.get_freeze_count())
            async for event in super().stream(request):
                yield event

    before = gc.get_freeze_count()
    plan = WorkloadPlan(
        "chat", [SessionSpec(0, [TurnSpec("a question", 3)])], [], exact_output_len=True, concurrency=1, open_loop=False
    )
    asyncio.run(
        Driver(Watching(), PromptRenderer(real_tokenizer), plan, on_record=lambda r: None).run(plan.sessions, False)
    )
    assert frozen_during and frozen_during[0] > before
    assert gc.get_freeze_count() == before  # thawed when the point ends
