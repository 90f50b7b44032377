"""What a run keeps in memory of its finished requests: the summary's inputs, as columns, bounded.

Every finished request's row reaches requests.jsonl whole as it finishes
(:meth:`harness.results.store.RunWriter.append`); the summary needs much less of it, and a run
that lasts an hour at a thousand requests a second must not keep the rest. :class:`KeptRequests`
holds each request's scalars in typed columns (8 bytes a value; a column exists once some request
has a value in it, so an in-process run holds no HTTP phases), its text fields as codes into one
vocabulary, the engine's stage times it is told to keep as columns too, and no payloads (output
text, token ids, tool calls). The ITL gaps of all requests sit in one packed array per list, held
to a budget:

- while the run's gaps fit in ``itl_budget`` values (per list: per token and per chunk), every
  gap is kept and the pooled ITL distributions are exact;
- past it, the stride k doubles: each request keeps the gaps at positions φ, φ + k, φ + 2k, …
  (φ, its phase, from its request id), earlier requests are thinned to the same 1 in k, and
  the budget holds again. Every gap is kept with probability 1/k whatever its position, so the
  pooled percentiles are those of a uniform sample of the gaps; ``sampling()`` says so, and the
  summary carries it (``harness.itl_sampled``).

A request's own TPOT, E2E and TTFT are exact whatever the stride: they come from its stamps.

The summary reads a :class:`RequestTable` by column (:meth:`RequestTable.column`,
:meth:`RequestTable.gaps`) and takes subsets by mask (:meth:`RequestTable.where`): no Python
object a request at its end. Iterating a table yields :class:`KeptRecord` views, read-only, with
a :class:`RequestRecord`'s fields, for the few figures that walk requests one by one (agent jobs).
"""

from __future__ import annotations

import math
import typing
from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Optional, Union

import numpy as np

from harness.results.record import RequestOutcome, RequestRecord

# gaps kept per list before thinning: 1 M × 8 bytes = 8 MB each for ITL per token and per chunk (the
# summary copies them a few times at its end); the p99 of a uniform sample of a million gaps lies within
# the whole's p98.98–p99.02 (two standard errors)
ITL_BUDGET = 1_000_000

_GAP_LISTS = ("itl_s", "itl_chunk_s")
# a record's fields the summary never reads: not kept (they are in requests.jsonl)
_PAYLOADS = ("output_text", "output_token_ids", "ids_text", "tool_calls")
STATS_PREFIX = "engine_stats."  # the column of a kept engine stat


def _field_kinds() -> tuple[dict[str, type], tuple[str, ...]]:
    """RequestRecord's scalar fields by kind (int, float, bool: a number column) and its text fields."""
    numbers: dict[str, type] = {}
    texts = []
    for name, hint in typing.get_type_hints(RequestRecord).items():
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        base = args[0] if typing.get_origin(hint) is typing.Union and len(args) == 1 else hint
        if name in _PAYLOADS or name in _GAP_LISTS or name == "engine_stats":
            continue
        if base in (int, float, bool):
            numbers[name] = base
        elif base is str:
            texts.append(name)
        else:
            raise TypeError(f"RequestRecord.{name}: a field of a kind the kept columns do not hold ({hint})")
    return numbers, tuple(texts)


NUMBER_FIELDS, TEXT_FIELDS = _field_kinds()


def _phase(request_id: int, stride: int) -> int:
    """A request's first kept position at this stride (Knuth's multiplicative hash of its id)."""
    return ((request_id * 2654435761) >> 7) % stride


class _Columns:
    """The growing storage: number columns (NaN: none), text codes (0: none), packed gaps."""

    def __init__(self, stat_keys: Iterable[str], itl_budget: int) -> None:
        self.stat_keys = tuple(dict.fromkeys(stat_keys))  # in the caller's order
        self.itl_budget = max(int(itl_budget), 2)
        self.stride = 1
        self.n = 0
        self.numbers: dict[str, array] = {}
        self.codes: dict[str, array] = {}
        self.words: list[Optional[str]] = [None]
        self.word_code: dict[str, int] = {}
        self.gaps = {name: array("d") for name in _GAP_LISTS}
        self.ends = {name: array("q") for name in _GAP_LISTS}  # row i's gaps: [ends[i-1], ends[i])
        self.same = array("b")  # 1: the row's chunks are its tokens (one gap list serves both)
        self.kept = {name: 0 for name in _GAP_LISTS}  # gaps held now, per list (a shared list counts for both)
        self.seen = {name: 0 for name in _GAP_LISTS}  # gaps the requests had, per list

    def _number(self, name: str, value: Any) -> None:
        col = self.numbers.get(name)
        if col is None:
            if value is None:
                return
            col = self.numbers[name] = array("d", [math.nan]) * self.n
        col.append(math.nan if value is None else float(value))

    def _text(self, name: str, value: Optional[str]) -> None:
        col = self.codes.get(name)
        if col is None:
            if value is None:
                return
            col = self.codes[name] = array("i", [0]) * self.n
        if value is None:
            col.append(0)
            return
        if not isinstance(value, str):  # what a lying server sent: its text, as the table keeps it
            value = str(value)
        code = self.word_code.get(value)
        if code is None:
            code = self.word_code[value] = len(self.words)
            self.words.append(value)
        col.append(code)

    def add(self, record: RequestRecord) -> None:
        for name in NUMBER_FIELDS:
            self._number(name, getattr(record, name))
        for name in TEXT_FIELDS:
            self._text(name, getattr(record, name))
        stats = record.engine_stats or {}
        for key in self.stat_keys:
            v = stats.get(key)
            self._number(STATS_PREFIX + key, v if isinstance(v, (int, float)) and not isinstance(v, bool) else None)
        same = record.itl_chunk_s == record.itl_s
        self.same.append(1 if same else 0)
        self._pack("itl_s", record.request_id, record.itl_s)
        if same:
            self.seen["itl_chunk_s"] += len(record.itl_chunk_s)
            self.kept["itl_chunk_s"] += self.ends["itl_s"][-1] - (self.ends["itl_s"][-2] if self.n else 0)
            self.ends["itl_chunk_s"].append(len(self.gaps["itl_chunk_s"]))
        else:
            self._pack("itl_chunk_s", record.request_id, record.itl_chunk_s)
        self.n += 1
        while max(self.kept.values()) > self.itl_budget:
            self._thin()

    def _pack(self, name: str, request_id: int, gaps: Sequence[float]) -> None:
        self.seen[name] += len(gaps)
        before = len(self.gaps[name])
        self.gaps[name].extend(gaps if self.stride == 1 else gaps[_phase(request_id, self.stride) :: self.stride])
        self.kept[name] += len(self.gaps[name]) - before
        self.ends[name].append(len(self.gaps[name]))

    def span(self, name: str, i: int) -> tuple[int, int]:
        ends = self.ends[name]
        return (ends[i - 1] if i else 0), ends[i]

    def _thin(self) -> None:
        """Double the stride: each row keeps every other of its kept gaps (which one first, by its
        id: position φ at stride k stays φ or moves to φ + k at 2k)."""
        self.stride *= 2
        ids = self.numbers["request_id"]
        for name in _GAP_LISTS:
            old, new, ends = self.gaps[name], array("d"), array("q")
            for i in range(self.n):
                a, b = self.span(name, i)
                start = _phase(int(ids[i]), self.stride) // (self.stride // 2) % 2
                new.extend(old[a + start : b : 2])
                ends.append(len(new))
            self.gaps[name], self.ends[name] = new, ends
        lengths = np.diff(np.frombuffer(self.ends["itl_s"], dtype=np.int64), prepend=0)
        shared = int(lengths[np.frombuffer(self.same, dtype=np.int8).astype(bool)].sum())
        self.kept["itl_s"] = len(self.gaps["itl_s"])
        self.kept["itl_chunk_s"] = len(self.gaps["itl_chunk_s"]) + shared


class RequestTable(Sequence["KeptRecord"]):
    """Some rows of a run's kept requests (all of them, or a subset taken with :meth:`where`)."""

    def __init__(self, columns: _Columns, rows: Optional[np.ndarray] = None) -> None:
        self._columns = columns
        self._rows = rows  # None: every row

    def rows(self) -> np.ndarray:
        """The rows' indexes in the run's storage."""
        return np.arange(self._columns.n) if self._rows is None else self._rows

    def __len__(self) -> int:
        return self._columns.n if self._rows is None else len(self._rows)

    def has(self, name: str) -> bool:
        """Some request of the run had a value in column ``name`` (a field, or ``engine_stats.<key>``)."""
        return name in self._columns.numbers or name in self._columns.codes

    def column(self, name: str) -> np.ndarray:
        """A number column as float64 (NaN: no value); a text column as objects (None: no value)."""
        cols = self._columns
        if name in TEXT_FIELDS:
            codes = cols.codes.get(name)
            if codes is None:
                return np.full(len(self), None, dtype=object)
            words = np.array(cols.words, dtype=object)
            return words[self._take(np.frombuffer(codes, dtype=np.int32))]
        col = cols.numbers.get(name)
        if col is None:
            if name not in NUMBER_FIELDS and not name.startswith(STATS_PREFIX):
                raise KeyError(f"no kept column {name}")
            return np.full(len(self), np.nan)
        return self._take(np.frombuffer(col, dtype=np.float64))

    def _take(self, values: np.ndarray) -> np.ndarray:
        # a copy either way: a view would stop the storage's arrays from growing
        return values.copy() if self._rows is None else values[self._rows]

    def values(self, name: str) -> np.ndarray:
        """The column's values that are there (NaN left out)."""
        col = self.column(name)
        return col[~np.isnan(col)]

    def ok_mask(self) -> np.ndarray:
        codes = self._columns.codes.get("error")
        if codes is None:
            return np.ones(len(self), dtype=bool)
        return self._take(np.frombuffer(codes, dtype=np.int32)) == 0

    def where(self, mask: np.ndarray) -> RequestTable:
        """The rows where ``mask`` (a bool array over this table's rows) holds."""
        return RequestTable(self._columns, self.rows()[np.asarray(mask, dtype=bool)])

    def ok(self) -> RequestTable:
        """The completed requests (no error)."""
        return self.where(self.ok_mask())

    def gaps(self, name: str) -> np.ndarray:
        """The kept gaps of list ``name`` (itl_s, itl_chunk_s) of these rows, pooled in row order
        (as the requests' own lists would be: a mean's last digit depends on the order)."""
        cols = self._columns
        same = np.frombuffer(cols.same, dtype=np.int8).astype(bool)
        if name == "itl_s" or same.all():
            selected = np.ones(cols.n, dtype=bool)
            if self._rows is not None:
                selected[:] = False
                selected[self._rows] = True
            return _pooled(cols, "itl_s", selected)
        # a row's chunk gaps: its own, or its token gaps where they are the same
        token_ends, chunk_ends = (np.frombuffer(cols.ends[n], dtype=np.int64) for n in _GAP_LISTS)
        token_lens, chunk_lens = np.diff(token_ends, prepend=0), np.diff(chunk_ends, prepend=0)
        flat = np.concatenate(
            [
                np.frombuffer(cols.gaps["itl_s"], dtype=np.float64),
                np.frombuffer(cols.gaps["itl_chunk_s"], dtype=np.float64),
            ]
        )
        rows = self.rows()
        starts = np.where(same, token_ends - token_lens, len(cols.gaps["itl_s"]) + chunk_ends - chunk_lens)[rows]
        lengths = np.where(same, token_lens, chunk_lens)[rows]
        return flat[np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(int(lengths.sum()))]

    def sampling(self) -> Optional[dict[str, Any]]:
        """None while every gap is kept; else the stride and, per list, the gaps kept and seen."""
        cols = self._columns
        if cols.stride == 1:
            return None
        return {
            "one_in": cols.stride,
            **{f"{name}_kept": cols.kept[name] for name in _GAP_LISTS},
            **{f"{name}_seen": cols.seen[name] for name in _GAP_LISTS},
        }

    @typing.overload
    def __getitem__(self, index: int) -> KeptRecord: ...

    @typing.overload
    def __getitem__(self, index: slice) -> list[KeptRecord]: ...

    def __getitem__(self, index: Union[int, slice]) -> Union[KeptRecord, list[KeptRecord]]:
        rows = self.rows()
        if isinstance(index, slice):
            return [KeptRecord(self._columns, int(i)) for i in rows[index]]
        return KeptRecord(self._columns, int(rows[index]))

    def __iter__(self) -> Iterator[KeptRecord]:
        for i in self.rows():
            yield KeptRecord(self._columns, int(i))


def _pooled(cols: _Columns, name: str, selected: np.ndarray) -> np.ndarray:
    """The packed gaps of list ``name`` of the rows ``selected`` (a bool per row), in row order."""
    flat = np.frombuffer(cols.gaps[name], dtype=np.float64)
    if selected.all():
        return flat.copy()
    ends = np.frombuffer(cols.ends[name], dtype=np.int64)
    lengths = np.diff(ends, prepend=0)
    return flat[np.repeat(selected, lengths)]


class KeptRequests(RequestTable):
    """The run's finished requests as the summary reads them: every row, growing as they finish.

    ``stat_keys``: the ``engine_stats`` keys kept (the engine's stage times the summary reads:
    :data:`harness.results.metrics.ENGINE_STAGES`); other stats are in requests.jsonl only."""

    def __init__(self, itl_budget: int = ITL_BUDGET, stat_keys: Iterable[str] = ()) -> None:
        super().__init__(_Columns(stat_keys, itl_budget))

    @property
    def stride(self) -> int:
        return self._columns.stride

    @stride.setter
    def stride(self, value: int) -> None:
        self._columns.stride = value

    def add(self, record: RequestRecord) -> KeptRecord:
        """Keep ``record``'s summary inputs; the full record is the caller's (it is on disk already)."""
        self._columns.add(record)
        return KeptRecord(self._columns, self._columns.n - 1)


def as_table(records: Union[RequestTable, Iterable[RequestRecord]], stat_keys: Iterable[str] = ()) -> RequestTable:
    """A table as is; records (a test's, a killed run's rows) kept into one, every gap kept."""
    if isinstance(records, RequestTable):
        return records
    table = KeptRequests(itl_budget=1 << 62, stat_keys=stat_keys)
    for r in records:
        table.add(r)
    return table


class KeptRecord(RequestOutcome):
    """One kept request, read from its table's columns: a :class:`RequestRecord`'s fields, its
    payloads None and its ``engine_stats`` the kept stage times."""

    __slots__ = ("_columns", "_i")

    def __init__(self, columns: _Columns, i: int) -> None:
        self._columns, self._i = columns, i

    if TYPE_CHECKING:  # a RequestRecord's fields: properties set on the class below it, one per field

        def __getattr__(self, name: str) -> Any: ...

    @property
    def engine_stats(self) -> dict[str, Any]:
        out = {}
        for key in self._columns.stat_keys:
            col = self._columns.numbers.get(STATS_PREFIX + key)
            if col is not None and col[self._i] == col[self._i]:
                out[key] = col[self._i]
        return out

    @property
    def itl_s(self) -> array:
        a, b = self._columns.span("itl_s", self._i)
        return self._columns.gaps["itl_s"][a:b]

    @property
    def itl_chunk_s(self) -> array:
        if self._columns.same[self._i]:
            return self.itl_s
        a, b = self._columns.span("itl_chunk_s", self._i)
        return self._columns.gaps["itl_chunk_s"][a:b]

    def __repr__(self) -> str:
        return f"KeptRecord(request_id={self.request_id}, error={self.error!r})"


def _number_getter(name: str, kind: type) -> property:
    def get(self: KeptRecord) -> Any:
        col = self._columns.numbers.get(name)
        if col is None:
            return None
        v = col[self._i]
        return None if v != v else kind(v)

    return property(get)


def _text_getter(name: str) -> property:
    def get(self: KeptRecord) -> Optional[str]:
        col = self._columns.codes.get(name)
        return None if col is None else self._columns.words[col[self._i]]

    return property(get)


for _name, _kind in NUMBER_FIELDS.items():
    setattr(KeptRecord, _name, _number_getter(_name, _kind))
for _name in TEXT_FIELDS:
    setattr(KeptRecord, _name, _text_getter(_name))
for _name in _PAYLOADS:
    setattr(KeptRecord, _name, property(lambda self: None))
