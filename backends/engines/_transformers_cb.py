"""Continuous batching for the transformers backend, on transformers' own manager.

``model.init_continuous_batching()`` returns a ``ContinuousBatchingManager`` (the engine
``transformers serve --continuous-batching`` uses): one background thread that runs a paged
KV cache and a scheduler; a request added while others decode joins the next forward pass.

Three things are added around it, without patching transformers:

- **Stamps in the producing thread.** The manager routes each step's outputs through its
  ``output_router`` from the generation thread; ``_JobRouter`` replaces it, so every token
  is stamped there (with the manager's own per-token ``perf_counter`` stamps, taken when it
  appends the token) and handed to the event loop through ``Job`` as the other in-process
  backends do. The manager's own router would hop to the event loop before anyone stamps.
- **Exact output lengths per request.** The manager has no per-request ``min_new_tokens``;
  ``_SuppressEos`` is a per-request CB logits processor that sets the end-of-sequence logits
  to -inf for the requests that ask (as ``min_new_tokens`` does in ``generate()``).
- **One decoding setting per manager.** Greedy/sampling, temperature, top-p, top-k and the
  seed are manager-wide in transformers; a request with another setting rebuilds the manager
  when nothing is in flight, and fails with one line when something is.

This module imports transformers and torch at import time, so its name starts with ``_``
(backend discovery skips it) and backends/engines/transformers.py imports it only when
``batching=continuous`` loads.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Optional

import torch
from transformers.generation.continuous_batching.cb_logits_processors import ContinuousBatchingLogitsProcessor
from transformers.generation.continuous_batching.continuous_api import OutputRouter

from backends.threaded import Job
from core.errors import ConfigError
from core.types import GenerationRequest, RequestDone, SamplingParams, StreamEvent, TokenChunk


def _decoding_key(sampling: SamplingParams) -> tuple:
    return (True,) if sampling.greedy else (False, sampling.temperature, sampling.top_p, sampling.top_k, sampling.seed)


@dataclass(frozen=True)
class _Limits:
    """The manager's batch and paged-cache sizes (backend.max_batch_size, backend.cb_*)."""

    max_batch_size: int
    cache_tokens: Optional[int]
    max_batch_tokens: Optional[int]
    page_size: int
    prefix_sharing: bool


class ContinuousEngine:
    """One transformers ContinuousBatchingManager and the requests streaming out of it."""

    def __init__(
        self,
        model: Any,
        eos_ids: list[int],
        *,
        max_batch_size: int,
        cache_tokens: Optional[int],
        max_batch_tokens: Optional[int],
        page_size: int,
        prefix_sharing: bool,
    ):
        self._model = model
        self._eos_ids = eos_ids
        self._limits = _Limits(max_batch_size, cache_tokens, max_batch_tokens, page_size, prefix_sharing)
        self._ids = itertools.count()
        self._manager: Any = None
        self._router: Optional[_JobRouter] = None
        self._key: Optional[tuple] = None

    def start(self, sampling: SamplingParams) -> None:
        """Build and start a manager for this decoding setting (loads the paged cache)."""
        from transformers import GenerationConfig
        from transformers.generation.configuration_utils import ContinuousBatchingConfig

        limits = self._limits
        greedy = sampling.greedy
        gen = GenerationConfig(
            do_sample=not greedy,
            temperature=None if greedy else sampling.temperature,
            top_p=None if greedy or sampling.top_p >= 1.0 else sampling.top_p,
            top_k=None if greedy or not sampling.top_k else sampling.top_k,
            eos_token_id=self._eos_ids,
            pad_token_id=self._eos_ids[0],
            max_new_tokens=1,  # every request sets its own
        )
        num_blocks = None
        if limits.cache_tokens is not None:
            num_blocks = max(1, math.ceil(limits.cache_tokens / limits.page_size))
        cb = ContinuousBatchingConfig(
            page_size=limits.page_size,
            num_blocks=num_blocks,
            max_batch_tokens=limits.max_batch_tokens,
            max_requests_per_batch=limits.max_batch_size,
            allow_block_sharing=limits.prefix_sharing,
            seed=None if greedy else sampling.seed,
            auto_switch_to_flash=False,  # the attention the user chose (or transformers' default) stays
        )
        try:
            manager = self._model.init_continuous_batching(generation_config=gen, continuous_batching_config=cb)
        except ValueError as exc:  # e.g. an attention implementation the manager refuses
            raise ConfigError(f"transformers continuous batching cannot start: {exc}") from exc
        _SuppressEos.install(manager.logit_processor, self._eos_ids)
        self._router = _JobRouter(set(self._eos_ids))
        manager.output_router = self._router  # read by the batch processor, built in start()
        manager.start()
        self._manager, self._key = manager, _decoding_key(sampling)

    def stop(self) -> None:
        """Stop the manager now; requests still in flight end with an error."""
        if self._manager is not None:
            self._manager.stop(block=True, timeout=30, hard_stop=True)
            self._manager = None

    def fatal_error(self) -> Optional[str]:
        if self._manager is None:
            return None
        error = self._manager.background_thread_status.fatal_error
        return f"the transformers continuous-batching thread died: {error}" if error is not None else None

    def engine_requests(self) -> int:
        """Requests the manager's scheduler still holds (running or waiting): 0 once all are freed."""
        processor = self._manager.batch_processor if self._manager is not None else None
        if processor is None:
            return 0
        return len(processor.scheduler.active_requests) + len(processor.scheduler.waiting_requests)

    def in_flight(self) -> int:
        return self._router.in_flight() if self._router is not None else 0

    def _ensure_decoding(self, sampling: SamplingParams) -> None:
        if self._manager is not None and self._key == _decoding_key(sampling):
            return
        if self.in_flight():
            raise RuntimeError(
                "transformers continuous batching decodes every request in flight with one setting "
                f"(greedy/temperature/top_p/top_k/seed); this request asks for another ({sampling})"
            )
        self.stop()
        self.start(sampling)

    async def stream(self, request: GenerationRequest) -> AsyncIterator[StreamEvent]:
        if (error := self.fatal_error()) is not None:
            raise RuntimeError(error)
        self._ensure_decoding(request.sampling)
        manager, router = self._manager, self._router
        assert manager is not None and router is not None
        job = Job(request, asyncio.get_running_loop())
        rid = f"harness-{next(self._ids)}"
        router.add(rid, job)  # before the manager can produce anything for it
        added = manager.add_request(
            list(request.prompt_token_ids),  # as given: no BOS or template added
            request_id=rid,
            max_new_tokens=request.max_new_tokens,
            streaming=True,
            record_timestamps=True,
            eos_token_id=-1 if request.exact_output_len else self._eos_ids,
            suppress_eos=int(request.exact_output_len),
        )
        if added is None:
            router.drop(rid)
            raise RuntimeError("the transformers continuous-batching manager refused the request (stopping)")
        try:
            while True:
                event = await job.events.get()
                if isinstance(event, BaseException):
                    raise event
                yield event
                if isinstance(event, RequestDone):
                    return
        finally:
            if not job.finished:  # the reader went away: free its slot and KV blocks
                job.cancelled = True
                router.drop(rid)
                manager.cancel_request(rid)


class _JobRouter(OutputRouter):
    """Runs in the manager's generation thread: turns each step's outputs into Job events."""

    def __init__(self, eos_ids: set[int]):
        super().__init__()
        self.eos_ids = eos_ids
        self.jobs: dict[str, Job] = {}

    def add(self, rid: str, job: Job) -> None:
        with self._lock:
            self.jobs[rid] = job

    def drop(self, rid: str) -> None:
        with self._lock:
            self.jobs.pop(rid, None)

    def in_flight(self) -> int:
        with self._lock:
            return len(self.jobs)

    def deliver(self, output: Any) -> None:
        self._route(output, time.perf_counter())

    def deliver_batch(self, outputs: list[Any]) -> None:
        t = time.perf_counter()
        for output in outputs:
            self._route(output, t)

    def _route(self, output: Any, t: float) -> None:
        with self._lock:
            job = self.jobs.get(output.request_id)
        if job is None or job.finished:
            return  # cancelled, or not ours
        request = job.request
        stamps = output.timestamps or []
        tokens = output.generated_tokens
        stopped = False
        for i in range(job.produced, len(tokens)):
            token = tokens[i]
            if not request.exact_output_len and token in self.eos_ids:
                stopped = True  # the end-of-sequence token is not output (as serial and static)
                break
            job.emit(TokenChunk([token], stamps[i] if i < len(stamps) else t))
            job.produced += 1
        if output.error is not None:
            self.drop(output.request_id)
            job.finish(RuntimeError(f"transformers continuous batching failed the request: {output.error}"))
        elif stopped or output.is_finished():
            self.drop(output.request_id)
            reason = "length" if job.produced >= request.max_new_tokens else "stop"
            scheduled = output.lifespan[0] if output.lifespan[0] > 0 else None
            job.finish(
                RequestDone(reason, scheduled_t=scheduled, engine_stats={"prompt_tokens": len(output.prompt_ids)})
            )


class _SuppressEos(ContinuousBatchingLogitsProcessor):
    """A per-request CB logits processor: -inf on the end-of-sequence ids where ``suppress_eos=1``."""

    supported_kwargs = {"suppress_eos": int}
    ignored_kwargs: tuple[str, ...] = ()

    def __init__(self, eos_ids: list[int]):
        self.eos = torch.tensor(eos_ids, dtype=torch.long)

    @classmethod
    def install(cls, processors: Any, eos_ids: list[int]) -> None:
        """Put the processor first in the manager's list, before its batch processor is built."""
        processors.logits_processor.insert(0, cls(eos_ids))
        processors.tensors_required += 1
        processors.supported_keys.update(cls.supported_kwargs)
        processors.do_processing = True

    def fill_defaults(self, int32_tensor: Any) -> None:
        int32_tensor.fill_(0)

    def prepare_tensor_args(self, requests_with_new_token: list[Any]) -> Any:
        flags = [int(r.state.logit_processor_kwargs.get("suppress_eos", 0)) for r in requests_with_new_token]
        return torch.tensor(flags, dtype=torch.int32, device="cpu")

    def __call__(self, scores: Any, tensor_arg: Any) -> Any:
        suppress = tensor_arg[: scores.size(0)].bool().unsqueeze(-1)  # [B, 1]
        eos = self.eos.to(scores.device)
        scores[:, eos] = scores[:, eos].masked_fill(suppress, float("-inf"))
        return scores
