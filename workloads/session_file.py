"""A large plan's sessions on disk: a read-only sequence, read back a session at a time.

A timed run at a high rate plans millions of sessions before its first request; as Python objects
a session of a 32-token prompt holds about 670 bytes and one of 512 tokens about 6.7 KB
(benchmarks/plan_memory.py), so an hour at 1,000 requests/s would hold several gigabytes. A plan
of more than :data:`SPILL_AT` sessions is instead written, as it is built, to an unlinked
temporary file (``TMPDIR``; gone with the process on any ending, SIGKILL included), one pickled
session after another. What stays in memory is 8 bytes a session each of: its offset, its
arrival time and its first request id; and a few figures of the whole (requests, agent jobs).

Reads use ``os.pread`` on the file's descriptor, so the forked client workers, which inherit
it, read the same file without sharing a position. A session read back is a new object each
time: a reader must not change it expecting the plan to keep the change.
"""

from __future__ import annotations

import math
import os
import pickle
import tempfile
from array import array
from collections.abc import Iterator, Sequence
from typing import Any, Optional, Union, overload

# A session is a workloads.base.SessionSpec (pickled here, so never imported: base builds these files)
SessionSpec = Any

# Sessions beyond which a plan is kept on disk: two of plan_pool's chunks, far more than a
# run of a count usually has, far fewer than a long timed run at a high rate
SPILL_AT = 20_000
# bytes read at a time when the whole file is walked in order (the hashes, workload.json)
_READ_BLOCK = 1 << 20


class SessionFile(Sequence[SessionSpec]):
    """Sessions appended once, in plan order (:meth:`append`), then read (:meth:`seal` first)."""

    def __init__(self, directory: Optional[str] = None):
        self._file = tempfile.TemporaryFile(prefix="harness-plan-", dir=directory)
        self._offsets = array("q", [0])  # session i is bytes [offsets[i], offsets[i + 1])
        self._arrivals = array("d")  # NaN: no arrival time (a closed loop)
        self._first_ids = array("q")  # requests are numbered in plan order, turn by turn
        self.num_requests = 0
        self.has_parents = False  # some session is a sub-agent (waits on its parent's turn)
        self.has_jobs = False  # some session belongs to an agent job
        # the request known in advance that needs the most context: (prompt tokens, output tokens)
        self.largest_request: Optional[tuple[int, int]] = None
        self._sealed = False

    def append(self, session: SessionSpec) -> None:
        assert not self._sealed, "a SessionFile is read only once sealed"
        blob = pickle.dumps(session, protocol=pickle.HIGHEST_PROTOCOL)
        self._file.write(blob)
        self._offsets.append(self._offsets[-1] + len(blob))
        self._arrivals.append(math.nan if session.arrival_s is None else session.arrival_s)
        self._first_ids.append(self.num_requests)
        self.num_requests += len(session.turns)
        self.has_parents = self.has_parents or session.parent is not None
        self.has_jobs = self.has_jobs or session.job_id is not None
        for turn in session.turns:
            if turn.prompt_token_ids is not None:
                size = (len(turn.prompt_token_ids), turn.output_len)
                if self.largest_request is None or sum(size) > sum(self.largest_request):
                    self.largest_request = size

    def seal(self) -> SessionFile:
        """Every session is in: flush the writes, so the descriptor reads them."""
        self._file.flush()
        self._sealed = True
        return self

    def close(self) -> None:
        self._file.close()

    def __len__(self) -> int:
        return len(self._arrivals)

    @overload
    def __getitem__(self, index: int) -> SessionSpec: ...

    @overload
    def __getitem__(self, index: slice) -> list[SessionSpec]: ...

    def __getitem__(self, index: Union[int, slice]) -> Union[SessionSpec, list[SessionSpec]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"session {index} of a plan of {n}")
        start, end = self._offsets[index], self._offsets[index + 1]
        return pickle.loads(os.pread(self._fd(), end - start, start))

    def __iter__(self) -> Iterator[SessionSpec]:
        """In plan order, a block of the file at a time."""
        fd, n, i = self._fd(), len(self), 0
        while i < n:
            start = self._offsets[i]
            j = i + 1  # at least one session a block, however long
            while j < n and self._offsets[j + 1] - start <= _READ_BLOCK:
                j += 1
            block = memoryview(os.pread(fd, self._offsets[j] - start, start))
            for k in range(i, j):
                yield pickle.loads(block[self._offsets[k] - start : self._offsets[k + 1] - start])
            i = j

    @property
    def disk_bytes(self) -> int:
        return self._offsets[-1]

    def arrivals(self) -> array:
        """Each session's arrival time, NaN where it has none, in plan order."""
        return self._arrivals

    def first_request_ids(self) -> array:
        return self._first_ids

    def _fd(self) -> int:
        assert self._sealed, "seal() a SessionFile before reading it"
        return self._file.fileno()
