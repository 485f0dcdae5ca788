"""Admission by capacity (controller.daemon.admission) and several inference processes polled
as one side channel (controller.daemon.side_channels)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from controller.daemon.admission import Capacity
from controller.daemon.side_channels import PollGroup, SideChannels
from controller.errors import ErrorCode, ProtocolError

STEPS = {1: 0.002, 2: 0.003, 4: 0.004}


def test_before_any_step_is_measured_every_robot_is_admitted():
    capacity = Capacity("act", 50.0, (1, 2, 4), 0.9, lambda: {})
    assert capacity.load(100) is None
    capacity.admit(100)  # no refusal
    assert capacity.summary(3)["load"] is None


def test_the_load_is_query_rate_times_batches_times_the_buckets_step_time():
    capacity = Capacity("act", 50.0, (1, 2, 4), 0.9, lambda: STEPS)
    assert capacity.load(0) == 0.0
    assert capacity.load(1) == pytest.approx(50 * 0.002)
    assert capacity.load(2) == pytest.approx(50 * 0.003)
    assert capacity.load(3) == pytest.approx(50 * 0.004)  # three robots pad to a batch of 4
    assert capacity.load(5) == pytest.approx(50 * 2 * 0.004)  # two batches of the largest
    assert capacity.summary(2)["step_ms"] == {"1": 2.0, "2": 3.0, "4": 4.0}


def test_a_robot_past_the_ceiling_is_refused_with_the_numbers():
    capacity = Capacity("act", 50.0, (1,), 0.9, lambda: {1: 0.004})  # 0.2 a robot
    capacity.admit(3)  # the fourth: 0.8
    with pytest.raises(ProtocolError) as refused:
        capacity.admit(4)
    assert refused.value.code is ErrorCode.FULL
    assert str(refused.value) == (
        "policy 'act' cannot take another robot: serving 4 robots needing 0.80 of its inference "
        "time, one more needs 1.00, it can give 0.90 (execution.max_load)"
    )


def test_the_first_robot_is_always_taken_and_without_a_ceiling_every_robot():
    slow = Capacity("pi0", 10.0, (1,), 0.9, lambda: {1: 0.5})  # one robot needs 5.0
    slow.admit(0)  # serving nobody would help no one
    with pytest.raises(ProtocolError, match="serving 1 robot needing 5.00"):
        slow.admit(1)
    Capacity("pi0", 10.0, (1,), None, lambda: {1: 0.5}).admit(7)  # execution.max_load unset


class FakeChannel:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def filenos(self) -> list[int]:
        return [self.fd]


class FakeSide:
    def __init__(self, channel: FakeChannel | None) -> None:
        self.channel = channel
        self.serviced: list[int] = []
        self.held = False

    @contextlib.contextmanager
    def polled(self) -> Iterator[FakeChannel | None]:
        self.held = True
        try:
            yield self.channel
        finally:
            self.held = False

    def service(self, until_ns: int) -> None:
        self.serviced.append(until_ns)


def test_several_side_channels_are_serviced_and_polled_together() -> None:
    first, second = FakeSide(FakeChannel(7)), FakeSide(None)
    sides = SideChannels([first, second])
    sides.service(123)
    assert first.serviced == [123] and second.serviced == [123]
    with sides.polled() as group:
        assert isinstance(group, PollGroup) and group.filenos() == [7]
        assert first.held and second.held  # no restart closes a channel while it is polled
    assert not first.held
    with sides.polled() as again:
        assert again is group  # unchanged channels: the transport keeps its poller
    second.channel = FakeChannel(9)  # the other process now awaits a reply
    with sides.polled() as changed:
        assert changed is not group and changed is not None and changed.filenos() == [7, 9]
    first.channel = second.channel = None
    with sides.polled() as none:
        assert none is None


def test_the_transport_keeps_a_poller_per_set_of_channels_polled(tmp_path) -> None:
    """Several policies' processes join and leave the polled set as their requests do: a
    poller is made once per set, not at every change (that would allocate on the loop)."""
    import zmq

    from controller.daemon.service import unopened_transport
    from tests.conftest import ipc_config

    context = zmq.Context()
    transport = unopened_transport(ipc_config(tmp_path), context)
    transport.open()
    try:
        one, both = PollGroup((FakeChannel(7),)), PollGroup((FakeChannel(7), FakeChannel(9)))
        made = []
        for group in (one, both, one, both, PollGroup((FakeChannel(7),))):
            made.append(transport.poller_for(group))
        assert made[0] is made[2] is made[4] and made[1] is made[3] and made[0] is not made[1]
    finally:
        transport.close()
        context.term()
