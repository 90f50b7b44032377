"""Agent jobs as trees of calls, and the sessions that replay them (``workload=agentic``).

A **job** is a tree of **agents**. An agent is a chat: a list of **calls** (requests), each
appending one user message (the task, a tool result, or the sub-agents' results) to the
agent's context, then the agent's reply. After a call an agent may **fork** sub-agents: each
starts from the parent's context so far (a shared prefix) plus its own task, runs its own
calls, and the parent's next call waits for all of them.

Every prompt is fixed before the run: the reply each call adds to the context is a stand-in
of corpus text as long as the call's output (not the engine's reply), so every engine gets
the same prompt token ids, and a later call's prompt extends the earlier one's token for token
(the prefix an engine can reuse). :func:`job_sessions` turns the trees into the plan's
sessions — one per agent, with ``job_id``, ``depth`` and ``parent`` (session id, turn) — in
the order the dependencies allow (a parent's turn before its sub-agents, they before the
parent's next turn), which is also the order :func:`theoretical_hit_rate` counts them in.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from core.errors import ConfigError
from workloads.base import SessionSpec, TurnSpec
from workloads.corpus import TokenizedCorpus
from workloads.prompts import Messages, PromptRenderer, chat_messages

FIT_STEPS = 8


@dataclass
class AgentCall:
    """One request of an agent. Its new user message is ``text`` (or ``token_ids`` decoded); or
    corpus text of ``new_tokens`` tokens; or corpus text that makes the whole rendered prompt
    ``input_length`` tokens (at least 1 new token). ``gap_s``: the tool's time before it is
    sent. ``forks``: the sub-agents started once it has finished."""

    output_len: int
    text: Optional[str] = None
    token_ids: Optional[list[int]] = None  # the message's ids (decoded into its text)
    new_tokens: Optional[int] = None
    input_length: Optional[int] = None
    gap_s: float = 0.0
    forks: list[Agent] = field(default_factory=list)
    label: Optional[str] = None  # the call's id in a trace (prompt_id)
    # the message is the previous call's sub-agents' results (their last stand-in replies),
    # then the text above if any (a generated job; a trace's own lengths already count them)
    with_results: bool = False


@dataclass
class Agent:
    calls: list[AgentCall]


@dataclass
class Job:
    root: Agent
    arrival_s: Optional[float] = None  # a trace's start offset (open loop)


@dataclass
class BuiltJobs:
    sessions: list[SessionSpec]  # job by job, each job's agents in dependency order
    roots: list[SessionSpec]  # the main loop of each job
    prompts_in_order: list[list[int]]  # every call's prompt ids, in an order the dependencies allow


def describe_tree(sessions: list[SessionSpec]) -> str:
    """The jobs' shape in a few words, with a fingerprint of the tree (each agent's job, depth,
    parent, calls and tool gaps: the first 12 hex digits of their sha256), so two runs of other
    trees are told apart at a glance: ``2 jobs, 6 agents, depth 1 · 9c1d04be3f2a``."""
    shape = [[s.job_id, s.depth, s.parent, [t.think_time_s for t in s.turns]] for s in sessions]
    digest = hashlib.sha256(json.dumps(shape).encode()).hexdigest()[:12]
    jobs = len({s.job_id for s in sessions})
    depth = max((s.depth or 0 for s in sessions), default=0)
    return f"{jobs} job{'s' if jobs != 1 else ''}, {len(sessions)} agents, depth {depth} · {digest}"


class JobBuilder:
    """Renders the jobs' prompts: ``system`` for every agent, stand-in replies and filler
    text from the corpus at seeded starts."""

    def __init__(
        self,
        renderer: PromptRenderer,
        corpus: TokenizedCorpus,
        rng: np.random.Generator,
        system: Optional[str],
        max_context: Optional[int] = None,
    ):
        self.renderer, self.corpus, self.rng, self.system = renderer, corpus, rng, system
        self.max_context = max_context
        self.sessions: list[SessionSpec] = []
        self.prompts: list[list[int]] = []

    def filler(self, n_tokens: int) -> str:
        return self.corpus.text(self.corpus.random_start(self.rng), max(1, n_tokens))

    def build(self, jobs: list[Job]) -> BuiltJobs:
        roots = []
        for job_id, job in enumerate(jobs):
            root = self._agent(job.root, job_id, 0, [], None)[0]
            root.arrival_s = job.arrival_s
            roots.append(root)
        return BuiltJobs(self.sessions, roots, self.prompts)

    def _agent(
        self, agent: Agent, job_id: int, depth: int, history: Messages, parent: Optional[tuple[int, int]]
    ) -> tuple[SessionSpec, str]:
        """The agent's session (its sub-agents' after it), and its last reply."""
        session = SessionSpec(
            len(self.sessions),
            [],
            system=self.system,
            history=list(history) or None,
            job_id=job_id,
            depth=depth,
            parent=parent,
        )
        self.sessions.append(session)
        context = list(history)
        results: list[str] = []
        reply = ""
        for t, call in enumerate(agent.calls):
            user = self._user_text(call, context)
            if call.with_results and results:
                user = results_text(results) + (f"\n\n{user}" if user else "")
            context.append({"role": "user", "content": user})
            ids = self.renderer.render(chat_messages(self.system, context))
            if self.max_context is not None and len(ids) + call.output_len > self.max_context:
                raise ConfigError(
                    f"workload=agentic: job {job_id}'s agent at depth {depth} reaches a prompt of "
                    f"{len(ids)} + {call.output_len} output tokens at its call {t}, more than the "
                    f"model's context of {self.max_context}: shorten workload.turns, tool_result_len "
                    "or output_len"
                )
            reply = self.filler(call.output_len)
            session.turns.append(
                TurnSpec(
                    user,
                    call.output_len,
                    call.gap_s,
                    prompt_token_ids=ids,
                    reply=reply,
                    prompt_id=call.label or f"j{job_id}/s{session.session_id}/t{t}",
                )
            )
            self.prompts.append(ids)
            context.append({"role": "assistant", "content": reply})
            results = [
                self._agent(child, job_id, depth + 1, context, (session.session_id, t))[1] for child in call.forks
            ]
        return session, reply

    def _user_text(self, call: AgentCall, context: Messages) -> str:
        if call.text is not None:
            return call.text
        if call.token_ids is not None:
            return self.renderer.decode(call.token_ids)
        if call.with_results and call.new_tokens is None and call.input_length is None:
            return ""
        if call.new_tokens is not None:
            return self.filler(call.new_tokens)
        assert call.input_length is not None
        return self._fit(context, call.input_length)

    def _fit(self, context: Messages, target: int) -> str:
        """Corpus text that makes the rendered prompt ``target`` tokens where it can (tokens may
        merge across the text's edges: the window is grown or shrunk a few times); at least
        one token when the context is already that long."""

        def render(text: str) -> int:
            return len(self.renderer.render(chat_messages(self.system, [*context, {"role": "user", "content": text}])))

        start = self.corpus.random_start(self.rng)
        n = max(1, target - render(""))
        text = self.corpus.text(start, n)
        for _ in range(FIT_STEPS):
            diff = render(text) - target
            if diff == 0 or (diff > 0 and n == 1):
                break
            n = max(1, n - diff)
            text = self.corpus.text(start, n)
        return text


def job_sessions(
    renderer: PromptRenderer,
    corpus: TokenizedCorpus,
    rng: np.random.Generator,
    system: Optional[str],
    jobs: list[Job],
    max_context: Optional[int] = None,
) -> BuiltJobs:
    """The plan's sessions for ``jobs`` (see the module's docstring)."""
    return JobBuilder(renderer, corpus, rng, system, max_context).build(jobs)


def results_text(results: list[str]) -> str:
    """The user message that hands a parent its sub-agents' results."""
    return "Sub-agent results:\n\n" + "\n\n".join(f"[{i + 1}] {r}" for i, r in enumerate(results))
