"""Shared-memory observation slots, and whose fault a failed request is (the messages themselves:
test_process_messages)."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import numpy as np
import pytest

from controller.errors import InputFault, PolicyError
from controller.process_protocol.frame_slots import CorruptSlot, FrameSlots, TornSlot
from controller.process_protocol.process_messages import MessageError
from policies.base import CameraSpec, PolicySpec

SPEC = PolicySpec(
    cameras=(CameraSpec(name="a", height=4, width=6), CameraSpec(name="b", height=3, width=5)),
    state_size=3,
    joint_names=("x", "y", "z"),
    chunk_size=2,
    state_history=2,
)


def observation(value: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    images = {c.name: np.full(c.shape, value, np.uint8) for c in SPEC.cameras}
    return images, np.full((2, 3), float(value), np.float32)


def open_descriptors() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.fixture
def slots():  # type: ignore[no-untyped-def]
    before = open_descriptors()
    writer = FrameSlots.create(SPEC, 2)
    reader = FrameSlots.attach(writer.path, SPEC, 2)
    yield writer, reader
    reader.close()
    writer.close()
    assert open_descriptors() <= before  # the memory goes with its creator's descriptor


def test_what_the_writer_copies_the_reader_sees_in_place(slots) -> None:  # type: ignore[no-untyped-def]
    writer, reader = slots
    generation = writer.write(1, *observation(7))
    assert generation % 2 == 0
    reader.check(1, generation)
    images, state = reader.views(1)
    for camera in SPEC.cameras:
        assert (images[camera.name] == 7).all() and images[camera.name].shape == camera.shape
    assert (state == 7).all() and state.shape == (2, 3)
    assert (reader.views(0)[1] == 0).all()  # the other slot is untouched


def test_an_overwritten_slot_is_refused_not_served(slots) -> None:  # type: ignore[no-untyped-def]
    writer, reader = slots
    first = writer.write(0, *observation(1))
    writer.write(0, *observation(2))
    with pytest.raises(TornSlot, match="overwritten"):
        reader.check(0, first)


def test_a_slot_being_written_is_refused(slots) -> None:  # type: ignore[no-untyped-def]
    writer, reader = slots
    generation = writer.write(0, *observation(1))
    writer.begin(0)  # a writer in the middle of its copy
    with pytest.raises(TornSlot):
        reader.check(0, generation)
    with pytest.raises(TornSlot):
        reader.check(0, generation + 1)  # odd: never a complete observation


def test_attaching_with_another_spec_is_refused(slots) -> None:  # type: ignore[no-untyped-def]
    writer, _ = slots
    bigger = (CameraSpec(name="a", height=40, width=60), SPEC.cameras[1])
    with pytest.raises(ValueError, match="expected"):
        FrameSlots.attach(writer.path, SPEC.model_copy(update={"cameras": bigger}), 2)
    swapped = (SPEC.cameras[1].model_copy(update={"name": "a"}), SPEC.cameras[0])
    renamed = SPEC.model_copy(
        update={"cameras": (swapped[0], swapped[1].model_copy(update={"name": "b"}))}
    )
    with pytest.raises(ValueError, match="another policy spec"):
        FrameSlots.attach(writer.path, renamed, 2)


def test_heartbeat_is_shared(slots) -> None:  # type: ignore[no-untyped-def]
    writer, reader = slots
    reader.beat()
    assert writer.last_beat_ns() == reader.last_beat_ns() > 0


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (InputFault("the reference is NaN too"), "input_fault"),
        (ValueError("camera 'front': expected uint8"), "refused"),
        (TornSlot("overwritten"), "failed"),  # the control side's bug, never the robot's
        (MessageError("garbled"), "failed"),
        (PolicyError("no lower tier"), "failed"),
        (RuntimeError("a bug"), "failed"),
    ],
)
def test_whose_fault_a_failed_request_is(error: Exception, kind: str) -> None:
    pytest.importorskip("torch")
    from controller.inference.process_server import reply_kind

    assert reply_kind(error) == kind


def test_the_slots_have_no_file_and_nobody_can_shrink_or_grow_them(slots) -> None:  # type: ignore[no-untyped-def]
    """Memory another process of the user truncated would kill the control process with
    SIGBUS at its next write; a file in /dev/shm could also be deleted by a tmp cleaner."""
    writer, _ = slots
    assert str(writer.path) == f"/proc/{os.getpid()}/fd/{writer.fileno()}"
    assert not list(Path("/dev/shm").glob(f"tempo-slots-{os.getpid()}-*"))
    fd = os.open(writer.path, os.O_RDWR)
    try:
        for size in (0, writer.size - 1, writer.size * 2):
            with pytest.raises(PermissionError):
                os.ftruncate(fd, size)
    finally:
        os.close(fd)
    writer.write(0, *observation(3))  # still all there


def test_memory_that_is_not_sealed_is_refused(tmp_path: Path) -> None:
    writer = FrameSlots.create(SPEC, 2)
    try:
        plain = tmp_path / "slots"
        plain.write_bytes(writer.buffer.tobytes())  # the right size and layout, but a file
    finally:
        writer.close()
    with pytest.raises(ValueError, match="not sealed memory"):
        FrameSlots.attach(plain, SPEC, 2)


def test_reset_lays_a_scribbled_header_out_afresh(slots) -> None:  # type: ignore[no-untyped-def]
    writer, reader = slots
    writer.write(1, *observation(5))
    reader.buffer[:64] = np.frombuffer(b"\x9c" * 64, np.uint8)  # garbage: layout, heartbeat
    reader.header(1)[:] = -7
    with pytest.raises(ValueError, match="another policy spec"):
        FrameSlots.attach(writer.path, SPEC, 2)
    writer.reset()
    again = FrameSlots.attach(writer.path, SPEC, 2)
    try:
        assert abs(time.monotonic_ns() - again.last_beat_ns()) < 10e9
        assert again.generation(1) == 0 and again.held(1) == 0
        generation = writer.write(1, *observation(6))
        again.check(1, generation, intact=True)
    finally:
        again.close()


def test_data_written_behind_the_writers_back_is_refused(slots) -> None:  # type: ignore[no-untyped-def]
    """Bytes another process wrote into a slot, its generation untouched: not served."""
    writer, reader = slots
    generation = writer.write(0, *observation(4))
    reader.check(0, generation, intact=True)
    reader.views(0)[0]["b"][1, 2, 0] = 200
    with pytest.raises(CorruptSlot, match="written behind"):
        reader.check(0, generation, intact=True)
    generation = writer.write(0, *observation(4))
    reader.check(0, generation, intact=True)
    reader.views(0)[1][0, 0] = np.float32(1e30)  # the state history is summed too
    with pytest.raises(CorruptSlot):
        reader.check(0, generation, intact=True)


def test_a_ring_with_no_room_is_one_sentence_and_leaves_nothing_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No room for the memory is an error at create (not SIGBUS at the first write)."""

    def full(fd: int, offset: int, size: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    before = open_descriptors()
    monkeypatch.setattr(os, "posix_fallocate", full, raising=False)
    with pytest.raises(OSError, match="no room for .* shared observation slots"):
        FrameSlots.create(SPEC, 2)
    assert open_descriptors() <= before
