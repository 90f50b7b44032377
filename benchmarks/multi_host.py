"""The client across hosts (``client.cluster=ray``) against one process and forked workers, on a
Ray cluster of two nodes started here, against the reference server (its schedule is the truth).

Three clients: one process (``client.workers=1``), two forked workers on this host
(``client.workers=2``), and Ray with two nodes (``client.cluster=ray client.hosts=2``, one worker
each; the second node's clock shifted by the test hook, ``HARNESS_TEST_CLOCK_OFFSET_S``). Printed:

1. **Request-rate ceiling**: open loop at rising rates (``--rates``, each ``--seconds`` of
   arrivals of short requests); the client keeps up at a rate when every request completed and
   the p95 of its send lateness (``start_s − scheduled_s``) is at most ``--late-ms``. The
   ceiling is the highest such rate before the first that fails. On one small machine the server,
   the client and the cluster share the cores: this is the machine's ceiling as much as the
   client's.
2. **TTFT error against the schedule**: measured TTFT − ``ttft_ms``, p50 and p99, closed loop at
   ``--concurrency``; and the harness's peak RSS: the harness process and its forked workers
   (sampled here, the reference server left out), plus, for Ray, its actors' peak RSS (their
   own ``getrusage``, from the summary's ``hosts``).
3. **The offset table**: each host's clock offset before and after the run, its round trip, the
   drift, and the least ``received − end`` (≥ 0 when the offset is corrected), with 2.5 s
   injected on the second node.
4. **A node lost mid-run**: the second node killed (SIGKILL of its processes) once
   ``--kill-after`` records are in; the run's counts, its warnings and the report's host rows.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/multi_host.py [--rates 25 50 100 200 400 800]
        [--seconds 4] [--late-ms 10] [--concurrency 8] [--requests 160]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pandas as pd
import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SHIFT_S = 2.5
SERVER = ["backend=reference", "backend.count_prompt_tokens=false", "model=tiny-random", "workload=synthetic"]
MODES = {
    "one process": ["client.workers=1"],
    "client.workers=2": ["client.workers=2"],
    "Ray, 2 nodes": ["client.cluster=ray", "client.hosts=2", "client.workers=1"],
}


def slug(mode: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", mode.lower()).strip("-")


def load_avg() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


class TreeRss:
    """Peak RSS of a process and its descendants, the reference server (and its watchdog) left out."""

    def __init__(self, pid: int):
        self.root, self.peak = psutil.Process(pid), 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            total = 0
            try:
                for p in [self.root, *self.root.children(recursive=True)]:
                    cmd = " ".join(p.cmdline())
                    if "refserver" not in cmd and "watchdog.py" not in cmd:
                        total += p.memory_info().rss
            except psutil.Error:
                pass
            self.peak = max(self.peak, total)
            self._stop.wait(0.1)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(2)
        return self.peak


def run(args: list[str], out: Path, env: dict[str, str], on_start: Any = None) -> tuple[Optional[Path], int, int]:
    """``python -m harness ARGS``: its run folder (None when it wrote none), exit code, peak RSS."""
    cmd = [sys.executable, "-m", "harness", *args, "progress=false", f"output_root={out}"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    rss = TreeRss(proc.pid)
    if on_start is not None:
        on_start(out)
    _, err = proc.communicate()
    peak = rss.stop()
    found = sorted(out.glob("*/summary.json"))
    if proc.returncode != 0 and not found:
        print(err[-2000:], file=sys.stderr)
    return (found[-1].parent if found else None), proc.returncode, peak


def ms(x: Optional[float], digits: int = 2) -> str:
    return "–" if x is None or not np.isfinite(x) else f"{x * 1e3:.{digits}f}"


def ceiling(mode: str, extra: list[str], args: argparse.Namespace, env: dict[str, str], work: Path) -> list[dict]:
    rows = []
    for rate in args.rates:
        n = max(50, int(rate * args.seconds))
        folder, code, _ = run(
            [
                *SERVER,
                *extra,
                "backend.ttft_ms=1",
                "backend.itl_ms=1",
                "workload.input_len=32",
                "workload.output_len=8",
                "workload.warmup_requests=8",
                f"workload.num_requests={n}",
                f"workload.rate={rate}",
                "saturation.enabled=false",
                "machine.enabled=false",
                "report=false",
            ],
            work / f"ceiling-{slug(mode)}-{rate:g}",
            env,
        )
        if folder is None:
            rows.append({"rate": rate, "ok": False, "why": f"exit {code}"})
            break
        df = pd.read_parquet(folder / "requests.parquet")
        late = (df.start_s - df.scheduled_s).to_numpy()
        done = int(df.error.isna().sum())
        ok = done == n and float(np.percentile(late, 95)) <= args.late_ms / 1e3
        rows.append(
            {
                "rate": rate,
                "ok": ok,
                "done": f"{done}/{n}",
                **{f"late_p{q}": float(np.percentile(late, q)) for q in (50, 95, 99)},
            }
        )
        print(
            f"  {mode:>18} {rate:>5g} req/s: {done}/{n} ok, send lateness p50 {ms(rows[-1]['late_p50'])} ms "
            f"p95 {ms(rows[-1]['late_p95'])} ms p99 {ms(rows[-1]['late_p99'])} ms "
            f"{'keeps up' if ok else 'falls behind'}  ({load_avg()})",
            flush=True,
        )
        if not ok:
            break
    return rows


def ttft(mode: str, extra: list[str], args: argparse.Namespace, env: dict[str, str], work: Path) -> dict:
    folder, code, peak = run(
        [
            *SERVER,
            *extra,
            "backend.ttft_ms=50",
            "backend.itl_ms=10",
            "workload.input_len=64",
            "workload.output_len=16",
            f"workload.warmup_requests={args.concurrency}",
            f"workload.num_requests={args.requests}",
            f"workload.concurrency={args.concurrency}",
            "report=false",
        ],
        work / f"ttft-{slug(mode)}",
        env,
    )
    assert folder is not None, f"{mode}: exit {code}"
    df = pd.read_parquet(folder / "requests.parquet")
    summary = json.loads((folder / "summary.json").read_text())
    err = (df[df.error.isna()].ttft_s - 0.05).to_numpy()
    actors = sum((h.get("rss_peak_bytes") or 0) for h in (summary.get("hosts") or {}).values())
    return {
        "mode": mode,
        "n": len(err),
        "p50": float(np.median(err)),
        "p99": float(np.percentile(err, 99)),
        "rss": peak,
        "actors": actors,
        "hosts": summary.get("hosts"),
        "load": load_avg(),
    }


def node_loss(args: argparse.Namespace, env: dict[str, str], work: Path, cluster: Any, node_b: Any) -> None:
    seen: dict[str, Any] = {}

    def kill_when_ready(out: Path) -> None:
        def watch() -> None:
            deadline = time.time() + 300
            while time.time() < deadline:
                lines = [p for p in out.glob("*/requests.jsonl")]
                if lines and lines[0].read_text().count("\n") >= args.kill_after:
                    seen["records"] = lines[0].read_text().count("\n")
                    cluster.remove_node(node_b, allow_graceful=False)
                    seen["killed_at"] = time.time()
                    return
                time.sleep(0.05)

        threading.Thread(target=watch, daemon=True).start()

    folder, code, _ = run(
        [
            *SERVER,
            *MODES["Ray, 2 nodes"],
            "backend.ttft_ms=50",
            "backend.itl_ms=20",
            "workload.input_len=64",
            "workload.output_len=30",
            "workload.warmup_requests=0",
            "workload.num_requests=120",
            "workload.concurrency=8",
            "report=true",
        ],
        work / "node-loss",
        env,
        on_start=kill_when_ready,
    )
    assert folder is not None, f"exit {code}"
    summary = json.loads((folder / "summary.json").read_text())
    df = pd.read_parquet(folder / "requests.parquet")
    lost = df.error.fillna("").str.startswith("client host lost")
    print(f"\n4. A node lost mid-run (killed once {seen.get('records')} records were in; {load_avg()})")
    print(
        f"  exit {code}, status {summary['status']}: {len(df)} requests in requests.parquet of 120 planned, "
        f"unique ids {df.request_id.is_unique}, {int(df.error.isna().sum())} completed, {int(lost.sum())} failed "
        f"as lost in flight, {int((~df.error.isna() & ~lost).sum())} other failures"
    )
    for host, h in summary["hosts"].items():
        print(
            f"  host {host}: {h['requests']} requests, {h['completed']} completed, {h['failed']} failed, "
            f"lost: {h['lost'] or 'no'}"
        )
    for w in summary["warnings"]:
        print(f"  warning: {w}")
    page = (folder / "report.html").read_text()
    table = page[page.find("Per client host") :]
    table = table[: table.find("</table>")]
    print("  report.html, 'Per client host' rows:")
    for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)[1:]:
        cells = [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row, re.S)]
        print("    " + " | ".join(cells))
    print(f"  run folder: {folder}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rates", type=float, nargs="+", default=[25, 50, 100, 200, 400, 800])
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--late-ms", type=float, default=10.0)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--requests", type=int, default=160)
    p.add_argument("--kill-after", type=int, default=24)
    p.add_argument("--skip-ceiling", action="store_true")
    p.add_argument("--keep", action="store_true", help="keep the run folders")
    args = p.parse_args()

    import ray
    from ray.cluster_utils import Cluster

    from backends.server.launch import free_port
    from harness.client.ray_actor import CLOCK_SHIFT_ENV

    small = {"object_store_memory": 150 * 2**20}
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 2,
            "include_dashboard": False,
            "dashboard_port": free_port(),
            "_system_config": {"health_check_period_ms": 500, "health_check_failure_threshold": 3},
            **small,
        },
    )
    work = Path(tempfile.mkdtemp(prefix="multi-host-"))
    try:
        node_b = cluster.add_node(num_cpus=2, env_vars={CLOCK_SHIFT_ENV: str(SHIFT_S)}, **small)
        cluster.wait_for_nodes()
        env = {**os.environ, "RAY_ADDRESS": cluster.address, "PYTHONPATH": str(REPO)}
        print(f"Ray cluster of 2 nodes on this machine ({os.cpu_count()} cores), {load_avg()}")

        if not args.skip_ceiling:
            print(f"\n1. Request-rate ceiling (open loop, {args.seconds:g} s of arrivals, 8-token replies at 1 ms)")
            ceilings = {mode: ceiling(mode, extra, args, env, work) for mode, extra in MODES.items()}
            print(
                f"\n  | client | highest rate kept up (p95 send lateness ≤ {args.late_ms:g} ms, all ok) | at it: p50 / p95 / p99 lateness ms |"
            )
            print("  |---|---|---|")
            for mode, rows in ceilings.items():
                kept = [r for r in rows if r["ok"]]
                best = kept[-1] if kept else None
                print(
                    f"  | {mode} | {best['rate']:g} req/s | {ms(best['late_p50'])} / {ms(best['late_p95'])} / {ms(best['late_p99'])} |"
                    if best
                    else f"  | {mode} | below {rows[0]['rate']:g} req/s | – |"
                )

        print(
            f"\n2. TTFT error against the schedule (closed loop, {args.concurrency} in flight, ttft 50 ms, itl 10 ms)"
        )
        results = [ttft(mode, extra, args, env, work) for mode, extra in MODES.items()]
        print(
            "\n  | client | requests | TTFT error p50 ms | p99 ms | harness RSS (process + forked workers) | Ray actors' RSS | load |"
        )
        print("  |---|---|---|---|---|---|---|")
        for r in results:
            actors = f"{r['actors'] / 2**20:.0f} MiB" if r["actors"] else "–"
            print(
                f"  | {r['mode']} | {r['n']} | {ms(r['p50'], 3)} | {ms(r['p99'], 3)} | {r['rss'] / 2**20:.0f} MiB | "
                f"{actors} | {r['load']} |"
            )

        hosts = results[-1]["hosts"]
        print(f"\n3. Clock offsets (Ray run of table 2; {SHIFT_S:g} s injected on the second node)")
        print("  | host | offset before ms | ± ms | offset after ms | drift ms | drifted | least received − end ms |")
        print("  |---|---|---|---|---|---|---|")
        for host, h in hosts.items():
            c = h["clock"]
            print(
                f"  | {host} | {ms(c['offset_s'], 3)} | {ms(c['uncertainty_s'], 3)} | {ms(c['offset_after_s'], 3)} | "
                f"{ms(c['drift_s'], 3)} | {c['drifted']} | {ms(h['delivery_s']['min'], 2)} |"
            )

        node_loss(args, env, work, cluster, node_b)
    finally:
        ray.shutdown()
        cluster.shutdown()
        if not args.keep:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
        print(f"\n{load_avg()}")


if __name__ == "__main__":
    main()
