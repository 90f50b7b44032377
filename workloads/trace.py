"""Trace replay: ``workload=trace workload.path=FILE workload.format=mooncake|burstgpt``.

- Mooncake (JSON Lines): ``{"timestamp": ms, "input_length": n, "output_length": m,
  "hash_ids": [...]}``. Each hash id stands for a block of ``block_size`` tokens, and the same
  id is the same tokens in every request, so the trace's prefix sharing is the prompts'
  prefix sharing. A block is a marker naming its id (which keeps two ids' blocks apart) and
  corpus tokens chosen by the seed and the id. The prompt is the chat template around the
  blocks, cut to ``input_length`` tokens in all.
- BurstGPT (CSV): ``Timestamp`` (s), ``Request tokens``, ``Response tokens`` (and ``Model``,
  ``Log Type``…); every prompt is its own (no sharing).

Requests arrive at the trace's timestamps (from the first), times ``time_scale``: an open
loop, in the trace's order; ``num_requests`` takes the first N that pass the filters. The
plan's theoretical prefix-cache hit rate (workloads/shared_prefix.py) goes beside the engine's
measured share in the summary.
"""

from __future__ import annotations

import csv
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

from core.errors import ConfigError
from workloads import workload_registry
from workloads.base import WARMUP_OUTPUT_TOKENS, SessionSpec, TurnSpec, Workload, WorkloadPlan, seeded_streams
from workloads.corpus import TokenizedCorpus
from workloads.datafiles import (
    DataConfig,
    check_context,
    corpus_warmup,
    data_file,
    data_plan,
    none_left,
    positive_int,
    read_records,
    source_info,
    timestamps_to_arrivals,
)
from workloads.prompts import PromptRenderer, user_only
from workloads.shared_prefix import theoretical_hit_rate

FORMATS = ("mooncake", "burstgpt")
MOONCAKE_HINT = (
    'a Mooncake trace is JSON Lines of {"timestamp": ms, "input_length": n, "output_length": m, "hash_ids": [...]}'
)
BURSTGPT_HINT = "a BurstGPT trace is CSV with the columns Timestamp, Request tokens, Response tokens"
MIN_BLOCK = 8


@dataclass
class TraceConfig(DataConfig):
    name: str = "trace"
    format: str = "mooncake"  # mooncake (JSON Lines with hash_ids) | burstgpt (CSV)
    block_size: int = 512  # tokens per hash id (Mooncake)
    time_scale: float = 1.0  # multiplies the trace's gaps (0.1: ten times faster)
    exact_output_len: bool = True

    def validate(self) -> None:
        super().validate()
        if self.format not in FORMATS:
            raise ConfigError(f"workload.format must be one of {', '.join(FORMATS)} (got {self.format!r})")
        if self.block_size < MIN_BLOCK:
            raise ConfigError(f"workload.block_size must be >= {MIN_BLOCK} tokens (got {self.block_size})")
        if not self.time_scale > 0:
            raise ConfigError(f"workload.time_scale must be > 0 (got {self.time_scale})")
        if self.rate is not None:
            raise ConfigError(
                "workload=trace arrives at the trace's timestamps: drop workload.rate "
                "(workload.time_scale speeds it up or slows it down)"
            )


@dataclass
class TraceRequest:
    line: int
    timestamp_s: float
    input_len: int
    output_len: int
    hash_ids: Optional[list[Any]]


def read_mooncake(path: Path) -> list[TraceRequest]:
    out = []
    for n, r in enumerate(read_records(path, MOONCAKE_HINT, "workload.path"), 1):
        ok = (
            isinstance(r, dict) and isinstance(r.get("timestamp"), (int, float)) and isinstance(r.get("hash_ids"), list)
        )
        n_in, n_out = (
            (positive_int(r.get("input_length")), positive_int(r.get("output_length"))) if ok else (None, None)
        )
        if n_in is None or n_out is None:
            raise ConfigError(
                f"workload.path={path}: line {n} is not a Mooncake record; {MOONCAKE_HINT} (or set workload.format)"
            )
        out.append(TraceRequest(n, r["timestamp"] / 1000.0, n_in, n_out, r["hash_ids"]))
    return out


def read_burstgpt(path: Path) -> list[TraceRequest]:
    with path.open(newline="", encoding="utf-8") as f:
        rows = csv.DictReader(f)
        columns = set(rows.fieldnames or ())
        if not {"Timestamp", "Request tokens", "Response tokens"} <= columns:
            raise ConfigError(
                f"workload.path={path}: not a BurstGPT CSV (columns: {', '.join(sorted(columns))[:120]}); "
                f"{BURSTGPT_HINT} (or set workload.format)"
            )
        out = []
        for n, row in enumerate(rows, 2):
            try:
                stamp = float(row["Timestamp"])
            except (TypeError, ValueError):
                stamp = None
            n_in, n_out = positive_int(_number(row["Request tokens"])), positive_int(_number(row["Response tokens"]))
            if stamp is None or n_in is None or n_out is None:
                raise ConfigError(
                    f"workload.path={path}: line {n} has no numeric Timestamp, Request tokens or "
                    f"Response tokens; {BURSTGPT_HINT}"
                )
            out.append(TraceRequest(n, stamp, n_in, n_out, None))
    if not out:
        raise ConfigError(f"workload.path={path}: the file holds no records; {BURSTGPT_HINT}")
    return out


def _number(text: Any) -> Any:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


class BlockTokens:
    """The tokens of each hash id: a marker with the id, then corpus tokens from a start that the
    seed and the id choose. The same id gives the same block in every request."""

    def __init__(self, renderer: PromptRenderer, corpus: TokenizedCorpus, block_size: int, seed: int):
        self.renderer, self.corpus, self.block_size, self.seed = renderer, corpus, block_size, seed
        self._blocks: dict[str, list[int]] = {}

    def encode(self, text: str) -> list[int]:
        return list(self.renderer.tokenizer(text, add_special_tokens=False)["input_ids"])

    def block(self, key: str) -> list[int]:
        if key not in self._blocks:
            rng = np.random.default_rng([self.seed, zlib.crc32(key.encode())])
            marker = self.encode(f" [{key}] ")[: self.block_size]
            start = self.corpus.random_start(rng)
            n = self.block_size - len(marker)
            ids = self.corpus.ids
            self._blocks[key] = marker + [ids[(start + k) % len(ids)] for k in range(n)]
        return self._blocks[key]

    def body(self, keys: list[str], n_tokens: int) -> list[int]:
        """n_tokens from the blocks in order; past the last block, blocks of this request alone."""
        out: list[int] = []
        extra = 0
        while len(out) < n_tokens:
            key = keys[len(out) // self.block_size] if len(out) // self.block_size < len(keys) else None
            if key is None:
                key = f"{'/'.join(keys) or 'req'}+{extra}"
                extra += 1
            out.extend(self.block(key))
        return out[:n_tokens]


@workload_registry.register("trace", TraceConfig)
class TraceWorkload(Workload):
    config: TraceConfig

    def build(self, renderer: PromptRenderer, corpus: TokenizedCorpus, seed: int) -> WorkloadPlan:
        cfg = self.config
        arrival_rng, warm_rng = seeded_streams(seed, 2)
        path = data_file(cfg)
        requests = read_mooncake(path) if cfg.format == "mooncake" else read_burstgpt(path)
        blocks = BlockTokens(renderer, corpus, cfg.block_size, seed)
        overhead = renderer.overhead(user_only)
        sessions: list[SessionSpec] = []
        stamps: list[float] = []
        considered = 0
        for req in requests:
            if cfg.num_requests is not None and len(sessions) >= cfg.num_requests:
                break
            considered += 1
            if not cfg.keeps(req.input_len, req.output_len):
                continue
            check_context(cfg, renderer, f"line {req.line}", req.input_len, req.output_len, path)
            # BurstGPT shares nothing: its one key per request makes its blocks its own
            keys = [str(h) for h in req.hash_ids] if req.hash_ids is not None else [f"burst{req.line}"]
            body = blocks.body(keys, max(1, req.input_len - overhead))
            ids = renderer.wrap_ids(body, user_only)
            sessions.append(
                SessionSpec(
                    len(sessions),
                    [TurnSpec(renderer.decode(body), req.output_len, prompt_token_ids=ids, prompt_id=str(req.line))],
                )
            )
            stamps.append(req.timestamp_s)
        if not sessions:
            raise none_left(cfg, path, considered)
        warmup = corpus_warmup(
            renderer, corpus, warm_rng, cfg.warmup_requests, min(cfg.output_len, WARMUP_OUTPUT_TOKENS)
        )
        source = source_info(cfg, path, cfg.format, len(requests))
        plan = data_plan(
            cfg, sessions, warmup, arrival_rng, seed, source, timestamps_to_arrivals(stamps, cfg.time_scale)
        )
        # what the trace's sharing would give an unbounded cache, beside the engine's measured share
        plan.info = {
            "theoretical_cache_hit": round(
                theoretical_hit_rate([first for s in sessions if (first := s.turns[0].prompt_token_ids) is not None]), 4
            )
        }
        return plan
