"""The session's loop runner: a Ctrl-C cancels what runs, then is raised, whenever it lands."""

import asyncio
import os
import signal
import sys
import threading

import pytest

from harness.client.event_loops import LoopRunner


def press_ctrl_c() -> None:
    os.kill(os.getpid(), signal.SIGINT)  # its handler runs before os.kill returns


@pytest.fixture
def runner():
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler, "a test here would stop the suite"
    runner = LoopRunner()
    yield runner
    runner.close()


@pytest.fixture
def press_once_the_handler_is_set(monkeypatch):
    """A Ctrl-C right after a SIGINT handler other than Python's is set: before the loop has run
    anything (where asyncio.Runner forgets it)."""
    real = signal.signal

    def set_then_press(signum, handler):
        previous = real(signum, handler)
        if signum == signal.SIGINT and handler not in (signal.default_int_handler, signal.SIG_DFL, signal.SIG_IGN):
            press_ctrl_c()
        return previous

    monkeypatch.setattr(signal, "signal", set_then_press)


def test_a_ctrl_c_cancels_the_coroutine_which_unwinds_then_is_raised(runner):
    unwound = []

    async def measure():
        try:
            press_ctrl_c()
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            unwound.append("cancelled")  # where the requests in flight are recorded
            raise

    with pytest.raises(KeyboardInterrupt):
        runner.run(measure())
    assert unwound == ["cancelled"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert runner.run(asyncio.sleep(0, "the next point")) == "the next point"  # the same loop serves on


def test_a_ctrl_c_before_the_loop_ran_anything_is_not_forgotten(runner, press_once_the_handler_is_set):
    began = []

    async def measure():
        began.append(True)

    with pytest.raises(KeyboardInterrupt):
        runner.run(measure())
    assert not began
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.Runner is Python ≥ 3.11")
def test_asyncio_runner_forgets_that_ctrl_c(press_once_the_handler_is_set):
    """Why LoopRunner exists (harness/client/event_loops.py). Should this and the test of a late
    Ctrl-C below fail, CPython has fixed asyncio.Runner, which can serve again where that Python
    is the oldest supported."""
    with asyncio.Runner() as asyncio_runner, pytest.raises(asyncio.CancelledError):
        asyncio_runner.run(asyncio.sleep(0))


async def ends_as_ctrl_c_comes(presses: int = 1) -> str:
    loop = asyncio.get_running_loop()
    loop.create_task(asyncio.sleep(60))  # left to close() to cancel, over more than one turn of the loop
    for _ in range(presses):
        loop.call_soon(press_ctrl_c)  # runs once this coroutine is done, before the loop returns
    return "measured"


def test_a_ctrl_c_as_the_coroutine_ends_is_raised_once_the_loop_returned(runner):
    with pytest.raises(KeyboardInterrupt):
        runner.run(ends_as_ctrl_c_comes())
    assert runner.run(asyncio.sleep(0, "the next point")) == "the next point"  # no stop left queued


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.Runner is Python ≥ 3.11")
def test_asyncio_runner_raises_that_ctrl_c_in_the_loop_and_then_cannot_close():
    """Why LoopRunner raises a late Ctrl-C after the loop returned (as the last test)."""
    asyncio_runner = asyncio.Runner()
    with pytest.raises(KeyboardInterrupt):
        asyncio_runner.run(ends_as_ctrl_c_comes())
    with pytest.raises(RuntimeError, match="Event loop stopped before Future completed"):
        asyncio_runner.close()  # its loop is closed all the same


def test_a_loop_a_second_ctrl_c_cut_short_still_closes(runner):
    with pytest.raises(KeyboardInterrupt):
        runner.run(ends_as_ctrl_c_comes(presses=2))
    runner.close()
    assert runner.loop.is_closed()


def test_a_second_ctrl_c_is_raised_at_once_and_close_ends_what_holds_on(runner):
    held_on = []

    async def holds_on():
        try:
            press_ctrl_c()
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            held_on.append(True)
            threading.Thread(target=press_ctrl_c).start()  # lands while the loop waits, or before
            await asyncio.sleep(60)

    with pytest.raises(KeyboardInterrupt):
        runner.run(holds_on())
    assert held_on == [True]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    runner.close()
    assert runner.loop.is_closed() and not asyncio.all_tasks(runner.loop)


def test_the_coroutines_own_cancel_is_not_a_ctrl_c(runner):
    async def cancels_itself():
        asyncio.current_task().cancel()
        await asyncio.sleep(60)

    with pytest.raises(asyncio.CancelledError):
        runner.run(cancels_itself())


def test_a_handler_not_pythons_own_is_left_alone(runner):
    async def handler_now():
        return signal.getsignal(signal.SIGINT)

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a background job's
    try:
        assert runner.run(handler_now()) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_outside_the_main_thread_no_handler_is_set():
    results = []

    def run_in_a_thread():
        runner = LoopRunner()
        try:
            results.append(runner.run(asyncio.sleep(0, "ran")))
        finally:
            runner.close()

    thread = threading.Thread(target=run_in_a_thread)
    thread.start()
    thread.join(60)
    assert results == ["ran"]
