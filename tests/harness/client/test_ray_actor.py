"""The client host's parts that need no cluster (harness/client/ray_actor.py, worker_loop.py): the
outbox is bounded and batches, control batches apply in their numbers' order whatever order Ray
runs them in, the clock hook shifts now() and go's t0 alike, and a request in flight becomes a
failed record."""

import asyncio
import pickle
import threading
import time

from harness.client.ray_actor import BATCH_MAX, CLOCK_SHIFT_ENV, ClientHost, Outbox
from harness.client.worker_loop import SentRequest


def test_the_outbox_batches_bounds_and_ends_with_bye():
    box = Outbox(max_pending=4)
    assert box.take(heartbeat_s=0.01) == ([], False)  # a heartbeat: nothing to send
    for i in range(4):
        box.put(("record", i))
    blocked = threading.Event()

    def fifth():
        box.put(("record", 4))  # the outbox is full: waits for the stream
        blocked.set()

    thread = threading.Thread(target=fifth)
    thread.start()
    time.sleep(0.05)
    assert not blocked.is_set()
    batch, last = box.take()
    thread.join(1)
    assert blocked.is_set() and [pickle.loads(b) for b in batch] == [("record", i) for i in range(4)] and not last
    box.put(("bye",))
    batch, last = box.take()
    assert [pickle.loads(b)[0] for b in batch] == ["record", "bye"] and last


def test_a_batch_is_at_most_batch_max():
    box = Outbox(max_pending=BATCH_MAX * 3)
    for i in range(BATCH_MAX + 5):
        box.put(("record", i))
    assert len(box.take()[0]) == BATCH_MAX and len(box.take()[0]) == 5


class Recorder:
    def __init__(self):
        self.got = []

    def control(self, msg):
        self.got.append(msg)


def test_control_batches_apply_in_order_and_the_clock_hook_shifts_go(monkeypatch):
    monkeypatch.setenv(CLOCK_SHIFT_ENV, "2.5")
    host = ClientHost(0, 0)
    t = time.perf_counter()
    assert abs(host.now() - t - 2.5) < 0.1
    loop = asyncio.new_event_loop()
    try:
        host.loop, host.work = loop, Recorder()
        host.control(1, [("session", 7)], [(7, "spec-7", 70)])  # arrives before batch 0: waits for it
        assert host.work.got == [] and 7 not in host.sessions
        host.control(0, [("go", 100.0)], [])
        loop.run_until_complete(asyncio.sleep(0))
        assert host.work.got == [("go", 97.5), ("session", 7)]  # t0 on the host's own (unshifted) clock
        assert host.sessions[7] == ("spec-7", 70)
    finally:
        loop.close()


def test_a_request_in_flight_becomes_a_failed_record():
    sent = SentRequest(3, 12, 3, 0, 48, 16, True, 48, None, 1.0, 1.25)
    record = sent.failed("client host lost: host 1: node died", 4.0)
    assert (record.request_id, record.session_id, record.turn) == (12, 3, 0)
    assert not record.ok and record.error.startswith("client host lost") and record.ttft_s is None
    assert (record.start_s, record.end_s, record.client_wait_s) == (1.25, 4.0, 0.25)
    assert (record.prompt_tokens, record.requested_output_tokens, record.output_tokens) == (48, 16, 0)
