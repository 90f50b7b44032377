"""Ctrl-C held off while a step that must finish runs."""

import os
import signal
import threading

import pytest
from conftest import as_foreground_job

from core.interrupts import interrupt_behind, interruptible, interrupts_held, interrupts_kept


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


def test_a_call_blocked_where_ctrl_c_cannot_reach_is_left_and_the_interrupt_raised():
    # the call waits on something no signal ends (as vLLM's constructor on its engine core's
    # "ready"); Ctrl-C comes once it is waiting, and is raised in the waiting thread
    waiting, release, ended = threading.Event(), threading.Event(), []

    def blocked():
        waiting.set()
        release.wait(60)
        return "built"

    def press_once_waiting():
        waiting.wait(60)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=press_once_waiting, daemon=True).start()
    try:
        with pytest.raises(KeyboardInterrupt):
            interruptible(blocked, on_interrupt=lambda: ended.append(True), name="blocked")
        assert ended == [True]  # what the call waited on was ended before the interrupt went on
    finally:
        release.set()  # the call's thread, left to its wait, returns


def test_the_calls_result_and_its_exception_come_back():
    assert interruptible(lambda: 42, on_interrupt=lambda: None, name="answer") == 42

    def fails():
        raise ValueError("no engine")

    with pytest.raises(ValueError, match="no engine"):
        interruptible(fails, on_interrupt=lambda: None, name="fails")


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


def test_a_ctrl_c_swallowed_in_a_callback_is_sent_again(tmp_path):
    """A KeyboardInterrupt raised inside a weakref callback is "ignored" by Python: the entry
    modules' hook sends SIGINT again, so the press still ends the program."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    script = (
        "import signal, sys, threading, weakref\n"
        "from core.interrupts import keep_every_interrupt\n"
        "keep_every_interrupt()\n"
        "class Thing: pass\n"
        "def swallowed(ref):\n"
        "    raise KeyboardInterrupt  # as a SIGINT handled inside a callback raises it\n"
        "thing = Thing(); ref = weakref.ref(thing, swallowed)\n"
        "del thing  # the callback runs here; Python reports its exception as ignored\n"
        "try:\n"
        "    threading.Event().wait(60)  # what a lost press would leave waiting\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted'); sys.exit(0)\n"
        "print('the press was lost'); sys.exit(1)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=as_foreground_job,  # Ctrl-C as a terminal's foreground job has it
    )
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "interrupted", "")


def set_then_restore(step):
    """A library's pattern that a Ctrl-C breaks: its ``finally`` reads what its ``try`` had not set yet."""
    try:
        step()
        old = "set"
    finally:
        print(old)  # UnboundLocalError when step() raised


def ctrl_c():
    raise KeyboardInterrupt


def test_an_error_raised_as_a_ctrl_c_unwinds_is_raised_as_the_ctrl_c():
    with pytest.raises(KeyboardInterrupt) as raised, interrupts_kept():
        set_then_restore(ctrl_c)
    assert isinstance(raised.value.__cause__, UnboundLocalError)  # both tracebacks are kept


def test_a_ctrl_c_wrapped_twice_and_its_kind_are_kept():
    class Terminated(KeyboardInterrupt):  # as SIGTERM's Interrupted (harness/run/held.py)
        pass

    def sigterm():
        raise Terminated("SIGTERM")

    def wrapped():
        try:
            set_then_restore(sigterm)
        except UnboundLocalError as exc:
            raise ValueError("while formatting the config") from exc

    with pytest.raises(Terminated, match="SIGTERM"), interrupts_kept():
        wrapped()


def test_an_error_of_its_own_is_left_as_it_is():
    with pytest.raises(UnboundLocalError) as raised, interrupts_kept():
        set_then_restore(lambda: 1 / 0)  # the ZeroDivisionError behind it is no Ctrl-C
    assert interrupt_behind(raised.value) is None
