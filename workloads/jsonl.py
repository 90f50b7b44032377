"""One request per line: ``workload=jsonl workload.path=FILE``.

Each line is ``{"prompt": "…"}`` or ``{"messages": [{"role": …, "content": …}, …]}`` (the last
message is the user's), with an optional ``"output_len"`` (else ``workload.output_len`` and
its distribution) and an optional ``"timestamp"`` in seconds. When the lines have timestamps
the run is an open loop whose requests arrive at them (times ``workload.time_scale``);
without, it runs at ``workload.concurrency`` or ``workload.rate`` like any workload. Requests
are taken in file order (``num_requests``: the first N that pass the filters).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from core.errors import ConfigError
from workloads import workload_registry
from workloads.base import (
    WARMUP_OUTPUT_TOKENS,
    SessionSpec,
    TurnSpec,
    Workload,
    WorkloadPlan,
    seeded_streams,
    session_count,
)
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
from workloads.lengths import sample_lengths
from workloads.prompts import PromptRenderer, chat_messages
from workloads.schedule import load_schedule

FORMAT_HINT = (
    'JSONL wants one object a line: {"prompt": "…"} or {"messages": [...]}, with "output_len" and "timestamp" optional'
)
ROLES = ("system", "user", "assistant")


@dataclass
class JsonlConfig(DataConfig):
    name: str = "jsonl"
    use_timestamps: bool = True  # lines with "timestamp": an open loop at those times
    time_scale: float = 1.0  # multiplies the gaps between timestamps (0.5: twice as fast)

    def validate(self) -> None:
        super().validate()
        if not self.time_scale > 0:
            raise ConfigError(f"workload.time_scale must be > 0 (got {self.time_scale})")


def parse_line(record: Any, n: int, path: Path) -> tuple[Optional[str], list[dict[str, str]], str, Any, Any]:
    """(system, earlier messages, user message, output_len, timestamp) of one line."""
    if not isinstance(record, dict) or ("prompt" in record) == ("messages" in record):
        raise ConfigError(
            f"workload.path={path}: record {n} needs exactly one of 'prompt' or 'messages'; {FORMAT_HINT}"
        )
    if "prompt" in record:
        if not isinstance(record["prompt"], str):
            raise ConfigError(f"workload.path={path}: record {n}: 'prompt' must be a string; {FORMAT_HINT}")
        return None, [], record["prompt"], record.get("output_len"), record.get("timestamp")
    messages = record["messages"]
    ok = (
        isinstance(messages, list)
        and messages
        and all(isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str) for m in messages)
    )
    if not ok or messages[-1]["role"] != "user":
        raise ConfigError(
            f"workload.path={path}: record {n}: 'messages' must be a list of {{role, content}} "
            f"(roles {', '.join(ROLES)}) ending with the user's; {FORMAT_HINT}"
        )
    system = messages[0]["content"] if messages[0]["role"] == "system" else None
    earlier = [dict(role=m["role"], content=m["content"]) for m in messages[1 if system is not None else 0 : -1]]
    return system, earlier, messages[-1]["content"], record.get("output_len"), record.get("timestamp")


@workload_registry.register("jsonl", JsonlConfig)
class JsonlWorkload(Workload):
    config: JsonlConfig

    def build(self, renderer: PromptRenderer, corpus: TokenizedCorpus, seed: int) -> WorkloadPlan:
        cfg = self.config
        length_rng, arrival_rng, warm_rng = seeded_streams(seed, 3)
        path = data_file(cfg)
        records = read_records(path, FORMAT_HINT, "workload.path")
        parsed = [parse_line(r, n, path) for n, r in enumerate(records, 1)]
        timed = cfg.use_timestamps and any(p[4] is not None for p in parsed)
        if timed and cfg.rate is not None:
            raise ConfigError(
                f"workload.path={path} has timestamps, which set the arrivals: drop workload.rate "
                "(or set workload.use_timestamps=false)"
            )
        sessions: list[SessionSpec] = []
        stamps: list[float] = []
        considered = 0
        wanted = cfg.num_requests
        if (
            wanted is not None and not timed and load_schedule(cfg) is not None
        ):  # a time-shaped load: as many as it needs
            wanted = session_count(cfg, wanted, arrival_rng)
        for n, (system, earlier, user, out_len, stamp) in enumerate(parsed, 1):
            if wanted is not None and len(sessions) >= wanted:
                break
            considered += 1
            n_out: Optional[int]
            if out_len is None:
                n_out = sample_lengths(length_rng, 1, cfg.output_len, cfg.output_len_dist, cfg.output_len_spread)[0]
            else:
                n_out = positive_int(out_len)
                if not n_out:
                    raise ConfigError(
                        f"workload.path={path}: record {n}: output_len must be a whole number >= 1 (got {out_len!r})"
                    )
            if timed:
                if not isinstance(stamp, (int, float)) or isinstance(stamp, bool) or stamp != stamp:
                    raise ConfigError(
                        f"workload.path={path}: record {n} has no numeric 'timestamp' while others do; "
                        "give every line one, or set workload.use_timestamps=false"
                    )
            messages = chat_messages(system, earlier + [{"role": "user", "content": user}])
            ids = renderer.render(messages)
            if not cfg.keeps(len(ids), n_out):
                continue
            check_context(cfg, renderer, f"line {n}", len(ids), n_out, path)
            sessions.append(
                SessionSpec(
                    len(sessions),
                    [TurnSpec(user, n_out, prompt_token_ids=ids, prompt_id=str(n))],
                    system=system,
                    history=earlier or None,
                )
            )
            if timed:
                stamps.append(float(stamp))
        if not sessions:
            raise none_left(cfg, path, considered)
        warmup = corpus_warmup(
            renderer, corpus, warm_rng, cfg.warmup_requests, min(cfg.output_len, WARMUP_OUTPUT_TOKENS)
        )
        arrivals = timestamps_to_arrivals(stamps, cfg.time_scale) if timed else None
        return data_plan(
            cfg, sessions, warmup, arrival_rng, seed, source_info(cfg, path, "jsonl", len(records)), arrivals
        )
