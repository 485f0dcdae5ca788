"""A slot the driver named in an observation stays the daemon's until the daemon has read that
observation: rewriting it earlier would supersede the observation still in the sockets (and,
with the daemon reading late, every observation after it)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from controller.wire import frame_ring_writer
from controller.wire.commands import ClientCounters
from controller.wire.frame_ring_writer import FrameRingWriter
from controller.wire.slot_ring import SlotRing

SHAPE = (4, 6, 3)


@pytest.fixture
def ring() -> Iterator[SlotRing]:
    ring = SlotRing.create([("front", SHAPE, "uint8")], count=2)
    yield ring
    ring.close()


def frames(value: int) -> dict[str, np.ndarray]:
    return {"front": np.full(SHAPE, value, np.uint8)}


def test_a_named_slot_is_not_rewritten_before_the_daemon_reads_it(ring: SlotRing) -> None:
    writer = FrameRingWriter(ring, ["front"])
    first = writer.place(frames(1), in_place=False)
    second = writer.place(frames(2), in_place=False)
    assert first is not None and second is not None
    assert first["index"] != second["index"]
    # Both observations are still unread: no slot is free, the frames go on the socket.
    leftover = frames(3)
    assert writer.place(leftover, in_place=False) is None
    assert "front" in leftover
    assert ring.unchanged(first["index"], first["generation"])


def test_the_daemons_hold_and_release_free_the_slot(ring: SlotRing) -> None:
    writer = FrameRingWriter(ring, ["front"])
    first = writer.place(frames(1), in_place=False)
    writer.place(frames(2), in_place=False)
    assert first is not None
    ring.hold(first["index"], first["generation"])  # the daemon read the observation
    assert writer.place(frames(3), in_place=False) is None  # and keeps it while it infers
    ring.release(first["index"], first["generation"])
    again = writer.place(frames(4), in_place=False)
    assert again is not None and again["index"] == first["index"]


def test_a_slot_the_daemon_skipped_is_taken_back_once_it_read_a_later_one(
    ring: SlotRing, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon refused (or dropped unread) the first observation and read the second: the
    first's slot will never be read, so it is taken back, counted as lost."""
    counters = ClientCounters()
    writer = FrameRingWriter(ring, ["front"], counters)
    first = writer.place(frames(1), in_place=False)
    second = writer.place(frames(2), in_place=False)
    assert first is not None and second is not None
    ring.hold(second["index"], second["generation"])  # the daemon read the second message
    monkeypatch.setattr(frame_ring_writer, "IN_FLIGHT_GRACE_NS", -1)  # the grace has passed
    again = writer.place(frames(3), in_place=False)
    assert again is not None and again["index"] == first["index"]
    assert writer.overwritten_unread == 1 and counters.frames_lost_unread == 1


def test_a_daemon_reading_late_keeps_its_slots_past_the_grace(
    ring: SlotRing, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both observations are still on their way (the daemon reads late): taking a slot back
    now would make the daemon drop the observation queued for it. Frames go on the socket."""
    writer = FrameRingWriter(ring, ["front"])
    first = writer.place(frames(1), in_place=False)
    second = writer.place(frames(2), in_place=False)
    assert first is not None and second is not None
    monkeypatch.setattr(frame_ring_writer, "IN_FLIGHT_GRACE_NS", -1)  # the grace has passed
    leftover = frames(3)
    assert writer.place(leftover, in_place=False) is None and "front" in leftover
    assert ring.unchanged(first["index"], first["generation"])
    assert ring.unchanged(second["index"], second["generation"])
    assert writer.overwritten_unread == 0
    # The daemon reads them at last, in order, and finishes with the first: its slot is free.
    ring.hold(first["index"], first["generation"])
    ring.hold(second["index"], second["generation"])
    ring.release(first["index"], first["generation"])
    again = writer.place(frames(4), in_place=False)
    assert again is not None and again["index"] == first["index"]
    assert writer.overwritten_unread == 0


def test_a_daemon_that_reads_nothing_for_long_gets_its_slots_taken_back(
    ring: SlotRing, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = FrameRingWriter(ring, ["front"])
    first = writer.place(frames(1), in_place=False)
    writer.place(frames(2), in_place=False)
    assert first is not None
    monkeypatch.setattr(frame_ring_writer, "UNREAD_GIVE_UP_NS", -1)
    again = writer.place(frames(3), in_place=False)
    assert again is not None and again["index"] == first["index"]
    assert writer.overwritten_unread == 1


def test_an_unsent_observation_is_no_sign_that_the_daemon_read_past_the_others(
    ring: SlotRing, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second message never left (the client's send queue was full): its slot is free
    again, but the first is still on its way and keeps its slot."""
    writer = FrameRingWriter(ring, ["front"])
    first = writer.place(frames(1), in_place=False)
    second = writer.place(frames(2), in_place=False)
    assert first is not None and second is not None
    writer.unsent(second["index"], second["generation"])
    monkeypatch.setattr(frame_ring_writer, "IN_FLIGHT_GRACE_NS", -1)
    again = writer.place(frames(3), in_place=False)
    assert again is not None and again["index"] == second["index"]
    assert writer.place(frames(4), in_place=False) is None  # the first's slot stays in flight
    assert ring.unchanged(first["index"], first["generation"])


def test_a_late_observation_leaves_a_newer_in_flight_mark_alone(ring: SlotRing) -> None:
    """An observation read after its grace ran out (the driver took the slot back and named a
    newer observation there) is superseded, and the newer one keeps its slot."""
    writer = FrameRingWriter(ring, ["front"])
    old = writer.place(frames(1), in_place=False)
    writer.place(frames(2), in_place=False)
    assert old is not None
    index = old["index"]
    ring.write(index, frames(3))  # the driver came round after the grace ...
    newer = ring.generation(index)
    ring.hold_in_flight(index, newer)  # ... and named the newer frames in flight
    ring.hold(index, old["generation"])  # the daemon reads the old message at last
    assert ring.held(index) == -newer  # not overwritten by the old observation's hold
    ring.release(index, old["generation"])  # the old observation is dropped
    assert ring.held(index) == -newer and not ring.free(index)


def test_an_observation_that_never_left_frees_its_slot(ring: SlotRing) -> None:
    writer = FrameRingWriter(ring, ["front"])
    slot = writer.place(frames(1), in_place=False)
    assert slot is not None and not ring.free(slot["index"])
    ring.unsent(slot["index"], slot["generation"])
    assert ring.free(slot["index"])
