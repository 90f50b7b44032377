"""Hugging Face transformers: the reference implementation, on CPU or CUDA.

Requests in flight are served by one engine thread, either one at a time
(``batching=serial``) or in static batches with left padding (``batching=static``): a
batch starts with the requests waiting at that moment and runs to its longest request
before the next batch starts. ``batching=continuous`` hands requests to transformers' own
continuous-batching manager instead (``backends/engines/_transformers_cb.py``): a request joins the
running batch at the next step. Either way a request's clock starts when the runner hands
it over, so TTFT includes its wait.

LoRA adapters (``workload.lora.adapters``) load with peft beside the model
(``load_adapter`` each); before each batch the engine thread switches to the batch's adapter
(``set_adapter``, or ``disable_adapters`` for the base model). A static batch holds requests of
one adapter; continuous batching, which mixes requests in every step, refuses adapters.

``backend.mode=server`` launches ``transformers serve`` instead (where the interpreter's
transformers has it, with ``pip install 'transformers[serving]'``).
"""

from __future__ import annotations

import importlib.util
import queue
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from backends.base import BackendConfig, GenerationRequest, StreamEvent
from backends.registry import backend_registry
from backends.server.presets import transformers_preset
from backends.threaded import Job, ThreadedBackend
from core.errors import ConfigError
from core.model import ModelFiles
from core.types import RequestDone, SamplingParams, TokenChunk

if TYPE_CHECKING:  # it imports torch: loaded only for backend.batching=continuous
    from backends.engines._transformers_cb import ContinuousEngine

DTYPES = ("auto", "float32", "bfloat16", "float16")
BATCHING = ("serial", "static", "continuous")
# attn_implementation values transformers' continuous batching accepts (eager becomes paged|eager)
CB_ATTENTION = ("sdpa", "eager", "paged|eager")


@dataclass
class TransformersConfig(BackendConfig):
    name: str = "transformers"
    device: str = "auto"  # auto: cuda when available, else cpu; or cpu, cuda, cuda:1…
    dtype: str = "auto"  # auto: float32 on CPU, bfloat16 on CUDA
    batching: str = "serial"  # serial | static | continuous
    max_batch_size: int = 8  # static: rows per batch; continuous: requests per forward pass
    batch_wait_s: float = 0.0  # static: wait up to this long for a batch to fill
    # continuous: the paged KV cache, in tokens (null: transformers sizes it from free memory,
    # which on CPU means most of the machine's RAM)
    cb_cache_tokens: Optional[int] = 8192
    # continuous: tokens per forward pass, longer prompts prefilled in pieces (null: transformers'
    # default, 8192)
    cb_max_batch_tokens: Optional[int] = 1024
    cb_page_size: int = 256  # continuous: tokens per cache page
    cb_prefix_sharing: bool = False  # continuous: requests share full cache pages of a common prefix
    num_threads: Optional[int] = None  # torch CPU threads; null keeps torch's default
    attn_implementation: Optional[str] = None  # e.g. sdpa, eager; null lets transformers choose

    def validate(self) -> None:
        super().validate()
        if self.dtype not in DTYPES:
            raise ConfigError(f"backend.dtype must be one of {', '.join(DTYPES)} (got {self.dtype!r})")
        if self.batching not in BATCHING:
            raise ConfigError(f"backend.batching must be serial, static or continuous (got {self.batching!r})")
        if self.max_batch_size < 1:
            raise ConfigError(f"backend.max_batch_size must be >= 1 (got {self.max_batch_size})")
        if self.batch_wait_s < 0:
            raise ConfigError(f"backend.batch_wait_s must be >= 0 (got {self.batch_wait_s})")
        if self.num_threads is not None and self.num_threads < 1:
            raise ConfigError(f"backend.num_threads must be >= 1 (got {self.num_threads})")
        if self.batching == "continuous":
            self.validate_continuous()

    def validate_continuous(self) -> None:
        attn = self.attn_implementation
        if attn is not None and attn not in CB_ATTENTION and not attn.startswith("flash_attention"):
            raise ConfigError(
                f"backend.batching=continuous cannot use backend.attn_implementation={attn}: "
                "use sdpa, eager or flash_attention_2/3 (or null)"
            )
        for key in ("cb_cache_tokens", "cb_max_batch_tokens"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise ConfigError(f"backend.{key} must be >= 1 or null (got {value})")
        if self.cb_page_size < 1:
            raise ConfigError(f"backend.cb_page_size must be >= 1 (got {self.cb_page_size})")


@backend_registry.register("transformers", TransformersConfig)
class TransformersBackend(ThreadedBackend[TransformersConfig]):
    requires = ("torch", "transformers")
    extra = "transformers"
    _cb: Optional[ContinuousEngine] = None  # the continuous-batching manager, once loaded

    @classmethod
    def server_preset(cls, config: BackendConfig, model: ModelFiles):
        """``transformers serve`` (backend.mode=server), where the chosen interpreter's
        transformers has it; device, dtype and attn_implementation carry over."""
        assert isinstance(config, TransformersConfig)
        args: list[str] = []
        if config.device != "auto":
            args += ["--device", config.device]
        if config.dtype != "auto":
            args += ["--dtype", config.dtype]
        if config.attn_implementation:
            args += ["--attn-implementation", config.attn_implementation]
        if config.batching == "continuous":
            args += ["--continuous-batching", "--cb-block-size", str(config.cb_page_size)]
            if config.cb_cache_tokens is not None:
                args += ["--cb-num-blocks", str(-(-config.cb_cache_tokens // config.cb_page_size))]
            if config.cb_max_batch_tokens is not None:
                args += ["--cb-max-batch-tokens", str(config.cb_max_batch_tokens)]
        return transformers_preset(config, model, extra_args=args)

    def import_engine(self) -> None:
        from transformers import AutoModelForCausalLM  # noqa: F401 - imports torch too

    def load(self) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        self._torch = torch
        cfg = self.config
        if cfg.num_threads:
            torch.set_num_threads(cfg.num_threads)
        device = cfg.device if cfg.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
        dtype_name = cfg.dtype if cfg.dtype != "auto" else ("float32" if device == "cpu" else "bfloat16")
        self.device, self.dtype = torch.device(device), getattr(torch, dtype_name)
        attn = cfg.attn_implementation
        if cfg.batching == "continuous" and attn and attn.startswith("flash_attention") and self.device.type != "cuda":
            raise ConfigError(
                f"backend.attn_implementation={attn} needs CUDA; continuous batching on "
                f"{self.device.type} runs with sdpa (the default) or eager"
            )
        hf_dir = self.model.require_hf_dir()
        hf_logging.disable_progress_bar()
        kwargs = {"dtype": self.dtype}
        if cfg.attn_implementation:
            kwargs["attn_implementation"] = cfg.attn_implementation
        self._model = AutoModelForCausalLM.from_pretrained(hf_dir, **kwargs).to(self.device).eval()
        self._tokenizer = AutoTokenizer.from_pretrained(hf_dir)
        eos = self._model.generation_config.eos_token_id
        eos = eos if isinstance(eos, list) else [eos]
        self._eos_ids = sorted({t for t in eos + [self._tokenizer.eos_token_id] if t is not None})
        pad = self._tokenizer.pad_token_id
        self._pad_id = pad if pad is not None else self._eos_ids[0]  # pad = eos when batching
        self._active_adapter: Optional[str] = None
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # each adapter's load report lists the others' weights as missing
        try:
            for adapter in self.model.adapters:
                self._model.load_adapter(str(adapter.require_hf_dir()), adapter_name=adapter.name)
        finally:
            hf_logging.set_verbosity(verbosity)
        if self.model.adapters:
            self._model.disable_adapters()  # the base model until a request names an adapter
        if cfg.batching == "continuous":
            self._start_continuous()
        else:
            self.start_engine_thread("transformers-engine")

    def check_adapters(self, adapters: list[Any]) -> None:
        """LoRA with peft, one adapter per batch: serial or static batching."""
        if self.config.batching == "continuous":
            raise ConfigError(
                "backend.batching=continuous mixes requests of different LoRA adapters in one step, "
                "which transformers cannot: use backend.batching=serial or static with "
                "workload.lora.adapters"
            )
        if importlib.util.find_spec("peft") is None:
            raise ConfigError(
                "backend=transformers serves LoRA adapters with peft, which is not installed: "
                "pip install -e '.[transformers]'"
            )
        for adapter in adapters:
            adapter.require_hf_dir()

    def _use_adapter(self, name: Optional[str]) -> None:
        """Switch the model to ``name``'s adapter (None: the base model), on the engine thread."""
        if name == self._active_adapter:
            return
        if name is None:
            self._model.disable_adapters()
        else:
            self._model.enable_adapters()
            self._model.set_adapter(name)
        self._active_adapter = name

    def _start_continuous(self) -> None:
        from backends.engines._transformers_cb import ContinuousEngine

        cfg = self.config
        self._cb = cb = ContinuousEngine(
            self._model,
            self._eos_ids,
            max_batch_size=cfg.max_batch_size,
            cache_tokens=cfg.cb_cache_tokens,
            max_batch_tokens=cfg.cb_max_batch_tokens,
            page_size=cfg.cb_page_size,
            prefix_sharing=cfg.cb_prefix_sharing,
        )
        cb.start(SamplingParams())  # greedy; a request that samples rebuilds it while nothing is in flight

    def check_workload(self, plan: Any) -> None:
        self.refuse_constraints(plan, "backend=transformers in-process")
        if self.config.batching == "continuous":
            self.check_context_fits(plan, self.config.cb_cache_tokens, "backend.cb_cache_tokens")

    def stream(self, request: GenerationRequest) -> AsyncIterator[StreamEvent]:
        if self.config.batching == "continuous":
            assert self._cb is not None, "load() starts the continuous-batching manager"
            return self._cb.stream(request)
        return super().stream(request)

    def fatal_error(self) -> Optional[str]:
        cb = getattr(self, "_cb", None)
        return cb.fatal_error() if cb is not None else super().fatal_error()

    @property
    def engine_name(self) -> str:
        return "transformers"

    @property
    def engine_version(self) -> str:
        import transformers

        return transformers.__version__

    def engine_info(self) -> dict[str, Any]:
        cfg = self.config
        info: dict[str, Any] = {"batching": cfg.batching, "max_batch_size": cfg.max_batch_size}
        if cfg.batching == "serial":  # the console's line on a long queue wait (harness/reports/console.py)
            info["notes"] = {
                "queue_wait": "transformers runs one request at a time with batching=serial; "
                "backend.batching=continuous serves them together"
            }
        if cfg.batching == "continuous":
            info.update(
                cb_cache_tokens=cfg.cb_cache_tokens,
                cb_max_batch_tokens=cfg.cb_max_batch_tokens,
                cb_page_size=cfg.cb_page_size,
                cb_prefix_sharing=cfg.cb_prefix_sharing,
            )
        if hasattr(self, "_model"):
            info.update(
                device=str(self.device),
                dtype=str(self.dtype).removeprefix("torch."),
                torch=self._torch.__version__,
                threads=self._torch.get_num_threads(),
                attn_implementation=self._model.config._attn_implementation,
            )
        return info

    def memory(self) -> dict[str, Any]:
        if not hasattr(self, "_model"):
            return {}
        tensors = list(self._model.parameters()) + list(self._model.buffers())
        return {
            "weights_bytes": sum(t.numel() * t.element_size() for t in tensors),
            "kv_bytes_per_value": self._torch.tensor([], dtype=self.dtype).element_size(),
        }

    def close(self) -> None:
        cb = getattr(self, "_cb", None)
        if cb is not None:
            cb.stop()
            self._cb = None
        self.stop_engine_thread()
        if hasattr(self, "_model"):
            del self._model
            if self.device.type == "cuda":
                self._torch.cuda.empty_cache()

    # --- the engine thread: stage 2 (scheduler) to stage 7 (clean-up) --------------------

    def engine_loop(self) -> None:
        while True:
            job = self.next_job()
            if job is None:
                return
            batch = [job] + (self._gather_batch(job) if self.config.batching == "static" else [])
            batch = [j for j in batch if not j.cancelled]
            if not batch:
                continue
            try:
                self._generate(batch)
            except Exception as exc:  # noqa: BLE001 - the error goes to each request's stream
                for j in batch:
                    j.finish(exc)

    def _gather_batch(self, first: Job) -> list[Job]:
        """Stage 2, scheduler: the waiting requests that can share a batch with ``first``."""
        batch: list[Job] = []
        deadline = time.perf_counter() + self.config.batch_wait_s
        skipped: list[Optional[Job]] = []
        while len(batch) + 1 < self.config.max_batch_size:
            try:
                wait = deadline - time.perf_counter()
                job = self.next_job(block=wait > 0, timeout=wait if wait > 0 else None)
            except queue.Empty:
                break
            if job is None:
                skipped.append(job)
                break
            (batch if _batch_key(job) == _batch_key(first) else skipped).append(job)
        self.defer(skipped)
        return batch

    def _generate(self, batch: list[Job]) -> None:
        torch = self._torch
        scheduled_t = time.perf_counter()
        prompts = [j.request.prompt_token_ids for j in batch]
        width = max(len(p) for p in prompts)
        input_ids = torch.tensor([[self._pad_id] * (width - len(p)) + p for p in prompts], device=self.device)
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=self.device)
        max_new = max(j.request.max_new_tokens for j in batch)
        first = batch[0].request
        kwargs: dict[str, Any] = dict(
            max_new_tokens=max_new,
            pad_token_id=self._pad_id,
            eos_token_id=self._eos_ids,
            do_sample=not first.sampling.greedy,
        )
        if first.exact_output_len:
            kwargs["min_new_tokens"] = max_new  # suppresses every eos id until max_new
        if not first.sampling.greedy:
            kwargs.update(
                temperature=first.sampling.temperature, top_p=first.sampling.top_p, top_k=first.sampling.top_k
            )
            if first.sampling.seed is not None:
                torch.manual_seed(first.sampling.seed)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        if self.model.adapters:
            self._use_adapter(first.adapter)  # one adapter per batch (_batch_key)
        streamer = _BatchStreamer(batch, set(self._eos_ids), scheduled_t)
        # Stages 3 and 4, prefill and the decode loop; the streamer is stage 6, return.
        with torch.inference_mode():
            self._model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                streamer=streamer,
                stopping_criteria=streamer.stopping_criterion(),
                **kwargs,
            )
        streamer.end_all()  # stage 7, clean-up: every request's stream is closed


def _batch_key(job: Job) -> tuple:
    """Requests can share a static batch when they ask for the same decoding and the same adapter."""
    return (job.request.exact_output_len, job.request.sampling, job.request.adapter)


class _BatchStreamer:
    """Receives each decode step's tokens from generate() and routes them to their requests."""

    def __init__(self, batch: list[Job], eos_ids: set[int], scheduled_t: float):
        self.batch = batch
        self.eos_ids = eos_ids
        self.scheduled_t = scheduled_t
        self.prompt_seen = False
        self.done = [False] * len(batch)
        self.stats = {"batch_size": len(batch)}

    def put(self, value: Any) -> None:
        t = time.perf_counter()  # the moment the step's tokens exist on the host
        if not self.prompt_seen:  # generate() first hands over the prompt itself
            self.prompt_seen = True
            return
        tokens = value.reshape(-1).tolist()
        for i, (job, token) in enumerate(zip(self.batch, tokens)):
            if self.done[i]:
                continue
            if job.cancelled:
                self.done[i] = True
                continue
            request = job.request
            if not request.exact_output_len and token in self.eos_ids:
                self._finish(i, "stop")
                continue
            job.emit(TokenChunk([token], t))
            job.produced += 1
            if job.produced >= request.max_new_tokens:
                self._finish(i, "length")

    def end(self) -> None:
        pass

    def end_all(self) -> None:
        for i in range(len(self.batch)):
            if not self.done[i]:
                self._finish(i, "stop" if self.batch[i].produced else "length")

    def _finish(self, i: int, reason: str) -> None:
        self.done[i] = True
        self.batch[i].finish(RequestDone(reason, scheduled_t=self.scheduled_t, engine_stats=dict(self.stats)))

    def stopping_criterion(self):
        """Marks rows finished as their own lengths are reached, and stops when all are."""
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList

        done = self.done

        class RowsDone(StoppingCriteria):
            def __call__(self, input_ids, scores, **kwargs):
                return torch.tensor(done, device=input_ids.device)

        return StoppingCriteriaList([RowsDone()])
