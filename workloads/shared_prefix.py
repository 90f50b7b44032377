"""Groups of prompts that share a system prompt: ``workload=shared_prefix``.

As SGLang's generated-shared-prefix: ``num_groups`` groups × ``prompts_per_group`` prompts;
each group has its own system prompt of ``system_prompt_len`` corpus tokens, and each prompt
its own question of ``question_len`` tokens. The requests are sent in a seeded shuffled
order. With ``turns`` > 1 each prompt is a conversation: more questions, re-sending the
history each turn.

``target_cache_hit`` (0 to 1, single turn) keeps the prompt's length (system + question) and
splits it so the theoretical prefix-cache hit rate equals the target. The theoretical rate
is what an unbounded cache of every earlier prompt would serve: Σ over requests, in order, of
the longest prefix shared with any earlier prompt, over Σ prompt tokens — counted on the
rendered token ids, so the chat template's own shared tokens count too (they set a floor a
little above 0). The summary shows the target, the theoretical and the engine's measured rate.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import numpy as np

from core.errors import ConfigError
from core.sequences import common_prefix
from workloads import workload_registry
from workloads.base import (
    WARMUP_OUTPUT_TOKENS,
    SessionSpec,
    TurnSpec,
    Workload,
    WorkloadConfig,
    WorkloadPlan,
    make_plan,
    require_positive,
    seeded_streams,
)
from workloads.corpus import TokenizedCorpus
from workloads.datafiles import corpus_warmup
from workloads.prompts import PromptRenderer, chat_messages

TARGET_ITERATIONS = 6


@dataclass
class SharedPrefixConfig(WorkloadConfig):
    name: str = "shared_prefix"
    num_groups: int = 4  # groups of prompts, each sharing one system prompt
    prompts_per_group: int = 4  # prompts in each group
    system_prompt_len: int = 256  # corpus tokens of each group's shared system prompt
    question_len: int = 32  # corpus tokens of each prompt's own question
    turns: int = 1  # >1: each prompt is a conversation of this many questions
    think_time_s: float = 0.0  # turns > 1: a conversation's pause before each later turn
    target_cache_hit: Optional[float] = None  # 0..1: split system/question to reach this theoretical rate
    output_len: int = 32

    def validate(self) -> None:
        super().validate()
        for key in ("num_groups", "prompts_per_group", "question_len", "turns"):
            require_positive(f"workload.{key}", getattr(self, key))
        if self.system_prompt_len < 0:
            raise ConfigError(f"workload.system_prompt_len must be >= 0 (got {self.system_prompt_len})")
        if self.think_time_s < 0:
            raise ConfigError(f"workload.think_time_s must be >= 0 (got {self.think_time_s})")
        if self.target_cache_hit is not None:
            if not 0 <= self.target_cache_hit <= 1:
                raise ConfigError(f"workload.target_cache_hit must be in [0, 1] (got {self.target_cache_hit})")
            if self.turns != 1:
                raise ConfigError(
                    "workload.target_cache_hit needs workload.turns=1 (later turns' prompts hold the "
                    "engine's replies, unknown in advance)"
                )


def theoretical_hit_rate(prompts: Sequence[Sequence[int]]) -> float:
    """Σ longest prefix shared with any earlier prompt / Σ prompt tokens, in order (an
    unbounded cache at token granularity). The longest shared prefix with a set of sequences
    is the one with a neighbour in sorted order, so this is O(n log n) comparisons."""
    seen: list[tuple[int, ...]] = []
    hit = total = 0
    for p in prompts:
        key = tuple(p)
        i = bisect.bisect_left(seen, key)
        best = max((common_prefix(key, seen[j]) for j in (i - 1, i) if 0 <= j < len(seen)), default=0)
        hit += best
        total += len(key)
        seen.insert(i, key)
    return hit / total if total else 0.0


@workload_registry.register("shared_prefix", SharedPrefixConfig)
class SharedPrefixWorkload(Workload):
    config: SharedPrefixConfig

    def build(self, renderer: PromptRenderer, corpus: TokenizedCorpus, seed: int) -> WorkloadPlan:
        cfg = self.config
        text_rng, order_rng, arrival_rng, warm_rng = seeded_streams(seed, 4)
        starts = _Starts(corpus, text_rng, cfg)
        order = order_rng.permutation(cfg.num_groups * cfg.prompts_per_group)
        info: dict = {}
        system_len, question_len = cfg.system_prompt_len, cfg.question_len
        if cfg.target_cache_hit is not None:
            system_len, question_len, rate = self._fit_target(renderer, corpus, starts, order)
            info = {
                "target_cache_hit": cfg.target_cache_hit,
                "theoretical_cache_hit": round(rate, 4),
                "system_prompt_len": system_len,
                "question_len": question_len,
            }
        sessions = self._sessions(corpus, starts, order, system_len, question_len)
        for s in sessions:  # first turns are known in advance; later ones hold the engine's replies
            s.turns[0].prompt_token_ids = renderer.render(_messages(s.system, [s.turns[0].user]))
        if cfg.turns == 1 and "theoretical_cache_hit" not in info:
            info["theoretical_cache_hit"] = round(
                theoretical_hit_rate([first for s in sessions if (first := s.turns[0].prompt_token_ids) is not None]), 4
            )
        warmup = corpus_warmup(
            renderer, corpus, warm_rng, cfg.warmup_requests, min(cfg.output_len, WARMUP_OUTPUT_TOKENS)
        )
        plan = make_plan(cfg, sessions, warmup, arrival_rng, seed)
        plan.info = info
        return plan

    def _sessions(
        self, corpus: TokenizedCorpus, starts: _Starts, order: np.ndarray, system_len: int, question_len: int
    ) -> list[SessionSpec]:
        cfg = self.config
        made = []
        for session_id, k in enumerate(order):
            group, member = divmod(int(k), cfg.prompts_per_group)
            system = corpus.text(starts.system[group], system_len) if system_len > 0 else ""
            turns = [
                TurnSpec(
                    corpus.text(starts.question[group][member][t], question_len),
                    cfg.output_len,
                    cfg.think_time_s if t else 0.0,
                    prompt_id=f"g{group}p{member}" + (f"#{t}" if cfg.turns > 1 else ""),
                )
                for t in range(cfg.turns)
            ]
            made.append(SessionSpec(session_id, turns, system=system))
        return made

    def _fit_target(
        self, renderer: PromptRenderer, corpus: TokenizedCorpus, starts: _Starts, order: np.ndarray
    ) -> tuple[int, int, float]:
        """(system_len, question_len, theoretical rate) with system + question = the configured
        total and the rate as near the target as whole tokens allow."""
        cfg = self.config
        total = cfg.system_prompt_len + cfg.question_len
        target = float(cfg.target_cache_hit or 0.0)
        p = cfg.prompts_per_group

        def rate(system_len: int) -> float:
            sessions = self._sessions(corpus, starts, order, system_len, total - system_len)
            return theoretical_hit_rate([renderer.render(_messages(s.system, [s.turns[0].user])) for s in sessions])

        top = rate(total - 1)
        if target > top + 0.005:
            raise ConfigError(
                f"workload.target_cache_hit={target} is out of reach: with {p} prompts per group the "
                f"highest is {top:.3f}; raise workload.prompts_per_group (or the prompt length)"
            )
        # the rate grows by about (p-1)/p per shared token over the prompt's length: step toward it
        overhead = len(renderer.render(_messages("x", ["x"]))) - 2
        lo, hi = 0, total - 1
        best = (abs(top - target), total - 1, top)
        guess = int(round(target * p / max(p - 1, 1) * (total + overhead))) - overhead
        for _ in range(TARGET_ITERATIONS):
            guess = min(hi, max(lo, guess))
            got = rate(guess)
            best = min(best, (abs(got - target), guess, got))
            if abs(got - target) * (total + overhead) < 0.5 or lo >= hi:
                break
            if got < target:
                lo = guess + 1
            else:
                hi = guess - 1
            if lo > hi:
                break
            step = (target - got) * p / max(p - 1, 1) * (total + overhead)
            guess = guess + int(round(step)) if abs(step) >= 1 else (lo + hi) // 2
        _, system_len, got = best
        return system_len, total - system_len, got


def _messages(system: Optional[str], users: list[str]) -> list[dict[str, str]]:
    # an empty system prompt stays a (short) system message, as the driver sends it: leaving it
    # out would bring the template's default one, shared by every prompt
    return chat_messages(system, [{"role": "user", "content": u} for u in users])


class _Starts:
    """Where each group's system prompt and each question start in the corpus (seeded, fixed
    across the target search so only the split changes)."""

    def __init__(self, corpus: TokenizedCorpus, rng: np.random.Generator, cfg: SharedPrefixConfig):
        self.system = [corpus.random_start(rng) for _ in range(cfg.num_groups)]
        self.question = [
            [[corpus.random_start(rng) for _ in range(cfg.turns)] for _ in range(cfg.prompts_per_group)]
            for _ in range(cfg.num_groups)
        ]
