"""A process that is to serve robots whose frames are in driver rings (an episode swap's new
process) attaches those rings before it serves anyone: the robot's first request to it reads
its frames in place, as every later one does. Measured on the CPU before the change: that
first request waited 4.3 ms behind the attach, its frames copied (3.5 ms on the loop's thread),
and on an H200 the swap's first action came one 5 ms tick late."""

from __future__ import annotations

import os
import threading

import numpy as np

from controller.link.request_channel import RequestChannel
from controller.process_protocol.frame_slots import FrameSlots
from controller.process_protocol.process_channel import ProcessChannel
from controller.process_protocol.process_messages import (
    AttachRing,
    Infer,
    RingReady,
    decode,
    encode,
)
from controller.wire.slot_ring import SlotFrames
from policies.base import CameraSpec, PolicySpec, RobotContext

SPEC = PolicySpec(
    cameras=(CameraSpec(name="front", height=8, width=12),),
    state_size=2,
    joint_names=("a", "b"),
    chunk_size=4,
)
OTHER = PolicySpec(
    cameras=(CameraSpec(name="front", height=4, width=4),),
    state_size=2,
    joint_names=("a", "b"),
    chunk_size=4,
)


def _answering_process(
    link: ProcessChannel, asked: list[AttachRing], infers: list[Infer] | None = None
) -> None:
    """The inference process's side: every ring asked for is attached (and pinned); requests
    are kept in `infers`, unanswered."""
    while True:
        data = link.receive(timeout_ms=2000)
        if data is None:
            return
        message = decode(data)
        if isinstance(message, Infer) and infers is not None:
            infers.append(message)
            continue
        assert isinstance(message, AttachRing)
        memory = link.take_fd()  # the ring's memory came with the ask
        assert memory is not None
        os.close(memory)
        asked.append(message)
        link.send(encode(RingReady(message.id, pinned=True)), timeout_s=1.0)


def test_rings_are_attached_before_the_first_request_and_that_request_reads_in_place() -> None:
    control, theirs = ProcessChannel.pair()
    process = ProcessChannel(theirs)
    asked: list[AttachRing] = []
    infers: list[Infer] = []
    answering = threading.Thread(
        target=_answering_process, args=(process, asked, infers), daemon=True
    )
    answering.start()
    slots = FrameSlots.create(SPEC, 2)
    ring, another_specs = FrameSlots.create(SPEC, 4), FrameSlots.create(OTHER, 4)
    try:
        channel = RequestChannel(control, slots, SPEC)
        channel.attach_rings([ring, another_specs])
        assert [a.count for a in asked] == [4]  # a ring of another spec is not asked for
        assert ring in channel.rings and channel.pinned_rings == {asked[0].id}
        # The first request finds the ring attached: its id, no ask, no copy.
        generation = ring.write(0, {"front": np.zeros((8, 12, 3), np.uint8)}, np.zeros((1, 2)))
        frames = SlotFrames(ring, 0, generation, ["front"])
        context = RobotContext(step=0, episode_start=True, state_history=np.zeros((1, 2)))
        request_id = channel.send(frames, context)
        for _ in range(200):  # the process side takes it
            if infers:
                break
            threading.Event().wait(0.01)
        assert [(i.id, i.ring, i.slot) for i in infers] == [(request_id, asked[0].id, 0)]
        channel.attach_rings([ring])  # asking again asks nothing
        assert len(asked) == 1
    finally:
        control.close()
        answering.join(5)
        for each in (slots, ring, another_specs):
            each.close()
