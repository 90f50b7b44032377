"""Two llama.cpp replicas against one, at the same offered load, on a chat workload (issue 25, item 4).

Arms (each a run of its own, the same workload and seed, closed loop at ``--concurrency``
sessions in flight, or open loop at ``--rate`` sessions/s):

- ``1 replica``: one server on every core (``--threads`` = the cores this process may use);
- ``2 × round_robin`` and ``2 × session_affinity``: two servers, each pinned to its own share of the
  cores (``backend.replica_cpus``) with as many threads.

Printed per arm: requests ok / sent, output tokens/s, requests/s, TTFT p50 and p90, the cached
share of prompt tokens per turn (the server's own count: llama-server sends
``usage.prompt_tokens_details.cached_tokens``; llama_cpp.server sends no usage, so its share is
"–"), and how many requests each endpoint served.

    .venv/bin/python benchmarks/replicas.py [--sessions 24] [--turns 3] [--concurrency 8] [--server llama-server]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from harness.cli import compose_config
from harness.results.store import load_summary
from harness.run.point import run_benchmark


def cpu_halves() -> list[list[int]]:
    cpus = sorted(os.sched_getaffinity(0))
    half = max(1, len(cpus) // 2)
    return [cpus[:half], cpus[half:] or cpus[:half]]


def arms(cores: int) -> list[tuple[str, list[str]]]:
    halves = cpu_halves()
    pinned = "[" + ",".join("[" + ",".join(map(str, h)) + "]" for h in halves) + "]"
    two = ["backend.replicas=2", f"backend.replica_cpus={pinned}", f"backend.n_threads={len(halves[0])}"]
    return [
        ("1 replica", [f"backend.n_threads={cores}"]),
        ("2 x round_robin", [*two, "backend.routing=round_robin"]),
        ("2 x session_affinity", [*two, "backend.routing=session_affinity"]),
    ]


def fmt(v, scale=1.0, digits=1) -> str:
    return "–" if v is None else f"{v * scale:.{digits}f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=24)
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--rate", type=float, default=None, help="open loop: sessions per second (else closed loop)")
    p.add_argument("--output-len", type=int, default=32)
    p.add_argument("--system-prompt-len", type=int, default=256)
    p.add_argument("--slots", type=int, default=4, help="backend.max_batch_size: each server's parallel slots")
    p.add_argument("--server", default="llama-server", choices=("llama-server", "llama-cpp-python"))
    p.add_argument("--out", default=None, help="keep the run folders here")
    p.add_argument("overrides", nargs="*")
    a = p.parse_intermixed_args()
    load = [f"workload.concurrency={a.concurrency}"] + ([f"workload.rate={a.rate}"] if a.rate else [])
    base = [
        "backend=llamacpp",
        "backend.mode=server",
        f"backend.server={a.server}",
        f"backend.max_batch_size={a.slots}",
        "backend.n_ctx=2048",
        "workload=chat",
        f"workload.sessions={a.sessions}",
        f"workload.turns={a.turns}",
        f"workload.output_len={a.output_len}",
        f"workload.system_prompt_len={a.system_prompt_len}",
        "workload.warmup_requests=2",
        "workload.exact_output_len=true",
        "progress=false",
        *load,
        *a.overrides,
    ]
    cores = len(os.sched_getaffinity(0))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(a.out) if a.out else Path(tmp)
        for i, (name, extra) in enumerate(arms(cores)):
            run_dir = root / f"{i}-{name.replace(' ', '_')}"
            run_benchmark(compose_config(*base, *extra), run_dir)
            s = load_summary(run_dir)
            ttft = s["latency"]["ttft_s"]
            turns = " / ".join(fmt(t.get("cached_share"), 100, 0) for t in s["per_turn"])
            served = " / ".join(str(e["requests"]) for e in (s.get("endpoints") or {}).values()) or str(
                s["requests"]["sent"]
            )
            rows.append(
                [
                    name,
                    f"{s['requests']['completed']}/{s['requests']['sent']}",
                    fmt(s["throughput"]["output_tokens_per_s"]),
                    fmt(s["throughput"]["requests_per_s"], digits=2),
                    fmt(ttft["p50"], 1000, 0),
                    fmt(ttft["p90"], 1000, 0),
                    turns,
                    fmt(s["prefix_cache"].get("cached_share"), 100, 0),
                    served,
                ]
            )
    head = [
        "arm",
        "ok/sent",
        "out tok/s",
        "req/s",
        "TTFT p50 ms",
        "TTFT p90 ms",
        "cached % per turn",
        "cached % all",
        "requests per endpoint",
    ]
    widths = [max(len(str(r[k])) for r in [head, *rows]) for k in range(len(head))]
    offered = (
        f"open loop, {a.rate} sessions/s (at most {a.concurrency} in flight)"
        if a.rate
        else f"closed loop, {a.concurrency} sessions in flight"
    )
    print(
        f"\n{a.sessions} sessions x {a.turns} turns, {a.output_len} output tokens, system prompt "
        f"{a.system_prompt_len} tokens, {offered}; {a.server}, {a.slots} slots per server, {cores} cores\n"
    )
    for r in [head, *rows]:
        print("  ".join(str(c).ljust(w) if k == 0 else str(c).rjust(w) for k, (c, w) in enumerate(zip(r, widths))))


if __name__ == "__main__":
    main()
