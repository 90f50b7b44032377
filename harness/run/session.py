"""The engine session: one loaded engine that serves one or more load points.

``EngineSession`` owns what outlives a single point: the model's files, the backend (the
engine in-process, or its server), the tokenizer the prompts are rendered with, and the
event loop every point runs in (vLLM's AsyncLLM and HTTP connection pools bind to the loop
they first run in, so one loop serves the whole session). It loads lazily — the first point
checks its workload before anything loads — and it is a context manager::

    with EngineSession(cfg, workdir) as session:
        result_a = run_point(session, cfg_a, dir_a)
        result_b = run_point(session, cfg_b, dir_b)   # same engine, not reloaded

:class:`SessionCache` keeps one session open across the points of a sweep and replaces it
when the next point needs another engine (or the engine died).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Optional, TypeVar

from backends import Backend
from backends.factory import check_backend_available, create_backend
from core.errors import HarnessError, ModelError
from core.model import ModelFiles
from harness.client.event_loops import LoopRunner
from harness.config import RunConfig, engine_key
from harness.run.adapter_store import resolve_adapters
from harness.run.model_store import resolve_model
from workloads.corpus import TokenizedCorpus
from workloads.lora import adapter_specs
from workloads.prompts import PromptRenderer

log = logging.getLogger("harness")
T = TypeVar("T")


class EngineSession:
    def __init__(self, cfg: RunConfig, workdir: Path):
        self.cfg = cfg
        self.key = engine_key(cfg)
        self.workdir = Path(workdir)  # where a server writes server.log
        self.model: Optional[ModelFiles] = None
        self.backend: Optional[Backend] = None
        self.renderer: Optional[PromptRenderer] = None
        self.corpus: Optional[TokenizedCorpus] = None
        self.load_s: Optional[float] = None  # None until loaded; the engine's import included
        self.import_s = 0.0  # the engine's libraries, imported in open() before the tokenizer
        self._load_began: Optional[float] = None  # when a server's launch began (in open())
        self.points_served = 0
        self._loop_runner: Optional[LoopRunner] = None

    # --- lifecycle ------------------------------------------------------------------------

    def open(self) -> EngineSession:
        """Everything short of loading: the engine is installed, the model found, the tokenizer read."""
        if self.backend is not None:
            return self
        check_backend_available(self.cfg.backend)
        self.model = resolve_model(self.cfg.model)
        model = self.model
        # LoRA adapters load with the engine: their files are found (or made) before it starts
        model.adapters = resolve_adapters(adapter_specs(getattr(self.cfg.workload, "lora", None)), model)
        self.backend = _one_line(
            lambda: create_backend(self.cfg.backend, model),
            f"backend {self.cfg.backend.name} cannot use model {model.name} ({model.source})",
        )
        self.backend.run_dir = self.workdir
        backend = self.backend
        try:
            if model.adapters:
                backend.check_adapters(model.adapters)  # an engine without LoRA refuses, before it loads
            t = time.perf_counter()
            _one_line(backend.import_engine, f"backend {self.cfg.backend.name} could not import its engine")
            self.import_s = time.perf_counter() - t
            self.workdir.mkdir(parents=True, exist_ok=True)
            t = time.perf_counter()
            if _one_line(backend.begin_load, f"backend {self.cfg.backend.name} could not start its server"):
                self._load_began = t  # a server: it loads while the tokenizer is read
            tokenizer = _one_line(
                backend.get_tokenizer,
                f"could not read the tokenizer of model {model.name} ({model.source}); the folder needs "
                "tokenizer.json (or tokenizer.model) and tokenizer_config.json",
            )
            self.renderer = PromptRenderer(tokenizer)
            if model.hf_dir is not None:  # never convert a GGUF just for this
                self.renderer.max_context = _context_length(_safe(model.hf_config) or {})
            self.corpus = TokenizedCorpus(tokenizer)
        except BaseException:
            self.close()  # a server already started is stopped
            raise
        return self

    @property
    def loaded(self) -> bool:
        return self.load_s is not None

    def ensure_loaded(self) -> float:
        """Load the engine if it is not loaded yet; the seconds this call spent loading (0 if it was)."""
        if self.loaded:
            return 0.0
        self.open()
        assert self.backend is not None and self.model is not None
        log.info("loading %s on %s", self.model.name, self.cfg.backend.name)
        # timed from the server's launch where it began in open(), else from now
        t = self._load_began if self._load_began is not None else time.perf_counter()
        try:
            self.backend.load()  # in server mode: wait for the server launched in open() to be healthy
        except BaseException as exc:
            self.close()
            if isinstance(exc, Exception) and not isinstance(exc, HarnessError):
                log.debug("load failed", exc_info=True)
                detail = (str(exc).strip().splitlines() or [""])[0][:300]
                raise HarnessError(
                    f"backend {self.cfg.backend.name} could not load {self.model.name}: {type(exc).__name__}: {detail}"
                ) from exc
            raise
        self.load_s = self.import_s + time.perf_counter() - t - self.backend.ready_unused_s
        self._loop_runner = LoopRunner(self.cfg.client.event_loop)
        return self.load_s

    def close(self) -> None:
        """Release the engine (stop its server) and the session's event loop; safe to call twice."""
        backend, self.backend = self.backend, None
        self.load_s = self._load_began = None
        try:
            if backend is not None:
                backend.close()
        except Exception as exc:  # noqa: BLE001 - the results are written; say so and go on
            log.warning("closing the %s backend failed: %s", self.cfg.backend.name, exc)
        finally:
            runner, self._loop_runner = self._loop_runner, None
            if runner is not None:
                runner.close()

    def __enter__(self) -> EngineSession:
        return self.open()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- serving points -------------------------------------------------------------------

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the session's event loop (Ctrl-C cancels it, then raises KeyboardInterrupt)."""
        assert self._loop_runner is not None, "ensure_loaded() first"
        return self._loop_runner.run(coro)

    def engine_process(self) -> Optional[int]:
        """The PID the engine runs in (``Backend.engine_process``); None before open() or after close()."""
        backend = self.backend
        return backend.engine_process() if backend is not None else None

    def fatal_error(self) -> Optional[str]:
        """Why the engine can no longer serve (e.g. its server exited), or None."""
        if self.backend is None:
            return "the engine is closed"
        return _safe(self.backend.fatal_error)

    def scrape_metrics(self) -> Optional[str]:
        """The engine's Prometheus text, or None (no endpoint, or it did not answer)."""
        if self.backend is None:
            return None
        try:
            return self.backend.scrape_metrics()
        except Exception as exc:  # noqa: BLE001 - metrics are extra; the run goes on without them
            log.warning("could not scrape the engine's metrics: %s", exc)
            return None

    def reset_prefix_cache(self) -> Optional[bool]:
        """Empty the engine's prefix cache between points: True done, False not possible, None failed."""
        if self.backend is None or not self.loaded:
            return None
        return self.run(self.reset_prefix_cache_async())

    async def reset_prefix_cache_async(self) -> Optional[bool]:
        """``reset_prefix_cache`` from inside the session's loop (e.g. right after the warm-up)."""
        if self.backend is None or not self.loaded:
            return None
        try:
            return bool(await self.backend.reset_prefix_cache())
        except Exception as exc:  # noqa: BLE001 - the point runs anyway; its summary says the cache was not reset
            log.warning("could not reset the %s prefix cache: %s", self.cfg.backend.name, exc)
            return None

    def engine_memory(self) -> dict[str, Any]:
        """The engine's own memory figures (``Backend.memory``), {} when it has none."""
        return (_safe(self.backend.memory) or {}) if self.backend else {}

    def hf_config(self) -> dict[str, Any]:
        """The model's config.json, {} when there is none."""
        return (_safe(self.model.hf_config) or {}) if self.model else {}

    def describe(self) -> dict[str, Any]:
        """What the summary says about the engine: name, mode, version, and the engine's settings."""
        backend = self.backend
        return {
            "name": self.cfg.backend.name,
            "mode": self.cfg.backend.mode,
            "engine": _safe(lambda: backend.engine_name) if backend else None,
            "engine_version": _safe(lambda: backend.engine_version) if backend else None,
            "info": (_safe(backend.engine_info) or {}) if backend else {},
            **((_safe(backend.numerics) or {}) if backend else {}),  # dtype, quantization
        }


class SessionCache:
    """At most one open session, kept across the points of a sweep while they share its engine."""

    def __init__(self) -> None:
        self.session: Optional[EngineSession] = None

    def get(self, cfg: RunConfig, workdir: Path, reuse: bool = True) -> EngineSession:
        """The open session if it can serve ``cfg`` (same engine, alive, reuse allowed), else a new one."""
        current = self.session
        if current is not None:
            alive = current.backend is None or current.fatal_error() is None  # a server may run before its load
            if reuse and current.key == engine_key(cfg) and alive:
                return current
            log.info(
                "closing the %s engine: the next point needs %s",
                current.cfg.backend.name,
                "a fresh load" if current.key == engine_key(cfg) else "another engine",
            )
            self.close()
        self.session = EngineSession(cfg, workdir)
        return self.session

    def close(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            session.close()


def _context_length(hf_config: dict[str, Any]) -> Optional[int]:
    """The model's context length from its config.json (a multimodal model's text part too)."""
    for cfg in (hf_config, hf_config.get("text_config") or {}):
        value = cfg.get("max_position_embeddings") if isinstance(cfg, dict) else None
        if isinstance(value, int) and value > 0:
            return value
    return None


def _one_line(fn: Callable[[], T], what: str) -> T:
    """``fn()``; an unexpected error becomes one ModelError line saying ``what`` and why."""
    try:
        return fn()
    except HarnessError:
        raise
    except Exception as exc:  # third-party loaders raise anything
        detail = (str(exc).strip().splitlines() or [""])[0][:200]
        raise ModelError(f"{what}: {type(exc).__name__}: {detail}") from exc


def _safe(fn):
    try:
        return fn()
    except Exception:  # noqa: BLE001 - reporting must not mask the run's own error
        return None
