"""Request records made up for the results and report tests, and what the client tests read from real ones."""

from __future__ import annotations

import pandas as pd

from harness.results.record import RequestRecord


def record(i, ttft=0.1, e2e=1.0, n_out=10, requested=10, exact=True, error=None, turn=0, prompt=50, expected=50):
    return RequestRecord(
        request_id=i,
        session_id=i,
        turn=turn,
        prompt_tokens=prompt,
        output_tokens=n_out if not error else 0,
        requested_output_tokens=requested,
        exact_output_len=exact,
        expected_prompt_tokens=expected,
        scheduled_s=None,
        start_s=0.0,
        end_s=e2e,
        ttft_s=None if error else ttft,
        tpot_s=None if error else (e2e - ttft) / (n_out - 1),
        e2e_s=None if error else e2e,
        itl_s=[] if error else [(e2e - ttft) / (n_out - 1)] * (n_out - 1),
        error=error,
    )


def peak_in_flight(df: pd.DataFrame) -> int:
    """The most requests in flight at once, from a requests table's send and end times."""
    events = sorted([(s, 1) for s in df.start_s] + [(e, -1) for e in df.end_s], key=lambda e: (e[0], e[1]))
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak
