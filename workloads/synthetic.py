"""Synthetic workload: single-turn prompts of exact token lengths, exact output lengths.

Input lengths are counted after the chat template is applied (the tokens the engine sees). A plan
of more than workloads.plan_pool.CHUNK prompts is fitted in chunks on every core.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
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
from workloads.plan_pool import iter_fitted_texts
from workloads.prompts import PromptRenderer, user_only


@dataclass
class SyntheticConfig(WorkloadConfig):
    name: str = "synthetic"
    num_requests: int = 16  # requests in the plan
    input_len: int = 128  # prompt tokens as the engine sees them, chat template included (the mean with a distribution)
    input_len_dist: str = "fixed"  # fixed | uniform | normal
    input_len_spread: float = 0.0  # uniform: half-width; normal: standard deviation (tokens)
    # text put before each prompt's corpus text, inside input_len (e.g. what a JSON reply should
    # hold, for workload.response_format); null: corpus text alone
    instruction: Optional[str] = None

    def validate(self) -> None:
        super().validate()
        require_positive("workload.num_requests", self.num_requests)
        require_positive("workload.input_len", self.input_len)
        check_length_distribution("workload.input_len", self.input_len_dist, self.input_len_spread)


@workload_registry.register("synthetic", SyntheticConfig)
class SyntheticWorkload(Workload):
    config: SyntheticConfig

    def build(self, renderer: PromptRenderer, corpus: TokenizedCorpus, seed: int) -> WorkloadPlan:
        cfg = self.config
        text_rng, arrival_rng, warm_rng = seeded_streams(seed, 3)
        head = f"{cfg.instruction}\n\n" if cfg.instruction else ""

        def messages(text: str) -> list[dict[str, str]]:
            return user_only(head + text)

        overhead = renderer.overhead(messages)
        minimum = overhead + 1
        if cfg.input_len < minimum:
            raise ConfigError(
                f"workload.input_len {cfg.input_len} is too short: the chat template alone takes "
                f"{overhead} tokens; use at least {minimum}"
            )

        def sessions(rng, n: int, first_id: int, max_output: Optional[int] = None) -> Iterator[SessionSpec]:
            """The sessions as their prompts are fitted (lengths drawn and checked first)."""
            inputs = sample_lengths(rng, n, cfg.input_len, cfg.input_len_dist, cfg.input_len_spread, minimum)
            outputs = sample_lengths(rng, n, cfg.output_len, cfg.output_len_dist, cfg.output_len_spread)
            if max_output is not None:
                outputs = [min(o, max_output) for o in outputs]
            check_context(renderer.max_context, inputs, outputs)
            prompts = iter_fitted_texts(renderer, corpus, rng, inputs, messages, overhead)

            def made() -> Iterator[SessionSpec]:
                with closing(prompts):  # a plan stopped early ends the fitting (and its workers) here
                    for i, ((text, ids), n_out) in enumerate(zip(prompts, outputs)):
                        yield SessionSpec(first_id + i, [TurnSpec(head + text, n_out, prompt_token_ids=ids)])

            return made()

        count = session_count(cfg, cfg.num_requests, arrival_rng)
        measured = sessions(text_rng, count, 0)  # made as make_plan takes them; the lengths checked here
        warmup = list(sessions(warm_rng, cfg.warmup_requests, -cfg.warmup_requests, WARMUP_OUTPUT_TOKENS))
        return make_plan(cfg, measured, warmup, arrival_rng, seed, count=count)


def check_context(limit: Optional[int], inputs: list[int], outputs: list[int]) -> None:
    """One line, before any prompt is fitted, when a request needs more than the model's context."""
    if limit is None or not inputs:
        return
    longest = max(range(len(inputs)), key=lambda i: inputs[i] + outputs[i])
    if inputs[longest] + outputs[longest] > limit:
        raise ConfigError(
            f"workload.input_len and workload.output_len: a request of {inputs[longest]} prompt + "
            f"{outputs[longest]} output tokens needs more than the model's context of {limit} tokens; "
            "shorten them (or narrow their spread)"
        )
