"""The search's best against the engine's defaults, interleaved: is its gain beyond noise?

A search measures each configuration once, and the best of many single runs is partly the best
of their noise (the winner's curse). So after the trials (``search.check_best=true``), the
configuration picked as best (harness/run/search_study.py: ``best_for_check``) runs against the
defaults in ``search.check_blocks`` interleaved blocks through ``python -m harness.ab``
(:mod:`harness.run.ab`): each block one run of each arm, in random order, each run a fresh
process with a fresh engine. Arm A is the defaults (the search's own command, less its
``search.*``), arm B the best (its settings as overrides); the experiment is kept in
``check/`` of the search folder (ab.json, ab.md, compare.html, the runs).

For each objective, the paired interval of best / defaults says which way the change went:
**better beyond noise** when its one-sided bound excludes no change on the side of worse (for
a rate, the lower bound of the ratio above 1), **worse beyond noise** when it excludes no
change on the side of better, otherwise **within noise**. harness.ab's own verdict (regression,
pass, inconclusive: does the best lose more than its threshold?) is kept beside it.
The check is bounded: exactly ``check_blocks`` blocks (--max-blocks = --blocks), no more.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from harness.run import ab
from harness.run.search_study import Objective

CHECK_DIR = "check"
BETTER, WORSE, WITHIN = "better beyond noise", "worse beyond noise", "within noise"
# a run's settings the experiment sets itself, and the search's own, left out of the arms' command
NOT_COMMON = ("search.", "+search.", "hydra.", "repeat=", "resume=", "-m", "--multirun")


def common_overrides(overrides: Sequence[str]) -> list[str]:
    """The search's command line as the defaults' (arm A's) overrides."""
    return [o for o in overrides if not o.startswith(NOT_COMMON)]


def check_best(
    out_dir: Path,
    common: Sequence[str],
    best_overrides: Sequence[str],
    objectives: Sequence[Objective],
    blocks: int,
    seed: int,
    best_number: int,
) -> dict[str, Any]:
    """Run the experiment (or take the finished one of the same arms from ``check/``); its record."""
    out = out_dir / CHECK_DIR
    b = " ".join(shlex.quote(o) for o in best_overrides)
    figures = ",".join(o.figure for o in objectives)
    done = _finished(out, b, list(common), blocks)
    code: Optional[int] = 0 if done else None
    if not done:
        _set_aside(out)
        argv = ["--a", "", "--b", b, "--blocks", str(blocks), "--max-blocks", str(blocks), "--figures", figures]
        argv += ["--seed", str(seed), "--out", str(out), "--", *common]
        print(f"check: the best (trial {best_number}) against the defaults, {blocks} interleaved blocks", flush=True)
        code = ab.main(argv)
    record = read_check(out, objectives)
    record.update(best=best_number, best_overrides=list(best_overrides), exit_code=code, reused=done)
    return record


def _finished(out: Path, b: str, common: list[str], blocks: int) -> bool:
    """``check/`` holds a complete experiment of these arms (a resumed search that checked already)."""
    try:
        exp = json.loads((out / "ab.json").read_text())
    except (OSError, ValueError):
        return False
    arm_b = " ".join(shlex.quote(o) for o in exp.get("arms", {}).get("B", {}).get("overrides", []))
    return (
        exp.get("status") == "complete" and arm_b == b and exp.get("common") == common and exp.get("blocks") == blocks
    )


def _set_aside(out: Path) -> None:
    """An earlier check (of another best, or cut short) is kept as check.1/, check.2/ …"""
    if not out.exists():
        return
    k = 1
    while (aside := out.with_name(f"{out.name}.{k}")).exists():
        k += 1
    out.rename(aside)


def read_check(out: Path, objectives: Sequence[Objective]) -> dict[str, Any]:
    """The experiment's outcome from its ab.json: status, verdict and, per objective, the change of
    best / defaults with its one-sided bounds and which way it is beyond noise."""
    try:
        exp = json.loads((out / "ab.json").read_text())
    except (OSError, ValueError):
        return {"dir": str(out), "status": "failed", "verdict": None, "figures": [], "text": "the check did not run"}
    look = (exp.get("looks") or [{}])[-1]  # none when too few blocks were usable
    by_name = {d["figure"]: d for d in look.get("decisions", [])}
    rows = []
    for objective in objectives:
        d = by_name.get(objective.figure)
        if d is None:
            rows.append({"figure": objective.figure, "label": objective.label, "outcome": None})
            continue
        low, high = d["lower_bound"], d["upper_bound"]  # of best / defaults − 1, one-sided bounds
        better = low > 0 if objective.maximize else high < 0
        worse = high < 0 if objective.maximize else low > 0
        rows.append(
            {
                "figure": objective.figure,
                "label": objective.label,
                "change": d["change"],
                "lower_bound": low,
                "upper_bound": high,
                "confidence": 1 - d["alpha"],
                "ab_verdict": d["verdict"],
                "outcome": BETTER if better else WORSE if worse else WITHIN,
            }
        )
    record = {
        "dir": str(out),
        "status": exp.get("status"),
        "verdict": exp.get("verdict"),
        "blocks": look.get("blocks"),
        "left_out": look.get("left_out", []),
        "figures": rows,
    }
    record["text"] = check_text(record)
    return record


def check_text(record: dict[str, Any]) -> str:
    """One line: the best against the defaults, each objective's change, its bounds and its outcome."""
    if record.get("status") != "complete":
        return (
            f"the check did not finish ({record.get('status')}): too few blocks whose runs both finished "
            f"untainted (a busy machine taints runs); see {record.get('dir')}/runs/*.log"
        )
    parts = []
    for row in record["figures"]:
        if row.get("outcome") is None:
            parts.append(f"{row['label']}: no interval")
            continue
        conf = f"{row['confidence'] * 100:.4g}%"
        parts.append(
            f"{row['label']} {row['change'] * 100:+.1f}% [{row['lower_bound'] * 100:+.1f}%, "
            f"{row['upper_bound'] * 100:+.1f}%] (one-sided {conf} bounds): {row['outcome']}"
        )
    gained = any(r.get("outcome") == BETTER for r in record["figures"])
    head = "the gain is beyond noise" if gained else "no gain beyond noise"
    return (
        f"best vs defaults after {record.get('blocks')} blocks: {head}; "
        + "; ".join(parts)
        + f" (harness.ab: {str(record.get('verdict')).upper()})"
    )
