"""Recorded agent traces for ``workload=agentic workload.trace_path=FILE``: the harness's JSONL.

One line per call (request), in the order the calls were made::

    {"job_id": "t1", "call_id": "c2", "agent_id": "main", "parent_call_id": "c1",
     "start_s": 0.0, "input_length": 900, "output_length": 64, "tool_gap_s": 1.5}

- ``job_id`` (string or number): the job. ``call_id``: unique within the job.
- ``agent_id`` (default ``"main"``): the calls of one (job, agent) are one agent's chat, in
  file order; each call's prompt is the agent's context so far plus the call's new message.
- ``parent_call_id``: what the call waits for. On an agent's first call: null for the job's
  main agent, else the call (of another agent, on an earlier line) after which this agent
  forks — a sub-agent, which starts from that call's context; the forking agent's next call
  waits for all its sub-agents. On later calls it may be omitted; if given, it must be the
  agent's previous call.
- the new message, one of: ``text`` (the message), ``token_ids`` (its ids, decoded with the
  model's tokenizer), ``new_tokens`` (that many corpus tokens), or ``input_length`` (the
  whole rendered prompt's tokens: corpus text makes up what the context so far lacks; a
  shared-prefix reference is the context itself).
- ``output_length`` (required): output tokens; the reply stand-in in later contexts is that long.
- ``tool_gap_s`` (default 0): the tool's time before the call is sent, after what it waits for.
- ``start_s`` (on the job's first call): the job's arrival from the trace's start. When every
  job has one, the jobs arrive at those offsets (open loop, × ``time_scale``); else they run
  in a closed loop of ``workload.concurrency`` jobs.

Public formats: SGLang's and AIPerf's Mooncake traces (``timestamp``, ``input_length``,
``output_length``, ``hash_ids``) are flat requests: one job per line, or one agent per
session id where a trace has one (``workload=trace`` replays them). AIPerf's Weka agentic
coding traces (kv-cache-tester; one JSON object per job with ``requests`` of ``t``, ``type``,
``in``, ``out``, ``hash_ids``) map onto this format with scripts/convert_weka_trace.py (workloads/weka_trace.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from core.errors import ConfigError
from workloads.agent_tree import Agent, AgentCall, Job
from workloads.datafiles import positive_int, read_records

HINT = (
    'an agent trace is JSON Lines of {"job_id", "call_id", "agent_id", "parent_call_id", "output_length", '
    'and one of "text", "token_ids", "new_tokens", "input_length"} (docs/metrics.md, trace replay)'
)
CONTENT_KEYS = ("text", "token_ids", "new_tokens", "input_length")


@dataclass
class AgentTrace:
    path: Path
    jobs: list[Job]
    calls: int


def read_agent_trace(path_text: str, time_scale: float = 1.0) -> AgentTrace:
    """The jobs of an agent trace; one ConfigError line naming the line and the field on bad input."""
    path = Path(path_text).expanduser()
    if not path.is_file():
        what = "a folder, not a file" if path.is_dir() else "no such file"
        raise ConfigError(f"workload.trace_path={path_text}: {what}; {HINT}")
    records = read_records(path, HINT, "workload.trace_path")
    jobs: dict[str, Job] = {}
    agents: dict[tuple[str, str], Agent] = {}
    calls: dict[tuple[str, str], tuple[tuple[str, str], AgentCall]] = {}  # (job, call) → (agent key, call)
    for n, r in enumerate(records, 1):
        where = f"workload.trace_path={path}: line {n}"
        if not isinstance(r, dict) or "job_id" not in r or "call_id" not in r:
            raise ConfigError(f"{where} has no job_id or call_id; {HINT}")
        job, call_id = str(r["job_id"]), str(r["call_id"])
        agent_key = (job, str(r.get("agent_id", "main")))
        if (job, call_id) in calls:
            raise ConfigError(
                f"{where}: call_id {call_id!r} appears twice in job {job!r}; call ids are unique in a job"
            )
        call = _call(r, where, time_scale)
        parent = r.get("parent_call_id")
        agent = agents.get(agent_key)
        if agent is None:  # the agent's first call
            agent = agents[agent_key] = Agent([])
            if parent is None:
                if job in jobs:
                    raise ConfigError(
                        f"{where}: job {job!r} already has a main agent; a sub-agent's first call "
                        "names the call it forks after in parent_call_id"
                    )
                start = r.get("start_s")
                if start is not None and not (isinstance(start, (int, float)) and start >= 0):
                    raise ConfigError(f"{where}: start_s must be a number >= 0 seconds (got {start!r})")
                jobs[job] = Job(agent, None if start is None else float(start) * time_scale)
            else:
                forked = calls.get((job, str(parent)))
                if forked is None:
                    raise ConfigError(
                        f"{where}: parent_call_id {parent!r} is not a call of job {job!r} on an earlier line"
                    )
                forked[1].forks.append(agent)
        elif parent is not None and calls.get((job, str(parent)), (None, None))[1] is not agent.calls[-1]:
            raise ConfigError(
                f"{where}: parent_call_id {parent!r} is not the previous call of agent "
                f"{agent_key[1]!r}; an agent's calls are sequential"
            )
        agent.calls.append(call)
        calls[(job, call_id)] = (agent_key, call)
    orphans = sorted({job for job, _ in agents} - set(jobs))
    if orphans:
        raise ConfigError(
            f"workload.trace_path={path}: job {orphans[0]!r} has no main agent (a first call with parent_call_id null)"
        )
    return AgentTrace(path, list(jobs.values()), len(records))


def _call(r: dict[str, Any], where: str, time_scale: float) -> AgentCall:
    out = positive_int(r.get("output_length"))
    if not out:
        raise ConfigError(f"{where}: output_length must be a whole number >= 1 (got {r.get('output_length')!r})")
    given = [k for k in CONTENT_KEYS if r.get(k) is not None]
    if len(given) != 1:
        raise ConfigError(f"{where}: give exactly one of {', '.join(CONTENT_KEYS)} (got {', '.join(given) or 'none'})")
    gap = r.get("tool_gap_s", 0.0) or 0.0
    if isinstance(gap, bool) or not isinstance(gap, (int, float)) or not gap >= 0:
        raise ConfigError(f"{where}: tool_gap_s must be a number >= 0 seconds (got {gap!r})")
    call = AgentCall(out, gap_s=round(float(gap) * time_scale, 6), label=str(r["call_id"]))
    key = given[0]
    value = r[key]
    if key == "text":
        if not isinstance(value, str):
            raise ConfigError(f"{where}: text must be a string")
        call.text = value
    elif key == "token_ids":
        if not isinstance(value, list) or not all(positive_int(v) is not None and isinstance(v, int) for v in value):
            raise ConfigError(f"{where}: token_ids must be a list of token ids (whole numbers >= 0)")
        call.token_ids = value
    else:
        count = positive_int(value)
        if not count:
            raise ConfigError(f"{where}: {key} must be a whole number >= 1 (got {value!r})")
        setattr(call, key, count)
    return call


def trace_line(
    job_id: Any,
    call_id: Any,
    output_length: int,
    *,
    agent_id: str = "main",
    parent_call_id: Optional[Any] = None,
    start_s: Optional[float] = None,
    tool_gap_s: float = 0.0,
    **content: Any,
) -> dict[str, Any]:
    """One line of the format (converters write these)."""
    line: dict[str, Any] = {
        "job_id": job_id,
        "call_id": call_id,
        "agent_id": agent_id,
        "parent_call_id": parent_call_id,
    }
    if start_s is not None:
        line["start_s"] = start_s
    line.update({k: v for k, v in content.items() if v is not None})
    line["output_length"] = output_length
    if tool_gap_s:
        line["tool_gap_s"] = tool_gap_s
    return line
