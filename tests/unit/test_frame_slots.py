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
from controller.link.frame_slots import FrameSlots, TornSlot
from controller.link.process_messages import MessageError
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


@pytest.fixture
def slots(tmp_path):  # type: ignore[no-untyped-def]
    writer = FrameSlots.create(SPEC, 2, directory=str(tmp_path))
    reader = FrameSlots.attach(writer.path, SPEC, 2)
    yield writer, reader
    reader.close()
    writer.close()
    assert not writer.path.exists()


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
    writer._headers[0][0] += 1  # a writer in the middle of its copy
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


def test_slot_files_no_live_ring_owns_are_removed_at_the_next_create(tmp_path: Path) -> None:
    """Orphans are judged by their creator's lock, not by pid (another pid namespace may own
    a file whose pid looks dead here); very young files are left for their creator."""
    old = time.time() - 60
    orphan = tmp_path / "tempo-slots-12345-0000abcd"
    orphan.write_bytes(b"left by a killed daemon")
    os.utime(orphan, (old, old))
    young = tmp_path / "tempo-slots-12345-0000beef"
    young.write_bytes(b"its creator has not locked it yet")
    live = FrameSlots.create(SPEC, 2, directory=str(tmp_path))
    os.utime(live.path, (old, old))
    try:
        again = FrameSlots.create(SPEC, 2, directory=str(tmp_path))
        try:
            assert not orphan.exists()
            assert young.exists() and live.path.exists() and again.path.exists()
        finally:
            again.close()
    finally:
        live.close()
    assert not live.path.exists()


def test_a_ring_with_no_room_is_one_sentence_and_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full /dev/shm is an error at create (not SIGBUS at the first write)."""

    def full(fd: int, offset: int, size: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", full, raising=False)
    with pytest.raises(OSError, match="no room for .* shared observation slots"):
        FrameSlots.create(SPEC, 2, directory=str(tmp_path))
    assert list(tmp_path.iterdir()) == []
