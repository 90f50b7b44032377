"""The regression gate's statistics: the run as the unit, intervals from runs, three verdicts,
false discoveries over many comparisons, and the noise floor (docs/gate.md has the formulas)."""
