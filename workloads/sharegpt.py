"""ShareGPT conversations: ``workload=sharegpt workload.path=FILE``.

The file is ShareGPT JSON — a list of ``{"conversations": [{"from": "human"|"gpt", "value": …}]}``
— or the same records as JSON Lines. Conversations are sampled in a seeded order and kept
when they pass the length filters, until ``num_requests`` (single turn) or ``sessions``
(multi-turn) are found, as vllm bench does.

- Single turn: the first human message; the output length is the reference reply's token
  count (``output_len_source=dataset``), or ``output_len`` / ``output_len_dist``.
- Multi-turn: the human messages in order. Each turn re-sends the history with the engine's
  real replies (``history=engine``), or with the dataset's replies (``history=dataset``: every
  prompt is then known in advance). Prompt filters use the history with the dataset's replies.
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
    require_positive,
    seeded_streams,
    session_count,
)
from workloads.corpus import TokenizedCorpus
from workloads.datafiles import (
    OUTPUT_LEN_SOURCES,
    DataConfig,
    check_context,
    corpus_warmup,
    data_file,
    data_plan,
    none_left,
    read_records,
    source_info,
    token_count,
)
from workloads.lengths import sample_lengths
from workloads.prompts import PromptRenderer, chat_messages
from workloads.schedule import load_schedule

HISTORIES = ("engine", "dataset")
USER_ROLES = {"human", "user"}
ASSISTANT_ROLES = {"gpt", "assistant", "chatgpt", "bard", "bing", "model"}
FORMAT_HINT = 'ShareGPT wants a JSON list (or JSON Lines) of {"conversations": [{"from": "human"|"gpt", "value": "…"}]}'


@dataclass
class ShareGPTConfig(DataConfig):
    name: str = "sharegpt"
    num_requests: Optional[int] = 16  # single turn: requests sampled (null: every one that passes)
    multi_turn: bool = False  # replay conversations turn by turn (false: each first human turn alone)
    sessions: Optional[int] = 4  # multi-turn: conversations sampled (null: every one that passes)
    max_turns: Optional[int] = None  # multi-turn: at most this many turns of a conversation
    history: str = "engine"  # multi-turn: re-send the engine's replies, or the dataset's
    output_len_source: str = "dataset"  # dataset: the reference reply's tokens | config: output_len(_dist)
    think_time_s: float = 0.0  # multi-turn: a session's pause before each later turn

    def validate(self) -> None:
        super().validate()
        require_positive("workload.sessions", self.sessions, allow_none=True)
        require_positive("workload.max_turns", self.max_turns, allow_none=True)
        if self.history not in HISTORIES:
            raise ConfigError(f"workload.history must be engine or dataset (got {self.history!r})")
        if self.output_len_source not in OUTPUT_LEN_SOURCES:
            raise ConfigError(f"workload.output_len_source must be dataset or config (got {self.output_len_source!r})")
        if self.think_time_s < 0:
            raise ConfigError(f"workload.think_time_s must be >= 0 (got {self.think_time_s})")


def conversation(record: Any, index: int, path: Path) -> tuple[Optional[str], list[tuple[str, Optional[str]]]]:
    """(system, [(user, reply or None)]) of one record; ConfigError if it is not ShareGPT."""
    messages = record.get("conversations") if isinstance(record, dict) else None
    if not isinstance(messages, list):
        raise ConfigError(f"workload.path={path}: record {index} has no 'conversations' list; {FORMAT_HINT}")
    system: Optional[str] = None
    turns: list[tuple[str, Optional[str]]] = []
    for m in messages:
        if not isinstance(m, dict):
            raise ConfigError(
                f"workload.path={path}: record {index} has a message that is not an object; {FORMAT_HINT}"
            )
        role = str(m.get("from", m.get("role", ""))).lower()
        text = m.get("value", m.get("content"))
        if not isinstance(text, str) or not text.strip():
            continue
        if role == "system" and not turns and system is None:
            system = text
        elif role in USER_ROLES:
            turns.append((text, None))
        elif role in ASSISTANT_ROLES and turns and turns[-1][1] is None:
            turns[-1] = (turns[-1][0], text)
    return system, turns


@workload_registry.register("sharegpt", ShareGPTConfig)
class ShareGPTWorkload(Workload):
    config: ShareGPTConfig

    def build(self, renderer: PromptRenderer, corpus: TokenizedCorpus, seed: int) -> WorkloadPlan:
        cfg = self.config
        order_rng, length_rng, arrival_rng, warm_rng = seeded_streams(seed, 4)
        path = data_file(cfg)
        records = read_records(path, FORMAT_HINT, "workload.path")
        wanted = cfg.sessions if cfg.multi_turn else cfg.num_requests
        if wanted is not None and load_schedule(cfg) is not None:  # a time-shaped load: as many as it needs
            wanted = session_count(cfg, wanted, arrival_rng)
        sessions: list[SessionSpec] = []
        considered = without_user = 0
        for index in order_rng.permutation(len(records)):
            if wanted is not None and len(sessions) >= wanted:
                break
            considered += 1
            system, turns = conversation(records[int(index)], int(index), path)
            without_user += not turns
            record_id = str(records[int(index)].get("id", index))
            session = self._session(
                renderer, length_rng, len(sessions), record_id, system, turns if cfg.multi_turn else turns[:1], path
            )
            if session is not None:
                sessions.append(session)
        if not sessions:
            if without_user == considered:
                raise ConfigError(
                    f"workload.path={path}: none of its {considered} conversations has a user message "
                    f"with text; {FORMAT_HINT}"
                )
            raise none_left(cfg, path, considered, f" ({without_user} without a user message)" if without_user else "")
        warmup = corpus_warmup(
            renderer, corpus, warm_rng, cfg.warmup_requests, min(cfg.output_len, WARMUP_OUTPUT_TOKENS)
        )
        fmt = "sharegpt-" + ("multi-turn" if cfg.multi_turn else "single-turn")
        return data_plan(cfg, sessions, warmup, arrival_rng, seed, source_info(cfg, path, fmt, len(records)))

    def _session(
        self,
        renderer: PromptRenderer,
        rng,
        session_id: int,
        record_id: str,
        system: Optional[str],
        turns: list[tuple[str, Optional[str]]],
        path: Path,
    ) -> Optional[SessionSpec]:
        """The conversation's turns that pass the filters (it is cut at the first that does not);
        None when not even its first turn does. A kept turn longer than the context is an error."""
        cfg = self.config
        needs_reply = cfg.output_len_source == "dataset" or (cfg.multi_turn and cfg.history == "dataset")
        history: list[dict[str, str]] = []
        kept: list[TurnSpec] = []
        for t, (user, reply) in enumerate(turns[: cfg.max_turns]):
            if reply is None and needs_reply:
                break
            history.append({"role": "user", "content": user})
            ids = renderer.render(chat_messages(system, history))
            if cfg.output_len_source == "dataset":
                n_out = max(1, token_count(renderer, reply or ""))
            else:
                n_out = sample_lengths(rng, 1, cfg.output_len, cfg.output_len_dist, cfg.output_len_spread)[0]
            if not cfg.keeps(len(ids), n_out):
                break
            prompt_id = record_id + (f"#{t}" if cfg.multi_turn else "")
            # with the engine's replies, later prompts are known only at run time: ids is an estimate
            check_context(cfg, renderer, prompt_id, len(ids), n_out, path)
            known = t == 0 or cfg.history == "dataset"
            kept.append(
                TurnSpec(
                    user,
                    n_out,
                    cfg.think_time_s if t else 0.0,
                    prompt_token_ids=ids if known else None,
                    reply=reply if cfg.multi_turn and cfg.history == "dataset" else None,
                    prompt_id=prompt_id,
                )
            )
            history.append({"role": "assistant", "content": reply or ""})
        return SessionSpec(session_id, kept, system=system) if kept else None
