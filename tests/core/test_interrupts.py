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
