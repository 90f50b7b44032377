"""What a run keeps in memory of its finished requests: the summary's inputs, bounded.

Every finished request's row reaches requests.jsonl whole as it finishes
(:meth:`harness.results.store.RunWriter.append`); the summary needs much less of it, and a run
that lasts an hour at a thousand requests a second must not keep the rest. A kept record is the
row without its payloads (the output text, the token ids, the tool calls, the engine's stats
but for the stage times the summary reads: :data:`harness.results.metrics.ENGINE_STAGES`), its gaps packed
(8 bytes each, where a list of Python floats costs 32), and the ITL gaps of all kept records
held to a budget:

- while the run's gaps fit in ``itl_budget`` values (per list: per token and per chunk), every
  gap is kept and the pooled ITL distributions are exact;
- past it, the stride k doubles: each request keeps the gaps at positions φ, φ + k, φ + 2k, …
  (φ, its phase, from its request id), earlier requests are thinned to the same 1 in k, and
  the budget holds again. Every gap is kept with probability 1/k whatever its position, so the
  pooled percentiles are those of a uniform sample of the gaps; ``sampling()`` says so, and the
  summary carries it (``harness.itl_sampled``).

A request's own TPOT, E2E and TTFT are exact whatever the stride: they come from its stamps.
"""
from __future__ import annotations

import dataclasses
from array import array
from typing import Any, Iterator, Optional, Sequence, Union, overload

from harness.results.metrics import ENGINE_STAGES
from harness.results.record import RequestRecord

# gaps kept per list before thinning: 4 M × 8 bytes = 32 MB each for ITL per token and per chunk
ITL_BUDGET = 4_000_000

_GAP_LISTS = ("itl_s", "itl_chunk_s")


def _phase(request_id: int, stride: int) -> int:
    """A request's first kept position at this stride (Knuth's multiplicative hash of its id)."""
    return ((request_id * 2654435761) >> 7) % stride


class KeptRequests(Sequence[RequestRecord]):
    """The run's finished requests as the summary reads them (a sequence of slim records)."""

    def __init__(self, itl_budget: int = ITL_BUDGET) -> None:
        self.itl_budget = max(int(itl_budget), 2)
        self.stride = 1
        self._records: list[RequestRecord] = []
        self._kept = {name: 0 for name in _GAP_LISTS}  # gaps held now, per list
        self._seen = {name: 0 for name in _GAP_LISTS}  # gaps the requests had, per list

    def add(self, record: RequestRecord) -> RequestRecord:
        """Keep ``record``'s slim form; the full record is the caller's (it is on disk already)."""
        same = record.itl_chunk_s == record.itl_s  # a token a chunk: one array serves both
        itl = self._pack("itl_s", record.request_id, record.itl_s)
        chunk = self._pack("itl_chunk_s", record.request_id, record.itl_chunk_s) if not same else itl
        if same:
            self._seen["itl_chunk_s"] += len(record.itl_chunk_s)
            self._kept["itl_chunk_s"] += len(chunk)
        stats = record.engine_stats
        slim = dataclasses.replace(
            record, itl_s=itl, itl_chunk_s=chunk, output_text=None, output_token_ids=None, ids_text=None,
            tool_calls=None,
            engine_stats={k: stats[k] for k in ENGINE_STAGES if k in stats} if stats else {},
        )
        self._records.append(slim)
        while max(self._kept.values()) > self.itl_budget:
            self._thin()
        return slim

    def sampling(self) -> Optional[dict[str, Any]]:
        """None while every gap is kept; else the stride and, per list, the gaps kept and seen."""
        if self.stride == 1:
            return None
        return {"one_in": self.stride, **{f"{name}_kept": self._kept[name] for name in _GAP_LISTS},
                **{f"{name}_seen": self._seen[name] for name in _GAP_LISTS}}

    def _pack(self, name: str, request_id: int, gaps: Sequence[float]) -> array:
        self._seen[name] += len(gaps)
        packed = array("d", gaps if self.stride == 1 else gaps[_phase(request_id, self.stride)::self.stride])
        self._kept[name] += len(packed)
        return packed

    def _thin(self) -> None:
        """Double the stride: each record keeps every other of its kept gaps (which one first, by
        its id: position φ at stride k stays φ or moves to φ + k at 2k)."""
        self.stride *= 2
        self._kept = {name: 0 for name in _GAP_LISTS}
        for i, r in enumerate(self._records):
            start = _phase(r.request_id, self.stride) // (self.stride // 2) % 2
            itl = array("d", r.itl_s[start::2])
            chunk = itl if r.itl_chunk_s is r.itl_s else array("d", r.itl_chunk_s[start::2])
            self._kept["itl_s"] += len(itl)
            self._kept["itl_chunk_s"] += len(chunk)
            self._records[i] = dataclasses.replace(r, itl_s=itl, itl_chunk_s=chunk)

    def __len__(self) -> int:
        return len(self._records)

    @overload
    def __getitem__(self, index: int) -> RequestRecord: ...

    @overload
    def __getitem__(self, index: slice) -> list[RequestRecord]: ...

    def __getitem__(self, index: Union[int, slice]) -> Union[RequestRecord, list[RequestRecord]]:
        return self._records[index]

    def __iter__(self) -> Iterator[RequestRecord]:
        return iter(self._records)
