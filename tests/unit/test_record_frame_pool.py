"""Frames written in place stay held in the driver's slot until the recorder's writer thread
copies them into buffers it uses again once written (controller.record.frame_pool): the loop
thread copies nothing, and a fresh array per copy paid its pages' first touch. A buffer goes
back only when nothing reads it any more: what is written is always the frame as it came."""

from __future__ import annotations

import gc
import weakref

import numpy as np

from controller.record.frame_pool import MAX_FREE_PER_SHAPE, FramePool
from controller.record.image_cdr import frame_of
from controller.record.queue import RecordQueue, RobotRecording
from controller.record.reading import read_recording
from controller.record.writer import Recorder
from controller.record_config import RecordConfig

SHAPE = (4, 5, 3)


class Slot(dict):  # type: ignore[type-arg]
    """Frames as a driver's slot gives them (controller.wire.slot_ring.SlotFrames): not a
    plain dict, held for as long as it lives, `written_as_read()` while the driver keeps off
    it."""

    def __init__(self, value: int, intact: bool = True) -> None:
        super().__init__(front=np.full(SHAPE, value, np.uint8))
        self.intact = intact

    def written_as_read(self) -> bool:
        return self.intact


def observe(recording: RobotRecording, seq: int, frames: object) -> None:
    recording.observation(seq, seq, seq * 100_000_000, seq, frames, np.zeros(2, np.float32),
                          None, 0)  # type: ignore[arg-type]  # fmt: skip


def written_frames(path) -> list[int]:
    recording = read_recording(path)
    return [int(frame_of(m.data)[0, 0, 0]) for m in recording.messages if m.name == "camera/front"]


def test_a_given_back_buffer_is_used_again_and_the_pool_is_bounded() -> None:
    pool = FramePool()
    source = np.arange(60, dtype=np.uint8).reshape(SHAPE)
    first = pool.copy(source)
    assert np.array_equal(first, source) and first is not source
    pool.give_back([first])
    assert pool.copy(source * 2) is first and np.array_equal(first, source * 2)
    pool.give_back(np.zeros(SHAPE, np.uint8) for _ in range(MAX_FREE_PER_SHAPE + 10))
    assert pool.free_count() == MAX_FREE_PER_SHAPE


def test_a_frame_bigger_than_a_piece_is_copied_whole() -> None:
    source = np.random.default_rng(0).integers(0, 255, (480, 640, 3), dtype=np.uint8)
    assert np.array_equal(FramePool().copy(source), source)


def test_the_slot_is_held_until_the_writer_copies_it_then_let_go(tmp_path) -> None:
    recorder = Recorder(RecordConfig(mode="continuous", dir=tmp_path), ["a", "b"], 50.0)
    recording = recorder.robot("arm", "s1")
    for seq in range(5):
        slot = Slot(seq)
        held = weakref.ref(slot)
        observe(recording, seq, slot)
        del slot
        gc.collect()
        assert held() is not None  # queued: the driver must not write it yet
        record = recorder.queue.take()
        assert record is not None
        recorder.write(record)
        del record
        gc.collect()
        assert held() is None  # copied: the driver's again
        assert recorder.frame_pool.free_count() == 1  # written, back, taken by the next
    recorder.close_file()
    assert written_frames(recorder.files[0]) == [0, 1, 2, 3, 4]


def test_frames_the_driver_wrote_over_are_left_out_and_counted(tmp_path) -> None:
    recorder = Recorder(RecordConfig(mode="continuous", dir=tmp_path), ["a", "b"], 50.0)
    recording = recorder.robot("arm", "s1")
    observe(recording, 1, Slot(1, intact=False))
    observe(recording, 2, Slot(2))
    while (record := recorder.queue.take()) is not None:
        recorder.write(record)
    recorder.close_file()
    assert written_frames(recorder.files[0]) == [2]
    assert recorder.torn_frames == 1 and recorder.status()["torn_frames"] == 1
    observations = [
        m for m in read_recording(recorder.files[0]).messages if m.name == "observation"
    ]
    assert [m.data["cameras"] for m in observations] == [[], ["front"]]


def test_frames_on_the_socket_are_never_pooled(tmp_path) -> None:
    recorder = Recorder(RecordConfig(mode="continuous", dir=tmp_path), ["a", "b"], 50.0)
    own = {"front": np.full(SHAPE, 7, np.uint8)}  # the message's own frames: kept, not copied
    observe(recorder.robot("arm", "s1"), 1, own)
    record = recorder.queue.take()
    assert record is not None
    recorder.write(record)
    assert record.fields["images"]["front"] is own["front"]
    assert recorder.frame_pool.free_count() == 0


def test_the_ring_gives_back_only_what_left_it(tmp_path) -> None:
    config = RecordConfig(mode="ring", dir=tmp_path, ring_seconds=0.25)
    recorder = Recorder(config, ["a", "b"], 50.0)
    recording = recorder.robot("arm", "s1")
    for seq in range(12):  # every 0.1 s: the ring keeps the last 3
        observe(recording, seq, Slot(seq))
        record = recorder.queue.take()
        assert record is not None
        recorder.write(record)
    recording.mark("look", 1_100_000_000)
    mark = recorder.queue.take()
    assert mark is not None
    recorder.write(mark)
    (incident,) = recorder.files
    assert written_frames(incident) == [9, 10, 11]  # the buffers reused by 3..11 left it first


def test_a_dropped_observation_lets_its_slot_go() -> None:
    queue = RecordQueue(1)
    recording = RobotRecording(queue, "arm", "s1")
    observe(recording, 1, Slot(1))
    slot = Slot(2)
    held = weakref.ref(slot)
    observe(recording, 2, slot)  # the queue is full: dropped
    del slot
    gc.collect()
    assert queue.dropped["observation"] == 1 and held() is None


def test_a_sessions_last_frames_are_recorded_after_its_ring_closed(tmp_path) -> None:
    """The session ends (its ring closed on the loop thread) while its last observation waits
    for the writer: the frames are still what the driver wrote, and they are recorded."""
    from controller.wire.slot_ring import SlotFrames, SlotRing

    ring = SlotRing.create([("front", SHAPE, np.dtype(np.uint8))], 2)
    generation = ring.write(0, {"front": np.full(SHAPE, 5, np.uint8)})
    recorder = Recorder(RecordConfig(mode="continuous", dir=tmp_path), ["a", "b"], 50.0)
    observe(recorder.robot("arm", "s1"), 1, SlotFrames(ring, 0, generation, ["front"]))
    ring.close()
    record = recorder.queue.take()
    assert record is not None
    recorder.write(record)
    recorder.close_file()
    assert recorder.torn_frames == 0 and written_frames(recorder.files[0]) == [5]


def test_the_writer_lets_every_queued_slot_go_before_encoding_any(tmp_path) -> None:
    """Frames waiting for the writer hold their slots (a driver has four): the writer copies
    those of every queued record first, then encodes."""
    recorder = Recorder(RecordConfig(mode="continuous", dir=tmp_path), ["a", "b"], 50.0)
    recording = recorder.robot("arm", "s1")
    slots = []
    for seq in range(3):
        slot = Slot(seq)
        slots.append(weakref.ref(slot))
        observe(recording, seq, slot)
        del slot
    seen: list[list[bool]] = []
    write = recorder.write

    def write_and_look(record) -> None:  # type: ignore[no-untyped-def]
        gc.collect()
        seen.append([held() is None for held in slots])  # let go: its frames were copied
        write(record)

    recorder.write = write_and_look  # type: ignore[method-assign]
    recorder.write_queued()
    recorder.close_file()
    assert seen[0] == [True, True, True]  # all copied before the first was encoded
    assert written_frames(recorder.files[0]) == [0, 1, 2]
