"""A three-stage open-loop run: the per-stage table, the send-time error of the schedule, and
(with --window) p50 / p99 TTFT with and without a steady-state window.

Runs ``workload.stages`` of ``--rates`` (default 1, 2, 4 req/s), ``--stage-s`` seconds each,
against any backend (Hydra overrides after ``--``; default the reference server), then prints
from the run's summary.json and requests.parquet:

- per stage: requests, TTFT p50 / p99, TPOT p50, output tokens/s and requests/s (the summary's
  ``stages``: the metric registry's figures);
- the send-time error of the schedule, start_s − scheduled_s, p50 / p99 per stage;
- with ``--ramp FROM TO``: a linear rate ramp over the same total time (a run of its own): the
  send-time error p50 / p99 over its requests, and for its first and second half;
- with ``--window``: the run again with ``workload.warmup_s`` / ``cooldown_s`` (default one
  stage's length / 4 each) and p50 / p99 TTFT of the whole run and of the window;
- with ``--screenshots DIR``: each run's report.html (stages and window shaded) as a PNG, from
  headless Chromium (tests/browser.py).

    .venv/bin/python benchmarks/stages.py [--rates 1 2 4] [--stage-s 60] [--window] [--ramp 1 8] [--screenshots DIR] \\
        [-- backend=vllm backend.mode=server model=smollm2-135m]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's packages first
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the tests' helpers (browser.py)

from browser import Chromium, chromium_binary

from harness.cli import compose_config
from harness.results.store import load_requests
from harness.run.point import run_benchmark

DEFAULTS = [
    "backend=reference",
    "model=tiny-random",
    "workload=synthetic",
    "workload.input_len=64",
    "workload.output_len=32",
    "workload.arrival=poisson",
    "progress=false",
]


def stages_override(rates: list[float], stage_s: float) -> str:
    return "workload.stages=[" + ", ".join(f"{{duration_s: {stage_s:g}, rate: {r:g}}}" for r in rates) + "]"


def ms(v) -> str:
    return "–" if v is None else f"{v * 1000:8.1f}"


def run(overrides: list[str], out: Path):
    cfg = compose_config(*DEFAULTS, *overrides)
    return run_benchmark(cfg, out, progress=False)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", type=float, nargs="+", default=[1.0, 2.0, 4.0])
    ap.add_argument("--stage-s", type=float, default=60.0)
    ap.add_argument("--window", action="store_true", help="also run with a steady-state window and compare TTFT")
    ap.add_argument(
        "--ramp",
        type=float,
        nargs=2,
        metavar=("FROM", "TO"),
        default=None,
        help="also run a linear rate ramp FROM → TO req/s over the stages' total time",
    )
    ap.add_argument("--warmup-s", type=float, default=None)
    ap.add_argument("--cooldown-s", type=float, default=None)
    ap.add_argument("--out", type=Path, default=None, help="where the run folders go (default: a temporary folder)")
    ap.add_argument("--screenshots", type=Path, default=None, help="save each run's report.html as DIR/<run>.png")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides (after --)")
    args = ap.parse_args(argv)
    root = args.out or Path(tempfile.mkdtemp(prefix="stages-"))
    base = [stages_override(args.rates, args.stage_s), *args.overrides]
    outcome = run(base, root / "stages")
    s = outcome.summary
    df = load_requests(root / "stages")
    print(f"run: {root / 'stages'} ({s.status}, {s.requests['sent']} requests, {s.duration_s:.1f} s)")
    print(
        f"{'stage':>5} {'s':>11} {'rate':>6} {'reqs':>5} {'TTFT p50':>9} {'TTFT p99':>9} {'TPOT p50':>9} "
        f"{'out tok/s':>9} {'req/s':>6} {'send err p50':>12} {'p99 (ms)':>9}"
    )
    for st in s.stages or []:
        lat, thr = st["latency"], st["throughput"]
        rows = df[df["stage"] == st["index"]]
        err = (rows["start_s"] - rows["scheduled_s"]).dropna().to_numpy(float)
        p50, p99 = np.percentile(err, [50, 99]) if err.size else (None, None)
        print(
            f"{st['index']:>5} {st['start_s']:>5g}–{st['end_s']:<5g} {st.get('rate'):>6g} {st['requests']['completed']:>5} "
            f"{ms(lat['ttft_s']['p50']):>9} {ms(lat['ttft_s']['p99']):>9} {ms(lat['tpot_s']['p50']):>9} "
            f"{(thr['output_tokens_per_s'] or 0):>9.1f} {(thr['requests_per_s'] or 0):>6.2f} {ms(p50):>12} {ms(p99):>9}"
        )
    if args.ramp:
        start, end = args.ramp
        length = args.stage_s * len(args.rates)
        ramp = f"workload.ramp={{from: {start:g}, to: {end:g}, duration_s: {length:g}, of: rate}}"
        r = run([ramp, *args.overrides], root / "ramp").summary
        rows = load_requests(root / "ramp")
        err = (rows["start_s"] - rows["scheduled_s"]).to_numpy(float)
        half = rows["scheduled_s"].to_numpy(float) < length / 2
        print(
            f"\nramp {start:g} → {end:g} req/s over {length:g} s ({root / 'ramp'}, {r.requests['sent']} requests): "
            "send-time error start_s − scheduled_s"
        )
        for label, part in (("all", err), ("first half", err[half]), ("second half", err[~half])):
            part = part[np.isfinite(part)]
            p50, p99 = np.percentile(part, [50, 99]) if part.size else (None, None)
            print(f"  {label:<12} {part.size:>5} requests  p50 {ms(p50)} ms  p99 {ms(p99)} ms")
    if args.window:
        warm = args.warmup_s if args.warmup_s is not None else args.stage_s / 4
        cool = args.cooldown_s if args.cooldown_s is not None else args.stage_s / 4
        w = run([*base, f"workload.warmup_s={warm:g}", f"workload.cooldown_s={cool:g}"], root / "window").summary
        whole, win = w.whole_run or {}, w.window or {}
        print(
            f"\nsteady-state window [{win.get('start_s'):g}, {win.get('end_s'):g}] s of a second run ({root / 'window'}):"
        )
        for label, lat, req in (
            ("whole run", whole.get("latency", {}), whole.get("requests", {})),
            ("window", w.latency, win.get("requests", {})),
        ):
            t = lat.get("ttft_s") or {}
            print(
                f"  {label:<10} {req.get('completed', 0):>5} requests  TTFT p50 {ms(t.get('p50'))} ms  p99 {ms(t.get('p99'))} ms"
            )
    if args.screenshots:
        screenshot_reports(root, args.screenshots)
    return 0


def screenshot_reports(root: Path, out: Path) -> None:
    binary = chromium_binary()
    if binary is None:
        print("chromium is not installed: no screenshots (scripts/test.sh installs it)")
        return
    browser = Chromium(binary)
    try:
        for page in sorted(root.glob("*/report.html")):
            result = browser.open(page, screenshot=out / f"{page.parent.name}.png")
            print(f"screenshot: {result.screenshot} ({len(result.plots)} plots, errors: {result.errors or 'none'})")
    finally:
        browser.close()


if __name__ == "__main__":
    sys.exit(main())
