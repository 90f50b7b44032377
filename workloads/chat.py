"""Multi-turn chat workload: sessions that re-send their whole history every turn.

Servers are stateless, so the client keeps the conversation: turn k's prompt is the
(optional, shared) system prompt, every earlier user message and the model's real earlier
replies, then the new user message. Sessions run concurrently; each waits ``think_time_s``
between a reply and its next message.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Optional

from core.errors import ConfigError
from workloads import workload_registry
from workloads.base import (
    WARMUP_OUTPUT_TOKENS,
    SessionSpec,
    TurnSpec,
    Workload,
    WorkloadConfig,
    WorkloadPlan,
    check_length_distribution,
    make_plan,
    require_positive,
    seeded_streams,
    session_count,
)
from workloads.corpus import TokenizedCorpus
from workloads.lengths import sample_lengths
from workloads.prompts import PromptRenderer

INSTRUCTIONS = (
    "Summarize the following passage in two sentences.",
    "What is the main idea of this passage?",
    "Explain this passage to a twelve-year-old.",
    "Which character or idea matters most here, and why?",
    "Continue the following text for a few sentences, in the same style.",
    "List three facts stated in this passage.",
    "Rewrite this passage in plain modern English.",
    "What question would you ask the author after reading this?",
)


@dataclass
class ChatConfig(WorkloadConfig):
    name: str = "chat"
    sessions: int = 4  # conversations in the plan
    turns: int = 3  # user turns per conversation
    user_len: int = 48  # tokens of corpus text in each user message (plus an instruction)
    user_len_dist: str = "fixed"  # fixed | uniform | normal
    user_len_spread: float = 0.0  # uniform: half-width; normal: standard deviation (tokens)
    system_prompt: Optional[str] = None  # shared by every session; null uses the template's default
    system_prompt_len: int = 0  # >0: a shared system prompt of this many corpus tokens
    think_time_s: float = 0.0  # a session's pause before each turn after the first
    exact_output_len: bool = False  # real replies end where the model ends them
    output_len: int = 48

    def validate(self) -> None:
        super().validate()
        require_positive("workload.sessions", self.sessions)
        require_positive("workload.turns", self.turns)
        require_positive("workload.user_len", self.user_len)
        check_length_distribution("workload.user_len", self.user_len_dist, self.user_len_spread)
        if self.system_prompt_len < 0:
            raise ConfigError(f"workload.system_prompt_len must be >= 0 (got {self.system_prompt_len})")
        if self.system_prompt is not None and self.system_prompt_len > 0:
            raise ConfigError("set workload.system_prompt or workload.system_prompt_len, not both")
        if self.think_time_s < 0:
            raise ConfigError(f"workload.think_time_s must be >= 0 (got {self.think_time_s})")


@workload_registry.register("chat", ChatConfig)
class ChatWorkload(Workload):
    config: ChatConfig

    def build(self, renderer: PromptRenderer, corpus: TokenizedCorpus, seed: int) -> WorkloadPlan:
        cfg = self.config
        text_rng, arrival_rng, warm_rng, system_rng = seeded_streams(seed, 4)
        system = cfg.system_prompt
        if cfg.system_prompt_len > 0:
            background = corpus.text(corpus.random_start(system_rng), cfg.system_prompt_len)
            system = "You are a helpful reading assistant. Background text:\n\n" + background

        def sessions(
            rng, n_sessions: int, n_turns: int, first_id: int, max_output: Optional[int] = None
        ) -> Iterator[SessionSpec]:
            for s in range(n_sessions):
                user_lens = sample_lengths(rng, n_turns, cfg.user_len, cfg.user_len_dist, cfg.user_len_spread)
                out_lens = sample_lengths(rng, n_turns, cfg.output_len, cfg.output_len_dist, cfg.output_len_spread)
                if max_output is not None:
                    out_lens = [min(o, max_output) for o in out_lens]
                turns = []
                for t, (n_user, n_out) in enumerate(zip(user_lens, out_lens)):
                    instruction = INSTRUCTIONS[int(rng.integers(len(INSTRUCTIONS)))]
                    passage = corpus.text(corpus.random_start(rng), n_user)
                    turns.append(TurnSpec(f"{instruction}\n\n{passage}", n_out, cfg.think_time_s if t else 0.0))
                yield SessionSpec(first_id + s, turns, system=system)

        count = session_count(cfg, cfg.sessions, arrival_rng)
        warmup = list(sessions(warm_rng, cfg.warmup_requests, 1, -cfg.warmup_requests, WARMUP_OUTPUT_TOKENS))
        # made as make_plan takes them: a long run's plan goes to disk (workloads/session_file.py)
        return make_plan(cfg, sessions(text_rng, count, cfg.turns, 0), warmup, arrival_rng, seed, count=count)
