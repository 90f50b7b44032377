"""Ctrl-C held off while a step that must finish runs."""

import os
import signal
import threading

from core.interrupts import interrupts_held


def test_a_press_is_recorded_not_raised_and_the_handler_comes_back():
    before = signal.getsignal(signal.SIGINT)
    done = []
    with interrupts_held() as pressed:
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        done.append(True)  # still runs after the presses
    assert done == [True]
    assert pressed and set(pressed) == {signal.SIGINT}
    assert signal.getsignal(signal.SIGINT) is before


def test_outside_the_main_thread_nothing_changes():
    seen = []

    def in_a_thread():
        with interrupts_held() as pressed:
            seen.append((pressed, signal.getsignal(signal.SIGINT)))

    before = signal.getsignal(signal.SIGINT)
    thread = threading.Thread(target=in_a_thread)
    thread.start()
    thread.join()
    assert seen == [([], before)]


def test_an_entry_module_stopped_as_it_starts_exits_130_even_after_a_string_exec(tmp_path):
    """Under ``python -m``, a KeyboardInterrupt that ended a string exec (as a dataclass's methods
    are made during the imports) marks the interpreter to end by SIGINT: sys.exit(130) gave -2."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    (tmp_path / "starting.py").write_text(
        "from core.interrupts import exit_interrupted_at_start\n"
        "try:\n"
        "    exec('raise KeyboardInterrupt', {})\n"
        "except KeyboardInterrupt:\n"
        "    exit_interrupted_at_start('interrupted before it started')\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{root}"}
    done = subprocess.run([sys.executable, "-m", "starting"], env=env, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr.strip()) == (130, "interrupted before it started")
