"""The control loop's side of a policy in its own process (RemoteFeed over a RequestChannel),
against a peer played by the test on a real process channel (a socket pair): replies become the
robot's chunks, nothing the process does (dying, a malformed reply, a restart) blocks the loop or
escapes into it, and a driver's frame ring is asked for once and then read in place."""

from __future__ import annotations

import collections
import contextlib
import os
import socket
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from controller.feed.inference_feed import Chunk, InferenceRequest, Refusal
from controller.feed.mailbox import Mailbox
from controller.link.incoming import Routes
from controller.link.remote_feed import RemoteFeed
from controller.link.request_channel import RequestChannel
from controller.process_protocol import process_channel
from controller.process_protocol.frame_slots import FrameSlots
from controller.process_protocol.process_channel import ProcessChannel
from controller.process_protocol.process_messages import (
    ChunkReply,
    DetachRing,
    Message,
    RingReady,
    decode,
    encode,
)
from controller.wire.slot_ring import SlotFrames
from policies.base import CameraSpec, PolicySpec, first_context

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="shared memory in /dev/shm")

SPEC = PolicySpec(
    cameras=(CameraSpec(name="a", height=4, width=6),),
    state_size=3,
    joint_names=("x", "y", "z"),
    chunk_size=2,
    state_history=2,
)
FAR = 2**62  # a deadline that never comes


@dataclass
class Robot:
    robot: str = "r"
    spec: PolicySpec = SPEC
    closed: bool = False
    requests: Mailbox[InferenceRequest] = field(default_factory=Mailbox)
    chunks: collections.deque[Chunk] = field(default_factory=collections.deque)
    refused: collections.deque[Refusal] = field(default_factory=collections.deque)
    counters: collections.Counter[str] = field(default_factory=collections.Counter)


class FakePolicy:
    """What RemoteFeed needs of a RemotePolicy."""

    def __init__(self, channel: RequestChannel) -> None:
        self.channel = channel
        self.serving = True
        self.hangs: list[str] = []

    swapping = False

    @contextlib.contextmanager
    def routes(self) -> Iterator[Routes]:
        yield Routes(self.channel if self.serving else None)

    def hang_timeout(self) -> float:
        return 5.0

    def report_hang(self, detail: str) -> None:
        self.hangs.append(detail)


class Links:
    """Channel pairs made by a test, closed after it."""

    def __init__(self) -> None:
        self.made: list[ProcessChannel] = []
        self.sockets: list[socket.socket] = []  # other ends the test keeps unread

    def pair(self) -> tuple[ProcessChannel, ProcessChannel]:
        ours, theirs = ProcessChannel.pair()
        peer = ProcessChannel(theirs)
        self.made += [ours, peer]
        return ours, peer


@pytest.fixture
def context() -> Iterator[Links]:
    links = Links()
    yield links
    for link in links.made:
        link.close()
    for sock in links.sockets:
        sock.close()


@pytest.fixture
def slots() -> Iterator[FrameSlots]:
    slots = FrameSlots.create(SPEC, 2)
    yield slots
    slots.close()


def channel_pair(context: Links, slots: FrameSlots) -> tuple[RequestChannel, ProcessChannel]:
    ours, peer = context.pair()
    return RequestChannel(ours, slots, SPEC), peer


def request(seq: int, images: dict[str, np.ndarray] | None = None) -> InferenceRequest:
    frames = images if images is not None else {"a": np.full((4, 6, 3), seq, np.uint8)}
    context = first_context(SPEC, np.zeros(3, np.float32), step=seq)
    return InferenceRequest(obs_seq=seq, received_ns=0, episode=0, images=frames, context=context)


def received(peer: ProcessChannel) -> Any:
    data = peer.receive(timeout_ms=2000)
    assert data is not None, "nothing reached the inference process"
    message: Message = decode(data)
    return message


def answer(peer: ProcessChannel, request_id: int, value: float = 1.0) -> None:
    actions = np.full((SPEC.chunk_size, SPEC.action_dim), value, np.float32)
    peer.send(encode(ChunkReply(request_id, actions, None, step_ns=0, received_ns=0)))


def service_until(worker: RemoteFeed, done: Any) -> None:
    for _ in range(2000):
        worker.service(FAR)
        if done():
            return
        threading.Event().wait(0.001)
    raise AssertionError("the reply was never taken")


def test_a_reply_becomes_the_robots_chunk_and_the_next_request_goes_out(
    context: Links, slots: FrameSlots
) -> None:
    channel, peer = channel_pair(context, slots)
    worker = RemoteFeed(FakePolicy(channel))  # type: ignore[arg-type]
    worker.start()
    robot = Robot()
    worker.submit(robot, request(1))
    worker.submit(robot, request(2))  # newest wins: 1 is never sent
    worker.service(FAR)
    sent = received(peer)
    assert sent.kind == "infer" and sent.step == 2
    worker.submit(robot, request(3))
    worker.service(FAR)  # one request in flight at a time: 3 waits
    assert not peer.poll(50)
    answer(peer, sent.id, 7.0)
    service_until(worker, lambda: robot.chunks)
    chunk = robot.chunks[0]
    assert chunk.obs_seq == 2 and chunk.start_step == 2 and np.all(chunk.actions == 7.0)
    assert received(peer).step == 3  # sent as soon as the reply was taken
    assert worker.inferences == 1 and worker.failures == 0


def test_a_send_to_a_process_that_is_gone_fails_the_request_without_blocking(
    context: Links, slots: FrameSlots
) -> None:
    lonely, peer = context.pair()
    peer.close()  # the process has gone
    worker = RemoteFeed(FakePolicy(RequestChannel(lonely, slots, SPEC)))  # type: ignore[arg-type]
    worker.start()
    robot = Robot()
    worker.submit(robot, request(1))
    loop = threading.Thread(target=worker.service, args=(FAR,), daemon=True)
    loop.start()
    loop.join(10.0)
    assert not loop.is_alive(), "the control loop blocked on a send"
    assert worker.failures == 1 and robot.counters["inference_failures"] == 1
    assert not robot.chunks


def test_a_malformed_reply_is_counted_and_the_loop_goes_on(
    context: Links, slots: FrameSlots
) -> None:
    channel, peer = channel_pair(context, slots)
    worker = RemoteFeed(FakePolicy(channel))  # type: ignore[arg-type]
    worker.start()
    robot = Robot()
    worker.submit(robot, request(1))
    worker.service(FAR)
    received(peer)
    peer.send(b"\xc1 not msgpack")
    service_until(worker, lambda: worker.failures)
    assert robot.counters["inference_failures"] == 1
    worker.submit(robot, request(2))  # the next observation is served as usual
    worker.service(FAR)
    answer(peer, received(peer).id)
    service_until(worker, lambda: robot.chunks)
    assert robot.chunks[0].obs_seq == 2


def test_a_restart_fails_the_request_in_flight_and_serves_on_the_new_process(
    context: Links, slots: FrameSlots
) -> None:
    old, old_peer = channel_pair(context, slots)
    policy = FakePolicy(old)
    worker = RemoteFeed(policy)  # type: ignore[arg-type]
    worker.start()
    robot = Robot()
    worker.submit(robot, request(1))
    worker.service(FAR)
    received(old_peer)
    policy.serving = False  # the process died: the request in flight is given up
    worker.submit(robot, request(2))
    worker.service(FAR)
    assert robot.counters["inference_failures"] == 2  # the one in flight, and the waiting one
    new, new_peer = channel_pair(context, slots)
    policy.channel, policy.serving = new, True
    answer(old_peer, 1)  # a late answer of the dead process reaches nobody
    worker.submit(robot, request(3))
    worker.service(FAR)
    answer(new_peer, received(new_peer).id)
    service_until(worker, lambda: robot.chunks)
    assert [c.obs_seq for c in robot.chunks] == [3]


def test_a_hot_switch_fails_what_waited_and_serves_new_observations_on_the_new_process(
    context: Links, slots: FrameSlots
) -> None:
    """A hot standby takes over between two services (the feed never sees the policy down):
    the request in flight and the one waiting behind it, both observed before the switch,
    fail; the robot's next observation goes to the new process."""
    old, old_peer = channel_pair(context, slots)
    policy = FakePolicy(old)
    worker = RemoteFeed(policy)  # type: ignore[arg-type]
    worker.start()
    robot = Robot()
    worker.submit(robot, request(1))
    worker.service(FAR)
    received(old_peer)
    worker.submit(robot, request(2))  # waits behind the one in flight
    new, new_peer = channel_pair(context, slots)
    policy.channel = new  # switched: serving all along
    worker.service(FAR)
    assert robot.counters["inference_failures"] == 2
    assert new_peer.receive(timeout_ms=50) is None  # nothing from before the switch went there
    worker.submit(robot, request(3))
    worker.service(FAR)
    answer(new_peer, received(new_peer).id)
    service_until(worker, lambda: robot.chunks)
    assert [c.obs_seq for c in robot.chunks] == [3]


def test_a_driver_ring_is_asked_for_once_then_its_frames_are_read_in_place(
    context: Links, slots: FrameSlots
) -> None:
    channel, peer = channel_pair(context, slots)
    ring = FrameSlots.create(SPEC, 4)  # the driver's
    try:
        frames = {"a": np.full((4, 6, 3), 9, np.uint8)}
        state = np.zeros((2, 3), np.float32)
        first = SlotFrames(ring, 0, ring.write(0, frames, state), ["a"])
        context_1 = first_context(SPEC, np.zeros(3, np.float32))
        channel.send(first, context_1)
        attach, infer = received(peer), received(peer)
        assert attach.kind == "attach_ring" and attach.path == str(ring.path)
        memory = peer.take_fd()  # the ring's memory itself came along
        assert memory is not None and os.fstat(memory).st_ino == os.stat(ring.path).st_ino
        os.close(memory)
        assert infer.ring is None  # not attached yet: this observation is copied
        np.testing.assert_array_equal(slots.views(infer.slot)[0]["a"], frames["a"])
        peer.send(encode(RingReady(attach.id, pinned=True)))
        answer(peer, infer.id)
        reply = None
        for _ in range(2000):
            if (reply := channel.receive()) is not None:
                break
            threading.Event().wait(0.001)
        assert reply is not None and reply.id == infer.id
        assert list(channel.rings) == [ring] and channel.pinned_rings == {attach.id}
        second = SlotFrames(ring, 1, ring.write(1, frames, state), ["a"])
        channel.send(second, context_1)
        infer = received(peer)
        assert infer.ring == attach.id and infer.slot == 1
        assert not peer.poll(50)  # asked once only
    finally:
        ring.close()


def test_a_ring_whose_session_ended_before_the_process_attached_it_is_detached(
    context: Links, slots: FrameSlots
) -> None:
    channel, peer = channel_pair(context, slots)
    ring = FrameSlots.create(SPEC, 4)
    frames = {"a": np.zeros((4, 6, 3), np.uint8)}
    state = np.zeros((2, 3), np.float32)
    observation = SlotFrames(ring, 0, ring.write(0, frames, state), ["a"])
    channel.send(observation, first_context(SPEC, np.zeros(3, np.float32)))
    attach = received(peer)
    received(peer)  # the (copied) observation
    del observation
    ring.close()
    peer.send(encode(RingReady(attach.id, pinned=False)))
    for _ in range(2000):
        channel.receive()
        if peer.poll(0):
            break
        threading.Event().wait(0.001)
    assert received(peer) == DetachRing(attach.id)
    assert not channel.rings


def test_a_process_that_stopped_reading_is_reported_for_a_restart_without_blocking(
    context: Links, slots: FrameSlots, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(process_channel, "MAX_QUEUED_BYTES", 0)  # any backlog: stuck
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)  # theirs never reads
    ours.setblocking(False)
    try:
        while True:  # fill the kernel's buffer, as a peer that stopped reading would leave it
            ours.send(b"\0" * 65_536)
    except BlockingIOError:
        pass
    link = ProcessChannel(ours)
    context.made.append(link)
    context.sockets.append(theirs)
    channel = RequestChannel(link, slots, SPEC)
    policy = FakePolicy(channel)
    worker = RemoteFeed(policy)  # type: ignore[arg-type]
    worker.start()
    robot = Robot()
    worker.submit(robot, request(1))
    worker.service(FAR)
    assert robot.counters["inference_failures"] == 1
    assert policy.hangs and "stopped taking messages" in policy.hangs[0]


def test_waiting_for_a_step_ends_when_the_process_closes_its_channel(
    context: Links, slots: FrameSlots
) -> None:
    """RemotePolicy.predict's wait: a dead process's closed channel ends it at once (it must not
    spin on the always-readable end of stream while holding the lock a restart needs)."""
    from controller.link.remote_policy import RemotePolicy
    from controller.link.request_channel import InferenceUnavailable

    channel, peer = channel_pair(context, slots)
    peer.close()
    remote = RemotePolicy(["true"], hang_timeout_s=30.0)
    outcome: list[BaseException] = []

    def wait() -> None:
        try:
            remote.wait_for_reply(channel, 1)
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            outcome.append(exc)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    waiter.join(5.0)
    remote.stop()
    assert not waiter.is_alive(), "the wait spun on a closed channel"
    assert len(outcome) == 1 and isinstance(outcome[0], InferenceUnavailable)


def test_the_step_the_inference_process_timed_is_recorded_beside_the_whole_trip(
    context: Links, slots: FrameSlots
) -> None:
    from controller.observe.telemetry import INFERENCE, PROCESS_STEP, Telemetry

    telemetry = Telemetry(enabled=True)
    channel, peer = channel_pair(context, slots)
    worker = RemoteFeed(FakePolicy(channel), telemetry)  # type: ignore[arg-type]
    worker.start()
    robot = Robot()
    worker.submit(robot, request(1))
    worker.service(FAR)
    sent = received(peer)
    actions = np.ones((SPEC.chunk_size, SPEC.action_dim), np.float32)
    peer.send(encode(ChunkReply(sent.id, actions, None, step_ns=1_500_000, received_ns=0)))
    service_until(worker, lambda: robot.chunks)
    sections = {s["name"]: s for s in telemetry.snapshot()["sections"].values()}
    assert sections[PROCESS_STEP]["count"] == 1
    assert abs(sections[PROCESS_STEP]["sum_s"] - 0.0015) < 1e-9
    assert sections[INFERENCE]["count"] == 1
