"""The feed during a swap at episode starts (episode_swap): a robot's request goes to the new
process from its episode start on, else to the one that served it last; the feed counts the
robots still bound to the old process, and none left ends the swap."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Iterator

import pytest

from controller.feed.inference_feed import InferenceRequest
from controller.link.incoming import Routes
from controller.link.remote_feed import RemoteFeed
from controller.link.request_channel import RequestChannel
from controller.process_protocol.frame_slots import FrameSlots
from tests.unit.test_remote_feed import (
    FAR,
    SPEC,
    FakePolicy,
    Links,
    Robot,
    answer,
    channel_pair,
    received,
    request,
    service_until,
)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="shared memory in /dev/shm")


class SwappingPolicy(FakePolicy):
    """A serving process and, once `incoming` is set, a swap's new one beside it."""

    def __init__(self, serving: RequestChannel) -> None:
        super().__init__(serving)
        self.incoming: RequestChannel | None = None
        self.progress: list[tuple[int, int]] = []

    @property
    def swapping(self) -> bool:  # type: ignore[override]
        return self.incoming is not None

    @contextlib.contextmanager
    def routes(self) -> Iterator[Routes]:
        yield Routes(self.channel if self.serving else None, self.incoming)

    def swap_progress(self, channel: RequestChannel, on_new: int, on_old: int) -> None:
        assert channel is self.incoming
        self.progress.append((on_new, on_old))


@pytest.fixture
def context() -> Iterator[Links]:
    links = Links()
    yield links
    for link in links.made:
        link.close()


@pytest.fixture
def slots() -> Iterator[tuple[FrameSlots, FrameSlots]]:
    made = (FrameSlots.create(SPEC, 2), FrameSlots.create(SPEC, 2))  # each process its own
    yield made
    for each in made:
        each.close()


def _mid_episode(seq: int) -> InferenceRequest:
    r = request(seq)
    return dataclasses.replace(r, context=dataclasses.replace(r.context, episode_start=False))


def test_robots_move_to_the_new_process_at_their_episode_start(
    context: Links, slots: tuple[FrameSlots, FrameSlots]
) -> None:
    old, old_peer = channel_pair(context, slots[0])
    policy = SwappingPolicy(old)
    worker = RemoteFeed(policy)  # type: ignore[arg-type]
    worker.start()
    a, b = Robot("a"), Robot("b")
    for seq, robot in ((1, a), (2, b)):  # both served by the old process before the swap
        worker.submit(robot, _mid_episode(seq))
        worker.service(FAR)
        answer(old_peer, received(old_peer).id)
        service_until(worker, lambda robot=robot: robot.chunks)
    new, new_peer = channel_pair(context, slots[1])
    policy.incoming = new
    worker.service(FAR)  # idle: the robots are counted
    assert policy.progress[-1] == (0, 2)

    worker.submit(a, request(3))  # a's episode starts: the new process
    worker.service(FAR)
    sent = received(new_peer)
    assert sent.episode_start and not old_peer.poll(50)
    answer(new_peer, sent.id, 5.0)
    service_until(worker, lambda: len(a.chunks) == 2)
    assert (a.chunks[-1].actions == 5.0).all()
    assert policy.progress[-1] == (1, 1)

    worker.submit(a, _mid_episode(4))  # a stays on the new one
    worker.service(FAR)
    answer(new_peer, received(new_peer).id)
    service_until(worker, lambda: len(a.chunks) == 3)
    worker.submit(b, _mid_episode(5))  # b has not started an episode: the old one
    worker.service(FAR)
    answer(old_peer, received(old_peer).id)
    service_until(worker, lambda: len(b.chunks) == 2)
    assert not new_peer.poll(50)

    c = Robot("c")  # connects during the swap: its first episode starts on the new one
    worker.submit(c, request(6))
    worker.service(FAR)
    assert received(new_peer).episode_start
    b.closed = True  # the last robot on the old process leaves
    worker.service(FAR)
    assert policy.progress[-1] == (2, 0)
