"""Shared-memory segments an engine left behind: found, and removed only when no process uses them."""

from multiprocessing import shared_memory

from core import shm


def test_an_orphaned_segment_is_removed_and_a_mapped_one_kept():
    before = shm.segments()
    orphan = shared_memory.SharedMemory(create=True, size=4096)
    mapped = shared_memory.SharedMemory(create=True, size=4096)
    try:
        orphan.close()  # unmapped and its file closed, never unlinked: what a killed creator leaves
        new = shm.segments() - before
        assert {orphan.name, mapped.name} <= new
        assert shm.remove_orphans(new) == [orphan.name]
        assert orphan.name not in shm.segments() and mapped.name in shm.segments()
        assert shm.remove_orphans([orphan.name]) == []  # already gone: nothing to do
    finally:
        mapped.close()
        mapped.unlink()


def test_other_names_are_never_listed(tmp_path):
    (tmp_path / "psm_abc").write_bytes(b"x")
    (tmp_path / "sem.mp-1").write_bytes(b"x")
    (tmp_path / "other").write_bytes(b"x")
    assert shm.segments(tmp_path) == {"psm_abc"}
    assert shm.remove_orphans(["psm_abc"], tmp_path) == ["psm_abc"] and not (tmp_path / "psm_abc").exists()
