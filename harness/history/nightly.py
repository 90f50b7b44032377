"""The nightly gate: a new sweep's points judged against the nightlies before them.

Repeats made back to back share the machine's state of that hour, so the spread of one sweep's
repeats says nothing of the spread between sweeps made on other days (measured here in December 2026: three identical
llama.cpp sweeps a minute apart were called a regression in 1 to 3 of 3 pairs by a bootstrap over
their repeats). Here the unit is the **nightly** (a batch of the history: one sweep), and its
value for a point is the geometric mean of that point's untainted repeats.

For each point of the new sweep and each figure:

1. **Its history**: the earlier nightlies of the same point (same engine and mode, model,
   prompts, load, and hardware fingerprint: :func:`harness.history.record.point_key`), untainted,
   since the last change point of their series (:mod:`harness.history.changepoints`). A nightly
   flagged as a regression by the gate the night before, and not yet confirmed, is left out: the
   new nightly confirms it (worse again: the regression stands) or clears it (back within the
   interval: it was noise).
2. **Its noise**, in this order (:mod:`harness.gate.prediction`):
   - the history's own spread, from at least ``MIN_NIGHTLIES`` (5) earlier nightlies;
   - a stored noise floor's σ_apart for the configuration on this hardware
     (``python -m harness.ab --aa``), with the nightlies there are (at least one);
   - none: the point is **inconclusive**, never a regression, and the verdict says what would
     decide (N more nightlies, a noise floor, or an interleaved A/B with ``python -m harness.ab``).
3. **Other hardware**: when the point has history only on another hardware fingerprint, it is
   inconclusive (with both fingerprints named) unless ``allow_other_hardware``.
4. **Verdicts**: the one-sided p-values of "no worse than before" over every point × figure go
   through Benjamini–Hochberg at ``fdr``; a point × figure **regresses** when it is rejected there
   (outside the prediction interval on the worse side, corrected for the number of points) and is
   worse than the earlier nightlies' mean by more than ``margin``. Otherwise it **passes**.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pandas as pd

from harness.gate import noise, prediction
from harness.gate.figures import Figure
from harness.gate.multiple import benjamini_hochberg
from harness.gate.verdicts import INCONCLUSIVE, PASS, REGRESSION
from harness.history.alerts import MARGIN
from harness.history.changepoints import change_points
from harness.history.record import figure_column, short_hash
from harness.reports.tables import text_table

KIND = "nightly-gate"  # the kind of the decisions this gate records in the history
SUSPECT, CONFIRMED, CLEARED = "suspect", "confirmed", "cleared"
FDR = 0.05


def figure_key(figure: Figure) -> str:
    return figure.name


def point_without_hardware(row: Mapping[str, Any]) -> str:
    """The point's identity on any hardware (its id minus the fingerprint); a row read back from
    Parquet (numpy numbers, NaN for a missing rate) names the same point as the row it was."""

    def plain(value: Any) -> Any:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return None
        return value.item() if hasattr(value, "item") else value

    keys = ("backend", "backend_mode", "model", "prompts_sha256", "concurrency", "rate", "open_loop")
    return short_hash(*(plain(row.get(k)) for k in keys), length=12)


@dataclass
class PointVerdict:
    """One point × figure of the new nightly."""

    point: str
    point_label: str
    figure: Figure
    value: Optional[float]  # the new nightly's geometric mean
    verdict: str = INCONCLUSIVE
    reason: str = ""
    prediction: Optional[prediction.Prediction] = None
    earlier: int = 0  # the earlier nightlies the judgement used
    status: str = ""  # SUSPECT, CONFIRMED, CLEARED or ""
    flagged_batch: str = ""  # the earlier nightly flagged for this point × figure, left out of the reference
    notes: list[str] = field(default_factory=list)

    @property
    def p_worse(self) -> Optional[float]:
        return self.prediction.p_worse if self.prediction is not None else None


@dataclass
class NightlyGate:
    batch: str
    verdicts: list[PointVerdict]
    margin: float
    fdr: float

    @property
    def regressions(self) -> list[PointVerdict]:
        return [v for v in self.verdicts if v.verdict == REGRESSION]


def geometric_mean(values: Sequence[float]) -> Optional[float]:
    good = [float(v) for v in values if v is not None and math.isfinite(v) and v > 0]
    return math.exp(sum(math.log(v) for v in good) / len(good)) if good else None


def nightly_values(rows: pd.DataFrame, column: str) -> pd.DataFrame:
    """One row per batch, oldest first: its start, its geometric mean of ``column`` over its untainted runs."""
    clean = rows[~rows["tainted"].fillna(False).astype(bool)] if "tainted" in rows else rows
    clean = clean[clean[column].notna()] if column in clean else clean.iloc[0:0]
    if clean.empty:
        return pd.DataFrame(columns=["batch", "started_at", "value"])
    batch = clean["batch"].fillna(clean["run_id"]) if "batch" in clean else clean["run_id"]
    grouped = clean.assign(_batch=batch).groupby("_batch", sort=False)
    out = pd.DataFrame(
        {
            "batch": list(grouped.groups),
            "started_at": [g["started_at"].min() for _, g in grouped],
            "value": [geometric_mean(g[column].tolist()) for _, g in grouped],
        }
    )
    return out.dropna(subset=["value"]).sort_values("started_at", kind="stable").reset_index(drop=True)


def since_last_change(values: Sequence[float]) -> int:
    """The index of the first nightly after the series' last change point (0: none)."""
    if len(values) < 4:
        return 0
    found = change_points(values)
    return found[-1].index if found else 0


def flagged(decisions: Optional[pd.DataFrame]) -> dict[tuple[str, str], tuple[str, str]]:
    """(point, figure) → (batch, status) of the latest nightly gate decision that regressed."""
    out: dict[tuple[str, str], tuple[str, str]] = {}
    if decisions is None or decisions.empty or "kind" not in decisions:
        return out
    mine = decisions[decisions["kind"] == KIND].sort_values("started_at", kind="stable")
    latest: dict[tuple[str, str], Mapping[str, Any]] = {}
    for row in mine.to_dict("records"):
        latest[(row["point"], row["figure"])] = row
    for key, row in latest.items():
        if row["verdict"] == REGRESSION:
            out[key] = (row["batch"], row.get("status") or SUSPECT)
    return out


def judge(
    history: pd.DataFrame,
    current: pd.DataFrame,
    figures: Sequence[Figure],
    *,
    margin: float = MARGIN,
    fdr: float = FDR,
    noise_dir: Optional[Path] = None,
    allow_other_hardware: bool = False,
    decisions: Optional[pd.DataFrame] = None,
    follow_up: bool = True,
) -> NightlyGate:
    """The new nightly ``current`` (history rows of one batch) against ``history`` (module doc).
    ``follow_up``: a regression is a suspect that the next nightly confirms or clears (the
    nightly series); False for a one-off judgement against a baseline."""
    if not 0 <= margin < 1:
        raise ValueError(f"the margin must be in [0, 1), a fraction (got {margin})")
    batches: list[str] = [str(b) for b in current["batch"].dropna().unique()] if "batch" in current else []
    batch = batches[0] if batches else ""
    if not history.empty and "batch" in history:
        history = history[history["batch"].fillna(history["run_id"]) != batch]
    suspects = flagged(decisions)
    verdicts: list[PointVerdict] = []
    for key, rows in current.groupby("point", sort=False):
        point, first = str(key), rows.iloc[0]
        for fig in figures:
            column = figure_column(fig.metric, fig.stat)
            verdicts.append(
                _judge_point(
                    point,
                    first,
                    rows,
                    fig,
                    column,
                    history,
                    margin,
                    noise_dir,
                    allow_other_hardware,
                    suspects.get((point, figure_key(fig))),
                )
            )
    rejected = benjamini_hochberg([v.p_worse for v in verdicts], fdr)
    for v, significant in zip(verdicts, rejected):
        if v.prediction is None:
            continue
        worse = v.prediction.worse
        if significant and worse > margin:
            v.verdict, v.reason = (
                REGRESSION,
                (
                    f"outside the prediction interval (p {v.prediction.p_worse:.3g}, Benjamini–Hochberg at {fdr:g}) "
                    f"and worse by {worse * 100:.1f}% > the {margin * 100:g}% margin"
                ),
            )
        else:
            v.verdict = PASS
            v.reason = (
                "better than before"
                if worse <= 0
                else f"worse by {worse * 100:.1f}%, within the margin of {margin * 100:g}%"
                if significant
                else f"within the prediction interval ({'worse' if worse > 0 else 'better'} by {abs(worse) * 100:.1f}%)"
            )
        if follow_up:
            _set_status(v)
    return NightlyGate(batch, verdicts, margin, fdr)


def _set_status(v: PointVerdict) -> None:
    """Whether this nightly confirms or clears the one flagged before it."""
    if v.verdict == REGRESSION:
        v.status = CONFIRMED if v.flagged_batch else SUSPECT
    elif v.flagged_batch:
        v.status = CLEARED


def _judge_point(
    point: str,
    first: pd.Series,
    rows: pd.DataFrame,
    fig: Figure,
    column: str,
    history: pd.DataFrame,
    margin: float,
    noise_dir: Optional[Path],
    allow_other_hardware: bool,
    suspect: Optional[tuple[str, str]],
) -> PointVerdict:
    tainted = rows["tainted"].fillna(False).astype(bool) if "tainted" in rows else pd.Series(False, index=rows.index)
    clean = rows[~tainted]
    values = clean[column].tolist() if column in clean else []
    v = PointVerdict(point, str(first["point_label"]), fig, geometric_mean(values))
    if v.value is None:
        v.reason = (
            "every run of this point is tainted: nothing to judge"
            if len(clean) == 0 and len(rows)
            else f"no {fig.name} in this nightly's runs"
        )
        return v
    same = history[history["point"] == point] if not history.empty else history
    if same.empty and not history.empty:
        records = [{str(k): x for k, x in r.items()} for r in history.to_dict("records")]
        anywhere = history.assign(_any=[point_without_hardware(r) for r in records])
        elsewhere = anywhere[anywhere["_any"] == point_without_hardware({str(k): x for k, x in first.items()})]
        if not elsewhere.empty:
            theirs = ", ".join(sorted(set(elsewhere["hardware"].astype(str))))
            if not allow_other_hardware:
                v.reason = (
                    f"the history of this point is from other hardware ({theirs}; this nightly's is "
                    f"{first['hardware']}): judged against it only with --allow-other-hardware"
                )
                return v
            v.notes.append(f"judged against other hardware ({theirs}): --allow-other-hardware")
            same = elsewhere.drop(columns="_any")
    nightlies = nightly_values(same, column) if not same.empty else pd.DataFrame(columns=["batch", "value"])
    if suspect is not None and suspect[1] == SUSPECT and suspect[0] in set(nightlies["batch"]):
        nightlies = nightlies[nightlies["batch"] != suspect[0]].reset_index(drop=True)
        v.flagged_batch = suspect[0]
        v.notes.append(
            f"nightly {suspect[0]} was flagged: left out of the reference until this one confirms or clears it"
        )
    start = since_last_change(nightlies["value"].tolist())
    earlier = nightlies["value"].iloc[start:].tolist()
    if start:
        v.notes.append(f"{start} nightlies before the last change point left out")
    v.earlier = len(earlier)
    if len(earlier) >= prediction.MIN_NIGHTLIES:
        v.prediction = prediction.from_history(earlier, v.value, fig.lower_is_better)
        return v
    spread = _floor_noise(noise_dir, first, same, fig)
    if earlier and spread is not None and spread.sd_run_apart:
        v.prediction = prediction.from_floor(earlier, v.value, spread.sd_run_apart, 2 * spread.blocks - 1,
                                             fig.lower_is_better)  # fmt: skip
        return v
    more = prediction.nightlies_needed(len(earlier))
    v.reason = (
        f"no noise to judge by: {len(earlier)} earlier nightl{'y' if len(earlier) == 1 else 'ies'} of this point "
        f"(the history decides from {prediction.MIN_NIGHTLIES}: {more} more), and no noise floor with σ_apart "
        "for this configuration and hardware; an interleaved A/B (python -m harness.ab) decides today"
    )
    return v


def _floor_noise(
    noise_dir: Optional[Path], first: pd.Series, same: pd.DataFrame, fig: Figure
) -> Optional[noise.FigureNoise]:
    """The stored floor's noise of this figure: the new nightly's configuration's on its hardware,
    else that of the earlier nightlies' configurations, the latest first (a commit that changed an
    engine setting changed the configuration's hash, not the noise of the point)."""
    if noise_dir is None:
        return None
    hardware = str(first.get("hardware") or "")
    configs = [str(first.get("config_sha256") or "")]
    if not same.empty and "config_sha256" in same:
        configs += [str(c) for c in reversed(same.sort_values("started_at")["config_sha256"].dropna().unique())]
    for config in dict.fromkeys(configs):
        floor = noise.load(noise_dir, config, hardware)
        if floor is not None and fig.name in floor.figures:
            return floor.figures[fig.name]
    return None


def decision_rows(gate: NightlyGate, started_at: Optional[str]) -> list[dict[str, Any]]:
    """The verdicts as the history's decisions (kind ``nightly-gate``), for the trend page and the
    next nightly's confirmation."""
    out = []
    for v in gate.verdicts:
        p = v.prediction
        out.append(
            {
                "id": short_hash(KIND, gate.batch, v.point, figure_key(v.figure)),
                "kind": KIND,
                "batch": gate.batch,
                "point": v.point,
                "point_label": v.point_label,
                "figure": figure_key(v.figure),
                "verdict": v.verdict,
                "status": v.status,
                "flagged_batch": v.flagged_batch,
                "reason": v.reason,
                "value": v.value,
                "reference": p.mean if p else None,
                "low": p.low if p else None,
                "high": p.high if p else None,
                "p_worse": p.p_worse if p else None,
                "earlier": v.earlier,
                "noise_source": p.source if p else None,
                "started_at": started_at,
            }
        )
    return out


def _cells(v: PointVerdict) -> list[str]:
    d = v.figure.definition
    p = v.prediction

    def show(x: Optional[float]) -> str:
        return "-" if x is None else f"{x * d.scale:.4g}"

    interval = f"[{show(p.low)}, {show(p.high)}]" if p else "-"
    change = f"{p.change * 100:+.1f}%" if p else "-"
    source = f"{p.source}, {p.n} nightl{'y' if p.n == 1 else 'ies'}" if p else f"{v.earlier} nightlies, no noise"
    verdict = v.verdict.upper() if v.verdict == REGRESSION else v.verdict
    if v.status:
        verdict += f" ({v.status})"
    return [v.point_label, f"{v.figure.label} ({d.unit})", show(v.value), show(p.mean if p else None), change,
            interval, source, verdict]  # fmt: skip


HEAD = ["point", "figure", "this nightly", "before", "change", "95% prediction interval", "noise from", "verdict"]


def markdown(gate: NightlyGate, name: str = "Nightly gate", against: str = "the nightlies before it") -> str:
    """The gate as markdown, for a CI job's summary."""
    regressed = gate.regressions
    title = f"### {name}: {len(regressed)} regression(s)" if regressed else f"### {name}: no regression"
    lines = [
        title,
        "",
        f"Each point against {against} (untainted, since the last change point): a point "
        f"**regresses** when it lies outside the 95% prediction interval on the worse side (Benjamini–Hochberg "
        f"at {gate.fdr:g} over {len(gate.verdicts)} point × figure) and is worse by more than "
        f"{gate.margin * 100:g}%. The noise comes from the history (≥ {prediction.MIN_NIGHTLIES} nightlies), "
        "else from a noise floor's σ_apart, else the point is inconclusive.",
        "",
        "| " + " | ".join(HEAD) + " |",
        "|" + "---|" * len(HEAD),
    ]
    for v in gate.verdicts:
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in _cells(v)) + " |")
    reasons = [f"- {v.point_label} · {v.figure.name}: {v.verdict}: {v.reason}" for v in gate.verdicts]
    notes = [f"- {v.point_label} · {v.figure.name}: {n}" for v in gate.verdicts for n in v.notes]
    lines += ["", "<details><summary>Why each verdict</summary>", "", *reasons, *notes, "", "</details>", ""]
    return "\n".join(lines)


def text(gate: NightlyGate) -> str:
    rows = [_cells(v) for v in gate.verdicts]
    out = text_table([[h] for h in HEAD], rows, align="llrrrrll")
    out += [f"{v.point_label} · {v.figure.name}: {v.reason}" for v in gate.verdicts if v.verdict != PASS]
    out += [f"{v.point_label} · {v.figure.name}: {n}" for v in gate.verdicts for n in v.notes]
    regressed = gate.regressions
    out.append(f"nightly gate: {len(regressed)} regression(s), "
               f"{sum(v.verdict == INCONCLUSIVE for v in gate.verdicts)} inconclusive, "
               f"{sum(v.verdict == PASS for v in gate.verdicts)} pass")  # fmt: skip
    return "\n".join(out)


def marks(decisions: Optional[pd.DataFrame], point: str, figure: str) -> dict[str, str]:
    """batch → how the gate left it, for one point × figure: SUSPECT (flagged, the next nightly
    not yet in), CONFIRMED (a regression two nightlies running) or CLEARED (flagged, then back)."""
    if decisions is None or decisions.empty or "kind" not in decisions:
        return {}
    mine = decisions[(decisions["kind"] == KIND) & (decisions["point"] == point) & (decisions["figure"] == figure)]
    out: dict[str, str] = {}
    for row in mine.sort_values("started_at", kind="stable").to_dict("records"):
        earlier = str(row.get("flagged_batch") or "")
        if row["status"] == SUSPECT:
            out[str(row["batch"])] = SUSPECT
        elif row["status"] == CONFIRMED:
            out[str(row["batch"])] = CONFIRMED
            if earlier:
                out[earlier] = CONFIRMED
        elif row["status"] == CLEARED and earlier:
            out[earlier] = CLEARED
    return out
