"""Agent jobs: ``workload=agentic`` — a main loop with tool results, sub-agents that fork from
a shared prefix, and tool gaps; generated from the seed, or replayed from an agent trace
(``workload.trace_path``, the JSONL format of workloads/agent_trace.py).

A generated job (workloads/agent_tree.py has the tree and its sessions):

- the **main loop** makes ``turns`` calls. Call 0 sends the job's task (``task_len`` corpus
  tokens); each later call sends a tool result (``tool_result_len`` tokens, its distribution
  and spread), after a **tool gap** (``tool_gap_s``: ``fixed``, or ``exponential`` with that
  mean). Each call's prompt is the whole context so far (system prompt, every message, every
  reply) plus the new message: the context grows.
- after call t, where (t + 1) is a multiple of ``fork_every`` and another call follows, the
  agent **forks** ``fanout`` sub-agents (agents at depth < ``depth``; ``depth=0``: none). Each
  starts from the parent's context so far plus its own task (``sub_task_len`` tokens), makes
  ``sub_turns`` calls (tool results and gaps as above, and forks of its own by the same rule
  while its depth allows), and returns its last reply. The parent's next call sends their
  results, with no tool gap, once all have finished.
- every reply in a context is a stand-in of ``output_len`` corpus tokens, not the engine's, so
  every prompt is token ids fixed in advance: the same for every engine
  (``exact_output_len`` keeps the outputs that long too).

The load: ``concurrency`` counts **jobs** in flight (closed loop; a job's sub-agents run in
its slot, in parallel); ``rate`` is jobs per second (open loop). ``jobs`` is how many.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from core.errors import ConfigError
from workloads import workload_registry
from workloads.agent_trace import read_agent_trace
from workloads.agent_tree import Agent, AgentCall, Job, describe_tree, job_sessions
from workloads.base import (
    WARMUP_OUTPUT_TOKENS,
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
from workloads.datafiles import corpus_warmup, file_sha256
from workloads.lengths import sample_lengths
from workloads.prompts import PromptRenderer
from workloads.shared_prefix import theoretical_hit_rate

GAP_DISTRIBUTIONS = ("fixed", "exponential")
SYSTEM_HEAD = "You are a coding agent. You work in turns: read the tool results, then act. Project notes:\n\n"


@dataclass
class AgenticConfig(WorkloadConfig):
    name: str = "agentic"
    jobs: int = 2  # agent jobs in the plan (each a tree of calls)
    turns: int = 4  # calls of the main loop
    system_prompt_len: int = 32  # corpus tokens of the system prompt every agent shares
    task_len: int = 24  # corpus tokens of each job's task
    tool_result_len: int = 24  # corpus tokens of each tool result
    tool_result_len_dist: str = "fixed"  # fixed | uniform | normal
    tool_result_len_spread: float = 0.0  # uniform: half-width; normal: standard deviation (tokens)
    fanout: int = 2  # sub-agents per fork
    depth: int = 1  # levels of sub-agents below the main loop (0: none)
    fork_every: int = 2  # an agent forks after every fork_every-th call (when another follows)
    sub_turns: int = 2  # calls of each sub-agent
    sub_task_len: int = 16  # corpus tokens of each sub-agent's task
    tool_gap_s: float = 0.0  # the tool's time before each tool-result call (the mean when exponential)
    tool_gap_dist: str = "fixed"  # fixed | exponential
    output_len: int = 16
    exact_output_len: bool = True
    concurrency: Optional[int] = 1  # jobs in flight (closed loop)
    # Replay a recorded agent trace instead (workloads/agent_trace.py; the knobs above except
    # output_len for the warm-up, system_prompt_len and the load are then the trace's)
    trace_path: Optional[str] = None
    time_scale: float = 1.0  # multiplies a trace's start offsets and tool gaps

    def validate(self) -> None:
        super().validate()
        for key in (
            "jobs",
            "turns",
            "task_len",
            "tool_result_len",
            "fanout",
            "fork_every",
            "sub_turns",
            "sub_task_len",
        ):
            require_positive(f"workload.{key}", getattr(self, key))
        if self.depth < 0 or self.system_prompt_len < 0:
            raise ConfigError(
                f"workload.depth and workload.system_prompt_len must be >= 0 "
                f"(got {self.depth}, {self.system_prompt_len})"
            )
        check_length_distribution("workload.tool_result_len", self.tool_result_len_dist, self.tool_result_len_spread)
        if self.tool_gap_dist not in GAP_DISTRIBUTIONS:
            raise ConfigError(
                f"workload.tool_gap_dist must be one of {', '.join(GAP_DISTRIBUTIONS)} (got {self.tool_gap_dist!r})"
            )
        if not self.tool_gap_s >= 0 or not self.time_scale > 0:
            raise ConfigError(
                f"workload.tool_gap_s must be >= 0 and workload.time_scale > 0 "
                f"(got {self.tool_gap_s}, {self.time_scale})"
            )
        if self.trace_path is None:
            self.check_tree()

    def check_tree(self) -> None:
        """The generated tree as asked: sub-agents that fork where depth > 1, and a size that fits."""
        if self.depth > 1 and not fork_points(self.sub_turns, self.fork_every):
            raise ConfigError(
                f"workload.depth={self.depth} needs sub-agents that fork, and an agent forks after each "
                f"workload.fork_every={self.fork_every} calls when another follows: make "
                f"workload.sub_turns ({self.sub_turns}) more than {self.fork_every}, or depth 1"
            )
        calls = self.calls_per_job()
        if calls > MAX_CALLS_PER_JOB:
            raise ConfigError(
                f"workload.depth={self.depth} and workload.fanout={self.fanout} make jobs of over "
                f"{MAX_CALLS_PER_JOB:,} calls each; make them smaller"
            )

    def calls_per_job(self) -> int:
        """Calls in one generated job: the main loop's, and each level's sub-agents' (capped just
        past MAX_CALLS_PER_JOB, so a tree too big to build is not counted to the end either)."""
        total, agents, turns = 0, 1, self.turns
        for level in range(self.depth + 1):
            total += agents * turns
            if level == self.depth or total > MAX_CALLS_PER_JOB:
                break
            agents *= len(fork_points(turns, self.fork_every)) * self.fanout
            turns = self.sub_turns
        return total


MAX_CALLS_PER_JOB = 100_000


def fork_points(n_calls: int, fork_every: int) -> set[int]:
    """The calls after which an agent forks: every ``fork_every``-th, when another call follows."""
    return {t for t in range(fork_every - 1, n_calls - 1, fork_every)}


class JobGenerator:
    """The seeded trees of :class:`AgenticConfig` (lengths and gaps from ``rng``)."""

    def __init__(self, cfg: AgenticConfig, rng: np.random.Generator):
        self.cfg, self.rng = cfg, rng

    def gap(self) -> float:
        cfg = self.cfg
        if cfg.tool_gap_s <= 0:
            return 0.0
        value = cfg.tool_gap_s if cfg.tool_gap_dist == "fixed" else float(self.rng.exponential(cfg.tool_gap_s))
        return round(value, 6)

    def agent(self, n_calls: int, task_len: int, depth: int) -> Agent:
        cfg = self.cfg
        forks = fork_points(n_calls, cfg.fork_every) if depth < cfg.depth else set()
        tool_lens = sample_lengths(
            self.rng, n_calls, cfg.tool_result_len, cfg.tool_result_len_dist, cfg.tool_result_len_spread
        )
        out_lens = sample_lengths(self.rng, n_calls, cfg.output_len, cfg.output_len_dist, cfg.output_len_spread)
        calls = []
        for t in range(n_calls):
            if t == 0:
                call = AgentCall(out_lens[t], new_tokens=task_len)
            elif t - 1 in forks:  # the sub-agents' results, as soon as they are all back
                call = AgentCall(out_lens[t], with_results=True)
            else:
                call = AgentCall(out_lens[t], new_tokens=tool_lens[t], gap_s=self.gap())
            if t in forks:
                call.forks = [self.agent(cfg.sub_turns, cfg.sub_task_len, depth + 1) for _ in range(cfg.fanout)]
            calls.append(call)
        return Agent(calls)

    def jobs(self, n: int) -> list[Job]:
        return [Job(self.agent(self.cfg.turns, self.cfg.task_len, 0)) for _ in range(n)]


@workload_registry.register("agentic", AgenticConfig)
class AgenticWorkload(Workload):
    config: AgenticConfig

    def build(self, renderer: PromptRenderer, corpus: TokenizedCorpus, seed: int) -> WorkloadPlan:
        cfg = self.config
        tree_rng, text_rng, arrival_rng, warm_rng, system_rng = seeded_streams(seed, 5)
        system = SYSTEM_HEAD.strip()
        if cfg.system_prompt_len > 0:
            system = SYSTEM_HEAD + corpus.text(corpus.random_start(system_rng), cfg.system_prompt_len)
        source = None
        if cfg.trace_path is not None:
            trace = read_agent_trace(cfg.trace_path, cfg.time_scale)
            jobs = trace.jobs
            source = {
                "path": cfg.trace_path,
                "format": "agentic-jsonl",
                "sha256": file_sha256(trace.path),
                "records": trace.calls,
            }
        else:
            jobs = JobGenerator(cfg, tree_rng).jobs(session_count(cfg, cfg.jobs, arrival_rng))
        built = job_sessions(renderer, corpus, text_rng, system, jobs, renderer.max_context)
        warmup = corpus_warmup(
            renderer, corpus, warm_rng, cfg.warmup_requests, min(cfg.output_len, WARMUP_OUTPUT_TOKENS)
        )
        roots = list(built.roots)
        trace_arrivals = source is not None and all(r.arrival_s is not None for r in roots)
        if trace_arrivals and cfg.rate is not None:
            raise ConfigError(
                "workload.trace_path gives every job a start offset: drop workload.rate "
                "(workload.time_scale speeds the trace up or slows it down)"
            )
        stamps = [r.arrival_s for r in roots]
        plan = make_plan(cfg, roots, warmup, arrival_rng, seed, use_schedule=not trace_arrivals)
        if trace_arrivals:
            for root, t in zip(roots, stamps):
                root.arrival_s = t
            plan.open_loop = True
        kept = {r.job_id for r in plan.sessions}  # a schedule may keep fewer jobs
        plan.sessions = [s for s in built.sessions if s.job_id in kept]
        plan.source = source
        depths = [s.depth or 0 for s in plan.sessions]
        plan.info = {
            "jobs": len(kept),
            "agents": len(plan.sessions),
            "max_depth": max(depths, default=0),
            "tree": describe_tree(plan.sessions),  # the comparability guard names a different tree
            # an unbounded cache over every call's prompt, in dependency order (shared_prefix.py)
            "theoretical_cache_hit": round(theoretical_hit_rate(built.prompts_in_order), 4),
        }
        return plan
