"""What the workloads made from data files share: the file (or a hub dataset's file), its
sha256, reading JSON / JSONL, length filters, the context check and a warm-up that leaves the
data's prefixes out of the engine's cache.

Every bad input is one ConfigError line naming the file and what to do.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

from core.errors import ConfigError
from workloads.base import SessionSpec, TurnSpec, WorkloadConfig, WorkloadPlan, make_plan, require_positive
from workloads.corpus import TokenizedCorpus
from workloads.prompts import PromptRenderer, user_only

OUTPUT_LEN_SOURCES = ("dataset", "config")
WARMUP_PROMPT_TOKENS = 32


@dataclass
class DataConfig(WorkloadConfig):
    """Fields of every workload read from a file."""

    path: Optional[str] = None  # the data file
    # instead of path: a file of a Hugging Face hub dataset, "owner/name:file/in/repo" (downloaded
    # once into the hub cache; needs network the first time)
    hf_dataset: Optional[str] = None
    hf_revision: Optional[str] = None  # with hf_dataset: the hub revision (branch, tag or commit)
    num_requests: Optional[int] = None  # null: every request that passes the filters
    # filters, in tokens: the rendered prompt (chat template included) and the output length
    min_prompt_len: int = 1
    max_prompt_len: Optional[int] = None  # drop longer prompts (tokens); null: no limit
    min_output_len: int = 1  # drop records whose output length is shorter
    max_output_len: Optional[int] = None  # drop records whose output length is longer; null: no limit
    max_context: Optional[int] = None  # null: the model's own (config.json max_position_embeddings)

    def validate(self) -> None:
        super().validate()
        if (self.path is None) == (self.hf_dataset is None):
            raise ConfigError(
                f"workload={self.name} needs its data: set workload.path=FILE (or workload.hf_dataset=owner/name:file)"
            )
        if self.path is not None:
            data_file(self)  # a missing file is named before any engine is imported
        require_positive("workload.num_requests", self.num_requests, allow_none=True)
        require_positive("workload.min_prompt_len", self.min_prompt_len)
        require_positive("workload.min_output_len", self.min_output_len)
        require_positive("workload.max_prompt_len", self.max_prompt_len, allow_none=True)
        require_positive("workload.max_output_len", self.max_output_len, allow_none=True)
        require_positive("workload.max_context", self.max_context, allow_none=True)

    def keeps(self, prompt_len: int, output_len: int) -> bool:
        """Whether a request passes the length filters."""
        return (
            self.min_prompt_len <= prompt_len
            and (self.max_prompt_len is None or prompt_len <= self.max_prompt_len)
            and self.min_output_len <= output_len
            and (self.max_output_len is None or output_len <= self.max_output_len)
        )

    def filters_text(self) -> str:
        return (
            f"prompt {self.min_prompt_len}–{self.max_prompt_len or '∞'} tokens, "
            f"output {self.min_output_len}–{self.max_output_len or '∞'} tokens"
        )


def data_file(cfg: DataConfig) -> Path:
    """The data file: workload.path, or the hub dataset's file fetched into the hub cache."""
    if cfg.hf_dataset is not None:
        return hub_file(cfg.hf_dataset, cfg.hf_revision)
    path = Path(str(cfg.path)).expanduser()
    if not path.is_file():
        what = "a folder, not a file" if path.is_dir() else "no such file"
        raise ConfigError(f"workload.path={cfg.path}: {what} (give the path of a {cfg.name} data file)")
    return path


def hub_file(spec: str, revision: Optional[str] = None) -> Path:
    """``owner/name:file`` of a Hugging Face hub dataset, through the hub's cache (HF_HUB_OFFLINE=1
    reads only the cache)."""
    repo, sep, filename = spec.partition(":")
    if not sep or repo.count("/") != 1 or not filename:
        raise ConfigError(
            f"workload.hf_dataset={spec!r} must be owner/name:file, e.g. "
            "anon8231489123/ShareGPT_Vicuna_unfiltered:ShareGPT_V3_unfiltered_cleaned_split.json"
        )
    try:
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(repo_id=repo, filename=filename, repo_type="dataset", revision=revision))
    except ImportError:
        raise ConfigError("workload.hf_dataset needs huggingface_hub: pip install huggingface_hub") from None
    except Exception as exc:  # noqa: BLE001 - offline, not found, no access: one line either way
        detail = (str(exc).strip().splitlines() or [""])[0][:200]
        raise ConfigError(
            f"workload.hf_dataset={spec}: could not get the file ({type(exc).__name__}: {detail}); "
            "download it and pass workload.path=FILE instead"
        ) from None


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def source_info(cfg: DataConfig, path: Path, fmt: str, records: int) -> dict[str, Any]:
    """What the plan (and the summary) say about the data: enough to find and check it again."""
    return {
        "path": str(cfg.hf_dataset or path),
        "format": fmt,
        "sha256": file_sha256(path),
        "records": records,
        "bytes": path.stat().st_size,
    }


def read_records(path: Path, what: str, label: str) -> list[Any]:
    """A JSON list, or JSON Lines (one value a line; blank lines skipped)."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{label}={path}: not UTF-8 text; {what}") from None
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            records = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{label}={path}: not valid JSON (line {exc.lineno}: {exc.msg}); {what}") from None
    else:
        records = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"{label}={path}: line {n} is not JSON ({exc.msg}); {what}") from None
    if not records:
        raise ConfigError(f"{label}={path}: the file holds no records; {what}")
    return records


def none_left(cfg: DataConfig, path: Path, considered: int, why: str = "") -> ConfigError:
    return ConfigError(
        f"workload.path={path}: no request left after the filters ({cfg.filters_text()}) "
        f"of {considered} records{why}; widen workload.min_/max_prompt_len and min_/max_output_len"
    )


def context_limit(cfg: DataConfig, renderer: PromptRenderer) -> Optional[int]:
    return cfg.max_context or renderer.max_context


def check_context(
    cfg: DataConfig, renderer: PromptRenderer, prompt_id: Optional[str], prompt_len: int, output_len: int, path: Path
) -> None:
    """One line when a request needs more than the model's context."""
    limit = context_limit(cfg, renderer)
    if limit is not None and prompt_len + output_len > limit:
        raise ConfigError(
            f"workload.path={path}: prompt {prompt_id} needs {prompt_len} prompt + {output_len} output tokens, "
            f"more than the model's context of {limit}; drop such prompts with workload.max_prompt_len="
            f"{max(1, limit - output_len)} (or workload.max_output_len)"
        )


def take(order: Iterator[int], n: Optional[int]) -> Iterator[int]:
    """The first n of an order (all of it for None)."""
    for k, i in enumerate(order):
        if n is not None and k >= n:
            return
        yield i


def token_count(renderer: PromptRenderer, text: str) -> int:
    return len(renderer.tokenizer(text, add_special_tokens=False)["input_ids"])


def corpus_warmup(
    renderer: PromptRenderer, corpus: TokenizedCorpus, rng: np.random.Generator, n: int, output_len: int
) -> list[SessionSpec]:
    """Warm-up requests of corpus text: they warm the engine without putting the data's
    prefixes into its cache before the measured phase."""
    overhead = renderer.overhead(user_only)
    prompts = renderer.fit_texts(corpus, rng, [overhead + WARMUP_PROMPT_TOKENS] * n, user_only, overhead=overhead)
    return [
        SessionSpec(-n + i, [TurnSpec(text, output_len, prompt_token_ids=ids, prompt_id="warmup")])
        for i, (text, ids) in enumerate(prompts)
    ]


def data_plan(
    cfg: WorkloadConfig,
    sessions: list[SessionSpec],
    warmup: list[SessionSpec],
    arrival_rng: np.random.Generator,
    seed: int,
    source: dict[str, Any],
    arrivals: Optional[list[float]] = None,
) -> WorkloadPlan:
    """make_plan, with the data's source; ``arrivals`` (seconds from the first) make it an open
    loop that follows the data's own timestamps: then ``workload.duration_s`` keeps the
    requests that arrive before it, and stages or a ramp are refused (the data sets the times)."""
    if arrivals is not None and (getattr(cfg, "stages", None) is not None or getattr(cfg, "ramp", None) is not None):
        raise ConfigError(
            f"workload={cfg.name} arrives at its data's timestamps: drop workload.stages and "
            "workload.ramp (workload.duration_s keeps the requests that arrive before it)"
        )
    duration_s = getattr(cfg, "duration_s", None)
    if arrivals is not None and duration_s is not None:
        kept = [i for i, t in enumerate(arrivals) if t < duration_s]
        sessions[:] = [sessions[i] for i in kept]
        arrivals = [arrivals[i] for i in kept]
    plan = make_plan(cfg, sessions, warmup, arrival_rng, seed, use_schedule=arrivals is None)
    plan.source = source
    if arrivals is not None:
        for session, t in zip(sessions, arrivals):
            session.arrival_s = round(t, 6)
        plan.open_loop = True
    return plan


def timestamps_to_arrivals(stamps: list[float], scale: float) -> list[float]:
    """Seconds from the first request, times ``scale`` (in the data's order; the first is 0)."""
    t0 = min(stamps)
    return [(t - t0) * scale for t in stamps]


def positive_int(value: Any) -> Optional[int]:
    """A whole number ≥ 0 from a data field, or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)) and value == value and value >= 0 and float(value).is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None
