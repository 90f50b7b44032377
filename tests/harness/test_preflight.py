"""The pre-flight: a sweep's values checked as their points would be, before Hydra runs anything;
a fault only a combination of values shows is left to that point."""

import pytest

from core.errors import HarnessError
from harness.cli import register_everything
from harness.preflight import check_group_choices, check_overrides


@pytest.fixture(scope="module", autouse=True)
def registered():
    register_everything()


def check(*args: str) -> None:
    check_group_choices(list(args))
    check_overrides(list(args))


@pytest.mark.parametrize(
    "args, message",
    [
        (["-m", "repeat=1,0"], "the sweep's point repeat=0: repeat must be >= 1 (got 0)"),
        # a preset's sweeper params are swept values too, the command line's winning over them
        (
            ["-m", "preset=nightly", "workload.concurrency=1,0"],
            "the sweep's point workload=synthetic workload.concurrency=0: workload.concurrency must be >= 1",
        ),
        # the first value of a key is checked as the others are
        (
            ["-m", "workload=synthetic", "workload.concurrency=0,1", "workload.rate=1,2"],
            "the sweep's point workload.concurrency=0 workload.rate=1: workload.concurrency must be >= 1",
        ),
        (
            ["-m", "backend=llamacpp", "backend.mode=inprocess", "backend.replicas=1,2"],
            "the sweep's point backend.replicas=2: backend.replicas launches several servers",
        ),
        (
            ["hydra.mode=MULTIRUN", "workload=synthetic", "workload.concurrency=1,0"],
            "the sweep's point workload.concurrency=0",
        ),
        (["-m", "cost.usd_per_hour=1e7"], "the sweep: cost.usd_per_hour must be > 0 and at most 1,000,000"),
        (["-m", "workload.rate=abc,2"], "Error merging override workload.rate=abc"),
        (
            ["-m", "workload.concurrency=1,2", "+workload.foo=1"],
            "the sweep's point workload.concurrency=1: workload.foo: no such setting",
        ),
    ],
)
def test_a_value_no_point_accepts_is_refused(args, message):
    with pytest.raises(HarnessError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check(*args)


@pytest.mark.parametrize(
    "args",
    [
        ["-m", "preset=nightly", "backend=reference"],
        # replicas=2 is refused in-process but runs at the server points: that point fails alone
        ["-m", "backend=llamacpp", "backend.mode=inprocess,server", "backend.replicas=1,2"],
        ["-m", "backend=llamacpp", "backend.mode=server,inprocess", "backend.replicas=1,2"],
        ["-m", "workload.concurrency=range(5,1)"],  # no point at all: Hydra's to say
        ["-m", "workload=glob(*)"],
        ["-m", "workload.rate=interval(1,4)", "hydra/sweeper=basic"],
        ["-m", "workload=synthetic", "workload.rate=choice(1,2)", "workload.input_len=range(16,64,16)"],
        ["backend='reference'", "workload=synthetic"],
        ["-m", "backend=reference,'llamacpp'"],
        ["-m"],
    ],
)
def test_sweeps_hydra_would_run_pass(args):
    check(*args)
