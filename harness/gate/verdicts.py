"""Three verdicts, as Chromium's Pinpoint gives them: regression, pass, inconclusive.

With ``w`` the candidate's "worse ratio" (B/A for a latency, A/B for a rate: w > 1 is worse),
its one-sided (1 − α) bounds ``w_lo`` and ``w_hi`` (:mod:`harness.gate.intervals`), and the
margin δ (the user's threshold, raised to k × the noise floor: :mod:`harness.gate.noise`):

- **regression**: w_lo > 1 (worse, beyond noise) and w > 1 + δ (by more than the margin);
- **pass**: w_hi < 1 + δ (shown not to regress by more than the margin);
- **inconclusive**: neither: add runs; at the cap, warn and never fail.

A within-run interval (one run against one run, no noise floor known) is always inconclusive:
it lacks the run-to-run noise. Over many comparisons, ``worse_significant`` replaces the test
``w_lo > 1`` by a Benjamini–Hochberg decision on the p-values of "worse"
(:mod:`harness.gate.multiple`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from harness.gate.figures import Figure
from harness.gate.intervals import METHOD_TEXT, Interval

REGRESSION = "regression"
PASS = "pass"
INCONCLUSIVE = "inconclusive"
VERDICTS = (REGRESSION, PASS, INCONCLUSIVE)


@dataclass(frozen=True)
class Decision:
    figure: Figure
    interval: Interval
    margin: float  # δ, a fraction
    margin_source: str  # what set δ: "threshold 5%" or "3 × noise floor 2.1%"
    verdict: str
    reason: str

    @property
    def worse(self) -> float:
        """w − 1: how much worse the candidate is (negative: better), a fraction."""
        return self.worse_ratio - 1

    @property
    def worse_ratio(self) -> float:
        i = self.interval
        return i.ratio if self.figure.lower_is_better else 1 / i.ratio

    @property
    def worse_bounds(self) -> tuple[float, float]:
        """(w_lo, w_hi), the one-sided (1 − α) bounds of w."""
        i = self.interval
        return (i.lower_bound, i.upper_bound) if self.figure.lower_is_better else (1 / i.upper_bound, 1 / i.lower_bound)

    @property
    def change(self) -> float:
        """ratio − 1: the candidate's change of the figure (a fraction, signed as the figure moved)."""
        return self.interval.ratio - 1

    @property
    def p_worse(self) -> Optional[float]:
        p = self.interval.p_greater
        if p is None:
            return None
        return p if self.figure.lower_is_better else 1 - p

    def text(self) -> str:
        i = self.interval
        runs = f"{i.blocks} blocks" if i.blocks else f"{i.n_a} vs {i.n_b} runs"
        conf = f"{(1 - i.alpha) * 100:.4g}%"
        return (
            f"{self.figure.label}: {self.verdict.upper()} {self.change * 100:+.1f}% "
            f"[{(i.lower_bound - 1) * 100:+.1f}%, {(i.upper_bound - 1) * 100:+.1f}%] (one-sided {conf} bounds; "
            f"{runs}, {METHOD_TEXT[i.method]}; "
            f"margin {self.margin * 100:.1f}%: {self.margin_source}) — {self.reason}"
        )


def decide(
    figure: Figure, interval: Interval, margin: float, margin_source: str = "", worse_significant: Optional[bool] = None
) -> Decision:
    """The verdict of one figure (module doc)."""
    if margin < 0:
        raise ValueError(f"the margin must be >= 0 (got {margin})")
    probe = Decision(figure, interval, margin, margin_source or f"threshold {margin * 100:g}%", "", "")
    w, (w_lo, w_hi) = probe.worse_ratio, probe.worse_bounds
    if not interval.decides:
        return _with(
            probe,
            INCONCLUSIVE,
            "one run against one run: within-run noise only, and no noise floor "
            "is known for this configuration and machine",
        )
    significant = w_lo > 1 if worse_significant is None else worse_significant
    if significant and w > 1 + margin:
        return _with(probe, REGRESSION, f"worse beyond noise and by more than the {margin * 100:.1f}% margin")
    if w_hi < 1 + margin:
        return _with(probe, PASS, f"shown not to be worse by {margin * 100:.1f}% or more")
    return _with(probe, INCONCLUSIVE, "neither shown worse beyond the margin nor within it: more runs needed")


def _with(d: Decision, verdict: str, reason: str) -> Decision:
    return Decision(d.figure, d.interval, d.margin, d.margin_source, verdict, reason)
