"""Small helpers on token-id sequences and token counts, shared by backends, workloads and the harness."""

from __future__ import annotations

from collections.abc import Sequence


def common_prefix(a: Sequence, b: Sequence) -> int:
    """The number of leading items ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def reconcile_counts(counts: Sequence[int], total: int) -> list[int]:
    """Per-chunk token counts scaled to sum to ``total`` (the request's n_out, the server's
    usage where it sends one), by largest remainder. Each chunk keeps at least one token,
    or, when there are more chunks than tokens, the first one does (TTFT is its time).

    Re-tokenized chunk text can count more tokens than the server produced (" t12" is 3
    SmolLM2 tokens where the server counted 1); reconciled, ITL per token has n_out − 1
    values whose mean is TPOT.
    """
    n = len(counts)
    if n == 0:
        return []
    if sum(counts) == total and min(counts) >= 0:
        return list(counts) if type(counts[0]) is int else [int(c) for c in counts]
    counts = [max(0, int(c)) for c in counts]
    if total < 1 or sum(counts) == total:
        return counts
    floor = [1] * n if total >= n else [1] + [0] * (n - 1)
    spare = total - sum(floor)
    weights = [c - f if c > f else 0 for c, f in zip(counts, floor)]
    weight_sum = sum(weights)
    if weight_sum == 0:
        weights, weight_sum = [1] * n, n
    shares = [spare * w / weight_sum for w in weights]
    scaled = [f + int(share) for f, share in zip(floor, shares)]
    for i in sorted(range(n), key=lambda i: shares[i] - int(shares[i]), reverse=True)[: total - sum(scaled)]:
        scaled[i] += 1
    return scaled
