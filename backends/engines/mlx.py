"""MLX through mlx-lm (Apple silicon; also a slow Linux CPU build).

``batching=continuous`` (default) serves requests in flight through mlx-lm's
BatchGenerator (continuous batching: requests join and leave the running batch);
``batching=serial`` runs ``stream_generate`` one request at a time and records mlx-lm's own
per-request prompt_tps / generation_tps / peak memory. Loads an HF folder (bf16 as stored),
or an MLX-quantized copy made once with mlx-lm's convert (``quantize_bits=4|8``).
"""

from __future__ import annotations

import importlib
import json
import os
import queue
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from backends.base import BackendConfig
from backends.registry import backend_registry
from backends.server.presets import mlx_preset
from backends.threaded import Job, ThreadedBackend
from core.errors import ConfigError, ModelError
from core.model import cache_root, hf_dtype
from core.types import RequestDone, SamplingParams, TokenChunk

SUPPRESS = -1e9  # logit bias that keeps end-of-generation tokens from being sampled


@dataclass
class MLXConfig(BackendConfig):
    name: str = "mlx"
    batching: str = "continuous"  # continuous | serial
    max_batch_size: int = 16  # sequences decoded together (continuous)
    prefill_batch_size: int = 8  # continuous: prompts prefilled together (mlx-lm's BatchGenerator)
    prefill_step_size: int = 2048  # prompt tokens per prefill step
    quantize_bits: Optional[int] = None  # 4 or 8: load an MLX-quantized copy (made once, cached)
    quantize_group_size: int = 64  # with quantize_bits: weights per quantization group

    def validate(self) -> None:
        super().validate()
        if self.batching not in ("continuous", "serial"):
            raise ConfigError(f"backend.batching must be continuous or serial (got {self.batching!r})")
        if self.quantize_bits not in (None, 2, 3, 4, 6, 8):
            raise ConfigError(f"backend.quantize_bits must be 2, 3, 4, 6, 8 or null (got {self.quantize_bits})")
        for key in ("max_batch_size", "prefill_batch_size", "prefill_step_size"):
            if getattr(self, key) < 1:
                raise ConfigError(f"backend.{key} must be >= 1 (got {getattr(self, key)})")


def rope_compat(folder: Path) -> dict[str, Any]:
    """transformers 5 writes ``rope_theta`` only inside ``rope_parameters``; mlx-lm reads the
    top-level key and otherwise runs RoPE at base 10,000 (SmolLM2's is 100,000): a different
    model from position 1 on, found by cross-engine agreement (README). Pass the value on."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    rope = config.get("rope_parameters")
    if "rope_theta" not in config and isinstance(rope, dict) and "rope_theta" in rope:
        return {"rope_theta": rope["rope_theta"]}
    return {}


def rope_compat_folder(folder: Path) -> Path:
    """A folder of links to ``folder``'s files whose config.json also has the top-level
    ``rope_theta`` (:func:`rope_compat`), for mlx_lm.server; made once, in the harness cache."""
    import hashlib
    import shutil

    folder = Path(folder).resolve()
    out = cache_root() / "mlx" / f"{folder.name}-{hashlib.sha256(str(folder).encode()).hexdigest()[:12]}-rope"
    if (out / "config.json").exists():
        return out
    partial = out.with_name(out.name + f".partial{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for item in folder.iterdir():
        if item.name != "config.json":
            (partial / item.name).symlink_to(item)
    config = json.loads((folder / "config.json").read_text())
    (partial / "config.json").write_text(json.dumps({**config, **rope_compat(folder)}, indent=2))
    try:
        partial.replace(out)
    except OSError:  # another process made it first
        shutil.rmtree(partial, ignore_errors=True)
    return out


@backend_registry.register("mlx", MLXConfig)
class MLXBackend(ThreadedBackend[MLXConfig]):
    requires = ("mlx", "mlx_lm")
    extra = "mlx"

    def __init__(self, config: MLXConfig, model: Any):
        super().__init__(config, model)
        if model.hf_dir is None:
            raise ModelError(
                f"backend=mlx loads Hugging Face or MLX folders, and {model.source} is a GGUF file: "
                "pass model.path=<HF folder> (or use backend=llamacpp for GGUF)"
            )

    @classmethod
    def server_preset(cls, config: MLXConfig, model: Any):
        """mlx-lm's server (mlx_lm.server) on the same folder."""
        if model.hf_dir is None:
            raise ModelError("backend=mlx loads Hugging Face or MLX folders: pass model.path=<HF folder>")
        if rope_compat(model.hf_dir):  # mlx_lm.server takes no config override: a folder that says it
            import dataclasses

            model = dataclasses.replace(model, hf_dir=rope_compat_folder(model.hf_dir))
        return mlx_preset(config, model)

    def check_workload(self, plan: Any) -> None:
        self.refuse_constraints(plan, "backend=mlx")

    def import_engine(self) -> None:
        import mlx_lm  # noqa: F401 - imported to time the import, as part of the load

    def load(self) -> None:
        import mlx.core as mx
        import mlx_lm

        self._mx = mx
        path = self._quantized_copy() if self.config.quantize_bits else self.model.require_hf_dir()
        self._model, self._tokenizer = mlx_lm.load(str(path), model_config=rope_compat(Path(path)))
        self._eos_ids = sorted(self._tokenizer.eos_token_ids)
        self._suppress_eos = {t: SUPPRESS for t in self._eos_ids}
        self.model_path = Path(path)
        self.start_engine_thread("mlx-engine")

    def _quantized_copy(self) -> Path:
        from mlx_lm import convert

        bits, group = self.config.quantize_bits, self.config.quantize_group_size
        out = cache_root() / "mlx" / f"{self.model.name}-q{bits}g{group}"
        if not (out / "config.json").exists():
            partial = out.with_name(out.name + ".partial")
            import shutil

            shutil.rmtree(partial, ignore_errors=True)
            convert(str(self.model.hf_dir), str(partial), quantize=True, q_bits=bits, q_group_size=group)
            partial.replace(out)
        return out

    @property
    def engine_name(self) -> str:
        return "mlx-lm"

    @property
    def engine_version(self) -> str:
        import importlib.metadata

        return f"{importlib.metadata.version('mlx-lm')} (mlx {importlib.metadata.version('mlx')})"

    def engine_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"batching": self.config.batching, "quantize_bits": self.config.quantize_bits}
        if hasattr(self, "_mx"):
            info["device"] = str(self._mx.default_device())
            info["model_path"] = str(self.model_path)
        return info

    def numerics(self) -> dict[str, Optional[str]]:
        bits = self.config.quantize_bits
        dtype = hf_dtype(self.model.hf_dir)
        if hasattr(self, "_model"):
            from mlx.utils import tree_flatten

            floats = [v.dtype for _, v in tree_flatten(self._model.parameters()) if "float" in str(v.dtype)]
            dtype = str(floats[0]).removeprefix("mlx.core.") if floats else dtype
        return {
            "dtype": dtype,
            "quantization": f"MLX {bits}-bit, group {self.config.quantize_group_size}" if bits else None,
        }

    def memory(self) -> dict[str, Any]:
        if not hasattr(self, "_model"):
            return {}
        from mlx.utils import tree_flatten

        params = [v for _, v in tree_flatten(self._model.parameters())]
        float_params = [v for v in params if "float" in str(v.dtype)]
        return {
            "weights_bytes": int(sum(v.nbytes for v in params)),
            "kv_bytes_per_value": float_params[0].dtype.size if float_params else 2,
            "mlx_peak_memory_bytes": int(self._mx.get_peak_memory()),
        }

    def close(self) -> None:
        self.stop_engine_thread()

    # --- the engine thread ----------------------------------------------------------------

    def _sampler(self, sampling: SamplingParams):
        from mlx_lm.sample_utils import make_sampler

        if sampling.greedy:
            return make_sampler(temp=0.0)
        if sampling.seed is not None:
            self._mx.random.seed(sampling.seed)
        return make_sampler(
            temp=sampling.temperature, top_p=sampling.top_p if sampling.top_p < 1 else 0.0, top_k=sampling.top_k
        )

    def _logits_processors(self, exact: bool) -> list:
        from mlx_lm.sample_utils import make_logits_processors

        return make_logits_processors(logit_bias=self._suppress_eos) if exact else []

    def engine_loop(self) -> None:
        if self.config.batching == "serial":
            self._serial_loop()
        else:
            self._continuous_loop()

    def _serial_loop(self) -> None:
        from mlx_lm import stream_generate

        while (job := self.next_job()) is not None:
            if job.cancelled:
                continue
            request = job.request
            try:
                scheduled_t = time.perf_counter()
                self._mx.reset_peak_memory()
                last = None
                for response in stream_generate(
                    self._model,
                    self._tokenizer,
                    request.prompt_token_ids,
                    max_tokens=request.max_new_tokens,
                    sampler=self._sampler(request.sampling),
                    logits_processors=self._logits_processors(request.exact_output_len),
                ):
                    t = time.perf_counter()
                    last = response
                    if job.cancelled:
                        break
                    if response.finish_reason == "stop" and response.token in self._eos_ids:
                        break  # the end-of-sequence token is not output
                    job.emit(TokenChunk([int(response.token)], t))
                    job.produced += 1
                stats = {}
                if last is not None:
                    stats = {
                        "mlx_prompt_tokens": last.prompt_tokens,
                        "mlx_prompt_tps": last.prompt_tps,
                        "mlx_generation_tokens": last.generation_tokens,
                        "mlx_generation_tps": last.generation_tps,
                        "mlx_peak_memory_gb": last.peak_memory,
                    }
                reason = (last.finish_reason if last is not None else None) or "length"
                job.finish(RequestDone(reason, scheduled_t=scheduled_t, engine_stats=stats))
            except Exception as exc:  # noqa: BLE001 - the error goes to the request's stream
                job.finish(exc)

    def _continuous_loop(self) -> None:
        generate_module = importlib.import_module("mlx_lm.generate")
        cfg = self.config
        generator = generate_module.BatchGenerator(
            self._model,
            stop_tokens=[[t] for t in self._eos_ids],
            completion_batch_size=cfg.max_batch_size,
            prefill_batch_size=cfg.prefill_batch_size,
            prefill_step_size=cfg.prefill_step_size,
        )
        no_stops = generate_module.StopSequences(None)
        eos_stops = generate_module.StopSequences([[t] for t in self._eos_ids])
        snapshot = generate_module.BatchCountersSnapshot
        active: dict[int, tuple[Job, float, Any]] = {}  # uid → (job, inserted at, counters then)
        try:
            while True:
                # Stage 2, scheduler: admit what has arrived; block only when idle.
                arrived: list[Job] = []
                try:
                    while True:
                        job = self.next_job(block=not active and not arrived)
                        if job is None:
                            return
                        arrived.append(job)
                except queue.Empty:
                    pass
                arrived = [j for j in arrived if not j.cancelled]
                if arrived:
                    uids = generator.insert(
                        [j.request.prompt_token_ids for j in arrived],
                        max_tokens=[j.request.max_new_tokens for j in arrived],
                        samplers=[self._sampler(j.request.sampling) for j in arrived],
                        logits_processors=[self._logits_processors(j.request.exact_output_len) for j in arrived],
                        stop_sequences=[no_stops if j.request.exact_output_len else eos_stops for j in arrived],
                    )
                    now, counters = time.perf_counter(), snapshot(**_counters(generator))
                    for uid, job in zip(uids, arrived):
                        active[uid] = (job, now, counters)
                gone = [uid for uid, (job, _, _) in active.items() if job.cancelled]
                if gone:
                    generator.remove(gone)
                    for uid in gone:
                        del active[uid]
                if not active:
                    continue
                # Stages 3 and 4: prefill what joined, then one decode step for the batch.
                responses = generator.next_generated()
                t = time.perf_counter()
                for response in responses:
                    job, inserted_t, start = active.get(response.uid, (None, 0.0, None))
                    if job is None:
                        continue
                    eos = response.finish_reason == "stop" and response.token in self._eos_ids
                    if not eos:
                        job.emit(TokenChunk([int(response.token)], t))
                        job.produced += 1
                    if response.finish_reason is not None:
                        window = generate_module.BatchCountersSnapshot.between(start, snapshot(**_counters(generator)))
                        stats = {
                            "mlx_batch_prompt_tps": window.prompt_tps if hasattr(window, "prompt_tps") else None,
                            "mlx_batch_generation_tps": window.generation_tps,
                            "mlx_peak_memory_gb": window.peak_memory,
                        }
                        job.finish(RequestDone(response.finish_reason, scheduled_t=inserted_t, engine_stats=stats))
                        del active[response.uid]
        finally:  # a failure ends every request taken (ThreadedBackend fails them with it)
            generator.close()


def _counters(generator: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(generator._counters)
