"""AIPerf's Weka agentic coding traces (kv-cache-tester) → the agent-trace JSONL of
workloads/agent_trace.py (``workload=agentic workload.trace_path=…``).

A Weka trace is one JSON object per coding session: ``id``, ``block_size`` and ``requests``, an
ordered list of calls (``type`` ``"n"`` or ``"s"``; ``t`` seconds from the session's start,
``in`` input tokens, ``out`` output tokens, ``hash_ids``, and ``think_time`` where recorded)
and sub-agent markers (``type: "subagent"``), which AIPerf replays as child sessions that
the parent waits on before resuming. The mapping:

- one trace → one job; its calls → the main agent's calls, in order.
- ``in`` → ``input_length`` (the prompt grows to it; a trace whose context shrinks, e.g. after
  a compaction, keeps growing by one token here), ``out`` → ``output_length``.
- ``think_time`` → ``tool_gap_s`` where recorded (seconds), else 0: ``t`` differences would
  count the recorded server's own latency.
- a sub-agent marker with its own ``requests`` list → a sub-agent forked after the parent's
  call before it (markers before any parent call are dropped, as AIPerf drops them), its
  calls converted the same way; a marker without a ``requests`` list is counted in
  ``skipped`` (this converter reads only that key).
- a sub-agent here starts from its parent's context (the shared prefix of workload=agentic);
  a Weka sub-agent that started from a fresh context of its own is replayed with that prefix.
- ``hash_ids`` (cache blocks shared across sessions) are not kept: within a job, the prefix
  sharing comes from the tree itself; across jobs, only the system prompt is shared.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.errors import ConfigError
from workloads.agent_trace import trace_line
from workloads.datafiles import positive_int

CALL_TYPES = ("n", "s")


@dataclass
class Converted:
    lines: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0  # sub-agent markers without a requests list, or before any parent call


def weka_lines(trace: dict[str, Any], job_id: Any = None, out: Converted | None = None) -> Converted:
    """One Weka trace (a parsed JSON object) as agent-trace lines of one job."""
    out = out or Converted()
    if not isinstance(trace, dict) or not isinstance(trace.get("requests"), list):
        raise ConfigError('a Weka trace is a JSON object with a "requests" list (AIPerf weka_trace format)')
    job = job_id if job_id is not None else trace.get("id", "job")
    _agent(trace["requests"], job, "main", None, out)
    return out


def _agent(requests: list[Any], job: Any, agent_id: str, forked_after: Any, out: Converted) -> None:
    last_call = None
    subagents = 0
    for i, r in enumerate(requests):
        if not isinstance(r, dict):
            continue
        if r.get("type") == "subagent":
            inner = r.get("requests")
            if last_call is None or not isinstance(inner, list):
                out.skipped += 1
                continue
            _agent(inner, job, f"{agent_id}/sa{subagents}", last_call, out)
            subagents += 1
            continue
        if r.get("type") not in CALL_TYPES:
            continue
        n_in, n_out = positive_int(r.get("in")), positive_int(r.get("out"))
        if not n_in or not n_out:
            raise ConfigError(
                f"Weka trace {job}: request {i} of agent {agent_id} has no whole-number "
                f"'in' and 'out' ({r.get('in')!r}, {r.get('out')!r})"
            )
        gap = r.get("think_time")
        gap = float(gap) if isinstance(gap, (int, float)) and not isinstance(gap, bool) and gap > 0 else 0.0
        call_id = f"{agent_id}#{i}"
        parent = forked_after if last_call is None else last_call
        out.lines.append(
            trace_line(
                job,
                call_id,
                n_out,
                agent_id=agent_id,
                parent_call_id=parent,
                tool_gap_s=round(gap, 6) if last_call is not None else 0.0,
                input_length=n_in,
            )
        )
        last_call = call_id
