"""core/processes.py: the processes a part started are told from those the interpreter keeps."""

from __future__ import annotations

import subprocess
import sys
from multiprocessing import resource_tracker

import psutil

from core.processes import descendants, is_interpreter_helper, started_since


def test_what_a_part_started_is_found_and_the_resource_tracker_is_not():
    before = descendants()
    resource_tracker.ensure_running()  # as an engine's first spawn does; kept until the interpreter exits
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        started = started_since(before)
        assert [p.pid for p in started] == [child.pid]
        tracker = [p for p in descendants() - before if p != child.pid]
        assert all(is_interpreter_helper(" ".join(psutil.Process(p).cmdline())) for p in tracker)
    finally:
        child.communicate(b"")
    assert started_since(before) == []


def test_the_helpers_are_told_by_their_command_line():
    assert is_interpreter_helper("python -B -c from multiprocessing.resource_tracker import main;main(22)")
    assert is_interpreter_helper("python -c from multiprocessing.forkserver import main; main(5, 6)")
    assert not is_interpreter_helper("VLLM::EngineCore")
