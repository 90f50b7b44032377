"""Request records made up for the results and report tests."""

from __future__ import annotations

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
