"""A host's clock offset by round trips (harness/client/clock.py): the fastest round trip's
midpoint, its error within half its RTT, the drift rule, and a clock that cannot be measured
refused in one line. A simulated host and driver clock, nothing on the network."""

import random

import pytest

from harness.client.clock import WARM_UP, ClockReading, ClockUnmeasured, drift, measure


class FakeLink:
    """A driver clock and a host whose clock reads ``offset`` more; each leg of a round trip
    takes ``base`` plus random queueing (asymmetric: the error the filter must bound)."""

    def __init__(self, offset, base=0.0004, jitter=0.004, seed=0):
        self.now, self.offset, self.base, self.jitter = 100.0, offset, base, jitter
        self.rng = random.Random(seed)
        self.calls = 0

    def local(self):
        return self.now

    def read_remote(self):
        self.calls += 1
        self.now += self.base + self.rng.expovariate(1 / self.jitter)  # there
        seen = self.now + self.offset
        self.now += self.base + self.rng.expovariate(1 / self.jitter)  # back
        return seen


@pytest.mark.parametrize("offset", [0.0, 2.5, -3600.0])
def test_the_fastest_round_trip_gives_the_offset_within_half_its_rtt(offset):
    link = FakeLink(offset)
    reading = measure(link.read_remote, 32, local=link.local)
    assert link.calls == 32 + WARM_UP and len(reading.samples) == 32
    assert reading.rtt_s == min(r for r, _ in reading.samples)
    assert abs(reading.offset_s - offset) <= reading.rtt_s / 2
    # the filter earns its keep: a typical round trip's midpoint is further off than the fastest's
    errors = sorted(abs(o - offset) for _, o in reading.samples)
    assert abs(reading.offset_s - offset) <= errors[len(errors) // 2]


def test_drift_beyond_the_bound_and_the_uncertainty_names_the_host():
    before = ClockReading(offset_s=1.0, rtt_s=0.001, at_s=0.0)
    steady = ClockReading(offset_s=1.0012, rtt_s=0.001, at_s=60.0)  # 1.2 ms: within 1 ms + 1 ms
    moved = ClockReading(offset_s=1.0030, rtt_s=0.001, at_s=60.0)  # 3 ms: beyond
    assert not drift(before, steady, 0.001).beyond
    assert drift(before, moved, 0.001).beyond and drift(before, moved, 0.001).drift_s == pytest.approx(0.003)
    assert drift(before, None, 0.001) is None  # a host lost before the second measurement


def test_a_clock_that_cannot_be_measured_is_one_line():
    def fails():
        raise TimeoutError("no answer in 5 s")

    with pytest.raises(ClockUnmeasured, match="a round trip failed") as info:
        measure(fails, 20)
    assert "\n" not in str(info.value)
    slow = FakeLink(0.0, base=0.2, jitter=0.001)
    with pytest.raises(ClockUnmeasured, match=r"fastest of 20 round trips took 40\d ms"):
        measure(slow.read_remote, 20, local=slow.local)
    stuck = FakeLink(0.0, base=1.0, jitter=0.001)
    with pytest.raises(ClockUnmeasured, match="round trips in 5 s"):
        measure(stuck.read_remote, 20, local=stuck.local, deadline_s=5)
