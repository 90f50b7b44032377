"""A large plan's sessions on disk (workloads/session_file.py): the same sessions read back, in
any order and in forked processes, and a plan kept there that is the plan kept in memory."""

import math
import multiprocessing
import pickle
import tempfile

import pytest

import workloads.base as base
import workloads.session_file as session_file
from workloads import workload_registry
from workloads.base import SessionSpec, TurnSpec, arrival_order, first_request_ids, fork_table, sorted_arrivals
from workloads.lora import LoraSettings
from workloads.session_file import SessionFile


def sessions() -> list[SessionSpec]:
    made = []
    for i in range(7):
        turns = [
            TurnSpec(f"prompt {i}.{t}", 4 + t, prompt_token_ids=list(range(i * 10 + t + 1))) for t in range(1 + i % 3)
        ]
        made.append(
            SessionSpec(
                i,
                turns,
                arrival_s=None if i == 3 else 7.0 - i,
                adapter="a" if i % 2 else None,
                job_id=i // 4 if i else None,
                parent=(0, 0) if i == 5 else None,
            )
        )
    return made


def filled(specs: list[SessionSpec]) -> SessionFile:
    kept = SessionFile()
    for s in specs:
        kept.append(s)
    return kept.seal()


@pytest.mark.parametrize("block", [1, 64, 1 << 20])  # a block smaller than a session, a few, the whole file
def test_sessions_read_back_as_they_were_written(monkeypatch, block):
    monkeypatch.setattr(session_file, "_READ_BLOCK", block)
    specs = sessions()
    kept = filled(specs)
    assert len(kept) == 7 and list(kept) == specs
    assert kept[4] == specs[4] and kept[-1] == specs[-1] and kept[2:5] == specs[2:5]
    assert kept[4] is not kept[4]  # a new object each read: the file is the plan
    with pytest.raises(IndexError):
        kept[7]


def test_the_figures_of_the_whole_are_kept_as_the_sessions_come():
    specs = sessions()
    kept = filled(specs)
    assert kept.num_requests == sum(len(s.turns) for s in specs)
    assert list(first_request_ids(kept)) == first_request_ids(specs)
    assert list(arrival_order(kept)) == list(arrival_order(specs))  # none counts as 0, ties in plan order
    assert list(sorted_arrivals(kept)) == list(sorted_arrivals(specs))
    assert math.isnan(kept.arrivals()[3])
    assert kept.has_parents and kept.has_jobs
    assert fork_table(kept, first_request_ids(kept)) == fork_table(specs, first_request_ids(specs))
    longest = max(((len(t.prompt_token_ids), t.output_len) for s in specs for t in s.turns), key=sum)
    assert kept.largest_request == longest


def test_the_file_has_no_name_so_no_ending_leaves_it_behind(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # TMPDIR
    specs = sessions()
    kept = filled(specs)
    assert list(tmp_path.iterdir()) == [] and kept[2] == specs[2] and kept.disk_bytes > 0


def _read_in_child(kept: SessionFile, index: int, out) -> None:
    out.send(pickle.dumps(kept[index]))


def test_forked_processes_read_it_without_sharing_a_position():
    specs = sessions()
    kept = filled(specs)
    ctx = multiprocessing.get_context("fork")
    got = []
    for index in (6, 0, 3):
        mine, theirs = ctx.Pipe()
        child = ctx.Process(target=_read_in_child, args=(kept, index, theirs))
        child.start()
        got.append(pickle.loads(mine.recv()))
        child.join()
        assert kept[1] == specs[1]  # this process's reads are untouched by the child's
    assert got == [specs[6], specs[0], specs[3]]


# --- a plan kept on disk ---------------------------------------------------------------------


def build(parts, name: str = "synthetic", **overrides):
    entry = workload_registry.get(name)
    lengths = {"input_len": 40} if name == "synthetic" else {"user_len": 20, "turns": 2}
    config = entry.config_cls(output_len=8, warmup_requests=2, **lengths, **overrides)
    return entry.cls(config).build(*parts, 3)


@pytest.mark.parametrize(
    "load",
    [
        {"num_requests": 30},
        {"num_requests": 30, "rate": 20.0},
        {"stages": [{"duration_s": 1, "rate": 10}, {"duration_s": 1, "rate": 20}]},
        {"num_requests": 30, "rate": 20.0, "lora": LoraSettings([{"name": "x", "path": "/a"}, {"name": "base"}])},
        {"name": "chat", "sessions": 12, "rate": 5.0},
    ],
    ids=["closed", "open", "stages", "lora", "chat"],
)
def test_a_plan_on_disk_is_the_plan_in_memory(parts, monkeypatch, load):
    in_memory = build(parts, **load)
    monkeypatch.setattr(base, "SPILL_AT", 5)
    on_disk = build(parts, **load)
    assert isinstance(on_disk.sessions, SessionFile) and isinstance(in_memory.sessions, list)
    assert ("lora" in load) == any(s.adapter for s in in_memory.sessions)
    assert list(on_disk.sessions) == in_memory.sessions and on_disk.warmup == in_memory.warmup
    assert on_disk.hashes() == in_memory.hashes()
    assert "".join(on_disk.json_chunks()) == "".join(in_memory.json_chunks())
    assert on_disk.num_requests == in_memory.num_requests and on_disk.last_arrival() == in_memory.last_arrival()

    def sizes(sessions):
        return [
            (len(t.prompt_token_ids), t.output_len) for s in sessions for t in s.turns if t.prompt_token_ids is not None
        ]

    largest = [max(sizes(in_memory.sessions), key=sum)] if sizes(in_memory.sessions) else []  # chat: none known
    assert list(on_disk.request_sizes()) == [*largest, *sizes(in_memory.warmup)]
